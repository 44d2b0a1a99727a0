import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.HashMap;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The clients suite's JDBC client: Apache Arrow's Flight SQL JDBC driver (its shaded jar, the
 * one scripts/setup-java.sh resolves), with its defaults but plaintext.
 *
 * <p>The line protocol of bench/clients/go/main.go, its "sql" request only: {"op": "sql",
 * "addr": "host:port", "query": "SELECT * FROM t"} runs the query with Statement.executeQuery
 * and reads every value of every row (getObject), answering {"seconds", "ttfb_seconds",
 * "rows", "batches": 0}. The requests are the harness's own, flat JSON objects of strings:
 * their fields are read with a pattern, so that nothing but the driver is on the classpath.
 */
public final class JdbcBenchClient {
  private static final Pattern FIELD =
      Pattern.compile("\"(op|addr|query)\"\\s*:\\s*\"((?:[^\"\\\\]|\\\\.)*)\"");

  private final Map<String, Connection> connections = new HashMap<>();

  private static String unescape(String text) {
    return text.replace("\\\"", "\"").replace("\\\\", "\\");
  }

  private static String quote(String text) {
    return "\"" + text.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
  }

  private Connection connect(String addr) throws Exception {
    Connection found = connections.get(addr);
    if (found == null) {
      found = DriverManager.getConnection("jdbc:arrow-flight-sql://" + addr + "/?useEncryption=false");
      connections.put(addr, found);
    }
    return found;
  }

  String query(String addr, String query) throws Exception {
    long started = System.nanoTime();
    long rows = 0;
    double ttfb = 0;
    long checksum = 0;
    try (Statement statement = connect(addr).createStatement();
        ResultSet results = statement.executeQuery(query)) {
      int columns = results.getMetaData().getColumnCount();
      // Bounded by the result: next() is false after its last row.
      while (results.next()) {
        if (rows == 0) {
          ttfb = (System.nanoTime() - started) / 1e9;
        }
        rows++;
        for (int c = 1; c <= columns; c++) {
          Object value = results.getObject(c);
          checksum += value == null ? 0 : 1;
        }
      }
    }
    double seconds = (System.nanoTime() - started) / 1e9;
    return String.format(
        "{\"seconds\": %s, \"ttfb_seconds\": %s, \"rows\": %d, \"batches\": 0, \"values\": %d}",
        seconds, ttfb, rows, checksum);
  }

  public static void main(String[] args) throws Exception {
    JdbcBenchClient bench = new JdbcBenchClient();
    PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    out.println("{\"ready\": true}");
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    // Bounded by stdin: the harness closes it (or sends quit) when done.
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      Map<String, String> request = new HashMap<>();
      Matcher m = FIELD.matcher(line);
      while (m.find()) {
        request.put(m.group(1), unescape(m.group(2)));
      }
      String op = request.getOrDefault("op", "");
      if (op.equals("quit")) {
        break;
      }
      String answer;
      try {
        if (!op.equals("sql")) {
          throw new IllegalArgumentException("the JDBC client answers sql requests only, not " + op);
        }
        answer = bench.query(request.getOrDefault("addr", ""), request.getOrDefault("query", ""));
      } catch (Exception e) {
        answer = "{\"error\": " + quote(e.getClass().getSimpleName() + ": " + e.getMessage()) + "}";
      }
      out.println(answer);
    }
    for (Connection connection : bench.connections.values()) {
      connection.close();
    }
  }
}

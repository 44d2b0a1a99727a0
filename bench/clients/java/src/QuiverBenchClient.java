import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.arrow.flight.AsyncPutListener;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.FlightEndpoint;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.flight.Location;
import org.apache.arrow.flight.sql.FlightSqlClient;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorLoader;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.VectorUnloader;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.FieldType;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * The clients suite's Java Flight client (bench/suites/clients.py): Apache Arrow Java's
 * flight-core FlightClient and flight-sql FlightSqlClient, over grpc-netty with its defaults
 * (no frame, window or message size is set: Netty's HTTP/2 codec advertises the default
 * 16 KiB max frame size, which is what the suite measures servers against).
 *
 * <p>The same line protocol as the Go client (bench/clients/go/main.go): one JSON request per
 * line on stdin, one JSON answer per line on stdout; a request names its server by "addr"
 * (host:port), to which a client is made on first use and kept.
 */
public final class QuiverBenchClient {
  /** Every string of the "strings" table: row i is i in decimal, zero-padded to this width. */
  static final int STRING_WIDTH = 32;

  static final int MAX_LATENCY_CALLS = 100_000;

  private final ObjectMapper json = new ObjectMapper();
  private final BufferAllocator allocator = new RootAllocator(Long.MAX_VALUE);
  private final Map<String, Conn> clients = new HashMap<>();

  /** The clients of one server. */
  record Conn(FlightClient flight, FlightSqlClient sql) {}
  private final List<ArrowRecordBatch> batches = new ArrayList<>();
  private Schema schema;

  /** Returns the clients of addr, made on first use. */
  private Conn connect(String addr) {
    return clients.computeIfAbsent(
        addr,
        a -> {
          int colon = a.lastIndexOf(':');
          if (colon < 0) {
            throw new IllegalArgumentException("addr must be host:port, got " + a);
          }
          String host = a.substring(0, colon);
          int port = Integer.parseInt(a.substring(colon + 1));
          Location location = Location.forGrpcInsecure(host, port);
          FlightClient flight = FlightClient.builder(allocator, location).build();
          return new Conn(flight, new FlightSqlClient(flight));
        });
  }

  private static FlightDescriptor path(String name) {
    return FlightDescriptor.path(name.split("/"));
  }

  private ObjectNode readEndpoints(
      Conn conn, FlightInfo info, long started, boolean viaSql) throws Exception {
    long rows = 0;
    long count = 0;
    long bytes = 0;
    double ttfb = 0;
    for (FlightEndpoint endpoint : info.getEndpoints()) {
      try (FlightStream stream =
          viaSql
              ? conn.sql().getStream(endpoint.getTicket())
              : conn.flight().getStream(endpoint.getTicket())) {
        VectorSchemaRoot root = stream.getRoot();
        // Bounded by the stream: next() is false at its end.
        while (stream.next()) {
          if (count == 0) {
            ttfb = (System.nanoTime() - started) / 1e9;
          }
          count++;
          rows += root.getRowCount();
          for (FieldVector vector : root.getFieldVectors()) {
            bytes += vector.getBufferSize();
          }
        }
      }
    }
    ObjectNode out = json.createObjectNode();
    out.put("seconds", (System.nanoTime() - started) / 1e9);
    out.put("ttfb_seconds", ttfb);
    out.put("rows", rows);
    out.put("batches", count);
    out.put("bytes", bytes);
    out.put("endpoints", info.getEndpoints().size());
    return out;
  }

  ObjectNode get(Conn conn, String name) throws Exception {
    long started = System.nanoTime();
    return readEndpoints(conn, conn.flight().getInfo(path(name)), started, false);
  }

  ObjectNode query(Conn conn, String text) throws Exception {
    long started = System.nanoTime();
    return readEndpoints(conn, conn.sql().execute(text), started, true);
  }

  private void clearBatches() {
    for (ArrowRecordBatch batch : batches) {
      batch.close();
    }
    batches.clear();
    schema = null;
  }

  /** Makes the "ints" (a-d, 4*i+k) or "strings" (s, n) table in batches of batchRows rows. */
  ObjectNode prepare(String kind, long rows, int batchRows) {
    clearBatches();
    FieldType int64 = FieldType.notNullable(new ArrowType.Int(64, true));
    List<Field> fields = new ArrayList<>();
    if (kind.equals("ints")) {
      for (String name : new String[] {"a", "b", "c", "d"}) {
        fields.add(new Field(name, int64, null));
      }
    } else if (kind.equals("strings")) {
      fields.add(new Field("s", FieldType.notNullable(ArrowType.Utf8.INSTANCE), null));
      fields.add(new Field("n", int64, null));
    } else {
      throw new IllegalArgumentException("unknown table kind " + kind);
    }
    if (batchRows <= 0 || rows < 0) {
      throw new IllegalArgumentException("bad shape");
    }
    schema = new Schema(fields);
    byte[] digits = new byte[STRING_WIDTH];
    try (VectorSchemaRoot root = VectorSchemaRoot.create(schema, allocator)) {
      for (long start = 0; start < rows; start += batchRows) {
        int n = (int) Math.min(batchRows, rows - start);
        root.allocateNew();
        if (kind.equals("ints")) {
          for (int k = 0; k < 4; k++) {
            BigIntVector col = (BigIntVector) root.getVector(k);
            col.allocateNew(n);
            for (int i = 0; i < n; i++) {
              col.set(i, 4 * (start + i) + k);
            }
          }
        } else {
          VarCharVector s = (VarCharVector) root.getVector(0);
          s.allocateNew((long) n * STRING_WIDTH, n);
          BigIntVector num = (BigIntVector) root.getVector(1);
          num.allocateNew(n);
          for (int i = 0; i < n; i++) {
            long v = start + i;
            for (int d = STRING_WIDTH - 1; d >= 0; d--) {
              digits[d] = (byte) ('0' + v % 10);
              v /= 10;
            }
            s.set(i, digits);
            num.set(i, start + i);
          }
        }
        root.setRowCount(n);
        batches.add(new VectorUnloader(root).getRecordBatch());
      }
    }
    ObjectNode out = json.createObjectNode();
    out.put("batches", batches.size());
    return out;
  }

  ObjectNode put(FlightClient client, String name) throws Exception {
    if (schema == null) {
      throw new IllegalStateException("put before prepare");
    }
    long started = System.nanoTime();
    long rows = 0;
    try (VectorSchemaRoot root = VectorSchemaRoot.create(schema, allocator)) {
      VectorLoader loader = new VectorLoader(root);
      FlightClient.ClientStreamListener listener =
          client.startPut(path(name), root, new AsyncPutListener());
      boolean first = true;
      for (ArrowRecordBatch batch : batches) {
        loader.load(batch);
        rows += root.getRowCount();
        if (first) {
          // The put's options, as quiver and the Arrow C++ peer read them: JSON in the
          // app_metadata of the first message that carries any.
          byte[] options = "{\"mode\": \"replace\"}".getBytes(StandardCharsets.UTF_8);
          ArrowBuf meta = allocator.buffer(options.length);
          meta.writeBytes(options);
          listener.putNext(meta);
          first = false;
        } else {
          listener.putNext();
        }
      }
      listener.completed();
      listener.getResult();
    }
    ObjectNode out = json.createObjectNode();
    out.put("seconds", (System.nanoTime() - started) / 1e9);
    out.put("rows", rows);
    out.put("batches", batches.size());
    return out;
  }

  ObjectNode latency(Conn conn, String name, int calls) throws Exception {
    if (calls <= 0 || calls > MAX_LATENCY_CALLS) {
      throw new IllegalArgumentException("calls must be 1.." + MAX_LATENCY_CALLS);
    }
    ObjectNode out = json.createObjectNode();
    var latencies = out.putArray("latencies");
    for (int i = 0; i < calls; i++) {
      latencies.add(get(conn, name).get("seconds").asDouble());
    }
    return out;
  }

  JsonNode handle(JsonNode request) throws Exception {
    String op = request.path("op").asText();
    if (op.equals("prepare")) {
      return prepare(
          request.path("kind").asText(),
          request.path("rows").asLong(),
          request.path("batch_rows").asInt());
    }
    Conn conn = connect(request.path("addr").asText());
    switch (op) {
      case "get":
        return get(conn, request.path("path").asText());
      case "sql":
        return query(conn, request.path("query").asText());
      case "put":
        return put(conn.flight(), request.path("path").asText());
      case "latency":
        return latency(conn, request.path("path").asText(), request.path("calls").asInt());
      default:
        throw new IllegalArgumentException("unknown op " + op);
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 0) {
      System.err.println("usage: QuiverBenchClient < requests");
      System.exit(2);
    }
    QuiverBenchClient bench = new QuiverBenchClient();
    PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    out.println("{\"ready\": true}");
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    // Bounded by stdin: the harness closes it (or sends quit) when done.
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      JsonNode answer;
      try {
        JsonNode request = bench.json.readTree(line);
        if (request.path("op").asText().equals("quit")) {
          break;
        }
        answer = bench.handle(request);
      } catch (Exception e) {
        ObjectNode error = bench.json.createObjectNode();
        error.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
        answer = error;
      }
      out.println(bench.json.writeValueAsString(answer));
    }
    bench.clearBatches();
    for (Conn conn : bench.clients.values()) {
      conn.sql().close();
    }
    bench.allocator.close();
  }
}

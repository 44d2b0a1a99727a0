package quiver.jdbc;

import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.ParameterMetaData;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Timestamp;
import java.sql.Types;
import java.time.LocalDateTime;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.StringJoiner;

/**
 * Checks Apache Arrow's Flight SQL JDBC driver against a running quiver server, the way a JDBC
 * client such as DBeaver uses it: connect, browse the metadata, run queries, prepared statements
 * with parameters, DDL through executeUpdate, and errors.
 *
 * <p>Usage: {@code FlightSqlJdbcCheck JDBC_URL TABLE ROWS [--catalog=quiver] [--schema=public]}
 *
 * <p>The caller has stored TABLE (through Flight DoPut) with ROWS rows, for i = 1..ROWS in order:
 *
 * <ul>
 *   <li>{@code id} int64 NOT NULL: i
 *   <li>{@code name} string: null when i % 10 == 0, else "name-" + i
 *   <li>{@code fare} float64: i * 0.25 (exact in binary, so sums are exact too)
 *   <li>{@code ts} timestamp[us] without time zone: 2024-01-15T00:00 plus i * 1.000001 s
 * </ul>
 *
 * <p>Every check prints one PASS or FAIL line; the program goes on after a failed check where the
 * next ones do not depend on it, and exits 1 if any check failed (2 on bad arguments). It creates
 * and drops TABLE + "_copy", and a view named TABLE with each '_' made 'x' (TABLE + "_v" if it
 * has none).
 */
public final class FlightSqlJdbcCheck {
  static final LocalDateTime TS_BASE = LocalDateTime.of(2024, 1, 15, 0, 0);

  static Long idOf(long i) {
    return i;
  }

  static String nameOf(long i) {
    return i % 10 == 0 ? null : "name-" + i;
  }

  static double fareOf(long i) {
    return i * 0.25;
  }

  static LocalDateTime tsOf(long i) {
    return TS_BASE.plusNanos(i * 1_000_001_000L);
  }

  /** The stored table's columns: name, java.sql.Types code, nullable. */
  static final String[] COLUMN_NAMES = {"id", "name", "fare", "ts"};

  static final int[] COLUMN_TYPES = {Types.BIGINT, Types.VARCHAR, Types.DOUBLE, Types.TIMESTAMP};
  static final boolean[] COLUMN_NULLABLE = {false, true, true, true};

  /** A check that did not hold (as opposed to an unexpected exception). */
  static final class CheckFailed extends RuntimeException {
    private static final long serialVersionUID = 1L;

    CheckFailed(String message) {
      super(message);
    }
  }

  interface Check {
    /** Runs the check; returns a short description of what was seen. */
    String run() throws Exception;
  }

  private final String url;
  private final String table;
  private final long rows;
  private final String catalog;
  private final String schema;
  private final String copy;
  /** A view over TABLE, named as TABLE with each '_' made 'x' (see tablePatterns). */
  private final String view;
  private int passed;
  private final List<String> failed = new ArrayList<>();
  private final List<String> notes = new ArrayList<>();
  private Connection conn;
  private boolean unreachable;

  FlightSqlJdbcCheck(String url, String table, long rows, String catalog, String schema) {
    this.url = url;
    this.table = table;
    this.rows = rows;
    this.catalog = catalog;
    this.schema = schema;
    this.copy = table + "_copy";
    this.view = table.contains("_") ? table.replace('_', 'x') : table + "_v";
  }

  public static void main(String[] args) {
    List<String> positional = new ArrayList<>();
    String catalog = "quiver";
    String schema = "public";
    for (String arg : args) {
      if (arg.startsWith("--catalog=")) {
        catalog = arg.substring("--catalog=".length());
      } else if (arg.startsWith("--schema=")) {
        schema = arg.substring("--schema=".length());
      } else {
        positional.add(arg);
      }
    }
    long rows = -1;
    if (positional.size() == 3) {
      try {
        rows = Long.parseLong(positional.get(2));
      } catch (NumberFormatException e) {
        rows = -1;
      }
    }
    if (positional.size() != 3 || rows < 10) {
      System.err.println(
          "usage: FlightSqlJdbcCheck JDBC_URL TABLE ROWS [--catalog=NAME] [--schema=NAME]\n"
              + "  e.g. jdbc:arrow-flight-sql://127.0.0.1:PORT/?useEncryption=false trips 1000\n"
              + "  (ROWS >= 10; see the class comment for the table's contents)");
      System.exit(2);
    }
    FlightSqlJdbcCheck check =
        new FlightSqlJdbcCheck(positional.get(0), positional.get(1), rows, catalog, schema);
    int code = check.runAll();
    System.exit(code);
  }

  int runAll() {
    System.out.printf(
        "FlightSqlJdbcCheck: url=%s table=%s rows=%d catalog=%s schema=%s java=%s%n",
        url, table, rows, catalog, schema, System.getProperty("java.version"));
    if (!check("connect", this::connect)) {
      return finish();
    }
    check("server info (GetSqlInfo)", this::serverInfo);
    if (unreachable) {
      return finish();
    }
    check("getCatalogs", this::catalogs);
    check("getSchemas", this::schemas);
    check("getTableTypes", this::tableTypes);
    check("getTables", this::tables);
    check("getTables with a table type filter", this::tablesByType);
    check("getColumns", this::columns);
    check("DatabaseMetaData answers every scalar call (GetSqlInfo)", this::scalarMetadata);
    check("CREATE VIEW, listed by getTables and getColumns", this::createView);
    check("getTables with patterns, escapes and exact case", this::tablePatterns);
    check("getColumns with a column pattern", this::columnPatterns);
    check("getPrimaryKeys/getImportedKeys/getExportedKeys/getCrossReference", this::keys);
    check("getTypeInfo", this::typeInfo);
    check("SHOW TABLES", this::showTables);
    check("DESCRIBE and SHOW COLUMNS", this::describe);
    check("information_schema.tables and .columns", this::informationSchema);
    check("DROP VIEW", this::dropView);
    check("Statement count(*)", this::count);
    check("Statement reads every column of every row", this::readAll);
    check("Statement aggregates", this::aggregates);
    check("identifiers ignore case unless quoted", this::identifiers);
    check("a decimal quotient is a double", this::decimalQuotient);
    check("Statement.execute", this::genericExecute);
    check("PreparedStatement with a parameter", this::prepared);
    check("executeUpdate CREATE TABLE AS, count, DROP TABLE", this::createAsAndDrop);
    check("SQL error on a missing table (Statement)", this::errorStatement);
    check("SQL error on a missing table (PreparedStatement)", this::errorPrepared);
    check("connection usable after errors", this::afterErrors);
    check("close", this::close);
    return finish();
  }

  private int finish() {
    for (String note : notes) {
      System.out.println("NOTE " + note);
    }
    System.out.printf("FlightSqlJdbcCheck: %d checks ok, %d failed%n", passed, failed.size());
    for (String name : failed) {
      System.out.println("  failed: " + name);
    }
    return failed.isEmpty() ? 0 : 1;
  }

  private boolean check(String name, Check body) {
    try {
      String seen = body.run();
      passed++;
      System.out.println("PASS " + name + (seen == null || seen.isEmpty() ? "" : ": " + seen));
      return true;
    } catch (Throwable t) {
      failed.add(name);
      System.out.println("FAIL " + name + ": " + describe(t));
      if (!(t instanceof CheckFailed)) {
        printTrace(t);
      }
      for (Throwable c = t; c != null && c.getCause() != c; c = c.getCause()) {
        if (c instanceof java.net.ConnectException) {
          unreachable = true;
          System.out.println("     the server is unreachable: stopping");
          break;
        }
      }
      return false;
    } finally {
      System.out.flush();
    }
  }

  /** Prints the first frames of an unexpected exception and of each of its causes. */
  static void printTrace(Throwable t) {
    for (Throwable c = t; c != null && c.getCause() != c; c = c.getCause()) {
      System.out.println("     " + (c == t ? "" : "caused by: ") + c);
      StackTraceElement[] frames = c.getStackTrace();
      for (int i = 0; i < Math.min(frames.length, 12); i++) {
        System.out.println("       at " + frames[i]);
      }
      if (frames.length > 12) {
        System.out.println("       ... " + (frames.length - 12) + " more");
      }
    }
  }

  /** The exception's class and message, and those of its causes. */
  static String describe(Throwable t) {
    StringJoiner chain = new StringJoiner("\n    caused by: ");
    for (Throwable c = t; c != null; c = c.getCause()) {
      chain.add(
          c instanceof CheckFailed ? c.getMessage() : c.getClass().getName() + ": " + c.getMessage());
      if (c.getCause() == c) {
        break;
      }
    }
    return chain.toString();
  }

  /** Every message of an exception and its causes (and SQLException's chained exceptions). */
  static String messages(Throwable t) {
    StringBuilder all = new StringBuilder();
    for (Throwable c = t; c != null && c.getCause() != c; c = c.getCause()) {
      all.append(c.getMessage()).append('\n');
      if (c instanceof SQLException) {
        for (SQLException n = ((SQLException) c).getNextException();
            n != null;
            n = n.getNextException()) {
          all.append(n.getMessage()).append('\n');
        }
      }
    }
    return all.toString();
  }

  static void expect(boolean condition, String format, Object... args) {
    if (!condition) {
      throw new CheckFailed(String.format(format, args));
    }
  }

  static void expectEqual(String what, Object expected, Object actual) {
    if (!Objects.equals(expected, actual)) {
      throw new CheckFailed(
          String.format("%s: expected %s, got %s", what, show(expected), show(actual)));
    }
  }

  static String show(Object value) {
    if (value == null) {
      return "null";
    }
    if (value instanceof String) {
      return "\"" + value + "\"";
    }
    return value + " (" + value.getClass().getSimpleName() + ")";
  }

  static String typeName(int sqlType) {
    for (java.lang.reflect.Field f : Types.class.getFields()) {
      try {
        if (f.getType() == int.class && f.getInt(null) == sqlType) {
          return f.getName();
        }
      } catch (IllegalAccessException e) {
        // every field of java.sql.Types is public
      }
    }
    return String.valueOf(sqlType);
  }

  /** The column labels of a result set, in order. */
  static List<String> labels(ResultSet rs) throws SQLException {
    ResultSetMetaData md = rs.getMetaData();
    List<String> labels = new ArrayList<>();
    for (int i = 1; i <= md.getColumnCount(); i++) {
      labels.add(md.getColumnLabel(i));
    }
    return labels;
  }

  /**
   * Reads a metadata result set: checks it has the required columns (exact JDBC names), and
   * returns every row as label -> getObject(label) of those columns.
   *
   * <p>An empty one may have no columns at all: the driver (18.3) builds a metadata result set's
   * columns from its first non-empty batch, and skips empty batches, so whatever the server sends
   * for no rows, the result set has no columns.
   */
  static List<Map<String, Object>> metadataRows(ResultSet rs, String... required)
      throws SQLException {
    try (rs) {
      List<String> labels = labels(rs);
      if (labels.isEmpty()) {
        expect(!rs.next(), "a metadata result set with no columns has rows");
        return new ArrayList<>();
      }
      for (String name : required) {
        expect(labels.contains(name), "no column %s in the result; its columns are %s", name, labels);
      }
      List<Map<String, Object>> out = new ArrayList<>();
      while (rs.next()) {
        Map<String, Object> row = new LinkedHashMap<>();
        for (String name : required) {
          row.put(name, rs.getObject(name));
        }
        out.add(row);
      }
      return out;
    }
  }

  static String str(Object value) {
    return value == null ? null : value.toString();
  }

  private String connect() throws SQLException {
    conn = DriverManager.getConnection(url);
    DatabaseMetaData md = conn.getMetaData();
    expect(!conn.isClosed(), "the new connection says it is closed");
    return md.getDriverName() + " " + md.getDriverVersion();
  }

  private String serverInfo() throws SQLException {
    DatabaseMetaData md = conn.getMetaData();
    String product = md.getDatabaseProductName();
    String version = md.getDatabaseProductVersion();
    String quote = md.getIdentifierQuoteString();
    expect(
        product != null && !product.isEmpty(),
        "getDatabaseProductName() is %s (FLIGHT_SQL_SERVER_NAME in GetSqlInfo)",
        show(product));
    return String.format(
        "product=%s version=%s identifierQuote=%s", show(product), show(version), show(quote));
  }

  private String catalogs() throws SQLException {
    List<Map<String, Object>> rows = metadataRows(conn.getMetaData().getCatalogs(), "TABLE_CAT");
    expect(!rows.isEmpty(), "getCatalogs() returned no rows");
    boolean found = rows.stream().anyMatch(r -> catalog.equals(str(r.get("TABLE_CAT"))));
    expect(found, "catalog %s not among %s", catalog, rows);
    return rows.toString();
  }

  private String schemas() throws SQLException {
    DatabaseMetaData md = conn.getMetaData();
    List<Map<String, Object>> all = metadataRows(md.getSchemas(), "TABLE_SCHEM", "TABLE_CATALOG");
    expect(!all.isEmpty(), "getSchemas() returned no rows");
    expect(
        all.stream()
            .anyMatch(
                r ->
                    schema.equals(str(r.get("TABLE_SCHEM")))
                        && catalog.equals(str(r.get("TABLE_CATALOG")))),
        "getSchemas() has no row TABLE_SCHEM=%s TABLE_CATALOG=%s: %s",
        schema,
        catalog,
        all);
    List<Map<String, Object>> filtered =
        metadataRows(md.getSchemas(catalog, "%"), "TABLE_SCHEM", "TABLE_CATALOG");
    expect(
        filtered.stream().anyMatch(r -> schema.equals(str(r.get("TABLE_SCHEM")))),
        "getSchemas(%s, \"%%\") has no row TABLE_SCHEM=%s: %s",
        show(catalog),
        schema,
        filtered);
    return "getSchemas()=" + all + "; getSchemas(" + show(catalog) + ", \"%\")=" + filtered;
  }

  private String tableTypes() throws SQLException {
    List<Map<String, Object>> rows =
        metadataRows(conn.getMetaData().getTableTypes(), "TABLE_TYPE");
    expect(!rows.isEmpty(), "getTableTypes() returned no rows");
    expect(
        rows.stream().anyMatch(r -> "TABLE".equals(str(r.get("TABLE_TYPE")))),
        "no TABLE_TYPE \"TABLE\" in %s",
        rows);
    return rows.toString();
  }

  static final String[] TABLES_COLUMNS = {
    "TABLE_CAT", "TABLE_SCHEM", "TABLE_NAME", "TABLE_TYPE", "REMARKS"
  };

  /** The rows of getTables(...) whose TABLE_NAME is name. */
  private List<Map<String, Object>> tableRows(
      String cat, String schemaPattern, String namePattern, String[] types, String name)
      throws SQLException {
    List<Map<String, Object>> rows =
        metadataRows(
            conn.getMetaData().getTables(cat, schemaPattern, namePattern, types), TABLES_COLUMNS);
    List<Map<String, Object>> matching = new ArrayList<>();
    for (Map<String, Object> row : rows) {
      if (name.equals(str(row.get("TABLE_NAME")))) {
        matching.add(row);
      }
    }
    return matching;
  }

  private void expectTableRow(String call, List<Map<String, Object>> rows, String name) {
    expect(rows.size() == 1, "%s: expected one row for table %s, got %s", call, name, rows);
    Map<String, Object> row = rows.get(0);
    expectEqual(call + " TABLE_CAT", catalog, str(row.get("TABLE_CAT")));
    expectEqual(call + " TABLE_SCHEM", schema, str(row.get("TABLE_SCHEM")));
    expectEqual(call + " TABLE_TYPE", "TABLE", str(row.get("TABLE_TYPE")));
  }

  private String tables() throws SQLException {
    String call = "getTables(null, null, \"%\", null)";
    List<Map<String, Object>> rows = tableRows(null, null, "%", null, table);
    expectTableRow(call, rows, table);
    // DBeaver reads REMARKS with getString: it must not throw (null is fine).
    try (ResultSet rs = conn.getMetaData().getTables(null, null, "%", null)) {
      while (rs.next()) {
        rs.getString("REMARKS");
      }
    }
    return rows.toString();
  }

  private String tablesByType() throws SQLException {
    String call = "getTables(catalog, schema, table, {\"TABLE\"})";
    List<Map<String, Object>> rows =
        tableRows(catalog, schema, table, new String[] {"TABLE"}, table);
    expectTableRow(call, rows, table);
    List<Map<String, Object>> views = tableRows(null, null, "%", new String[] {"VIEW"}, table);
    expect(
        views.isEmpty(), "getTables(null, null, \"%%\", {\"VIEW\"}) lists the table: %s", views);
    return rows.toString();
  }

  private String columns() throws SQLException {
    ResultSet rs = conn.getMetaData().getColumns(null, null, table, "%");
    List<Map<String, Object>> all =
        metadataRows(
            rs,
            "TABLE_CAT",
            "TABLE_SCHEM",
            "TABLE_NAME",
            "COLUMN_NAME",
            "DATA_TYPE",
            "TYPE_NAME",
            "COLUMN_SIZE",
            "NULLABLE",
            "ORDINAL_POSITION",
            "IS_NULLABLE");
    List<Map<String, Object>> rows = new ArrayList<>();
    for (Map<String, Object> row : all) {
      if (table.equals(str(row.get("TABLE_NAME")))) {
        rows.add(row);
      }
    }
    List<String> names = new ArrayList<>();
    for (Map<String, Object> row : rows) {
      names.add(str(row.get("COLUMN_NAME")));
    }
    expectEqual("COLUMN_NAME in order", Arrays.asList(COLUMN_NAMES), names);
    StringJoiner seen = new StringJoiner("; ");
    for (int i = 0; i < rows.size(); i++) {
      Map<String, Object> row = rows.get(i);
      String col = COLUMN_NAMES[i];
      expectEqual(col + " TABLE_CAT", catalog, str(row.get("TABLE_CAT")));
      expectEqual(col + " TABLE_SCHEM", schema, str(row.get("TABLE_SCHEM")));
      Object dataType = row.get("DATA_TYPE");
      expect(
          dataType instanceof Number && ((Number) dataType).intValue() == COLUMN_TYPES[i],
          "%s DATA_TYPE: expected %s (%d), got %s",
          col,
          typeName(COLUMN_TYPES[i]),
          COLUMN_TYPES[i],
          dataType instanceof Number
              ? typeName(((Number) dataType).intValue()) + " (" + dataType + ")"
              : show(dataType));
      String typeNameValue = str(row.get("TYPE_NAME"));
      expect(
          typeNameValue != null && !typeNameValue.isEmpty(),
          "%s TYPE_NAME is %s",
          col,
          show(typeNameValue));
      Object size = row.get("COLUMN_SIZE");
      // JDBC: COLUMN_SIZE is null where it does not apply; the driver leaves it null for DOUBLE.
      if (COLUMN_TYPES[i] != Types.DOUBLE) {
        expect(
            size instanceof Number && ((Number) size).intValue() > 0,
            "%s COLUMN_SIZE: expected a positive number, got %s",
            col,
            show(size));
      }
      int nullable =
          COLUMN_NULLABLE[i] ? DatabaseMetaData.columnNullable : DatabaseMetaData.columnNoNulls;
      Object nullableValue = row.get("NULLABLE");
      expect(
          nullableValue instanceof Number && ((Number) nullableValue).intValue() == nullable,
          "%s NULLABLE: expected %d, got %s",
          col,
          nullable,
          show(nullableValue));
      expectEqual(col + " IS_NULLABLE", COLUMN_NULLABLE[i] ? "YES" : "NO", str(row.get("IS_NULLABLE")));
      Object position = row.get("ORDINAL_POSITION");
      expect(
          position instanceof Number && ((Number) position).intValue() == i + 1,
          "%s ORDINAL_POSITION: expected %d, got %s",
          col,
          i + 1,
          show(position));
      seen.add(
          String.format(
              "%s %s(%s) size=%s nullable=%s", col, typeNameValue, dataType, size, nullableValue));
    }
    return seen.toString();
  }

  /** Every row of a query, as label -> getObject(label) of the given columns. */
  private List<Map<String, Object>> queryRows(String sql, String... columns) throws SQLException {
    try (Statement st = conn.createStatement()) {
      return metadataRows(st.executeQuery(sql), columns);
    }
  }

  static List<String> column(List<Map<String, Object>> rows, String name) {
    List<String> out = new ArrayList<>();
    for (Map<String, Object> row : rows) {
      out.add(str(row.get(name)));
    }
    return out;
  }

  /**
   * Every no-argument DatabaseMetaData method answers: the driver reads most of them from
   * GetSqlInfo and throws a NullPointerException for an entry the server leaves out. DBeaver
   * calls many of them when it connects.
   */
  private String scalarMetadata() throws Exception {
    DatabaseMetaData md = conn.getMetaData();
    List<String> threw = new ArrayList<>();
    int answered = 0;
    for (java.lang.reflect.Method m : DatabaseMetaData.class.getMethods()) {
      if (m.getParameterCount() != 0
          || m.getReturnType() == ResultSet.class
          || m.getReturnType() == Connection.class) {
        continue;
      }
      try {
        m.invoke(md);
        answered++;
      } catch (java.lang.reflect.InvocationTargetException e) {
        threw.add(m.getName() + ": " + e.getCause());
      }
    }
    expect(threw.isEmpty(), "%d of them threw: %s", threw.size(), threw);
    expect(md.supportsGroupBy(), "supportsGroupBy() is false");
    // SQL_OUTER_JOINS_SUPPORT_LEVEL is FULL (2, an enum value, as Flight SQL defines it); the
    // driver (18.3) reads it as a bitmask, so supportsFullOuterJoins() is false and
    // supportsLimitedOuterJoins() true. supportsOuterJoins() reads it as a number.
    expect(md.supportsOuterJoins(), "supportsOuterJoins() is false");
    expect(md.supportsUnionAll(), "supportsUnionAll() is false");
    expect(md.nullPlusNonNullIsNull(), "nullPlusNonNullIsNull() is false");
    expect(md.supportsLikeEscapeClause(), "supportsLikeEscapeClause() is false");
    expect(
        md.supportsConvert(Types.BIGINT, Types.VARCHAR),
        "supportsConvert(BIGINT, VARCHAR) is false");
    expect(
        !md.supportsConvert(Types.DATE, Types.BIGINT), "supportsConvert(DATE, BIGINT) is true");
    expect(!md.supportsTransactions(), "supportsTransactions() is true");
    expectEqual(
        "getDefaultTransactionIsolation()",
        Connection.TRANSACTION_NONE,
        md.getDefaultTransactionIsolation());
    expectEqual("getSearchStringEscape()", "\\", md.getSearchStringEscape());
    expectEqual("getMaxTableNameLength()", 1024, md.getMaxTableNameLength());
    return answered + " methods answered";
  }

  private String createView() throws SQLException {
    String sql = "CREATE VIEW " + view + " AS SELECT id, fare FROM " + table + " WHERE id <= 10";
    try (Statement st = conn.createStatement()) {
      expectEqual("executeUpdate(" + sql + ")", 0, st.executeUpdate(sql));
    }
    List<Map<String, Object>> rows =
        tableRows(null, null, view, new String[] {"VIEW"}, view);
    expect(rows.size() == 1, "getTables(..., {\"VIEW\"}) has no row for %s: %s", view, rows);
    expectEqual("TABLE_TYPE of the view", "VIEW", str(rows.get(0).get("TABLE_TYPE")));
    List<Map<String, Object>> columns =
        metadataRows(
            conn.getMetaData().getColumns(null, null, view, "%"),
            "COLUMN_NAME",
            "DATA_TYPE",
            "TYPE_NAME",
            "IS_NULLABLE");
    expectEqual(
        "the view's COLUMN_NAMEs",
        Arrays.asList("id", "fare"),
        column(columns, "COLUMN_NAME"));
    expectEqual(
        "the view's TYPE_NAMEs",
        Arrays.asList("BIGINT", "DOUBLE"),
        column(columns, "TYPE_NAME"));
    expectEqual(
        "the view's IS_NULLABLE",
        Arrays.asList("NO", "YES"),
        column(columns, "IS_NULLABLE"));
    return sql + "; getColumns: " + columns;
  }

  /** The TABLE_NAMEs getTables(cat, schemaPattern, namePattern, null) lists, in order. */
  private List<String> tableNames(String cat, String schemaPattern, String namePattern)
      throws SQLException {
    return column(
        metadataRows(
            conn.getMetaData().getTables(cat, schemaPattern, namePattern, null), TABLES_COLUMNS),
        "TABLE_NAME");
  }

  /**
   * getTables' patterns: '%' and '_' are wildcards, '\\' (getSearchStringEscape) escapes them,
   * and names are case-sensitive. The view's name is the table's with '_' made 'x', so the
   * table's name as a pattern matches both and escaped matches the table alone.
   */
  private String tablePatterns() throws SQLException {
    StringJoiner seen = new StringJoiner("; ");
    String escaped = table.replace("_", "\\_");
    // The table's name but its last character, escaped: with '_' after it, the table alone.
    String prefix = table.substring(0, table.length() - 1).replace("_", "\\_");
    List<String> both = new ArrayList<>(Arrays.asList(table, view));
    both.sort(null);
    String[][] cases = {
      {null, null, table},
      {null, null, escaped},
      {catalog, schema.substring(0, 1) + "%", prefix + "_"},
      {null, null, table.toUpperCase(java.util.Locale.ROOT)},
      {"no_such_catalog", null, "%"},
      {null, "no_such_schema", "%"},
    };
    List<List<String>> expected =
        Arrays.asList(
            table.contains("_") ? both : List.of(table),
            List.of(table),
            List.of(table),
            table.equals(table.toUpperCase(java.util.Locale.ROOT)) ? List.of(table) : List.of(),
            List.of(),
            List.of());
    for (int i = 0; i < cases.length; i++) {
      String[] c = cases[i];
      List<String> names = tableNames(c[0], c[1], c[2]);
      String call =
          String.format(
              "getTables(%s, %s, %s, null)", show(c[0]), show(c[1]), show(c[2]));
      expectEqual(call + " TABLE_NAMEs", expected.get(i), names);
      seen.add(call + " -> " + names);
    }
    return seen.toString();
  }

  private String columnPatterns() throws SQLException {
    StringJoiner seen = new StringJoiner("; ");
    // The table's name escaped (as DBeaver passes it): unescaped, '_' would match the view too.
    String escaped = table.replace("_", "\\_");
    String[][] cases = {{"f%", "fare"}, {"n_me", "name"}, {"%s", "ts"}, {"ID", null}};
    for (String[] c : cases) {
      List<Map<String, Object>> rows =
          metadataRows(
              conn.getMetaData().getColumns(null, null, escaped, c[0]),
              "TABLE_NAME",
              "COLUMN_NAME");
      String call = "getColumns(null, null, " + show(escaped) + ", " + show(c[0]) + ")";
      List<String> expected = c[1] == null ? List.of() : List.of(c[1]);
      expectEqual(call + " COLUMN_NAMEs", expected, column(rows, "COLUMN_NAME"));
      for (Map<String, Object> row : rows) {
        expectEqual(call + " TABLE_NAME", table, str(row.get("TABLE_NAME")));
      }
      List<String> names = column(rows, "COLUMN_NAME");
      seen.add(c[0] + " -> " + names);
    }
    return seen.toString();
  }

  /** quiver has no keys: each key call answers no rows (and no error). */
  private String keys() throws SQLException {
    DatabaseMetaData md = conn.getMetaData();
    StringJoiner seen = new StringJoiner("; ");
    Map<String, ResultSet> calls = new LinkedHashMap<>();
    calls.put("getPrimaryKeys", md.getPrimaryKeys(catalog, schema, table));
    calls.put("getImportedKeys", md.getImportedKeys(catalog, schema, table));
    calls.put("getExportedKeys", md.getExportedKeys(catalog, schema, table));
    calls.put(
        "getCrossReference",
        md.getCrossReference(catalog, schema, table, catalog, schema, view));
    for (Map.Entry<String, ResultSet> call : calls.entrySet()) {
      List<Map<String, Object>> rows = metadataRows(call.getValue());
      expect(rows.isEmpty(), "%s returned rows: %s", call.getKey(), rows);
      seen.add(call.getKey() + ": no rows");
    }
    return seen.toString();
  }

  /**
   * getTypeInfo: the driver (18.3) answers it itself, with JDBC's columns and no rows (it does
   * not send GetXdbcTypeInfo, which the server answers; ADBC's test reads that). Checked: it
   * answers, with the columns JDBC names.
   */
  private String typeInfo() throws SQLException {
    try (ResultSet rs = conn.getMetaData().getTypeInfo()) {
      List<String> labels = labels(rs);
      for (String name : new String[] {"TYPE_NAME", "DATA_TYPE", "PRECISION", "NULLABLE"}) {
        expect(labels.contains(name), "getTypeInfo() has no column %s: %s", name, labels);
      }
      int rows = 0;
      while (rs.next()) {
        expect(rs.getString("TYPE_NAME") != null, "a getTypeInfo() row has no TYPE_NAME");
        rows++;
      }
      return rows + " rows, columns " + labels;
    }
  }

  private String showTables() throws SQLException {
    List<Map<String, Object>> rows =
        queryRows("SHOW TABLES", "table_catalog", "table_schema", "table_name", "table_type");
    Map<String, String> types = new LinkedHashMap<>();
    for (Map<String, Object> row : rows) {
      if (schema.equals(str(row.get("table_schema")))) {
        expectEqual("table_catalog", catalog, str(row.get("table_catalog")));
        types.put(str(row.get("table_name")), str(row.get("table_type")));
      }
    }
    expectEqual("SHOW TABLES: " + table, "BASE TABLE", types.get(table));
    expectEqual("SHOW TABLES: " + view, "VIEW", types.get(view));
    expect(
        rows.stream().anyMatch(r -> "information_schema".equals(str(r.get("table_schema")))),
        "SHOW TABLES lists no information_schema tables: %s",
        rows);
    return schema + ": " + types;
  }

  private String describe() throws SQLException {
    List<Map<String, Object>> rows =
        queryRows("DESCRIBE " + table, "column_name", "data_type", "is_nullable");
    expectEqual("DESCRIBE column_name", Arrays.asList(COLUMN_NAMES), column(rows, "column_name"));
    List<String> types = column(rows, "data_type");
    expectEqual(
        "DESCRIBE data_type (Arrow's names)",
        Arrays.asList("Int64", "Utf8", "Float64"),
        types.subList(0, 3));
    expect(types.get(3).startsWith("Timestamp"), "DESCRIBE data_type of ts: %s", types.get(3));
    expectEqual(
        "DESCRIBE is_nullable",
        Arrays.asList("NO", "YES", "YES", "YES"),
        column(rows, "is_nullable"));
    List<Map<String, Object>> shown =
        queryRows(
            "SHOW COLUMNS FROM " + table, "table_name", "column_name", "data_type", "is_nullable");
    expectEqual(
        "SHOW COLUMNS column_name",
        Arrays.asList(COLUMN_NAMES),
        column(shown, "column_name"));
    expectEqual("SHOW COLUMNS data_type", types, column(shown, "data_type"));
    List<Map<String, Object>> ofView = queryRows("DESCRIBE " + view, "column_name", "data_type");
    expectEqual("DESCRIBE " + view, Arrays.asList("id", "fare"), column(ofView, "column_name"));
    return "DESCRIBE " + table + ": " + rows;
  }

  private String informationSchema() throws SQLException {
    List<Map<String, Object>> tables =
        queryRows(
            "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = '"
                + schema
                + "' ORDER BY table_name",
            "table_name",
            "table_type");
    List<String> names = column(tables, "table_name");
    expect(
        names.contains(table) && names.contains(view),
        "information_schema.tables lacks %s or %s: %s",
        table,
        view,
        tables);
    List<Map<String, Object>> columns =
        queryRows(
            "SELECT column_name, ordinal_position, is_nullable, data_type"
                + " FROM information_schema.columns WHERE table_name = '"
                + table
                + "' ORDER BY ordinal_position",
            "column_name",
            "ordinal_position",
            "is_nullable",
            "data_type");
    expectEqual(
        "columns' column_name",
        Arrays.asList(COLUMN_NAMES),
        column(columns, "column_name"));
    // DataFusion counts ordinal_position from 0 (SQL and getColumns' ORDINAL_POSITION from 1).
    expectEqual(
        "columns' ordinal_position",
        Arrays.asList("0", "1", "2", "3"),
        column(columns, "ordinal_position"));
    expectEqual(
        "columns' is_nullable",
        Arrays.asList("NO", "YES", "YES", "YES"),
        column(columns, "is_nullable"));
    return tables + "; " + columns;
  }

  private String dropView() throws SQLException {
    try (Statement st = conn.createStatement()) {
      expectEqual("executeUpdate(DROP VIEW)", 0, st.executeUpdate("DROP VIEW " + view));
    }
    expect(
        tableNames(null, null, view).isEmpty(),
        "getTables still lists %s after DROP VIEW",
        view);
    return "DROP VIEW " + view;
  }

  /** Runs a query that returns one row with one BIGINT and returns it. */
  private long singleLong(String sql) throws SQLException {
    try (Statement st = conn.createStatement();
        ResultSet rs = st.executeQuery(sql)) {
      expect(rs.next(), "%s returned no row", sql);
      long value = rs.getLong(1);
      expect(!rs.wasNull(), "%s returned NULL", sql);
      expect(!rs.next(), "%s returned more than one row", sql);
      return value;
    }
  }

  private String count() throws SQLException {
    String sql = "SELECT count(*) FROM " + table;
    long n = singleLong(sql);
    expectEqual(sql, rows, n);
    return sql + " = " + n;
  }

  private String readAll() throws SQLException {
    String sql = "SELECT id, name, fare, ts FROM " + table + " ORDER BY id";
    try (Statement st = conn.createStatement();
        ResultSet rs = st.executeQuery(sql)) {
      ResultSetMetaData md = rs.getMetaData();
      expectEqual("column count", COLUMN_NAMES.length, md.getColumnCount());
      StringJoiner types = new StringJoiner(", ");
      for (int c = 1; c <= COLUMN_NAMES.length; c++) {
        expectEqual("label of column " + c, COLUMN_NAMES[c - 1], md.getColumnLabel(c));
        int type = md.getColumnType(c);
        expect(
            type == COLUMN_TYPES[c - 1],
            "ResultSetMetaData.getColumnType(%d) (%s): expected %s, got %s",
            c,
            COLUMN_NAMES[c - 1],
            typeName(COLUMN_TYPES[c - 1]),
            typeName(type));
        types.add(md.getColumnLabel(c) + " " + typeName(type) + "/" + md.getColumnTypeName(c));
      }
      long i = 0;
      while (rs.next()) {
        i++;
        String at = "row " + i + ": ";
        expectEqual(at + "id", i, rs.getLong(1));
        expectEqual(at + "id", idOf(i), rs.getObject(1));
        expectEqual(at + "name", nameOf(i), rs.getString(2));
        expectEqual(at + "name wasNull()", nameOf(i) == null, rs.wasNull());
        expectEqual(at + "fare", fareOf(i), rs.getDouble(3));
        expectEqual(at + "ts as LocalDateTime", tsOf(i), rs.getObject(4, LocalDateTime.class));
        Timestamp ts = rs.getTimestamp(4);
        expect(ts != null, "%sts: getTimestamp returned null", at);
        expectEqual(at + "ts as Timestamp", tsOf(i), ts.toLocalDateTime());
        expectEqual(at + "ts nanos", tsOf(i).getNano(), ts.getNanos());
      }
      expectEqual("rows read", rows, i);
      return rows + " rows checked; columns " + types;
    }
  }

  private String aggregates() throws SQLException {
    String sql =
        "SELECT sum(id), sum(fare), min(ts), max(ts), count(name) FROM " + table;
    try (Statement st = conn.createStatement();
        ResultSet rs = st.executeQuery(sql)) {
      expect(rs.next(), "%s returned no row", sql);
      long sumId = rows * (rows + 1) / 2;
      expectEqual("sum(id)", sumId, rs.getLong(1));
      expectEqual("sum(fare)", 0.25 * sumId, rs.getDouble(2));
      expectEqual("min(ts)", tsOf(1), rs.getTimestamp(3).toLocalDateTime());
      expectEqual("max(ts)", tsOf(rows), rs.getTimestamp(4).toLocalDateTime());
      expectEqual("count(name)", rows - rows / 10, rs.getLong(5));
      expect(!rs.next(), "%s returned more than one row", sql);
      return sql;
    }
  }

  /** Unquoted names match whatever case they were stored with; quoted ones match exactly. */
  private String identifiers() throws SQLException {
    String upper = table.toUpperCase(java.util.Locale.ROOT);
    String sql =
        "SELECT T.ID, Sum(FARE) AS Total FROM "
            + upper
            + " AS t WHERE t.Id <= 10 GROUP BY t.id ORDER BY TOTAL DESC LIMIT 1";
    try (Statement st = conn.createStatement();
        ResultSet rs = st.executeQuery(sql)) {
      expect(rs.next(), "%s returned no row", sql);
      expectEqual("T.ID", 10L, rs.getLong(1));
      expectEqual("Total", 2.5, rs.getDouble(2));
      expect(!rs.next(), "%s returned more than one row", sql);
    }
    String quoted = "SELECT \"ID\" FROM " + table;
    try (Statement st = conn.createStatement()) {
      st.executeQuery(quoted).close();
      throw new AssertionError(quoted + " ran: a quoted name must match exactly");
    } catch (SQLException e) {
      String message = String.valueOf(e.getMessage());
      expect(message.contains("ID"), "the error names no ID: %s", message);
    }
    return sql + "; " + quoted;
  }

  /** Decimal division gives a double (as DuckDB does), not a quotient cut to six places. */
  private String decimalQuotient() throws SQLException {
    String sql = "SELECT CAST(2749.75 AS DECIMAL(17,2)) / CAST(2884.363333 AS DECIMAL(23,6)) AS q";
    try (Statement st = conn.createStatement();
        ResultSet rs = st.executeQuery(sql)) {
      expectEqual("column type", java.sql.Types.DOUBLE, rs.getMetaData().getColumnType(1));
      expect(rs.next(), "%s returned no row", sql);
      expectEqual("q", 2749.75 / 2884.363333, rs.getDouble(1));
      return sql;
    }
  }

  private String genericExecute() throws SQLException {
    String sql = "SELECT name FROM " + table + " WHERE id = 1";
    try (Statement st = conn.createStatement()) {
      expect(st.execute(sql), "execute(%s) returned false (no result set)", sql);
      expectEqual("getUpdateCount() after a query", -1, st.getUpdateCount());
      try (ResultSet rs = st.getResultSet()) {
        expect(rs != null, "getResultSet() is null");
        expect(rs.next(), "no row");
        expectEqual("name", nameOf(1), rs.getString(1));
        expect(!rs.next(), "more than one row");
      }
    }
    return sql;
  }

  private List<String> idNameRows(ResultSet rs) throws SQLException {
    List<String> out = new ArrayList<>();
    while (rs.next()) {
      long id = rs.getLong(1);
      out.add(id + ":" + rs.getString(2));
    }
    return out;
  }

  private List<String> expectedIdNameRows(long above) {
    List<String> out = new ArrayList<>();
    for (long i = Math.max(above + 1, 1); i <= rows; i++) {
      out.add(i + ":" + nameOf(i));
    }
    return out;
  }

  private String prepared() throws SQLException {
    String sql = "SELECT id, name FROM " + table + " WHERE id > ? ORDER BY id";
    StringJoiner seen = new StringJoiner("; ");
    try (PreparedStatement ps = conn.prepareStatement(sql)) {
      ParameterMetaData pmd = ps.getParameterMetaData();
      expectEqual("getParameterMetaData().getParameterCount()", 1, pmd.getParameterCount());
      seen.add("parameter 1 is " + typeName(pmd.getParameterType(1)));
      ResultSetMetaData md = ps.getMetaData();
      if (md != null) {
        seen.add("result columns " + md.getColumnCount());
      }
      for (long above : new long[] {rows - 5, rows - 1, rows - 5}) {
        ps.setLong(1, above);
        try (ResultSet rs = ps.executeQuery()) {
          List<String> got = idNameRows(rs);
          expectEqual("id > " + above, expectedIdNameRows(above), got);
          seen.add("id > " + above + ": " + got.size() + " rows");
        }
      }
    }
    return sql + " (" + seen + ")";
  }

  /**
   * CREATE TABLE AS, then the copy's count and listing, DROP TABLE, and the copy gone. A wrong
   * update count is noted and the sequence goes on, so one run shows every step.
   */
  private String createAsAndDrop() throws SQLException {
    StringJoiner seen = new StringJoiner("; ");
    List<String> wrong = new ArrayList<>();
    try (Statement st = conn.createStatement()) {
      String create = "CREATE TABLE " + copy + " AS SELECT * FROM " + table;
      int created = st.executeUpdate(create);
      seen.add(create + " -> " + created);
      if (created != rows) {
        wrong.add("executeUpdate(" + create + ") returned " + created + ", expected " + rows);
      }
    }
    String sql = "SELECT count(*) FROM " + copy;
    long n = singleLong(sql);
    expectEqual(sql, rows, n);
    seen.add(sql + " = " + n);
    expectTableRow("getTables", tableRows(null, null, "%", null, copy), copy);
    seen.add("getTables lists " + copy);
    try (Statement st = conn.createStatement()) {
      String drop = "DROP TABLE " + copy;
      int dropped = st.executeUpdate(drop);
      seen.add(drop + " -> " + dropped);
      // JDBC's executeUpdate: "0 for SQL statements that return nothing" (and not -1, which
      // would mean the driver took DROP TABLE for a query).
      if (dropped != 0) {
        wrong.add("executeUpdate(" + drop + ") returned " + dropped + ", expected 0");
      }
    }
    try {
      long after = singleLong(sql);
      throw new CheckFailed(sql + " after DROP TABLE returned " + after + " instead of failing");
    } catch (SQLException e) {
      seen.add(sql + " after DROP fails: " + firstLine(e.getMessage()));
    }
    expect(
        tableRows(null, null, "%", null, copy).isEmpty(),
        "getTables still lists %s after DROP TABLE",
        copy);
    seen.add("getTables no longer lists " + copy);
    expect(wrong.isEmpty(), "%s (the steps: %s)", String.join("; ", wrong), seen);
    return seen.toString();
  }

  static String firstLine(String s) {
    if (s == null) {
      return "null";
    }
    int nl = s.indexOf('\n');
    return nl < 0 ? s : s.substring(0, nl);
  }

  private static final String MISSING = "no_such_table";

  /**
   * Checks the error names the missing table in what the server said: the driver's own messages
   * quote the SQL text, so that text is taken out before looking.
   */
  private String expectMissingTableError(SQLException e, String sql) {
    String said = messages(e).replace(sql, "<sql>");
    expect(
        said.contains(MISSING),
        "the SQLException's messages (the SQL text aside) do not mention %s: %s",
        MISSING,
        describe(e));
    return "SQLException "
        + (e.getSQLState() == null ? "" : "(SQLState " + e.getSQLState() + ") ")
        + describe(e).replace("\n", " ");
  }

  private String errorStatement() throws SQLException {
    String sql = "SELECT * FROM " + MISSING;
    try (Statement st = conn.createStatement()) {
      try (ResultSet rs = st.executeQuery(sql)) {
        rs.next();
        throw new CheckFailed("executeQuery(" + sql + ") did not throw");
      } catch (SQLException e) {
        return expectMissingTableError(e, sql);
      }
    }
  }

  private String errorPrepared() throws SQLException {
    String sql = "SELECT * FROM " + MISSING + " WHERE id > ?";
    try (PreparedStatement ps = conn.prepareStatement(sql)) {
      ps.setLong(1, 1);
      try (ResultSet rs = ps.executeQuery()) {
        rs.next();
      }
      throw new CheckFailed("prepareStatement/executeQuery(" + sql + ") did not throw");
    } catch (SQLException e) {
      return expectMissingTableError(e, sql);
    }
  }

  private String afterErrors() throws SQLException {
    String sql = "SELECT count(*) FROM " + table + " WHERE id <= 3";
    expectEqual(sql, 3L, singleLong(sql));
    return sql;
  }

  private String close() throws SQLException {
    conn.close();
    expect(conn.isClosed(), "isClosed() is false after close()");
    return "";
  }
}

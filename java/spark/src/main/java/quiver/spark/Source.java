package quiver.spark;

import com.google.protobuf.Any;
import com.google.protobuf.ByteString;
import com.google.protobuf.CodedOutputStream;
import java.io.IOException;
import java.io.Serializable;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.apache.arrow.flight.FlightDescriptor;

/**
 * What a read names: a stored table ({@code .load("trips")} or option {@code table}), or a SQL
 * query the server plans through Flight SQL (option {@code query}), as in the Python connector.
 */
final class Source implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final String STATEMENT_QUERY =
      "type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery";

  /** The table, or null for a query. */
  final String table;
  /** The query, or null for a table. */
  final String query;

  private Source(String table, String query) {
    this.table = table;
    this.query = query;
  }

  /**
   * The source the options name: "query", else "table", else {@code .load("trips")} (Spark's
   * "path"; for a {@code CREATE TABLE ... USING quiver} Spark's catalog sets "path" to its own
   * warehouse location, so "table" and "query" come first).
   */
  static Source of(Map<String, String> lower) {
    String query = lower.get("query");
    if (query != null) {
      if (lower.containsKey("table")) {
        throw new IllegalArgumentException("give option \"table\" or \"query\", not both");
      }
      if (query.isBlank()) {
        throw new IllegalArgumentException("option \"query\" is empty");
      }
      return new Source(null, query);
    }
    String table = lower.getOrDefault("table", lower.get("path"));
    if (table == null || table.isBlank()) {
      throw new IllegalArgumentException(
          "name the table: spark.read.format(\"quiver\").load(\"trips\"), or option(\"table\", "
              + "...), or option(\"query\", \"SELECT ...\")");
    }
    return new Source(table, null);
  }

  boolean isQuery() {
    return query != null;
  }

  /** The name Spark shows for it. */
  String name() {
    return table != null ? table : "query";
  }

  /** For messages and {@code EXPLAIN}. */
  String describe() {
    return table != null ? "table '" + table + "'" : "query '" + query + "'";
  }

  /** The descriptor of the whole table or query. */
  FlightDescriptor descriptor() {
    return table != null ? FlightDescriptor.path(table) : FlightDescriptor.command(command(query));
  }

  /**
   * A query's descriptor with the columns Spark reads (null: all) and the pushed filter applied
   * around it: {@code SELECT "a", "b" FROM (query) AS q WHERE filter}.
   */
  FlightDescriptor queryDescriptor(List<String> columns, String filter) {
    if (columns == null && filter == null) {
      return descriptor();
    }
    String select =
        columns == null
            ? "*"
            : columns.stream().map(Filters::quote).collect(Collectors.joining(", "));
    String where = filter == null ? "" : " WHERE " + filter;
    return FlightDescriptor.command(
        command("SELECT " + select + " FROM (" + query + ") AS q" + where));
  }

  /** {@code Any(CommandStatementQuery{query})}: Flight SQL's command for a query. */
  private static byte[] command(String sql) {
    try {
      ByteString.Output body = ByteString.newOutput();
      CodedOutputStream out = CodedOutputStream.newInstance(body);
      out.writeString(1, sql);
      out.flush();
      return Any.newBuilder()
          .setTypeUrl(STATEMENT_QUERY)
          .setValue(body.toByteString())
          .build()
          .toByteArray();
    } catch (IOException e) {
      throw new IllegalStateException("encoding a Flight SQL command: " + e, e);
    }
  }
}

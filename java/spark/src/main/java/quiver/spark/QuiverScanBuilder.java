package quiver.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.SupportsPushDownV2Filters;
import org.apache.spark.sql.types.StructType;

/** The columns and filters Spark pushes, carried into every endpoint's ticket. */
final class QuiverScanBuilder
    implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownV2Filters {
  private final Connection connection;
  private final String table;
  private final StructType full;
  private StructType required;
  private final List<Predicate> pushed = new ArrayList<>();
  private final List<String> sql = new ArrayList<>();

  QuiverScanBuilder(Connection connection, String table, StructType schema) {
    this.connection = connection;
    this.table = table;
    this.full = schema;
    this.required = schema;
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    this.required = requiredSchema;
  }

  @Override
  public Predicate[] pushPredicates(Predicate[] predicates) {
    List<Predicate> kept = new ArrayList<>();
    for (Predicate predicate : predicates) {
      String condition = Filters.toSql(predicate);
      if (condition == null) {
        kept.add(predicate);
      } else {
        pushed.add(predicate);
        sql.add("(" + condition + ")");
      }
    }
    // quiver applies what it took exactly: Spark evaluates only what it kept.
    return kept.toArray(new Predicate[0]);
  }

  @Override
  public Predicate[] pushedPredicates() {
    return pushed.toArray(new Predicate[0]);
  }

  @Override
  public Scan build() {
    String filter = sql.isEmpty() ? null : String.join(" AND ", sql);
    boolean allColumns = required.equals(full);
    return new QuiverScan(connection, table, required, allColumns, filter);
  }
}

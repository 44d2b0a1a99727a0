package quiver.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.connector.expressions.NamedReference;
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
  private final Source source;
  private final StructType full;
  private StructType required;
  private final List<Predicate> pushed = new ArrayList<>();
  private final List<String> sql = new ArrayList<>();

  QuiverScanBuilder(Connection connection, Source source, StructType schema) {
    this.connection = connection;
    this.source = source;
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
      String condition = readsWidened(predicate) ? null : Filters.toSql(predicate);
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

  /**
   * Whether {@code predicate} reads a column Spark sees wider than it is stored ({@link
   * Widening}): its literals are of Spark's type, not the stored one, so Spark applies it.
   */
  private boolean readsWidened(Predicate predicate) {
    for (NamedReference column : predicate.references()) {
      String[] names = column.fieldNames();
      if (names.length == 1
          && Arrays.stream(full.fields())
              .anyMatch(
                  f -> f.name().equals(names[0]) && f.metadata().contains(Widening.STORED_TYPE))) {
        return true;
      }
    }
    return false;
  }

  @Override
  public Predicate[] pushedPredicates() {
    return pushed.toArray(new Predicate[0]);
  }

  @Override
  public Scan build() {
    String filter = sql.isEmpty() ? null : String.join(" AND ", sql);
    boolean allColumns = required.equals(full);
    return new QuiverScan(connection, source, required, allColumns, filter);
  }
}

package quiver.spark;

import java.util.Arrays;
import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A quiver table, read in columnar batches, written through staging tables; or a query's result,
 * read only.
 */
final class QuiverTable implements SupportsRead, SupportsWrite {
  private final Connection connection;
  private final Source source;
  private final StructType schema;

  QuiverTable(Connection connection, Source source, StructType schema) {
    this.connection = connection;
    this.source = source;
    this.schema = schema;
  }

  @Override
  public String name() {
    return source.name();
  }

  @Override
  public Column[] columns() {
    return Arrays.stream(schema.fields())
        .map(f -> Column.create(f.name(), f.dataType(), f.nullable()))
        .toArray(Column[]::new);
  }

  @Override
  public Set<TableCapability> capabilities() {
    // Spark refuses a write to a query's result itself.
    return source.isQuery()
        ? EnumSet.of(TableCapability.BATCH_READ)
        : EnumSet.of(
            TableCapability.BATCH_READ, TableCapability.BATCH_WRITE, TableCapability.TRUNCATE);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    String partitions = Connection.lowerKeys(info.options().asCaseSensitiveMap()).get("partitions");
    Integer count = partitions == null ? null : Integer.valueOf(partitions);
    return new QuiverWrite.Builder(connection, source.table, info.schema(), count);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return new QuiverScanBuilder(connection, source, schema);
  }
}

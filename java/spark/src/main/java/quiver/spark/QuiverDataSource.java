package quiver.spark;

import java.util.Map;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStatusCode;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.MetadataBuilder;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * quiver tables in Spark, from the JVM: {@code spark.read.format("quiver").option("uri",
 * "grpc+tcp://host:8815").load("trips")} from Scala, Java, PySpark or {@code CREATE TABLE t USING
 * quiver OPTIONS (uri '...', table 'trips')}, or a query's result with option {@code query}.
 * docs/engines.md has the options.
 */
public final class QuiverDataSource implements TableProvider, DataSourceRegister {
  /** The short name, the Python connector's too. */
  public static final String NAME = "quiver";

  @Override
  public String shortName() {
    return NAME;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    Map<String, String> lower = Connection.lowerKeys(options.asCaseSensitiveMap());
    Connection connection = Connection.of(lower);
    Source source = Source.of(lower);
    try (Connection.Client client = connection.open(null)) {
      FlightDescriptor descriptor = source.descriptor();
      Schema schema;
      try {
        // A query is planned by the server, not run.
        schema = client.flight.getSchema(descriptor, client.options).getSchema();
      } catch (FlightRuntimeException e) {
        if (e.status().code() != FlightStatusCode.UNIMPLEMENTED || source.isQuery()) {
          throw e;
        }
        // A Flight server without GetSchema (it is optional): the FlightInfo says it too.
        schema =
            client
                .flight
                .getInfo(descriptor, client.options)
                .getSchemaOptional()
                .orElseThrow(
                    () ->
                        new IllegalStateException(
                            "the server gives no schema for " + source.describe()));
      }
      return sparkSchema(schema, source);
    }
  }

  @Override
  public Table getTable(
      StructType schema, Transform[] partitioning, Map<String, String> properties) {
    Map<String, String> lower = Connection.lowerKeys(properties);
    return new QuiverTable(Connection.of(lower), Source.of(lower), schema);
  }

  @Override
  public boolean supportsExternalMetadata() {
    // A schema given with .schema(...) selects columns, as in the Python connector.
    return true;
  }

  /**
   * Spark's schema of an Arrow schema, naming the column whose type Spark cannot take. A column
   * read wider than stored ({@link Widening}) carries its stored type in its metadata.
   */
  static StructType sparkSchema(Schema schema, Source source) {
    StructField[] fields = new StructField[schema.getFields().size()];
    for (int i = 0; i < fields.length; i++) {
      Field field = schema.getFields().get(i);
      DataType type;
      try {
        type = ArrowUtils.fromArrowField(Widening.readable(field));
      } catch (RuntimeException e) {
        throw new IllegalArgumentException(
            source.describe()
                + ", column '"
                + field.getName()
                + "': Spark has no type for Arrow's "
                + field.getType()
                + " ("
                + e.getMessage()
                + "); select other columns with .schema(...)",
            e);
      }
      Metadata metadata =
          Widening.wider(field.getType()) == null
              ? Metadata.empty()
              : new MetadataBuilder()
                  .putString(Widening.STORED_TYPE, field.getType().toString())
                  .build();
      fields[i] = new StructField(field.getName(), type, field.isNullable(), metadata);
    }
    return new StructType(fields);
  }
}

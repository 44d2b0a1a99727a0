package quiver.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.FlightEndpoint;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.flight.Location;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * One Spark input partition per endpoint of the table's FlightInfo, its ticket carrying the
 * pushed columns and filter, its locations the preferred hosts and the order of failover. A
 * query's columns and filter are applied around it ({@link Source#queryDescriptor}), and its
 * tickets are the server's as they are.
 */
final class QuiverScan implements Scan, Batch {
  /** What starts the tickets GetFlightInfo issues (docs/protocol.md). */
  static final String TICKET_PREFIX = "\0quiver-ticket-v1:";
  /** A location that means "the server you asked" (Flight's reuse-connection URI). */
  private static final String REUSE_CONNECTION = "arrow-flight-reuse-connection";

  private final Connection connection;
  private final Source source;
  private final StructType schema;
  private final boolean allColumns;
  private final String filter;

  QuiverScan(
      Connection connection, Source source, StructType schema, boolean allColumns, String filter) {
    this.connection = connection;
    this.source = source;
    this.schema = schema;
    this.allColumns = allColumns;
    this.filter = filter;
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  /** The names of the columns Spark reads. */
  private List<String> names() {
    List<String> columns = new ArrayList<>();
    for (StructField f : schema.fields()) {
      columns.add(f.name());
    }
    return columns;
  }

  @Override
  public String description() {
    return "quiver "
        + source.describe()
        + " at "
        + connection.uri
        + (allColumns ? "" : ", columns " + names())
        + (filter == null ? "" : ", filter " + filter);
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    FlightDescriptor descriptor =
        source.isQuery()
            ? source.queryDescriptor(allColumns ? null : names(), filter)
            : source.descriptor();
    FlightInfo info;
    try (Connection.Client client = connection.open(null)) {
      info = client.flight.getInfo(descriptor, client.options);
    }
    List<FlightEndpoint> endpoints = info.getEndpoints();
    long version = version(info);
    InputPartition[] partitions = new InputPartition[endpoints.size()];
    for (int i = 0; i < partitions.length; i++) {
      FlightEndpoint endpoint = endpoints.get(i);
      byte[] issued = endpoint.getTicket().getBytes();
      partitions[i] =
          new QuiverPartition(
              source.isQuery() ? issued : ticket(issued),
              locations(endpoint),
              source.table,
              version,
              i);
    }
    return partitions;
  }

  /** The version a table's FlightInfo describes (its app metadata's), or -1. */
  static long version(FlightInfo info) {
    byte[] metadata = info.getAppMetadata();
    if (metadata == null || metadata.length == 0) {
      return -1;
    }
    try {
      return new ObjectMapper().readTree(metadata).path("version").asLong(-1);
    } catch (IOException e) {
      return -1;
    }
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new ReaderFactory(connection);
  }

  /**
   * The endpoint's ticket with the columns Spark reads (always: selecting columns costs the
   * server nothing, and a schema given with {@code .schema(...)} may leave some out) and the
   * pushed filter.
   */
  private byte[] ticket(byte[] issued) {
    String text = new String(issued, StandardCharsets.UTF_8);
    if (!text.startsWith(TICKET_PREFIX)) {
      if (allColumns && filter == null) {
        return issued;
      }
      throw new IllegalStateException(
          "the server's tickets for "
              + source.describe()
              + " cannot carry columns or filters (not a quiver server, or too old)");
    }
    ObjectMapper json = new ObjectMapper();
    try {
      ObjectNode body = (ObjectNode) json.readTree(text.substring(TICKET_PREFIX.length()));
      ArrayNode columns = body.putArray("c");
      names().forEach(columns::add);
      if (filter != null) {
        body.put("f", filter);
      }
      return (TICKET_PREFIX + json.writeValueAsString(body)).getBytes(StandardCharsets.UTF_8);
    } catch (IOException | ClassCastException e) {
      throw new IllegalStateException("a ticket quiver issued is not JSON: " + e, e);
    }
  }

  /** Where the endpoint can be read, in order; the connection's server if it names none. */
  private String[] locations(FlightEndpoint endpoint) {
    Set<String> uris = new LinkedHashSet<>();
    for (Location location : endpoint.getLocations()) {
      URI uri = location.getUri();
      uris.add(REUSE_CONNECTION.equals(uri.getScheme()) ? connection.uri : uri.toString());
    }
    if (uris.isEmpty()) {
      uris.add(connection.uri);
    }
    return uris.toArray(new String[0]);
  }

  /**
   * One endpoint: its ticket and locations, and where it lies in the FlightInfo it came from
   * (the table, its version, the endpoint's index), by which a cluster node's shared-memory
   * endpoint for the same partition is found.
   */
  static final class QuiverPartition implements InputPartition {
    private static final long serialVersionUID = 1L;
    final byte[] ticket;
    final String[] locations;
    /** The table read, or null for a query. */
    final String table;
    /** The version the FlightInfo described, or -1. */
    final long version;

    final int index;

    QuiverPartition(byte[] ticket, String[] locations, String table, long version, int index) {
      this.ticket = ticket;
      this.locations = locations;
      this.table = table;
      this.version = version;
      this.index = index;
    }

    @Override
    public String[] preferredLocations() {
      return Arrays.stream(locations)
          .map(uri -> URI.create(uri).getHost())
          .filter(host -> host != null)
          .distinct()
          .toArray(String[]::new);
    }
  }

  /** Columnar readers: batches as Spark columns over Arrow vectors, no rows built. */
  static final class ReaderFactory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final Connection connection;

    ReaderFactory(Connection connection) {
      this.connection = connection;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return true;
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return new QuiverPartitionReader(connection, (QuiverPartition) partition);
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      throw new UnsupportedOperationException("the quiver source reads columnar batches");
    }
  }
}

package quiver.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.net.InetAddress;
import java.net.URI;
import java.net.UnknownHostException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.FlightEndpoint;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStatusCode;
import org.apache.arrow.flight.Location;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorLoader;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.dictionary.Dictionary;
import org.apache.arrow.vector.dictionary.DictionaryProvider;
import org.apache.arrow.vector.ipc.message.ArrowDictionaryBatch;
import org.apache.arrow.vector.ipc.message.ArrowMessage;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.arrow.vector.util.DictionaryUtility;

/**
 * One endpoint of a stored table read through shared memory: the server's GetFlightInfo, asked
 * for a shared-memory endpoint, gives a ticket for the version the endpoint's ticket pinned (on
 * a cluster node, for the endpoint's partition); that is mapped ({@link SharedMemory}) and the
 * endpoint's rows (on one server, partition {@code p} of {@code n}: rows {@code p*R/n} up to
 * {@code (p+1)*R/n} of {@code R}) and columns are taken from it, as the Python connector does
 * (docs/engines.md). A batch inside those rows is loaded as it lies in the mapping; the first
 * and last may be cut, which copies what they keep of the columns read. A dictionary batch is loaded, as it lies,
 * into its dictionary's vector where the stream has it, so each record batch is read with the
 * dictionaries of its place in the stream.
 */
final class MappedBatches implements QuiverPartitionReader.Batches {
  /** What names one partition of a cluster's table, which only DoGet serves. */
  private static final String PARTITION_PREFIX = ".quiver-part/";

  private final Connection.Client client;
  private final SharedMemory.Mapped mapped;
  /** The dictionaries of the dictionary-encoded columns, by id; empty if none. */
  private final DictionaryProvider.MapDictionaryProvider dictionaries;

  private final VectorSchemaRoot root;
  private final VectorLoader loader;
  /** The root's vectors Spark reads, in its order: the ticket's columns. */
  private final List<FieldVector> projected;
  private final long start;
  private final long end;
  private int next;
  private long firstRow;
  private VectorSchemaRoot cut;
  private List<FieldVector> vectors;
  private int rows;

  private MappedBatches(
      Connection.Client client, SharedMemory.Mapped mapped, List<String> columns, long[] window) {
    this.client = client;
    this.mapped = mapped;
    // As Arrow's stream readers do: a dictionary-encoded column's vector holds its indices, and
    // a vector of its values' type, one per dictionary id, holds the dictionary.
    Map<Long, Dictionary> byId = new HashMap<>();
    List<Field> fields = new ArrayList<>();
    for (Field field : mapped.schema.getFields()) {
      fields.add(DictionaryUtility.toMemoryFormat(field, client.allocator, byId));
    }
    this.dictionaries =
        new DictionaryProvider.MapDictionaryProvider(byId.values().toArray(new Dictionary[0]));
    this.root =
        VectorSchemaRoot.create(
            new Schema(fields, mapped.schema.getCustomMetadata()), client.allocator);
    this.loader = new VectorLoader(root);
    this.projected = project(root, columns);
    this.start = window[0];
    this.end = window[1];
  }

  /**
   * The endpoint's rows through the shared memory of the server at {@code location}, or null
   * for a ticket that is read over gRPC whatever the transport, as the Python connector reads
   * it: a filtered one (the server filters what it streams; the mapping holds every row) or a
   * query's.
   *
   * <p>A server's ticket pins a version and partition {@code p} of {@code n}: the version is
   * mapped and the partition's rows taken from it. A cluster's ticket names one partition's
   * storage, which only DoGet serves: the node's GetFlightInfo of the table lists the same
   * partitions in the same order while the version is the plan's, and each one the node holds
   * over shared memory (docs/cluster.md), so the endpoint's is mapped whole.
   *
   * @throws SharedMemory.Unavailable the endpoint cannot be read so: another host, a server
   *     without shared memory, a node without a copy of the partition, a table changed since
   *     the plan, a JVM without the foreign-function API
   */
  static MappedBatches open(
      Connection connection, String location, QuiverScan.QuiverPartition partition)
      throws IOException {
    JsonNode pinned = pinned(partition.ticket);
    if (pinned == null || pinned.has("f")) {
      return null;
    }
    boolean clustered = pinned.get("t").asText().startsWith(PARTITION_PREFIX);
    String table = clustered ? partition.table : pinned.get("t").asText();
    long planned = clustered ? partition.version : pinned.path("v").asLong(-1);
    if (table == null || planned < 0 || !clustered && !(pinned.has("p") && pinned.has("n"))) {
      return null;
    }
    if (!onThisHost(location)) {
      throw new SharedMemory.Unavailable(location + " is not on this host");
    }
    SharedMemory.Calls calls = SharedMemory.calls();
    Connection.Client client = connection.open(location);
    SharedMemory.Mapped mapped = null;
    try {
      FlightInfo info;
      try {
        info = client.flight.getInfo(FlightDescriptor.path(table), client.sharedMemoryOptions());
      } catch (FlightRuntimeException e) {
        if (e.status().code() == FlightStatusCode.UNAVAILABLE
            || e.status().code() == FlightStatusCode.TIMED_OUT) {
          throw e; // the location is down: the next one is tried
        }
        // DoGet of the pinned ticket says what is wrong (a table deleted, changed, ...).
        throw new SharedMemory.Unavailable(e.getMessage(), e);
      }
      long version = QuiverScan.version(info);
      if (version != planned) {
        // A cluster holds a replaced version's partitions for the plan's readers: DoGet.
        throw new SharedMemory.Unavailable(
            "table '" + table + "' changed since the read was planned (version " + planned
                + ", now " + version + "): run the action again");
      }
      List<FlightEndpoint> endpoints = info.getEndpoints();
      if (clustered) {
        if (partition.index >= endpoints.size()) {
          throw new SharedMemory.Unavailable("table '" + table + "' lists fewer partitions");
        }
        endpoints = List.of(endpoints.get(partition.index));
      }
      SharedMemory.Location where = null;
      byte[] granted = null;
      for (FlightEndpoint endpoint : endpoints) {
        for (Location candidate : endpoint.getLocations()) {
          SharedMemory.Location parsed = SharedMemory.Location.parse(candidate.getUri());
          if (parsed != null) {
            where = parsed;
            granted = endpoint.getTicket().getBytes();
          }
        }
      }
      if (where == null) {
        throw new SharedMemory.Unavailable(
            clustered
                ? location + " holds no copy of partition " + partition.index + " of '"
                    + table + "' (it moved since the plan)"
                : location + " offers no shared memory");
      }
      mapped = SharedMemory.get(calls, client.allocator, where, granted);
      long total = 0;
      for (ArrowMessage message : mapped.messages) {
        if (message instanceof ArrowRecordBatch) {
          total += ((ArrowRecordBatch) message).getLength();
        }
      }
      long[] window = {0, total};
      if (!clustered) {
        long p = pinned.get("p").asLong();
        long n = pinned.get("n").asLong();
        window = new long[] {p * total / n, (p + 1) * total / n};
      }
      return new MappedBatches(client, mapped, columns(pinned), window);
    } catch (IOException | RuntimeException e) {
      if (mapped != null) {
        mapped.close();
      }
      client.close();
      throw e;
    }
  }

  /**
   * The ticket's JSON if quiver issued it for a table (it names one, {@code "t"}); null for
   * another ticket (a query's, which the server's Flight SQL plan serves by DoGet alone).
   */
  private static JsonNode pinned(byte[] ticket) throws IOException {
    String text = new String(ticket, StandardCharsets.UTF_8);
    if (!text.startsWith(QuiverScan.TICKET_PREFIX)) {
      return null;
    }
    JsonNode body = new ObjectMapper().readTree(text.substring(QuiverScan.TICKET_PREFIX.length()));
    if (!body.has("t")) {
      return null;
    }
    if (body.has("n") && (body.get("n").asLong() <= 0 || body.get("p").asLong() < 0)) {
      throw new IOException("the ticket's partition is not one of its count: " + text);
    }
    return body;
  }

  private static List<String> columns(JsonNode pinned) {
    if (!pinned.has("c")) {
      return null;
    }
    List<String> names = new ArrayList<>();
    pinned.get("c").forEach(name -> names.add(name.asText()));
    return names;
  }

  /** Whether {@code location} names a server on this host (loopback, or this host's name). */
  static boolean onThisHost(String location) {
    String host = URI.create(location).getHost();
    if (host == null) {
      return false;
    }
    try {
      if (InetAddress.getByName(host).isLoopbackAddress()) {
        return true;
      }
      return host.equalsIgnoreCase(InetAddress.getLocalHost().getHostName());
    } catch (UnknownHostException e) {
      return false;
    }
  }

  @Override
  public boolean next() {
    closeCut();
    while (next < mapped.messages.size() && firstRow < end) {
      ArrowMessage message = mapped.messages.get(next++);
      if (message instanceof ArrowDictionaryBatch) {
        load((ArrowDictionaryBatch) message);
        continue;
      }
      ArrowRecordBatch batch = (ArrowRecordBatch) message;
      long first = firstRow;
      firstRow += batch.getLength();
      long from = Math.max(start, first);
      long to = Math.min(end, firstRow);
      if (from >= to) {
        continue;
      }
      loader.load(batch);
      rows = (int) (to - from);
      vectors = projected;
      if (rows < batch.getLength() && !projected.isEmpty()) {
        // Only the columns read are cut (a copy); none at all for a count. The root over them
        // is not closed: it would close the root's own vectors.
        cut = new VectorSchemaRoot(projected).slice((int) (from - first), rows);
        vectors = cut.getFieldVectors();
      }
      return true;
    }
    return false;
  }

  /** The dictionary of the batch's id, from here on the batch's values (a replacement). */
  private void load(ArrowDictionaryBatch batch) {
    Dictionary dictionary = dictionaries.lookup(batch.getDictionaryId());
    if (dictionary == null) {
      throw new IllegalStateException(
          "a dictionary batch of id " + batch.getDictionaryId() + ", which no column uses");
    }
    FieldVector vector = dictionary.getVector();
    // Not closed: it would close the dictionary's vector, which the provider owns.
    VectorSchemaRoot holder = new VectorSchemaRoot(List.of(vector.getField()), List.of(vector), 0);
    new VectorLoader(holder).load(batch.getDictionary());
  }

  /** The vectors of {@code columns} (all if null), in that order. */
  private static List<FieldVector> project(VectorSchemaRoot root, List<String> columns) {
    if (columns == null) {
      return root.getFieldVectors();
    }
    List<FieldVector> projected = new ArrayList<>(columns.size());
    for (String name : columns) {
      FieldVector vector = root.getVector(name);
      if (vector == null) {
        throw new IllegalStateException("the mapped table has no column '" + name + "'");
      }
      projected.add(vector);
    }
    return projected;
  }

  private void closeCut() {
    if (cut != null) {
      cut.close();
      cut = null;
    }
  }

  @Override
  public List<FieldVector> vectors() {
    return vectors;
  }

  @Override
  public int rowCount() {
    return rows;
  }

  @Override
  public DictionaryProvider dictionaries() {
    return dictionaries;
  }

  @Override
  public void close() {
    try {
      closeCut();
      root.close();
      dictionaries.close();
      mapped.close();
    } finally {
      client.close();
    }
  }
}

package quiver.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStatusCode;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.flight.Ticket;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.ValueVector;
import org.apache.arrow.vector.dictionary.Dictionary;
import org.apache.arrow.vector.dictionary.DictionaryEncoder;
import org.apache.arrow.vector.dictionary.DictionaryProvider;
import org.apache.arrow.vector.types.pojo.DictionaryEncoding;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Reads one endpoint from its first location that answers, then the next: through shared
 * memory where the location is a server on this host and the transport allows it ({@link
 * MappedBatches}), else by DoGet. Each batch is handed to Spark as a {@link ColumnarBatch} over
 * the batch's own vectors, read through {@link DirectColumnVector}s where their type allows.
 */
final class QuiverPartitionReader implements PartitionReader<ColumnarBatch> {
  private final Batches batches;
  private ColumnarBatch batch;
  /** The vectors {@link #batch}'s columns wrap. */
  private List<FieldVector> wrapped;
  /**
   * Whether the stream has columns made anew for every batch: dictionary-encoded ones (decoded)
   * and ones Spark reads wider than stored ({@link Widening}).
   */
  private boolean rebuilt;
  /** The current batch's decoded and widened columns, closed before the next. */
  private final List<ValueVector> decoded = new ArrayList<>();

  /** Where a partition's batches come from: a Flight stream or a mapped version. */
  interface Batches extends AutoCloseable {
    /** Loads the next batch; false at the end. */
    boolean next();

    /** The current batch's columns, in the order Spark reads them. */
    List<FieldVector> vectors();

    int rowCount();

    DictionaryProvider dictionaries();

    @Override
    void close();
  }

  QuiverPartitionReader(Connection connection, QuiverScan.QuiverPartition partition) {
    List<String> failures = new ArrayList<>();
    Batches opened = null;
    for (String location : partition.locations) {
      try {
        opened = open(connection, location, partition);
        break;
      } catch (SharedMemory.Unavailable e) {
        failures.add(location + ": " + e.getMessage());
      } catch (FlightRuntimeException e) {
        if (e.status().code() != FlightStatusCode.UNAVAILABLE
            && e.status().code() != FlightStatusCode.TIMED_OUT) {
          throw e;
        }
        failures.add(location + ": " + e.getMessage());
      }
    }
    if (opened == null) {
      throw new IllegalStateException(
          (connection.sharedMemoryOnly()
                  ? "no location of the endpoint served it through shared memory (transport "
                      + "\"shm\"): "
                  : "no location of the endpoint answered: ")
              + String.join("; ", failures));
    }
    this.batches = opened;
  }

  /**
   * The ticket's batches from {@code location}: mapped from its shared memory when the transport
   * allows and the location can, else by DoGet ({@code "auto"}); {@link SharedMemory.Unavailable}
   * when only shared memory will do and it cannot.
   */
  private static Batches open(
      Connection connection, String location, QuiverScan.QuiverPartition partition)
      throws SharedMemory.Unavailable {
    if (connection.sharedMemoryAllowed()) {
      try {
        Batches mapped = MappedBatches.open(connection, location, partition);
        if (mapped != null) {
          return mapped;
        }
      } catch (SharedMemory.Unavailable e) {
        if (connection.sharedMemoryOnly()) {
          throw e;
        }
      } catch (IOException e) {
        throw new IllegalStateException(
            "reading through shared memory from " + location + ": " + e.getMessage(), e);
      }
    }
    return stream(connection, location, partition.ticket);
  }

  /** DoGet of the ticket from {@code location}, once its first message has arrived. */
  private static Batches stream(Connection connection, String location, byte[] ticket) {
    Connection.Client client = connection.open(location);
    try {
      FlightStream stream = client.flight.getStream(new Ticket(ticket), client.options);
      // The first message says whether the location serves the ticket.
      stream.getSchema();
      return new Batches() {
        @Override
        public boolean next() {
          return stream.next();
        }

        @Override
        public List<FieldVector> vectors() {
          return stream.getRoot().getFieldVectors();
        }

        @Override
        public int rowCount() {
          return stream.getRoot().getRowCount();
        }

        @Override
        public DictionaryProvider dictionaries() {
          return stream.getDictionaryProvider();
        }

        @Override
        public void close() {
          try {
            stream.close();
          } catch (Exception e) {
            throw new IllegalStateException("closing the quiver stream: " + e, e);
          } finally {
            client.close();
          }
        }
      };
    } catch (RuntimeException e) {
      client.close();
      throw e;
    }
  }

  @Override
  public boolean next() {
    closeDecoded();
    if (!batches.next()) {
      return false;
    }
    List<FieldVector> vectors = batches.vectors();
    if (batch == null || rebuilt || !same(vectors, wrapped)) {
      // A stream loads every batch into the same vectors: wrap them once, but for
      // dictionary-encoded columns, whose indices are decoded into values batch by batch
      // (Spark's vectors read values), and for columns widened batch by batch.
      ColumnVector[] columns = new ColumnVector[vectors.size()];
      for (int i = 0; i < columns.length; i++) {
        FieldVector vector = vectors.get(i);
        DictionaryEncoding encoding = vector.getField().getDictionary();
        if (encoding != null) {
          Dictionary dictionary = batches.dictionaries().lookup(encoding.getId());
          vector = (FieldVector) DictionaryEncoder.decode(vector, dictionary);
          decoded.add(vector);
          rebuilt = true;
        }
        FieldVector wider = Widening.widen(vector);
        if (wider != null) {
          decoded.add(wider);
          vector = wider;
          rebuilt = true;
        }
        columns[i] = DirectColumnVector.of(vector);
      }
      batch = new ColumnarBatch(columns);
      wrapped = new ArrayList<>(vectors);
    } else {
      // The same vectors hold the next batch's buffers now.
      for (int i = 0; i < batch.numCols(); i++) {
        if (batch.column(i) instanceof DirectColumnVector) {
          ((DirectColumnVector) batch.column(i)).load();
        }
      }
    }
    batch.setNumRows(batches.rowCount());
    return true;
  }

  /** Whether two lists hold the same vectors, in order. */
  private static boolean same(List<FieldVector> a, List<FieldVector> b) {
    if (b == null || a.size() != b.size()) {
      return false;
    }
    for (int i = 0; i < a.size(); i++) {
      if (a.get(i) != b.get(i)) {
        return false;
      }
    }
    return true;
  }

  private void closeDecoded() {
    for (ValueVector vector : decoded) {
      vector.close();
    }
    decoded.clear();
  }

  @Override
  public ColumnarBatch get() {
    return batch;
  }

  @Override
  public void close() {
    closeDecoded();
    batches.close();
  }
}

package quiver.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStatusCode;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.flight.Ticket;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.ValueVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.dictionary.Dictionary;
import org.apache.arrow.vector.dictionary.DictionaryEncoder;
import org.apache.arrow.vector.types.pojo.DictionaryEncoding;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Reads one endpoint: DoGet from its first location that answers, then the next; each Flight
 * batch handed to Spark as a {@link ColumnarBatch} over the stream's own vectors, read through
 * {@link DirectColumnVector}s where their type allows.
 */
final class QuiverPartitionReader implements PartitionReader<ColumnarBatch> {
  private final Connection.Client client;
  private final FlightStream stream;
  private ColumnarBatch batch;
  /**
   * Whether the stream has columns made anew for every batch: dictionary-encoded ones (decoded)
   * and ones Spark reads wider than stored ({@link Widening}).
   */
  private boolean rebuilt;
  /** The current batch's decoded and widened columns, closed before the next. */
  private final List<ValueVector> decoded = new ArrayList<>();

  QuiverPartitionReader(Connection connection, QuiverScan.QuiverPartition partition) {
    List<String> failures = new ArrayList<>();
    Connection.Client opened = null;
    FlightStream started = null;
    for (String location : partition.locations) {
      Connection.Client candidate = null;
      try {
        candidate = connection.open(location);
        FlightStream attempt =
            candidate.flight.getStream(new Ticket(partition.ticket), candidate.options);
        // The first message says whether the location serves the ticket.
        attempt.getSchema();
        opened = candidate;
        started = attempt;
        break;
      } catch (FlightRuntimeException e) {
        if (candidate != null) {
          candidate.close();
        }
        if (e.status().code() != FlightStatusCode.UNAVAILABLE
            && e.status().code() != FlightStatusCode.TIMED_OUT) {
          throw e;
        }
        failures.add(location + ": " + e.getMessage());
      }
    }
    if (started == null) {
      throw new IllegalStateException(
          "no location of the endpoint answered: " + String.join("; ", failures));
    }
    this.client = opened;
    this.stream = started;
  }

  @Override
  public boolean next() {
    closeDecoded();
    if (!stream.next()) {
      return false;
    }
    VectorSchemaRoot root = stream.getRoot();
    List<FieldVector> vectors = root.getFieldVectors();
    if (batch == null || rebuilt) {
      // The stream loads every batch into the same vectors: wrap them once, but for
      // dictionary-encoded columns, whose indices are decoded into values batch by batch
      // (Spark's vectors read values), and for columns widened batch by batch.
      ColumnVector[] columns = new ColumnVector[vectors.size()];
      for (int i = 0; i < columns.length; i++) {
        FieldVector vector = vectors.get(i);
        DictionaryEncoding encoding = vector.getField().getDictionary();
        if (encoding != null) {
          Dictionary dictionary = stream.getDictionaryProvider().lookup(encoding.getId());
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
    } else {
      // The same vectors hold the next batch's buffers now.
      for (int i = 0; i < batch.numCols(); i++) {
        if (batch.column(i) instanceof DirectColumnVector) {
          ((DirectColumnVector) batch.column(i)).load();
        }
      }
    }
    batch.setNumRows(root.getRowCount());
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
    try {
      stream.close();
    } catch (Exception e) {
      throw new IllegalStateException("closing the quiver stream: " + e, e);
    } finally {
      client.close();
    }
  }
}

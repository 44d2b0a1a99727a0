package quiver.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.TreeMap;
import java.util.UUID;
import org.apache.arrow.flight.Action;
import org.apache.arrow.flight.AsyncPutListener;
import org.apache.arrow.flight.Criteria;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStatusCode;
import org.apache.arrow.flight.Result;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;

/**
 * Writes: every task puts its rows as a staging table of its own ({@code
 * .quiver-staging/<job>/<task>-<attempt>}), and the driver publishes them all into the target
 * at commit, in one atomic step (the {@code publish} action); a failed job deletes what it
 * staged and leaves the target as it was. On a cluster, task {@code i} puts to node {@code i}
 * modulo the nodes the {@code nodes} action lists, which keeps its rows ({@code "place":
 * "here"}), so the nodes share the job. The Python connector's protocol
 * (quiver.splits.WriteJob): the two can write side by side.
 */
final class QuiverWrite {
  /** Where staging tables live (the Python client's STAGING_PREFIX). */
  static final String STAGING_PREFIX = ".quiver-staging/";
  /** Rows per record batch a task sends. */
  static final int BATCH_ROWS = 65_536;

  private QuiverWrite() {}

  /** {@code mode("append")}, or {@code mode("overwrite")} (a truncate: replace). */
  static final class Builder implements WriteBuilder, SupportsTruncate {
    private final Connection connection;
    private final String table;
    private final StructType schema;
    private final Integer partitions;
    private boolean replace;

    Builder(Connection connection, String table, StructType schema, Integer partitions) {
      this.connection = connection;
      this.table = table;
      this.schema = schema;
      this.partitions = partitions;
    }

    @Override
    public WriteBuilder truncate() {
      replace = true;
      return this;
    }

    @Override
    public Write build() {
      return new Write() {
        @Override
        public BatchWrite toBatch() {
          return Job.begin(connection, table, schema, replace, partitions);
        }
      };
    }
  }

  /** One write job, on the driver: begun, then committed or aborted. */
  static final class Job implements BatchWrite {
    private final Connection connection;
    private final String table;
    private final StructType schema;
    private final boolean replace;
    private final Integer partitions;
    private final String prefix;
    /** On a cluster, its nodes' locations in the order of their ids; empty otherwise. */
    private String[] nodes = new String[0];

    private Job(
        Connection connection, String table, StructType schema, boolean replace, Integer partitions) {
      this.connection = connection;
      this.table = table;
      this.schema = schema;
      this.replace = replace;
      this.partitions = partitions;
      this.prefix = STAGING_PREFIX + UUID.randomUUID().toString().replace("-", "") + "/";
    }

    /** Opens the job: its marker exists until it ends, so that late tasks stage nothing. */
    static Job begin(
        Connection connection, String table, StructType schema, boolean replace, Integer partitions) {
      Job job = new Job(connection, table, schema, replace, partitions);
      try (Connection.Client client = connection.open(null)) {
        if (!replace) {
          // An append needs its target: say so now, not after every task ran.
          client.flight.getSchema(FlightDescriptor.path(table), client.options);
        }
        job.nodes = nodes(client);
        putEmpty(client, job.marker(), new Schema(List.of()));
      }
      return job;
    }

    /**
     * The cluster's nodes a task may put to, by id: none on a single server, or on a server
     * from before the {@code nodes} action.
     */
    private static String[] nodes(Connection.Client client) {
      byte[] answer;
      try {
        answer = action(client, "nodes", new byte[0]);
      } catch (FlightRuntimeException e) {
        if (e.status().code() == FlightStatusCode.UNIMPLEMENTED) {
          return new String[0];
        }
        throw e;
      }
      TreeMap<String, String> byId = new TreeMap<>();
      try {
        for (JsonNode node : new ObjectMapper().readTree(answer).path("nodes")) {
          byId.put(node.path("id").asText(), node.path("location").asText());
        }
      } catch (IOException e) {
        throw new IllegalStateException("the nodes action's answer: " + e, e);
      }
      return byId.values().toArray(new String[0]);
    }

    String marker() {
      return prefix + "open";
    }

    @Override
    public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
      return new WriterFactory(connection, schema, prefix, marker(), nodes);
    }

    @Override
    public void commit(WriterCommitMessage[] messages) {
      List<String> sources = new ArrayList<>();
      for (WriterCommitMessage message : messages) {
        if (message != null && ((Staged) message).rows > 0) {
          sources.add(((Staged) message).table);
        }
      }
      try (Connection.Client client = connection.open(null)) {
        try {
          if (!sources.isEmpty()) {
            ObjectMapper json = new ObjectMapper();
            ObjectNode body = json.createObjectNode();
            body.put("into", table);
            ArrayNode from = body.putArray("from");
            sources.forEach(from::add);
            body.put("mode", replace ? "replace" : "append");
            if (partitions != null) {
              body.put("partitions", partitions);
            }
            action(client, "publish", json.writeValueAsBytes(body));
          } else if (replace) {
            putEmpty(client, table, arrowSchema(schema));
          }
        } catch (IOException e) {
          throw new IllegalStateException("the publish action's body: " + e, e);
        } finally {
          end(client);
        }
      }
    }

    @Override
    public void abort(WriterCommitMessage[] messages) {
      try (Connection.Client client = connection.open(null)) {
        end(client);
      }
    }

    /** Drops the marker, then every staging table of the job (what publish did not take). */
    private void end(Connection.Client client) {
      delete(client, marker());
      for (FlightInfo info :
          client.flight.listFlights(
              new Criteria(prefix.getBytes(StandardCharsets.UTF_8)), client.options)) {
        delete(client, String.join("/", info.getDescriptor().getPath()));
      }
    }
  }

  /** What a task staged. */
  static final class Staged implements WriterCommitMessage {
    private static final long serialVersionUID = 1L;
    final String table;
    final long rows;

    Staged(String table, long rows) {
      this.table = table;
      this.rows = rows;
    }
  }

  /** Ships to the executors what a task needs. */
  static final class WriterFactory implements DataWriterFactory {
    private static final long serialVersionUID = 1L;
    private final Connection connection;
    private final StructType schema;
    private final String prefix;
    private final String marker;
    private final String[] nodes;

    WriterFactory(
        Connection connection, StructType schema, String prefix, String marker, String[] nodes) {
      this.connection = connection;
      this.schema = schema;
      this.prefix = prefix;
      this.marker = marker;
      this.nodes = nodes;
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
      String name =
          prefix + partitionId + "-" + taskId + "-" + UUID.randomUUID().toString().substring(0, 8);
      String node = nodes.length == 0 ? null : nodes[partitionId % nodes.length];
      return new TaskWriter(connection, schema, name, marker, node);
    }
  }

  /**
   * One task: its rows into Arrow batches, streamed by one DoPut to its staging table, through
   * its node if it has one that answers (which keeps the rows), else through the job's server.
   */
  static final class TaskWriter implements DataWriter<InternalRow> {
    /** The put's options when its node keeps its rows, sent before the first batch. */
    private static final byte[] HERE = "{\"place\":\"here\"}".getBytes(StandardCharsets.UTF_8);

    private final Connection.Client client;
    private final String name;
    private final String marker;
    private final RowBatches writer;
    private final FlightClient.ClientStreamListener put;
    private int pending;
    private long rows;

    TaskWriter(Connection connection, StructType schema, String name, String marker, String node) {
      Connection.Client atNode = node == null ? null : answering(connection, node);
      this.client = atNode != null ? atNode : connection.open(null);
      this.name = name;
      this.marker = marker;
      this.writer =
          RowBatches.of(schema, arrowSchema(schema), client.allocator, BATCH_ROWS);
      this.put =
          client.flight.startPut(
              FlightDescriptor.path(name), writer.root(), new AsyncPutListener(), client.options);
      if (atNode != null) {
        // Before the first batch, as the Python client sends its options.
        ArrowBuf options = client.allocator.buffer(HERE.length);
        options.writeBytes(HERE);
        put.putMetadata(options); // the put takes the buffer
      }
    }

    /** A client of {@code node} if it answers now; null if it does not (gone since the job began). */
    private static Connection.Client answering(Connection connection, String node) {
      Connection.Client client = null;
      try {
        client = connection.open(node);
        action(client, "health", new byte[0]);
        return client;
      } catch (RuntimeException e) {
        if (client != null) {
          client.close();
        }
        return null;
      }
    }

    @Override
    public void write(InternalRow row) {
      writer.write(row);
      pending++;
      rows++;
      if (pending == BATCH_ROWS) {
        flush();
      }
    }

    private void flush() {
      writer.finish();
      put.putNext();
      writer.reset();
      pending = 0;
    }

    @Override
    public WriterCommitMessage commit() {
      if (pending > 0) {
        flush();
      }
      put.completed();
      put.getResult();
      // A task that ends after its job did (an attempt Spark gave up on) removes what it
      // staged: the job drops its marker before it deletes the job's tables, so either that
      // deletion saw this table or this check sees no marker.
      if (!exists(client, marker)) {
        delete(client, name);
        throw new IllegalStateException("the write job ended before this task did");
      }
      return new Staged(name, rows);
    }

    @Override
    public void abort() {
      try {
        put.error(new RuntimeException("the Spark task was aborted"));
      } catch (RuntimeException e) {
        // The put may have ended already; what it staged is deleted below or by the job.
      }
      delete(client, name);
    }

    @Override
    public void close() {
      writer.close();
      client.close();
    }
  }

  /** The Arrow schema of rows of {@code schema}, as the task writers send them. */
  static Schema arrowSchema(StructType schema) {
    // Strings and binaries with 4-byte offsets (largeVarTypes false), as Spark's ArrowWriter
    // makes them: a table an empty overwrite made takes the appends of a job with rows.
    return ArrowUtils.toArrowSchema(schema, "UTC", true, false, false);
  }

  static void putEmpty(Connection.Client client, String name, Schema schema) {
    try (VectorSchemaRoot empty = VectorSchemaRoot.create(schema, client.allocator)) {
      FlightClient.ClientStreamListener put =
          client.flight.startPut(
              FlightDescriptor.path(name), empty, new AsyncPutListener(), client.options);
      put.completed();
      put.getResult();
    }
  }

  static byte[] action(Connection.Client client, String type, byte[] body) {
    Iterator<Result> results = client.flight.doAction(new Action(type, body), client.options);
    byte[] last = new byte[0];
    while (results.hasNext()) {
      last = results.next().getBody();
    }
    return last;
  }

  static boolean exists(Connection.Client client, String name) {
    try {
      client.flight.getSchema(FlightDescriptor.path(name), client.options);
      return true;
    } catch (FlightRuntimeException e) {
      if (e.status().code() == FlightStatusCode.NOT_FOUND) {
        return false;
      }
      throw e;
    }
  }

  static void delete(Connection.Client client, String name) {
    try {
      action(client, "delete", name.getBytes(StandardCharsets.UTF_8));
    } catch (FlightRuntimeException e) {
      if (e.status().code() != FlightStatusCode.NOT_FOUND) {
        throw e;
      }
    }
  }
}

package quiver.spark;

import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.BaseVariableWidthVector;
import org.apache.arrow.vector.DecimalVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.arrow.ArrowWriter;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A write task's rows gathered into Arrow batches of at most {@code capacity} rows, in the
 * vectors of one {@link VectorSchemaRoot} that every batch reuses.
 *
 * <p>Spark's own {@link ArrowWriter} sets each value with Arrow Java's {@code setSafe}, which
 * checks the vector's capacity value by value: in a JFR profile of Spark writing quiver's taxi
 * rows that check alone took 19% of the executors' samples (docs/performance.md, "Spark reading
 * and writing Arrow buffers directly"). When every column is of a primitive, date, timestamp,
 * decimal (up to 18 digits), string or binary type, {@link #of} gives a writer that allocates
 * the batch's vectors once and writes each value with one {@link Platform} write at its address;
 * a variable-width column checks its data buffer's room once per value. Other schemas get
 * Spark's writer.
 */
abstract class RowBatches implements AutoCloseable {
  /** The vectors the batches are written into. */
  abstract VectorSchemaRoot root();

  /** Appends {@code row}. At most {@code capacity} rows between two {@link #reset}s. */
  abstract void write(InternalRow row);

  /** Sets the root's row count to the rows written since the last {@link #reset}. */
  abstract void finish();

  /** Empties the vectors for the next batch. */
  abstract void reset();

  @Override
  public void close() {
    root().close();
  }

  /**
   * Batches of rows of {@code schema}, in vectors of {@code allocator} made from {@code
   * arrowSchema} ({@link QuiverWrite#arrowSchema}: strings and binaries with 4-byte offsets).
   */
  static RowBatches of(
      StructType schema, Schema arrowSchema, BufferAllocator allocator, int capacity) {
    VectorSchemaRoot root = VectorSchemaRoot.create(arrowSchema, allocator);
    StructField[] fields = schema.fields();
    Kind[] kinds = new Kind[fields.length];
    for (int i = 0; i < fields.length; i++) {
      kinds[i] = kind(fields[i].dataType());
      if (kinds[i] == null) {
        return new SparkWriter(ArrowWriter.create(root));
      }
    }
    return new DirectWriter(fields, kinds, root, capacity);
  }

  /** Spark's own writer. */
  private static final class SparkWriter extends RowBatches {
    private final ArrowWriter writer;

    SparkWriter(ArrowWriter writer) {
      this.writer = writer;
    }

    @Override
    VectorSchemaRoot root() {
      return writer.root();
    }

    @Override
    void write(InternalRow row) {
      writer.write(row);
    }

    @Override
    void finish() {
      writer.finish();
    }

    @Override
    void reset() {
      writer.reset();
    }
  }

  /** How a column's values are written. */
  private enum Kind {
    BOOLEAN,
    BYTE,
    SHORT,
    INT,
    LONG,
    FLOAT,
    DOUBLE,
    DECIMAL,
    STRING,
    BINARY
  }

  /** The kind of {@code type}, or null when the direct writer does not write it. */
  private static Kind kind(DataType type) {
    if (type instanceof BooleanType) {
      return Kind.BOOLEAN;
    }
    if (type instanceof ByteType) {
      return Kind.BYTE;
    }
    if (type instanceof ShortType) {
      return Kind.SHORT;
    }
    if (type instanceof IntegerType || type instanceof DateType) {
      return Kind.INT;
    }
    if (type instanceof LongType
        || type instanceof TimestampType
        || type instanceof TimestampNTZType) {
      return Kind.LONG;
    }
    if (type instanceof FloatType) {
      return Kind.FLOAT;
    }
    if (type instanceof DoubleType) {
      return Kind.DOUBLE;
    }
    if (type instanceof DecimalType
        && ((DecimalType) type).precision() <= Decimal.MAX_LONG_DIGITS()) {
      return Kind.DECIMAL;
    }
    if (type instanceof StringType) {
      return Kind.STRING;
    }
    if (type instanceof BinaryType) {
      return Kind.BINARY;
    }
    return null;
  }

  /** The direct writer (class docs). */
  private static final class DirectWriter extends RowBatches {
    private final VectorSchemaRoot root;
    private final Column[] columns;
    private final int capacity;
    private int rows;

    DirectWriter(StructField[] fields, Kind[] kinds, VectorSchemaRoot root, int capacity) {
      this.root = root;
      this.capacity = capacity;
      this.columns = new Column[fields.length];
      try {
        for (int i = 0; i < fields.length; i++) {
          FieldVector vector = root.getVector(i);
          vector.setInitialCapacity(capacity);
          vector.allocateNew();
          columns[i] = new Column(kinds[i], fields[i].dataType(), vector);
        }
      } catch (RuntimeException e) {
        root.close();
        throw e;
      }
    }

    @Override
    VectorSchemaRoot root() {
      return root;
    }

    @Override
    void write(InternalRow row) {
      if (rows == capacity) {
        throw new IllegalStateException("a batch holds at most " + capacity + " rows");
      }
      for (int i = 0; i < columns.length; i++) {
        columns[i].write(row, i, rows);
      }
      rows++;
    }

    @Override
    void finish() {
      for (Column column : columns) {
        column.finish(rows);
      }
      root.setRowCount(rows);
    }

    @Override
    void reset() {
      for (Column column : columns) {
        column.reset();
      }
      rows = 0;
    }
  }

  /** One column of the direct writer: its vector's addresses, refreshed when it grows. */
  private static final class Column {
    private final Kind kind;
    /** Whether it is a string or binary column, whose values are appended to its data. */
    private final boolean variable;
    private final FieldVector vector;
    private final int precision;
    private final int scale;
    private long validity;
    private long values;
    private long offsets;
    /** A variable-width column's data bytes written this batch. */
    private long end;
    /** A variable-width column's data buffer's capacity. */
    private long room;

    Column(Kind kind, DataType type, FieldVector vector) {
      this.kind = kind;
      this.variable = kind == Kind.STRING || kind == Kind.BINARY;
      this.vector = vector;
      DecimalType decimal = type instanceof DecimalType ? (DecimalType) type : null;
      this.precision = decimal == null ? 0 : decimal.precision();
      this.scale = decimal == null ? 0 : decimal.scale();
      addresses();
    }

    private void addresses() {
      validity = vector.getValidityBuffer().memoryAddress();
      values = vector.getDataBuffer().memoryAddress();
      if (variable) {
        offsets = vector.getOffsetBuffer().memoryAddress();
        room = vector.getDataBuffer().capacity();
      }
    }

    void write(InternalRow row, int ordinal, int index) {
      if (row.isNullAt(ordinal)) {
        // The validity bit stays 0; a variable-width value is empty.
        if (variable) {
          Platform.putInt(null, offsets + 4L * (index + 1), (int) end);
        }
        return;
      }
      switch (kind) {
        case BOOLEAN:
          if (row.getBoolean(ordinal)) {
            setBit(values, index);
          }
          break;
        case BYTE:
          Platform.putByte(null, values + index, row.getByte(ordinal));
          break;
        case SHORT:
          Platform.putShort(null, values + 2L * index, row.getShort(ordinal));
          break;
        case INT:
          Platform.putInt(null, values + 4L * index, row.getInt(ordinal));
          break;
        case LONG:
          Platform.putLong(null, values + 8L * index, row.getLong(ordinal));
          break;
        case FLOAT:
          Platform.putFloat(null, values + 4L * index, row.getFloat(ordinal));
          break;
        case DOUBLE:
          Platform.putDouble(null, values + 8L * index, row.getDouble(ordinal));
          break;
        case DECIMAL:
          {
            // As Spark's writer: a value that does not fit the column's type is null.
            Decimal decimal = row.getDecimal(ordinal, precision, scale);
            if (!decimal.changePrecision(precision, scale)) {
              return;
            }
            long unscaled = decimal.toUnscaledLong();
            long at = values + (long) DecimalVector.TYPE_WIDTH * index;
            Platform.putLong(null, at, unscaled);
            // The high 8 bytes: the sign, extended.
            Platform.putLong(null, at + 8, unscaled >> 63);
            break;
          }
        case STRING:
          {
            UTF8String text = row.getUTF8String(ordinal);
            append(text.getBaseObject(), text.getBaseOffset(), text.numBytes(), index);
            break;
          }
        case BINARY:
          {
            byte[] bytes = row.getBinary(ordinal);
            append(bytes, Platform.BYTE_ARRAY_OFFSET, bytes.length, index);
            break;
          }
      }
      setBit(validity, index);
    }

    /** Appends {@code length} bytes at {@code base}+{@code offset} as value {@code index}. */
    private void append(Object base, long offset, int length, int index) {
      if (end + length > room) {
        ((BaseVariableWidthVector) vector).reallocDataBuffer(end + length);
        addresses();
      }
      Platform.copyMemory(base, offset, null, values + end, length);
      end += length;
      Platform.putInt(null, offsets + 4L * (index + 1), (int) end);
    }

    private static void setBit(long address, int index) {
      long at = address + (index >>> 3);
      Platform.putByte(null, at, (byte) (Platform.getByte(null, at) | (1 << (index & 7))));
    }

    void finish(int rows) {
      if (variable) {
        // The offsets are written: nothing for setValueCount to fill.
        ((BaseVariableWidthVector) vector).setLastSet(rows - 1);
      }
    }

    void reset() {
      // Only set bits need clearing: the next batch writes every value it has.
      vector.getValidityBuffer().setZero(0, vector.getValidityBuffer().capacity());
      if (kind == Kind.BOOLEAN) {
        vector.getDataBuffer().setZero(0, vector.getDataBuffer().capacity());
      }
      end = 0;
    }
  }
}

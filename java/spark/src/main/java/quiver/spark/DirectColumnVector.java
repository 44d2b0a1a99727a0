package quiver.spark;

import java.math.BigDecimal;
import org.apache.arrow.vector.BaseLargeVariableWidthVector;
import org.apache.arrow.vector.BaseVariableWidthVector;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.BitVector;
import org.apache.arrow.vector.DateDayVector;
import org.apache.arrow.vector.DecimalVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.Float8Vector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.LargeVarBinaryVector;
import org.apache.arrow.vector.LargeVarCharVector;
import org.apache.arrow.vector.SmallIntVector;
import org.apache.arrow.vector.TimeStampMicroTZVector;
import org.apache.arrow.vector.TimeStampMicroVector;
import org.apache.arrow.vector.TinyIntVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A column of a primitive, string or binary type that Spark reads straight from the memory of
 * the Arrow buffers its batch was loaded into, as Spark's own vectorized Parquet reader reads
 * its off-heap vectors.
 *
 * <p>Spark's {@link ArrowColumnVector} reads each value through Arrow Java's {@code ArrowBuf},
 * which checks the index against the buffer and the buffer's reference count on every read:
 * profiled in Spark reading quiver's taxi rows, more than half of the executors' samples were in
 * those checks and {@code isNullAt} (docs/performance.md, "Spark reading and writing Arrow
 * buffers directly"). Here a value is one {@link Platform} read at an address taken once per
 * batch, and a column without nulls answers {@code isNullAt} without reading memory.
 *
 * <p>The addresses are valid until the stream loads its next batch into the same vectors: the
 * reader calls {@link #load()} after each, and Spark reads a batch only before asking for the
 * next one. Other types (nested, views, intervals) are read by {@link ArrowColumnVector}: {@link
 * #of} chooses.
 */
final class DirectColumnVector extends ColumnVector {
  private final FieldVector vector;
  /** The bytes of an offset of a variable-width column (4, or 8 for a large one), else 0. */
  private final int offsetWidth;
  /** The validity bitmap's address, or 0 when the batch has no nulls in this column. */
  private long validity;
  /** The values' address (the bits of a boolean column). */
  private long values;
  /** The offsets' address of a variable-width column. */
  private long offsets;
  private int nulls;

  private DirectColumnVector(FieldVector vector, int offsetWidth) {
    super(ArrowUtils.fromArrowField(vector.getField()));
    this.vector = vector;
    this.offsetWidth = offsetWidth;
    load();
  }

  /** The column Spark reads {@code vector} through. */
  static ColumnVector of(FieldVector vector) {
    if (vector instanceof BitVector
        || vector instanceof TinyIntVector
        || vector instanceof SmallIntVector
        || vector instanceof IntVector
        || vector instanceof BigIntVector
        || vector instanceof Float4Vector
        || vector instanceof Float8Vector
        || vector instanceof DateDayVector
        || vector instanceof TimeStampMicroTZVector
        || vector instanceof TimeStampMicroVector
        || vector instanceof DecimalVector) {
      return new DirectColumnVector(vector, 0);
    }
    if (vector instanceof VarCharVector || vector instanceof VarBinaryVector) {
      return new DirectColumnVector(vector, BaseVariableWidthVector.OFFSET_WIDTH);
    }
    if (vector instanceof LargeVarCharVector || vector instanceof LargeVarBinaryVector) {
      return new DirectColumnVector(vector, BaseLargeVariableWidthVector.OFFSET_WIDTH);
    }
    return new BorrowedArrowColumnVector(vector);
  }

  /**
   * Spark's reader of any Arrow vector, but for a vector it does not own: Spark closes a
   * batch's columns once it has read them ({@code closeIfFreeable}), and Spark's own column
   * would close the vector, which a stream loads its next batch into (a struct's close drops
   * its children: the next load fails). The stream, or the mapping, closes the vector.
   */
  private static final class BorrowedArrowColumnVector extends ArrowColumnVector {
    BorrowedArrowColumnVector(FieldVector vector) {
      super(vector);
    }

    @Override
    public void close() {}
  }

  /** Takes the addresses of the batch the vector now holds. */
  void load() {
    nulls = vector.getNullCount();
    validity = nulls == 0 ? 0 : vector.getValidityBuffer().memoryAddress();
    values = vector.getDataBuffer().memoryAddress();
    if (offsetWidth != 0) {
      offsets = vector.getOffsetBuffer().memoryAddress();
    }
  }

  @Override
  public void close() {
    // The stream owns the vector and closes it.
  }

  @Override
  public boolean hasNull() {
    return nulls > 0;
  }

  @Override
  public int numNulls() {
    return nulls;
  }

  @Override
  public boolean isNullAt(int rowId) {
    return validity != 0 && !bit(validity, rowId);
  }

  @Override
  public boolean getBoolean(int rowId) {
    return bit(values, rowId);
  }

  /** Bit {@code index} of the bitmap at {@code address}. */
  private static boolean bit(long address, int index) {
    return (Platform.getByte(null, address + (index >>> 3)) & (1 << (index & 7))) != 0;
  }

  @Override
  public byte getByte(int rowId) {
    return Platform.getByte(null, values + rowId);
  }

  @Override
  public short getShort(int rowId) {
    return Platform.getShort(null, values + 2L * rowId);
  }

  @Override
  public int getInt(int rowId) {
    return Platform.getInt(null, values + 4L * rowId);
  }

  @Override
  public long getLong(int rowId) {
    return Platform.getLong(null, values + 8L * rowId);
  }

  @Override
  public float getFloat(int rowId) {
    return Platform.getFloat(null, values + 4L * rowId);
  }

  @Override
  public double getDouble(int rowId) {
    return Platform.getDouble(null, values + 8L * rowId);
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    if (isNullAt(rowId)) {
      return null;
    }
    if (precision <= Decimal.MAX_LONG_DIGITS()) {
      // The value fits in the low 8 of its 16 little-endian bytes.
      long unscaled = Platform.getLong(null, values + (long) DecimalVector.TYPE_WIDTH * rowId);
      return Decimal.createUnsafe(unscaled, precision, scale);
    }
    BigDecimal value = ((DecimalVector) vector).getObject(rowId);
    return Decimal.apply(value, precision, scale);
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    if (isNullAt(rowId)) {
      return null;
    }
    long start = start(rowId);
    return UTF8String.fromAddress(null, values + start, (int) (start(rowId + 1) - start));
  }

  @Override
  public byte[] getBinary(int rowId) {
    if (isNullAt(rowId)) {
      return null;
    }
    long start = start(rowId);
    byte[] bytes = new byte[(int) (start(rowId + 1) - start)];
    Platform.copyMemory(null, values + start, bytes, Platform.BYTE_ARRAY_OFFSET, bytes.length);
    return bytes;
  }

  /** Where value {@code rowId} of a variable-width column starts in its data. */
  private long start(int rowId) {
    long at = offsets + (long) offsetWidth * rowId;
    return offsetWidth == BaseLargeVariableWidthVector.OFFSET_WIDTH
        ? Platform.getLong(null, at)
        : Platform.getInt(null, at);
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    throw new UnsupportedOperationException("not an array column: " + vector.getField());
  }

  @Override
  public ColumnarMap getMap(int rowId) {
    throw new UnsupportedOperationException("not a map column: " + vector.getField());
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    throw new UnsupportedOperationException("not a struct column: " + vector.getField());
  }
}

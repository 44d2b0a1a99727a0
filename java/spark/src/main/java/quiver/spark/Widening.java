package quiver.spark;

import java.math.BigDecimal;
import java.util.function.IntConsumer;
import org.apache.arrow.vector.BaseIntVector;
import org.apache.arrow.vector.DecimalVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.Float2Vector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.UInt8Vector;
import org.apache.arrow.vector.types.FloatingPointPrecision;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.FieldType;

/**
 * Arrow types Spark has no type for, read as the next wider one it has, as the Python connector
 * reads them: {@code uint8} as {@code short}, {@code uint16} as {@code int}, {@code uint32} as
 * {@code long}, {@code uint64} as {@code decimal(20, 0)}, {@code float16} as {@code float}.
 * Top-level columns only (and a dictionary's values); Spark refuses such a type inside a struct,
 * list or map, and the load says which column.
 */
final class Widening {
  /** The Spark field metadata key that marks a widened column: the stored Arrow type. */
  static final String STORED_TYPE = "quiver.stored_type";

  private Widening() {}

  /** The type {@code type} is read as, or null when Spark takes it as it is. */
  static ArrowType wider(ArrowType type) {
    if (type instanceof ArrowType.Int) {
      ArrowType.Int integer = (ArrowType.Int) type;
      if (integer.getIsSigned()) {
        return null;
      }
      return integer.getBitWidth() == 64
          ? new ArrowType.Decimal(20, 0, 128)
          : new ArrowType.Int(integer.getBitWidth() * 2, true);
    }
    if (type instanceof ArrowType.FloatingPoint
        && ((ArrowType.FloatingPoint) type).getPrecision() == FloatingPointPrecision.HALF) {
      return new ArrowType.FloatingPoint(FloatingPointPrecision.SINGLE);
    }
    return null;
  }

  /** The field Spark reads for {@code field}: a dictionary's values, widened if need be. */
  static Field readable(Field field) {
    ArrowType type = field.getType();
    ArrowType wider = wider(type);
    if (field.getDictionary() == null && wider == null) {
      return field;
    }
    return new Field(
        field.getName(),
        new FieldType(field.isNullable(), wider == null ? type : wider, null),
        field.getChildren());
  }

  /**
   * {@code vector} widened into a new vector of its allocator (the caller closes it), or null
   * when Spark reads it as it is.
   */
  static FieldVector widen(FieldVector vector) {
    ArrowType wider = wider(vector.getField().getType());
    if (wider == null) {
      return null;
    }
    int rows = vector.getValueCount();
    FieldVector out =
        new Field(vector.getName(), new FieldType(true, wider, null), null)
            .createVector(vector.getAllocator());
    out.setInitialCapacity(rows);
    out.allocateNew();
    try {
      IntConsumer copy = copier(vector, out);
      for (int i = 0; i < rows; i++) {
        if (vector.isNull(i)) {
          out.setNull(i);
        } else {
          copy.accept(i);
        }
      }
      out.setValueCount(rows);
      return out;
    } catch (RuntimeException e) {
      out.close();
      throw e;
    }
  }

  /** What copies row {@code i}, not null, of {@code in} into {@code out}, widened. */
  private static IntConsumer copier(FieldVector in, FieldVector out) {
    if (in instanceof Float2Vector) {
      Float2Vector halves = (Float2Vector) in;
      Float4Vector floats = (Float4Vector) out;
      return i -> floats.set(i, halves.getValueAsFloat(i));
    }
    if (in instanceof UInt8Vector) {
      UInt8Vector longs = (UInt8Vector) in;
      DecimalVector decimals = (DecimalVector) out;
      return i -> {
        long bits = longs.get(i);
        if (bits >= 0) {
          decimals.set(i, bits);
        } else {
          decimals.set(i, new BigDecimal(Long.toUnsignedString(bits)));
        }
      };
    }
    // uint8, uint16, uint32: each value fits the signed type of twice the width.
    BaseIntVector narrow = (BaseIntVector) in;
    BaseIntVector wide = (BaseIntVector) out;
    return i -> wide.setWithPossibleTruncate(i, narrow.getValueAsLong(i));
  }
}

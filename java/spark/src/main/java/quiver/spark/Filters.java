package quiver.spark;

import java.math.BigDecimal;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Literal;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;

/**
 * Spark's pushed predicates as the SQL a quiver ticket's filter takes (docs/protocol.md,
 * "Column selection and filters"): comparisons, IN, null tests, {@code <=>}, string prefix,
 * suffix and containment, and AND/OR/NOT of those, over top-level columns and literals of
 * numbers, strings, booleans, dates and timestamps. Anything else stays with Spark ({@link
 * #toSql} gives null).
 */
final class Filters {
  private Filters() {}

  /** {@code predicate} as SQL, or null when quiver cannot apply it. */
  static String toSql(Predicate predicate) {
    Expression[] args = predicate.children();
    switch (predicate.name()) {
      case "=":
      case "<>":
      case "<":
      case "<=":
      case ">":
      case ">=":
        return comparison(args, predicate.name());
      case "<=>":
        return comparison(args, "IS NOT DISTINCT FROM");
      case "IS_NULL":
        return nullTest(args, "IS NULL");
      case "IS_NOT_NULL":
        return nullTest(args, "IS NOT NULL");
      case "IN":
        return in(args);
      case "STARTS_WITH":
        return call("starts_with(%s, %s)", args);
      case "ENDS_WITH":
        return call("ends_with(%s, %s)", args);
      case "CONTAINS":
        return call("strpos(%s, %s) > 0", args);
      case "AND":
      case "OR":
        {
          String left = args[0] instanceof Predicate ? toSql((Predicate) args[0]) : null;
          String right = args[1] instanceof Predicate ? toSql((Predicate) args[1]) : null;
          return left == null || right == null
              ? null
              : "(" + left + ") " + predicate.name() + " (" + right + ")";
        }
      case "NOT":
        {
          String inner = args[0] instanceof Predicate ? toSql((Predicate) args[0]) : null;
          return inner == null ? null : "NOT (" + inner + ")";
        }
      default:
        return null;
    }
  }

  private static String comparison(Expression[] args, String op) {
    String column = column(args[0]);
    String value = literal(args[1]);
    if (column != null && value != null) {
      return column + " " + op + " " + value;
    }
    // `5 < x`: the same comparison, mirrored.
    column = column(args[1]);
    value = literal(args[0]);
    if (column == null || value == null) {
      return null;
    }
    String mirrored;
    switch (op) {
      case "<":
        mirrored = ">";
        break;
      case "<=":
        mirrored = ">=";
        break;
      case ">":
        mirrored = "<";
        break;
      case ">=":
        mirrored = "<=";
        break;
      default:
        mirrored = op;
    }
    return column + " " + mirrored + " " + value;
  }

  private static String nullTest(Expression[] args, String test) {
    String column = column(args[0]);
    return column == null ? null : column + " " + test;
  }

  private static String in(Expression[] args) {
    String column = column(args[0]);
    if (column == null) {
      return null;
    }
    List<String> values = new ArrayList<>();
    for (int i = 1; i < args.length; i++) {
      String value = literal(args[i]);
      if (value == null) {
        return null;
      }
      values.add(value);
    }
    return values.isEmpty() ? "FALSE" : column + " IN (" + String.join(", ", values) + ")";
  }

  private static String call(String form, Expression[] args) {
    String column = column(args[0]);
    String value =
        args[1] instanceof Literal && ((Literal<?>) args[1]).dataType() == DataTypes.StringType
            ? literal(args[1])
            : null;
    return column == null || value == null ? null : String.format(form, column, value);
  }

  /** A top-level column, quoted; null for anything else. */
  static String column(Expression e) {
    if (!(e instanceof NamedReference)) {
      return null;
    }
    String[] names = ((NamedReference) e).fieldNames();
    return names.length == 1 ? quote(names[0]) : null;
  }

  static String quote(String name) {
    return "\"" + name.replace("\"", "\"\"") + "\"";
  }

  /**
   * A literal as SQL, by its Spark type (not its Java class: a date is an int of days, a
   * timestamp a long of microseconds); null for a type with no literal here.
   */
  static String literal(Expression e) {
    if (!(e instanceof Literal)) {
      return null;
    }
    Literal<?> literal = (Literal<?>) e;
    Object value = literal.value();
    DataType type = literal.dataType();
    if (value == null) {
      return null;
    }
    if (type == DataTypes.StringType) {
      return "'" + value.toString().replace("'", "''") + "'";
    }
    if (type == DataTypes.BooleanType) {
      return ((Boolean) value) ? "TRUE" : "FALSE";
    }
    if (type == DataTypes.ByteType
        || type == DataTypes.ShortType
        || type == DataTypes.IntegerType
        || type == DataTypes.LongType) {
      return value.toString();
    }
    if (type == DataTypes.FloatType || type == DataTypes.DoubleType) {
      double d = ((Number) value).doubleValue();
      // NaN and the infinities have no SQL literal: Spark keeps such filters.
      return Double.isFinite(d) ? BigDecimal.valueOf(d).toPlainString() : null;
    }
    if (type instanceof DecimalType) {
      return ((Decimal) value).toJavaBigDecimal().toPlainString();
    }
    if (type == DataTypes.DateType) {
      return "CAST('" + LocalDate.ofEpochDay((Integer) value) + "' AS DATE)";
    }
    if (type == DataTypes.TimestampType) {
      // An instant, compared as one with a column of any zone (a plain TIMESTAMP literal
      // would be read in the column's zone).
      return "arrow_cast('"
          + instant((Long) value)
          + "', 'Timestamp(Microsecond, Some(\"UTC\"))')";
    }
    if (type == DataTypes.TimestampNTZType) {
      Instant at = instant((Long) value);
      return "CAST('" + LocalDateTime.ofInstant(at, ZoneOffset.UTC) + "' AS TIMESTAMP)";
    }
    return null;
  }

  private static Instant instant(long micros) {
    return Instant.ofEpochSecond(
        Math.floorDiv(micros, 1_000_000L), Math.floorMod(micros, 1_000_000L) * 1_000L);
  }
}

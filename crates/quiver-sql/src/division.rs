//! `/` with a decimal operand divides as doubles, as DuckDB does.
//!
//! DataFusion gives `decimal(p1, s1) / decimal(p2, s2)` a decimal type whose
//! scale is often no more than 6 (`decimal(17, 2) / decimal(23, 6)` is a
//! `decimal(27, 6)`), and arrow-rs cuts the quotient to that scale instead
//! of rounding it: `2749.75 / 2884.363333` answers 0.953329 where the
//! quotient is 0.9533299602…, and a ratio of such values times 100 shows
//! digits no other engine shows. PostgreSQL would widen the scale and round;
//! DuckDB computes the quotient as a `double`. quiver follows DuckDB, the
//! engine its users compare it with most: one rule that needs no scale
//! arithmetic, gives the same digits DuckDB prints, and is what an analyst
//! who wants a fixed scale rounds or casts explicitly
//! (`round(a / b, 4)`, `CAST(a / b AS DECIMAL(10, 4))`). docs/protocol.md
//! says so to users.
//!
//! [`DecimalDivision`] is a DataFusion function rewrite: it runs in the
//! analyzer before type coercion, over every expression of every plan, and
//! the analyzer keeps each rewritten expression's name (`a / b` stays named
//! so). A `/` where one operand is a decimal and the other a decimal or an
//! integer becomes the division of both as `double`s: an integer cast, a
//! decimal through [`decimal_to_double`]. Integer `/` integer keeps its
//! integer quotient; `%` and every other operator keep their decimal results.
//!
//! [`decimal_to_double`] is the nearest double to a decimal's value, as
//! DuckDB converts. arrow-rs's cast divides the unscaled integer, itself
//! first rounded to a double, by 10^scale: two roundings, so a value of more
//! than 15 digits can land one unit in the last place off (42913917145492803
//! at scale 1 gives 4291391714549280.0, not 4291391714549280.5), and so would
//! its quotient. Values of at most 2^53 at scales up to 22 are converted the
//! same way, exactly then rounded once; larger ones are parsed from their
//! digits, which Rust rounds correctly.

use std::io::Write;
use std::sync::{Arc, LazyLock};

use arrow::array::{Array, ArrayRef, AsArray, Float64Array};
use arrow::compute::kernels::cast::cast as cast_array;
use arrow::datatypes::{DataType, Decimal128Type, Decimal256Type, Float64Type};
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, exec_err, utils::take_function_args};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::logical_expr::expr::BinaryExpr;
use datafusion::logical_expr::expr_rewriter::FunctionRewrite;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, Operator, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility, cast,
};

/// The function rewrite (module docs).
#[derive(Debug, Default)]
pub(crate) struct DecimalDivision;

impl FunctionRewrite for DecimalDivision {
    fn name(&self) -> &str {
        "decimal_division_as_double"
    }

    fn rewrite(
        &self,
        expr: Expr,
        schema: &DFSchema,
        _config: &ConfigOptions,
    ) -> Result<Transformed<Expr>> {
        let Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Divide,
            right,
        }) = &expr
        else {
            return Ok(Transformed::no(expr));
        };
        // An operand whose type cannot be told (a parameter not bound yet)
        // leaves the division as it is.
        let (Ok(left_type), Ok(right_type)) = (left.get_type(schema), right.get_type(schema))
        else {
            return Ok(Transformed::no(expr));
        };
        let exact = |t: &DataType| is_decimal(t) || t.is_integer();
        if !(is_decimal(&left_type) || is_decimal(&right_type))
            || !(exact(&left_type) && exact(&right_type))
        {
            return Ok(Transformed::no(expr));
        }
        let Expr::BinaryExpr(BinaryExpr { left, right, .. }) = expr else {
            return Ok(Transformed::no(expr));
        };
        let double = |operand: Expr, kind: &DataType| {
            if is_decimal(kind) {
                DECIMAL_TO_DOUBLE.call(vec![operand])
            } else {
                cast(operand, DataType::Float64)
            }
        };
        Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
            Box::new(double(*left, &left_type)),
            Operator::Divide,
            Box::new(double(*right, &right_type)),
        ))))
    }
}

fn is_decimal(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Decimal32(..)
            | DataType::Decimal64(..)
            | DataType::Decimal128(..)
            | DataType::Decimal256(..)
    )
}

static DECIMAL_TO_DOUBLE: LazyLock<Arc<ScalarUDF>> =
    LazyLock::new(|| Arc::new(ScalarUDF::new_from_impl(DecimalToDouble::default())));

/// `decimal_to_double(x)`: the nearest double to decimal `x` (module docs).
/// Every session that runs quiver's plans registers it: the engine's, and a
/// cluster's workers', which decode it by name.
pub fn decimal_to_double() -> Arc<ScalarUDF> {
    Arc::clone(&DECIMAL_TO_DOUBLE)
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct DecimalToDouble {
    signature: Signature,
}

impl Default for DecimalToDouble {
    fn default() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for DecimalToDouble {
    fn name(&self) -> &str {
        "decimal_to_double"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [input] =
            take_function_args(self.name(), ColumnarValue::values_to_arrays(&args.args)?)?;
        let doubles: ArrayRef = match input.data_type() {
            DataType::Decimal128(_, scale) => Arc::new(
                input
                    .as_primitive::<Decimal128Type>()
                    .unary::<_, Float64Type>(|x| nearest(x, *scale)),
            ),
            // Widened without loss, then the same.
            DataType::Decimal32(precision, scale) | DataType::Decimal64(precision, scale) => {
                let wide = cast_array(&input, &DataType::Decimal128(*precision, *scale))?;
                Arc::new(
                    wide.as_primitive::<Decimal128Type>()
                        .unary::<_, Float64Type>(|x| nearest(x, *scale)),
                )
            }
            DataType::Decimal256(_, scale) => {
                let decimals = input.as_primitive::<Decimal256Type>();
                let values: Float64Array = decimals
                    .iter()
                    .map(|x| x.map(|x| parsed(format_args!("{x}e{}", -i32::from(*scale)))))
                    .collect();
                Arc::new(values)
            }
            other => return exec_err!("decimal_to_double takes a decimal, not {other}"),
        };
        Ok(ColumnarValue::Array(doubles))
    }
}

/// 10^0 … 10^22: every power of ten a double holds exactly.
const POWERS_OF_TEN: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The nearest double to `x` × 10^-`scale`.
fn nearest(x: i128, scale: i8) -> f64 {
    const EXACT: u128 = 1 << 53;
    match usize::try_from(scale) {
        Ok(scale) if scale < POWERS_OF_TEN.len() && x.unsigned_abs() <= EXACT => {
            // Both exact as doubles: one rounding, in the division.
            x as f64 / POWERS_OF_TEN[scale]
        }
        _ => parsed(format_args!("{x}e{}", -i32::from(scale))),
    }
}

/// A number written out, parsed to the nearest double (Rust's parser
/// rounds correctly). Written on the stack: an `i256` has at most 77
/// digits, with its sign and exponent under 96 bytes.
fn parsed(number: std::fmt::Arguments<'_>) -> f64 {
    let mut buffer = [0u8; 96];
    let mut cursor = std::io::Cursor::new(&mut buffer[..]);
    let written = cursor.write_fmt(number).is_ok();
    let length = usize::try_from(cursor.position()).unwrap_or(0);
    match std::str::from_utf8(&buffer[..length]) {
        Ok(text) if written => text.parse().unwrap_or(f64::NAN),
        _ => f64::NAN,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{DataType, Float64Type};
    use datafusion::execution::{FunctionRegistry, SessionStateBuilder};
    use datafusion::prelude::SessionContext;

    use super::{DecimalDivision, nearest};

    async fn one(context: &SessionContext, sql: &str) -> (DataType, String, Option<f64>) {
        let batches = context.sql(sql).await.unwrap().collect().await.unwrap();
        let column = batches[0].column(0);
        let name = batches[0].schema().field(0).name().clone();
        let value = (column.data_type() == &DataType::Float64 && column.is_valid(0))
            .then(|| column.as_primitive::<Float64Type>().value(0));
        (column.data_type().clone(), name, value)
    }

    fn context(rewrite: bool) -> SessionContext {
        let mut state = SessionStateBuilder::new().with_default_features().build();
        if rewrite {
            state
                .register_function_rewrite(Arc::new(DecimalDivision))
                .unwrap();
            state.register_udf(super::decimal_to_double()).unwrap();
        }
        SessionContext::new_with_state(state)
    }

    #[tokio::test]
    async fn a_decimal_quotient_is_a_double_named_as_written() {
        let sql = "SELECT CAST(2749.75 AS DECIMAL(17,2)) / CAST(2884.363333 AS DECIMAL(23,6)) AS q";
        // Without the rule: six places, cut.
        let (kind, _, _) = one(&context(false), sql).await;
        assert!(matches!(kind, DataType::Decimal128(_, 6)), "{kind}");
        let (kind, name, value) = one(&context(true), sql).await;
        assert_eq!((kind, name.as_str()), (DataType::Float64, "q"));
        assert_eq!(value, Some(2749.75_f64 / 2884.363333_f64));

        let (_, name, value) = one(
            &context(true),
            "SELECT sum(a) / count(*) FROM (VALUES (CAST(1 AS DECIMAL(5,1))), (2.0), (2.0)) t(a)",
        )
        .await;
        assert_eq!(name, "sum(t.a) / count(*)");
        assert_eq!(value, Some(5.0 / 3.0));
    }

    #[tokio::test]
    async fn integers_and_other_operators_keep_their_types() {
        let context = context(true);
        let (kind, _, _) = one(&context, "SELECT 7 / 2").await;
        assert_eq!(kind, DataType::Int64);
        let (kind, _, _) = one(&context, "SELECT CAST(7 AS DECIMAL(5,2)) * 2").await;
        assert!(matches!(kind, DataType::Decimal128(..)), "{kind}");
        let (kind, _, _) = one(&context, "SELECT CAST(7 AS DECIMAL(5,2)) % 2").await;
        assert!(matches!(kind, DataType::Decimal128(..)), "{kind}");
        let (kind, _, value) = one(&context, "SELECT 7 / CAST(2 AS DECIMAL(5,2))").await;
        assert_eq!((kind, value), (DataType::Float64, Some(3.5)));
    }

    #[test]
    fn a_decimal_converts_to_its_nearest_double() {
        // Past 2^53, where a cast rounds twice.
        assert_eq!(nearest(-42913917145492803, 1), -4291391714549280.5);
        assert_eq!(
            arrow::datatypes::i256::from_i128(-42913917145492803).as_i128() as f64 / 10.0,
            -4291391714549280.0
        );
        assert_eq!(nearest(12345, 2), 123.45);
        assert_eq!(nearest(1, 30), 1e-30);
        assert_eq!(nearest(5, -3), 5000.0);
        assert_eq!(nearest(i128::MAX, 0), i128::MAX as f64);
        assert_eq!(nearest(0, 38), 0.0);
    }
}

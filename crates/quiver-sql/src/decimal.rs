//! Decimal `+`, `-` and `*` over values that cannot overflow, computed
//! without a check per value.
//!
//! arrow-rs computes decimal arithmetic with a checked `i128` operation per
//! value, which returns a `Result` the loop must test: the loop cannot be
//! vectorized, and a checked `i128` multiplication is a call of its own.
//! DataFusion uses those kernels for every decimal `+`, `-` and `*` (its
//! `fail_on_overflow` chooses between two kernels that, for decimals, both
//! check). TPC-H's prices, discounts and taxes are `decimal(15, 2)`, and q01
//! computes four such operations per row of lineitem (docs/performance.md,
//! "Decimal arithmetic without a check per value").
//!
//! [`DecimalArithmetic`], a physical optimizer rule run after DataFusion's
//! own, gives each such operation over two `Decimal128` operands a
//! [`DecimalExpr`] in projections, filters and aggregates' arguments. It
//! computes what arrow-rs would, to the bit: the same result type, the same
//! values, the same nulls. Per batch it first checks that every value of
//! both operands lies in `i64`'s range (a branch-free pass). Then no result
//! can overflow `i128`: a product of two such values is under 2^126, and a
//! sum of two values each scaled up by at most 10^18 is under 2^64 * 10^18.
//! So it computes them with plain, vectorizable integer operations. A batch
//! with a value outside that range is handed to arrow-rs's own kernel, which
//! checks each value and fails as it would have. It is added on a single
//! node, like the other rules of this crate: a distributed plan's codec does
//! not know it.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray};
use arrow::buffer::{NullBuffer, ScalarBuffer};
use arrow::compute::kernels::numeric::{add, mul, sub};
use arrow::datatypes::{
    DECIMAL128_MAX_PRECISION, DECIMAL128_MAX_SCALE, DataType, Decimal128Type, Schema,
};
use arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{ScalarValue, internal_err};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::BinaryExpr;
use datafusion::physical_expr_common::datum::apply;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateInputMode};
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};

/// The largest power of ten an operand of `+` or `-` may be scaled up by:
/// an `i64` times 10^18 stays under 2^124.
const MAX_RESCALE: i8 = 18;

/// The physical optimizer rule (module docs).
#[derive(Debug, Default)]
pub(crate) struct DecimalArithmetic;

impl PhysicalOptimizerRule for DecimalArithmetic {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let rebuilt = if let Some(projection) = node.downcast_ref::<ProjectionExec>() {
                rewrite_projection(projection)?
            } else if let Some(filter) = node.downcast_ref::<FilterExec>() {
                rewrite_filter(filter)?
            } else if let Some(aggregate) = node.downcast_ref::<AggregateExec>() {
                rewrite_aggregate(aggregate)?
            } else {
                None
            };
            Ok(match rebuilt {
                Some(plan) => Transformed::yes(plan),
                None => Transformed::no(node),
            })
        })
        .data()
    }

    fn name(&self) -> &str {
        "quiver_decimal_arithmetic"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

fn rewrite_projection(projection: &ProjectionExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let input = projection.input();
    let schema = input.schema();
    let mut changed = false;
    let exprs = projection
        .expr()
        .iter()
        .map(|e| {
            let expr = rewrite(&e.expr, &schema)?;
            changed |= expr.transformed;
            Ok(ProjectionExpr {
                expr: expr.data,
                alias: e.alias.clone(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if !changed {
        return Ok(None);
    }
    let rebuilt = ProjectionExec::try_new_with_schema_metadata(
        exprs,
        Arc::clone(input),
        &projection.schema(),
    )?;
    Ok(Some(Arc::new(rebuilt)))
}

fn rewrite_filter(filter: &FilterExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let predicate = rewrite(filter.predicate(), &filter.input().schema())?;
    if !predicate.transformed {
        return Ok(None);
    }
    let rebuilt = FilterExecBuilder::from(filter)
        .with_predicate(predicate.data)
        .build()?;
    Ok(Some(Arc::new(rebuilt)))
}

/// The arguments of an aggregation that evaluates them: one over rows, not
/// over the states of one before it.
fn rewrite_aggregate(aggregate: &AggregateExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if aggregate.mode().input_mode() != AggregateInputMode::Raw {
        return Ok(None);
    }
    let schema = aggregate.input_schema();
    let mut changed = false;
    let mut exprs = Vec::with_capacity(aggregate.aggr_expr().len());
    for function in aggregate.aggr_expr() {
        let all = function.all_expressions();
        let mut args = Vec::with_capacity(all.args.len());
        let mut function_changed = false;
        for arg in &all.args {
            let arg = rewrite(arg, &schema)?;
            function_changed |= arg.transformed;
            args.push(arg.data);
        }
        match function_changed
            .then(|| function.with_new_expressions(args, all.order_by_exprs))
            .flatten()
        {
            Some(rewritten) => {
                changed = true;
                exprs.push(Arc::new(rewritten));
            }
            None => exprs.push(Arc::clone(function)),
        }
    }
    if !changed {
        return Ok(None);
    }
    Ok(Some(Arc::new(aggregate.with_new_aggr_exprs(exprs))))
}

/// `expr` with each decimal operation it may take replaced, innermost first.
fn rewrite(
    expr: &Arc<dyn PhysicalExpr>,
    schema: &Schema,
) -> Result<Transformed<Arc<dyn PhysicalExpr>>> {
    Arc::clone(expr).transform_up(|e| {
        let Some(binary) = e.downcast_ref::<BinaryExpr>() else {
            return Ok(Transformed::no(e));
        };
        // The children may be `DecimalExpr`s already: their types are those
        // of the operations they replaced.
        let left = binary.left().data_type(schema)?;
        let right = binary.right().data_type(schema)?;
        let Some(op) = DecimalOp::of(*binary.op(), &left, &right) else {
            return Ok(Transformed::no(e));
        };
        // The type DataFusion planned must be the one arrow-rs computes:
        // otherwise leave the expression as it is.
        if e.data_type(schema)? != op.data_type() {
            return Ok(Transformed::no(e));
        }
        Ok(Transformed::yes(Arc::new(DecimalExpr {
            binary: Arc::clone(&e),
            op,
        }) as Arc<dyn PhysicalExpr>))
    })
}

/// An operation over two `Decimal128` operands, and the result type arrow-rs
/// gives it (`arrow_arith::numeric`, Hive's rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum DecimalOp {
    /// `+` or `-` (`subtract`): each side scaled up to the result's scale.
    AddSub {
        subtract: bool,
        left_mul: i64,
        right_mul: i64,
        precision: u8,
        scale: i8,
    },
    Mul {
        precision: u8,
        scale: i8,
    },
}

impl DecimalOp {
    /// The operation of `op` over `left` and `right`, if this module takes it.
    fn of(op: Operator, left: &DataType, right: &DataType) -> Option<Self> {
        let (&DataType::Decimal128(p1, s1), &DataType::Decimal128(p2, s2)) = (left, right) else {
            return None;
        };
        match op {
            Operator::Plus | Operator::Minus => {
                let scale = s1.max(s2);
                let integer_digits = (p1 as i8 - s1).max(p2 as i8 - s2);
                let precision = (scale.saturating_add(integer_digits) as u8)
                    .saturating_add(1)
                    .min(DECIMAL128_MAX_PRECISION);
                let (left_up, right_up) = (scale - s1, scale - s2);
                if !(0..=MAX_RESCALE).contains(&left_up) || !(0..=MAX_RESCALE).contains(&right_up) {
                    return None;
                }
                Some(Self::AddSub {
                    subtract: op == Operator::Minus,
                    left_mul: 10i64.pow(left_up as u32),
                    right_mul: 10i64.pow(right_up as u32),
                    precision,
                    scale,
                })
            }
            Operator::Multiply => {
                let scale = s1.checked_add(s2)?;
                // arrow-rs refuses a scale over the maximum: leave it to say so.
                if scale > DECIMAL128_MAX_SCALE {
                    return None;
                }
                Some(Self::Mul {
                    precision: p1.saturating_add(p2 + 1).min(DECIMAL128_MAX_PRECISION),
                    scale,
                })
            }
            _ => None,
        }
    }

    /// The result's precision and scale.
    fn precision_scale(&self) -> (u8, i8) {
        match *self {
            Self::AddSub {
                precision, scale, ..
            }
            | Self::Mul { precision, scale } => (precision, scale),
        }
    }

    fn data_type(&self) -> DataType {
        let (precision, scale) = self.precision_scale();
        DataType::Decimal128(precision, scale)
    }

    /// The value of `a op b`, both in `i64`'s range (module docs).
    #[inline(always)]
    fn apply(&self, a: i128, b: i128) -> i128 {
        let (a, b) = (a as i64 as i128, b as i64 as i128);
        match *self {
            Self::AddSub {
                subtract,
                left_mul,
                right_mul,
                ..
            } => {
                let (a, b) = (a * left_mul as i128, b * right_mul as i128);
                if subtract { a - b } else { a + b }
            }
            Self::Mul { .. } => a * b,
        }
    }

    /// `left op right`, unchecked where the values allow it.
    fn compute(&self, left: &ColumnarValue, right: &ColumnarValue) -> Result<ColumnarValue> {
        let Some((values, nulls)) = self.unchecked(left, right) else {
            return self.checked(left, right);
        };
        let (precision, scale) = self.precision_scale();
        let array = PrimitiveArray::<Decimal128Type>::new(ScalarBuffer::from(values), nulls)
            .with_precision_and_scale(precision, scale)?;
        Ok(ColumnarValue::Array(Arc::new(array) as ArrayRef))
    }

    /// The result's values and nulls, if every operand's value is in
    /// `i64`'s range; `None` for two scalars (arrow-rs's kernel computes
    /// them once), a null scalar, or a value that may overflow.
    fn unchecked(
        &self,
        left: &ColumnarValue,
        right: &ColumnarValue,
    ) -> Option<(Vec<i128>, Option<NullBuffer>)> {
        let op = *self;
        match (left, right) {
            (ColumnarValue::Array(l), ColumnarValue::Array(r)) => {
                let l = l.as_primitive_opt::<Decimal128Type>()?;
                let r = r.as_primitive_opt::<Decimal128Type>()?;
                if l.len() != r.len() || !fit(l.values()) || !fit(r.values()) {
                    return None;
                }
                let values = l.values().iter().zip(r.values().iter());
                Some((
                    values.map(|(&a, &b)| op.apply(a, b)).collect(),
                    NullBuffer::union(l.nulls(), r.nulls()),
                ))
            }
            (
                ColumnarValue::Scalar(ScalarValue::Decimal128(Some(a), ..)),
                ColumnarValue::Array(r),
            ) => {
                let r = r.as_primitive_opt::<Decimal128Type>()?;
                if !fit(&[*a]) || !fit(r.values()) {
                    return None;
                }
                let values = r.values().iter().map(|&b| op.apply(*a, b)).collect();
                Some((values, r.nulls().cloned()))
            }
            (
                ColumnarValue::Array(l),
                ColumnarValue::Scalar(ScalarValue::Decimal128(Some(b), ..)),
            ) => {
                let l = l.as_primitive_opt::<Decimal128Type>()?;
                if !fit(l.values()) || !fit(&[*b]) {
                    return None;
                }
                let values = l.values().iter().map(|&a| op.apply(a, *b)).collect();
                Some((values, l.nulls().cloned()))
            }
            _ => None,
        }
    }

    /// arrow-rs's own kernel: checked, as DataFusion evaluates decimals.
    fn checked(&self, left: &ColumnarValue, right: &ColumnarValue) -> Result<ColumnarValue> {
        match *self {
            Self::AddSub {
                subtract: false, ..
            } => apply(left, right, add),
            Self::AddSub { subtract: true, .. } => apply(left, right, sub),
            Self::Mul { .. } => apply(left, right, mul),
        }
    }
}

/// Whether every value lies in `i64`'s range. Null slots are checked too
/// (their values are whatever the buffer holds): one that does not fit sends
/// the batch to the checked kernel, which gives the same result.
fn fit(values: &[i128]) -> bool {
    values
        .iter()
        .fold(true, |fit, &v| fit & (v as i64 as i128 == v))
}

/// A decimal operation of a [`BinaryExpr`], computed as the module docs say.
#[derive(Debug)]
pub(crate) struct DecimalExpr {
    /// The expression replaced: its children, and how it shows in plans.
    binary: Arc<dyn PhysicalExpr>,
    op: DecimalOp,
}

impl fmt::Display for DecimalExpr {
    /// As the expression it replaces.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.binary)
    }
}

impl PartialEq for DecimalExpr {
    fn eq(&self, other: &Self) -> bool {
        self.op == other.op && self.binary.eq(&other.binary)
    }
}

impl Eq for DecimalExpr {}

impl Hash for DecimalExpr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.binary.hash(state);
        self.op.hash(state);
    }
}

impl PhysicalExpr for DecimalExpr {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(self.op.data_type())
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.binary.nullable(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let [left, right] = self.binary.children()[..] else {
            return internal_err!("a decimal operation has two operands");
        };
        let left = left.evaluate(batch)?;
        let right = right.evaluate(batch)?;
        self.op.compute(&left, &right)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        self.binary.children()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(Arc::new(Self {
            binary: Arc::clone(&self.binary).with_new_children(children)?,
            op: self.op,
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.binary.fmt_sql(f)
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Decimal128Array, StringArray};
    use datafusion::common::tree_node::TreeNodeRecursion;
    use datafusion::physical_expr::expressions::{Column, Literal};
    use datafusion::prelude::SessionContext;

    use super::*;

    fn decimals(values: impl IntoIterator<Item = Option<i128>>, p: u8, s: i8) -> ArrayRef {
        let array: Decimal128Array = values.into_iter().collect();
        Arc::new(array.with_precision_and_scale(p, s).unwrap())
    }

    /// `left op right` as DataFusion plans it, and the same rewritten.
    fn both(
        left: Arc<dyn PhysicalExpr>,
        op: Operator,
        right: Arc<dyn PhysicalExpr>,
        schema: &Schema,
    ) -> (Arc<dyn PhysicalExpr>, Arc<dyn PhysicalExpr>) {
        let binary = Arc::new(BinaryExpr::new(left, op, right)) as Arc<dyn PhysicalExpr>;
        let rewritten = rewrite(&binary, schema).unwrap();
        assert!(rewritten.transformed, "{binary} was not rewritten");
        (binary, rewritten.data)
    }

    /// `+`, `-` and `*` over two columns, a scalar and a column, and a column
    /// and a scalar, with nulls and operands of different scales and signs:
    /// values, nulls and type equal DataFusion's own `BinaryExpr`, computed
    /// without a check (no value overflows `i64`).
    #[test]
    fn each_operation_equals_datafusions() {
        let rows = 2_000i128;
        let l = decimals(
            (0..rows).map(|i| (i % 13 != 5).then_some((i * 7_919 - 3_000_000) * 37)),
            15,
            2,
        );
        let r = decimals(
            (0..rows).map(|i| (i % 11 != 2).then_some(i * 104_729 % 10_000 - 5_000)),
            12,
            4,
        );
        let batch = RecordBatch::try_from_iter([("l", l), ("r", r)]).unwrap();
        let schema = batch.schema();
        let l = Arc::new(Column::new("l", 0)) as Arc<dyn PhysicalExpr>;
        let r = Arc::new(Column::new("r", 1)) as Arc<dyn PhysicalExpr>;
        let one = Arc::new(Literal::new(ScalarValue::Decimal128(Some(100), 3, 2)))
            as Arc<dyn PhysicalExpr>;
        let pairs = [(&l, &r), (&r, &l), (&one, &r), (&l, &one)];
        for op in [Operator::Plus, Operator::Minus, Operator::Multiply] {
            for (left, right) in pairs {
                let (binary, rewritten) = both(Arc::clone(left), op, Arc::clone(right), &schema);
                let expected = binary.evaluate(&batch).unwrap().into_array(2_000).unwrap();
                let operands = (
                    left.evaluate(&batch).unwrap(),
                    right.evaluate(&batch).unwrap(),
                );
                let decimal = rewritten.downcast_ref::<DecimalExpr>().unwrap();
                assert!(decimal.op.unchecked(&operands.0, &operands.1).is_some());
                let got = rewritten
                    .evaluate(&batch)
                    .unwrap()
                    .into_array(2_000)
                    .unwrap();
                assert_eq!(got.data_type(), expected.data_type(), "{binary}");
                assert_eq!(&got, &expected, "{binary}");
                assert_eq!(rewritten.to_string(), binary.to_string());
            }
        }
    }

    /// Values beyond `i64`'s range go to arrow-rs's checked kernel: a sum
    /// that fits is computed, a product that overflows `i128` fails as
    /// DataFusion's does.
    #[test]
    fn values_that_may_overflow_are_checked() {
        let big = 10i128.pow(20);
        let a = decimals([Some(big), Some(3)], 38, 0);
        let b = decimals([Some(big), None], 38, 0);
        let batch = RecordBatch::try_from_iter([("a", a), ("b", b)]).unwrap();
        let schema = batch.schema();
        let a = Arc::new(Column::new("a", 0)) as Arc<dyn PhysicalExpr>;
        let b = Arc::new(Column::new("b", 1)) as Arc<dyn PhysicalExpr>;

        let (binary, rewritten) = both(Arc::clone(&a), Operator::Plus, Arc::clone(&b), &schema);
        let expected = binary.evaluate(&batch).unwrap().into_array(2).unwrap();
        let got = rewritten.evaluate(&batch).unwrap().into_array(2).unwrap();
        assert_eq!(&got, &expected);
        assert_eq!(got.as_primitive::<Decimal128Type>().value(0), 2 * big);

        let (binary, rewritten) = both(a, Operator::Multiply, b, &schema);
        let expected = binary.evaluate(&batch).unwrap_err().to_string();
        let got = rewritten.evaluate(&batch).unwrap_err().to_string();
        assert!(got.contains("Overflow"), "{got}");
        assert_eq!(got, expected);
    }

    fn context(with_rule: bool) -> SessionContext {
        let rows = 30_000i128;
        let price = decimals(
            (0..rows).map(|i| (i % 17 != 4).then_some(90_000 + i * 7_919 % 10_000_000)),
            15,
            2,
        );
        let discount = decimals((0..rows).map(|i| Some(i % 11)), 15, 2);
        let tax = decimals((0..rows).map(|i| (i % 23 != 1).then_some(i % 9)), 15, 2);
        let flag: StringArray = (0..rows)
            .map(|i| Some(["A", "N", "R"][i as usize % 3]))
            .collect();
        let data = RecordBatch::try_from_iter([
            ("price", price),
            ("discount", discount),
            ("tax", tax),
            ("flag", Arc::new(flag) as ArrayRef),
        ])
        .unwrap();
        let rule = with_rule.then(|| Arc::new(DecimalArithmetic) as _);
        crate::rule_testing::session(&data, rule)
    }

    /// How many decimal operations the plan's projections, filters and
    /// aggregates compute unchecked.
    fn rewritten(plan: &Arc<dyn ExecutionPlan>) -> usize {
        let mut exprs: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        plan.apply(|node| {
            if let Some(projection) = node.downcast_ref::<ProjectionExec>() {
                exprs.extend(projection.expr().iter().map(|e| Arc::clone(&e.expr)));
            } else if let Some(filter) = node.downcast_ref::<FilterExec>() {
                exprs.push(Arc::clone(filter.predicate()));
            } else if let Some(aggregate) = node.downcast_ref::<AggregateExec>() {
                for function in aggregate.aggr_expr() {
                    exprs.extend(function.expressions());
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        let mut count = 0;
        for expr in exprs {
            expr.apply(|e| {
                count += usize::from(e.is::<DecimalExpr>());
                Ok(TreeNodeRecursion::Continue)
            })
            .unwrap();
        }
        count
    }

    /// Queries as TPC-H writes them give the rows DataFusion gives, with the
    /// operations in projections, filters and aggregates' arguments rewritten.
    #[tokio::test]
    async fn queries_give_datafusions_rows() {
        let plain = context(false);
        let ruled = context(true);
        for (sql, operations) in [
            (
                "SELECT flag, sum(price * (1 - discount)), sum(price * (1 - discount) * (1 + tax)), \
                 avg(price - discount), count(*) FROM t GROUP BY flag ORDER BY flag",
                5,
            ),
            (
                "SELECT count(*), sum(price) FROM t WHERE price * discount > 5000 AND tax + discount < 0.09",
                2,
            ),
            (
                "SELECT price + tax, price - discount, 2 * price, price * discount * tax FROM t \
                 ORDER BY price, tax, discount LIMIT 50",
                5,
            ),
        ] {
            let (expected, _) = crate::rule_testing::rows(&plain, sql, rewritten).await;
            let (got, count) = crate::rule_testing::rows(&ruled, sql, rewritten).await;
            assert_eq!(count, operations, "{sql}");
            assert_eq!(got, expected, "{sql}");
        }
    }
}

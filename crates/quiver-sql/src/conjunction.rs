//! A filter's `AND` chain evaluated conjunct by conjunct on the rows the
//! ones before it kept.
//!
//! DataFusion evaluates `a AND b AND c` as nested binary `AND`s. Where the
//! left side keeps at most a fifth of a batch's rows, an `AND` evaluates its
//! right side on those rows alone: it copies the whole batch (every column of
//! the filter's input) down to them, and scatters the right side's result
//! back into a full-length mask one value at a time. An `AND` chain does that
//! once per level. In TPC-H q06 over Parquet that scatter, and the copies of
//! the batch, were a fifth of the server's time (docs/performance.md, "q06
//! over files in place, profiled").
//!
//! [`SequentialConjunctions`], a physical optimizer rule run after
//! DataFusion's own, gives each `FilterExec` whose predicate is such a chain
//! a [`Conjunction`] instead: the same conjuncts, the cheap ones that cannot
//! fail moved first (`cost`), each evaluated on the whole batch while the
//! rows kept so far are many, and on those rows alone once they are few.
//! Then it copies only the columns that conjunct reads, gathered by the kept
//! rows' indices, and narrows the indices by its result: nothing is
//! scattered, and the mask is built once at the end. A conjunct is given no
//! row DataFusion's evaluation would not give it: on every row while many
//! are kept, as DataFusion does, so a conjunct that fails on a row an
//! earlier one dropped fails alike. (DataFusion does
//! not pre-select after a conjunct that is null on some row; this does,
//! taking null as false, so it gives such a chain fewer rows.)
//!
//! The expression answers as a filter predicate does: a row whose conjunct is
//! null is dropped, as `FilterExec` drops a null, so its mask has no nulls.
//! That is why the rule puts it in filters only. It is added on a single node
//! (a distributed plan's codec does not know it), and a chain holding a
//! dynamic filter (one a join or a top-k changes while the query runs) is
//! left to DataFusion.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray, UInt32Array};
use arrow::buffer::{BooleanBuffer, MutableBuffer, ScalarBuffer};
use arrow::compute::{filter, take_arrays};
use arrow::datatypes::{DataType, Schema, SchemaRef, UInt32Type};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{ScalarValue, internal_err};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::logical_expr::ColumnarValue;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{
    BinaryExpr, Column, InListExpr, IsNotNullExpr, IsNullExpr, Literal,
};
use datafusion::physical_expr::utils::{collect_columns, split_conjunction};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};

use crate::pushed::is_dynamic;

/// The share of a batch's rows (`kept / rows`) at or under which a conjunct
/// is evaluated on the kept rows alone: DataFusion's own threshold for an
/// `AND`'s pre-selection. Above it, evaluating on every row costs less than
/// gathering the kept ones.
const FEW: (usize, usize) = (1, 5);

/// The physical optimizer rule (module docs).
#[derive(Debug, Default)]
pub(crate) struct SequentialConjunctions;

impl PhysicalOptimizerRule for SequentialConjunctions {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(filter) = node.downcast_ref::<FilterExec>() else {
                return Ok(Transformed::no(node));
            };
            let Some(conjunction) = Conjunction::of(filter.predicate(), &filter.input().schema())
            else {
                return Ok(Transformed::no(node));
            };
            let rebuilt = FilterExecBuilder::from(filter)
                .with_predicate(Arc::new(conjunction))
                .build()?;
            Ok(Transformed::yes(Arc::new(rebuilt) as Arc<dyn ExecutionPlan>))
        })
        .data()
    }

    fn name(&self) -> &str {
        "quiver_sequential_conjunctions"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// One conjunct, and the same over the columns it reads alone.
#[derive(Debug)]
struct Conjunct {
    /// Over the filter's input.
    expr: Arc<dyn PhysicalExpr>,
    /// The input's columns `expr` reads, in the input's order.
    columns: Vec<usize>,
    /// `expr` over a batch of `columns` alone, and that batch's schema.
    narrow: Arc<dyn PhysicalExpr>,
    narrow_schema: SchemaRef,
}

impl Conjunct {
    /// `expr`, over the filter's `input`.
    fn new(expr: Arc<dyn PhysicalExpr>, input: &Schema) -> Result<Self> {
        let mut columns: Vec<usize> = collect_columns(&expr).iter().map(|c| c.index()).collect();
        columns.sort_unstable();
        columns.dedup();
        let narrow = Arc::clone(&expr)
            .transform(|e| match e.downcast_ref::<Column>() {
                Some(column) => {
                    let index = columns.binary_search(&column.index()).map_err(|_| {
                        datafusion::error::DataFusionError::Internal(format!(
                            "column {column} of a conjunct was not collected"
                        ))
                    })?;
                    Ok(Transformed::yes(
                        Arc::new(Column::new(column.name(), index)) as Arc<dyn PhysicalExpr>,
                    ))
                }
                None => Ok(Transformed::no(e)),
            })
            .data()?;
        let narrow_schema = Arc::new(input.project(&columns)?);
        Ok(Self {
            expr,
            columns,
            narrow,
            narrow_schema,
        })
    }

    /// Which of the rows at `indices` of `batch` this conjunct keeps: those
    /// indices, narrowed.
    fn keep(&self, batch: &RecordBatch, indices: &UInt32Array) -> Result<UInt32Array> {
        let read: Vec<_> = self
            .columns
            .iter()
            .map(|&i| Arc::clone(batch.column(i)))
            .collect();
        let gathered = take_arrays(&read, indices, None)?;
        let narrow_batch = RecordBatch::try_new_with_options(
            Arc::clone(&self.narrow_schema),
            gathered,
            &RecordBatchOptions::new().with_row_count(Some(indices.len())),
        )?;
        let kept = passing(self.narrow.evaluate(&narrow_batch)?, indices.len())?;
        Ok(filter(indices, &BooleanArray::new(kept, None))?
            .as_primitive::<UInt32Type>()
            .clone())
    }
}

/// A filter predicate `a AND b AND ...` evaluated in order on the rows the
/// conjuncts before kept (module docs). Its mask has no nulls: a null
/// conjunct drops its row, as a filter does.
#[derive(Debug)]
pub(crate) struct Conjunction {
    conjuncts: Vec<Conjunct>,
    /// The filter's input: what the conjuncts read.
    input: SchemaRef,
}

impl Conjunction {
    /// The conjunction of `predicate`'s conjuncts, if it is an `AND` chain
    /// this evaluates better than DataFusion: two conjuncts or more, none
    /// dynamic or volatile.
    fn of(predicate: &Arc<dyn PhysicalExpr>, input: &SchemaRef) -> Option<Self> {
        let parts = split_conjunction(predicate);
        if parts.len() < 2
            || parts.iter().any(|p| {
                is_dynamic(p)
                    || is_volatile(p)
                    || !matches!(p.data_type(input), Ok(DataType::Boolean))
            })
        {
            return None;
        }
        // The cheap conjuncts that cannot fail first (a stable sort: the
        // others keep their order, after them).
        let mut parts = parts;
        parts.sort_by_key(|p| cost(p, input));
        let conjuncts = parts
            .into_iter()
            .map(|p| Conjunct::new(Arc::clone(p), input))
            .collect::<Result<_>>()
            .ok()?;
        Some(Self {
            conjuncts,
            input: Arc::clone(input),
        })
    }
}

/// Where a conjunct goes in the chain, cheapest first: a comparison of a
/// column of a fixed-width type with a literal (0), of two such columns
/// (1), or of strings and other types, or an `IN` list of literals, or a
/// null test (2); anything else (3: arithmetic that may fail on some rows,
/// casts, functions, `OR`s) keeps its place among the others, after them.
///
/// Only conjuncts that cannot fail are moved, and only ahead: each conjunct
/// is then given no row it would not have been given in the query's order
/// (the ones before it keep at most the same rows), so a chain such as
/// `d <> 0 AND 1000 / d > 1` fails on no more rows than it did.
fn cost(expr: &Arc<dyn PhysicalExpr>, input: &Schema) -> u8 {
    const OTHER: u8 = 3;
    let is_column = |e: &Arc<dyn PhysicalExpr>| e.is::<Column>();
    let is_operand = |e: &Arc<dyn PhysicalExpr>| is_column(e) || e.is::<Literal>();
    if let Some(binary) = expr.downcast_ref::<BinaryExpr>() {
        let (left, right) = (binary.left(), binary.right());
        let compares = matches!(
            binary.op(),
            Operator::Eq
                | Operator::NotEq
                | Operator::Lt
                | Operator::LtEq
                | Operator::Gt
                | Operator::GtEq
                | Operator::IsDistinctFrom
                | Operator::IsNotDistinctFrom
        );
        let (Ok(left_type), Ok(right_type)) = (left.data_type(input), right.data_type(input))
        else {
            return OTHER;
        };
        if !compares || !is_operand(left) || !is_operand(right) || left_type != right_type {
            return OTHER;
        }
        return match (
            left_type.is_primitive(),
            is_column(left) && is_column(right),
        ) {
            (true, false) => 0,
            (true, true) => 1,
            (false, _) => 2,
        };
    }
    if let Some(list) = expr.downcast_ref::<InListExpr>() {
        let literals = list.list().iter().all(|e| e.is::<Literal>());
        return if is_column(list.expr()) && literals {
            2
        } else {
            OTHER
        };
    }
    if let Some(test) = expr.downcast_ref::<IsNullExpr>() {
        return if is_column(test.arg()) { 2 } else { OTHER };
    }
    if let Some(test) = expr.downcast_ref::<IsNotNullExpr>() {
        return if is_column(test.arg()) { 2 } else { OTHER };
    }
    OTHER
}

/// Whether `expr` holds a volatile function (`random()`): evaluated on fewer
/// rows, it would draw differently, so such a chain is left as it is.
fn is_volatile(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.exists(|e| Ok(e.is_volatile_node())).unwrap_or(true)
}

/// The rows `value` (a conjunct's result over `rows` rows) is true of; null
/// is false.
fn passing(value: ColumnarValue, rows: usize) -> Result<BooleanBuffer> {
    match value {
        ColumnarValue::Array(array) => {
            let Some(mask) = array.as_boolean_opt() else {
                return internal_err!("a conjunct gave {}, not booleans", array.data_type());
            };
            Ok(match mask.nulls() {
                Some(nulls) => mask.values() & nulls.inner(),
                None => mask.values().clone(),
            })
        }
        ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))) => Ok(BooleanBuffer::new_set(rows)),
        ColumnarValue::Scalar(ScalarValue::Boolean(_)) => Ok(BooleanBuffer::new_unset(rows)),
        ColumnarValue::Scalar(other) => {
            internal_err!("a conjunct gave {}, not a boolean", other.data_type())
        }
    }
}

/// A mask of `rows` rows with the rows at `indices` (ascending) set.
fn mask_of(indices: &UInt32Array, rows: usize) -> BooleanBuffer {
    let mut bits = MutableBuffer::from_len_zeroed(rows.div_ceil(8));
    let bytes = bits.as_slice_mut();
    for &index in indices.values() {
        arrow::util::bit_util::set_bit(bytes, index as usize);
    }
    BooleanBuffer::new(bits.into(), 0, rows)
}

/// The indices of the rows `mask` keeps.
fn indices_of(mask: &BooleanBuffer) -> UInt32Array {
    let indices: Vec<u32> = mask.set_indices_u32().collect();
    UInt32Array::new(ScalarBuffer::from(indices), None)
}

impl Conjunction {
    /// The rows of `batch` every conjunct is true of.
    fn mask(&self, batch: &RecordBatch) -> Result<BooleanBuffer> {
        let rows = batch.num_rows();
        // Indices are u32: a larger batch (none is, in practice) is
        // evaluated on every row throughout.
        let gathers = u32::try_from(rows).is_ok();
        let Some((first, rest)) = self.conjuncts.split_first() else {
            return Ok(BooleanBuffer::new_set(rows));
        };
        let mut mask = passing(first.expr.evaluate(batch)?, rows)?;
        let mut rest = rest.iter();
        // On every row while many are kept.
        loop {
            let kept = mask.count_set_bits();
            if kept == 0 {
                return Ok(mask);
            }
            if gathers && kept * FEW.1 <= rows * FEW.0 {
                break;
            }
            let Some(conjunct) = rest.next() else {
                return Ok(mask);
            };
            mask = &mask & &passing(conjunct.expr.evaluate(batch)?, rows)?;
        }
        if rest.len() == 0 {
            return Ok(mask);
        }
        // The conjuncts left, on the few rows kept.
        let mut indices = indices_of(&mask);
        for conjunct in rest {
            if indices.is_empty() {
                break;
            }
            indices = conjunct.keep(batch, &indices)?;
        }
        Ok(mask_of(&indices, rows))
    }
}

/// Whether `expr` binds more loosely than `AND` (an `OR`), so that it is
/// shown in parentheses as a conjunct, as DataFusion shows it.
fn loose(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.downcast_ref::<BinaryExpr>()
        .is_some_and(|binary| binary.op().precedence() < Operator::And.precedence())
}

impl Conjunction {
    /// Writes the conjuncts joined by `AND`, each with `write`.
    fn write_chain(
        &self,
        f: &mut fmt::Formatter<'_>,
        write: impl Fn(&Arc<dyn PhysicalExpr>, &mut fmt::Formatter<'_>) -> fmt::Result,
    ) -> fmt::Result {
        for (i, conjunct) in self.conjuncts.iter().enumerate() {
            if i > 0 {
                f.write_str(" AND ")?;
            }
            if loose(&conjunct.expr) {
                f.write_str("(")?;
                write(&conjunct.expr, f)?;
                f.write_str(")")?;
            } else {
                write(&conjunct.expr, f)?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for Conjunction {
    /// As DataFusion shows the `AND` chain it replaces: the same predicate.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_chain(f, |expr, f| write!(f, "{expr}"))
    }
}

impl PartialEq for Conjunction {
    fn eq(&self, other: &Self) -> bool {
        self.conjuncts.len() == other.conjuncts.len()
            && self
                .conjuncts
                .iter()
                .zip(&other.conjuncts)
                .all(|(a, b)| a.expr.eq(&b.expr))
    }
}

impl Eq for Conjunction {}

impl Hash for Conjunction {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for conjunct in &self.conjuncts {
            conjunct.expr.hash(state);
        }
    }
}

impl PhysicalExpr for Conjunction {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    /// Never null: a null conjunct drops its row (module docs).
    fn nullable(&self, _input_schema: &Schema) -> Result<bool> {
        Ok(false)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let mask = self.mask(batch)?;
        Ok(ColumnarValue::Array(Arc::new(BooleanArray::new(
            mask, None,
        ))))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        self.conjuncts.iter().map(|c| &c.expr).collect()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        if children.len() != self.conjuncts.len() {
            return internal_err!(
                "a conjunction of {} takes {} children",
                self.conjuncts.len(),
                children.len()
            );
        }
        let conjuncts = children
            .into_iter()
            .map(|child| Conjunct::new(child, &self.input))
            .collect::<Result<_>>()?;
        Ok(Arc::new(Self {
            conjuncts,
            input: Arc::clone(&self.input),
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_chain(f, |expr, f| expr.fmt_sql(f))
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use arrow::compute::filter_record_batch;
    use datafusion::common::tree_node::TreeNodeRecursion;
    use datafusion::prelude::SessionContext;

    use super::*;

    /// Rows whose columns keep a chosen share each: `a` is the row number,
    /// `b` cycles through 0..10 with every seventh row null, `c` names the
    /// row's remainder by 3, and `d` is zero on every eleventh row.
    fn batch(rows: i64) -> RecordBatch {
        let a: Int64Array = (0..rows).map(Some).collect();
        let b: Int64Array = (0..rows)
            .map(|i| (i % 7 != 3).then_some((i * 37) % 10))
            .collect();
        let c: StringArray = (0..rows).map(|i| Some(format!("k{}", i % 3))).collect();
        let d: Int64Array = (0..rows)
            .map(|i| Some(if i % 11 == 0 { 0 } else { i }))
            .collect();
        RecordBatch::try_from_iter([
            ("a", Arc::new(a) as ArrayRef),
            ("b", Arc::new(b) as ArrayRef),
            ("c", Arc::new(c) as ArrayRef),
            ("d", Arc::new(d) as ArrayRef),
        ])
        .unwrap()
    }

    fn context(with_rule: bool) -> SessionContext {
        let rule = with_rule.then(|| Arc::new(SequentialConjunctions) as _);
        crate::rule_testing::session(&batch(50_000), rule)
    }

    fn conjunctions(plan: &Arc<dyn ExecutionPlan>) -> usize {
        let mut count = 0;
        plan.apply(|node| {
            if let Some(filter) = node.downcast_ref::<FilterExec>()
                && filter.predicate().is::<Conjunction>()
            {
                count += 1;
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        count
    }

    /// Each query's rows with the rule equal DataFusion's own, whichever
    /// conjunct first leaves few rows (the first, a later one, none), with
    /// null conjuncts, a conjunct over a string column, and one that would
    /// fail on rows an earlier conjunct dropped.
    #[tokio::test]
    async fn a_chain_keeps_the_rows_datafusion_keeps() {
        let plain = context(false);
        let ruled = context(true);
        for sql in [
            // Few rows after the first conjunct: the rest on those alone.
            "SELECT * FROM t WHERE a < 3000 AND b > 4 AND c = 'k1' ORDER BY a",
            // Many after the first, few after the second.
            "SELECT * FROM t WHERE a >= 100 AND a < 4000 AND b >= 2 AND b <= 7 AND c <> 'k0' ORDER BY a",
            // Many throughout.
            "SELECT * FROM t WHERE a >= 10 AND b IS NOT NULL AND c <> 'k2' ORDER BY a",
            // None left after the second.
            "SELECT * FROM t WHERE a >= 10 AND a < 10 AND b > 1 ORDER BY a",
            // Nulls in a conjunct that is evaluated on the few rows.
            "SELECT a, b FROM t WHERE a < 500 AND b + 1 > 5 AND a % 2 = 0 ORDER BY a",
            // A division by `d` on few rows, those whose `d` is not zero: DataFusion and
            // the rule evaluate it on those alone (on every row, it would fail).
            "SELECT a FROM t WHERE a < 300 AND d <> 0 AND 1000 / d > 1 ORDER BY a",
            // A projection in the filter (only some columns out).
            "SELECT count(*), sum(a) FROM t WHERE a > 40000 AND b = 3 AND c = 'k2'",
        ] {
            let (expected, _) = crate::rule_testing::rows(&plain, sql, conjunctions).await;
            let (got, used) = crate::rule_testing::rows(&ruled, sql, conjunctions).await;
            assert_eq!(used, 1, "the rule gave no conjunction to {sql}");
            assert_eq!(got, expected, "{sql}");
        }
    }

    /// The mask itself, batch by batch, against the `AND` chain's own,
    /// nulls taken as false, for every prefix that goes sparse.
    #[test]
    fn the_mask_is_the_and_chains_with_nulls_as_false() {
        let data = batch(10_000);
        let schema = data.schema();
        let ctx = SessionContext::new();
        let df_schema = datafusion::common::DFSchema::try_from(schema.as_ref().clone()).unwrap();
        for sql in [
            "a < 1500 AND b > 4 AND c = 'k1'",
            "a >= 5000 AND a < 5900 AND b <> 2 AND d > 5003",
            "b > 8 AND a % 3 = 1",
            "a < 0 AND b > 1",
            "(a < 50 OR b > 8) AND c = 'k1' AND a > 1",
        ] {
            let logical = ctx.parse_sql_expr(sql, &df_schema).unwrap();
            let predicate = ctx.create_physical_expr(logical, &df_schema).unwrap();
            let conjunction = Conjunction::of(&predicate, &schema).expect("an AND chain");
            let expected = passing(predicate.evaluate(&data).unwrap(), data.num_rows()).unwrap();
            let got = conjunction.mask(&data).unwrap();
            assert_eq!(got, expected, "{sql}");
            assert_eq!(
                filter_record_batch(&data, &BooleanArray::new(got, None)).unwrap(),
                filter_record_batch(&data, &BooleanArray::new(expected, None)).unwrap(),
            );
        }
    }

    /// The cheap conjuncts that cannot fail go first, cheapest first; the
    /// others keep their order after them.
    #[test]
    fn conjuncts_that_cannot_fail_go_first_cheapest_first() {
        let schema = batch(1).schema();
        let ctx = SessionContext::new();
        let df_schema = datafusion::common::DFSchema::try_from(schema.as_ref().clone()).unwrap();
        for (sql, order) in [
            (
                "c = 'k1' AND 1000 / d > 1 AND a < b AND a < 300 AND d <> 0",
                "a@0 < 300 AND d@3 != 0 AND a@0 < b@1 AND c@2 = k1 AND 1000 / d@3 > 1",
            ),
            (
                "b + 1 > 5 AND c IN ('k0', 'k2') AND b IS NOT NULL AND a >= 7",
                "a@0 >= 7 AND c@2 IN (SET) ([k0, k2]) AND b@1 IS NOT NULL AND b@1 + 1 > 5",
            ),
            (
                "a % 2 = 0 AND d <> 0 AND 1000 / d > 1",
                "d@3 != 0 AND a@0 % 2 = 0 AND 1000 / d@3 > 1",
            ),
        ] {
            let logical = ctx.parse_sql_expr(sql, &df_schema).unwrap();
            let predicate = ctx.create_physical_expr(logical, &df_schema).unwrap();
            let conjunction = Conjunction::of(&predicate, &schema).expect("an AND chain");
            assert_eq!(conjunction.to_string(), order, "{sql}");
        }
    }

    /// A single condition, a chain with a volatile function, and one that
    /// is not an `AND` at the top are left to DataFusion.
    #[test]
    fn only_and_chains_of_steady_conjuncts_are_taken() {
        let schema = batch(1).schema();
        let ctx = SessionContext::new();
        let df_schema = datafusion::common::DFSchema::try_from(schema.as_ref().clone()).unwrap();
        for sql in ["a < 5", "a < 5 AND random() < 0.5", "a < 5 OR b > 3"] {
            let logical = ctx.parse_sql_expr(sql, &df_schema).unwrap();
            let predicate = ctx.create_physical_expr(logical, &df_schema).unwrap();
            assert!(Conjunction::of(&predicate, &schema).is_none(), "{sql}");
        }
    }
}

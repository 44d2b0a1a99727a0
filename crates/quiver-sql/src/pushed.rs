//! The filters DataFusion pushes into a stored scan once the plan is made,
//! as each partition's stream applies them.
//!
//! A static filter is applied to every batch. A dynamic one (a hash join's
//! build-side keys, a top-k's bound) is a shortcut its producer does not rely
//! on: the join still matches every row it is given. So the scan evaluates a
//! cheaper form of it where there is one (the join's build keys as a bitmap,
//! `build_keys.rs`, once they are known), and sets it aside where it does not
//! pay (docs/performance.md, "Dynamic filters in the stored scan").

use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray};
use arrow::compute::kernels::boolean::and;
use arrow::compute::{filter_record_batch, prep_null_mask_filter};
use arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{ScalarValue, internal_err};
use datafusion::error::Result;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, CaseExpr, Literal, lit};
use datafusion::physical_expr_common::physical_expr::{
    snapshot_generation, snapshot_physical_expr,
};
use datafusion::physical_plan::joins::{HashExpr, HashTableLookupExpr};
use datafusion::physical_plan::metrics::{
    BaselineMetrics, Count, ExecutionPlanMetricsSet, MetricBuilder,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::StreamExt;

use crate::build_keys::{BuildKeys, KeyBitmap, KeySets};

/// A dynamic filter is judged once it has seen this many rows.
const JUDGED_AFTER_ROWS: usize = 16_384;

/// A dynamic filter that keeps at least this share of the rows it sees
/// (as a ratio `kept / seen`) costs more than it saves: it is set aside
/// until its producer changes it.
const KEEPS_TOO_MANY: (usize, usize) = (3, 4);

/// One pushed filter, as one partition's stream applies it.
pub(crate) struct PushedFilter {
    /// The filter as it was pushed.
    expr: Arc<dyn PhysicalExpr>,
    /// The build keys of the join that pushed it, where they are collected.
    keys: Option<Arc<BuildKeys>>,
    /// What is evaluated: `expr` if it is static, else the build keys'
    /// bitmap, else the cheaper form of its value when it was last judged.
    applied: Applied,
    /// `expr`'s generation when it was last judged; 0 for a static filter,
    /// which is always applied (it may have been pushed down exactly).
    generation: u64,
    seen: usize,
    kept: usize,
    set_aside: bool,
}

/// Whether `expr` is dynamic: its producer may change its value while the
/// scan runs, and does not rely on the scan applying it (so the scan may set
/// it aside). A static filter is always applied, and is reported to
/// DataFusion as applied exactly.
pub(crate) fn is_dynamic(expr: &Arc<dyn PhysicalExpr>) -> bool {
    snapshot_generation(expr) != 0
}

/// How a pushed filter is evaluated.
enum Applied {
    Expr(Arc<dyn PhysicalExpr>),
    /// Whether each of some of the keys (the filter's children, one per
    /// key column of the join) is among the build side's in its column.
    Keys(Vec<(Arc<dyn PhysicalExpr>, Arc<KeyBitmap>)>),
}

impl PushedFilter {
    fn new(expr: &Arc<dyn PhysicalExpr>, keys: Option<Arc<BuildKeys>>) -> Self {
        let children = expr.children();
        let keyed = (keys.as_ref().and_then(|k| k.bitmaps())).and_then(|bitmaps| {
            (bitmaps.into_iter())
                .map(|(i, bitmap)| Some((Arc::clone(children.get(i)?), bitmap)))
                .collect::<Option<Vec<_>>>()
        });
        let applied = match keyed {
            Some(keyed) => Applied::Keys(keyed),
            // A filter that cannot be read now is evaluated as it is.
            _ if is_dynamic(expr) => {
                Applied::Expr(cheaper(expr).unwrap_or_else(|_| Arc::clone(expr)))
            }
            _ => Applied::Expr(Arc::clone(expr)),
        };
        Self {
            expr: Arc::clone(expr),
            keys,
            applied,
            generation: snapshot_generation(expr),
            seen: 0,
            kept: 0,
            set_aside: false,
        }
    }

    /// Which of `batch`'s rows this filter keeps, or `None` while it is set
    /// aside.
    ///
    /// A dynamic filter that keeps nearly every row costs its evaluation
    /// and saves nothing, so after [`JUDGED_AFTER_ROWS`] such a filter is
    /// set aside until its producer gives it a new value.
    fn mask(&mut self, batch: &RecordBatch) -> Result<Option<BooleanArray>> {
        if self.generation != 0
            && (snapshot_generation(&self.expr) != self.generation || self.keys_known())
        {
            *self = Self::new(&self.expr, self.keys.take());
        }
        if self.set_aside {
            return Ok(None);
        }
        let mask = match &self.applied {
            Applied::Keys(keyed) => {
                let mut mask: Option<BooleanArray> = None;
                for (key, bitmap) in keyed {
                    let found = bitmap.mask(&key.evaluate(batch)?.into_array(batch.num_rows())?)?;
                    mask = Some(match mask {
                        Some(both) => and(&both, &found)?,
                        None => found,
                    });
                }
                match mask {
                    Some(mask) => mask,
                    None => return internal_err!("a join's build keys without a key column"),
                }
            }
            Applied::Expr(expr) => {
                let value = expr.evaluate(batch)?.into_array(batch.num_rows())?;
                let Some(mask) = value.as_boolean_opt() else {
                    return internal_err!(
                        "a pushed filter gave {}, not booleans",
                        value.data_type()
                    );
                };
                // A null is not a match.
                match mask.null_count() {
                    0 => mask.clone(),
                    _ => prep_null_mask_filter(mask),
                }
            }
        };
        self.seen += batch.num_rows();
        self.kept += mask.true_count();
        let (num, den) = KEEPS_TOO_MANY;
        self.set_aside = self.generation != 0
            && self.seen >= JUDGED_AFTER_ROWS
            && self.kept * den >= self.seen * num;
        Ok(Some(mask))
    }

    /// Whether the join's build keys have become known since the filter
    /// was last judged.
    fn keys_known(&self) -> bool {
        matches!(self.applied, Applied::Expr(_)) && self.keys.as_ref().is_some_and(|k| k.complete())
    }

    fn by_keys(&self) -> bool {
        matches!(self.applied, Applied::Keys(_))
    }
}

/// `input`'s batches, each filtered by `filters` when it is read (a dynamic
/// filter has the value its producer, a join's build side or a top-k, gave
/// it by then; a join's whose build keys are in `key_sets` is tested
/// against them once they are known), counted in `metrics` as partition
/// `partition`'s: rows out, compute time, `skipped_filter_batches`, and
/// `build_key_batches` (batches tested against a join's build keys).
pub(crate) fn filtered_stream(
    input: SendableRecordBatchStream,
    filters: &[Arc<dyn PhysicalExpr>],
    key_sets: &KeySets,
    metrics: &ExecutionPlanMetricsSet,
    partition: usize,
) -> SendableRecordBatchStream {
    let schema = input.schema();
    let mut filters: Vec<PushedFilter> = filters
        .iter()
        .map(|f| PushedFilter::new(f, key_sets.of(f)))
        .collect();
    let baseline = BaselineMetrics::new(metrics, partition);
    let counts = Counts {
        skipped: MetricBuilder::new(metrics).counter("skipped_filter_batches", partition),
        by_keys: MetricBuilder::new(metrics).counter("build_key_batches", partition),
    };
    let rows = input.filter_map(move |batch| {
        let timer = baseline.elapsed_compute().timer();
        let batch = batch
            .and_then(|b| filtered(b, &mut filters, &counts))
            .transpose();
        timer.done();
        if let Some(Ok(b)) = &batch {
            baseline.record_output(b.num_rows());
        }
        std::future::ready(batch)
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, rows))
}

/// What a scan's filtered stream counts, batch by batch.
struct Counts {
    /// Batches a filter set aside was not evaluated on.
    skipped: Count,
    /// Batches tested against a join's build keys.
    by_keys: Count,
}

/// `batch`'s rows that pass every one of `filters` (their masks combined,
/// the batch copied once); `None` if none does.
fn filtered(
    batch: RecordBatch,
    filters: &mut [PushedFilter],
    counts: &Counts,
) -> Result<Option<RecordBatch>> {
    let mut combined: Option<BooleanArray> = None;
    let (mut skipped, mut by_keys) = (false, false);
    for filter in filters {
        let Some(mask) = filter.mask(&batch)? else {
            if !skipped {
                counts.skipped.add(1);
                skipped = true;
            }
            continue;
        };
        if filter.by_keys() && !by_keys {
            counts.by_keys.add(1);
            by_keys = true;
        }
        let both = match combined {
            Some(both) => and(&both, &mask)?,
            None => mask,
        };
        if both.true_count() == 0 {
            // No row is left: the other filters are not evaluated.
            return Ok(None);
        }
        combined = Some(both);
    }
    let batch = match combined {
        Some(mask) if mask.true_count() < batch.num_rows() => filter_record_batch(&batch, &mask)?,
        _ => batch,
    };
    Ok((batch.num_rows() > 0).then_some(batch))
}

/// The current value of the dynamic filter `expr`, with each filter a
/// partitioned hash join pushes made cheaper: true of every row it is true
/// of, so the join, which matches every row it is given, answers the same.
///
/// A join whose build side is split by hash pushes, per partition `i` of
/// `n`, `CASE hash(key) % n WHEN i THEN bounds_i AND member_i ... END`,
/// where `member_i` is an `IN` list or a lookup in partition `i`'s hash
/// table. Row by row that hashes each key twice (the routing, then the
/// lookup) and splits and merges the batch per partition: more than the
/// join's own probe. Its cheaper form is `(bounds_0 AND in_0) OR ... OR
/// (bounds_n AND in_n)`, with hash-table lookups dropped (taken as true)
/// and `IN` lists kept: a key's own partition's branch is among them. A
/// join with one hash table for all partitions pushes `bounds AND lookup`
/// alone, one hashing per key, which is kept as it is.
fn cheaper(expr: &Arc<dyn PhysicalExpr>) -> Result<Arc<dyn PhysicalExpr>> {
    let value = snapshot_physical_expr(Arc::clone(expr))?;
    value
        .transform_down(|e| {
            let Some(case) = e.downcast_ref::<CaseExpr>() else {
                return Ok(Transformed::no(e));
            };
            if !routes_by_hash(case) {
                return Ok(Transformed::no(e));
            }
            let branches = case
                .when_then_expr()
                .iter()
                .map(|(_, then)| then)
                .chain(case.else_expr());
            let any = branches
                .filter(|then| !is_false(then))
                .map(without_lookups)
                .reduce(|a, b| Arc::new(BinaryExpr::new(a, Operator::Or, b)))
                .unwrap_or_else(|| lit(false));
            Ok(Transformed::new(any, true, TreeNodeRecursion::Jump))
        })
        .map(|t| t.data)
}

/// Whether `case` picks its branch by `hash(key) % n`, as a partitioned hash
/// join's dynamic filter does.
fn routes_by_hash(case: &CaseExpr) -> bool {
    case.expr()
        .and_then(|routing| routing.downcast_ref::<BinaryExpr>())
        .is_some_and(|modulo| *modulo.op() == Operator::Modulo && modulo.left().is::<HashExpr>())
}

fn is_false(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.downcast_ref::<Literal>()
        .is_some_and(|l| l.value() == &ScalarValue::Boolean(Some(false)))
}

/// `expr` with the hash-table lookups among its `AND`s and `OR`s taken as
/// true: true of every row `expr` is true of.
fn without_lookups(expr: &Arc<dyn PhysicalExpr>) -> Arc<dyn PhysicalExpr> {
    if expr.is::<HashTableLookupExpr>() {
        return lit(true);
    }
    match expr.downcast_ref::<BinaryExpr>() {
        Some(b) if matches!(b.op(), Operator::And | Operator::Or) => Arc::new(BinaryExpr::new(
            without_lookups(b.left()),
            *b.op(),
            without_lookups(b.right()),
        )),
        _ => Arc::clone(expr),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array};
    use arrow::datatypes::Schema;
    use datafusion::physical_expr::expressions::{Column, in_list};
    use datafusion::physical_plan::filter::batch_filter;
    use datafusion::physical_plan::joins::join_hash_map::JoinHashMapU32;
    use datafusion::physical_plan::joins::{Map, SeededRandomState};

    fn ids(batch: &RecordBatch) -> Vec<i64> {
        let column = batch.column(0).as_any().downcast_ref::<Int64Array>();
        column.expect("int64").values().to_vec()
    }

    #[test]
    fn a_partitioned_join_filter_is_evaluated_without_its_routing_and_lookups() {
        let batch = RecordBatch::try_from_iter([(
            "i",
            Arc::new(Int64Array::from_iter_values(0..40)) as ArrayRef,
        )])
        .expect("batch");
        let schema: &Schema = &batch.schema();
        let i = || Arc::new(Column::new("i", 0)) as Arc<dyn PhysicalExpr>;
        let and = |a, b| Arc::new(BinaryExpr::new(a, Operator::And, b)) as Arc<dyn PhysicalExpr>;
        let between = |lo: i64, hi: i64| {
            and(
                Arc::new(BinaryExpr::new(i(), Operator::GtEq, lit(lo))),
                Arc::new(BinaryExpr::new(i(), Operator::LtEq, lit(hi))),
            )
        };
        let seeds = SeededRandomState::with_seed(7);
        // Partition 0: a lookup in an empty hash table (true of no row);
        // partition 1: an IN list.
        let empty = Arc::new(Map::HashMap(Box::new(JoinHashMapU32::with_capacity(0))));
        let lookup = Arc::new(HashTableLookupExpr::new(
            vec![i()],
            seeds.clone(),
            empty,
            "hash_lookup".to_string(),
        ));
        let listed = in_list(i(), vec![lit(20_i64), lit(25_i64)], &false, schema).expect("in");
        let routing = Arc::new(BinaryExpr::new(
            Arc::new(HashExpr::new(
                vec![i()],
                seeds,
                "hash_repartition".to_string(),
            )),
            Operator::Modulo,
            lit(ScalarValue::UInt64(Some(2))),
        ));
        let pushed: Arc<dyn PhysicalExpr> = Arc::new(
            CaseExpr::try_new(
                Some(routing),
                vec![
                    (
                        lit(ScalarValue::UInt64(Some(0))),
                        and(between(0, 9), lookup),
                    ),
                    (
                        lit(ScalarValue::UInt64(Some(1))),
                        and(between(20, 29), listed),
                    ),
                ],
                Some(lit(false)),
            )
            .expect("case"),
        );
        let cheap = cheaper(&pushed).expect("cheaper");
        let shown = cheap.to_string();
        assert!(
            !shown.contains("CASE") && !shown.contains("hash_"),
            "{shown}"
        );
        let kept = ids(&batch_filter(&batch, &cheap).expect("cheap filter"));
        let mut expected: Vec<i64> = (0..=9).collect();
        expected.extend([20, 25]);
        assert_eq!(kept, expected, "{shown}");
        // True of every row the pushed filter is true of.
        let exact = ids(&batch_filter(&batch, &pushed).expect("pushed filter"));
        assert!(exact.iter().all(|id| kept.contains(id)), "{exact:?}");
    }

    #[test]
    fn other_filters_are_evaluated_as_they_are() {
        let column = Arc::new(Column::new("i", 0)) as Arc<dyn PhysicalExpr>;
        let bound: Arc<dyn PhysicalExpr> =
            Arc::new(BinaryExpr::new(column, Operator::Lt, lit(5_i64)));
        assert_eq!(
            cheaper(&bound).expect("cheaper").to_string(),
            bound.to_string()
        );
    }

    #[test]
    fn filters_combine_their_masks_and_a_set_aside_filter_counts_each_batch_once() {
        use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
        let batch = RecordBatch::try_from_iter([(
            "i",
            Arc::new(Int64Array::from_iter_values(0..10_000)) as ArrayRef,
        )])
        .expect("batch");
        let i = || Arc::new(Column::new("i", 0)) as Arc<dyn PhysicalExpr>;
        let binary = |a, op, b| Arc::new(BinaryExpr::new(a, op, b)) as Arc<dyn PhysicalExpr>;
        let below = binary(i(), Operator::Lt, lit(7_000i64));
        let even = binary(
            binary(i(), Operator::Modulo, lit(2i64)),
            Operator::Eq,
            lit(0i64),
        );
        // Two dynamic filters that keep every row: set aside once judged.
        let keeps_all = || {
            Arc::new(DynamicFilterPhysicalExpr::new(vec![i()], lit(true))) as Arc<dyn PhysicalExpr>
        };
        let exprs = [below, even, keeps_all(), keeps_all()];
        assert_eq!(exprs.iter().filter(|e| is_dynamic(e)).count(), 2);
        let mut filters: Vec<PushedFilter> =
            exprs.iter().map(|e| PushedFilter::new(e, None)).collect();
        let counts = Counts {
            skipped: Count::new(),
            by_keys: Count::new(),
        };
        let expected: Vec<i64> = (0..7_000).filter(|i| i % 2 == 0).collect();
        for round in 0..3 {
            let kept = filtered(batch.clone(), &mut filters, &counts)
                .expect("filtered")
                .expect("rows");
            assert_eq!(ids(&kept), expected, "batch {round}");
        }
        // Judged after the second batch (20,000 rows seen): the third batch is
        // counted once, though both filters were set aside for it.
        assert_eq!(counts.skipped.value(), 1);
        assert_eq!(counts.by_keys.value(), 0);
        let none = binary(i(), Operator::Lt, lit(0i64));
        let mut filters = vec![PushedFilter::new(&none, None)];
        assert!(
            filtered(batch, &mut filters, &counts)
                .expect("filtered")
                .is_none()
        );
    }
}

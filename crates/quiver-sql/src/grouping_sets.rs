//! `GROUP BY ROLLUP`, `CUBE` and `GROUPING SETS` aggregated once at the
//! finest grain, then rolled up (issue 68).
//!
//! DataFusion evaluates a grouping-set aggregation by sending every input
//! row through the hash table once per grouping set: a `CUBE` of three
//! columns looks up and updates 8 groups per row, a `ROLLUP` of three 4.
//! [`RollUpGroupingSets`] puts a partial aggregation by all the grouping
//! expressions together under it, which sees each row once and gives a few
//! rows per group of the finest grain; the grouping-set aggregation then
//! merges those partial states (`AggregateMode::PartialReduce`) instead of
//! reading raw rows. An aggregation in one phase (`Single`) is left as it
//! is.
//!
//! ```text
//! AggregateExec: mode=Partial, gby=[(a, b), (a, NULL), (NULL, NULL)]
//!   input
//! ```
//! becomes
//! ```text
//! AggregateExec: mode=PartialReduce, gby=[(a@0, b@1), (a@0, NULL), (NULL, NULL)]
//!   AggregateExec: mode=Partial, gby=[(a, b)]  (with a constant __grouping_id)
//!     input
//! ```
//!
//! Only where the finest grain is itself one of the sets (every `ROLLUP`
//! and `CUBE`): a partial aggregation by columns no set groups by together
//! could have many more groups than any set (`GROUPING SETS ((brand),
//! (type), (container))`), and measured slower.
//!
//! A partition of no rows is the exception: DataFusion's grouping-set
//! aggregation then gives the empty set's row (`()`: a count of 0, a null
//! sum) by priming its accumulators with raw rows, which the merging mode
//! cannot take (avg's accumulator panicked, given its two state columns to
//! update). [`RollUpExec`] runs the merge and looks at its input first: a
//! partition that holds no finest-grain states is answered by the original
//! aggregation over no rows, as DataFusion would have.
//!
//! Every aggregate function's partial state merges (that is what the
//! partial and final phases are), so any aggregate is taken, but not those
//! with a `FILTER`, an `ORDER BY` of their own or `DISTINCT`. The inner
//! aggregation is a grouping set of one set, all columns present, so its
//! output has the `__grouping_id` column where the merging phase expects
//! the states to start one column after the grouping columns.

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, internal_err};
use datafusion::config::ConfigOptions;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use futures::{StreamExt, TryStreamExt};

/// The physical optimizer rule: grouping sets rolled up from one partial
/// aggregation at the finest grain (module docs).
#[derive(Debug, Default)]
pub(crate) struct RollUpGroupingSets;

impl RollUpGroupingSets {
    /// `aggregate` rolled up from a partial aggregation by all its grouping
    /// expressions, if it is a grouping-set aggregation of raw rows whose
    /// aggregates all merge as they are.
    fn rewrite(aggregate: &AggregateExec) -> Result<Option<RollUpExec>> {
        // Only the partial phase of a plan in two: its output is states,
        // which the merge gives too.
        if *aggregate.mode() != AggregateMode::Partial {
            return Ok(None);
        }
        let merging = AggregateMode::PartialReduce;
        let group_by = aggregate.group_expr();
        // The finest grain must be a set the query asks for (as in every
        // ROLLUP and CUBE): then the partial aggregation below does work
        // the plan did anyway, never an aggregation by a grain of more
        // groups than any set has (`GROUPING SETS ((a), (b), (c))`).
        let finest_asked = group_by
            .groups()
            .iter()
            .any(|set| set.iter().all(|null| !null));
        if !group_by.has_grouping_set()
            || !finest_asked
            || group_by.groups().len() < 2
            || group_by.expr().is_empty()
            || aggregate.limit_options().is_some()
            || aggregate.filter_expr().iter().any(Option::is_some)
            || aggregate
                .aggr_expr()
                .iter()
                .any(|a| a.is_distinct() || !a.order_bys().is_empty())
        {
            return Ok(None);
        }
        let columns = group_by.expr().len();
        // One grouping set, every expression present: the finest grain, with
        // a `__grouping_id` (always 0) where the merge expects it.
        let finest = PhysicalGroupBy::new(
            group_by.expr().to_vec(),
            group_by.null_expr().to_vec(),
            vec![vec![false; columns]],
            true,
        );
        let partial = AggregateExec::try_new(
            AggregateMode::Partial,
            finest,
            aggregate.aggr_expr().to_vec(),
            aggregate.filter_expr().to_vec(),
            Arc::clone(aggregate.input()),
            aggregate.input_schema(),
        )?;
        // The grouping sets again, over the partial's grouping columns.
        let exprs = group_by
            .expr()
            .iter()
            .enumerate()
            .map(|(index, (_, name))| {
                (
                    Arc::new(Column::new(name, index)) as Arc<dyn PhysicalExpr>,
                    name.clone(),
                )
            })
            .collect();
        let sets = PhysicalGroupBy::new(
            exprs,
            group_by.null_expr().to_vec(),
            group_by.groups().to_vec(),
            true,
        );
        let merged = AggregateExec::try_new(
            merging,
            sets,
            aggregate.aggr_expr().to_vec(),
            vec![None; aggregate.aggr_expr().len()],
            Arc::new(partial),
            aggregate.input_schema(),
        )?;
        // The same rows out: columns, types and names as before.
        if merged.schema().fields() != aggregate.schema().fields() {
            return Ok(None);
        }
        let no_rows = Arc::new(EmptyExec::new(aggregate.input().schema()));
        let original = rebuilt(Arc::new(aggregate.clone()), no_rows)?;
        Ok(Some(RollUpExec {
            merge: Arc::new(merged),
            original,
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }
}

impl PhysicalOptimizerRule for RollUpGroupingSets {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(aggregate) = node.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(node));
            };
            match Self::rewrite(aggregate)? {
                Some(rolled) => Ok(Transformed::yes(Arc::new(rolled) as Arc<dyn ExecutionPlan>)),
                None => Ok(Transformed::no(node)),
            }
        })
        .data()
    }

    fn name(&self) -> &str {
        "quiver_roll_up_grouping_sets"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `plan` over `input`, its one child, its properties made again.
fn rebuilt(
    plan: Arc<dyn ExecutionPlan>,
    input: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan.replace_children(
        vec![input],
        ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
    )
}

/// The grouping sets' merge of the finest grain's states (an
/// [`AggregateExec`] of mode `PartialReduce` over the partial aggregation by
/// every grouping expression), but for a partition of no rows, which the
/// aggregation it replaced answers over no rows (module docs).
#[derive(Debug)]
pub(crate) struct RollUpExec {
    /// The merge, whose one child is the finest grain's partial aggregation.
    merge: Arc<dyn ExecutionPlan>,
    /// The aggregation replaced, over one partition of no rows.
    original: Arc<dyn ExecutionPlan>,
    metrics: ExecutionPlanMetricsSet,
}

impl DisplayAs for RollUpExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => {
                f.write_str("RollUpExec: ")?;
                self.merge.fmt_as(t, f)
            }
            DisplayFormatType::TreeRender => self.merge.fmt_as(t, f),
        }
    }
}

impl ExecutionPlan for RollUpExec {
    fn name(&self) -> &'static str {
        "RollUpExec"
    }

    /// The merge's: the partitions of its input, unordered.
    fn properties(&self) -> &Arc<PlanProperties> {
        self.merge.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.merge.children()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        self.merge.apply_expressions(f)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return internal_err!("RollUpExec has one input, got {}", children.len());
        }
        Ok(Arc::new(Self {
            merge: rebuilt(Arc::clone(&self.merge), Arc::clone(&children[0]))?,
            original: Arc::clone(&self.original),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let Some(finest) = self.merge.children().first().map(|c| Arc::clone(c)) else {
            return internal_err!("RollUpExec has no input");
        };
        let mut states = finest.execute(partition, Arc::clone(&context))?;
        let merge = Arc::clone(&self.merge);
        let original = Arc::clone(&self.original);
        let rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let empty = MetricBuilder::new(&self.metrics).global_counter("empty_partitions");
        let stream = futures::stream::once(async move {
            // The first batch with rows, if any: it decides which plan runs.
            let first = loop {
                match states.next().await {
                    Some(Ok(batch)) if batch.num_rows() == 0 => continue,
                    Some(batch) => break Some(batch?),
                    None => break None,
                }
            };
            let Some(first) = first else {
                empty.add(1);
                return original.execute(0, context);
            };
            let schema = states.schema();
            let read = futures::stream::iter([Ok(first)]).chain(states);
            let input =
                crate::once_plan::once(Box::pin(RecordBatchStreamAdapter::new(schema, read)))?;
            rebuilt(merge, input)?.execute(0, context)
        })
        .try_flatten()
        .inspect_ok(move |batch| rows.add(batch.num_rows()));
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            stream,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::tree_node::TreeNodeRecursion;

    use super::*;
    use datafusion::prelude::SessionConfig;

    use crate::rule_testing::{rows, session, session_with};

    /// 50,000 rows: a of 5 values, b of 7 (a null among them), c of 3, an
    /// integer and a float.
    fn data() -> RecordBatch {
        let n = 50_000i64;
        let a: Vec<String> = (0..n).map(|i| format!("a{}", i % 5)).collect();
        let b: Vec<Option<String>> = (0..n)
            .map(|i| (i % 7 != 3).then(|| format!("b{}", i % 7)))
            .collect();
        let c: Vec<i64> = (0..n).map(|i| i % 3).collect();
        let x: Vec<i64> = (0..n).map(|i| (i * 7919) % 1000).collect();
        let y: Vec<f64> = (0..n).map(|i| ((i * 31) % 97) as f64 / 8.0).collect();
        let schema = Schema::new(vec![
            Field::new("a", DataType::Utf8, false),
            Field::new("b", DataType::Utf8, true),
            Field::new("c", DataType::Int64, false),
            Field::new("x", DataType::Int64, false),
            Field::new("y", DataType::Float64, false),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(StringArray::from(a)),
                Arc::new(StringArray::from(b)),
                Arc::new(Int64Array::from(c)),
                Arc::new(Int64Array::from(x)),
                Arc::new(Float64Array::from(y)),
            ],
        )
        .unwrap()
    }

    /// The grouping sets rolled up: [`RollUpExec`]s over a partial
    /// aggregation of one set.
    fn counted(plan: &Arc<dyn ExecutionPlan>) -> usize {
        let mut rolled = 0;
        plan.apply(|node| {
            if node.downcast_ref::<RollUpExec>().is_some_and(|r| {
                r.children()[0]
                    .downcast_ref::<AggregateExec>()
                    .is_some_and(|below| below.group_expr().groups().len() == 1)
            }) {
                rolled += 1;
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        rolled
    }

    #[tokio::test]
    async fn grouping_sets_give_the_same_rows_rolled_up() {
        let data = data();
        let rule: Arc<dyn PhysicalOptimizerRule + Send + Sync> = Arc::new(RollUpGroupingSets);
        for sql in [
            "SELECT a, b, c, grouping(a, b, c) AS g, sum(x), count(*), min(x), max(y), avg(x), \
             count(b) FROM t GROUP BY CUBE (a, b, c) \
             ORDER BY a NULLS LAST, b NULLS LAST, c NULLS LAST, g",
            "SELECT a, c, sum(x) AS s, avg(y) FROM t GROUP BY ROLLUP (a, c) \
             ORDER BY a NULLS LAST, c NULLS LAST",
            "SELECT a, b, c % 2 AS odd, sum(x), count(*) FROM t \
             GROUP BY GROUPING SETS ((a, b, c % 2), (a), (c % 2), ()) \
             ORDER BY a NULLS LAST, b NULLS LAST, odd NULLS LAST, 4",
            // The same set twice: told apart by __grouping_id's ordinal.
            "SELECT a, sum(x), count(*) FROM t GROUP BY GROUPING SETS ((a), (a), (), ()) \
             ORDER BY a NULLS LAST, 2, 3",
            // No rows at all: the grand total's row alone, a count of 0.
            "SELECT a, b, grouping(a, b) AS g, count(*), sum(x), avg(x), avg(y) FROM t \
             WHERE x < 0 GROUP BY ROLLUP (a, b) ORDER BY g",
            "SELECT a, c, count(*), avg(y) FROM t WHERE y < 0 GROUP BY CUBE (a, c) \
             ORDER BY a NULLS LAST, c NULLS LAST",
        ] {
            let (without, left) = rows(&session(&data, None), sql, counted).await;
            let (with, rolled) = rows(&session(&data, Some(Arc::clone(&rule))), sql, counted).await;
            assert_eq!(left, 0, "{sql}");
            assert_eq!(rolled, 1, "{sql}");
            assert_eq!(with, without, "{sql}");
        }
    }

    #[tokio::test]
    async fn partitions_of_no_rows_give_what_they_gave() {
        // 13 batches dealt round-robin to 16 partitions: 3 get no rows, and
        // the grouping sets' merge must not be primed with raw rows there.
        let data = data();
        let rule: Arc<dyn PhysicalOptimizerRule + Send + Sync> = Arc::new(RollUpGroupingSets);
        let many = || SessionConfig::new().with_target_partitions(16);
        for sql in [
            "SELECT a, b, grouping(a, b) AS g, count(*), sum(x), avg(x), max(y) \
             FROM t GROUP BY ROLLUP (a, b) ORDER BY a NULLS LAST, b NULLS LAST, g",
            "SELECT a, c, count(*), avg(y) FROM t WHERE x < 0 GROUP BY CUBE (a, c) \
             ORDER BY a NULLS LAST, c NULLS LAST",
        ] {
            let (without, left) = rows(&session_with(many(), &data, None), sql, counted).await;
            let (with, rolled) = rows(
                &session_with(many(), &data, Some(Arc::clone(&rule))),
                sql,
                counted,
            )
            .await;
            assert_eq!((left, rolled), (0, 1), "{sql}");
            assert_eq!(with, without, "{sql}");
        }
    }

    #[tokio::test]
    async fn one_partition_gives_the_same_rows() {
        // One partition: DataFusion still plans the partial and final
        // phases, and the partial one is rolled up.
        let data = data();
        let rule: Arc<dyn PhysicalOptimizerRule + Send + Sync> = Arc::new(RollUpGroupingSets);
        let one = || SessionConfig::new().with_target_partitions(1);
        let sql = "SELECT a, b, grouping(a, b) AS g, sum(x), count(*), avg(y) FROM t \
                   GROUP BY ROLLUP (a, b) ORDER BY a NULLS LAST, b NULLS LAST, g";
        let (without, left) = rows(&session_with(one(), &data, None), sql, counted).await;
        let (with, rolled) = rows(&session_with(one(), &data, Some(rule)), sql, counted).await;
        assert_eq!((left, rolled), (0, 1));
        assert_eq!(with, without);
    }

    #[tokio::test]
    async fn aggregates_that_do_not_merge_as_they_are_are_left_alone() {
        let data = data();
        let rule: Arc<dyn PhysicalOptimizerRule + Send + Sync> = Arc::new(RollUpGroupingSets);
        for sql in [
            "SELECT a, b, count(DISTINCT x) FROM t GROUP BY ROLLUP (a, b)",
            "SELECT a, b, sum(x) FILTER (WHERE y > 2) FROM t GROUP BY ROLLUP (a, b)",
            "SELECT a, b, array_agg(x ORDER BY x) FROM t GROUP BY ROLLUP (a, b)",
            // Sets none of which holds every column: the finest grain is
            // not asked for.
            "SELECT a, b, c, sum(x) FROM t GROUP BY GROUPING SETS ((a), (b), (c))",
            // A plain GROUP BY is not a grouping set.
            "SELECT a, b, sum(x) FROM t GROUP BY a, b",
        ] {
            let (without, _) = rows(&session(&data, None), sql, counted).await;
            let (with, rolled) = rows(&session(&data, Some(Arc::clone(&rule))), sql, counted).await;
            assert_eq!(rolled, 0, "{sql}");
            assert_eq!(with.lines().count(), without.lines().count(), "{sql}");
        }
    }
}

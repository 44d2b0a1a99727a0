//! The sizes DataFusion compares to choose a hash join's build side, made
//! from rows past a join.
//!
//! DataFusion's join selection builds a hash join's table from the input it
//! estimates smaller in bytes (`total_byte_size`), or in rows when either
//! side has no byte estimate. Below any join the bytes are good: a scan's,
//! scaled by a filter's selectivity. Past a join they are not: an inner
//! join's output keeps each input column's byte size as it was, whatever rows
//! the join is estimated to give, and a semi or anti join (or any operator
//! that sums its columns' sizes) above it adds those up. So TPC-H q21's
//! `NOT EXISTS` join saw the `EXISTS` join's output, a few hundred
//! thousand rows, as large as all of `lineitem`'s keys, and built its hash
//! table from its subquery's millions of rows instead (docs/performance.md,
//! "Build sides past a join").
//!
//! [`JoinOutputSize`] is a statistics provider in the session's
//! `StatisticsRegistry`, which join selection consults when
//! `datafusion.optimizer.use_statistics_registry` is on (quiver turns it
//! on, `settings.rs`). For a join, and for every operator with a join below
//! it, it keeps DataFusion's own estimate but for the bytes: where DataFusion
//! gives some, they become the rows times the width of a row of the
//! operator's schema. Where it gives none it still gives none, so join
//! selection compares rows there as it did (and chooses a single hash table
//! for all partitions by the row threshold, as it did). Below every join it
//! leaves DataFusion's estimate as it is.

use std::sync::Arc;

use arrow::datatypes::Schema;
use datafusion::common::stats::Precision;
use datafusion::error::Result;
use datafusion::physical_plan::joins::{
    CrossJoinExec, HashJoinExec, NestedLoopJoinExec, SortMergeJoinExec, SymmetricHashJoinExec,
};
use datafusion::physical_plan::operator_statistics::{
    DefaultStatisticsProvider, ExtendedStatistics, StatisticsProvider, StatisticsRegistry,
    StatisticsResult,
};
use datafusion::physical_plan::{ExecutionPlan, StatisticsArgs, StatisticsContext};

/// The bytes a value of a type without a fixed width is taken to hold: a
/// string view and a short string's bytes.
const VARIABLE_WIDTH: usize = 24;

/// The provider (module docs).
#[derive(Debug, Default)]
pub(crate) struct JoinOutputSize;

/// The mark an operator's statistics carry when a join lies at or below it.
struct PastJoin;

/// The session's statistics registry: [`JoinOutputSize`], then DataFusion's
/// own estimates.
pub(crate) fn registry() -> StatisticsRegistry {
    StatisticsRegistry::with_providers(vec![
        Arc::new(JoinOutputSize),
        Arc::new(DefaultStatisticsProvider),
    ])
}

impl StatisticsProvider for JoinOutputSize {
    fn compute_statistics(
        &self,
        plan: &dyn ExecutionPlan,
        child_stats: &[ExtendedStatistics],
    ) -> Result<StatisticsResult> {
        let past_join = is_join(plan)
            || child_stats
                .iter()
                .any(|stats| stats.has_extension::<PastJoin>());
        if !past_join {
            return Ok(StatisticsResult::Delegate);
        }
        // DataFusion's own estimate, as the default provider computes it.
        let mut base =
            Arc::unwrap_or_clone(StatisticsContext::new().compute(plan, &StatisticsArgs::new())?);
        // Only bytes DataFusion estimated are made again: where it has none,
        // join selection compares rows, and keeps doing so.
        if let (Some(_), Some(rows)) = (base.total_byte_size.get_value(), base.num_rows.get_value())
        {
            let width = row_width(&plan.schema());
            base.total_byte_size = Precision::Inexact(rows.saturating_mul(width));
        }
        let mut stats = ExtendedStatistics::new(base);
        stats.set_extension(PastJoin);
        Ok(StatisticsResult::Computed(stats))
    }
}

fn is_join(plan: &dyn ExecutionPlan) -> bool {
    plan.downcast_ref::<HashJoinExec>().is_some()
        || plan.downcast_ref::<SortMergeJoinExec>().is_some()
        || plan.downcast_ref::<NestedLoopJoinExec>().is_some()
        || plan.downcast_ref::<CrossJoinExec>().is_some()
        || plan.downcast_ref::<SymmetricHashJoinExec>().is_some()
}

/// The bytes of one row of `schema`: each fixed-width column's width, and
/// [`VARIABLE_WIDTH`] for the others.
fn row_width(schema: &Schema) -> usize {
    schema
        .fields()
        .iter()
        .map(|field| {
            field
                .data_type()
                .primitive_width()
                .unwrap_or(VARIABLE_WIDTH)
        })
        .sum::<usize>()
        .max(1)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use arrow::array::{ArrayRef, Int32Array, Int64Array, StringArray};
    use arrow::record_batch::RecordBatch;
    use arrow::util::pretty::pretty_format_batches;
    use datafusion::common::JoinType;
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::execution::SessionStateBuilder;
    use datafusion::physical_plan::collect;
    use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};

    use super::*;

    fn write(dir: &Path, name: &str, columns: Vec<(&str, ArrayRef)>) {
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        crate::rule_testing::write_parquet(&dir.join(format!("{name}.parquet")), &batch, None);
    }

    /// TPC-H's q21 in small: 1,000 suppliers in 25 nations, and 200,000
    /// line items of 50,000 orders, one in five received late (at most one
    /// per order).
    fn tables(dir: &Path) {
        let suppliers = 1_000i64;
        write(
            dir,
            "supplier",
            vec![
                (
                    "s_suppkey",
                    Arc::new(Int64Array::from_iter_values(0..suppliers)),
                ),
                (
                    "s_name",
                    Arc::new(StringArray::from_iter_values(
                        (0..suppliers).map(|i| format!("Supplier#{i:09}")),
                    )),
                ),
                (
                    "s_nationkey",
                    Arc::new(Int64Array::from_iter_values((0..suppliers).map(|i| i % 25))),
                ),
            ],
        );
        write(
            dir,
            "nation",
            vec![
                ("n_nationkey", Arc::new(Int64Array::from_iter_values(0..25))),
                (
                    "n_name",
                    Arc::new(StringArray::from_iter_values(
                        (0..25).map(|i| format!("N{i}")),
                    )),
                ),
            ],
        );
        let items = 200_000i64;
        write(
            dir,
            "lineitem",
            vec![
                (
                    "l_orderkey",
                    Arc::new(Int64Array::from_iter_values((0..items).map(|i| i / 4))),
                ),
                (
                    "l_suppkey",
                    Arc::new(Int64Array::from_iter_values(
                        (0..items).map(|i| (i * 7919) % suppliers),
                    )),
                ),
                (
                    "l_commitdate",
                    Arc::new(Int32Array::from_iter_values(
                        (0..items).map(|i| (i % 100) as i32),
                    )),
                ),
                (
                    "l_receiptdate",
                    Arc::new(Int32Array::from_iter_values(
                        (0..items).map(|i| (i % 100 + if i % 5 == 0 { 3 } else { -2 }) as i32),
                    )),
                ),
            ],
        );
    }

    const QUERY: &str = "SELECT s_name, count(*) AS numwait \
        FROM supplier, lineitem l1, nation \
        WHERE s_suppkey = l1.l_suppkey AND l1.l_receiptdate > l1.l_commitdate \
        AND EXISTS (SELECT * FROM lineitem l2 WHERE l2.l_orderkey = l1.l_orderkey \
            AND l2.l_suppkey <> l1.l_suppkey) \
        AND NOT EXISTS (SELECT * FROM lineitem l3 WHERE l3.l_orderkey = l1.l_orderkey \
            AND l3.l_suppkey <> l1.l_suppkey AND l3.l_receiptdate > l3.l_commitdate) \
        AND s_nationkey = n_nationkey AND n_name = 'N5' \
        GROUP BY s_name ORDER BY numwait DESC, s_name LIMIT 20";

    /// The query's rows, and the rows the `NOT EXISTS` join built its hash
    /// table from and probed it with, in a session with or without the
    /// registry.
    async fn run(dir: &Path, with_registry: bool) -> (String, usize, usize) {
        let mut config = SessionConfig::new().with_target_partitions(2);
        config.options_mut().optimizer.use_statistics_registry = with_registry;
        let mut builder = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features();
        if with_registry {
            builder = builder.with_statistics_registry(registry());
        }
        let context = SessionContext::new_with_state(builder.build());
        for table in ["supplier", "nation", "lineitem"] {
            let path = dir.join(format!("{table}.parquet"));
            context
                .register_parquet(table, path.to_str().unwrap(), ParquetReadOptions::default())
                .await
                .unwrap();
        }
        let plan = context
            .sql(QUERY)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let batches = collect(Arc::clone(&plan), context.task_ctx())
            .await
            .unwrap();
        let mut sides = None;
        plan.apply(|node| {
            if let Some(join) = node.downcast_ref::<HashJoinExec>()
                && matches!(join.join_type(), JoinType::LeftAnti | JoinType::RightAnti)
            {
                let metrics = join.metrics().unwrap();
                let count = |name| metrics.sum_by_name(name).unwrap().as_usize();
                sides = Some((count("build_input_rows"), count("input_rows")));
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        let (build, probe) = sides.expect("a hash anti join");
        (
            pretty_format_batches(&batches).unwrap().to_string(),
            build,
            probe,
        )
    }

    #[tokio::test]
    async fn the_not_exists_join_builds_from_its_smaller_side() {
        let dir = tempfile::tempdir().unwrap();
        tables(dir.path());
        let (rows, build, probe) = run(dir.path(), true).await;
        let (datafusions, df_build, df_probe) = run(dir.path(), false).await;
        assert_eq!(rows, datafusions);
        assert!(rows.lines().count() > 5, "{rows}");
        // DataFusion's bytes past the joins put the subquery's rows on the
        // build side: this test's case is the one the provider is for.
        assert!(
            df_build > df_probe,
            "DataFusion built from {df_build} rows, probed {df_probe}"
        );
        assert!(build < probe, "built from {build} rows, probed {probe}");
    }
}

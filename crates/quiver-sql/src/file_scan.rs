//! The dynamic filters of joins and top-ks applied to the rows a Parquet
//! scan reads.
//!
//! With `parquet.pushdown_filters` off (DataFusion's default, and quiver's:
//! docs/performance.md says why), DataFusion's Parquet scan puts the filters
//! pushed to it after planning into its predicate, to prune row groups and
//! pages by their statistics, and yields every row of those it reads. A hash
//! join's build-side keys then drop nothing before the join: in TPC-H q17
//! and q18 all of lineitem goes through the aggregation under the join,
//! though the join keeps a few thousand of its rows. [`FileDynamicFilters`],
//! a physical optimizer rule run after DataFusion's own, puts a
//! [`DynamicFilterExec`] above each Parquet scan that holds dynamic filters.
//! It applies them to each batch as the batch is read, as the stored scan
//! does (`pushed.rs`: a cheaper form where a partitioned join pushes one,
//! set aside where a filter keeps nearly every row). A dynamic filter is a
//! shortcut its producer does not rely on, so the answer is the same with
//! it or without it.

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::{
    Transformed, TransformedResult, TreeNode, TreeNodeIterator, TreeNodeRecursion,
};
use datafusion::common::{Statistics, internal_err};
use datafusion::config::ConfigOptions;
use datafusion::datasource::physical_plan::{FileSource, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::utils::{reassign_expr_columns, split_conjunction};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

use crate::build_keys::{KeySets, KeyedScan};
use crate::pushed::{filtered_stream, is_dynamic};

/// The physical optimizer rule (module docs).
#[derive(Debug, Default)]
pub(crate) struct FileDynamicFilters;

impl PhysicalOptimizerRule for FileDynamicFilters {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // A scan already under a `DynamicFilterExec` (the rule run again)
        // is left as it is.
        plan.transform_down(|node| {
            if node.is::<DynamicFilterExec>() {
                return Ok(Transformed::new(node, false, TreeNodeRecursion::Jump));
            }
            Ok(match dynamic_filters(&node) {
                Some(filters) => Transformed::new(
                    Arc::new(DynamicFilterExec::new(node, filters)) as Arc<dyn ExecutionPlan>,
                    true,
                    TreeNodeRecursion::Jump,
                ),
                None => Transformed::no(node),
            })
        })
        .data()
    }

    fn name(&self) -> &str {
        "quiver_file_dynamic_filters"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The dynamic filters of `node`, over its columns, when it is a Parquet
/// scan that holds some and does not apply its predicate to rows.
fn dynamic_filters(node: &Arc<dyn ExecutionPlan>) -> Option<Vec<Arc<dyn PhysicalExpr>>> {
    let scan = node.downcast_ref::<DataSourceExec>()?;
    let (_, parquet) = scan.downcast_to_file_source::<ParquetSource>()?;
    if parquet.table_parquet_options().global.pushdown_filters {
        // The scan filters its rows by its predicate itself.
        return None;
    }
    let predicate = parquet.filter()?;
    // The predicate reads the files' columns; the filters read the scan's.
    let schema = node.schema();
    let filters: Vec<_> = split_conjunction(&predicate)
        .into_iter()
        .filter(|filter| is_dynamic(filter))
        .filter_map(|filter| reassign_expr_columns(Arc::clone(filter), &schema).ok())
        .collect();
    (!filters.is_empty()).then_some(filters)
}

/// Its input's rows that pass its dynamic filters (module docs).
#[derive(Debug, Clone)]
pub(crate) struct DynamicFilterExec {
    input: Arc<dyn ExecutionPlan>,
    /// Over the input's columns: a row is yielded if each is true (or set
    /// aside).
    filters: Vec<Arc<dyn PhysicalExpr>>,
    /// The build keys of the joins that produced some of the filters.
    key_sets: KeySets,
    metrics: ExecutionPlanMetricsSet,
}

impl DynamicFilterExec {
    fn new(input: Arc<dyn ExecutionPlan>, filters: Vec<Arc<dyn PhysicalExpr>>) -> Self {
        Self {
            input,
            filters,
            key_sets: KeySets::default(),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl KeyedScan for DynamicFilterExec {
    fn filters(&self) -> &[Arc<dyn PhysicalExpr>] {
        &self.filters
    }

    fn key_sets(&self) -> &KeySets {
        &self.key_sets
    }

    fn with_key_sets(&self, key_sets: KeySets) -> Arc<dyn ExecutionPlan> {
        Arc::new(Self {
            key_sets,
            metrics: ExecutionPlanMetricsSet::new(),
            ..self.clone()
        })
    }
}

impl DisplayAs for DynamicFilterExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: Vec<String> = self.filters.iter().map(|e| e.to_string()).collect();
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => {
                write!(f, "DynamicFilterExec: filters=[{}]", shown.join(", "))
            }
            DisplayFormatType::TreeRender => write!(f, "filters=[{}]", shown.join(", ")),
        }
    }
}

impl ExecutionPlan for DynamicFilterExec {
    fn name(&self) -> &'static str {
        "DynamicFilterExec"
    }

    /// The input's: a filter keeps the partitioning, the order and every
    /// equivalence of the rows it keeps.
    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        self.filters.iter().apply_until_stop(f)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match <[_; 1]>::try_from(children) {
            Ok([input]) => Ok(Arc::new(Self {
                input,
                metrics: ExecutionPlanMetricsSet::new(),
                ..self.as_ref().clone()
            })),
            Err(children) => {
                internal_err!("DynamicFilterExec has one input, got {}", children.len())
            }
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        Ok(filtered_stream(
            input,
            &self.filters,
            &self.key_sets,
            &self.metrics,
            partition,
        ))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        vec![ChildStats::At(partition)]
    }

    /// The input's, as bounds: the filters may drop rows.
    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        match input_stats {
            [input] => Ok(Arc::new(input.as_ref().clone().to_inexact())),
            _ => internal_err!("DynamicFilterExec has one input"),
        }
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{ArrayRef, Int64Array, RecordBatch};
    use datafusion::execution::SessionStateBuilder;
    use datafusion::prelude::{ParquetReadOptions, SessionContext};

    use super::*;

    fn filters_over_scans(plan: &Arc<dyn ExecutionPlan>) -> usize {
        let mut count = 0;
        plan.apply(|node| {
            if node.is::<DynamicFilterExec>() {
                count += 1;
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        count
    }

    #[tokio::test]
    async fn puts_one_filter_over_the_probe_side_scan_however_often_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, values: Vec<i64>| {
            let path = dir.path().join(format!("{name}.parquet"));
            let batch = RecordBatch::try_from_iter([(
                "id",
                Arc::new(Int64Array::from(values)) as ArrayRef,
            )])
            .unwrap();
            crate::rule_testing::write_parquet(&path, &batch, None);
            path
        };
        let ids = write("ids", (0..1000).collect());
        let keys = write("keys", vec![5, 500, 995]);
        let state = SessionStateBuilder::new()
            .with_default_features()
            .with_physical_optimizer_rule(Arc::new(FileDynamicFilters))
            .build();
        let context = SessionContext::new_with_state(state);
        for (name, path) in [("ids", ids), ("keys", keys)] {
            context
                .register_parquet(name, path.to_str().unwrap(), ParquetReadOptions::default())
                .await
                .unwrap();
        }
        let plan = context
            .sql("SELECT count(*) FROM ids WHERE id IN (SELECT id FROM keys)")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        assert_eq!(filters_over_scans(&plan), 1);
        let again = FileDynamicFilters
            .optimize(plan, &ConfigOptions::default())
            .unwrap();
        assert_eq!(filters_over_scans(&again), 1);
    }
}

//! The scan of a stored table: its batches as they are stored, zero-copy.
//!
//! DataFusion's `DataSourceExec` re-cuts every batch it yields to the
//! session's `batch_size` (8,192 rows). For a stored table that only costs:
//! a `SELECT *` of 1M taxi rows (stored in 65,536-row batches) left the
//! server as 124 IPC messages instead of the raw DoGet's 77, for 30% more
//! server CPU per query. `StoredScanExec` yields the stored batches (or the
//! slices a partition or a limit cuts out of them) unchanged; the Flight
//! encoder caps message sizes anyway, as it does for a raw DoGet.
//!
//! It takes the filters DataFusion pushes down once the plan is made (the
//! `Post` phase of its filter pushdown): the dynamic filters of hash joins
//! (the keys of a join's build side, known before its probe side runs) and of
//! `ORDER BY ... LIMIT` (the current top rows' bound). Each batch is filtered
//! by their values at the time it is read, so the rows a join or a top-k
//! would drop do not go through the operators between them and the scan.
//! How each partition's stream applies them, and which dynamic ones it
//! evaluates in a cheaper form or sets aside, is `pushed.rs`.

use std::fmt;
use std::sync::Arc;

use arrow::array::ArrayData;
use arrow::buffer::Buffer;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{TreeNodeIterator, TreeNodeRecursion};
use datafusion::common::{Statistics, internal_err};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType, SchedulingType};
use datafusion::physical_plan::filter_pushdown::{
    ChildFilterPushdownResult, ChildPushdownResult, FilterPushdownPhase, FilterPushdownPropagation,
    PushedDown,
};
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};

use crate::build_keys::{KeySets, KeyedScan};
use crate::pushed::{filtered_stream, is_dynamic};

/// Partitions of record batches, projected and limited, yielded as they are,
/// or filtered by what the plan pushed down.
#[derive(Debug, Clone)]
pub(crate) struct StoredScanExec {
    /// Each partition's batches, already projected and limited.
    partitions: Vec<Vec<RecordBatch>>,
    properties: Arc<PlanProperties>,
    /// The statistics of the whole scan (before its limit), if known.
    statistics: Option<Statistics>,
    /// How many stored batches the query's filters pruned.
    pruned: usize,
    limited: bool,
    /// Filters pushed down after planning (dynamic ones among them), over
    /// the scan's columns: a row is yielded only if each is true.
    filters: Vec<Arc<dyn PhysicalExpr>>,
    /// The build keys of the joins that produced some of the filters.
    key_sets: KeySets,
    metrics: ExecutionPlanMetricsSet,
}

impl StoredScanExec {
    /// A scan of `partitions` (batches of `schema`), keeping the columns of
    /// `projection` and, in each partition, at most `limit` rows (DataFusion
    /// keeps its own limit above a scan: the total is cut there). Projecting
    /// and slicing clone `Arc`s; no data is copied.
    pub(crate) fn try_new(
        partitions: Vec<Vec<RecordBatch>>,
        schema: &SchemaRef,
        projection: Option<&Vec<usize>>,
        limit: Option<usize>,
    ) -> Result<Self> {
        let schema = match projection {
            Some(columns) => Arc::new(schema.project(columns)?),
            None => Arc::clone(schema),
        };
        let partitions = partitions
            .into_iter()
            .map(|batches| {
                let batches = match limit {
                    Some(limit) => first_rows(&batches, limit),
                    None => batches,
                };
                match projection {
                    Some(columns) => batches.iter().map(|b| b.project(columns)).collect(),
                    None => Ok(batches),
                }
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(partitions.len()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        )
        .with_scheduling_type(SchedulingType::Cooperative);
        Ok(Self {
            partitions,
            properties: Arc::new(properties),
            statistics: None,
            pruned: 0,
            limited: limit.is_some(),
            filters: Vec::new(),
            key_sets: KeySets::default(),
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// The scan with `statistics` of the whole (its columns those of the
    /// projection), after its filters pruned `pruned` stored batches.
    pub(crate) fn with_statistics(mut self, statistics: Statistics, pruned: usize) -> Self {
        self.statistics = Some(statistics);
        self.pruned = pruned;
        self
    }

    /// `stats` of the stored rows, as bounds only when pushed filters may
    /// drop some of them.
    fn filtered_stats(&self, stats: Statistics) -> Statistics {
        if self.filters.is_empty() {
            stats
        } else {
            stats.to_inexact()
        }
    }

    fn rows(&self, partition: Option<usize>) -> usize {
        let count = |batches: &Vec<RecordBatch>| batches.iter().map(RecordBatch::num_rows).sum();
        match partition {
            Some(i) => count(&self.partitions[i]),
            None => self.partitions.iter().map(count).sum(),
        }
    }
}

/// The first `limit` rows of `batches`, as zero-copy slices.
fn first_rows(batches: &[RecordBatch], limit: usize) -> Vec<RecordBatch> {
    let mut left = limit;
    let mut out = Vec::new();
    for batch in batches {
        if left == 0 {
            break;
        }
        let take = batch.num_rows().min(left);
        out.push(batch.slice(0, take));
        left -= take;
    }
    out
}

impl StoredScanExec {
    /// Whether `other` reads the very rows this scan reads (the same
    /// ranges of the same memory, not equal values), in the same partitions.
    /// Each scan slices the stored batches into partitions of its own, so
    /// the arrays are compared by the memory they view.
    pub(crate) fn reads_same(&self, other: &Self) -> bool {
        self.limited == other.limited
            && self.partitions.len() == other.partitions.len()
            && self.partitions.iter().zip(&other.partitions).all(|(a, b)| {
                a.len() == b.len()
                    && a.iter().zip(b).all(|(x, y)| {
                        x.num_columns() == y.num_columns()
                            && x.columns().iter().zip(y.columns()).all(|(p, q)| {
                                Arc::ptr_eq(p, q) || same_memory(&p.to_data(), &q.to_data())
                            })
                    })
            })
    }
}

/// Whether `a` and `b` view the same ranges of the same buffers (and so,
/// buffers being immutable, hold the same values).
fn same_memory(a: &ArrayData, b: &ArrayData) -> bool {
    let same_buffer = |x: &Buffer, y: &Buffer| x.as_ptr() == y.as_ptr() && x.len() == y.len();
    a.data_type() == b.data_type()
        && a.len() == b.len()
        && a.offset() == b.offset()
        && a.buffers().len() == b.buffers().len()
        && a.buffers()
            .iter()
            .zip(b.buffers())
            .all(|(x, y)| same_buffer(x, y))
        && match (a.nulls(), b.nulls()) {
            (None, None) => true,
            (Some(x), Some(y)) => x.offset() == y.offset() && same_buffer(x.buffer(), y.buffer()),
            _ => false,
        }
        && a.child_data().len() == b.child_data().len()
        && a.child_data()
            .iter()
            .zip(b.child_data())
            .all(|(x, y)| same_memory(x, y))
}

impl KeyedScan for StoredScanExec {
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

impl DisplayAs for StoredScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => {
                write!(
                    f,
                    "StoredScanExec: partitions={}, rows={}",
                    self.partitions.len(),
                    self.rows(None)
                )?;
                if self.pruned > 0 {
                    write!(f, ", pruned_batches={}", self.pruned)?;
                }
                if !self.filters.is_empty() {
                    let shown: Vec<String> = self.filters.iter().map(|e| e.to_string()).collect();
                    write!(f, ", filters=[{}]", shown.join(", "))?;
                }
                Ok(())
            }
            DisplayFormatType::TreeRender => write!(f, "rows={}", self.rows(None)),
        }
    }
}

impl ExecutionPlan for StoredScanExec {
    fn name(&self) -> &'static str {
        "StoredScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        // A hash join fills its dynamic filter only if the plan below it
        // holds that filter: this is how it finds out.
        self.filters.iter().apply_until_stop(f)
    }

    fn handle_child_pushdown_result(
        &self,
        phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        _config: &ConfigOptions,
    ) -> Result<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        let parent = child_pushdown_result.parent_filters;
        // Before the plan is final, a FilterExec above keeps its filters (the
        // scan already pruned stored batches by them); after, the scan takes
        // every filter pushed to it. A static one it applies exactly; a
        // dynamic one it may set aside (see `PushedFilter::mask`), so its
        // producer goes on doing what it stands for.
        if phase != FilterPushdownPhase::Post || parent.is_empty() {
            return Ok(FilterPushdownPropagation {
                filters: vec![PushedDown::No; parent.len()],
                updated_node: None,
            });
        }
        let mut scan = self.clone();
        scan.filters
            .extend(parent.iter().map(|f| Arc::clone(&f.filter)));
        scan.metrics = ExecutionPlanMetricsSet::new();
        let exactly = |f: &ChildFilterPushdownResult| {
            if is_dynamic(&f.filter) {
                PushedDown::No
            } else {
                PushedDown::Yes
            }
        };
        Ok(FilterPushdownPropagation {
            filters: parent.iter().map(exactly).collect(),
            updated_node: Some(Arc::new(scan)),
        })
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            internal_err!("StoredScanExec has no children")
        }
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let Some(batches) = self.partitions.get(partition) else {
            return internal_err!(
                "StoredScanExec: partition {partition} of {}",
                self.partitions.len()
            );
        };
        let stream = MemoryStream::try_new(batches.clone(), self.schema(), None)?;
        if self.filters.is_empty() {
            return Ok(Box::pin(stream));
        }
        Ok(filtered_stream(
            Box::pin(stream),
            &self.filters,
            &self.key_sets,
            &self.metrics,
            partition,
        ))
    }

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        if let Some(i) = args.partition()
            && i >= self.partitions.len()
        {
            return internal_err!("StoredScanExec: partition {i} of {}", self.partitions.len());
        }
        let rows = self.rows(args.partition());
        let Some(whole) = &self.statistics else {
            let mut stats = Statistics::new_unknown(&self.schema());
            stats.num_rows = Precision::Exact(rows);
            return Ok(Arc::new(self.filtered_stats(stats)));
        };
        if args.partition().is_none() && !self.limited {
            return Ok(Arc::new(self.filtered_stats(whole.clone())));
        }
        // A part of the whole: its rows are known, the rest is the whole's
        // bounds and a share of its bytes.
        let mut stats = whole.clone().to_inexact();
        if let Precision::Exact(all) | Precision::Inexact(all) = whole.num_rows
            && all > 0
            && let Precision::Exact(bytes) = whole.total_byte_size
        {
            let share = bytes as u128 * rows as u128 / all as u128;
            stats.total_byte_size =
                Precision::Inexact(usize::try_from(share).unwrap_or(usize::MAX));
        }
        stats.num_rows = Precision::Exact(rows);
        Ok(Arc::new(self.filtered_stats(stats)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{Column, binary, lit};
    use datafusion::physical_plan::statistics::StatisticsContext;
    use futures::TryStreamExt;

    fn batch(from: i64, rows: i64) -> RecordBatch {
        let ints: ArrayRef = Arc::new(Int64Array::from_iter_values(from..from + rows));
        let strings: ArrayRef = Arc::new(StringArray::from_iter_values(
            (from..from + rows).map(|i| i.to_string()),
        ));
        RecordBatch::try_from_iter([("i", ints), ("s", strings)]).expect("batch")
    }

    async fn run(exec: &StoredScanExec, partition: usize) -> Vec<RecordBatch> {
        exec.execute(partition, Arc::new(TaskContext::default()))
            .expect("execute")
            .try_collect()
            .await
            .expect("stream")
    }

    #[tokio::test]
    async fn yields_the_stored_batches_uncut() {
        let stored = vec![batch(0, 65_536), batch(65_536, 20_000)];
        let schema = stored[0].schema();
        let exec =
            StoredScanExec::try_new(vec![stored.clone()], &schema, None, None).expect("exec");
        let got = run(&exec, 0).await;
        assert_eq!(got, stored);
        // The very buffers stored, not copies.
        assert_eq!(
            got[0].column(1).to_data().buffers()[1].as_ptr(),
            stored[0].column(1).to_data().buffers()[1].as_ptr()
        );
    }

    #[test]
    fn scans_of_the_same_stored_rows_read_the_same() {
        let stored = [batch(0, 100), batch(100, 50)];
        let scan = |batches: Vec<RecordBatch>| {
            let schema = batches[0].schema();
            StoredScanExec::try_new(vec![batches], &schema, Some(&vec![1, 0]), None).expect("exec")
        };
        // Slices made apart of the same rows: other arrays, the same memory.
        let slices = || vec![stored[0].slice(10, 90), stored[1].clone()];
        assert!(scan(slices()).reads_same(&scan(slices())));
        // Equal values in other memory, and other rows of the same memory.
        let copied = vec![batch(10, 90), batch(100, 50)];
        assert!(!scan(slices()).reads_same(&scan(copied)));
        let other = vec![stored[0].slice(11, 89), stored[1].clone()];
        assert!(!scan(slices()).reads_same(&scan(other)));
    }

    #[tokio::test]
    async fn projects_and_limits_each_partition() {
        let partitions = vec![vec![batch(0, 10), batch(10, 10)], vec![batch(20, 5)]];
        let schema = partitions[0][0].schema();
        let exec =
            StoredScanExec::try_new(partitions, &schema, Some(&vec![1]), Some(12)).expect("exec");
        assert_eq!(exec.schema().fields().len(), 1);
        assert_eq!(exec.schema().field(0).name(), "s");
        let first = run(&exec, 0).await;
        assert_eq!(
            first.iter().map(RecordBatch::num_rows).collect::<Vec<_>>(),
            [10, 2]
        );
        assert_eq!(first[0].num_columns(), 1);
        let second = run(&exec, 1).await;
        assert_eq!(second.iter().map(RecordBatch::num_rows).sum::<usize>(), 5);
        assert!(exec.execute(2, Arc::new(TaskContext::default())).is_err());
    }

    /// `exec` after the plan pushed `filter` to it in `phase`: the scan it
    /// became, if it took the filter.
    fn pushed(
        exec: &StoredScanExec,
        phase: FilterPushdownPhase,
        filter: Arc<dyn PhysicalExpr>,
    ) -> Option<Arc<dyn ExecutionPlan>> {
        let result = ChildPushdownResult {
            parent_filters: vec![ChildFilterPushdownResult {
                filter,
                child_results: vec![],
            }],
            self_filters: vec![],
        };
        let propagated = exec
            .handle_child_pushdown_result(phase, result, &ConfigOptions::default())
            .expect("pushdown");
        let taken = propagated.updated_node.is_some();
        assert_eq!(propagated.filters.len(), 1);
        assert_eq!(
            matches!(propagated.filters[0], PushedDown::Yes),
            taken,
            "a static filter is pushed down exactly when the scan took it"
        );
        propagated.updated_node
    }

    #[tokio::test]
    async fn takes_filters_pushed_after_planning_and_applies_them_exactly() {
        let stored = vec![batch(0, 100), batch(100, 100)];
        let schema = stored[0].schema();
        let exec = StoredScanExec::try_new(vec![stored], &schema, None, None).expect("exec");
        let filter = binary(
            Arc::new(Column::new("i", 0)),
            Operator::Lt,
            lit(150_i64),
            &schema,
        )
        .expect("filter");
        // Before the plan is final, a FilterExec above keeps its filter.
        assert!(pushed(&exec, FilterPushdownPhase::Pre, Arc::clone(&filter)).is_none());
        let filtered = pushed(&exec, FilterPushdownPhase::Post, filter).expect("taken");
        let got: Vec<RecordBatch> = filtered
            .execute(0, Arc::new(TaskContext::default()))
            .expect("execute")
            .try_collect()
            .await
            .expect("stream");
        let rows: usize = got.iter().map(RecordBatch::num_rows).sum();
        assert_eq!(rows, 150);
        // The stored rows are now only a bound on what it yields.
        let stats = StatisticsContext::new()
            .compute(filtered.as_ref(), &StatisticsArgs::new())
            .expect("statistics");
        assert_eq!(stats.num_rows, Precision::Inexact(200));
        let mut held = 0;
        filtered
            .apply_expressions(&mut |_| {
                held += 1;
                Ok(TreeNodeRecursion::Continue)
            })
            .expect("expressions");
        assert_eq!(held, 1);
    }

    #[tokio::test]
    async fn an_empty_partition_yields_nothing() {
        let schema = batch(0, 1).schema();
        let exec =
            StoredScanExec::try_new(vec![vec![]], &schema, Some(&vec![0]), None).expect("exec");
        assert!(run(&exec, 0).await.is_empty());
        assert_eq!(exec.rows(None), 0);
    }
}

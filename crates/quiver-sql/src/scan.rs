//! The scan of a stored table: its batches as they are stored, zero-copy.
//!
//! DataFusion's `DataSourceExec` re-cuts every batch it yields to the
//! session's `batch_size` (8,192 rows). For a stored table that only costs:
//! a `SELECT *` of 1M taxi rows (stored in 65,536-row batches) left the
//! server as 124 IPC messages instead of the raw DoGet's 77, for 30% more
//! server CPU per query. `StoredScanExec` yields the stored batches (or the
//! slices a partition or a limit cuts out of them) unchanged; the Flight
//! encoder caps message sizes anyway, as it does for a raw DoGet.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Statistics, internal_err};
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType, SchedulingType};
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};

/// Partitions of record batches, projected and limited, yielded as they are.
#[derive(Debug)]
pub(crate) struct StoredScanExec {
    /// Each partition's batches, already projected and limited.
    partitions: Vec<Vec<RecordBatch>>,
    properties: Arc<PlanProperties>,
    /// The statistics of the whole scan (before its limit), if known.
    statistics: Option<Statistics>,
    /// How many stored batches the query's filters pruned.
    pruned: usize,
    limited: bool,
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
        })
    }

    /// The scan with `statistics` of the whole (its columns those of the
    /// projection), after its filters pruned `pruned` stored batches.
    pub(crate) fn with_statistics(mut self, statistics: Statistics, pruned: usize) -> Self {
        self.statistics = Some(statistics);
        self.pruned = pruned;
        self
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
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
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
        Ok(Box::pin(stream))
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
            return Ok(Arc::new(stats));
        };
        if args.partition().is_none() && !self.limited {
            return Ok(Arc::new(whole.clone()));
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
        Ok(Arc::new(stats))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array, StringArray};
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

    #[tokio::test]
    async fn an_empty_partition_yields_nothing() {
        let schema = batch(0, 1).schema();
        let exec =
            StoredScanExec::try_new(vec![vec![]], &schema, Some(&vec![0]), None).expect("exec");
        assert!(run(&exec, 0).await.is_empty());
        assert_eq!(exec.rows(None), 0);
    }
}

//! A stored table as a DataFusion table: its batches, scanned in place,
//! with the statistics of [`crate::stats`] and its batches pruned by a
//! query's filters.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::DFSchema;
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_optimizer::pruning::PruningPredicateBuilder;
use datafusion::physical_plan::ExecutionPlan;
use quiver_store::{TableVersion, partition_rows};

use crate::join_order::{ColumnEstimate, Estimated};
use crate::scan::StoredScanExec;
use crate::stats::VersionStats;

/// One version of a stored table. A query sees the version it was planned
/// against, however the table changes while it runs.
#[derive(Debug)]
pub(crate) struct StoredTable {
    version: Arc<TableVersion>,
}

impl StoredTable {
    pub(crate) fn new(version: Arc<TableVersion>) -> Self {
        Self { version }
    }

    /// The batches that may hold rows passing every filter of `filters`
    /// (indexes into the version's batches), by their minimums, maximums
    /// and null counts; all of them when the filters say nothing of those.
    fn prune(&self, state: &dyn Session, filters: &[Expr], stats: &VersionStats) -> Vec<usize> {
        let all = || (0..stats.batches()).collect();
        let Some(predicate) = conjunction(filters.iter().cloned()) else {
            return all();
        };
        let schema = self.version.schema();
        let kept = DFSchema::try_from(Arc::clone(schema))
            .and_then(|df_schema| state.create_physical_expr(predicate, &df_schema))
            .and_then(|expr| {
                PruningPredicateBuilder::new()
                    .with_file_schema(Arc::clone(schema))
                    .try_build(expr)
            })
            .and_then(|pruning| {
                if pruning.always_true() {
                    return Ok(None);
                }
                pruning.prune(&stats.pruning(schema)).map(Some)
            });
        match kept {
            Ok(Some(keep)) => keep
                .iter()
                .enumerate()
                .filter_map(|(i, keep)| keep.then_some(i))
                .collect(),
            Ok(None) => all(),
            Err(e) => {
                tracing::debug!(table = %self.version.name(), "no pruning: {e}");
                all()
            }
        }
    }
}

/// Exact rows, and each column's nulls, minimum and maximum over the whole
/// version; a column's distinct values are estimated at the first call for
/// that column, then kept with the version.
impl Estimated for StoredTable {
    fn rows(&self) -> Option<u64> {
        u64::try_from(VersionStats::of(&self.version).rows()).ok()
    }

    fn column(&self, index: usize) -> Option<ColumnEstimate> {
        let stats = VersionStats::of(&self.version);
        let column = stats.column(index);
        Some(ColumnEstimate::new(
            u64::try_from(stats.rows()).ok()?,
            column
                .null_count
                .get_value()
                .and_then(|n| u64::try_from(*n).ok())
                .unwrap_or(0),
            column.min_value.get_value(),
            column.max_value.get_value(),
        ))
    }

    fn distinct(&self, index: usize) -> Option<u64> {
        VersionStats::of(&self.version).distinct(&self.version, index)
    }
}

#[async_trait]
impl TableProvider for StoredTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(self.version.schema())
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    /// Every filter prunes batches, and is applied to the rows above the
    /// scan as well.
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let stats = VersionStats::of(&self.version);
        let kept = self.prune(state, filters, &stats);
        let batches: Vec<&RecordBatch> = self.version.batches().collect();
        let kept_batches: Vec<&RecordBatch> = kept.iter().map(|&i| batches[i]).collect();
        let rows: u64 = kept_batches.iter().map(|b| b.num_rows() as u64).sum();
        // One partition per core at most, each a run of zero-copy row slices;
        // a table of few rows is not split into empty partitions.
        let count = state
            .config()
            .target_partitions()
            .min(usize::try_from(rows).unwrap_or(usize::MAX))
            .max(1);
        let partitions = (0..count)
            .map(|i| partition_rows(kept_batches.iter().copied(), rows, i, count))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let columns = self.version.schema().fields().len();
        let statistics = stats.of_batches(&kept, projection.map(Vec::as_slice), columns);
        // Scanned as stored: no re-cut into `batch_size` rows (scan.rs).
        let scan = StoredScanExec::try_new(partitions, self.version.schema(), projection, limit)?
            .with_statistics(statistics, batches.len() - kept.len());
        Ok(Arc::new(scan))
    }
}

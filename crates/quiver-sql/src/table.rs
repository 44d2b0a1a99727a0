//! A stored table as a DataFusion table: its batches, scanned in place.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::datasource::TableProvider;
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::ExecutionPlan;
use quiver_store::TableVersion;

use crate::scan::StoredScanExec;

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
}

#[async_trait]
impl TableProvider for StoredTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(self.version.schema())
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // One partition per core at most, each a run of zero-copy row slices;
        // a table of few rows is not split into empty partitions.
        let rows = usize::try_from(self.version.num_rows()).unwrap_or(usize::MAX);
        let count = state.config().target_partitions().min(rows).max(1);
        let partitions = (0..count)
            .map(|i| self.version.partition(i, count))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        // Scanned as stored: no re-cut into `batch_size` rows (scan.rs).
        let scan = StoredScanExec::try_new(partitions, self.version.schema(), projection, limit)?;
        Ok(Arc::new(scan))
    }
}

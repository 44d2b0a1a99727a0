//! What the tests of this crate's physical optimizer rules share: a session
//! with or without the rule, over one table.

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use datafusion::datasource::MemTable;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::prelude::SessionContext;

/// A session whose table `t` holds `data` in batches of 4,096 rows (many
/// batches, and a last one that is short), with `rule` run after
/// DataFusion's own if given.
pub(crate) fn session(
    data: &RecordBatch,
    rule: Option<Arc<dyn PhysicalOptimizerRule + Send + Sync>>,
) -> SessionContext {
    let mut builder = SessionStateBuilder::new().with_default_features();
    if let Some(rule) = rule {
        builder = builder.with_physical_optimizer_rule(rule);
    }
    let context = SessionContext::new_with_state(builder.build());
    let batches: Vec<RecordBatch> = (0..data.num_rows())
        .step_by(4096)
        .map(|start| data.slice(start, 4096.min(data.num_rows() - start)))
        .collect();
    let table = MemTable::try_new(data.schema(), vec![batches]).unwrap();
    context.register_table("t", Arc::new(table)).unwrap();
    context
}

//! What the tests of this crate's physical optimizer rules share: a session
//! with or without the rule, over one table, a query's rows in it, and
//! Parquet files to read.

use std::path::Path;
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use arrow::util::pretty::pretty_format_batches;
use datafusion::datasource::MemTable;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::{SessionConfig, SessionContext};

/// A session whose table `t` holds `data` in batches of 4,096 rows (many
/// batches, and a last one that is short), with `rule` run after
/// DataFusion's own if given.
pub(crate) fn session(
    data: &RecordBatch,
    rule: Option<Arc<dyn PhysicalOptimizerRule + Send + Sync>>,
) -> SessionContext {
    session_with(SessionConfig::new(), data, rule)
}

/// [`session`] with `config` (its partitions, say).
pub(crate) fn session_with(
    config: SessionConfig,
    data: &RecordBatch,
    rule: Option<Arc<dyn PhysicalOptimizerRule + Send + Sync>>,
) -> SessionContext {
    session_in(config, Arc::new(RuntimeEnv::default()), data, rule)
}

/// [`session_with`] in `runtime` (a memory limit, say).
pub(crate) fn session_in(
    config: SessionConfig,
    runtime: Arc<RuntimeEnv>,
    data: &RecordBatch,
    rule: Option<Arc<dyn PhysicalOptimizerRule + Send + Sync>>,
) -> SessionContext {
    let mut builder = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features();
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

/// The rows of `sql` in `context`, printed, and `count` of its physical
/// plan (how many of the rule's nodes it holds).
pub(crate) async fn rows(
    context: &SessionContext,
    sql: &str,
    count: fn(&Arc<dyn ExecutionPlan>) -> usize,
) -> (String, usize) {
    let frame = context.sql(sql).await.unwrap();
    let plan = frame.create_physical_plan().await.unwrap();
    let counted = count(&plan);
    let batches = collect(plan, context.task_ctx()).await.unwrap();
    (
        pretty_format_batches(&batches).unwrap().to_string(),
        counted,
    )
}

/// `batch` written to a Parquet file at `path`, with `properties` or the
/// writer's defaults.
pub(crate) fn write_parquet(
    path: &Path,
    batch: &RecordBatch,
    properties: Option<WriterProperties>,
) {
    let file = std::fs::File::create(path).unwrap();
    let mut writer = ArrowWriter::try_new(file, batch.schema(), properties).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
}

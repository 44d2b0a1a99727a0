//! SQL over a stream: a query whose one table, `input`, is a stream of record
//! batches read as the query pulls them ([`SqlEngine::stream_query`]).
//!
//! The stream is read once, in order, by a single-partition plan, so rows
//! leave in the order they came where the query does not reorder them, and a
//! filter or a projection holds a batch or two at a time however long the
//! stream is. Operators that must see everything (a sort, an aggregation, a
//! join's build side) hold what they need under the query's memory limit and
//! fail with `RESOURCES_EXHAUSTED` past it.

use std::sync::{Arc, Mutex};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider, MemorySchemaProvider};
use datafusion::error::DataFusionError;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::ExecutionPlanProperties;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::prelude::SessionContext;
use futures::StreamExt;
use futures::stream::BoxStream;

use crate::catalog::{CATALOG, SCHEMA};
use crate::engine::{Effect, SqlEngine};
use crate::params::number_placeholders;
use crate::query::Query;
use crate::{Result, SqlError};

/// The name the stream has in the query.
pub const INPUT_TABLE: &str = "input";

/// The batches of the stream a query reads; an error ends the query with it.
pub type InputStream = BoxStream<'static, Result<RecordBatch>>;

/// The stream as a partition DataFusion can run once.
struct Input {
    schema: SchemaRef,
    stream: Mutex<Option<InputStream>>,
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Input")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl PartitionStream for Input {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let taken = self.stream.lock().ok().and_then(|mut s| s.take());
        let stream = match taken {
            Some(stream) => stream
                .map(|batch| batch.map_err(|e| DataFusionError::External(Box::new(e))))
                .boxed(),
            None => {
                // A plan that scans `input` twice (a self-join, a union of it
                // with itself) would need the stream kept whole: refused.
                futures::stream::once(async {
                    Err(DataFusionError::Plan(format!(
                        "SQL over a stream reads `{INPUT_TABLE}` once: a query that scans it \
                     twice (a self-join, a union with itself) is not supported"
                    )))
                })
                .boxed()
            }
        };
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            stream,
        ))
    }
}

impl SqlEngine {
    /// Plans `sql` over `input`, a stream of batches of `schema` that the
    /// query sees as the table `input` (and nothing else: no stored table),
    /// with the engine's functions, memory limit and timeout. Only a query is
    /// allowed. The result has one partition.
    pub async fn stream_query(
        &self,
        sql: &str,
        schema: SchemaRef,
        input: InputStream,
    ) -> Result<Query> {
        let started = std::time::Instant::now();
        let query = self.plan_stream_query(sql, schema, input).await;
        match &query {
            Ok(query) => query.count_from(started),
            Err(e) => crate::metrics::record(started, crate::metrics::outcome_of(e)),
        }
        query
    }

    async fn plan_stream_query(
        &self,
        sql: &str,
        schema: SchemaRef,
        input: InputStream,
    ) -> Result<Query> {
        let table = StreamingTable::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Input {
                schema,
                stream: Mutex::new(Some(input)),
            })],
        )?;
        let tables = MemorySchemaProvider::new();
        datafusion::catalog::SchemaProvider::register_table(
            &tables,
            INPUT_TABLE.to_string(),
            Arc::new(table),
        )?;
        let catalog = MemoryCatalogProvider::new();
        catalog.register_schema(SCHEMA, Arc::new(tables))?;
        // The engine's settings and functions; its own catalog of stored
        // tables replaced by one holding `input` alone; one partition, so the
        // stream is read in order by one scan.
        let state = self.one_partition_state();
        let context = SessionContext::new_with_state(state);
        context.register_catalog(CATALOG, Arc::new(catalog));
        let sql = number_placeholders(sql);
        let plan = crate::identifiers::plan(&context.state(), &sql).await?;
        let effect = Effect::of(&plan);
        if effect > Effect::Read {
            return Err(SqlError::invalid(format!(
                "SQL over a stream runs a query over `{INPUT_TABLE}`; this is {}",
                effect.describe()
            )));
        }
        let physical = context.state().create_physical_plan(&plan).await?;
        let physical = if physical.output_partitioning().partition_count() > 1 {
            Arc::new(CoalescePartitionsExec::new(physical)) as _
        } else {
            physical
        };
        self.limited(&context.state(), physical)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use arrow::array::{Array, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};
    use futures::TryStreamExt;
    use quiver_store::TableStore;

    use super::*;
    use crate::EngineOptions;

    fn engine(memory_limit: usize) -> SqlEngine {
        let store = Arc::new(TableStore::new(1 << 30));
        SqlEngine::new(
            store,
            EngineOptions {
                query_memory_limit: memory_limit,
                ..EngineOptions::default()
            },
        )
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]))
    }

    /// `batches` batches of `rows` rows, x counting up from 0; `pulled`
    /// counts the batches the query has taken.
    fn counting(batches: usize, rows: usize, pulled: Arc<AtomicUsize>) -> InputStream {
        let schema = schema();
        futures::stream::iter(0..batches)
            .map(move |b| {
                pulled.fetch_add(1, Ordering::SeqCst);
                let start = (b * rows) as i64;
                let x = Int64Array::from_iter_values(start..start + rows as i64);
                Ok(RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(x)]).expect("a batch"))
            })
            .boxed()
    }

    async fn run(query: &Query) -> Result<Vec<i64>> {
        let batches: Vec<RecordBatch> = query.execute(0)?.try_collect().await?;
        Ok(batches
            .iter()
            .flat_map(|b| {
                let x = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                x.values().to_vec()
            })
            .collect())
    }

    #[tokio::test]
    async fn a_filter_streams_far_more_than_the_memory_limit_in_order() {
        // 64 MiB through a query limited to 1 MiB.
        let engine = engine(1 << 20);
        let pulled = Arc::new(AtomicUsize::new(0));
        let input = counting(128, 65_536, Arc::clone(&pulled));
        let query = engine
            .stream_query(
                "SELECT x * 2 AS y FROM input WHERE x % 1000 = 0",
                schema(),
                input,
            )
            .await
            .unwrap();
        assert_eq!(query.partitions(), 1);
        let got = run(&query).await.unwrap();
        let want: Vec<i64> = (0..128 * 65_536)
            .filter(|x| x % 1000 == 0)
            .map(|x| x * 2)
            .collect();
        assert_eq!(got, want);
        assert_eq!(pulled.load(Ordering::SeqCst), 128);
    }

    #[tokio::test]
    async fn the_stream_is_pulled_as_results_are_read() {
        let engine = engine(1 << 20);
        let pulled = Arc::new(AtomicUsize::new(0));
        let input = counting(1_000, 1_024, Arc::clone(&pulled));
        let query = engine
            .stream_query("SELECT x FROM input", schema(), input)
            .await
            .unwrap();
        let mut results = query.execute(0).unwrap();
        let first = results.next().await.unwrap().unwrap();
        assert_eq!(first.column(0).len(), 1_024);
        // Nothing near the whole stream was read for the first result.
        assert!(pulled.load(Ordering::SeqCst) < 100, "{pulled:?}");
    }

    #[tokio::test]
    async fn an_aggregation_over_the_stream() {
        let engine = engine(1 << 20);
        let input = counting(10, 100, Arc::new(AtomicUsize::new(0)));
        let query = engine
            .stream_query("SELECT sum(x) FROM input", schema(), input)
            .await
            .unwrap();
        assert_eq!(run(&query).await.unwrap(), vec![(0..1_000).sum::<i64>()]);
    }

    #[tokio::test]
    async fn only_input_is_visible_and_only_queries_run() {
        let engine = engine(1 << 20);
        let stream = || counting(1, 1, Arc::new(AtomicUsize::new(0)));
        let err = engine
            .stream_query("SELECT * FROM other", schema(), stream())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("other"), "{err}");
        let err = engine
            .stream_query("CREATE TABLE t AS SELECT * FROM input", schema(), stream())
            .await
            .unwrap_err();
        assert!(matches!(err, SqlError::Invalid(_)), "{err:?}");
        assert!(err.to_string().contains("runs a query"), "{err}");
    }

    #[tokio::test]
    async fn a_second_scan_of_the_stream_is_an_error_not_a_hang() {
        let engine = engine(1 << 20);
        let input = counting(3, 10, Arc::new(AtomicUsize::new(0)));
        let query = engine
            .stream_query(
                "SELECT x FROM input UNION ALL SELECT x FROM input",
                schema(),
                input,
            )
            .await
            .unwrap();
        let err = tokio::time::timeout(std::time::Duration::from_secs(30), run(&query))
            .await
            .expect("bounded")
            .unwrap_err();
        assert!(err.to_string().contains("once"), "{err}");
    }

    #[tokio::test]
    async fn an_error_in_the_stream_ends_the_query_with_it() {
        let engine = engine(1 << 20);
        let schema = schema();
        let ok = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from(vec![1, 2]))],
        )
        .unwrap();
        let input =
            futures::stream::iter(vec![Ok(ok), Err(SqlError::invalid("the client went away"))])
                .boxed();
        let query = engine
            .stream_query("SELECT x FROM input", schema, input)
            .await
            .unwrap();
        let err = run(&query).await.unwrap_err();
        assert!(err.to_string().contains("the client went away"), "{err}");
    }
}

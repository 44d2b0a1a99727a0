//! Stored batches filtered by a SQL predicate and projected: what a DoGet
//! ticket carrying a filter runs (docs/protocol.md, "Tickets").
//!
//! The predicate is an expression over the batches' columns, never more: it
//! is parsed alone (the parser refuses anything after it and any statement),
//! may not hold a query (a subquery, `EXISTS`, `IN (SELECT ...)`, however
//! deep), an aggregate or window function or a parameter, and is planned in
//! a session that has no tables. What runs is a one-partition plan, the
//! batches → filter → projection, in order, under the engine's per-query
//! memory limit and timeout, with the engine's functions (served ones
//! included: they run asynchronously, which only a planned query does).

use std::ops::ControlFlow;
use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::DFSchema;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::{TableProvider, provider_as_source};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan, LogicalPlanBuilder, TableType};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::sql::sqlparser::ast::{Query as SqlQuery, Visit, Visitor};
use futures::StreamExt;

use crate::engine::SqlEngine;
use crate::query::BatchStream;
use crate::scan::StoredScanExec;
use crate::{Result, SqlError};

/// What the scan of the filtered batches is called in the plan (and in
/// DataFusion's messages about it).
const SCAN_NAME: &str = "partition";

/// Batches already in memory as a table of one partition, scanned as they
/// are (zero-copy; only the columns the plan needs).
#[derive(Debug)]
struct Batches {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
}

#[async_trait]
impl TableProvider for Batches {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let scan =
            StoredScanExec::try_new(vec![self.batches.clone()], &self.schema, projection, limit)?;
        Ok(Arc::new(scan))
    }
}

impl SqlEngine {
    /// The rows of `batches` (of `schema`) for which `filter`, a SQL boolean
    /// expression over their columns, is TRUE, projected to `columns`
    /// (indices into `schema`, in order; may be empty: batches of no columns
    /// that keep their row counts), batch by batch, in order. Every batch has
    /// the schema `schema.project(columns)`.
    ///
    /// A filter that does not parse, names an unknown column or function, is
    /// not boolean, or is more than an expression is [`SqlError::Invalid`],
    /// with DataFusion's message. Running it fails as a query does (a failed
    /// cast is [`SqlError::Invalid`], the memory limit
    /// [`SqlError::ResourcesExhausted`], the timeout [`SqlError::Timeout`]).
    pub async fn filter_batches(
        &self,
        schema: &SchemaRef,
        batches: Vec<RecordBatch>,
        filter: &str,
        columns: &[usize],
    ) -> Result<BatchStream> {
        let output =
            Arc::new(schema.project(columns).map_err(|e| {
                SqlError::invalid(format!("cannot project the filtered columns: {e}"))
            })?);
        let state = self.one_partition_state();
        let invalid = |e: DataFusionError| SqlError::invalid(format!("invalid ticket filter: {e}"));
        let plan = filtered_plan(&state, schema, batches, filter, columns).map_err(invalid)?;
        let physical = state.create_physical_plan(&plan).await.map_err(invalid)?;
        let query = self.limited(&state, physical)?;
        if query.partitions() != 1 {
            return Err(SqlError::Internal(format!(
                "a ticket filter planned into {} partitions, not one",
                query.partitions()
            )));
        }
        let batches = query.execute(0)?;
        Ok(batches
            .map(move |batch| batch.and_then(|batch| conform(&output, batch)))
            .boxed())
    }
}

/// `batch` under `schema`: the plan's output has the stored columns, but its
/// schema may differ from the table's in metadata.
fn conform(schema: &SchemaRef, batch: RecordBatch) -> Result<RecordBatch> {
    if batch.schema_ref() == schema {
        return Ok(batch);
    }
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(Arc::clone(schema), batch.columns().to_vec(), &options)
        .map_err(|e| SqlError::Internal(format!("a filtered batch does not fit its schema: {e}")))
}

/// The scan of `batches`, filtered by `filter`, projected to `columns`.
fn filtered_plan(
    state: &SessionState,
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
    filter: &str,
    columns: &[usize],
) -> DfResult<LogicalPlan> {
    let df_schema = DFSchema::try_from(Arc::clone(schema))?;
    let predicate = predicate(state, filter, &df_schema)?;
    let source = provider_as_source(Arc::new(Batches {
        schema: Arc::clone(schema),
        batches,
    }));
    let filtered = LogicalPlanBuilder::scan(SCAN_NAME, source, None)?.filter(predicate)?;
    let all = filtered.schema().columns();
    let projection = columns
        .iter()
        .map(|&i| {
            all.get(i).cloned().map(Expr::Column).ok_or_else(|| {
                DataFusionError::Plan(format!("column {i} of {} columns", all.len()))
            })
        })
        .collect::<DfResult<Vec<_>>>()?;
    filtered.project(projection)?.build()
}

/// `sql` as a boolean expression over `schema`'s columns, refused if it is
/// anything more (module docs).
fn predicate(state: &SessionState, sql: &str, schema: &DFSchema) -> DfResult<Expr> {
    let dialect = state.config().options().sql_parser.dialect;
    // The whole text is one expression: a statement, or anything after the
    // expression, does not parse.
    let parsed = state.sql_to_expr_with_alias(sql, &dialect)?;
    if let Some(alias) = &parsed.alias {
        return Err(DataFusionError::Plan(format!(
            "a filter is an expression, without an alias (AS {alias})"
        )));
    }
    // Caught here, before planning, so that a subquery naming a table is
    // refused as a subquery (the session has no tables either).
    if parsed.expr.visit(&mut Subqueries).is_break() {
        return Err(DataFusionError::Plan(
            "a filter is an expression over the table's columns: subqueries are not allowed".into(),
        ));
    }
    let expr = state.create_logical_expr_from_sql_expr(parsed, schema)?;
    let mut refused = None;
    expr.apply(|e| {
        refused = refusal(e);
        Ok(if refused.is_some() {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    if let Some(what) = refused {
        return Err(DataFusionError::Plan(format!(
            "a filter is an expression over the table's columns: {what} is not allowed"
        )));
    }
    match expr.get_type(schema)? {
        DataType::Boolean | DataType::Null => Ok(expr),
        other => Err(DataFusionError::Plan(format!(
            "a filter must be boolean; `{expr}` is {other}"
        ))),
    }
}

/// Why `e` may not be in a filter, if it may not: only expressions over one
/// row's values are.
fn refusal(e: &Expr) -> Option<String> {
    match e {
        Expr::Column(_)
        | Expr::Literal(..)
        | Expr::BinaryExpr(_)
        | Expr::Like(_)
        | Expr::SimilarTo(_)
        | Expr::Not(_)
        | Expr::IsNotNull(_)
        | Expr::IsNull(_)
        | Expr::IsTrue(_)
        | Expr::IsFalse(_)
        | Expr::IsUnknown(_)
        | Expr::IsNotTrue(_)
        | Expr::IsNotFalse(_)
        | Expr::IsNotUnknown(_)
        | Expr::Negative(_)
        | Expr::Between(_)
        | Expr::Case(_)
        | Expr::Cast(_)
        | Expr::TryCast(_)
        | Expr::ScalarFunction(_)
        | Expr::InList(_)
        | Expr::HigherOrderFunction(_)
        | Expr::Lambda(_)
        | Expr::LambdaVariable(_) => None,
        Expr::AggregateFunction(_) => Some("an aggregate function".into()),
        Expr::WindowFunction(_) => Some("a window function".into()),
        Expr::Exists(_)
        | Expr::InSubquery(_)
        | Expr::SetComparison(_)
        | Expr::ScalarSubquery(_)
        | Expr::OuterReferenceColumn(..) => Some("a subquery".into()),
        Expr::Placeholder(_) => Some("a parameter".into()),
        other => Some(format!("{} `{other}`", other.variant_name())),
    }
}

/// Finds any query inside an expression's syntax tree.
struct Subqueries;

impl Visitor for Subqueries {
    type Break = ();

    fn pre_visit_query(&mut self, _query: &SqlQuery) -> ControlFlow<()> {
        ControlFlow::Break(())
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{ArrayRef, BooleanArray, Int64Array, StringArray};
    use arrow::datatypes::Schema;
    use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
    use datafusion::logical_expr::{
        ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
    };
    use futures::TryStreamExt;
    use quiver_store::TableStore;

    use super::*;
    use crate::EngineOptions;

    fn engine() -> SqlEngine {
        let store = Arc::new(TableStore::new(1 << 30));
        SqlEngine::new(store, EngineOptions::default())
    }

    fn batch(from: i64, rows: i64) -> RecordBatch {
        let ints: ArrayRef = Arc::new(Int64Array::from_iter_values(from..from + rows));
        let strings: ArrayRef = Arc::new(StringArray::from_iter_values(
            (from..from + rows).map(|i| format!("s{}", i % 3)),
        ));
        RecordBatch::try_from_iter([("i", ints), ("s", strings)]).expect("batch")
    }

    async fn run(filter: &str, columns: &[usize]) -> Result<Vec<RecordBatch>> {
        let batches = vec![batch(0, 100), batch(100, 100)];
        let schema = batches[0].schema();
        engine()
            .filter_batches(&schema, batches, filter, columns)
            .await?
            .try_collect()
            .await
    }

    fn ints(batches: &[RecordBatch], column: usize) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| {
                let c = b.column(column).as_any().downcast_ref::<Int64Array>();
                c.expect("ints").values().to_vec()
            })
            .collect()
    }

    #[tokio::test]
    async fn filters_in_order_and_projects() {
        let got = run("i % 10 = 0 AND s <> 's1'", &[0]).await.unwrap();
        let want: Vec<i64> = (0..200).filter(|i| i % 10 == 0 && i % 3 != 1).collect();
        assert_eq!(ints(&got, 0), want);
        assert!(got.iter().all(|b| b.num_columns() == 1));
        // The filter's column need not be returned; none at all keeps counts.
        let got = run("s = 's0'", &[]).await.unwrap();
        assert!(got.iter().all(|b| b.num_columns() == 0));
        let rows: usize = got.iter().map(RecordBatch::num_rows).sum();
        assert_eq!(rows, (0..200).filter(|i| i % 3 == 0).count());
        // Reordered columns keep their stored names and types.
        let got = run("i < 3", &[1, 0]).await.unwrap();
        assert_eq!(got[0].schema().field(0).name(), "s");
        assert_eq!(ints(&got, 1), vec![0, 1, 2]);
    }

    #[tokio::test]
    async fn the_schema_is_the_stored_one_projected() {
        let stored = batch(0, 10);
        let schema = Arc::new(Schema::new_with_metadata(
            stored.schema().fields().clone(),
            [("origin".to_string(), "test".to_string())].into(),
        ));
        let batches = vec![stored.with_schema(Arc::clone(&schema)).unwrap()];
        let got: Vec<RecordBatch> = engine()
            .filter_batches(&schema, batches, "i > 4", &[1])
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(got[0].schema(), Arc::new(schema.project(&[1]).unwrap()));
    }

    #[tokio::test]
    async fn refuses_all_but_an_expression() {
        for (filter, says) in [
            ("i >", "SQL error"),
            ("nope > 1", "nope"),
            ("i + 1", "must be boolean"),
            ("i > 1; DROP TABLE t", "end of expression"),
            ("DROP TABLE t", "end of expression"),
            ("CREATE TABLE t AS SELECT 1", "Unsupported command"),
            ("i IN (SELECT i FROM t)", "subqueries are not allowed"),
            ("EXISTS (SELECT 1)", "subqueries are not allowed"),
            ("i = (SELECT 1)", "subqueries are not allowed"),
            ("i = ANY(SELECT 1)", "subqueries are not allowed"),
            ("coalesce((SELECT 1), i) > 0", "subqueries are not allowed"),
            (
                "array_length(ARRAY(SELECT 1)) > 0",
                "subqueries are not allowed",
            ),
            ("sum(i) > 1", "aggregate function"),
            ("row_number() OVER () > 1", "window function"),
            ("i > $1", "parameter"),
            ("i > 1 AS x", "alias"),
            ("no_such_function(i)", "no_such_function"),
        ] {
            let err = run(filter, &[0]).await.unwrap_err();
            assert!(matches!(err, SqlError::Invalid(_)), "{filter}: {err:?}");
            let message = err.to_string();
            assert!(message.starts_with("invalid ticket filter"), "{message}");
            assert!(message.contains(says), "{filter}: {message}");
        }
    }

    #[tokio::test]
    async fn functions_run_those_registered_and_asynchronous_ones_included() {
        let engine = engine();
        engine.register_udf(AsyncScalarUDF::new(Arc::new(IsEven::default())).into_scalar_udf());
        let batches = vec![batch(0, 10)];
        let schema = batches[0].schema();
        let got: Vec<RecordBatch> = engine
            .filter_batches(
                &schema,
                batches,
                "is_even(i) AND now() > TIMESTAMP '2000-01-01T00:00:00Z'",
                &[0],
            )
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(ints(&got, 0), vec![0, 2, 4, 6, 8]);
    }

    #[tokio::test]
    async fn a_null_filter_keeps_no_row() {
        let got = run("NULL", &[0]).await.unwrap();
        assert!(ints(&got, 0).is_empty());
        let got = run("i < 5 OR NULL", &[0]).await.unwrap();
        assert_eq!(ints(&got, 0), vec![0, 1, 2, 3, 4]);
    }

    /// `is_even(x)`, computed asynchronously as served functions are.
    #[derive(Debug, PartialEq, Eq, Hash)]
    struct IsEven {
        signature: Signature,
    }

    impl Default for IsEven {
        fn default() -> Self {
            Self {
                signature: Signature::exact(vec![DataType::Int64], Volatility::Immutable),
            }
        }
    }

    impl ScalarUDFImpl for IsEven {
        fn name(&self) -> &str {
            "is_even"
        }

        fn signature(&self) -> &Signature {
            &self.signature
        }

        fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
            Ok(DataType::Boolean)
        }

        fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
            Err(DataFusionError::Internal(
                "only called asynchronously".into(),
            ))
        }
    }

    #[async_trait]
    impl AsyncScalarUDFImpl for IsEven {
        async fn invoke_async_with_args(
            &self,
            args: ScalarFunctionArgs,
        ) -> DfResult<ColumnarValue> {
            tokio::task::yield_now().await;
            let arrays = ColumnarValue::values_to_arrays(&args.args)?;
            let ints = arrays[0].as_any().downcast_ref::<Int64Array>();
            let even: BooleanArray = ints
                .expect("ints")
                .iter()
                .map(|v| v.map(|v| v % 2 == 0))
                .collect();
            Ok(ColumnarValue::Array(Arc::new(even)))
        }
    }

    #[tokio::test]
    async fn a_failure_on_the_data_is_the_statement_s() {
        let err = run("CAST(s AS BIGINT) > 1", &[0]).await.unwrap_err();
        assert!(matches!(err, SqlError::Invalid(_)), "{err:?}");
    }
}

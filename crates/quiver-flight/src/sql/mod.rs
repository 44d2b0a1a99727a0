//! Flight SQL on the same port as the table store.
//!
//! A Flight SQL request is a Flight RPC whose descriptor command, ticket or
//! action body is a protobuf `Any` of one of Flight SQL's messages. Table names
//! never start with the byte an encoded `Any` starts with (a control
//! character), so a descriptor or ticket is one or the other, never both.
//!
//! Queries are planned at GetFlightInfo and kept ([`handles::Results`]) until
//! their endpoints are fetched: each DoGet runs one partition of the plan and
//! streams its batches as DataFusion makes them. Statements that change tables
//! run at once and answer with their row count. Every endpoint carries the
//! server's advertised location, as a table's do. Every statement run is
//! logged with its text ([`FlightSql::run`]).

mod handles;
mod metadata;

use std::sync::Arc;

use arrow::array::{RecordBatch, UInt64Array};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::ipc::writer::IpcWriteOptions;
use arrow_flight::sql::{
    ActionCancelQueryResult, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, Any, Command, CommandStatementIngest,
    DoPutPreparedStatementResult, DoPutUpdateResult, ProstMessageExt, TableExistsOption,
    TableNotExistOption, TicketStatementQuery,
};
use arrow_flight::{
    CancelFlightInfoResult, CancelStatus, FlightData, FlightDescriptor, FlightEndpoint, FlightInfo,
    IpcMessage, PutResult, SchemaAsIpc, Ticket,
};
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use quiver_sql::{CATALOG, Outcome, Query, SCHEMA, SqlEngine, row_values};
use quiver_store::{StoreError, WriteMode};
use serde_json::json;

use crate::auth::{Caller, Role};
use crate::body_watch::BodyOutcome;
use crate::put_options::PutOptions;
use crate::request::SqlAction;
use crate::rpc_log::{MAX_LOGGED_TEXT, RpcLog, truncated};
use crate::running::{RunningGuard, RunningQueries, Via};
use crate::tables::Tables;
use crate::wire::decode::PutDecoder;
use crate::{Error, Result};
use handles::{Results, Statements};

/// Every Flight SQL message's type URL starts so.
const TYPE_URL_PREFIX: &str = "type.googleapis.com/arrow.flight.protocol.sql.";

/// Most bytes of parameters bound to a prepared statement at once.
const MAX_PARAMETER_BYTES: usize = 64 << 20;

/// Batches of a DoGet, produced as they are read.
pub(crate) type Batches = BoxStream<'static, Result<RecordBatch>>;

/// The Flight SQL side of the service: the engine and the handles it gave out.
#[derive(Debug)]
pub(crate) struct FlightSql {
    engine: Arc<SqlEngine>,
    /// Where bulk ingest stores tables.
    tables: Arc<dyn Tables>,
    /// The URI every endpoint carries: the server's advertised location.
    location: String,
    results: Results,
    statements: Statements,
    /// The queries running on the server, these listed with the console's.
    running: Arc<RunningQueries>,
}

/// The Flight SQL command `bytes` encode, if they encode one.
pub(crate) fn command(bytes: &[u8]) -> Result<Option<Command>> {
    // An encoded Any starts with its type_url field: tag 1, length-delimited.
    if bytes.first() != Some(&0x0a) {
        return Ok(None);
    }
    let Ok(any) = Any::decode(bytes) else {
        return Ok(None);
    };
    if !any.type_url.starts_with(TYPE_URL_PREFIX) {
        return Ok(None);
    }
    let command = Command::try_from(any)
        .map_err(|e| Error::invalid(format!("malformed Flight SQL message: {e}")))?;
    Ok(Some(command))
}

fn ipc_schema(schema: &Schema) -> Result<Bytes> {
    let options = IpcWriteOptions::default();
    Ok(IpcMessage::try_from(SchemaAsIpc::new(schema, &options))?.0)
}

/// The one-row result of a statement that changed tables.
fn count_batch(rows: u64) -> Result<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]));
    Ok(RecordBatch::try_new(
        schema,
        vec![Arc::new(UInt64Array::from(vec![rows]))],
    )?)
}

fn statement_handle(id: u128, partition: usize) -> Bytes {
    Bytes::from(format!("{id:032x}/{partition}"))
}

fn parse_statement_handle(handle: &[u8]) -> Result<(u128, usize)> {
    let bad = || Error::invalid("malformed statement handle in the ticket");
    let text = std::str::from_utf8(handle).map_err(|_| bad())?;
    let (id, partition) = text.split_once('/').ok_or_else(bad)?;
    Ok((
        u128::from_str_radix(id, 16).map_err(|_| bad())?,
        partition.parse().map_err(|_| bad())?,
    ))
}

fn no_transactions(transaction_id: Option<&Bytes>) -> Result<()> {
    match transaction_id {
        Some(_) => Err(Error::Unimplemented(
            "transactions are not supported (SqlInfo FLIGHT_SQL_SERVER_TRANSACTION is NONE)".into(),
        )),
        None => Ok(()),
    }
}

impl FlightSql {
    /// The SQL side over `engine`, ingesting into `tables`; its endpoints
    /// carry `location`.
    pub(crate) fn new(engine: Arc<SqlEngine>, tables: Arc<dyn Tables>, location: String) -> Self {
        Self {
            engine,
            tables,
            location,
            results: Results::default(),
            statements: Statements::default(),
            running: Arc::default(),
        }
    }

    pub(crate) fn engine(&self) -> &Arc<SqlEngine> {
        &self.engine
    }

    /// The queries running on the server, Flight SQL's and the console's,
    /// less results that waited for their DoGets past their time.
    pub(crate) fn running(&self) -> &Arc<RunningQueries> {
        self.results.expire();
        &self.running
    }

    /// Registers a statement of `caller` as running until its result is
    /// read or dropped.
    fn register(&self, caller: &Caller, sql: &str) -> Result<RunningGuard> {
        let id = format!("sql-{}", uuid::Uuid::new_v4().simple());
        self.running.start(&id, caller, sql, Via::FlightSql)
    }

    /// GetFlightInfo of a Flight SQL command.
    pub(crate) async fn flight_info(
        &self,
        command: Command,
        descriptor: FlightDescriptor,
        caller: &Caller,
        log: &mut RpcLog,
    ) -> Result<FlightInfo> {
        let allowed = caller.role.effect();
        match command {
            Command::CommandStatementQuery(query) => {
                no_transactions(query.transaction_id.as_ref())?;
                log.table(&query.query);
                let running = self.register(caller, &query.query)?;
                let outcome = self.run(&query.query, None, allowed).await?;
                self.result_info(outcome, descriptor, Some(running))
            }
            Command::CommandPreparedStatementQuery(prepared) => {
                let statement = self.statements.get(&prepared.prepared_statement_handle)?;
                log.table(&statement.prepared.sql);
                let parameters = match &statement.parameters {
                    Some(batch) if batch.num_rows() == 1 => Some(row_values(batch, 0)?),
                    Some(batch) if batch.num_rows() > 1 => {
                        return Err(Error::invalid(format!(
                            "{} rows of parameters are bound; a query takes one",
                            batch.num_rows()
                        )));
                    }
                    _ if statement.prepared.parameters.fields().is_empty() => None,
                    _ => {
                        return Err(Error::invalid(format!(
                            "the statement has {} parameters and none are bound",
                            statement.prepared.parameters.fields().len()
                        )));
                    }
                };
                let running = self.register(caller, &statement.prepared.sql)?;
                let outcome = self
                    .run(&statement.prepared.sql, parameters, allowed)
                    .await?;
                self.result_info(outcome, descriptor, Some(running))
            }
            Command::CommandStatementSubstraitPlan(_) => Err(Error::Unimplemented(
                "Substrait plans are not supported (SqlInfo FLIGHT_SQL_SERVER_SUBSTRAIT)".into(),
            )),
            command => {
                let schema = self.metadata_schema(&command)?;
                let ticket = Ticket::new(command.into_any().encode_to_vec());
                Ok(FlightInfo::new()
                    .try_with_schema(&schema)?
                    .with_descriptor(descriptor)
                    .with_endpoint(self.endpoint(ticket))
                    .with_ordered(true))
            }
        }
    }

    /// GetFlightInfo of the table in place `name` (a path descriptor): one
    /// endpoint per group of its files, read by this server (on a cluster
    /// too), that any Flight client reads with DoGet.
    pub(crate) async fn table_in_place_info(
        &self,
        name: &str,
        descriptor: FlightDescriptor,
    ) -> Result<FlightInfo> {
        let query = self.engine.scan_in_place(name).await?;
        self.result_info(Outcome::Query(query), descriptor, None)
    }

    /// GetSchema of a Flight SQL command: what GetFlightInfo would answer,
    /// without running anything.
    pub(crate) async fn schema(&self, command: Command) -> Result<SchemaRef> {
        match command {
            Command::CommandStatementQuery(query) => {
                let prepared = self.engine.prepare(&query.query).await?;
                Ok(if prepared.is_query {
                    prepared.result
                } else {
                    count_batch(0)?.schema()
                })
            }
            Command::CommandPreparedStatementQuery(prepared) => {
                let statement = self.statements.get(&prepared.prepared_statement_handle)?;
                Ok(statement.prepared.result)
            }
            command => self.metadata_schema(&command),
        }
    }

    fn metadata_schema(&self, command: &Command) -> Result<SchemaRef> {
        Ok(match command {
            Command::CommandGetCatalogs(_) => metadata::catalogs()?.schema(),
            Command::CommandGetDbSchemas(c) => metadata::db_schemas(c.clone())?.schema(),
            Command::CommandGetTables(c) => metadata::tables_schema(c.clone()),
            Command::CommandGetTableTypes(_) => metadata::table_types()?.schema(),
            Command::CommandGetSqlInfo(_) => metadata::sql_info_schema()?,
            Command::CommandGetXdbcTypeInfo(_) => metadata::xdbc_type_info_schema()?,
            Command::CommandGetPrimaryKeys(_) => Arc::clone(&metadata::PRIMARY_KEYS),
            Command::CommandGetExportedKeys(_)
            | Command::CommandGetImportedKeys(_)
            | Command::CommandGetCrossReference(_) => Arc::clone(&metadata::FOREIGN_KEYS),
            other => {
                return Err(Error::invalid(format!(
                    "{} is not a command GetFlightInfo takes",
                    other.type_url()
                )));
            }
        })
    }

    /// Runs `sql` (planning a query, running anything else), logging its
    /// text first: the one place a Flight SQL statement is logged, so that the
    /// server's log says which SQL ran (`sql` field, at most
    /// [`MAX_LOGGED_TEXT`] characters).
    async fn run(
        &self,
        sql: &str,
        parameters: Option<quiver_sql::ParamValues>,
        allowed: quiver_sql::Effect,
    ) -> Result<Outcome> {
        let text = truncated(sql, MAX_LOGGED_TEXT);
        tracing::info!(sql = &*text, "sql statement");
        Ok(self.engine.run_allowed(sql, parameters, allowed).await?)
    }

    /// An endpoint of `ticket` at this server's advertised location (as a
    /// table's endpoints are), so that clients that fetch each endpoint from
    /// its location (ADBC's partitioned execution, engine connectors) can.
    fn endpoint(&self, ticket: Ticket) -> FlightEndpoint {
        FlightEndpoint::new()
            .with_ticket(ticket)
            .with_location(self.location.clone())
    }

    /// Keeps a planned result and describes its endpoints: one per partition,
    /// each at this server's location (the tickets are this server's). A
    /// query `running` stays listed until its partitions are read or the
    /// result expires.
    fn result_info(
        &self,
        outcome: Outcome,
        descriptor: FlightDescriptor,
        running: Option<RunningGuard>,
    ) -> Result<FlightInfo> {
        let (query, running) = match outcome {
            Outcome::Query(query) => {
                if let Some(running) = &running {
                    running.planned(&query);
                }
                (query, running)
            }
            Outcome::Changed(rows) => (Query::from_batch(count_batch(rows)?)?, None),
        };
        let schema = query.schema();
        let partitions = query.partitions();
        let id = self.results.insert(query, running)?;
        let endpoints = (0..partitions).map(|partition| {
            let ticket = TicketStatementQuery {
                statement_handle: statement_handle(id, partition),
            };
            self.endpoint(Ticket::new(ticket.as_any().encode_to_vec()))
        });
        let info = FlightInfo::new()
            .try_with_schema(&schema)?
            .with_descriptor(descriptor)
            .with_endpoints(endpoints.collect())
            .with_ordered(partitions <= 1);
        // On a cluster, where else the query may be asked: the Python
        // client asks another node when this one stops answering.
        Ok(match self.engine.locations() {
            Some(nodes) => info.with_app_metadata(json!({ "nodes": nodes }).to_string()),
            None => info,
        })
    }

    /// DoGet of a Flight SQL ticket: the schema and the batches.
    pub(crate) fn open(&self, command: Command) -> Result<(SchemaRef, Batches)> {
        let batch = match command {
            Command::TicketStatementQuery(ticket) => {
                let (id, partition) = parse_statement_handle(&ticket.statement_handle)?;
                let (query, running) = self.results.take(id, partition)?;
                let batches = query.execute(partition)?.map_err(Error::from);
                // Listed as running while any partition's stream lasts.
                let batches = batches.map(move |batch| {
                    let _running = &running;
                    batch
                });
                return Ok((query.schema(), batches.boxed()));
            }
            Command::CommandGetCatalogs(_) => metadata::catalogs()?,
            Command::CommandGetDbSchemas(c) => metadata::db_schemas(c)?,
            Command::CommandGetTables(c) => metadata::tables(&self.engine, c)?,
            Command::CommandGetTableTypes(_) => metadata::table_types()?,
            Command::CommandGetSqlInfo(c) => metadata::sql_info(c)?,
            Command::CommandGetXdbcTypeInfo(c) => metadata::xdbc_type_info(c)?,
            Command::CommandGetPrimaryKeys(_) => {
                RecordBatch::new_empty(Arc::clone(&metadata::PRIMARY_KEYS))
            }
            Command::CommandGetExportedKeys(_)
            | Command::CommandGetImportedKeys(_)
            | Command::CommandGetCrossReference(_) => {
                RecordBatch::new_empty(Arc::clone(&metadata::FOREIGN_KEYS))
            }
            other => {
                return Err(Error::invalid(format!(
                    "{} is not a Flight SQL ticket",
                    other.type_url()
                )));
            }
        };
        Ok((batch.schema(), stream::once(async { Ok(batch) }).boxed()))
    }

    /// DoPut of a Flight SQL command: an update, a bulk ingest, or parameters
    /// for a prepared statement.
    pub(crate) async fn put(
        &self,
        command: Command,
        first: FlightData,
        input: impl Stream<Item = Result<FlightData, tonic::Status>> + Send + Unpin + 'static,
        outcome: Option<BodyOutcome>,
        caller: &Caller,
        log: &mut RpcLog,
    ) -> Result<PutResult> {
        let app_metadata = match command {
            Command::CommandStatementUpdate(update) => {
                no_transactions(update.transaction_id.as_ref())?;
                log.table(&update.query);
                // The statement is all the request says; read the client's
                // stream to its end (pyarrow sends a schema) before answering.
                let extra = parameters(first, input).await?;
                if extra.num_rows() > 0 {
                    return Err(Error::invalid(
                        "CommandStatementUpdate takes no data; bind parameters to a prepared \
                         statement",
                    ));
                }
                let rows = self.update(&update.query, None, caller).await?;
                log.add(rows, 0);
                DoPutUpdateResult {
                    record_count: rows_i64(rows),
                }
                .encode_to_vec()
            }
            Command::CommandStatementIngest(ingest) => {
                caller.require(Role::Write, "Flight SQL bulk ingest")?;
                let rows = self.ingest(ingest, first, input, outcome, log).await?;
                DoPutUpdateResult {
                    record_count: rows_i64(rows),
                }
                .encode_to_vec()
            }
            Command::CommandPreparedStatementQuery(prepared) => {
                let handle = prepared.prepared_statement_handle;
                let parameters = parameters(first, input).await?;
                self.statements.bind(&handle, parameters)?;
                DoPutPreparedStatementResult {
                    prepared_statement_handle: Some(handle),
                }
                .encode_to_vec()
            }
            Command::CommandPreparedStatementUpdate(prepared) => {
                let statement = self.statements.get(&prepared.prepared_statement_handle)?;
                log.table(&statement.prepared.sql);
                // Parameters come with this DoPut, or were bound before it
                // (arrow-rs binds with a CommandPreparedStatementQuery DoPut).
                let sent = parameters(first, input).await?;
                let bound = match statement.parameters {
                    Some(earlier) if sent.num_rows() == 0 => earlier,
                    _ => sent,
                };
                let rows = if bound.num_rows() == 0 {
                    self.update(&statement.prepared.sql, None, caller).await?
                } else {
                    let mut rows = 0;
                    for row in 0..bound.num_rows() {
                        let values = row_values(&bound, row)?;
                        rows += self
                            .update(&statement.prepared.sql, Some(values), caller)
                            .await?;
                    }
                    rows
                };
                log.add(rows, 0);
                DoPutUpdateResult {
                    record_count: rows_i64(rows),
                }
                .encode_to_vec()
            }
            Command::CommandStatementSubstraitPlan(_) => {
                return Err(Error::Unimplemented(
                    "Substrait plans are not supported".into(),
                ));
            }
            other => {
                return Err(Error::invalid(format!(
                    "{} is not a command DoPut takes",
                    other.type_url()
                )));
            }
        };
        Ok(PutResult {
            app_metadata: app_metadata.into(),
        })
    }

    /// Runs statement `sql` of `caller`, listed as running while it runs.
    async fn update(
        &self,
        sql: &str,
        parameters: Option<quiver_sql::ParamValues>,
        caller: &Caller,
    ) -> Result<u64> {
        let _running = self.register(caller, sql)?;
        match self.run(sql, parameters, caller.role.effect()).await? {
            Outcome::Changed(rows) => Ok(rows),
            Outcome::Query(_) => Err(Error::invalid(
                "the statement is a query: run it with CommandStatementQuery (executeQuery)",
            )),
        }
    }

    /// Bulk ingest (ADBC's `adbc_ingest`): the stream stored under the
    /// command's table, created, appended to or replaced as its options say.
    async fn ingest(
        &self,
        ingest: CommandStatementIngest,
        first: FlightData,
        input: impl Stream<Item = Result<FlightData, tonic::Status>> + Send + Unpin + 'static,
        outcome: Option<BodyOutcome>,
        log: &mut RpcLog,
    ) -> Result<u64> {
        no_transactions(ingest.transaction_id.as_ref())?;
        if ingest.temporary {
            return Err(Error::Unimplemented(
                "temporary tables are not supported".into(),
            ));
        }
        if ingest.catalog.as_deref().is_some_and(|c| c != CATALOG)
            || ingest.schema.as_deref().is_some_and(|s| s != SCHEMA)
        {
            return Err(Error::invalid(format!(
                "ingest into {}.{}: quiver has one schema, {CATALOG}.{SCHEMA}",
                ingest.catalog.as_deref().unwrap_or(CATALOG),
                ingest.schema.as_deref().unwrap_or(SCHEMA),
            )));
        }
        let name = ingest.table;
        log.table(&name);
        let options = ingest.table_definition_options.unwrap_or_default();
        let exists = match self.tables.schema(&name).await {
            Ok(_) => true,
            Err(Error::Store(StoreError::NotFound { .. })) => false,
            Err(e) => return Err(e),
        };
        let mode = if exists {
            match TableExistsOption::try_from(options.if_exists) {
                Ok(TableExistsOption::Append) => WriteMode::Append,
                Ok(TableExistsOption::Replace) => WriteMode::Replace,
                _ => return Err(StoreError::AlreadyExists { name }.into()),
            }
        } else {
            match TableNotExistOption::try_from(options.if_not_exist) {
                Ok(TableNotExistOption::Fail) => return Err(StoreError::NotFound { name }.into()),
                _ => WriteMode::Create,
            }
        };
        let put = PutDecoder::new(first, input)
            .into_put(outcome, |schema, put| {
                let asked = PutOptions { mode, ..put };
                self.tables.open(&name, &asked, schema)
            })
            .await?;
        let (rows, bytes) = (put.num_rows(), put.num_bytes());
        put.commit().await?;
        log.add(rows, bytes);
        Ok(rows)
    }

    /// DoAction of a Flight SQL action: its results' bodies.
    pub(crate) async fn action(&self, action: SqlAction) -> Result<Vec<Bytes>> {
        Ok(match action {
            SqlAction::CreatePrepared(request) => self.create_prepared(request).await?,
            SqlAction::ClosePrepared(request) => {
                self.statements.close(&request.prepared_statement_handle);
                Vec::new()
            }
            SqlAction::CancelFlightInfo(request) => {
                let status = self.cancel(request.info.as_ref());
                vec![
                    CancelFlightInfoResult {
                        status: status as i32,
                    }
                    .encode_to_vec()
                    .into(),
                ]
            }
            SqlAction::CancelQuery(info) => {
                // CancelResult: 1 cancelled, 3 not cancellable.
                let result = match self.cancel(Some(&info)) {
                    CancelStatus::Cancelled => 1,
                    _ => 3,
                };
                vec![
                    ActionCancelQueryResult { result }
                        .as_any()
                        .encode_to_vec()
                        .into(),
                ]
            }
        })
    }

    async fn create_prepared(
        &self,
        request: ActionCreatePreparedStatementRequest,
    ) -> Result<Vec<Bytes>> {
        no_transactions(request.transaction_id.as_ref())?;
        let prepared = self.engine.prepare(&request.query).await?;
        let result = ActionCreatePreparedStatementResult {
            dataset_schema: ipc_schema(&prepared.result)?,
            parameter_schema: ipc_schema(&prepared.parameters)?,
            prepared_statement_handle: self.statements.insert(prepared)?,
        };
        Ok(vec![result.as_any().encode_to_vec().into()])
    }

    /// Cancels the query behind the endpoints of `info`.
    fn cancel(&self, info: Option<&FlightInfo>) -> CancelStatus {
        let mut cancelled = false;
        for endpoint in info.map(|i| i.endpoint.as_slice()).unwrap_or_default() {
            let Some(ticket) = &endpoint.ticket else {
                continue;
            };
            if let Ok(Some(Command::TicketStatementQuery(t))) = command(&ticket.ticket)
                && let Ok((id, _)) = parse_statement_handle(&t.statement_handle)
            {
                cancelled |= self.results.cancel(id);
            }
        }
        if cancelled {
            CancelStatus::Cancelled
        } else {
            // Finished, fetched, or never a query: nothing left to cancel.
            CancelStatus::NotCancellable
        }
    }
}

fn rows_i64(rows: u64) -> i64 {
    i64::try_from(rows).unwrap_or(i64::MAX)
}

/// The parameter batches of a DoPut, as one batch.
async fn parameters(
    first: FlightData,
    input: impl Stream<Item = Result<FlightData, tonic::Status>> + Send + Unpin + 'static,
) -> Result<RecordBatch> {
    let mut decoder = PutDecoder::new(first, input);
    let mut batches = Vec::new();
    let mut bytes = 0;
    while let Some(batch) = decoder.next_batch().await {
        let batch = batch?;
        bytes += batch.get_array_memory_size();
        if bytes > MAX_PARAMETER_BYTES {
            return Err(Error::MessageTooLarge {
                len: bytes,
                limit: MAX_PARAMETER_BYTES,
                flag: "parameters bound at once",
            });
        }
        batches.push(batch);
    }
    let schema = decoder
        .schema()
        .cloned()
        .unwrap_or_else(|| Arc::new(Schema::empty()));
    Ok(concat_batches(&schema, &batches)?)
}

#[cfg(test)]
mod tests {
    use quiver_sql::{Effect, EngineOptions};

    use super::*;
    use crate::rpc_log::Lines;

    fn flight_sql(location: &str) -> FlightSql {
        let store = Arc::new(quiver_store::TableStore::new(1 << 20));
        let engine = Arc::new(SqlEngine::new(Arc::clone(&store), EngineOptions::default()));
        let tables = crate::tables::LocalTables::new(store, location.into(), 1);
        FlightSql::new(engine, Arc::new(tables), location.into())
    }

    #[tokio::test]
    async fn result_endpoints_are_at_the_location() {
        let location = "grpc+tcp://203.0.113.7:8815";
        let sql = flight_sql(location);
        let statement = "SELECT 1 AS one";
        let outcome = sql
            .engine
            .run_allowed(statement, None, Effect::Read)
            .await
            .unwrap();
        let info = sql
            .result_info(outcome, FlightDescriptor::new_cmd(statement), None)
            .unwrap();
        assert!(!info.endpoint.is_empty());
        for endpoint in &info.endpoint {
            let uris: Vec<&str> = endpoint.location.iter().map(|l| l.uri.as_str()).collect();
            assert_eq!(uris, [location]);
        }
    }

    #[tokio::test]
    async fn a_statement_run_is_logged_on_one_line_with_its_text() {
        let lines = Lines::default();
        let _logging = tracing::subscriber::set_default(lines.subscriber());
        let sql = flight_sql("grpc+tcp://203.0.113.7:8815");
        let statement = "SELECT 1 AS one\nWHERE 2 > 1";
        sql.run(statement, None, Effect::Read).await.unwrap();
        // A statement that does not plan is logged too: the log says what ran.
        assert!(sql.run("SELEC nonsense", None, Effect::Read).await.is_err());
        let out = lines.text();
        let logged: Vec<&str> = out.lines().collect();
        assert_eq!(logged.len(), 2, "{out}");
        assert!(logged[0].contains("INFO"), "{out}");
        assert!(
            logged[0].contains(r#"sql="SELECT 1 AS one\nWHERE 2 > 1""#),
            "{out}"
        );
        assert!(logged[1].contains(r#"sql="SELEC nonsense""#), "{out}");
    }
}

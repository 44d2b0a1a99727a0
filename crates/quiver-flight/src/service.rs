//! `QuiverService`: every Flight RPC over the table store.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use arrow::datatypes::SchemaRef;
use arrow::ipc::writer::IpcWriteOptions;
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use arrow_flight::encode::{DictionaryHandling, FlightDataEncoderBuilder};
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaAsIpc, SchemaResult, Ticket,
};
use base64::Engine as _;
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt, TryStreamExt};
use quiver_sql::{EngineOptions, SqlEngine};
use quiver_store::{TableStore, batch_bytes};
use serde_json::json;
use tonic::{Request, Response, Status, Streaming};

use quiver_shm::{self as shm, ShmServer};

use crate::auth::{Caller, Role};
use crate::body_watch::BodyOutcome;
use crate::cluster::Topology;
use crate::error::inbound_status;
use crate::published::Published;
use crate::request::{
    ActionKind, ActionRequest, Described, ShmPut, TableAction, Ticketed, partition_not_here,
};
use crate::rpc_log::{MAX_LOGGED_TEXT, RpcLog, handle, logged, truncated};
use crate::session::Sessions;
use crate::sql::{Batches, FlightSql};
use crate::tables::{LocalTables, Tables};
use crate::ticket::TableTicket;
use crate::wire::decode::PutDecoder;
use crate::{Error, Result, actions, exchange, panics};
use quiver_wire::BodyPool;

/// Settings of the Flight service that do not belong to the transport.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// The URI put in every endpoint's location, e.g. `grpc+tcp://127.0.0.1:8815`.
    pub location: String,
    /// Endpoints per table when the put chose none.
    pub default_partitions: usize,
    /// Largest FlightData message DoGet sends; larger batches are split.
    pub max_flight_data_size: usize,
    /// Largest FlightData message DoGet sends to Arrow C++ clients, which take
    /// any size (`wire::message_size`).
    pub large_flight_data_size: usize,
    /// Largest gRPC message accepted.
    pub max_message_size: usize,
    /// Bytes of freed DoPut bodies kept for reuse ([`quiver_wire::body_pool`]).
    pub put_buffer_pool: usize,
    /// The SQL engine's limits.
    pub sql: EngineOptions,
    /// The same-host shared-memory data plane, if on.
    pub shm: Option<Arc<ShmServer>>,
    /// The function workers, with `--functions`.
    pub functions: Option<Arc<quiver_functions::FunctionPool>>,
    /// Where the node's tables live: on it alone, or across a cluster.
    pub topology: Arc<dyn Topology>,
}

/// The Flight service: the standard RPCs over a node's [`Tables`].
#[derive(Debug, Clone)]
pub struct QuiverService {
    store: Arc<TableStore>,
    /// Where tables live: this node's store, or a cluster's catalog.
    tables: Arc<dyn Tables>,
    options: Arc<ServiceOptions>,
    sql: Arc<FlightSql>,
    body_pool: BodyPool,
    started: Instant,
    /// Flight sessions (the session actions).
    sessions: Arc<Sessions>,
}

type BoxedStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

impl QuiverService {
    /// A service over `store`.
    pub fn new(store: Arc<TableStore>, options: ServiceOptions) -> Self {
        let body_pool = BodyPool::new(options.put_buffer_pool);
        let local = LocalTables::new(
            Arc::clone(&store),
            options.location.clone(),
            options.default_partitions,
        );
        let tables = Arc::clone(&options.topology).tables(local);
        // SQL reads the stored tables where they live (on a cluster node,
        // the catalog's) and writes them as a put does.
        let store_tables = Arc::new(quiver_sql::StoreTables::new(Arc::clone(&store)));
        let source = options.topology.sql_tables(store_tables);
        let engine = Arc::new(SqlEngine::over(
            source,
            Arc::new(crate::tables::SqlWrites(Arc::clone(&tables))),
            options.sql.clone(),
        ));
        Self {
            sql: Arc::new(FlightSql::new(
                engine,
                Arc::clone(&tables),
                options.location.clone(),
            )),
            store,
            tables,
            body_pool,
            options: Arc::new(options),
            started: Instant::now(),
            sessions: Arc::default(),
        }
    }

    /// The SQL engine: every stored table, and tables over files.
    pub fn sql_engine(&self) -> &Arc<SqlEngine> {
        self.sql.engine()
    }

    /// Where the node's tables live: what every handler reads and writes.
    pub(crate) fn tables(&self) -> &Arc<dyn Tables> {
        &self.tables
    }

    /// Where the tables live: this server alone, or a cluster.
    pub(crate) fn topology(&self) -> &Arc<dyn crate::cluster::Topology> {
        &self.options.topology
    }

    /// The SQL queries running, Flight SQL clients' and the console's.
    pub(crate) fn running(&self) -> &Arc<crate::running::RunningQueries> {
        self.sql.running()
    }

    /// The function workers, with `--functions`.
    pub(crate) fn functions(&self) -> Option<&Arc<quiver_functions::FunctionPool>> {
        self.options.functions.as_ref()
    }

    /// What the metrics' gauges are read from.
    pub(crate) fn metric_sources(&self) -> crate::metrics::Sources {
        crate::metrics::Sources {
            store: Arc::clone(&self.store),
            body_pool: self.body_pool.clone(),
            shm: self.options.shm.clone(),
            started: self.started,
        }
    }

    /// The store behind the service.
    pub fn store(&self) -> &Arc<TableStore> {
        &self.store
    }

    async fn info_for(
        &self,
        descriptor: FlightDescriptor,
        caller: Result<Caller>,
        want_shm: bool,
        log: &mut RpcLog,
    ) -> Result<FlightInfo> {
        let name = match Described::decode(&descriptor)? {
            Described::Sql(command) => {
                return self
                    .sql
                    .flight_info(command, descriptor, &caller?, log)
                    .await;
            }
            Described::Exchange(command) => {
                caller?;
                let spec = self.function_of(command)?;
                log.table(&spec.name);
                let schema = spec
                    .output_schema
                    .clone()
                    .unwrap_or_else(|| Arc::new(arrow::datatypes::Schema::empty()));
                let info = FlightInfo::new()
                    .try_with_schema(&schema)?
                    .with_descriptor(descriptor)
                    .with_app_metadata(self.function_entry(&spec.name));
                return Ok(info);
            }
            Described::Partition(_) => return Err(partition_not_here("GetFlightInfo")),
            Described::Table(name) => name,
        };
        log.table(&name);
        // Files in place: read as a query of the whole table.
        if self.sql.engine().table_in_place(&name).is_some() {
            // Any role may read it, once authenticated.
            caller?;
            let info = self.sql.table_in_place_info(&name, descriptor).await?;
            log_info(log, &info);
            return Ok(info);
        }
        // Shared memory, when asked for and on, to a caller that passed
        // authentication (any role may read a table).
        let shm = match (want_shm, &self.options.shm) {
            (true, Some(shm)) => {
                caller?;
                Some(&**shm)
            }
            _ => None,
        };
        let info = self.tables.flight_info(&name, descriptor, shm).await?;
        log_info(log, &info);
        Ok(info)
    }

    /// The function a `{"function": NAME}` descriptor names (GetFlightInfo,
    /// GetSchema); other commands have no schema before their stream.
    fn function_of(
        &self,
        command: crate::request::Exchange,
    ) -> Result<Arc<quiver_functions::FunctionSpec>> {
        let crate::request::Exchange::Function(name) = command else {
            return Err(Error::invalid(
                "only a {\"function\": NAME} command has a schema before its stream: an apply's \
                 or a SQL command's depends on the table or stream it reads",
            ));
        };
        Ok(match &self.options.functions {
            Some(pool) => pool.function(&name)?,
            None => quiver_functions::Registry::default().get(&name).cloned()?,
        })
    }

    /// The `list-functions` action's answer.
    fn list_functions(&self) -> Bytes {
        let (functions, alive, configured) = match &self.options.functions {
            Some(pool) => {
                let status = pool.status();
                (pool.registry().entries(), status.alive, status.configured)
            }
            None => (json!([]), 0, 0),
        };
        Bytes::from(
            json!({
                "functions": functions,
                "workers": {"alive": alive, "configured": configured},
            })
            .to_string(),
        )
    }

    /// A function's entry in `list-functions`, as GetFlightInfo's app_metadata.
    fn function_entry(&self, name: &str) -> Bytes {
        let entries = self
            .options
            .functions
            .as_ref()
            .map(|pool| pool.registry().entries())
            .unwrap_or_default();
        let entry = entries
            .as_array()
            .and_then(|all| all.iter().find(|e| e["name"] == name))
            .cloned()
            .unwrap_or_default();
        Bytes::from(entry.to_string())
    }

    /// The shared-memory put ticket of the `shm-put` action: into this
    /// node's store in place, or (a cluster node's) through its tables, as a
    /// put over gRPC goes.
    fn shm_put(&self, request: ShmPut, caller: &Caller) -> Result<Bytes> {
        let shm = self.options.shm.as_ref().ok_or_else(|| {
            Error::Unimplemented(
                "the shared-memory data plane is off on this server (--shm-socket off)".to_string(),
            )
        })?;
        let caller = Arc::clone(&caller.name);
        let ticket = if self.tables.direct_puts() {
            shm.put_ticket(
                request.table,
                request.options.mode,
                request.options.partitions,
                caller,
            )?
        } else {
            let target = crate::tables::ShmPuts {
                tables: Arc::clone(&self.tables),
                table: request.table,
                options: request.options,
                runtime: tokio::runtime::Handle::current(),
            };
            shm.put_ticket_to(Arc::new(target), caller)?
        };
        Ok(json!({
            "location": shm.location(),
            "ticket": base64::engine::general_purpose::STANDARD.encode(ticket),
        })
        .to_string()
        .into())
    }

    /// Runs a DoAction in the Flight session `session` names: the caller's
    /// role is checked against the action's kind before its body is read.
    /// Returns the results' bodies, and the cookie of a session it started.
    async fn action(
        &self,
        caller: Result<Caller>,
        action: &Action,
        session: Option<&str>,
        log: &mut RpcLog,
    ) -> Result<(Vec<Bytes>, Option<String>)> {
        let caller = caller?;
        let kind = ActionKind::parse(&action.r#type)?;
        caller.require(kind.role(), &format!("action '{}'", kind.name()))?;
        let bodies = match ActionRequest::decode(kind, &action.body)? {
            ActionRequest::Session(request) => {
                let answer = self.sessions.run(request, session, &caller.name)?;
                return Ok((vec![answer.body], answer.set_cookie));
            }
            ActionRequest::ShmPut(request) => vec![self.shm_put(request, &caller)?],
            ActionRequest::ListFunctions => vec![self.list_functions()],
            ActionRequest::Sql(request) => {
                log.table(kind.name());
                self.sql.action(request).await?
            }
            ActionRequest::Table(request) => {
                let (table, published, body) = self.table_action(&request).await?;
                log.table(&table);
                log.add(published.rows, published.bytes);
                vec![body]
            }
            ActionRequest::Stats => {
                vec![actions::stats(&self.store, &self.body_pool, self.started)]
            }
            ActionRequest::Health => vec![actions::health(self.started)],
            ActionRequest::Nodes => vec![actions::nodes(&self.tables.nodes().await?)],
        };
        Ok((bodies, None))
    }

    /// Largest FlightData message DoGet sends.
    pub(crate) fn max_flight_data_size(&self) -> usize {
        self.options.max_flight_data_size
    }

    /// Largest FlightData message DoGet sends to clients that take any size;
    /// never more than the largest gRPC message.
    pub(crate) fn large_flight_data_size(&self) -> usize {
        self.options
            .large_flight_data_size
            .min(self.options.max_message_size)
    }

    /// Where DoPut bodies are copied to.
    pub(crate) fn body_pool(&self) -> &BodyPool {
        &self.body_pool
    }

    /// Largest gRPC message accepted.
    pub(crate) fn max_message_size(&self) -> usize {
        self.options.max_message_size
    }

    /// What a DoGet ticket reads: the schema and the batches, produced as the
    /// stream is read. A table ticket's stream holds the version it reads (its
    /// memory stays charged) and checks a pinned version; a Flight SQL ticket
    /// runs its part of a query.
    pub(crate) async fn open_ticket(
        &self,
        ticket: &[u8],
        log: &mut RpcLog,
    ) -> Result<(SchemaRef, Batches)> {
        let ticket = match Ticketed::decode(ticket)? {
            Ticketed::Sql(command) => return self.sql.open(command),
            Ticketed::Table(ticket) => ticket,
        };
        log.table(&ticket.table);
        let pinned = |current: u64| match ticket.version {
            Some(version) if version != current => Err(Error::Aborted(format!(
                "table '{}' changed since GetFlightInfo (version {version}, now {current}); \
                 call GetFlightInfo again",
                ticket.table
            ))),
            _ => Ok(()),
        };
        let read = match self
            .tables
            .read(&ticket.table, ticket.partition, ticket.partitions)
            .await
        {
            Err(Error::Store(quiver_store::StoreError::NotFound { name }))
                if ticket.version.is_some() =>
            {
                return Err(Error::Aborted(format!(
                    "table '{name}' was deleted or renamed since GetFlightInfo; \
                     call GetFlightInfo again"
                )));
            }
            other => other?,
        };
        pinned(read.version)?;
        // The version read stays held (its memory charged) while the stream
        // reads it.
        let (table, batches, schema) = (read.held, read.batches, read.schema);
        if !ticket.pushes_down() {
            let batches = stream::iter(batches).map(move |batch| {
                let _reading = &table;
                Ok(batch)
            });
            return Ok((schema, batches.boxed()));
        }
        log_pushdown(&ticket);
        let columns = match &ticket.columns {
            Some(names) => names
                .iter()
                .map(|name| column_index(&schema, &ticket.table, name))
                .collect::<Result<Vec<_>>>()?,
            None => (0..schema.fields().len()).collect(),
        };
        let projected = Arc::new(schema.project(&columns)?);
        let batches = match &ticket.filter {
            // Column selection alone: the stored batches' columns, zero-copy,
            // under the one projected schema (not a new one per batch).
            None => {
                let schema = Arc::clone(&projected);
                stream::iter(batches)
                    .map(move |batch| {
                        let picked = columns.iter().map(|&i| Arc::clone(batch.column(i)));
                        let options =
                            RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
                        let batch = RecordBatch::try_new_with_options(
                            Arc::clone(&schema),
                            picked.collect(),
                            &options,
                        )?;
                        Ok(batch)
                    })
                    .boxed()
            }
            Some(filter) => self
                .sql_engine()
                .filter_batches(&schema, batches, filter, &columns)
                .await?
                .map(|batch| batch.map_err(Error::from))
                .boxed(),
        };
        // The stream holds the version it reads, as an unfiltered one does.
        let batches = batches.map(move |batch| {
            let _reading = &table;
            batch
        });
        Ok((projected, batches.boxed()))
    }

    /// Stores a DoPut stream (or hands a Flight SQL command to the SQL side).
    /// `outcome` tells whether the transport broke the stream off (tonic
    /// reports that as a clean end); `None` when `input` reports it as an
    /// error itself. `caller`'s role is checked once the descriptor says what
    /// the put is, before anything is stored.
    pub(crate) async fn put(
        &self,
        mut input: impl Stream<Item = Result<FlightData, Status>> + Send + Unpin + 'static,
        outcome: Option<BodyOutcome>,
        caller: Result<Caller>,
        log: &mut RpcLog,
    ) -> Result<PutResult> {
        let caller = caller?;
        let first = input
            .next()
            .await
            .transpose()
            .map_err(|s| Error::Status(Box::new(inbound_status(s))))?
            .ok_or_else(|| Error::invalid("DoPut stream is empty: expected a schema message"))?;
        let descriptor = first.flight_descriptor.as_ref().ok_or_else(|| {
            Error::invalid("the first DoPut message carries no flight descriptor")
        })?;
        let name = match Described::decode(descriptor)? {
            Described::Sql(command) => {
                return self
                    .sql
                    .put(command, first, input, outcome, &caller, log)
                    .await;
            }
            Described::Exchange(_) => {
                return Err(Error::invalid(
                    "a CMD descriptor starting with '{' is a DoExchange command, not a table: \
                     put a table whose name starts with '{' with a PATH descriptor",
                ));
            }
            Described::Partition(name) => {
                log.table(&name);
                caller.require(Role::Node, "DoPut of a cluster partition's storage")?;
                name
            }
            Described::Table(name) => {
                log.table(&name);
                caller.require(Role::Write, "DoPut of a table")?;
                name
            }
        };
        self.put_table(name, first, input, outcome, log).await
    }

    /// A put of table `name`: the stream read and checked as it comes, then
    /// published.
    async fn put_table(
        &self,
        name: String,
        first: FlightData,
        input: impl Stream<Item = Result<FlightData, Status>> + Send + Unpin + 'static,
        outcome: Option<BodyOutcome>,
        log: &mut RpcLog,
    ) -> Result<PutResult> {
        let put = PutDecoder::new(first, input)
            .into_put(outcome, |schema, options| {
                self.tables.open(&name, &options, schema)
            })
            .await?;
        let (rows, bytes) = (put.num_rows(), put.num_bytes());
        let published = put.commit().await?;
        log.add(rows, bytes);
        Ok(PutResult {
            app_metadata: published_json(&name, published),
        })
    }

    /// An action that changes a table: the table named, what it published
    /// and the action's result.
    async fn table_action(&self, action: &TableAction) -> Result<(String, Published, Bytes)> {
        Ok(match action {
            TableAction::Delete(name) => {
                let removed = self.tables.delete(name).await?;
                let body = actions::deleted_body(name, removed.rows, removed.bytes);
                (name.clone(), removed, body)
            }
            TableAction::Rename(args) => {
                let renamed = self
                    .tables
                    .rename(&args.from, &args.to, args.overwrite)
                    .await?;
                let body = actions::renamed_body(&args.from, &args.to, renamed.version);
                (args.from.clone(), renamed, body)
            }
            TableAction::Publish(args) => {
                let published = self
                    .tables
                    .publish(&args.into, &args.from, args.mode, args.partitions)
                    .await?;
                (
                    args.into.clone(),
                    published,
                    published_json(&args.into, published),
                )
            }
        })
    }
}

/// Adds a FlightInfo's rows and bytes to the RPC's log line.
fn log_info(log: &mut RpcLog, info: &FlightInfo) {
    log.add(
        u64::try_from(info.total_records).unwrap_or(0),
        u64::try_from(info.total_bytes).unwrap_or(0),
    );
}

/// A put's or publish's result: DoPut's PutResult metadata.
fn published_json(table: &str, published: Published) -> Bytes {
    actions::published_body(table, published.version, published.rows, published.bytes)
}

/// The index of the column `name` in `schema`, the schema of `table`.
fn column_index(schema: &SchemaRef, table: &str, name: &str) -> Result<usize> {
    schema.index_of(name).map_err(|_| {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        Error::invalid(format!(
            "ticket column \"{name}\" is not a column of table '{table}' (its columns: {})",
            names.join(", ")
        ))
    })
}

/// One line per DoGet that selects columns or filters rows: what was pushed
/// down, each part cut to [`MAX_LOGGED_TEXT`] characters.
fn log_pushdown(ticket: &TableTicket) {
    let columns = match &ticket.columns {
        Some(names) => serde_json::to_string(names).unwrap_or_default(),
        None => "*".to_string(),
    };
    let filter = ticket.filter.as_deref().unwrap_or_default();
    let version = match ticket.version {
        Some(version) => version.to_string(),
        None => "current".to_string(),
    };
    tracing::info!(
        table = %ticket.table,
        %version,
        partition = ticket.partition,
        partitions = ticket.partitions,
        columns = %truncated(&columns, MAX_LOGGED_TEXT),
        filter = ?truncated(filter, MAX_LOGGED_TEXT),
        "DoGet pushdown"
    );
}

#[tonic::async_trait]
impl FlightService for QuiverService {
    type HandshakeStream = BoxStream<'static, Result<HandshakeResponse, Status>>;
    type ListFlightsStream = BoxStream<'static, Result<FlightInfo, Status>>;
    type DoGetStream = BoxedStream<FlightData>;
    type DoPutStream = BoxStream<'static, Result<PutResult, Status>>;
    type DoExchangeStream = BoxedStream<FlightData>;
    type DoActionStream = BoxStream<'static, Result<arrow_flight::Result, Status>>;
    type ListActionsStream = BoxStream<'static, Result<ActionType, Status>>;

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        handle("Handshake", |mut log| async move {
            let responses = request.into_inner().map_ok(|req| HandshakeResponse {
                protocol_version: req.protocol_version,
                payload: Bytes::new(),
            });
            let rpc = log.rpc();
            log.outcome(Ok(Response::new(panics::stream(rpc, responses).boxed())))
        })
        .await
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        handle("ListFlights", |mut log| async move {
            let result = async {
                let prefix = std::str::from_utf8(&request.get_ref().expression).map_err(|_| {
                    Error::invalid("ListFlights criteria must be a UTF-8 name prefix")
                })?;
                let infos = self.tables.list(prefix).await?;
                for info in &infos {
                    log_info(&mut log, info);
                }
                Ok::<_, Error>(infos)
            }
            .await;
            let infos = log.outcome(result.map_err(Status::from))?;
            Ok(Response::new(
                stream::iter(infos.into_iter().map(Ok)).boxed(),
            ))
        })
        .await
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        handle("GetFlightInfo", |mut log| async move {
            let caller = Caller::of(request.extensions());
            let want_shm = request
                .metadata()
                .get(shm::TRANSPORT_HEADER)
                .is_some_and(|v| v.as_bytes() == b"shm");
            let info = self
                .info_for(request.into_inner(), caller, want_shm, &mut log)
                .await
                .map_err(Status::from);
            log.outcome(info).map(Response::new)
        })
        .await
    }

    async fn poll_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        handle("PollFlightInfo", |mut log| async move {
            let caller = Caller::of(request.extensions());
            let result = async {
                let info = self
                    .info_for(request.into_inner(), caller, false, &mut log)
                    .await?;
                PollInfo::new()
                    .with_info(info)
                    .try_with_progress(1.0)
                    .map_err(|e| Error::Internal(e.to_string()))
            }
            .await;
            log.outcome(result.map_err(Status::from)).map(Response::new)
        })
        .await
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        handle("GetSchema", |mut log| async move {
            let result = async {
                let schema = match Described::decode(request.get_ref())? {
                    Described::Sql(command) => self.sql.schema(command).await?,
                    Described::Exchange(command) => {
                        let spec = self.function_of(command)?;
                        log.table(&spec.name);
                        spec.output_schema
                            .clone()
                            .unwrap_or_else(|| Arc::new(arrow::datatypes::Schema::empty()))
                    }
                    Described::Partition(_) => return Err(partition_not_here("GetSchema")),
                    Described::Table(name) => {
                        log.table(&name);
                        match self.sql.engine().table_in_place(&name) {
                            Some(schema) => schema,
                            None => self.tables.schema(&name).await?,
                        }
                    }
                };
                let options = IpcWriteOptions::default();
                Ok::<_, Error>(SchemaResult::try_from(SchemaAsIpc::new(&schema, &options))?)
            }
            .await;
            log.outcome(result.map_err(Status::from)).map(Response::new)
        })
        .await
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        handle("DoGet", |mut log| async move {
            let opened = self.open_ticket(&request.get_ref().ticket, &mut log).await;
            let (schema, batches) = log.outcome(opened.map_err(Status::from))?;
            // Rows and bytes are logged as they go; the log moves into the
            // stream, and its line is written when the stream ends or the
            // client goes away.
            let counted = Arc::new(std::sync::Mutex::new((0u64, 0u64)));
            let counting = Arc::clone(&counted);
            let batches = batches
                .inspect_ok(move |batch| {
                    let mut c = counting
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    c.0 += batch.num_rows() as u64;
                    c.1 += batch_bytes(batch);
                })
                .map_err(|e| FlightError::Tonic(Box::new(Status::from(e))));
            let encoded = FlightDataEncoderBuilder::new()
                .with_schema(schema)
                .with_max_flight_data_size(self.options.max_flight_data_size)
                .with_dictionary_handling(DictionaryHandling::Resend)
                .build(batches);
            let rpc = log.rpc();
            let responses = logged(encoded, log, move |log, item| {
                let item = item.map_err(|e| Status::from(Error::from(e)));
                let (rows, bytes) = std::mem::take(
                    &mut *counted
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner),
                );
                log.add(rows, bytes);
                log.outcome(item)
            });
            Ok(Response::new(
                Box::pin(panics::stream(rpc, responses)) as Self::DoGetStream
            ))
        })
        .await
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        handle("DoPut", |mut log| async move {
            let outcome = request.extensions().get::<BodyOutcome>().cloned();
            let caller = Caller::of(request.extensions());
            let result = self
                .put(request.into_inner(), outcome, caller, &mut log)
                .await
                .map_err(Status::from);
            let result = log.outcome(result)?;
            Ok(Response::new(stream::once(async { Ok(result) }).boxed()))
        })
        .await
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        handle("DoExchange", |mut log| async move {
            let caller = Caller::of(request.extensions());
            let plan = exchange::open(
                self.options.functions.as_ref(),
                Arc::clone(&self.tables),
                self.sql_engine(),
                self.options.max_flight_data_size,
                request.into_inner(),
                caller,
                &mut log,
            )
            .await;
            let plan = log.outcome(plan.map_err(Status::from))?;
            let rpc = log.rpc();
            let responses = match plan {
                exchange::Plan::Echo(echo) => {
                    let (rest, first) = *echo;
                    let echoed = stream::iter([Ok(first)])
                        .chain(rest)
                        // A message that carried only the descriptor has nothing to
                        // echo; sent back empty, clients would read it as the end
                        // of the stream.
                        .try_filter_map(|mut data| {
                            data.flight_descriptor = None;
                            let empty = data.data_header.is_empty()
                                && data.data_body.is_empty()
                                && data.app_metadata.is_empty();
                            futures::future::ready(Ok((!empty).then_some(data)))
                        });
                    logged(echoed, log, |log, item| {
                        let item = item.map_err(inbound_status).inspect(|data| {
                            log.add(exchange::rows(data), data.data_body.len() as u64);
                        });
                        log.outcome(item)
                    })
                    .boxed()
                }
                exchange::Plan::Replies(replies) => logged(replies, log, |log, item| {
                    let item = item.map_err(Status::from).inspect(|data| {
                        log.add(exchange::rows(data), data.data_body.len() as u64);
                    });
                    log.outcome(item)
                })
                .boxed(),
            };
            Ok(Response::new(
                Box::pin(panics::stream(rpc, responses)) as Self::DoExchangeStream
            ))
        })
        .await
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        handle("DoAction", |mut log| async move {
            let caller = Caller::of(request.extensions());
            let session = crate::session::session_id(request.metadata());
            let action = request.into_inner();
            let result = self
                .action(caller, &action, session.as_deref(), &mut log)
                .await;
            let (bodies, set_cookie) = log.outcome(result.map_err(Status::from))?;
            let results = bodies
                .into_iter()
                .map(|body| Ok(arrow_flight::Result { body }));
            let mut response = Response::new(stream::iter(results).boxed());
            if let Some(cookie) = set_cookie.and_then(|c| c.parse().ok()) {
                response.metadata_mut().insert("set-cookie", cookie);
            }
            Ok(response)
        })
        .await
    }

    async fn list_actions(
        &self,
        _request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        handle("ListActions", |_log| async move {
            Ok(Response::new(
                stream::iter(ActionKind::action_types().into_iter().map(Ok)).boxed(),
            ))
        })
        .await
    }
}

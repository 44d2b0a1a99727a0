//! `QuiverService`: every Flight RPC over the table store.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use arrow::datatypes::SchemaRef;
use arrow::ipc::writer::IpcWriteOptions;
use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
use arrow_flight::encode::{DictionaryHandling, FlightDataEncoderBuilder};
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightEndpoint, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaAsIpc, SchemaResult, Ticket,
};
use base64::Engine as _;
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{FutureExt, Stream, StreamExt, TryStreamExt};
use quiver_sql::{EngineOptions, SqlEngine};
use quiver_store::{TableStore, TableVersion, TableWriter, batch_bytes};
use serde_json::json;
use tonic::{Request, Response, Status, Streaming};

use crate::auth::{Caller, Role};
use crate::error::inbound_status;
use crate::ipc_bounds::check_buffers;
use crate::request_body::BodyOutcome;
use crate::rpc_log::{RpcLog, logged};
use crate::shm::{self, ShmServer};
use crate::sql::{self, Batches, FlightSql};
use crate::ticket::TableTicket;
use crate::wire::body_pool::BodyPool;
use crate::{Error, PutOptions, Result, actions, guard, table_name};

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
    /// Bytes of freed DoPut bodies kept for reuse ([`crate::wire::body_pool`]).
    pub put_buffer_pool: usize,
    /// The SQL engine's limits.
    pub sql: EngineOptions,
    /// The same-host shared-memory data plane, if on.
    pub shm: Option<Arc<ShmServer>>,
}

/// The Flight service: the standard RPCs over a [`TableStore`].
#[derive(Debug, Clone)]
pub struct QuiverService {
    store: Arc<TableStore>,
    options: Arc<ServiceOptions>,
    sql: Arc<FlightSql>,
    body_pool: BodyPool,
    started: Instant,
}

type BoxedStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

impl QuiverService {
    /// A service over `store`.
    pub fn new(store: Arc<TableStore>, options: ServiceOptions) -> Self {
        let engine = Arc::new(SqlEngine::new(Arc::clone(&store), options.sql.clone()));
        let body_pool = BodyPool::new(options.put_buffer_pool);
        Self {
            store,
            body_pool,
            options: Arc::new(options),
            sql: Arc::new(FlightSql::new(engine)),
            started: Instant::now(),
        }
    }

    /// The SQL engine: every stored table, and tables over files.
    pub fn sql_engine(&self) -> &Arc<SqlEngine> {
        self.sql.engine()
    }

    /// The store behind the service.
    pub fn store(&self) -> &Arc<TableStore> {
        &self.store
    }

    /// How many endpoints `table` is split over: its own setting or the
    /// server's, never more than its rows, at least one.
    fn partitions_for(&self, table: &TableVersion) -> usize {
        let wanted = table
            .partitions()
            .unwrap_or(self.options.default_partitions);
        let rows = usize::try_from(table.num_rows()).unwrap_or(usize::MAX);
        wanted.min(rows).max(1)
    }

    fn flight_info(
        &self,
        table: &TableVersion,
        descriptor: FlightDescriptor,
    ) -> Result<FlightInfo> {
        let partitions = self.partitions_for(table);
        let endpoints = (0..partitions).map(|partition| {
            let ticket = TableTicket {
                table: table.name().to_string(),
                version: Some(table.version()),
                partition,
                partitions,
            };
            FlightEndpoint::new()
                .with_ticket(Ticket::new(ticket.encode()))
                .with_location(self.options.location.clone())
        });
        let metadata = json!({"version": table.version(), "partitions": partitions});
        Ok(FlightInfo::new()
            .try_with_schema(table.schema())?
            .with_descriptor(descriptor)
            .with_endpoints(endpoints.collect())
            .with_total_records(i64::try_from(table.num_rows()).unwrap_or(i64::MAX))
            .with_total_bytes(i64::try_from(table.num_bytes()).unwrap_or(i64::MAX))
            .with_ordered(true)
            .with_app_metadata(metadata.to_string()))
    }

    async fn info_for(
        &self,
        descriptor: FlightDescriptor,
        caller: Result<Caller>,
        want_shm: bool,
        log: &mut RpcLog,
    ) -> Result<FlightInfo> {
        if let Some(command) = sql::descriptor_command(&descriptor)? {
            return self
                .sql
                .flight_info(command, descriptor, &caller?, log)
                .await;
        }
        let name = table_name(&descriptor)?;
        log.table(&name);
        let table = self.store.get(&name)?;
        log.add(table.num_rows(), table.num_bytes());
        let mut info = self.flight_info(&table, descriptor)?;
        // Asked for and on: one more endpoint, over shared memory. (Off: the
        // client sees none and uses the gRPC endpoints.)
        if let (true, Some(shm)) = (want_shm, &self.options.shm) {
            // The caller passed authentication (any role may read a table).
            caller?;
            info.endpoint.push(shm.get_endpoint(table)?);
        }
        Ok(info)
    }

    /// The shared-memory put ticket of the `shm-put` action.
    fn shm_put(&self, body: &[u8], caller: &Caller) -> Result<Bytes> {
        let shm = self.options.shm.as_ref().ok_or_else(|| {
            Error::Unimplemented(
                "the shared-memory data plane is off on this server (--shm-socket off)".to_string(),
            )
        })?;
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Body {
            table: String,
            #[serde(default)]
            options: Option<serde_json::Value>,
        }
        let body: Body = serde_json::from_slice(body).map_err(|e| {
            Error::invalid(format!(
                "shm-put takes JSON {{\"table\": NAME, \"options\": {{\"mode\": \"append\"}}}}: {e}"
            ))
        })?;
        quiver_store::validate_name(&body.table)?;
        let options = match &body.options {
            None => PutOptions::default(),
            Some(o) => PutOptions::from_app_metadata(o.to_string().as_bytes())?,
        };
        let ticket = shm.put_ticket(
            body.table,
            options.mode,
            options.partitions,
            Arc::clone(&caller.name),
        )?;
        Ok(json!({
            "location": shm.location(),
            "ticket": base64::engine::general_purpose::STANDARD.encode(ticket),
        })
        .to_string()
        .into())
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
    pub(crate) fn open_ticket(
        &self,
        ticket: &[u8],
        log: &mut RpcLog,
    ) -> Result<(SchemaRef, Batches)> {
        if let Some(command) = sql::command(ticket)? {
            return self.sql.open(command);
        }
        let ticket = TableTicket::decode(ticket)?;
        log.table(&ticket.table);
        let table = match self.store.get(&ticket.table) {
            Err(quiver_store::StoreError::NotFound { name }) if ticket.version.is_some() => {
                return Err(Error::Aborted(format!(
                    "table '{name}' was deleted or renamed since GetFlightInfo; \
                     call GetFlightInfo again"
                )));
            }
            other => other?,
        };
        if let Some(version) = ticket.version
            && version != table.version()
        {
            return Err(Error::Aborted(format!(
                "table '{}' changed since GetFlightInfo (version {version}, now {}); \
                 call GetFlightInfo again",
                ticket.table,
                table.version()
            )));
        }
        let batches = table.partition(ticket.partition, ticket.partitions)?;
        let schema = Arc::clone(table.schema());
        let batches = stream::iter(batches).map(move |batch| {
            let _reading = &table;
            Ok(batch)
        });
        Ok((schema, batches.boxed()))
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
        if let Some(command) = sql::descriptor_command(descriptor)? {
            return self
                .sql
                .put(self, command, first, input, outcome, &caller, log)
                .await;
        }
        let name = table_name(descriptor)?;
        log.table(&name);
        caller.require(Role::Write, "DoPut of a table")?;
        let writer = self
            .receive(first, input, outcome, |schema, options| {
                Ok(self
                    .store
                    .writer(&name, options.mode, schema, options.partitions)?)
            })
            .await?;
        let (rows, bytes) = (writer.num_rows(), writer.num_bytes());
        let version = quiver_sql::store_write(|| writer.commit())?;
        log.add(rows, bytes);
        let metadata = json!({
            "table": name,
            "version": version.version(),
            "rows": version.num_rows(),
            "bytes": version.num_bytes(),
        });
        Ok(PutResult {
            app_metadata: metadata.to_string().into(),
        })
    }

    /// Reads the batches of a DoPut stream whose first message is `first`
    /// into the writer `open` makes, and returns it uncommitted. `open` runs at
    /// the first batch (or at the end, for a table of no rows): by then the
    /// put's options have arrived, wherever the client put them.
    pub(crate) async fn receive<'a>(
        &self,
        first: FlightData,
        input: impl Stream<Item = Result<FlightData, Status>> + Send + Unpin + 'static,
        outcome: Option<BodyOutcome>,
        open: impl FnOnce(SchemaRef, PutOptions) -> Result<TableWriter<'a>>,
    ) -> Result<TableWriter<'a>> {
        // What the input carried, seen as the messages arrive: the first
        // app_metadata of any message (the put's options) and the body bytes
        // received, which is what the stored batches hold in memory (dictionary
        // bodies included, each once).
        let first_metadata: Arc<OnceLock<Bytes>> = Arc::default();
        let received_bytes = Arc::new(AtomicU64::new(0));
        let (metadata_seen, bytes_seen) =
            (Arc::clone(&first_metadata), Arc::clone(&received_bytes));
        let messages = stream::once(async { Ok(first) })
            .chain(input.map_err(|s| FlightError::Tonic(Box::new(inbound_status(s)))))
            .try_filter_map(move |data: FlightData| {
                if !data.app_metadata.is_empty() {
                    let _ = metadata_seen.set(data.app_metadata.clone());
                }
                bytes_seen.fetch_add(data.data_body.len() as u64, Ordering::Relaxed);
                if let Err(e) = check_buffers(&data.data_header, data.data_body.len()) {
                    return futures::future::ready(Err(FlightError::DecodeError(e)));
                }
                // Metadata-only messages (pyarrow's `write_metadata`) are no IPC
                // messages: the decoder must not see them.
                let keep = (!data.data_header.is_empty()).then_some(data);
                futures::future::ready(Ok(keep))
            });
        let mut decoder = FlightDataDecoder::new(messages);
        let mut open = Some(open);
        let mut open_writer = |schema: &Option<SchemaRef>| {
            let schema = schema
                .clone()
                .ok_or_else(|| Error::invalid("DoPut stream carried no schema before its data"))?;
            let options = first_metadata
                .get()
                .map(|m| PutOptions::from_app_metadata(m))
                .transpose()?
                .unwrap_or_default();
            let open = open
                .take()
                .ok_or_else(|| Error::Internal("a put's writer opened twice".into()))?;
            open(schema, options)
        };
        let mut schema: Option<SchemaRef> = None;
        let mut writer = None;
        let mut charged = 0u64;
        // arrow-ipc panics on some malformed messages instead of failing: a
        // panic while decoding is the client's bad data, refused as such.
        while let Some(decoded) = std::panic::AssertUnwindSafe(decoder.next())
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| {
                let what = guard::panic_message(&*panic);
                tracing::warn!(panic = %what, "the IPC decoder panicked on a DoPut's data");
                Some(Err(FlightError::DecodeError(format!(
                    "malformed IPC message (the decoder failed: {what})"
                ))))
            })
        {
            match decoded?.payload {
                DecodedPayload::None => {}
                DecodedPayload::Schema(s) => {
                    if schema.is_some() {
                        return Err(Error::invalid(
                            "a DoPut stream must carry one schema message",
                        ));
                    }
                    schema = Some(s);
                }
                DecodedPayload::RecordBatch(batch) => {
                    let writer = match &mut writer {
                        Some(writer) => writer,
                        None => writer.insert(open_writer(&schema)?),
                    };
                    let received = received_bytes.load(Ordering::Relaxed);
                    writer.push_charged(batch, received - charged)?;
                    charged = received;
                }
            }
        }
        // tonic ends a cancelled request stream as if the client had finished it.
        if outcome.is_some_and(|o| o.broken()) {
            return Err(Error::Cancelled(
                "the DoPut stream broke off before its end; nothing was stored".into(),
            ));
        }
        match writer {
            Some(writer) => Ok(writer),
            None => open_writer(&schema),
        }
    }
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
        let mut log = RpcLog::new("Handshake");
        let responses = request.into_inner().map_ok(|req| HandshakeResponse {
            protocol_version: req.protocol_version,
            payload: Bytes::new(),
        });
        log.outcome(Ok(Response::new(
            guard::stream("Handshake", responses).boxed(),
        )))
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        guard::handler("ListFlights", async {
            let mut log = RpcLog::new("ListFlights");
            let result = (|| {
                let prefix = std::str::from_utf8(&request.get_ref().expression).map_err(|_| {
                    Error::invalid("ListFlights criteria must be a UTF-8 name prefix")
                })?;
                let tables = self.store.list(prefix);
                let infos = tables
                    .iter()
                    .map(|t| {
                        log.add(t.num_rows(), t.num_bytes());
                        let descriptor = FlightDescriptor::new_path(vec![t.name().to_string()]);
                        self.flight_info(t, descriptor).map_err(Status::from)
                    })
                    .collect::<Vec<_>>();
                Ok::<_, Error>(infos)
            })();
            let infos = log.outcome(result.map_err(Status::from))?;
            Ok(Response::new(stream::iter(infos).boxed()))
        })
        .await
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        guard::handler("GetFlightInfo", async {
            let mut log = RpcLog::new("GetFlightInfo");
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
        guard::handler("PollFlightInfo", async {
            let mut log = RpcLog::new("PollFlightInfo");
            let caller = Caller::of(request.extensions());
            let info = self
                .info_for(request.into_inner(), caller, false, &mut log)
                .await
                .map_err(Status::from);
            let info = log.outcome(info)?;
            Ok(Response::new(
                PollInfo::new()
                    .with_info(info)
                    .try_with_progress(1.0)
                    .map_err(|e| Status::from(Error::Internal(e.to_string())))?,
            ))
        })
        .await
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        guard::handler("GetSchema", async {
            let mut log = RpcLog::new("GetSchema");
            let result = async {
                let schema = match sql::descriptor_command(request.get_ref())? {
                    Some(command) => self.sql.schema(command).await?,
                    None => {
                        let name = table_name(request.get_ref())?;
                        log.table(&name);
                        Arc::clone(self.store.get(&name)?.schema())
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
        guard::handler("DoGet", async {
            let mut log = RpcLog::new("DoGet");
            let opened = self.open_ticket(&request.get_ref().ticket, &mut log);
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
                Box::pin(guard::stream("DoGet", responses)) as Self::DoGetStream
            ))
        })
        .await
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        guard::handler("DoPut", async {
            let mut log = RpcLog::new("DoPut");
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
        let log = RpcLog::new("DoExchange");
        let echoed = request
            .into_inner()
            // A message that carried only the descriptor has nothing to echo;
            // sent back empty, clients would read it as the end of the stream.
            .try_filter_map(|mut data| {
                data.flight_descriptor = None;
                let empty = data.data_header.is_empty()
                    && data.data_body.is_empty()
                    && data.app_metadata.is_empty();
                futures::future::ready(Ok((!empty).then_some(data)))
            });
        let echoed = logged(echoed, log, |log, item| {
            let item = item.map_err(inbound_status).inspect(|data| {
                log.add(0, data.data_body.len() as u64);
            });
            log.outcome(item)
        });
        Ok(Response::new(
            Box::pin(guard::stream("DoExchange", echoed)) as Self::DoExchangeStream
        ))
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        guard::handler("DoAction", async {
            let caller = Caller::of(request.extensions());
            let action = request.into_inner();
            let mut log = RpcLog::new("DoAction");
            let allowed = caller.and_then(|c| {
                c.require(
                    actions::role_needed(&action.r#type),
                    &format!("action '{}'", action.r#type),
                )
                .map(|()| c)
            });
            let caller = log.outcome(allowed.map_err(Status::from))?;
            if action.r#type == "shm-put" {
                let body =
                    log.outcome(self.shm_put(&action.body, &caller).map_err(Status::from))?;
                let body = arrow_flight::Result { body };
                return Ok(Response::new(stream::once(async { Ok(body) }).boxed()));
            }
            if let Some(result) = self.sql.action(&action.r#type, &action.body).await {
                log.table(&action.r#type);
                let bodies = log.outcome(result.map_err(Status::from))?;
                let results = bodies
                    .into_iter()
                    .map(|body| Ok(arrow_flight::Result { body }));
                return Ok(Response::new(stream::iter(results).boxed()));
            }
            let result = quiver_sql::store_write(|| {
                actions::run(
                    &self.store,
                    &self.body_pool,
                    self.started,
                    &action.r#type,
                    &action.body,
                )
            });
            if let Ok(outcome) = &result {
                if let Some(table) = &outcome.table {
                    log.table(table);
                }
                log.add(outcome.rows, outcome.bytes);
            }
            tracing::debug!(action = %action.r#type, "action");
            let outcome = log.outcome(result.map_err(Status::from))?;
            let body = arrow_flight::Result { body: outcome.body };
            Ok(Response::new(stream::once(async { Ok(body) }).boxed()))
        })
        .await
    }

    async fn list_actions(
        &self,
        _request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        let _log = RpcLog::new("ListActions");
        Ok(Response::new(
            stream::iter(
                actions::action_types()
                    .into_iter()
                    .chain(sql::action_types())
                    .map(Ok),
            )
            .boxed(),
        ))
    }
}

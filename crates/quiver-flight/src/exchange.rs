//! DoExchange: a stream through a deployed function, a stored table through
//! one (apply), or, for any other descriptor, the echo (docs/functions.md).
//!
//! A function call reads the client's batches, hands each to the pool
//! ([`quiver_functions::FunctionPool::call`]) and sends the results back in
//! input order, at most the pool's window of batches in flight: the reader
//! stops reading when the window is full, so a slow client holds the server to
//! a few batches. Dropping the response stream (the client cancelled) drops
//! the calls still queued.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use arrow::record_batch::RecordBatch;
use arrow_flight::FlightData;
use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use quiver_functions::{FunctionPool, FunctionSpec};
use quiver_sql::{InputStream, SqlEngine, SqlError};
use serde_json::json;
use tonic::Streaming;

use crate::auth::{Caller, Role};
use crate::error::inbound_status;
use crate::request::{Apply, Described, Exchange};
use crate::rpc_log::RpcLog;
use crate::{Error, Result};

mod ending;

pub use ending::STOP_INPUT;
use ending::{Tail, Unread};

/// Rows of a stored table handed to a function at once by apply.
const APPLY_SLICE_ROWS: usize = 65_536;

/// Whether a descriptor is a command: `CMD` whose first byte is `{`.
pub(crate) fn is_command(descriptor: &arrow_flight::FlightDescriptor) -> bool {
    descriptor.r#type == arrow_flight::flight_descriptor::DescriptorType::Cmd as i32
        && descriptor.cmd.first() == Some(&b'{')
}

/// What the response stream carries, before encoding.
type Replies = BoxStream<'static, Result<FlightData>>;

/// What a DoExchange does, decided by its first message's descriptor.
pub(crate) enum Plan {
    /// Not a command: the stream (its first message apart) is echoed.
    Echo(Box<(Streaming<FlightData>, FlightData)>),
    /// A function call or an apply.
    Replies(Replies),
}

/// Decides what the exchange whose request stream is `input` does, and
/// starts it. A command's replies end after its input ([`ending`]): its
/// errors, refusals included, are the replies' last item.
pub(crate) async fn open(
    pool: Option<&Arc<FunctionPool>>,
    tables: Tables,
    engine: &Arc<SqlEngine>,
    max_message: usize,
    mut input: Streaming<FlightData>,
    caller: Result<Caller>,
    log: &mut RpcLog,
) -> Result<Plan> {
    let Some(first) = input
        .next()
        .await
        .transpose()
        .map_err(|s| Error::Status(Box::new(inbound_status(s))))?
    else {
        return Ok(Plan::Replies(stream::empty().boxed()));
    };
    let command = match first.flight_descriptor.as_ref() {
        Some(d) if is_command(d) => Described::decode(d),
        // Any other descriptor (or none) keeps the echo.
        _ => return Ok(Plan::Echo(Box::new((input, first)))),
    };
    let unread = match &command {
        // The client sends nothing but the descriptor.
        Ok(Described::Exchange(Exchange::Apply(_))) => Unread::Wait,
        _ => Unread::Stop,
    };
    let (tail, left) = ending::tail(input);
    let replies = start(
        pool,
        tables,
        engine,
        max_message,
        command,
        first,
        tail,
        caller,
        log,
    )
    .await
    .unwrap_or_else(|e| stream::once(async { Err(e) }).boxed());
    Ok(Plan::Replies(ending::after_input(replies, left, unread)))
}

/// Starts `command` over `input`.
#[allow(clippy::too_many_arguments)]
async fn start(
    pool: Option<&Arc<FunctionPool>>,
    tables: Tables,
    engine: &Arc<SqlEngine>,
    max_message: usize,
    command: Result<Described>,
    first: FlightData,
    input: Tail,
    caller: Result<Caller>,
    log: &mut RpcLog,
) -> Result<Replies> {
    let command = match command? {
        Described::Exchange(command) => command,
        Described::Partition(_) => {
            return Err(crate::request::partition_not_here("DoExchange"));
        }
        _ => return Err(Error::Internal("a command decoded as another kind".into())),
    };
    let caller = caller?;
    let pool = |name: &str| -> Result<(Arc<FunctionPool>, Arc<FunctionSpec>)> {
        match pool {
            Some(pool) => Ok((Arc::clone(pool), pool.function(name)?)),
            None => Err(quiver_functions::FunctionError::NotFound {
                name: name.to_string(),
                served: Vec::new(),
            }
            .into()),
        }
    };
    match command {
        Exchange::Function(name) => {
            caller.require(Role::Read, "calling a function")?;
            log.table(&name);
            let (pool, spec) = pool(&name)?;
            Ok(call(pool, spec, first, input, max_message))
        }
        Exchange::Apply(apply) => {
            drop(input);
            caller.require(Role::Read, "apply")?;
            if apply.into.is_some() {
                caller.require(Role::Write, "apply into a table")?;
            }
            log.table(&apply.source);
            let (pool, spec) = pool(&apply.apply)?;
            self::apply(pool, spec, tables, apply, max_message).await
        }
        Exchange::Sql(sql) => {
            caller.require(Role::Read, "SQL over a stream")?;
            log.table(quiver_sql::INPUT_TABLE);
            sql_over_stream(engine, &sql, first, input, max_message).await
        }
    }
}

/// The stream as the table `input` of `sql`, the query's results streamed
/// back as they come. The input's schema is read before planning; metadata-only
/// messages and `app_metadata` are not passed on (a query's rows do not map
/// to its input's batches).
async fn sql_over_stream(
    engine: &Arc<SqlEngine>,
    sql: &str,
    first: FlightData,
    rest: Tail,
    max_message: usize,
) -> Result<Replies> {
    let messages = decodable(first, rest);
    let mut decoder = FlightDataDecoder::new(messages);
    let schema = loop {
        match decoder.next().await.transpose()? {
            Some(decoded) => {
                if let DecodedPayload::Schema(schema) = decoded.payload {
                    break schema;
                }
                if let DecodedPayload::RecordBatch(_) = decoded.payload {
                    return Err(Error::invalid("a record batch came before its schema"));
                }
            }
            None => {
                return Err(Error::invalid(
                    "SQL over a stream needs the input's schema: the stream ended before it",
                ));
            }
        }
    };
    let batches: InputStream = decoder
        .filter_map(|decoded| {
            futures::future::ready(match decoded {
                Ok(d) => match d.payload {
                    DecodedPayload::RecordBatch(batch) => Some(Ok(batch)),
                    DecodedPayload::Schema(_) => Some(Err(SqlError::invalid(
                        "the input's schema changed mid-stream: SQL over a stream reads one \
                         schema",
                    ))),
                    DecodedPayload::None => None,
                },
                Err(e) => Some(Err(SqlError::invalid(format!("the input stream: {e}")))),
            })
        })
        .boxed();
    let query = engine.stream_query(sql, schema, batches).await?;
    let results = query
        .execute(0)?
        .map_err(|e| FlightError::ExternalError(Box::new(Error::from(e))));
    let encoded = FlightDataEncoderBuilder::new()
        .with_max_flight_data_size(max_message)
        .with_schema(query.schema())
        .build(results)
        .map_err(Error::from);
    Ok(encoded.boxed())
}

/// The rows of a record batch message (0 for any other), read off its IPC
/// header: what the RPC log counts.
pub(crate) fn rows(data: &FlightData) -> u64 {
    arrow::ipc::root_as_message(&data.data_header)
        .ok()
        .and_then(|m| m.header_as_record_batch())
        .map_or(0, |b| u64::try_from(b.length()).unwrap_or(0))
}

/// The request's messages as arrow-flight's decoder takes them.
fn decodable(
    first: FlightData,
    rest: Tail,
) -> impl futures::Stream<Item = std::result::Result<FlightData, FlightError>> + Send + 'static {
    stream::iter([Ok(first)]).chain(rest).map(|message| {
        let mut message = message.map_err(|s| FlightError::Tonic(Box::new(inbound_status(s))))?;
        if message.data_header.is_empty() {
            message.data_header = Bytes::from_static(quiver_ipc::NO_HEADER);
        }
        Ok(message)
    })
}

/// One input message: a batch with its `app_metadata`, or metadata alone.
enum Input {
    Batch(RecordBatch, Bytes),
    Metadata(Bytes),
}

/// One output: a batch's results with its input's `app_metadata`, or
/// metadata passed through.
enum Output {
    Results(SchemaRef, Vec<RecordBatch>, Bytes),
    Metadata(Bytes),
}

/// The stream's batches through `spec`, results in order.
fn call(
    pool: Arc<FunctionPool>,
    spec: Arc<FunctionSpec>,
    first: FlightData,
    rest: Tail,
    max_message: usize,
) -> Replies {
    let messages = decodable(first, rest);
    let checked = Arc::clone(&spec);
    let inputs = FlightDataDecoder::new(messages).filter_map(move |decoded| {
        let item = match decoded {
            Err(e) => Some(Err(Error::from(e))),
            Ok(d) => match d.payload {
                DecodedPayload::Schema(schema) => checked
                    .check_input(&schema)
                    .err()
                    .map(|e| Err(Error::from(e))),
                DecodedPayload::RecordBatch(batch) => {
                    Some(Ok(Input::Batch(batch, d.inner.app_metadata)))
                }
                DecodedPayload::None if d.inner.app_metadata.is_empty() => None,
                DecodedPayload::None => Some(Ok(Input::Metadata(d.inner.app_metadata))),
            },
        };
        futures::future::ready(item)
    });
    let window = pool.config().window();
    let mut index = 0u64;
    let called = Arc::clone(&spec);
    let outputs = inputs
        .map(move |input| {
            let pool = Arc::clone(&pool);
            let spec = Arc::clone(&called);
            let batch_index = index;
            if matches!(input, Ok(Input::Batch(..))) {
                index += 1;
            }
            async move {
                match input? {
                    Input::Batch(batch, metadata) => {
                        let (schema, batches) = pool.call(&spec, batch, batch_index).await?;
                        Ok(Output::Results(schema, batches, metadata))
                    }
                    Input::Metadata(metadata) => Ok(Output::Metadata(metadata)),
                }
            }
        })
        .buffered(window);
    encode(spec, outputs.boxed(), max_message)
}

/// Encodes the outputs as FlightData: the schema once (at once when the
/// function declares it), then each result's batches, the input's metadata on
/// the first message of each. The stream ends after its first error.
fn encode(
    spec: Arc<FunctionSpec>,
    outputs: BoxStream<'static, Result<Output>>,
    max_message: usize,
) -> Replies {
    let mut encoder = ResultEncoder::new(spec, max_message);
    let declared = encoder.declared_schema_message();
    let messages = outputs
        .map(move |output| -> Result<Vec<FlightData>> { encoder.messages(output?) })
        .scan(false, |failed, item| {
            // Nothing follows an error: the call ends with its status.
            if *failed {
                return futures::future::ready(None);
            }
            *failed = item.is_err();
            futures::future::ready(Some(item))
        })
        .map_ok(|messages| stream::iter(messages.into_iter().map(Ok)))
        .try_flatten();
    stream::iter(declared.map(Ok)).chain(messages).boxed()
}

/// Turns results into FlightData, checking them against the function's
/// declared output schema (or the call's first result's).
struct ResultEncoder {
    expected: ResultSchema,
    generator: IpcDataGenerator,
    tracker: DictionaryTracker,
    options: IpcWriteOptions,
    context: IpcWriteContext,
    max_message: usize,
}

impl ResultEncoder {
    fn new(spec: Arc<FunctionSpec>, max_message: usize) -> Self {
        Self {
            expected: ResultSchema::new(spec),
            generator: IpcDataGenerator::default(),
            tracker: DictionaryTracker::new(false),
            options: IpcWriteOptions::default(),
            context: IpcWriteContext::default(),
            max_message,
        }
    }

    /// The schema message of a declared output schema, sent before any result.
    fn declared_schema_message(&mut self) -> Option<FlightData> {
        let schema = Arc::clone(self.expected.spec.output_schema.as_ref()?);
        Some(self.schema_message(&schema))
    }

    fn schema_message(&mut self, schema: &SchemaRef) -> FlightData {
        self.generator
            .schema_to_bytes_with_dictionary_tracker(schema, &mut self.tracker, &self.options)
            .into()
    }

    fn messages(&mut self, output: Output) -> Result<Vec<FlightData>> {
        let (schema, batches, metadata) = match output {
            Output::Metadata(metadata) => {
                return Ok(vec![FlightData {
                    app_metadata: metadata,
                    ..Default::default()
                }]);
            }
            Output::Results(schema, batches, metadata) => (schema, batches, metadata),
        };
        let mut messages = Vec::new();
        if self.expected.accept(&schema)? {
            messages.push(self.schema_message(&schema));
        }
        let mut metadata = Some(metadata);
        for batch in batches {
            let batch = self.expected.conform(batch);
            for piece in quiver_ipc::split(&batch, self.max_message) {
                let (dictionaries, data) = self.generator.encode(
                    &piece,
                    &mut self.tracker,
                    &self.options,
                    &mut self.context,
                )?;
                messages.extend(dictionaries.into_iter().map(FlightData::from));
                let mut data = FlightData::from(data);
                if let Some(metadata) = metadata.take() {
                    data.app_metadata = metadata;
                }
                messages.push(data);
            }
        }
        Ok(messages)
    }
}

/// Where apply reads its source and stores its results: the node's tables.
pub(crate) type Tables = Arc<dyn crate::tables::Tables>;

/// A stored table through a function: its slices fed to the pool in
/// parallel, the results stored atomically as `into`, or streamed back.
async fn apply(
    pool: Arc<FunctionPool>,
    spec: Arc<FunctionSpec>,
    tables: Tables,
    apply: Apply,
    max_message: usize,
) -> Result<Replies> {
    let options = apply.options()?;
    // A snapshot: writes to the table while apply runs do not disturb it.
    let source = tables.read(&apply.source, 0, 1).await?;
    spec.check_input(&source.schema)?;
    let slices: Vec<RecordBatch> = source
        .batches
        .iter()
        .flat_map(|b| {
            (0..b.num_rows())
                .step_by(APPLY_SLICE_ROWS)
                .map(move |at| b.slice(at, APPLY_SLICE_ROWS.min(b.num_rows() - at)))
        })
        .collect();
    let window = pool.config().window();
    let called = Arc::clone(&spec);
    let results = stream::iter(slices.into_iter().enumerate())
        .map(move |(i, slice)| {
            let pool = Arc::clone(&pool);
            let spec = Arc::clone(&called);
            async move {
                let (schema, batches) = pool.call(&spec, slice, i as u64).await?;
                Ok::<_, Error>(Output::Results(schema, batches, Bytes::new()))
            }
        })
        .buffered(window)
        .boxed();
    let Some(into) = apply.into else {
        return Ok(encode(spec, results, max_message));
    };
    let stored = async move {
        let mut results = results;
        // Checked and conformed as streamed results are.
        let mut expected = ResultSchema::new(Arc::clone(&spec));
        let mut writer = None;
        while let Some(output) = results.next().await {
            let Output::Results(schema, batches, _) = output? else {
                continue;
            };
            expected.accept(&schema)?;
            let writer = match &mut writer {
                Some(writer) => writer,
                None => writer.insert(tables.open(
                    &into,
                    &options,
                    Arc::clone(expected.schema.as_ref().unwrap_or(&schema)),
                )?),
            };
            for batch in batches {
                writer.push(expected.conform(batch)).await?;
            }
        }
        let writer = match writer {
            Some(writer) => writer,
            // An empty source: the declared output schema, no rows.
            None => {
                let schema = spec.output_schema.clone().ok_or_else(|| {
                    Error::invalid(format!(
                        "table {} is empty and function {} declares no output schema: \
                         nothing to store",
                        apply.source, spec.name
                    ))
                })?;
                tables.open(&into, &options, schema)?
            }
        };
        let published = writer.commit().await?;
        let summary = json!({
            "table": into,
            "version": published.version,
            "rows": published.rows,
            "bytes": published.bytes,
            "source_version": source.version,
        });
        Ok(FlightData {
            app_metadata: Bytes::from(summary.to_string()),
            ..Default::default()
        })
    };
    Ok(stream::once(stored).boxed())
}

/// The schema a call's results must have: the function's declared output
/// schema, or else its first result's.
struct ResultSchema {
    spec: Arc<FunctionSpec>,
    schema: Option<SchemaRef>,
    /// Results seen, numbering them in messages.
    results: u64,
}

impl ResultSchema {
    fn new(spec: Arc<FunctionSpec>) -> Self {
        Self {
            schema: spec.output_schema.clone(),
            spec,
            results: 0,
        }
    }

    /// Checks a result's schema. `true` for the first result of a function
    /// without a declared schema: it fixes the call's schema, to be sent.
    fn accept(&mut self, schema: &SchemaRef) -> Result<bool> {
        let index = self.results;
        self.results += 1;
        let Some(expected) = &self.schema else {
            self.schema = Some(Arc::clone(schema));
            return Ok(true);
        };
        if quiver_functions::same_shape(expected, schema) {
            return Ok(false);
        }
        let declared = if self.spec.output_schema.is_some() {
            "its declared output schema"
        } else {
            "the call's first result"
        };
        Err(quiver_functions::FunctionError::Output {
            function: self.spec.name.clone(),
            message: format!(
                "its result's schema ({}) differs from {declared} ({})",
                quiver_functions::fields(schema).join(", "),
                quiver_functions::fields(expected).join(", ")
            ),
            batch: index,
        }
        .into())
    }

    /// An accepted result's batch with the call's schema: names and types are
    /// equal; nullability and metadata become the declared ones.
    fn conform(&self, batch: RecordBatch) -> RecordBatch {
        match &self.schema {
            Some(schema) => batch
                .clone()
                .with_schema(Arc::clone(schema))
                .unwrap_or(batch),
            None => batch,
        }
    }
}

//! A Flight server in the test process that answers the function commands
//! as docs/functions.md specifies them, so the subcommands' client side is
//! tested without Python workers. Functions: `identity`, `double` (column
//! `x` to `x2 = 2x`), `fails` (fails after its first batch). Tables for
//! apply: `trips` (10 rows of `x`), `missing` (not found). Every command
//! received is recorded.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use arrow::array::{ArrayRef, Int64Array};
use arrow::compute::kernels::numeric::mul;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};
use tonic::{Request, Response, Status, Streaming};

/// The `list-functions` answer.
pub(super) fn listing() -> Value {
    json!({
        "functions": [
            {"name": "double", "module": "fixture", "description": "Twice x.\n\nMore.",
             "pandas": false, "sql": true, "input_schema": "AAAA", "output_schema": "AAAA",
             "input_fields": ["x: int64"], "output_fields": ["x2: int64"]},
            {"name": "identity", "module": "fixture", "description": "",
             "pandas": true, "sql": true, "input_schema": null, "output_schema": null,
             "input_fields": null, "output_fields": null},
        ],
        "workers": {"alive": 2, "configured": 2}
    })
}

/// A running fake server.
#[derive(Debug)]
pub(super) struct FakeServer {
    pub(super) uri: String,
    /// The commands received, in order.
    pub(super) commands: Arc<Mutex<Vec<Value>>>,
}

/// Starts a fake server on a free loopback port; it runs until the test's
/// runtime ends.
pub(super) async fn start() -> FakeServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let uri = format!("grpc+tcp://{}", listener.local_addr().expect("address"));
    let commands = Arc::new(Mutex::new(Vec::new()));
    let fake = Fake {
        commands: Arc::clone(&commands),
    };
    let incoming = futures::stream::unfold(listener, |listener| async move {
        Some((listener.accept().await.map(|(s, _)| s), listener))
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(FlightServiceServer::new(fake).max_decoding_message_size(1 << 30))
            .serve_with_incoming(incoming),
    );
    FakeServer { uri, commands }
}

struct Fake {
    commands: Arc<Mutex<Vec<Value>>>,
}

type Stream<T> = BoxStream<'static, Result<T, Status>>;

fn unimplemented<T>() -> Result<T, Status> {
    Err(Status::unimplemented("not in the fake"))
}

/// `f` over each batch of `input`, every output batch's first message
/// carrying its input's `app_metadata`, as the server does.
fn call(
    input: impl futures::Stream<Item = Result<FlightData, Status>> + Send + 'static,
    f: impl Fn(usize, RecordBatch) -> Result<RecordBatch, Status> + Send + 'static,
) -> Stream<FlightData> {
    let tags = Arc::new(Mutex::new(VecDeque::<Bytes>::new()));
    let pushed = Arc::clone(&tags);
    let mut index = 0;
    let outputs =
        FlightDataDecoder::new(input.map_err(FlightError::from)).try_filter_map(move |message| {
            let result = match message.payload {
                DecodedPayload::RecordBatch(batch) => {
                    index += 1;
                    pushed
                        .lock()
                        .expect("tags")
                        .push_back(message.inner.app_metadata);
                    f(index - 1, batch).map(Some).map_err(FlightError::from)
                }
                _ => Ok(None),
            };
            futures::future::ready(result)
        });
    FlightDataEncoderBuilder::new()
        .build(outputs)
        .map_ok(move |mut data| {
            if arrow::ipc::root_as_message(&data.data_header)
                .ok()
                .and_then(|m| m.header_as_record_batch())
                .is_some()
            {
                data.app_metadata = tags.lock().expect("tags").pop_front().unwrap_or_default();
            }
            data
        })
        .map_err(Status::from)
        .boxed()
}

fn double(batch: &RecordBatch) -> Result<RecordBatch, Status> {
    let x = batch
        .column_by_name("x")
        .ok_or_else(|| Status::invalid_argument("no column x"))?;
    let x2 = mul(x, &Int64Array::new_scalar(2)).map_err(|e| Status::internal(e.to_string()))?;
    let schema = Schema::new(vec![Field::new("x2", DataType::Int64, true)]);
    RecordBatch::try_new(Arc::new(schema), vec![x2]).map_err(|e| Status::internal(e.to_string()))
}

/// 10 rows of `x` in two batches.
pub(super) fn trips() -> Vec<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
    [0..4, 4..10]
        .into_iter()
        .map(|range| {
            let x: ArrayRef = Arc::new(Int64Array::from_iter_values(range));
            RecordBatch::try_new(Arc::clone(&schema), vec![x]).expect("batch")
        })
        .collect()
}

fn apply(command: &Value) -> Result<Stream<FlightData>, Status> {
    let source = command["source"].as_str().unwrap_or_default();
    if source != "trips" {
        return Err(Status::not_found(format!("table '{source}' not found")));
    }
    if let Some(into) = command["into"].as_str() {
        let summary = json!({"table": into, "version": 3, "rows": 10, "bytes": 80,
                             "source_version": 1});
        let message = FlightData::new().with_app_metadata(summary.to_string());
        return Ok(futures::stream::iter([Ok(message)]).boxed());
    }
    let batches = trips().into_iter().map(|b| double(&b).map_err(Into::into));
    Ok(FlightDataEncoderBuilder::new()
        .build(futures::stream::iter(batches.collect::<Vec<_>>()))
        .map_err(|e| Status::internal(e.to_string()))
        .boxed())
}

#[tonic::async_trait]
impl FlightService for Fake {
    type HandshakeStream = Stream<HandshakeResponse>;
    type ListFlightsStream = Stream<FlightInfo>;
    type DoGetStream = Stream<FlightData>;
    type DoPutStream = Stream<PutResult>;
    type DoExchangeStream = Stream<FlightData>;
    type DoActionStream = Stream<arrow_flight::Result>;
    type ListActionsStream = Stream<ActionType>;

    async fn handshake(
        &self,
        _: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        unimplemented()
    }
    async fn list_flights(
        &self,
        _: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        unimplemented()
    }
    async fn get_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        unimplemented()
    }
    async fn poll_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        unimplemented()
    }
    async fn get_schema(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        unimplemented()
    }
    async fn do_get(&self, _: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        unimplemented()
    }
    async fn do_put(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        unimplemented()
    }
    async fn list_actions(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        unimplemented()
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        let action = request.into_inner();
        if action.r#type != "list-functions" {
            return unimplemented();
        }
        let body = arrow_flight::Result::new(listing().to_string());
        Ok(Response::new(futures::stream::iter([Ok(body)]).boxed()))
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        let mut input = request.into_inner();
        let first = input
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("no descriptor"))?;
        let cmd = first
            .flight_descriptor
            .as_ref()
            .map(|d| d.cmd.clone())
            .unwrap_or_default();
        let command: Value = serde_json::from_slice(&cmd)
            .map_err(|e| Status::invalid_argument(format!("command: {e}")))?;
        self.commands
            .lock()
            .expect("commands")
            .push(command.clone());
        let input = futures::stream::iter([Ok(first)]).chain(input);
        let stream = match command["function"].as_str() {
            Some("identity") => call(input, |_, batch| Ok(batch)),
            Some("double") => call(input, |_, batch| double(&batch)),
            Some("fails") => call(input, |index, batch| match index {
                0 => Ok(batch),
                _ => Err(Status::internal(format!(
                    "function fails raised ValueError: bad row (batch {index})"
                ))),
            }),
            Some(name) => {
                return Err(Status::not_found(format!("function {name} not found")));
            }
            None => apply(&command)?,
        };
        Ok(Response::new(stream))
    }
}

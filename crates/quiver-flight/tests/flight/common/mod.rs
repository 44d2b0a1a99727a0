//! A real quiver Flight server on 127.0.0.1:0 for integration tests.

#![allow(dead_code, unreachable_pub, unused_imports)]

use std::net::SocketAddr;
use std::time::Duration;

pub use std::sync::Arc;

pub use arrow::array::{ArrayRef, Int64Array, StringArray};
pub use arrow::datatypes::Schema;
pub use arrow::record_batch::RecordBatch;
pub use arrow_flight::encode::{DictionaryHandling, FlightDataEncoderBuilder};
pub use arrow_flight::error::FlightError;
pub use arrow_flight::flight_service_client::FlightServiceClient;
pub use arrow_flight::sql::client::FlightSqlServiceClient;
pub use arrow_flight::{Action, FlightClient, FlightData, FlightDescriptor, Ticket};
pub use bytes::Bytes;
pub use futures::{StreamExt, TryStreamExt, stream};
pub use quiver_flight::ServerConfig;
pub use quiver_store::TableStore;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
pub use tonic::Code;
use tonic::transport::{Channel, Endpoint};

/// Longest any one RPC of a test may take: a hung call fails the test
/// instead of hanging CI.
pub const RPC_TIMEOUT: Duration = Duration::from_secs(120);

/// Longest a test server may take to stop once asked.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(60);

/// A running server; shut down (gracefully) when dropped or by `shutdown`.
pub struct TestServer {
    pub addr: SocketAddr,
    pub store: Arc<TableStore>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), quiver_flight::ServeError>>>,
}

impl TestServer {
    pub async fn start() -> Self {
        Self::start_with(1 << 30, ServerConfig::default()).await
    }

    pub async fn start_with(max_memory: u64, config: ServerConfig) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let store = Arc::new(TableStore::new(max_memory));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(quiver_flight::serve(
            listener,
            Arc::clone(&store),
            config,
            async move {
                let _ = stopped.await;
            },
        ));
        Self {
            addr,
            store,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn uri(&self) -> String {
        format!("grpc+tcp://{}", self.addr)
    }

    /// A channel to the server whose every RPC is bounded by [`RPC_TIMEOUT`].
    pub async fn channel(&self) -> Channel {
        Endpoint::from_shared(format!("http://{}", self.addr))
            .expect("uri")
            .connect_timeout(Duration::from_secs(10))
            .timeout(RPC_TIMEOUT)
            .connect()
            .await
            .expect("connect")
    }

    pub async fn client(&self) -> FlightClient {
        let channel = self.channel().await;
        let inner = FlightServiceClient::new(channel)
            .max_decoding_message_size(1 << 30)
            .max_encoding_message_size(1 << 30);
        FlightClient::new_from_inner(inner)
    }

    pub async fn sql_client(&self) -> FlightSqlServiceClient<Channel> {
        FlightSqlServiceClient::new(self.channel().await)
    }

    /// Asks the server to stop and waits until it has.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(SHUTDOWN_TIMEOUT, task)
                .await
                .expect("the server stops within SHUTDOWN_TIMEOUT")
                .expect("server task")
                .expect("server result");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl TestServer {
    /// Signals shutdown without waiting for it.
    pub fn shutdown_in_background(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The batch of every type, ids from `offset`, as arrow-flight's stock
/// encoder (the client's) sends it unchanged.
pub fn sample(offset: i64, rows: usize) -> RecordBatch {
    quiver_ipc::testing::every_type_for_stock_encoder(offset, rows)
}

pub fn path(name: &str) -> FlightDescriptor {
    FlightDescriptor::new_path(vec![name.to_string()])
}

pub async fn put_with(
    client: &mut FlightClient,
    descriptor: FlightDescriptor,
    options: Option<&str>,
    batches: Vec<RecordBatch>,
) -> Result<serde_json::Value, FlightError> {
    let schema = batches[0].schema();
    let mut builder = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .with_flight_descriptor(Some(descriptor))
        .with_dictionary_handling(DictionaryHandling::Resend);
    if let Some(options) = options {
        builder = builder.with_metadata(Bytes::from(options.to_string()));
    }
    let encoded = builder.build(stream::iter(batches.into_iter().map(Ok)));
    let results = put_messages(client, encoded).await?;
    assert_eq!(results.len(), 1, "one PutResult");
    Ok(serde_json::from_slice(&results[0].app_metadata).expect("PutResult JSON"))
}

/// A DoPut of `messages` as they are, read to its end: the PutResults.
pub async fn put_messages(
    client: &mut FlightClient,
    messages: impl futures::Stream<Item = Result<FlightData, FlightError>> + Send + 'static,
) -> Result<Vec<arrow_flight::PutResult>, FlightError> {
    client.do_put(messages).await?.try_collect().await
}

pub async fn put(
    client: &mut FlightClient,
    name: &str,
    batches: Vec<RecordBatch>,
) -> serde_json::Value {
    put_with(client, path(name), None, batches)
        .await
        .expect("put")
}

pub async fn get_all(
    client: &mut FlightClient,
    name: &str,
) -> Result<Vec<RecordBatch>, FlightError> {
    let info = client.get_flight_info(path(name)).await?;
    let mut out = Vec::new();
    for endpoint in info.endpoint {
        let ticket = endpoint.ticket.expect("ticket");
        let batches: Vec<RecordBatch> = client.do_get(ticket).await?.try_collect().await?;
        out.extend(batches);
    }
    Ok(out)
}

pub fn concat(batches: &[RecordBatch]) -> RecordBatch {
    arrow::compute::concat_batches(&batches[0].schema(), batches).expect("concat")
}

pub fn status(e: FlightError) -> (Code, String) {
    match e {
        FlightError::Tonic(s) => (s.code(), s.message().to_string()),
        other => panic!("expected a status, got {other}"),
    }
}

/// A batch of `rows` copies of `v`.
pub fn uniform(v: i64, rows: usize) -> RecordBatch {
    RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(vec![v; rows])) as ArrayRef)])
        .expect("batch")
}

/// Whether every value of column 0 of `batches` is `v`, and how many there are.
pub fn all_equal(batches: &[RecordBatch], v: i64) -> (bool, usize) {
    let all = concat(batches);
    let col = all
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("ints");
    (col.values().iter().all(|x| *x == v), col.len())
}

/// Bytes the server's DoPut body pool holds (the `stats` action).
pub async fn pool_bytes(client: &mut FlightClient) -> u64 {
    let results: Vec<Bytes> = client
        .do_action(Action::new("stats", ""))
        .await
        .expect("stats")
        .try_collect()
        .await
        .expect("stats");
    let stats: serde_json::Value = serde_json::from_slice(&results[0]).expect("JSON");
    stats["put_buffer_pool_bytes"]
        .as_u64()
        .expect("put_buffer_pool_bytes")
}

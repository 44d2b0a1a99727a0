//! A real quiver Flight server on 127.0.0.1:0 for integration tests.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::Arc;

use arrow_flight::FlightClient;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::sql::client::FlightSqlServiceClient;
use quiver_flight::ServerConfig;
use quiver_store::TableStore;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

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

    pub async fn client(&self) -> FlightClient {
        let channel = Channel::from_shared(format!("http://{}", self.addr))
            .expect("uri")
            .connect()
            .await
            .expect("connect");
        let inner = FlightServiceClient::new(channel)
            .max_decoding_message_size(1 << 30)
            .max_encoding_message_size(1 << 30);
        FlightClient::new_from_inner(inner)
    }

    pub async fn sql_client(&self) -> FlightSqlServiceClient<Channel> {
        let channel = Channel::from_shared(format!("http://{}", self.addr))
            .expect("uri")
            .connect()
            .await
            .expect("connect");
        FlightSqlServiceClient::new(channel)
    }

    /// Asks the server to stop and waits until it has.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("server task").expect("server result");
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

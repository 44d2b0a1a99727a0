//! Running the Flight service: transport settings, binding, graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arrow_flight::flight_service_server::FlightServiceServer;
use std::path::PathBuf;

use quiver_sql::EngineOptions;
use quiver_store::TableStore;
use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use crate::service::ServiceOptions;
use futures::TryStreamExt;

use crate::auth::{AuthLayer, Authenticator};
use crate::cluster::{SingleServer, Topology};
use crate::console::ConsoleEndpoint;
use crate::health::Readiness;
use crate::lingering::{Closes, LINGER, LingeringStream};
use crate::metrics::MetricsEndpoint;
use crate::timeouts::TimeoutLayer;
use crate::tls::TlsConfig;
use crate::wire::DirectLayer;
use crate::{QuiverService, WatchBodyLayer};
use quiver_shm::ShmServer;
use quiver_wire::Coalesced;

/// Default endpoints a table is split over, unless a put chooses: 1.
pub const DEFAULT_PARTITIONS: usize = 1;

/// Default largest gRPC message the server accepts (and sends): 1 GiB.
///
/// pyarrow sends each record batch as one message, however large, so the gRPC
/// default of 4 MiB would refuse ordinary tables.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 1 << 30;

/// Default largest FlightData message DoGet sends: 2 MiB, as arrow-flight's
/// encoder recommends. Larger batches are split into slices.
pub const DEFAULT_MAX_FLIGHT_DATA_SIZE: usize = 2 << 20;

/// Default largest FlightData message DoGet sends to Arrow C++ clients
/// (pyarrow), which take messages of any size: 64 MiB, so that ordinary
/// batches leave whole (`wire::message_size`).
pub const DEFAULT_LARGE_FLIGHT_DATA_SIZE: usize = 64 << 20;

/// Default bytes of freed DoPut bodies kept for reuse: 1 GiB. A body copied
/// into warm memory costs a fraction of one copied into fresh pages
/// (`quiver_wire::body_pool`, docs/performance.md).
pub const DEFAULT_PUT_BUFFER_POOL: usize = 1 << 30;

/// Default HTTP/2 stream window ([`quiver_wire::http2::STREAM_WINDOW`], which
/// quiver's clients offer too).
pub const DEFAULT_STREAM_WINDOW: u32 = quiver_wire::http2::STREAM_WINDOW;
/// Default HTTP/2 connection window ([`quiver_wire::http2::CONNECTION_WINDOW`]).
pub const DEFAULT_CONNECTION_WINDOW: u32 = quiver_wire::http2::CONNECTION_WINDOW;
/// Default largest HTTP/2 frame accepted: 1 MiB. A client's DATA frames are
/// at most this large; with the protocol's minimum, 16 KiB, a 1 GiB put from
/// pyarrow cost the server 0.83 s of CPU in 65,536 frames, with 256 KiB to
/// 4 MiB 0.29-0.37 s (docs/performance.md).
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 1 << 20;

/// Default time RPCs in flight get to finish after shutdown begins: 30 s.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// Default largest number of RPCs one connection may have open at once
/// (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 256;
/// Default time between HTTP/2 PINGs the server sends to see the client is alive.
pub const DEFAULT_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);
/// Default time a PING may go unanswered before the server closes the connection.
pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Default limit on answering a one-message RPC or opening a DoGet: 300 s.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// Default longest wait for the next message of a request stream: 120 s.
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Limits on connections and RPCs (docs/limits.md). `None` means no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// RPCs one connection may have open at once; the server advertises it in
    /// its HTTP/2 SETTINGS, so clients queue the calls past it (and the server
    /// refuses a stream past it with REFUSED_STREAM).
    pub max_concurrent_streams: Option<u32>,
    /// Time between the server's keepalive PINGs.
    pub keepalive_interval: Option<Duration>,
    /// Time a keepalive PING may go unanswered before the connection is closed.
    pub keepalive_timeout: Duration,
    /// Limit on answering a one-message RPC ([`crate::timeouts`]).
    pub request_timeout: Option<Duration>,
    /// Limit on waiting for the next piece of a request stream.
    pub stream_idle_timeout: Option<Duration>,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_concurrent_streams: Some(DEFAULT_MAX_CONCURRENT_STREAMS),
            keepalive_interval: Some(DEFAULT_KEEPALIVE_INTERVAL),
            keepalive_timeout: DEFAULT_KEEPALIVE_TIMEOUT,
            request_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
            stream_idle_timeout: Some(DEFAULT_STREAM_IDLE_TIMEOUT),
        }
    }
}

/// Everything `serve` needs besides the store and the listener.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The URI put in endpoint locations; default `grpc+tcp://` + the bound address.
    pub advertise: Option<String>,
    /// Endpoints per table unless a put chose otherwise.
    pub partitions: usize,
    /// Largest gRPC message received or sent.
    pub max_message_size: usize,
    /// Largest FlightData message DoGet sends.
    pub max_flight_data_size: usize,
    /// Largest FlightData message DoGet sends to Arrow C++ clients (pyarrow).
    pub large_flight_data_size: usize,
    /// Bytes of freed DoPut bodies kept for reuse by later puts; 0 for none.
    pub put_buffer_pool: usize,
    /// How long RPCs in flight may take to finish once shutdown begins; then
    /// the server closes the connections still open.
    pub shutdown_timeout: Duration,
    /// HTTP/2 transport settings.
    pub http2: Http2Config,
    /// Serve DoGet and DoPut through quiver's own wire paths ([`crate::wire`])
    /// rather than arrow-flight's encoder/decoder and tonic's codec.
    pub direct_wire: bool,
    /// The SQL engine's limits.
    pub sql: EngineOptions,
    /// Tables in place, registered before the server accepts connections:
    /// (name, location: a local path or an object store URL of Parquet, CSV
    /// or Arrow IPC files, a directory, prefix or glob of them).
    pub tables: Vec<(String, String)>,
    /// Python functions served over DoExchange (`--functions`), their workers
    /// started before the server serves; `None`: no functions.
    pub functions: Option<quiver_functions::FunctionConfig>,
    /// Limits on connections and RPCs.
    pub limits: ServerLimits,
    /// TLS (and mutual TLS) on the listening port; `None`: plain TCP.
    pub tls: Option<TlsConfig>,
    /// Who may call and what each may do ([`crate::auth`]); `None`: anyone
    /// may do anything.
    pub auth: Option<Arc<Authenticator>>,
    /// The Unix socket of the same-host shared-memory data plane
    /// (`quiver_shm`); `None`: off.
    pub shm_socket: Option<PathBuf>,
    /// Where Prometheus scrapes `/metrics` ([`crate::metrics`]), bound by
    /// the caller (so that it can announce the address); `None`: no metrics.
    pub metrics: Option<Arc<std::net::TcpListener>>,
    /// Where the web console (and `/metrics` too) is served over HTTP/1.1
    /// (`--http-listen`, [`crate::console`]), bound by the caller; with
    /// [`ServerConfig::tls`], over TLS. `None`: no console.
    pub http: Option<Arc<std::net::TcpListener>>,
    /// Where the server's tables live: on it alone (the default), or
    /// across a cluster (`--cluster`, crates/quiver-cluster).
    pub topology: Arc<dyn Topology>,
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A `--table` could not be registered.
    #[error("--table {name}={path}: {source}")]
    Table {
        /// The table's name.
        name: String,
        /// The path given.
        path: String,
        /// What went wrong.
        source: quiver_sql::SqlError,
    },
    /// The function workers could not be started.
    #[error("--functions: {0}")]
    Functions(quiver_functions::FunctionError),
    /// The shared-memory socket could not be opened.
    #[error("--shm-socket {path}: {source}")]
    Shm {
        /// The socket's path.
        path: String,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The metrics endpoint could not be served.
    #[error("--metrics-listen: {0}")]
    Metrics(std::io::Error),
    /// The console could not be served.
    #[error("--http-listen: {0}")]
    Console(std::io::Error),
    /// The transport failed.
    #[error(transparent)]
    Transport(#[from] tonic::transport::Error),
}

/// HTTP/2 flow control and framing, as the server advertises them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Config {
    /// Bytes a client may send on one stream before the server acknowledges.
    pub stream_window: u32,
    /// Bytes a client may send on one connection before the server acknowledges.
    pub connection_window: u32,
    /// Largest HTTP/2 frame the server accepts.
    pub max_frame_size: u32,
}

impl Default for Http2Config {
    fn default() -> Self {
        Self {
            stream_window: DEFAULT_STREAM_WINDOW,
            connection_window: DEFAULT_CONNECTION_WINDOW,
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            advertise: None,
            partitions: DEFAULT_PARTITIONS,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            max_flight_data_size: DEFAULT_MAX_FLIGHT_DATA_SIZE,
            large_flight_data_size: DEFAULT_LARGE_FLIGHT_DATA_SIZE,
            put_buffer_pool: DEFAULT_PUT_BUFFER_POOL,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            http2: Http2Config::default(),
            direct_wire: true,
            sql: EngineOptions::default(),
            tables: Vec::new(),
            limits: ServerLimits::default(),
            tls: None,
            auth: None,
            shm_socket: None,
            metrics: None,
            http: None,
            functions: None,
            topology: Arc::new(SingleServer),
        }
    }
}

/// Flight's location meaning "fetch from the server you asked".
pub const REUSE_CONNECTION: &str = "arrow-flight-reuse-connection://?";

/// The location advertised for a server bound to `addr`.
///
/// An unspecified address (`0.0.0.0`, `::`) says nothing about how clients reach
/// the server, so it advertises Flight's "reuse this connection" location.
pub fn default_location(addr: SocketAddr) -> String {
    if addr.ip().is_unspecified() {
        REUSE_CONNECTION.to_string()
    } else {
        format!("grpc+tcp://{addr}")
    }
}

/// The location a server with `config` bound to `addr` puts in its
/// endpoints (and a cluster node registers): `--advertise`, else the bound
/// address as `grpc+tcp://`, or `grpc+tls://` with TLS.
pub fn advertised_location(config: &ServerConfig, addr: Option<SocketAddr>) -> String {
    if let Some(advertised) = &config.advertise {
        return advertised.clone();
    }
    let location = addr.map_or_else(|| REUSE_CONNECTION.to_string(), default_location);
    match (&config.tls, location.strip_prefix("grpc+tcp://")) {
        (Some(_), Some(rest)) => format!("grpc+tls://{rest}"),
        _ => location,
    }
}

/// Registers the `--table` files.
async fn register_tables(
    service: &QuiverService,
    tables: &[(String, String)],
) -> Result<(), ServeError> {
    for (name, location) in tables {
        service
            .sql_engine()
            .register_location(name, location)
            .await
            .map_err(|source| ServeError::Table {
                name: name.clone(),
                path: location.clone(),
                source,
            })?;
    }
    Ok(())
}

/// Serves Flight on `listener` until `shutdown` completes, then stops accepting
/// connections and lets the RPCs in flight finish, for at most
/// `config.shutdown_timeout`.
pub async fn serve(
    listener: TcpListener,
    store: Arc<TableStore>,
    config: ServerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let location = advertised_location(&config, listener.local_addr().ok());
    let shm = match &config.shm_socket {
        None => None,
        Some(path) => match ShmServer::start(
            path,
            Arc::clone(&store),
            |e| tonic::Status::from(crate::Error::from(e)),
            crate::metrics::record_shm,
        ) {
            Ok(shm) => {
                tracing::info!(location = shm.location(), "shared-memory data plane on");
                Some(Arc::new(shm))
            }
            // Another server on this host (in another network namespace,
            // say) has the socket: serve Flight without shared memory.
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                tracing::warn!(error = %e, "shared-memory data plane off");
                None
            }
            Err(source) => {
                return Err(ServeError::Shm {
                    path: path.display().to_string(),
                    source,
                });
            }
        },
    };
    let functions = config
        .functions
        .clone()
        .map(quiver_functions::FunctionPool::new);
    let service = QuiverService::new(
        store,
        ServiceOptions {
            shm,
            location,
            default_partitions: config.partitions.max(1),
            max_flight_data_size: config.max_flight_data_size,
            large_flight_data_size: config.large_flight_data_size,
            max_message_size: config.max_message_size,
            put_buffer_pool: config.put_buffer_pool,
            sql: config.sql.clone(),
            functions: functions.clone(),
            topology: Arc::clone(&config.topology),
        },
    );
    let metrics = match &config.metrics {
        Some(listener) => Some(
            MetricsEndpoint::from_std(listener)
                .await
                .map_err(ServeError::Metrics)?,
        ),
        None => None,
    };
    let console = match &config.http {
        Some(listener) => Some(
            ConsoleEndpoint::from_std(
                listener,
                service.clone(),
                config.auth.clone(),
                config.tls.as_ref(),
            )
            .map_err(ServeError::Console)?,
        ),
        None => None,
    };
    let (readiness, health) = Readiness::starting().await;
    let direct = config
        .direct_wire
        .then(|| DirectLayer::new(service.clone()));
    let flight = FlightServiceServer::new(service.clone())
        .max_decoding_message_size(config.max_message_size)
        .max_encoding_message_size(config.max_message_size);
    let mut routes = tonic::service::RoutesBuilder::default();
    routes.add_service(flight).add_service(health);
    config.topology.add_services(&mut routes);
    let routes = routes.routes();
    let closes = Closes::default();
    let counted = closes.clone();
    let incoming = TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .map_ok(move |stream| Coalesced::new(LingeringStream::new(stream, counted.clone())));
    let (began, mut beginning) = tokio::sync::watch::channel(false);
    let mut stopping = readiness.clone();
    let signal = async move {
        shutdown.await;
        stopping.stopping().await;
        let _ = began.send(true);
    };
    let mut builder = Server::builder();
    if let Some(tls) = &config.tls {
        builder = builder.tls_config(tls.server_config())?;
    }
    let server = builder
        .initial_stream_window_size(config.http2.stream_window)
        .initial_connection_window_size(config.http2.connection_window)
        .max_frame_size(config.http2.max_frame_size)
        .max_concurrent_streams(config.limits.max_concurrent_streams)
        .http2_keepalive_interval(config.limits.keepalive_interval)
        .http2_keepalive_timeout(Some(config.limits.keepalive_timeout))
        .layer(TimeoutLayer::new(
            config.limits.request_timeout,
            config.limits.stream_idle_timeout,
        ))
        // Inside the time limits: an RPC held while the server starts counts
        // against --request-timeout.
        .layer(readiness.gate())
        .layer(WatchBodyLayer)
        // Before the direct paths: every RPC is authenticated.
        .layer(AuthLayer::new(config.auth.clone(), config.topology.nodes()))
        .layer(tower::util::option_layer(direct))
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, signal);
    let mut server = std::pin::pin!(server);
    // Scraped through the shutdown's grace period too; stopped when the server is.
    let metrics = metrics.map(|endpoint| tokio::spawn(endpoint.serve(service.metric_sources())));
    let console = console.map(|endpoint| tokio::spawn(endpoint.serve()));
    // Startup, while health checks say NOT_SERVING and other RPCs wait.
    tokio::select! {
        result = &mut server => {
            // Shut down (or failed) before it had started.
            return Ok(result?);
        }
        started = async {
            register_tables(&service, &config.tables).await?;
            if let Some(pool) = &functions {
                pool.start().await.map_err(ServeError::Functions)?;
                let status = pool.status();
                tracing::info!(
                    workers = status.alive,
                    functions = pool.registry().functions().len(),
                    "function workers ready"
                );
                let (udfs, skipped) = quiver_functions::sql_functions(pool);
                for udf in udfs {
                    service.sql_engine().register_udf(udf);
                }
                for (function, why) in skipped {
                    tracing::info!(function, why, "function not callable from SQL");
                }
            }
            Ok::<_, ServeError>(())
        } => started?,
    }
    readiness.serving().await;
    tracing::info!("serving");
    let grace = config.shutdown_timeout;
    let deadline = async move {
        if beginning.wait_for(|began| *began).await.is_ok() {
            tokio::time::sleep(grace).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let result = tokio::select! {
        result = server => result,
        () = deadline => {
            tracing::warn!(
                grace_seconds = grace.as_secs_f64(),
                "RPCs still in flight after the shutdown grace period; closing their connections"
            );
            Ok(())
        }
    };
    if let Some(pool) = &functions {
        pool.shutdown().await;
    }
    if let Some(metrics) = metrics {
        metrics.abort();
    }
    if let Some(console) = console {
        console.abort();
    }
    // Let the last connections finish closing, so clients read all they were sent.
    let _ = tokio::time::timeout(LINGER, closes.wait()).await;
    Ok(result?)
}

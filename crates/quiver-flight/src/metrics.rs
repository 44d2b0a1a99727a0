//! Prometheus metrics: the names, what an RPC records when it ends, and the
//! `/metrics` endpoint (`--metrics-listen`) that serves them with the store's
//! state sampled at each scrape.
//!
//! Every crate records through the `metrics` facade (the store its fsyncs,
//! the SQL engine its queries); without `--metrics-listen` no recorder is
//! installed and recording costs a branch. docs/operations.md lists the
//! metrics.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use quiver_store::TableStore;
use tokio::net::TcpListener;

use quiver_shm::ShmServer;
use quiver_wire::BodyPool;

/// RPCs finished, by `method` and `code` (gRPC's code name; a response
/// stream the client dropped before its end counts as `Canceled`). The
/// shared-memory data plane's requests count as methods `ShmGet` and `ShmPut`.
pub const RPCS: &str = "quiver_rpcs_total";
/// RPC duration, by `method`: from the request to the end of the response.
pub const RPC_SECONDS: &str = "quiver_rpc_duration_seconds";
/// Arrow bytes received (DoPut, DoExchange, ShmPut) and sent (the rest), by
/// `method` and `direction`.
pub const BYTES: &str = "quiver_bytes_total";
/// Rows received and sent, by `method` and `direction`.
pub const ROWS: &str = "quiver_rows_total";
/// Requests refused by a limit, by `limit` (the error's kind:
/// `MEMORY_LIMIT`, `MESSAGE_TOO_LARGE`, `DEADLINE_EXCEEDED`, ...).
pub const REJECTED: &str = "quiver_rejected_requests_total";
/// Tables stored.
pub const TABLES: &str = "quiver_tables";
/// Rows stored, over all tables.
pub const STORED_ROWS: &str = "quiver_stored_rows";
/// Arrow bytes stored, over all tables.
pub const STORED_BYTES: &str = "quiver_stored_bytes";
/// Bytes charged to the memory pool (stored tables and puts in flight).
pub const MEMORY_USED: &str = "quiver_memory_used_bytes";
/// The memory pool's limit (`--max-memory`).
pub const MEMORY_LIMIT: &str = "quiver_memory_limit_bytes";
/// Bytes of freed DoPut bodies kept for reuse (`--put-buffer-pool`).
pub const PUT_BUFFER_POOL: &str = "quiver_put_buffer_pool_bytes";
/// Shared-memory connections open.
pub const SHM_CONNECTIONS: &str = "quiver_shm_connections";
/// Shared-memory tickets issued and not yet used or expired.
pub const SHM_GRANTS: &str = "quiver_shm_grants";
/// Seconds since the server started.
pub const UPTIME: &str = "quiver_uptime_seconds";
/// Always 1, with the server's `version` as a label.
pub const BUILD_INFO: &str = "quiver_build_info";

/// Histogram buckets of every `*_seconds` metric: 100 µs to 5 min.
const SECONDS_BUCKETS: [f64; 16] = [
    0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
    300.0,
];

/// How often histograms are compacted when nobody scrapes.
const UPKEEP: Duration = Duration::from_secs(5);

/// Records what one RPC did, when it ends.
pub(crate) fn record_rpc(
    method: &'static str,
    code: tonic::Code,
    seconds: f64,
    rows: u64,
    bytes: u64,
) {
    counter!(RPCS, "method" => method, "code" => code_name(code)).increment(1);
    histogram!(RPC_SECONDS, "method" => method).record(seconds);
    if rows > 0 || bytes > 0 {
        let direction = match method {
            "DoPut" | "DoExchange" | "ShmPut" => "received",
            _ => "sent",
        };
        counter!(BYTES, "method" => method, "direction" => direction).increment(bytes);
        counter!(ROWS, "method" => method, "direction" => direction).increment(rows);
    }
}

/// Records a request the shared-memory data plane finished.
pub(crate) fn record_shm(finished: quiver_shm::Finished) {
    record_rpc(
        finished.request,
        finished.code,
        finished.seconds,
        finished.rows,
        finished.bytes,
    );
}

/// Records a request refused by a limit: an error whose code says a resource
/// ran out or a time limit passed. Its kind names the limit (`MEMORY_LIMIT`,
/// `IDLE_TIMEOUT`, ...: docs/protocol.md).
pub(crate) fn record_rejection(code: tonic::Code, kind: &'static str) {
    if matches!(
        code,
        tonic::Code::ResourceExhausted | tonic::Code::DeadlineExceeded
    ) {
        counter!(REJECTED, "limit" => kind).increment(1);
    }
}

/// gRPC's name of `code`, as grpc-go's metrics label it (`NotFound`).
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// The process's Prometheus recorder, installed by the first server that
/// exports metrics (the facade takes one recorder per process; servers in
/// one process, as in tests, share it).
pub(crate) fn recorder() -> Result<&'static PrometheusHandle, String> {
    static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS_BUCKETS)
                .map_err(|e| format!("metrics buckets: {e}"))?
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder)
                .map_err(|e| format!("another metrics recorder is installed: {e}"))?;
            describe();
            Ok(handle)
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(RPCS, "RPCs finished, by method and gRPC status code");
    describe_histogram!(RPC_SECONDS, Unit::Seconds, "RPC duration, by method");
    describe_counter!(BYTES, Unit::Bytes, "Arrow bytes received and sent");
    describe_counter!(ROWS, "Rows received and sent");
    describe_counter!(
        REJECTED,
        "Requests refused by a limit, by the limit's error kind"
    );
    describe_gauge!(TABLES, "Tables stored");
    describe_gauge!(STORED_ROWS, "Rows stored, over all tables");
    describe_gauge!(STORED_BYTES, Unit::Bytes, "Arrow bytes stored");
    describe_gauge!(MEMORY_USED, Unit::Bytes, "Bytes charged to the memory pool");
    describe_gauge!(MEMORY_LIMIT, Unit::Bytes, "The memory pool's limit");
    describe_gauge!(
        PUT_BUFFER_POOL,
        Unit::Bytes,
        "Freed DoPut bodies kept for reuse"
    );
    describe_gauge!(SHM_CONNECTIONS, "Shared-memory connections open");
    describe_gauge!(SHM_GRANTS, "Shared-memory tickets outstanding");
    describe_gauge!(UPTIME, Unit::Seconds, "Seconds since the server started");
    describe_gauge!(BUILD_INFO, "Always 1; the version is a label");
    quiver_store::metrics::describe();
    quiver_sql::metrics::describe();
    quiver_objects::metrics::describe();
}

/// What the gauges are read from at each scrape.
#[derive(Debug, Clone)]
pub(crate) struct Sources {
    pub(crate) store: Arc<TableStore>,
    pub(crate) body_pool: BodyPool,
    pub(crate) shm: Option<Arc<ShmServer>>,
    pub(crate) started: std::time::Instant,
}

impl Sources {
    /// The store's state: tables, rows, bytes, memory.
    pub(crate) fn store_stats(&self) -> quiver_store::StoreStats {
        self.store.stats()
    }

    /// Sets every gauge from the state it reports.
    fn sample(&self) {
        let s = self.store.stats();
        gauge!(TABLES).set(s.tables as f64);
        gauge!(STORED_ROWS).set(s.rows as f64);
        gauge!(STORED_BYTES).set(s.bytes as f64);
        gauge!(MEMORY_USED).set(s.memory_used as f64);
        gauge!(MEMORY_LIMIT).set(s.memory_limit as f64);
        gauge!(PUT_BUFFER_POOL).set(self.body_pool.stats().idle_bytes as f64);
        let (connections, grants) = self
            .shm
            .as_ref()
            .map_or((0, 0), |shm| (shm.connections(), shm.grants()));
        gauge!(SHM_CONNECTIONS).set(connections as f64);
        gauge!(SHM_GRANTS).set(grants as f64);
        gauge!(UPTIME).set(self.started.elapsed().as_secs_f64());
        gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    }
}

/// The `/metrics` endpoint, bound.
#[derive(Debug)]
pub(crate) struct MetricsEndpoint {
    listener: TcpListener,
    handle: &'static PrometheusHandle,
}

impl MetricsEndpoint {
    /// Serves on (a duplicate of) `listener`, installing the recorder.
    pub(crate) async fn from_std(listener: &std::net::TcpListener) -> std::io::Result<Self> {
        let handle = recorder().map_err(std::io::Error::other)?;
        let listener = listener.try_clone()?;
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        Ok(Self { listener, handle })
    }

    /// Serves `GET /metrics` until dropped (the server aborts its task).
    pub(crate) async fn serve(self, sources: Sources) {
        let handle = self.handle;
        let upkeep = upkeep(handle);
        let accept = async {
            loop {
                let stream = match self.listener.accept().await {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // EMFILE and the like: wait rather than spin.
                        tracing::warn!(error = %e, "metrics: cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let sources = sources.clone();
                let service = service_fn(move |request| {
                    let response = respond(&request, handle, &sources);
                    std::future::ready(Ok::<_, std::convert::Infallible>(response))
                });
                tokio::spawn(async move {
                    let connection = hyper::server::conn::http1::Builder::new()
                        .timer(hyper_util::rt::TokioTimer::new())
                        .header_read_timeout(Duration::from_secs(10))
                        .serve_connection(TokioIo::new(stream), service);
                    if let Err(e) = connection.await {
                        tracing::debug!(error = %e, "metrics: connection ended");
                    }
                });
            }
        };
        tokio::select! {
            () = accept => {}
            () = upkeep => {}
        }
    }
}

/// Compacts the recorder's histograms every [`UPKEEP`], forever: what an
/// endpoint that exports the metrics runs beside its listener.
pub(crate) async fn upkeep(handle: &PrometheusHandle) {
    loop {
        tokio::time::sleep(UPKEEP).await;
        handle.run_upkeep();
    }
}

/// The metrics in Prometheus' text format, the gauges sampled first.
pub(crate) fn render(handle: &PrometheusHandle, sources: &Sources) -> String {
    sources.sample();
    handle.render()
}

/// Serves `GET /metrics` (any other path is not found).
pub(crate) fn respond<B>(
    request: &http::Request<B>,
    handle: &PrometheusHandle,
    sources: &Sources,
) -> http::Response<Full<Bytes>> {
    let reply = |status: http::StatusCode, body: String| {
        let mut response = http::Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response
    };
    if request.uri().path() != "/metrics" {
        return reply(
            http::StatusCode::NOT_FOUND,
            "quiver serves its metrics at /metrics\n".into(),
        );
    }
    if request.method() != http::Method::GET && request.method() != http::Method::HEAD {
        return reply(
            http::StatusCode::METHOD_NOT_ALLOWED,
            "GET /metrics\n".into(),
        );
    }
    let mut response = reply(http::StatusCode::OK, render(handle, sources));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

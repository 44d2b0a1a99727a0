//! `quiver serve`'s flags, in blocks that each become one library
//! configuration: [`Http2Args`] an [`Http2Config`], [`LimitArgs`]
//! [`ServerLimits`], [`TlsArgs`] a [`TlsConfig`], [`AuthArgs`] an
//! [`Authenticator`], [`SqlArgs`] [`EngineOptions`] and [`StoreArgs`] a
//! [`TableStore`]. Defaults are the libraries' constants, spelled nowhere else.
//!
//! Every flag has a `QUIVER_...` environment variable but `--table` and
//! `--functions`, which are repeatable: one variable could not hold a list of tables without a
//! separator of its own, and paths may contain any separator; and
//! `--print-config`, an action. (`--sql-setting` is repeatable too, and its
//! variable takes several separated by commas: no setting's value has one.) Every setting can also come from the file
//! `--config` names ([`super::config_file`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use quiver_flight::TlsConfig;
use quiver_flight::auth::{Authenticator, DEFAULT_TOKEN_TTL, TokenSigner, UsersFile};
use quiver_flight::server::{self, Http2Config, ServerConfig, ServerLimits};
use quiver_functions::FunctionConfig;
use quiver_sql::{
    CacheSettings, DEFAULT_CACHE_SIZE, DEFAULT_QUERY_MEMORY_LIMIT, DEFAULT_QUERY_TIMEOUT,
    EngineOptions, ObjectStoreSettings, Setting,
};
use quiver_store::{DurableOptions, Fsync, TableLimits, TableStore};

use crate::size::{ByteSize, machine_memory};

/// Why a flag's value cannot be used.
type ArgResult<T> = Result<T, Box<dyn std::error::Error>>;

/// `--listen`'s default.
const DEFAULT_LISTEN: &str = "127.0.0.1:8815";

/// Memory for stored tables when neither `--max-memory` nor /proc/meminfo
/// says: 4 GiB.
const FALLBACK_MAX_MEMORY: u64 = 4 << 30;

/// `quiver serve`: the flags of the server itself, and the blocks of the
/// libraries it configures.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on (HOST:PORT; port 0 picks a free port).
    #[arg(long, env = "QUIVER_LISTEN", default_value = DEFAULT_LISTEN)]
    pub(crate) listen: SocketAddr,

    /// URI clients are told to fetch from (endpoint locations). Default:
    /// grpc+tcp:// and the bound address; for 0.0.0.0 or [::], Flight's
    /// "reuse this connection" location.
    #[arg(long, env = "QUIVER_ADVERTISE")]
    pub(crate) advertise: Option<String>,

    /// Endpoints each table is split over for parallel reads, unless a put
    /// chooses its own.
    #[arg(long, env = "QUIVER_PARTITIONS",
          default_value_t = server::DEFAULT_PARTITIONS as u32,
          value_parser = clap::value_parser!(u32).range(1..=quiver_flight::MAX_PARTITIONS as i64))]
    pub(crate) partitions: u32,

    /// Largest gRPC message accepted or sent. pyarrow sends a whole record
    /// batch as one message.
    #[arg(long, env = "QUIVER_MAX_MESSAGE_SIZE",
          default_value_t = ByteSize(server::DEFAULT_MAX_MESSAGE_SIZE as u64))]
    pub(crate) max_message_size: ByteSize,

    /// Largest FlightData message DoGet sends; larger batches are split.
    /// tonic (arrow-rs) and grpc-go clients refuse messages over 4 MiB by default.
    #[arg(long, env = "QUIVER_MAX_FLIGHT_DATA_SIZE",
          default_value_t = ByteSize(server::DEFAULT_MAX_FLIGHT_DATA_SIZE as u64))]
    pub(crate) max_flight_data_size: ByteSize,

    /// Largest FlightData message DoGet sends to Arrow C++ Flight clients
    /// (pyarrow; told by the gRPC C++ token in their user-agent), which take
    /// messages of any size: batches up to this size leave whole. Set it to
    /// --max-flight-data-size to split for every client alike.
    #[arg(long, env = "QUIVER_LARGE_FLIGHT_DATA_SIZE",
          default_value_t = ByteSize(server::DEFAULT_LARGE_FLIGHT_DATA_SIZE as u64))]
    pub(crate) large_flight_data_size: ByteSize,

    /// Memory of replaced and deleted tables kept, for up to 10 s, for the
    /// bodies of later puts: a put into warm memory skips the kernel's zeroing
    /// of fresh pages. 0 turns it off.
    #[arg(long, env = "QUIVER_PUT_BUFFER_POOL",
          default_value_t = ByteSize(server::DEFAULT_PUT_BUFFER_POOL as u64))]
    pub(crate) put_buffer_pool: ByteSize,

    /// Seconds RPCs in flight may take to finish after SIGINT/SIGTERM; then the
    /// connections still open are closed.
    #[arg(long, env = "QUIVER_SHUTDOWN_TIMEOUT",
          default_value_t = server::DEFAULT_SHUTDOWN_TIMEOUT.as_secs_f64())]
    pub(crate) shutdown_timeout: f64,

    /// How DoGet and DoPut meet the wire: `direct` sends Arrow buffers to the
    /// socket by reference and copies each received body once, into aligned
    /// memory; `stock` uses arrow-flight's encoder/decoder and tonic's codec
    /// (two copies per body each way). For comparisons; see docs/performance.md.
    #[arg(long, env = "QUIVER_WIRE_PATH", value_enum, default_value_t = WirePath::Direct)]
    pub(crate) wire_path: WirePath,

    /// Log filter (tracing's EnvFilter syntax), e.g. info, quiver_flight=debug.
    #[arg(long, env = "QUIVER_LOG", default_value = "info")]
    pub(crate) log: String,

    /// Log lines as `text` for people or `json` for log shippers (one JSON
    /// object per line, the same fields).
    #[arg(long, env = "QUIVER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,

    /// Serve Prometheus metrics at http://HOST:PORT/metrics (docs/operations.md).
    /// Default: off.
    #[arg(long, env = "QUIVER_METRICS_LISTEN")]
    pub(crate) metrics_listen: Option<SocketAddr>,

    /// Serve the web console (tables, SQL, live plots) and its JSON API at
    /// http://HOST:PORT/, and Prometheus metrics at /metrics, with the same
    /// users, roles and TLS as Flight (docs/console.md). Default: off.
    #[arg(long, env = "QUIVER_HTTP_LISTEN")]
    pub(crate) http_listen: Option<SocketAddr>,

    /// Read settings from this TOML file: its keys are these flags' names
    /// (`max-memory = "8GiB"`); flags and QUIVER_ variables override it.
    #[arg(long, env = "QUIVER_CONFIG")]
    pub(crate) config: Option<PathBuf>,

    /// Print the settings in force, and where each came from, as a config
    /// file; then exit.
    #[arg(long)]
    pub(crate) print_config: bool,

    /// Unix socket of the same-host shared-memory data plane (docs/shm.md):
    /// a path, `auto` ($XDG_RUNTIME_DIR, else the temporary directory,
    /// `/quiver-PORT.sock`) or `off`.
    #[arg(long, env = "QUIVER_SHM_SOCKET", default_value = "auto")]
    pub(crate) shm_socket: String,

    /// Where tables are kept and how much they may hold.
    #[command(flatten)]
    pub(crate) store: StoreArgs,

    /// HTTP/2 flow control and framing.
    #[command(flatten)]
    pub(crate) http2: Http2Args,

    /// Flight SQL.
    #[command(flatten)]
    pub(crate) sql: SqlArgs,

    /// Limits on connections and RPCs.
    #[command(flatten)]
    pub(crate) limits: LimitArgs,

    /// TLS on the listening port.
    #[command(flatten)]
    pub(crate) tls: TlsArgs,

    /// Users, roles and tokens.
    #[command(flatten)]
    pub(crate) auth: AuthArgs,

    /// Python functions served over DoExchange and in SQL.
    #[command(flatten)]
    pub(crate) functions: FunctionArgs,

    /// Several nodes: membership and catalog in etcd.
    #[command(flatten)]
    pub(crate) cluster: super::cluster_args::ClusterArgs,
}

impl ServeArgs {
    /// The server's configuration, for a listener bound to `addr`. Reads the
    /// TLS, users and token-secret files.
    pub(crate) fn server_config(&self, addr: SocketAddr) -> ArgResult<ServerConfig> {
        let tls = self.tls.to_config()?;
        let auth = self.auth.to_config()?;
        Ok(ServerConfig {
            advertise: self.advertise.clone(),
            partitions: self.partitions as usize,
            max_message_size: size(self.max_message_size),
            max_flight_data_size: size(self.max_flight_data_size),
            large_flight_data_size: size(self.large_flight_data_size),
            put_buffer_pool: size(self.put_buffer_pool),
            shutdown_timeout: duration("--shutdown-timeout", self.shutdown_timeout)?,
            direct_wire: self.wire_path == WirePath::Direct,
            sql: self.sql.to_config()?,
            tables: self.sql.tables.clone(),
            tls,
            auth,
            shm_socket: shm_socket(&self.shm_socket, addr.port()),
            // Bound by `serve::run`, which announces them.
            metrics: None,
            http: None,
            http2: self.http2.to_config()?,
            limits: self.limits.to_config()?,
            functions: self.functions.to_config()?,
            // A cluster's is joined by `serve::run` once the address is known.
            topology: std::sync::Arc::new(quiver_flight::cluster::SingleServer),
        })
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// `2026-11-25T09:00:00Z  INFO quiver_flight::rpc_log: ok rpc="DoGet" ...`
    Text,
    /// `{"timestamp":"...","level":"INFO","message":"ok","rpc":"DoGet",...}`
    Json,
}

/// How DoGet and DoPut meet the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum WirePath {
    /// quiver's own: buffers by reference out, one aligned copy in.
    Direct,
    /// arrow-flight's encoder and decoder over tonic's prost codec.
    Stock,
}

/// Where tables are kept and how much they may hold: a [`TableStore`].
#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// Memory for stored tables (e.g. 8GiB, 512MiB, 1000000). Default: half
    /// the machine's RAM.
    #[arg(long, env = "QUIVER_MAX_MEMORY")]
    pub(crate) max_memory: Option<ByteSize>,

    /// Keep tables durable in this directory (created if missing): every put,
    /// append, rename and delete is on disk before it is acknowledged, and a
    /// restart reads the tables back. Without it, tables live in memory only.
    /// See docs/durability.md.
    #[arg(long, env = "QUIVER_DATA_DIR")]
    pub(crate) data_dir: Option<PathBuf>,

    /// With --data-dir, when writes are synced: `always` fsyncs each write's
    /// files and directory before acknowledging it (survives power loss);
    /// `never` leaves that to the OS (survives a server crash, not an OS crash).
    #[arg(long, env = "QUIVER_FSYNC", value_enum,
          default_value_t = FsyncArg::from(Fsync::default()))]
    pub(crate) fsync: FsyncArg,

    /// Rows one table may hold; a put, append or SQL write past it fails with
    /// RESOURCE_EXHAUSTED and the table keeps what it had. Default: no limit.
    #[arg(long, env = "QUIVER_MAX_TABLE_ROWS")]
    pub(crate) max_table_rows: Option<u64>,

    /// Bytes one table may hold (e.g. 1GiB). Default: no limit (--max-memory
    /// still bounds all tables together).
    #[arg(long, env = "QUIVER_MAX_TABLE_BYTES")]
    pub(crate) max_table_bytes: Option<ByteSize>,

    /// Rows all tables together may hold. Default: no limit.
    #[arg(long, env = "QUIVER_MAX_ROWS")]
    pub(crate) max_rows: Option<u64>,
}

impl StoreArgs {
    /// Bytes the tables may hold: `--max-memory`, else half the machine's RAM.
    pub(crate) fn max_memory(&self) -> u64 {
        self.max_memory
            .map(|s| s.0)
            .or_else(|| machine_memory().map(|m| m / 2))
            .unwrap_or(FALLBACK_MAX_MEMORY)
    }

    /// The data directory and its sync policy, if the tables are durable.
    pub(crate) fn durable(&self) -> Option<DurableOptions> {
        self.data_dir.as_ref().map(|dir| DurableOptions {
            dir: dir.clone(),
            fsync: self.fsync.into(),
        })
    }

    /// The bounds on table sizes.
    pub(crate) fn table_limits(&self) -> TableLimits {
        let unlimited = TableLimits::UNLIMITED;
        TableLimits {
            max_table_rows: self.max_table_rows.unwrap_or(unlimited.max_table_rows),
            max_table_bytes: self
                .max_table_bytes
                .map_or(unlimited.max_table_bytes, |b| b.0),
            max_rows: self.max_rows.unwrap_or(unlimited.max_rows),
        }
    }

    /// The store, holding at most `max_memory` bytes: empty, or read back
    /// from the data directory.
    pub(crate) fn open(&self, max_memory: u64) -> ArgResult<TableStore> {
        let store = match self.durable() {
            None => TableStore::new(max_memory),
            Some(options) => {
                TableStore::open(&options, max_memory).map_err(|e| format!("--data-dir: {e}"))?
            }
        };
        Ok(store.with_limits(self.table_limits()))
    }
}

/// When a durable server syncs writes to disk ([`Fsync`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum FsyncArg {
    /// Before acknowledging every write.
    Always,
    /// Never; the operating system writes back in its own time.
    Never,
}

impl From<FsyncArg> for Fsync {
    fn from(arg: FsyncArg) -> Self {
        match arg {
            FsyncArg::Always => Self::Always,
            FsyncArg::Never => Self::Never,
        }
    }
}

impl From<Fsync> for FsyncArg {
    fn from(fsync: Fsync) -> Self {
        match fsync {
            Fsync::Always => Self::Always,
            Fsync::Never => Self::Never,
        }
    }
}

/// HTTP/2 flow control and framing: an [`Http2Config`].
#[derive(Debug, Args)]
pub(crate) struct Http2Args {
    /// HTTP/2 stream flow-control window the server advertises.
    #[arg(long, env = "QUIVER_H2_STREAM_WINDOW",
          default_value_t = ByteSize(server::DEFAULT_STREAM_WINDOW.into()))]
    pub(crate) h2_stream_window: ByteSize,

    /// HTTP/2 connection flow-control window the server advertises.
    #[arg(long, env = "QUIVER_H2_CONNECTION_WINDOW",
          default_value_t = ByteSize(server::DEFAULT_CONNECTION_WINDOW.into()))]
    pub(crate) h2_connection_window: ByteSize,

    /// Largest HTTP/2 frame the server accepts (16KiB to 16MiB-1).
    #[arg(long, env = "QUIVER_H2_MAX_FRAME_SIZE",
          default_value_t = ByteSize(server::DEFAULT_MAX_FRAME_SIZE.into()))]
    pub(crate) h2_max_frame_size: ByteSize,
}

impl Http2Args {
    /// The HTTP/2 settings; fails on a size HTTP/2 cannot advertise.
    pub(crate) fn to_config(&self) -> Result<Http2Config, String> {
        Ok(Http2Config {
            stream_window: window("--h2-stream-window", self.h2_stream_window)?,
            connection_window: window("--h2-connection-window", self.h2_connection_window)?,
            max_frame_size: frame_size(self.h2_max_frame_size)?,
        })
    }
}

/// An HTTP/2 window: at most 2^31-1 bytes.
fn window(flag: &str, size: ByteSize) -> Result<u32, String> {
    u32::try_from(size.0)
        .ok()
        .filter(|w| *w < 1 << 31)
        .ok_or_else(|| format!("{flag} {size}: an HTTP/2 window is at most 2 GiB - 1"))
}

/// An HTTP/2 frame size: 16 KiB to 16 MiB - 1.
fn frame_size(size: ByteSize) -> Result<u32, String> {
    u32::try_from(size.0)
        .ok()
        .filter(|f| (1 << 14..1 << 24).contains(f))
        .ok_or_else(|| format!("--h2-max-frame-size {size}: must be between 16 KiB and 16 MiB - 1"))
}

/// Limits on connections and RPCs: [`ServerLimits`] (docs/limits.md).
#[derive(Debug, Args)]
pub(crate) struct LimitArgs {
    /// RPCs one client connection may have open at once (HTTP/2
    /// SETTINGS_MAX_CONCURRENT_STREAMS); clients queue the calls past it.
    #[arg(long, env = "QUIVER_MAX_CONCURRENT_STREAMS",
          default_value_t = server::DEFAULT_MAX_CONCURRENT_STREAMS,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_concurrent_streams: u32,

    /// Seconds between the HTTP/2 PINGs that check a client is alive (0: none).
    #[arg(long, env = "QUIVER_H2_KEEPALIVE_INTERVAL",
          default_value_t = server::DEFAULT_KEEPALIVE_INTERVAL.as_secs_f64())]
    pub(crate) h2_keepalive_interval: f64,

    /// Seconds a PING may go unanswered before the connection is closed.
    #[arg(long, env = "QUIVER_H2_KEEPALIVE_TIMEOUT",
          default_value_t = server::DEFAULT_KEEPALIVE_TIMEOUT.as_secs_f64())]
    pub(crate) h2_keepalive_timeout: f64,

    /// Seconds to answer a one-message RPC (GetFlightInfo, DoAction, ...) or to
    /// start a DoGet's stream; the stream itself is not cut (0: no limit).
    #[arg(long, env = "QUIVER_REQUEST_TIMEOUT",
          default_value_t = server::DEFAULT_REQUEST_TIMEOUT.as_secs_f64())]
    pub(crate) request_timeout: f64,

    /// Seconds the server waits for the next message of a request stream (a
    /// DoPut's next batch) before failing it; nothing is stored (0: no limit).
    #[arg(long, env = "QUIVER_STREAM_IDLE_TIMEOUT",
          default_value_t = server::DEFAULT_STREAM_IDLE_TIMEOUT.as_secs_f64())]
    pub(crate) stream_idle_timeout: f64,
}

impl LimitArgs {
    /// The limits; fails on a number of seconds that is no duration.
    pub(crate) fn to_config(&self) -> Result<ServerLimits, String> {
        Ok(ServerLimits {
            max_concurrent_streams: Some(self.max_concurrent_streams),
            keepalive_interval: optional_duration(
                "--h2-keepalive-interval",
                self.h2_keepalive_interval,
            )?,
            keepalive_timeout: duration("--h2-keepalive-timeout", self.h2_keepalive_timeout)?,
            request_timeout: optional_duration("--request-timeout", self.request_timeout)?,
            stream_idle_timeout: optional_duration(
                "--stream-idle-timeout",
                self.stream_idle_timeout,
            )?,
        })
    }
}

/// Python functions (docs/functions.md): a [`FunctionConfig`].
#[derive(Debug, Args)]
pub(crate) struct FunctionArgs {
    /// A Python module of `@quiver.functions.function`s to serve: a `.py`
    /// path or an importable module name. Repeatable (no environment
    /// variable). Without it no worker runs.
    #[arg(long = "functions", value_name = "MODULE")]
    pub(crate) modules: Vec<String>,

    /// Python worker processes running the functions [default: the cores].
    #[arg(long, env = "QUIVER_FUNCTION_WORKERS",
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) function_workers: Option<u32>,

    /// The Python interpreter the workers run; it must import the `quiver`
    /// package of this server's version.
    #[arg(long, env = "QUIVER_FUNCTION_PYTHON", default_value = "python3")]
    pub(crate) function_python: PathBuf,

    /// Seconds one batch may run in a function before its worker is killed
    /// and replaced (the call fails with DEADLINE_EXCEEDED); 0 for no limit.
    #[arg(long, env = "QUIVER_FUNCTION_TIMEOUT",
          default_value_t = quiver_functions::DEFAULT_TIMEOUT.as_secs_f64())]
    pub(crate) function_timeout: f64,

    /// Seconds a worker may take to import the modules; the server does not
    /// start if one takes longer.
    #[arg(long, env = "QUIVER_FUNCTION_STARTUP_TIMEOUT",
          default_value_t = quiver_functions::DEFAULT_STARTUP_TIMEOUT.as_secs_f64())]
    pub(crate) function_startup_timeout: f64,
}

impl FunctionArgs {
    fn to_config(&self) -> ArgResult<Option<FunctionConfig>> {
        if self.modules.is_empty() {
            return Ok(None);
        }
        let workers = match self.function_workers {
            Some(n) => n as usize,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        Ok(Some(FunctionConfig {
            modules: self.modules.clone(),
            workers,
            python: self.function_python.clone(),
            timeout: optional_duration("--function-timeout", self.function_timeout)?,
            startup_timeout: duration("--function-startup-timeout", self.function_startup_timeout)?,
        }))
    }
}

/// Flight SQL: [`EngineOptions`], and the tables over files.
#[derive(Debug, Args)]
pub(crate) struct SqlArgs {
    /// A table in place, queried by SQL where its files lie: NAME=LOCATION,
    /// where LOCATION is a Parquet, CSV (with a header row) or Arrow IPC
    /// file, a directory of them, or a glob, on this machine or in object
    /// storage (s3://bucket/trips/, s3://bucket/trips/*.parquet, gs://...,
    /// az://...); the format comes from the extension, and `key=value`
    /// directories are partition columns. Repeatable (no environment
    /// variable).
    #[arg(long = "table", value_name = "NAME=LOCATION", value_parser = parse_table)]
    pub(crate) tables: Vec<(String, String)>,

    /// How one S3 bucket is reached, over the AWS environment
    /// (AWS_ACCESS_KEY_ID, AWS_REGION, AWS_ENDPOINT_URL, ...) and
    /// ~/.aws: BUCKET.KEY=VALUE, KEY one of endpoint, region, path-style,
    /// credentials-file, profile (e.g. lake.endpoint=http://127.0.0.1:8333).
    /// Repeatable; in the config file, an `[s3.BUCKET]` block.
    #[arg(long = "s3", env = "QUIVER_S3", value_name = "BUCKET.KEY=VALUE",
          value_delimiter = ',', value_parser = parse_bucket_setting)]
    pub(crate) s3: Vec<String>,

    /// Seconds the file list of a table in place is kept before it is listed
    /// again. Default: listed at every query, so files that arrive or are
    /// removed are seen by the next one.
    #[arg(long, env = "QUIVER_LIST_TTL", value_name = "SECONDS")]
    pub(crate) list_ttl: Option<f64>,

    /// Keep the byte ranges read from object storage in this directory
    /// (the cache's own: what is there at start is removed), rather than in
    /// memory. Each range is kept under its object's version (ETag), so a
    /// rewritten object is read anew.
    #[arg(long, env = "QUIVER_CACHE_DIR")]
    pub(crate) cache_dir: Option<PathBuf>,

    /// Bytes of ranges read from object storage kept (in memory, or in
    /// --cache-dir); the least recently used go first. 0 turns the cache
    /// off.
    #[arg(long, env = "QUIVER_CACHE_SIZE",
          default_value_t = ByteSize(DEFAULT_CACHE_SIZE))]
    pub(crate) cache_size: ByteSize,

    /// Memory one SQL query may use in sorts, joins and aggregates; past it
    /// the query fails with RESOURCE_EXHAUSTED.
    #[arg(long, env = "QUIVER_QUERY_MEMORY_LIMIT",
          default_value_t = ByteSize(DEFAULT_QUERY_MEMORY_LIMIT as u64))]
    pub(crate) query_memory_limit: ByteSize,

    /// Seconds a SQL query may run, from planning to its last batch.
    #[arg(long, env = "QUIVER_QUERY_TIMEOUT",
          default_value_t = DEFAULT_QUERY_TIMEOUT.as_secs_f64())]
    pub(crate) query_timeout: f64,

    /// A DataFusion setting for every query, over quiver's own choices:
    /// KEY=VALUE as in datafusion.execution.parquet.pushdown_filters=false
    /// (the `datafusion.` may be left out). Repeatable; the variable takes
    /// several, separated by commas. EXPLAIN shows the settings that shape
    /// plans.
    #[arg(long = "sql-setting", env = "QUIVER_SQL_SETTING", value_name = "KEY=VALUE",
          value_delimiter = ',', value_parser = parse_setting)]
    pub(crate) settings: Vec<Setting>,
}

impl SqlArgs {
    /// The engine's limits; fails on a number of seconds that is no duration.
    pub(crate) fn to_config(&self) -> Result<EngineOptions, String> {
        Ok(EngineOptions {
            query_memory_limit: size(self.query_memory_limit),
            query_timeout: duration("--query-timeout", self.query_timeout)?,
            settings: self.settings.clone(),
            object_stores: self.object_store_settings()?,
            cache: self.cache_settings()?,
            list_ttl: self
                .list_ttl
                .map(|seconds| duration("--list-ttl", seconds))
                .transpose()?,
            ..EngineOptions::default()
        })
    }

    /// The cache of ranges; its directory is made (and must be writable)
    /// now, so that a bad one stops the start.
    fn cache_settings(&self) -> Result<CacheSettings, String> {
        if let Some(dir) = &self.cache_dir {
            let probe = dir.join(".quiver-cache-probe");
            std::fs::create_dir_all(dir)
                .and_then(|()| std::fs::write(&probe, b""))
                .and_then(|()| std::fs::remove_file(&probe))
                .map_err(|e| format!("--cache-dir {}: {e}", dir.display()))?;
        }
        Ok(CacheSettings {
            dir: self.cache_dir.clone(),
            size: self.cache_size.0,
        })
    }

    /// The buckets' settings of `--s3`.
    fn object_store_settings(&self) -> Result<ObjectStoreSettings, String> {
        let mut settings = ObjectStoreSettings::default();
        for setting in &self.s3 {
            settings
                .apply(setting)
                .map_err(|e| format!("--s3 {setting}: {e}"))?;
        }
        Ok(settings)
    }
}

/// `BUCKET.KEY=VALUE` of `--s3`, checked as the engine will take it.
fn parse_bucket_setting(value: &str) -> Result<String, String> {
    ObjectStoreSettings::default().apply(value)?;
    Ok(value.to_string())
}

/// `KEY=VALUE` of `--sql-setting`, checked against DataFusion's settings.
fn parse_setting(value: &str) -> Result<Setting, String> {
    Setting::parse(value).map_err(|e| e.to_string())
}

/// `NAME=LOCATION` of `--table`.
fn parse_table(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((name, location)) if !name.is_empty() && !location.is_empty() => {
            Ok((name.to_string(), location.to_string()))
        }
        _ => Err(format!("expected NAME=LOCATION, got {value:?}")),
    }
}

/// TLS on the listening port: a [`TlsConfig`].
#[derive(Debug, Args)]
pub(crate) struct TlsArgs {
    /// TLS: the server's certificate chain (PEM). Needs --tls-key.
    #[arg(long, env = "QUIVER_TLS_CERT", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,

    /// TLS: the server's private key (PEM). Needs --tls-cert.
    #[arg(long, env = "QUIVER_TLS_KEY", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,

    /// Mutual TLS: CA certificates (PEM) a client's certificate must chain to;
    /// clients without such a certificate cannot connect. Needs --tls-cert.
    #[arg(long, env = "QUIVER_TLS_CLIENT_CA", requires = "tls_cert")]
    pub(crate) tls_client_ca: Option<PathBuf>,
}

impl TlsArgs {
    /// TLS from the PEM files, or `None` (plain TCP) without `--tls-cert`.
    pub(crate) fn to_config(&self) -> ArgResult<Option<TlsConfig>> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let tls = TlsConfig::from_files(cert, key, self.tls_client_ca.as_deref())?;
        tracing::info!(mutual = tls.mutual(), "TLS on");
        Ok(Some(tls))
    }
}

/// Users, roles and tokens: an [`Authenticator`].
#[derive(Debug, Args)]
pub(crate) struct AuthArgs {
    /// Users file (TOML; see `quiver user add`). Given, every RPC needs
    /// credentials: a bearer token from the Handshake, or an API token.
    #[arg(long, env = "QUIVER_USERS")]
    pub(crate) users: Option<PathBuf>,

    /// Seconds a token from the Handshake stays valid.
    #[arg(long, env = "QUIVER_TOKEN_TTL",
          default_value_t = DEFAULT_TOKEN_TTL.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) token_ttl: u64,

    /// File of at least 32 bytes that keys the tokens' signatures, so tokens
    /// survive restarts and are shared by servers given the same file.
    /// Default: a random key per process.
    #[arg(long, env = "QUIVER_TOKEN_SECRET_FILE")]
    pub(crate) token_secret_file: Option<PathBuf>,
}

impl AuthArgs {
    /// The authenticator over the users file, or `None` (anyone may do
    /// anything) without `--users`.
    pub(crate) fn to_config(&self) -> ArgResult<Option<Arc<Authenticator>>> {
        let Some(path) = &self.users else {
            if self.token_secret_file.is_some() {
                return Err("--token-secret-file needs --users".into());
            }
            return Ok(None);
        };
        let users = UsersFile::load(path)?;
        let signer = match &self.token_secret_file {
            Some(secret) => TokenSigner::from_secret(
                &std::fs::read(secret)
                    .map_err(|e| format!("--token-secret-file {}: {e}", secret.display()))?,
            )?,
            None => TokenSigner::random()?,
        };
        tracing::info!(
            users = users.users.len(),
            api_tokens = users.tokens.len(),
            token_ttl_seconds = self.token_ttl,
            "authentication on"
        );
        let ttl = Duration::from_secs(self.token_ttl);
        Ok(Some(Arc::new(Authenticator::new(users, signer, ttl)?)))
    }
}

/// A byte size as a `usize`; past `usize::MAX`, `usize::MAX`.
fn size(size: ByteSize) -> usize {
    usize::try_from(size.0).unwrap_or(usize::MAX)
}

/// A duration in seconds.
fn duration(flag: &str, seconds: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{flag} {seconds}: {e}"))
}

/// A duration in seconds; 0 means none.
fn optional_duration(flag: &str, seconds: f64) -> Result<Option<Duration>, String> {
    let duration = duration(flag, seconds)?;
    Ok((!duration.is_zero()).then_some(duration))
}

/// The shared-memory socket's path from `--shm-socket`.
fn shm_socket(arg: &str, port: u16) -> Option<PathBuf> {
    match arg {
        "off" => None,
        "auto" => {
            let dir = std::env::var_os("XDG_RUNTIME_DIR")
                .map(PathBuf::from)
                .filter(|d| d.is_dir())
                .unwrap_or_else(std::env::temp_dir);
            Some(dir.join(format!("quiver-{port}.sock")))
        }
        path => Some(path.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::{CommandFactory, Parser};

    fn defaults() -> ServeArgs {
        let Command::Serve(args) = Cli::try_parse_from(["quiver", "serve"]).unwrap().command else {
            panic!("not serve")
        };
        args
    }

    #[test]
    fn byte_size_defaults_are_the_libraries_constants() {
        // clap parses a `default_value_t` back from its Display, which rounds
        // to a tenth of a unit: a constant it cannot spell would drift here.
        let args = defaults();
        let parsed = [
            args.max_message_size,
            args.max_flight_data_size,
            args.large_flight_data_size,
            args.put_buffer_pool,
            args.http2.h2_stream_window,
            args.http2.h2_connection_window,
            args.http2.h2_max_frame_size,
            args.sql.query_memory_limit,
        ];
        let constants = [
            server::DEFAULT_MAX_MESSAGE_SIZE as u64,
            server::DEFAULT_MAX_FLIGHT_DATA_SIZE as u64,
            server::DEFAULT_LARGE_FLIGHT_DATA_SIZE as u64,
            server::DEFAULT_PUT_BUFFER_POOL as u64,
            server::DEFAULT_STREAM_WINDOW.into(),
            server::DEFAULT_CONNECTION_WINDOW.into(),
            server::DEFAULT_MAX_FRAME_SIZE.into(),
            DEFAULT_QUERY_MEMORY_LIMIT as u64,
        ];
        assert_eq!(parsed.map(|size| size.0), constants);
    }

    #[test]
    fn each_block_defaults_to_its_librarys_default() {
        let args = defaults();
        assert_eq!(args.http2.to_config().unwrap(), Http2Config::default());
        assert_eq!(args.limits.to_config().unwrap(), ServerLimits::default());
        assert_eq!(args.sql.to_config().unwrap(), EngineOptions::default());
        assert_eq!(args.store.table_limits(), TableLimits::default());
        assert!(args.store.durable().is_none());
        assert_eq!(Fsync::from(args.store.fsync), Fsync::default());
        assert!(args.tls.to_config().unwrap().is_none());
        assert!(args.auth.to_config().unwrap().is_none());
        assert_eq!(args.auth.token_ttl, DEFAULT_TOKEN_TTL.as_secs());

        let config = args
            .server_config("127.0.0.1:8815".parse().unwrap())
            .unwrap();
        let library = ServerConfig::default();
        assert_eq!(
            (
                config.advertise,
                config.partitions,
                config.max_message_size,
                config.max_flight_data_size,
                config.large_flight_data_size,
                config.put_buffer_pool,
                config.shutdown_timeout,
                config.direct_wire,
                config.tables,
            ),
            (
                library.advertise,
                library.partitions,
                library.max_message_size,
                library.max_flight_data_size,
                library.large_flight_data_size,
                library.put_buffer_pool,
                library.shutdown_timeout,
                library.direct_wire,
                library.tables,
            )
        );
    }

    #[test]
    fn zero_seconds_turn_a_limit_off() {
        let Command::Serve(args) = Cli::try_parse_from([
            "quiver",
            "serve",
            "--h2-keepalive-interval=0",
            "--request-timeout=0",
            "--stream-idle-timeout=0",
        ])
        .unwrap()
        .command
        else {
            panic!("not serve")
        };
        let limits = args.limits.to_config().unwrap();
        assert_eq!(
            (
                limits.keepalive_interval,
                limits.request_timeout,
                limits.stream_idle_timeout
            ),
            (None, None, None)
        );
        assert!(optional_duration("--x", -1.0).is_err());
    }

    #[test]
    fn http2_sizes_out_of_range_are_refused() {
        let mut http2 = defaults().http2;
        http2.h2_stream_window = ByteSize(2 << 30);
        assert!(http2.to_config().is_err());
        http2 = defaults().http2;
        http2.h2_max_frame_size = ByteSize(16 << 20);
        assert!(http2.to_config().is_err());
    }

    /// Flags of `quiver serve` that have no environment variable, and why:
    /// `--table` and `--functions` are repeatable (see the module's documentation);
    /// `--print-config` is an action, not a setting.
    const WITHOUT_ENV: [&str; 3] = ["print-config", "table", "functions"];

    #[test]
    fn every_serve_flag_but_the_repeatable_ones_has_its_environment_variable() {
        let cli = Cli::command();
        let serve = cli.find_subcommand("serve").unwrap();
        let mut without = Vec::new();
        for arg in serve.get_arguments() {
            let long = arg.get_long().unwrap();
            match arg.get_env() {
                None => without.push(long),
                Some(env) => {
                    let expected = format!("QUIVER_{}", long.to_uppercase().replace('-', "_"));
                    assert_eq!(env.to_str(), Some(expected.as_str()), "--{long}");
                }
            }
        }
        assert_eq!(without, WITHOUT_ENV);
    }

    /// README.md's `| flag | env | default |` table: one row per flag of
    /// `quiver serve`, with its environment variable and, where clap has one,
    /// its default.
    #[test]
    fn readme_table_gives_every_serve_flag_its_env_and_default() {
        let readme = include_str!("../../../../README.md");
        let rows: Vec<Vec<&str>> = readme
            .lines()
            .skip_while(|l| !l.starts_with("| flag | env | default |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
            .collect();
        let cli = Cli::command();
        let serve = cli.find_subcommand("serve").unwrap();
        let flags: Vec<&str> = serve.get_arguments().filter_map(|a| a.get_long()).collect();
        assert_eq!(rows.len(), flags.len(), "one README row per flag");
        for arg in serve.get_arguments() {
            let long = arg.get_long().unwrap();
            let start = format!("`--{long} ");
            let start_bare = format!("`--{long}`");
            let row = rows
                .iter()
                .find(|r| r[0].starts_with(&start) || r[0].starts_with(&start_bare))
                .unwrap_or_else(|| panic!("README has no row for --{long}"));
            let env = arg
                .get_env()
                .map_or("—".to_string(), |e| format!("`{}`", e.to_string_lossy()));
            assert_eq!(row[1], env, "--{long}");
            let shown = row[2].replace('`', "");
            for default in arg.get_default_values() {
                let default = default.to_string_lossy();
                let same_size = || {
                    let readme_size = shown.split([':', '(']).next().unwrap_or("").trim();
                    matches!(
                        (default.parse::<ByteSize>(), readme_size.parse::<ByteSize>()),
                        (Ok(a), Ok(b)) if a == b
                    )
                };
                assert!(
                    shown.starts_with(default.as_ref()) || same_size(),
                    "--{long}: README says {shown:?}, the default is {default:?}"
                );
            }
        }
    }

    #[test]
    fn table_flag_is_name_equals_location() {
        let (name, location) = parse_table("taxi=/data/taxi/").unwrap();
        assert_eq!((name.as_str(), location.as_str()), ("taxi", "/data/taxi/"));
        let (_, location) = parse_table("trips=s3://lake/trips/?x=1").unwrap();
        assert_eq!(location, "s3://lake/trips/?x=1");
        assert!(parse_table("taxi").is_err());
        assert!(parse_table("=x").is_err());
        assert!(parse_table("x=").is_err());
    }
}

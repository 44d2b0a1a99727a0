//! Command-line arguments. Every flag can also be set through its `QUIVER_...`
//! environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use quiver_flight::server;

use crate::size::ByteSize;

/// quiver: a wire-speed Apache Arrow table store over Arrow Flight.
#[derive(Debug, Parser)]
#[command(name = "quiver", version, about, long_about = None)]
pub(crate) struct Cli {
    /// Server to talk to (client commands).
    #[arg(
        long,
        global = true,
        env = "QUIVER_SERVER",
        default_value = "grpc+tcp://127.0.0.1:8815"
    )]
    pub(crate) server: String,

    /// Credentials and TLS of the client commands.
    #[command(flatten)]
    pub(crate) auth: ClientAuthArgs,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once, at start: boxing `serve`'s flags buys nothing
pub(crate) enum Command {
    /// Run the server.
    Serve(ServeArgs),
    /// Store a Parquet, CSV or Arrow IPC file as a table.
    Put(PutArgs),
    /// Fetch a table into a Parquet, CSV or Arrow IPC file.
    Get(GetArgs),
    /// List tables.
    Ls(LsArgs),
    /// Show a table's schema, size and endpoints.
    Info(NameArg),
    /// Delete a table.
    Rm(NameArg),
    /// Manage the users file: users with passwords, and API tokens.
    #[command(subcommand)]
    User(UserCommand),
    /// Measure throughput: a Rust Flight client, loopback TCP, memcpy (one JSON
    /// line per measurement; the harness in bench/ drives it).
    Bench(crate::bench::BenchArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on (HOST:PORT; port 0 picks a free port).
    #[arg(long, env = "QUIVER_LISTEN", default_value = "127.0.0.1:8815")]
    pub(crate) listen: SocketAddr,

    /// URI clients are told to fetch from (endpoint locations). Default:
    /// grpc+tcp:// and the bound address; for 0.0.0.0 or [::], Flight's
    /// "reuse this connection" location.
    #[arg(long, env = "QUIVER_ADVERTISE")]
    pub(crate) advertise: Option<String>,

    /// Endpoints each table is split over for parallel reads, unless a put
    /// chooses its own.
    #[arg(long, env = "QUIVER_PARTITIONS", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) partitions: u32,

    /// Memory for stored tables (e.g. 8GiB, 512MiB, 1000000). Default: half
    /// the machine's RAM.
    #[arg(long, env = "QUIVER_MAX_MEMORY")]
    pub(crate) max_memory: Option<ByteSize>,

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
    #[arg(long, env = "QUIVER_SHUTDOWN_TIMEOUT", default_value_t = 30.0)]
    pub(crate) shutdown_timeout: f64,

    /// Keep tables durable in this directory (created if missing): every put,
    /// append, rename and delete is on disk before it is acknowledged, and a
    /// restart reads the tables back. Without it, tables live in memory only.
    /// See docs/durability.md.
    #[arg(long, env = "QUIVER_DATA_DIR")]
    pub(crate) data_dir: Option<PathBuf>,

    /// With --data-dir, when writes are synced: `always` fsyncs each write's
    /// files and directory before acknowledging it (survives power loss);
    /// `never` leaves that to the OS (survives a server crash, not an OS crash).
    #[arg(long, env = "QUIVER_FSYNC", value_enum, default_value_t = FsyncArg::Always)]
    pub(crate) fsync: FsyncArg,

    /// HTTP/2 stream flow-control window the server advertises.
    #[arg(long, env = "QUIVER_H2_STREAM_WINDOW",
          default_value_t = ByteSize(server::DEFAULT_STREAM_WINDOW as u64))]
    pub(crate) h2_stream_window: ByteSize,

    /// HTTP/2 connection flow-control window the server advertises.
    #[arg(long, env = "QUIVER_H2_CONNECTION_WINDOW",
          default_value_t = ByteSize(server::DEFAULT_CONNECTION_WINDOW as u64))]
    pub(crate) h2_connection_window: ByteSize,

    /// Largest HTTP/2 frame the server accepts (16KiB to 16MiB-1).
    #[arg(long, env = "QUIVER_H2_MAX_FRAME_SIZE",
          default_value_t = ByteSize(server::DEFAULT_MAX_FRAME_SIZE as u64))]
    pub(crate) h2_max_frame_size: ByteSize,

    /// How DoGet and DoPut meet the wire: `direct` sends Arrow buffers to the
    /// socket by reference and copies each received body once, into aligned
    /// memory; `stock` uses arrow-flight's encoder/decoder and tonic's codec
    /// (two copies per body each way). For comparisons; see docs/performance.md.
    #[arg(long, env = "QUIVER_WIRE_PATH", value_enum, default_value_t = WirePath::Direct)]
    pub(crate) wire_path: WirePath,

    /// A table over files, queried in place by SQL: NAME=PATH, where PATH is a
    /// Parquet, CSV (with a header row) or Arrow IPC file, or a directory of
    /// them; the format comes from the extension. Repeatable.
    #[arg(long = "table", value_name = "NAME=PATH", value_parser = parse_table)]
    pub(crate) tables: Vec<(String, std::path::PathBuf)>,

    /// Memory one SQL query may use in sorts, joins and aggregates; past it
    /// the query fails with RESOURCE_EXHAUSTED.
    #[arg(long, env = "QUIVER_QUERY_MEMORY_LIMIT", default_value = "1GiB")]
    pub(crate) query_memory_limit: ByteSize,

    /// Seconds a SQL query may run, from planning to its last batch.
    #[arg(long, env = "QUIVER_QUERY_TIMEOUT", default_value_t = 300.0)]
    pub(crate) query_timeout: f64,

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

    /// RPCs one client connection may have open at once (HTTP/2
    /// SETTINGS_MAX_CONCURRENT_STREAMS); clients queue the calls past it.
    #[arg(long, env = "QUIVER_MAX_CONCURRENT_STREAMS", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_concurrent_streams: u32,

    /// Seconds between the HTTP/2 PINGs that check a client is alive (0: none).
    #[arg(long, env = "QUIVER_H2_KEEPALIVE_INTERVAL", default_value_t = 60.0)]
    pub(crate) h2_keepalive_interval: f64,

    /// Seconds a PING may go unanswered before the connection is closed.
    #[arg(long, env = "QUIVER_H2_KEEPALIVE_TIMEOUT", default_value_t = 20.0)]
    pub(crate) h2_keepalive_timeout: f64,

    /// Seconds to answer a one-message RPC (GetFlightInfo, DoAction, ...) or to
    /// start a DoGet's stream; the stream itself is not cut (0: no limit).
    #[arg(long, env = "QUIVER_REQUEST_TIMEOUT", default_value_t = 300.0)]
    pub(crate) request_timeout: f64,

    /// Seconds the server waits for the next message of a request stream (a
    /// DoPut's next batch) before failing it; nothing is stored (0: no limit).
    #[arg(long, env = "QUIVER_STREAM_IDLE_TIMEOUT", default_value_t = 120.0)]
    pub(crate) stream_idle_timeout: f64,

    /// Log filter (tracing's EnvFilter syntax), e.g. info, quiver_flight=debug.
    #[arg(long, env = "QUIVER_LOG", default_value = "info")]
    pub(crate) log: String,

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

    /// Users file (TOML; see `quiver user add`). Given, every RPC needs
    /// credentials: a bearer token from the Handshake, or an API token.
    #[arg(long, env = "QUIVER_USERS")]
    pub(crate) users: Option<PathBuf>,

    /// Seconds a token from the Handshake stays valid.
    #[arg(long, env = "QUIVER_TOKEN_TTL",
          default_value_t = quiver_flight::auth::DEFAULT_TOKEN_TTL.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) token_ttl: u64,

    /// File of at least 32 bytes that keys the tokens' signatures, so tokens
    /// survive restarts and are shared by servers given the same file.
    /// Default: a random key per process.
    #[arg(long, env = "QUIVER_TOKEN_SECRET_FILE")]
    pub(crate) token_secret_file: Option<PathBuf>,

    /// Unix socket of the same-host shared-memory data plane (docs/shm.md):
    /// a path, `auto` ($XDG_RUNTIME_DIR, else the temporary directory,
    /// `/quiver-PORT.sock`) or `off`.
    #[arg(long, env = "QUIVER_SHM_SOCKET", default_value = "auto")]
    pub(crate) shm_socket: String,
}

/// Credentials and TLS settings of the client commands.
#[derive(Debug, Args)]
pub(crate) struct ClientAuthArgs {
    /// User name to log in with (the password comes from QUIVER_PASSWORD).
    #[arg(long, global = true, env = "QUIVER_USER")]
    pub(crate) user: Option<String>,

    /// Password of --user (environment only, kept off the command line).
    #[arg(long, hide = true, env = "QUIVER_PASSWORD", hide_env_values = true)]
    pub(crate) password: Option<String>,

    /// Bearer token to send (an API token, or one a Handshake gave).
    #[arg(
        long,
        global = true,
        env = "QUIVER_TOKEN",
        hide_env_values = true,
        conflicts_with = "user"
    )]
    pub(crate) token: Option<String>,

    /// CA certificates (PEM) that verify a grpc+tls:// server.
    #[arg(long, global = true, env = "QUIVER_TLS_CA")]
    pub(crate) tls_ca: Option<PathBuf>,

    /// Client certificate (PEM) for a server that requires mutual TLS.
    #[arg(
        long,
        global = true,
        env = "QUIVER_CLIENT_CERT",
        requires = "client_key"
    )]
    pub(crate) client_cert: Option<PathBuf>,

    /// Private key (PEM) of --client-cert.
    #[arg(
        long,
        global = true,
        env = "QUIVER_CLIENT_KEY",
        requires = "client_cert"
    )]
    pub(crate) client_key: Option<PathBuf>,
}

/// `quiver user ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum UserCommand {
    /// Add a user, or change its role and password: the password is read
    /// from stdin (one line). The file is created (mode 0600) if missing.
    Add(UserAddArgs),
    /// Make a static API token with a role; prints it once (the file keeps
    /// only its SHA-256). Send it as `authorization: Bearer TOKEN`.
    Token(UserAddArgs),
}

#[derive(Debug, Args)]
pub(crate) struct UserAddArgs {
    /// The user's (or the token's) name.
    pub(crate) name: String,
    /// read: list, describe, get, query; write: also put, delete, rename,
    /// ingest, SQL that changes tables; admin: also CREATE EXTERNAL TABLE.
    #[arg(long, value_parser = parse_role)]
    pub(crate) role: quiver_flight::auth::Role,
    /// The users file.
    #[arg(long, env = "QUIVER_USERS")]
    pub(crate) users: PathBuf,
}

fn parse_role(value: &str) -> Result<quiver_flight::auth::Role, String> {
    value.parse()
}

/// How DoGet and DoPut meet the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum WirePath {
    /// quiver's own: buffers by reference out, one aligned copy in.
    Direct,
    /// arrow-flight's encoder and decoder over tonic's prost codec.
    Stock,
}

/// When a durable server syncs writes to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum FsyncArg {
    /// Before acknowledging every write.
    Always,
    /// Never; the operating system writes back in its own time.
    Never,
}

#[derive(Debug, Args)]
pub(crate) struct PutArgs {
    /// Table name.
    pub(crate) name: String,
    /// Input file: .parquet/.pq, .csv, .arrow/.feather/.ipc (IPC file) or
    /// .arrows (IPC stream).
    pub(crate) file: PathBuf,
    /// Append to the existing table instead of replacing it.
    #[arg(long)]
    pub(crate) append: bool,
    /// Endpoints to split this table over for parallel reads.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) partitions: Option<u32>,
    /// Input format, when the extension does not tell.
    #[arg(long, value_enum)]
    pub(crate) format: Option<crate::files::Format>,
    /// Rows per batch read from CSV and Parquet.
    #[arg(long, default_value_t = 65536)]
    pub(crate) batch_size: usize,
}

#[derive(Debug, Args)]
pub(crate) struct GetArgs {
    /// Table name.
    pub(crate) name: String,
    /// Output file (.parquet/.pq, .csv, .arrow/.feather/.ipc, .arrows).
    #[arg(short, long)]
    pub(crate) output: PathBuf,
    /// Output format, when the extension does not tell.
    #[arg(long, value_enum)]
    pub(crate) format: Option<crate::files::Format>,
}

#[derive(Debug, Args)]
pub(crate) struct LsArgs {
    /// Only tables whose name starts with this.
    #[arg(default_value = "")]
    pub(crate) prefix: String,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct NameArg {
    /// Table name.
    pub(crate) name: String,
}

/// `NAME=PATH` of `--table`.
fn parse_table(value: &str) -> Result<(String, std::path::PathBuf), String> {
    match value.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => {
            Ok((name.to_string(), path.into()))
        }
        _ => Err(format!("expected NAME=PATH, got {value:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn byte_size_defaults_are_the_servers_constants() {
        // clap parses a `default_value_t` back from its Display, which rounds
        // to a tenth of a unit: a constant it cannot spell would drift here.
        let Command::Serve(args) = Cli::try_parse_from(["quiver", "serve"]).unwrap().command else {
            panic!("not serve")
        };
        let parsed = [
            args.max_message_size,
            args.max_flight_data_size,
            args.large_flight_data_size,
            args.put_buffer_pool,
            args.h2_stream_window,
            args.h2_connection_window,
            args.h2_max_frame_size,
        ];
        let constants = [
            server::DEFAULT_MAX_MESSAGE_SIZE as u64,
            server::DEFAULT_MAX_FLIGHT_DATA_SIZE as u64,
            server::DEFAULT_LARGE_FLIGHT_DATA_SIZE as u64,
            server::DEFAULT_PUT_BUFFER_POOL as u64,
            server::DEFAULT_STREAM_WINDOW as u64,
            server::DEFAULT_CONNECTION_WINDOW as u64,
            server::DEFAULT_MAX_FRAME_SIZE as u64,
        ];
        assert_eq!(parsed.map(|size| size.0), constants);
    }

    #[test]
    fn table_flag_is_name_equals_path() {
        let (name, path) = parse_table("taxi=/data/taxi/").unwrap();
        assert_eq!(
            (name.as_str(), path.to_str()),
            ("taxi", Some("/data/taxi/"))
        );
        assert!(parse_table("taxi").is_err());
        assert!(parse_table("=x").is_err());
        assert!(parse_table("x=").is_err());
    }
}

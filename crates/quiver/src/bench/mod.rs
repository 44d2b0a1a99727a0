//! `quiver bench`: the Rust side of the benchmark suite (the harness in
//! `bench/` drives it). Each command prints one JSON object per measurement.

mod ceilings;
mod client;

use clap::{Args, Subcommand, ValueEnum};

use crate::client::{Connector, DEFAULT_SERVER};
use crate::size::ByteSize;

#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// DoGet/DoPut throughput of a Rust (arrow-flight) client against any
    /// Flight server that follows quiver's put options.
    Client(ClientArgs),
    /// Raw loopback TCP throughput with 1 MiB writes: the network ceiling.
    Tcp(TcpArgs),
    /// Memory copy bandwidth into warm and into freshly mapped pages.
    Memcpy(MemcpyArgs),
}

/// Which RPC a client benchmark measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Op {
    /// GetFlightInfo, then DoGet of every endpoint in parallel.
    Get,
    /// One DoPut per stream, in parallel.
    Put,
}

#[derive(Debug, Args)]
pub(crate) struct ClientArgs {
    /// Server to measure.
    #[arg(long, default_value = DEFAULT_SERVER)]
    pub(crate) server: String,
    /// RPC to measure.
    #[arg(long, value_enum)]
    pub(crate) op: Op,
    /// Parallel streams (connections).
    #[arg(long, default_value_t = 1)]
    pub(crate) streams: usize,
    /// Records (rows of 4 int64 columns, 32 bytes) per stream.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) rows: usize,
    /// Rows per record batch.
    #[arg(long, default_value_t = 65_536)]
    pub(crate) batch_rows: usize,
    /// Repetitions; one JSON line each.
    #[arg(long, default_value_t = 3)]
    pub(crate) repeat: usize,
}

#[derive(Debug, Args)]
pub(crate) struct TcpArgs {
    /// How long to send.
    #[arg(long, default_value_t = 3.0)]
    pub(crate) seconds: f64,
    /// Bytes per write.
    #[arg(long, default_value = "1MiB")]
    pub(crate) write_size: ByteSize,
}

#[derive(Debug, Args)]
pub(crate) struct MemcpyArgs {
    /// Bytes copied per measurement.
    #[arg(long, default_value = "1GiB")]
    pub(crate) bytes: ByteSize,
}

/// Runs a benchmark; the client one connects through `connector` (its TLS
/// and credentials; the server is `--server` of `bench client`).
pub(crate) async fn run(
    args: BenchArgs,
    connector: &Connector,
) -> Result<(), Box<dyn std::error::Error>> {
    match args.command {
        BenchCommand::Client(args) => client::run(args, connector).await,
        // Blocking, and alone on the runtime: nothing else runs meanwhile.
        BenchCommand::Tcp(args) => ceilings::tcp(&args),
        BenchCommand::Memcpy(args) => ceilings::memcpy(&args),
    }
}

/// One measurement line.
pub(crate) fn gbps(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / seconds / 1e9
}

//! The subcommands of functions served over DoExchange (docs/functions.md,
//! "As built"): `functions` lists what `serve --functions` serves, `exchange`
//! streams a file through one, `apply` runs one over a stored table on the
//! server. Errors are the server's, as `describe` shows them.

mod apply;
mod exchange;
mod list;
mod output;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::files::Format;

pub(crate) use apply::apply;
pub(crate) use exchange::exchange;
pub(crate) use list::list;

type CmdResult = Result<(), Box<dyn std::error::Error>>;

/// Rows per batch `exchange` sends unless told: the unit the server hands to
/// one worker, and that its results are matched to.
const DEFAULT_BATCH_ROWS: usize = 65_536;

/// `quiver functions`'s flags.
#[derive(Debug, Args)]
pub(crate) struct FunctionsArgs {
    /// Print the server's `list-functions` JSON as it came.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `quiver exchange`'s flags.
#[derive(Debug, Args)]
pub(crate) struct ExchangeArgs {
    /// The function's name (`quiver functions` lists them).
    pub(crate) name: String,
    /// Input file: .parquet/.pq, .csv, .arrow/.feather/.ipc (IPC file) or
    /// .arrows (IPC stream).
    pub(crate) input: PathBuf,
    /// Output file (.parquet/.pq, .csv, .arrow/.feather/.ipc, .arrows);
    /// removed if the call fails.
    #[arg(short, long)]
    pub(crate) output: PathBuf,
    /// Input format, when the extension does not tell.
    #[arg(long, value_enum)]
    pub(crate) format: Option<Format>,
    /// Output format, when the extension does not tell.
    #[arg(long, value_enum)]
    pub(crate) output_format: Option<Format>,
    /// Most rows per batch sent (larger batches are sliced): the unit of
    /// work of one function call on the server.
    #[arg(
        long,
        default_value_t = DEFAULT_BATCH_ROWS,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
    )]
    pub(crate) batch_rows: usize,
}

/// How `apply --into` stores its results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ApplyMode {
    /// Replace the table (created if missing).
    Replace,
    /// Append to the existing table.
    Append,
}

impl ApplyMode {
    fn as_str(self) -> &'static str {
        match self {
            Self::Replace => "replace",
            Self::Append => "append",
        }
    }
}

/// `quiver apply`'s flags.
#[derive(Debug, Args)]
pub(crate) struct ApplyArgs {
    /// The function's name (`quiver functions` lists them).
    pub(crate) name: String,
    /// The stored table the function runs over.
    #[arg(long)]
    pub(crate) source: String,
    /// Store the results as this table (atomically) and print the server's
    /// summary as JSON; without it the results come back.
    #[arg(long)]
    pub(crate) into: Option<String>,
    /// How --into stores the results [default: replace].
    #[arg(long, value_enum, requires = "into")]
    pub(crate) mode: Option<ApplyMode>,
    /// Endpoints to split the --into table over for parallel reads.
    #[arg(
        long,
        requires = "into",
        value_parser = clap::value_parser!(u32).range(1..=quiver_flight::MAX_PARTITIONS as i64)
    )]
    pub(crate) partitions: Option<u32>,
    /// Write the results to this file (.parquet/.pq, .csv, .arrow, .arrows)
    /// instead of only counting them.
    #[arg(short, long, conflicts_with = "into")]
    pub(crate) output: Option<PathBuf>,
    /// Output format, when the extension does not tell.
    #[arg(long, value_enum, requires = "output")]
    pub(crate) format: Option<Format>,
}

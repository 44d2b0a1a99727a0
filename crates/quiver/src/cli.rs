//! Command-line arguments.
//!
//! Environment variables: every flag of `quiver serve` but the repeatable
//! `--table` has its `QUIVER_...` variable ([`serve_args`]); so do the flags
//! that say how the client commands connect (`--server`, `--user`, `--token`,
//! `--tls-ca`, `--client-cert`, `--client-key`; the password is read from
//! `QUIVER_PASSWORD` only) and `quiver user`'s `--users`. The flags of one
//! client command or benchmark (`put --append`, `bench client --streams`, ...)
//! have none.

mod cluster_args;
mod config_file;
mod serve_args;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::client::{Connector, Credentials, DEFAULT_SERVER};

pub(crate) use cluster_args::{ClusterArgs, ClusterCommand, Switch};
pub(crate) use config_file::{Invocation, parse};
pub(crate) use serve_args::{LogFormat, ServeArgs};

/// quiver: a wire-speed Apache Arrow table store over Arrow Flight.
#[derive(Debug, Parser)]
#[command(name = "quiver", version, about, long_about = None)]
pub(crate) struct Cli {
    /// Server to talk to (client commands).
    #[arg(
        long,
        global = true,
        env = "QUIVER_SERVER",
        default_value = DEFAULT_SERVER
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
    /// Run SQL: the statement given (a table on the terminal; CSV, JSON,
    /// Parquet or Arrow with --format or -o), or an interactive shell when
    /// none is.
    Sql(SqlArgs),
    /// Export a stored table as Parquet to object storage: the server writes
    /// it (with its own credentials), as one object that appears whole or not
    /// at all. Needs the admin role.
    Export(ExportArgs),
    /// List the functions the server serves (`serve --functions`): name,
    /// input -> output fields, description.
    Functions(crate::functions::FunctionsArgs),
    /// Stream a Parquet, CSV or Arrow IPC file through a served function
    /// into a file.
    Exchange(crate::functions::ExchangeArgs),
    /// Run a served function over a stored table on the server: into another
    /// table, or the results back.
    Apply(crate::functions::ApplyArgs),
    /// A live view of a server from its metrics (`serve --metrics-listen`):
    /// tables, memory, RPC rates, the slowest RPCs.
    Top(TopArgs),
    /// Manage the users file: users with passwords, and API tokens.
    #[command(subcommand)]
    User(UserCommand),
    /// Look at a cluster of quiver nodes (`serve --cluster`).
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Measure throughput: a Rust Flight client, loopback TCP, memcpy (one JSON
    /// line per measurement; the harness in bench/ drives it).
    Bench(crate::bench::BenchArgs),
}

/// `quiver top`'s flags.
#[derive(Debug, Args)]
pub(crate) struct TopArgs {
    /// The server's metrics page (its `--metrics-listen` address).
    #[arg(long, default_value = "http://127.0.0.1:9464/metrics")]
    pub(crate) metrics: String,

    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) interval: f64,

    /// Print one view (rates over one interval) and exit, for scripts.
    #[arg(long)]
    pub(crate) once: bool,
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

impl ClientAuthArgs {
    /// The connector of the client commands to `server`: reads the PEM files
    /// the flags name.
    pub(crate) fn connector(&self, server: String) -> Result<Connector, String> {
        let login = match (&self.user, &self.password) {
            (Some(user), Some(password)) => Some((user.clone(), password.clone())),
            (Some(user), None) => {
                return Err(format!(
                    "--user {user}: set the password in QUIVER_PASSWORD"
                ));
            }
            _ => None,
        };
        // A token wins over a login (clap keeps --token and --user apart).
        let credentials = match (&self.token, login) {
            (Some(token), _) => Credentials::Token(token.clone()),
            (None, Some((user, password))) => Credentials::Login { user, password },
            (None, None) => Credentials::None,
        };
        let identity = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => Some((
                read_pem("--client-cert", cert)?,
                read_pem("--client-key", key)?,
            )),
            _ => None,
        };
        let tls_ca = self
            .tls_ca
            .as_deref()
            .map(|p| read_pem("--tls-ca", p))
            .transpose()?;
        Ok(Connector::new(server, tls_ca, identity, credentials))
    }
}

/// The contents of a PEM file a flag names.
fn read_pem(flag: &str, path: &std::path::Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{flag} {}: {e}", path.display()))
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
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=quiver_flight::MAX_PARTITIONS as i64))]
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
pub(crate) struct SqlArgs {
    /// The statement; without one, an interactive shell.
    pub(crate) statement: Option<String>,
    /// A value for the statement's next placeholder ($1, $2, ... or ?), in
    /// order, cast to the type the statement takes there.
    #[arg(long = "param", value_name = "VALUE")]
    pub(crate) params: Vec<String>,
    /// How to write the result: table (the default on standard output), csv,
    /// json (one object per row), or, into -o, parquet, arrow or arrows.
    #[arg(long, value_enum)]
    pub(crate) format: Option<crate::sql::SqlFormat>,
    /// Write the result into this file (the format from its extension, or
    /// --format).
    #[arg(short, long)]
    pub(crate) output: Option<PathBuf>,
    /// Print the rows and the time the statement took (to standard error).
    #[arg(long)]
    pub(crate) timing: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// The table.
    pub(crate) name: String,
    /// Where the server writes it: an object store URL of a Parquet file
    /// (s3://bucket/exports/trips.parquet).
    pub(crate) url: String,
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// How the connector built from `args` shows its credentials, or its error.
    fn credentials(args: &[&str]) -> Result<String, String> {
        let cli = Cli::try_parse_from(args).unwrap();
        let connector = cli.auth.connector(cli.server)?;
        let shown = format!("{connector:?}");
        let kind = ["none", "token", "login"]
            .into_iter()
            .find(|k| shown.contains(&format!("credentials: \"{k}\"")));
        Ok(kind.unwrap_or("?").to_string())
    }

    #[test]
    fn client_flags_make_the_connector() {
        assert_eq!(credentials(&["quiver", "ls"]).unwrap(), "none");
        assert_eq!(
            credentials(&["quiver", "--token", "t", "ls"]).unwrap(),
            "token"
        );
        assert_eq!(
            credentials(&["quiver", "--user", "ann", "--password", "p", "ls"]).unwrap(),
            "login"
        );
        let missing = credentials(&["quiver", "--user", "ann", "ls"]).unwrap_err();
        assert!(missing.contains("QUIVER_PASSWORD"), "{missing}");
        let unreadable = credentials(&["quiver", "--tls-ca", "/nonexistent/ca.pem", "ls"]);
        assert!(
            unreadable
                .unwrap_err()
                .starts_with("--tls-ca /nonexistent/ca.pem")
        );
    }
}

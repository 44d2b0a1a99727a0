//! The `quiver` binary: the server (`quiver serve`) and a command-line client.
#![warn(missing_docs)]

mod bench;
mod certs;
mod cli;
mod client;
mod cluster;
mod commands;
mod files;
mod functions;
mod serve;
mod size;
mod sql;
mod top;
mod users;

/// jemalloc keeps freed pages for reuse (10 s dirty decay) where glibc returns
/// large blocks to the kernel at once: on these machines a first-touched page
/// costs more than the copy into it (docs/performance.md).
#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its start (`_RJEM_MALLOC_CONF` in the
/// environment overrides them). A background thread purges freed pages after
/// the decay time even while the server is idle, so memory goes back to the
/// system after deletes instead of waiting for the next allocation.
#[cfg(all(unix, not(target_env = "musl")))]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: MallocConf = MallocConf(c"background_thread:true".as_ptr());

/// A C string pointer jemalloc can read as `const char *malloc_conf`.
#[cfg(all(unix, not(target_env = "musl")))]
#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);

// SAFETY: the pointer is to a static, immutable C string.
#[cfg(all(unix, not(target_env = "musl")))]
unsafe impl Sync for MallocConf {}

fn main() -> std::process::ExitCode {
    let cli = match cli::parse(std::env::args_os().collect()) {
        Ok(cli::Invocation::Run(cli)) => *cli,
        Ok(cli::Invocation::Print(text)) => {
            print!("{text}");
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // Built for every command, as the client flags are global: a file they
    // name that cannot be read fails here, whatever the command.
    let connector = match cli.auth.connector(cli.server) {
        Ok(connector) => connector,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            cli::Command::Serve(args) => serve::run(args).await,
            cli::Command::Bench(args) => bench::run(args, &connector).await,
            cli::Command::User(command) => users::run(command),
            cli::Command::Top(args) => top::run(args).await,
            cli::Command::Cluster(command) => cluster::run(command).await,
            command => commands::run(&connector, command).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

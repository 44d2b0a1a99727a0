//! `quiver serve`: the store, the configuration from the flags, the server.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use quiver_flight::server::{advertised_location, serve};
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

use crate::cli::{LogFormat, ServeArgs};
use crate::size::ByteSize;

pub(crate) async fn run(args: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    init_logging(&args.log, args.log_format)?;
    let max_memory = args.store.max_memory();
    let store = Arc::new(args.store.open(max_memory)?);
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr()?;
    let mut config = args.server_config(addr)?;
    let metrics = match args.metrics_listen {
        Some(at) => Some(
            std::net::TcpListener::bind(at)
                .map_err(|e| format!("cannot listen for metrics on {at}: {e}"))?,
        ),
        None => None,
    };
    let metrics_addr = metrics.as_ref().map(|l| l.local_addr()).transpose()?;
    config.metrics = metrics.map(Arc::new);
    let http = match args.http_listen {
        Some(at) => Some(
            std::net::TcpListener::bind(at)
                .map_err(|e| format!("cannot listen for the console on {at}: {e}"))?,
        ),
        None => None,
    };
    let http_addr = http.as_ref().map(|l| l.local_addr()).transpose()?;
    config.http = http.map(Arc::new);
    let shared_tokens = args.auth.token_secret_file.is_some();
    let node =
        crate::cluster::join(&args.cluster, &store, &mut config, addr, shared_tokens).await?;
    tracing::info!(
        %addr,
        max_memory = %ByteSize(max_memory),
        partitions = config.partitions,
        max_message_size = %args.max_message_size,
        "quiver serving"
    );
    // Before the line below: a signal sent as soon as it is read must stop
    // the server gracefully, not kill it.
    let shutdown = shutdown_signal();
    announce(addr, config.tls.is_some(), metrics_addr, http_addr)?;
    tracing::debug!(location = %advertised_location(&config, Some(addr)), "advertised location");
    let served = serve(listener, store, config, shutdown).await;
    crate::cluster::leave(node).await;
    served?;
    tracing::info!("quiver stopped");
    Ok(())
}

/// Logs to stderr through `filter` (tracing's EnvFilter syntax), as text or
/// as one JSON object per line with the event's fields at the top level.
fn init_logging(filter: &str, format: LogFormat) -> Result<(), Box<dyn std::error::Error>> {
    let logs = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_new(filter)?)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => logs
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
    Ok(())
}

/// The lines on stdout: tools and tests read the addresses from them. The
/// first is always the Flight address, then the metrics' and the console's,
/// for each that is on.
fn announce(
    addr: SocketAddr,
    tls: bool,
    metrics: Option<SocketAddr>,
    console: Option<SocketAddr>,
) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    let scheme = if tls { "grpc+tls" } else { "grpc+tcp" };
    writeln!(out, "quiver listening on {scheme}://{addr}")?;
    if let Some(metrics) = metrics {
        writeln!(out, "quiver metrics on http://{metrics}/metrics")?;
    }
    if let Some(console) = console {
        let scheme = if tls { "https" } else { "http" };
        writeln!(out, "quiver console on {scheme}://{console}/")?;
    }
    out.flush()
}

/// Completes on SIGINT or SIGTERM. The handlers are installed when this is
/// called, not when the future is first polled.
fn shutdown_signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    let (interrupt, terminate) = {
        use tokio::signal::unix::{SignalKind, signal};
        let listen = |kind: SignalKind, name: &str| {
            signal(kind)
                .map_err(|e| tracing::error!("cannot listen for {name}: {e}"))
                .ok()
        };
        (
            listen(SignalKind::interrupt(), "SIGINT"),
            listen(SignalKind::terminate(), "SIGTERM"),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let received = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => drop(s.recv().await),
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = received(interrupt) => {},
                () = received(terminate) => {},
            }
        }
        #[cfg(not(unix))]
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!("cannot listen for Ctrl-C: {e}");
            std::future::pending::<()>().await;
        }
        tracing::info!("shutting down: no new connections, finishing RPCs in flight");
    }
}

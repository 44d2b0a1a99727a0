//! `quiver serve`.

use std::io::Write;
use std::sync::Arc;

use quiver_flight::TlsConfig;
use quiver_flight::auth::{Authenticator, TokenSigner, UsersFile};
use quiver_flight::server::{Http2Config, ServerConfig, ServerLimits, default_location, serve};
use quiver_sql::EngineOptions;
use quiver_store::{DurableOptions, Fsync, TableLimits, TableStore};
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

use crate::cli::{FsyncArg, ServeArgs, WirePath};
use crate::size::{ByteSize, machine_memory};

/// Memory limit when neither the flag nor /proc/meminfo says: 4 GiB.
const FALLBACK_MAX_MEMORY: u64 = 4 << 30;

pub(crate) async fn run(args: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_new(&args.log)?)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();

    let max_memory = args
        .max_memory
        .map(|s| s.0)
        .or_else(|| machine_memory().map(|m| m / 2))
        .unwrap_or(FALLBACK_MAX_MEMORY);
    let store = match &args.data_dir {
        None => TableStore::new(max_memory),
        Some(dir) => {
            let fsync = match args.fsync {
                FsyncArg::Always => Fsync::Always,
                FsyncArg::Never => Fsync::Never,
            };
            let options = DurableOptions {
                dir: dir.clone(),
                fsync,
            };
            TableStore::open(&options, max_memory).map_err(|e| format!("--data-dir: {e}"))?
        }
    };
    let store = Arc::new(store.with_limits(TableLimits {
        max_table_rows: args.max_table_rows.unwrap_or(u64::MAX),
        max_table_bytes: args.max_table_bytes.map_or(u64::MAX, |b| b.0),
        max_rows: args.max_rows.unwrap_or(u64::MAX),
    }));
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr()?;
    let tls = tls_config(&args)?;
    let auth = authenticator(&args)?;
    let config = ServerConfig {
        advertise: args.advertise,
        partitions: args.partitions as usize,
        max_message_size: usize::try_from(args.max_message_size.0).unwrap_or(usize::MAX),
        max_flight_data_size: usize::try_from(args.max_flight_data_size.0).unwrap_or(usize::MAX),
        large_flight_data_size: usize::try_from(args.large_flight_data_size.0)
            .unwrap_or(usize::MAX),
        put_buffer_pool: usize::try_from(args.put_buffer_pool.0).unwrap_or(usize::MAX),
        shutdown_timeout: std::time::Duration::try_from_secs_f64(args.shutdown_timeout)
            .map_err(|e| format!("--shutdown-timeout {}: {e}", args.shutdown_timeout))?,
        direct_wire: args.wire_path == WirePath::Direct,
        sql: EngineOptions {
            query_memory_limit: usize::try_from(args.query_memory_limit.0).unwrap_or(usize::MAX),
            query_timeout: std::time::Duration::try_from_secs_f64(args.query_timeout)
                .map_err(|e| format!("--query-timeout {}: {e}", args.query_timeout))?,
            target_partitions: 0,
        },
        tables: args.tables.clone(),
        tls,
        auth,
        shm_socket: shm_socket(&args.shm_socket, addr.port()),
        http2: Http2Config {
            stream_window: window("--h2-stream-window", args.h2_stream_window)?,
            connection_window: window("--h2-connection-window", args.h2_connection_window)?,
            max_frame_size: frame_size(args.h2_max_frame_size)?,
        },
        limits: ServerLimits {
            max_concurrent_streams: Some(args.max_concurrent_streams),
            keepalive_interval: seconds("--h2-keepalive-interval", args.h2_keepalive_interval)?,
            keepalive_timeout: seconds("--h2-keepalive-timeout", args.h2_keepalive_timeout)?
                .unwrap_or(std::time::Duration::ZERO),
            request_timeout: seconds("--request-timeout", args.request_timeout)?,
            stream_idle_timeout: seconds("--stream-idle-timeout", args.stream_idle_timeout)?,
        },
    };
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
    // The one line on stdout: tools and tests read the address from it.
    {
        let mut out = std::io::stdout().lock();
        let scheme = if config.tls.is_some() {
            "grpc+tls"
        } else {
            "grpc+tcp"
        };
        writeln!(out, "quiver listening on {scheme}://{addr}")?;
        out.flush()?;
    }
    if config.advertise.is_none() {
        tracing::debug!(location = %default_location(addr), "advertised location");
    }
    serve(listener, store, config, shutdown).await?;
    tracing::info!("quiver stopped");
    Ok(())
}

/// A duration in seconds; 0 means none.
fn seconds(flag: &str, value: f64) -> Result<Option<std::time::Duration>, String> {
    let duration = std::time::Duration::try_from_secs_f64(value)
        .map_err(|e| format!("{flag} {value}: {e}"))?;
    Ok((!duration.is_zero()).then_some(duration))
}

/// The shared-memory socket's path from `--shm-socket`.
fn shm_socket(arg: &str, port: u16) -> Option<std::path::PathBuf> {
    match arg {
        "off" => None,
        "auto" => {
            let dir = std::env::var_os("XDG_RUNTIME_DIR")
                .map(std::path::PathBuf::from)
                .filter(|d| d.is_dir())
                .unwrap_or_else(std::env::temp_dir);
            Some(dir.join(format!("quiver-{port}.sock")))
        }
        path => Some(path.into()),
    }
}

/// TLS from `--tls-cert`, `--tls-key` and `--tls-client-ca`.
fn tls_config(args: &ServeArgs) -> Result<Option<TlsConfig>, Box<dyn std::error::Error>> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
        return Ok(None);
    };
    let tls = TlsConfig::from_files(cert, key, args.tls_client_ca.as_deref())?;
    tracing::info!(mutual = tls.mutual(), "TLS on");
    Ok(Some(tls))
}

/// Authentication from `--users`, `--token-ttl` and `--token-secret-file`.
fn authenticator(
    args: &ServeArgs,
) -> Result<Option<Arc<Authenticator>>, Box<dyn std::error::Error>> {
    let Some(path) = &args.users else {
        if args.token_secret_file.is_some() {
            return Err("--token-secret-file needs --users".into());
        }
        return Ok(None);
    };
    let users = UsersFile::load(path)?;
    let signer = match &args.token_secret_file {
        Some(secret) => TokenSigner::from_secret(
            &std::fs::read(secret)
                .map_err(|e| format!("--token-secret-file {}: {e}", secret.display()))?,
        )?,
        None => TokenSigner::random()?,
    };
    tracing::info!(
        users = users.users.len(),
        api_tokens = users.tokens.len(),
        token_ttl_seconds = args.token_ttl,
        "authentication on"
    );
    let ttl = std::time::Duration::from_secs(args.token_ttl);
    Ok(Some(Arc::new(Authenticator::new(users, signer, ttl)?)))
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

//! The web console (`--http-listen`): a page of tables, a SQL box and live
//! plots, served over HTTP/1.1 next to `/metrics`, with a JSON API behind it.
//!
//! The page's assets (`assets/`: one HTML file, one stylesheet, one script,
//! no framework) are compiled into the binary; nothing is fetched from
//! elsewhere. The API ([`api`]) reaches the tables and the SQL engine through
//! the same [`QuiverService`] as Flight, and checks the caller the same way:
//!
//! - With `--users`, every `/api/` call but the login carries
//!   `authorization: Bearer TOKEN` (a token `POST /api/login` gave for a user
//!   name and password, or an API token of the users file); the role it names
//!   is enforced as on Flight (a SQL statement's effect against
//!   [`Role::effect`](crate::auth::Role::effect)).
//! - The page keeps its token in the tab's `sessionStorage` and sends it in
//!   that header: no cookie is set, so a request another site makes the
//!   browser send carries no credentials. Every `POST` needs the
//!   `x-quiver-csrf` header besides (the value the login or, without
//!   `--users`, `GET /api/session` gives), which a cross-site form cannot set.
//! - With `--tls-cert` the listener speaks TLS only, with the same
//!   certificate (and, with `--tls-client-ca`, the same client certificates)
//!   as Flight.
//!
//! Nothing runs while no page is open: live samples ([`live`]) are taken when
//! a page asks for them, not on a timer.

mod api;
mod json;
mod live;
mod queries;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::QuiverService;
use crate::auth::Authenticator;
use crate::tls::TlsConfig;

/// The body of every response: whole, or streamed (a CSV download).
pub(crate) type ResponseBody = UnsyncBoxBody<Bytes, std::io::Error>;

/// Longest a client may take to send a request's headers, or to finish a
/// TLS handshake.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The console's HTTP listener, bound and ready to serve.
pub(crate) struct ConsoleEndpoint {
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    handle: &'static PrometheusHandle,
    api: Arc<api::Api>,
}

impl std::fmt::Debug for ConsoleEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleEndpoint")
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl ConsoleEndpoint {
    /// Serves on (a duplicate of) `listener`: the console over `service`,
    /// callers checked by `auth` (`None`: anyone may do anything), TLS with
    /// `tls`. Installs the metrics recorder, which the live plots read.
    pub(crate) fn from_std(
        listener: &std::net::TcpListener,
        service: QuiverService,
        auth: Option<Arc<Authenticator>>,
        tls: Option<&TlsConfig>,
    ) -> Result<Self, std::io::Error> {
        let handle = crate::metrics::recorder().map_err(std::io::Error::other)?;
        let listener = listener.try_clone()?;
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let tls = tls
            .map(|tls| tls.rustls_server_config().map(TlsAcceptor::from))
            .transpose()
            .map_err(std::io::Error::other)?;
        Ok(Self {
            listener,
            tls,
            handle,
            api: Arc::new(api::Api::new(service, auth, handle)?),
        })
    }

    /// Serves until dropped (the server aborts its task).
    pub(crate) async fn serve(self) {
        let handle = self.handle;
        let upkeep = crate::metrics::upkeep(handle);
        let accept = async {
            loop {
                let stream = match self.listener.accept().await {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // EMFILE and the like: wait rather than spin.
                        tracing::warn!(error = %e, "console: cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let api = Arc::clone(&self.api);
                let tls = self.tls.clone();
                tokio::spawn(async move {
                    match tls {
                        None => serve_connection(stream, api).await,
                        Some(tls) => {
                            match tokio::time::timeout(HEADER_TIMEOUT, tls.accept(stream)).await {
                                Ok(Ok(stream)) => serve_connection(stream, api).await,
                                Ok(Err(e)) => {
                                    tracing::debug!(error = %e, "console: TLS handshake failed");
                                }
                                Err(_) => tracing::debug!("console: TLS handshake timed out"),
                            }
                        }
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

/// Serves HTTP/1.1 requests on one connection until it closes.
async fn serve_connection<I>(io: I, api: Arc<api::Api>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
        let api = Arc::clone(&api);
        async move {
            // A handler that panics answers 500; the connection and the
            // server go on.
            let response = std::panic::AssertUnwindSafe(api.respond(request))
                .catch_unwind()
                .await
                .unwrap_or_else(|panic| {
                    let what = crate::panics::panic_message(&*panic);
                    tracing::error!(panic = %what, "console: handler panicked");
                    api::internal_error(&what)
                });
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(io), service);
    if let Err(e) = connection.await {
        tracing::debug!(error = %e, "console: connection ended");
    }
}

/// A whole body.
pub(crate) fn full(bytes: impl Into<Bytes>) -> ResponseBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

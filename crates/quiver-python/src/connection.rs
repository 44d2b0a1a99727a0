//! Where calls go and how: the TLS material, the headers every call sends
//! (the bearer token), the deadline, and a cache of HTTP/2 connections by
//! location.
//!
//! Calls are made on tonic's [`Channel`] as plain HTTP/2 requests: the
//! request and response bodies are gRPC messages framed and parsed by
//! `quiver-wire` ([`crate::get`], [`crate::put`]), not by tonic's codec.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use quiver_wire::http2::{CONNECTION_WINDOW, STREAM_WINDOW, http_uri};
use tonic::body::Body;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tower::ServiceExt;

use crate::error::{Error, Result};
use crate::runtime::is_this_process;

/// Largest HTTP/2 frame the client accepts: the most HTTP/2 allows, so a
/// server that sends a message in large frames (the Arrow C++ server, up to
/// 4 MiB) is never asked to cut it smaller (hyper's client default is 16 KiB).
const MAX_FRAME_SIZE: u32 = (1 << 24) - 1;

/// How calls are made: the settings every connection shares.
#[derive(Debug)]
pub(crate) struct Settings {
    /// PEM of the CA certificates that verify `grpc+tls` servers.
    pub(crate) tls_root_certs: Option<Vec<u8>>,
    /// PEM of a client certificate and its key, for mutual TLS.
    pub(crate) identity: Option<(Vec<u8>, Vec<u8>)>,
    /// The name to verify the server's certificate against, if not the host.
    pub(crate) override_hostname: Option<String>,
    /// Headers every call sends (`authorization`, ...).
    pub(crate) headers: HeaderMap,
    /// How long each call may take.
    pub(crate) timeout: Option<Duration>,
    /// Largest message accepted from a server.
    pub(crate) max_message_size: usize,
}

/// The connections of one client: settings and idle HTTP/2 connections by URI.
///
/// A connection carries one data stream at a time: parallel endpoints on the
/// same server get connections of their own, as pyarrow's clients do in the
/// benchmarks, so each has its own TCP flow control and reading task.
#[derive(Debug)]
pub(crate) struct Connections {
    settings: Settings,
    pid: u32,
    idle: Mutex<HashMap<String, Vec<Channel>>>,
}

impl Connections {
    pub(crate) fn new(settings: Settings) -> Self {
        Self {
            settings,
            pid: std::process::id(),
            idle: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// An idle connection to `location`, or a new one.
    pub(crate) async fn take(&self, location: &str) -> Result<Channel> {
        if is_this_process(self.pid) {
            let idle = self
                .idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_mut(location)
                .and_then(Vec::pop);
            if let Some(channel) = idle {
                return Ok(channel);
            }
        }
        self.connect(location).await
    }

    /// Gives back a connection whose call ended well, for the next call.
    pub(crate) fn give_back(&self, location: &str, channel: Channel) {
        if is_this_process(self.pid) {
            self.idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(location.to_string())
                .or_default()
                .push(channel);
        }
    }

    /// The locations with a connection waiting for the next call, sorted.
    pub(crate) fn locations(&self) -> Vec<String> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let mut locations: Vec<String> = idle
            .iter()
            .filter(|(_, channels)| !channels.is_empty())
            .map(|(location, _)| location.clone())
            .collect();
        locations.sort();
        locations
    }

    async fn connect(&self, location: &str) -> Result<Channel> {
        let fail = |message: String| Error::Connect {
            location: location.to_string(),
            message,
        };
        let uri = http_uri(location).map_err(Error::Invalid)?;
        let tls = uri.starts_with("https://");
        let mut endpoint = Endpoint::from_shared(uri)
            .map_err(|e| Error::Invalid(format!("{location}: not a valid location: {e}")))?
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_frame_size(MAX_FRAME_SIZE);
        if tls {
            let mut config = ClientTlsConfig::new();
            let ca = self.settings.tls_root_certs.as_ref().ok_or_else(|| {
                Error::Invalid(format!(
                    "{location}: give tls_root_certs, the CA certificates that verify the server"
                ))
            })?;
            config = config.ca_certificate(Certificate::from_pem(ca));
            if let Some((cert, key)) = &self.settings.identity {
                config = config.identity(Identity::from_pem(cert, key));
            }
            if let Some(name) = &self.settings.override_hostname {
                config = config.domain_name(name.clone());
            }
            endpoint = endpoint
                .tls_config(config)
                .map_err(|e| fail(format!("TLS: {e}")))?;
        }
        quiver_wire::coalesce::connect(&endpoint)
            .await
            .map_err(|e| fail(quiver_wire::with_causes(&e)))
    }

    /// Sends a gRPC request to `path` with `body`, and returns the response
    /// once its headers have arrived (an error status in them is returned as
    /// the error).
    pub(crate) async fn call(
        &self,
        channel: Channel,
        path: &'static str,
        body: Body,
    ) -> Result<http::Response<Body>> {
        let mut request = http::Request::builder()
            .method(http::Method::POST)
            .uri(path)
            .body(body)
            .map_err(|e| Error::Internal(e.to_string()))?;
        let headers = request.headers_mut();
        headers.extend(self.settings.headers.clone());
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
        if let Some(timeout) = self.settings.timeout {
            headers.insert(
                HeaderName::from_static("grpc-timeout"),
                HeaderValue::from_str(&format!("{}m", timeout.as_millis().max(1)))
                    .map_err(|e| Error::Internal(e.to_string()))?,
            );
        }
        let send = channel.oneshot(request);
        let response = match self.settings.timeout {
            Some(timeout) => tokio::time::timeout(timeout, send).await.map_err(|_| {
                tonic::Status::deadline_exceeded("the call took longer than its timeout")
            })?,
            None => send.await,
        }
        .map_err(|e| tonic::Status::unavailable(quiver_wire::with_causes(&e)))?;
        if let Some(status) = tonic::Status::from_header_map(response.headers())
            && status.code() != tonic::Code::Ok
        {
            return Err(status.into());
        }
        if response.status() != http::StatusCode::OK {
            return Err(tonic::Status::unknown(format!(
                "the server answered HTTP {} instead of a gRPC response",
                response.status()
            ))
            .into());
        }
        Ok(response)
    }
}

/// The outcome a response's trailers give: the call's status, which a gRPC
/// response must end with (in its headers, if it sent nothing else). A stream
/// that ends without one stopped early: UNAVAILABLE, as a lost connection is.
pub(crate) fn end_status(trailers: Option<&HeaderMap>, in_headers: bool) -> Result<()> {
    match trailers.and_then(tonic::Status::from_header_map) {
        Some(status) if status.code() == tonic::Code::Ok => Ok(()),
        Some(status) => Err(status.into()),
        None if in_headers => Ok(()),
        None => Err(tonic::Status::unavailable(
            "the response ended without a gRPC status: the server or the connection stopped early",
        )
        .into()),
    }
}

/// Whether a response's headers carry the call's status (a trailers-only
/// response; an error status there is refused by [`Connections::call`]).
pub(crate) fn status_in_headers(response: &http::Response<Body>) -> bool {
    response.headers().contains_key("grpc-status")
}

/// The status of a response body that failed to arrive: the connection broke
/// (a server gone, a reset) rather than the server ending the call with a
/// status, so a code tonic could not tell is UNAVAILABLE, as gRPC reports a
/// lost connection and callers fail over on.
pub(crate) fn transport_failure(status: tonic::Status) -> Error {
    if status.code() == tonic::Code::Unknown {
        tonic::Status::unavailable(format!("the connection broke: {}", status.message())).into()
    } else {
        status.into()
    }
}

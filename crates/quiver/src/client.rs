//! Connecting to a quiver server (or any Flight server) from the CLI.

use std::sync::OnceLock;

use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{FlightClient, HandshakeRequest};
use base64::Engine as _;
use futures::StreamExt;
use quiver_flight::server::{
    DEFAULT_CONNECTION_WINDOW, DEFAULT_MAX_FRAME_SIZE, DEFAULT_STREAM_WINDOW,
};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::cli::ClientAuthArgs;

/// How the client commands connect, from the flags: set once in `main`.
static SETTINGS: OnceLock<ClientSettings> = OnceLock::new();

/// The bearer token one Handshake gave: every connection of this process
/// (the parallel endpoint fetches too) sends it, so the password is checked once.
static BEARER: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();

/// TLS and credentials of the client commands (no `Debug`: it holds a password).
#[derive(Default)]
struct ClientSettings {
    tls_ca: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
    login: Option<(String, String)>,
    token: Option<String>,
}

fn read_pem(flag: &str, path: &std::path::Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{flag} {}: {e}", path.display()))
}

/// Reads the files the client flags name; call once, before connecting.
pub(crate) fn configure(args: &ClientAuthArgs) -> Result<(), String> {
    let login = match (&args.user, &args.password) {
        (Some(user), Some(password)) => Some((user.clone(), password.clone())),
        (Some(user), None) => {
            return Err(format!(
                "--user {user}: set the password in QUIVER_PASSWORD"
            ));
        }
        _ => None,
    };
    let identity = match (&args.client_cert, &args.client_key) {
        (Some(cert), Some(key)) => Some((
            read_pem("--client-cert", cert)?,
            read_pem("--client-key", key)?,
        )),
        _ => None,
    };
    let settings = ClientSettings {
        tls_ca: args
            .tls_ca
            .as_deref()
            .map(|p| read_pem("--tls-ca", p))
            .transpose()?,
        identity,
        login,
        token: args.token.clone(),
    };
    SETTINGS
        .set(settings)
        .map_err(|_| "client settings configured twice".to_string())
}

/// The Handshake with basic credentials: the bearer token the server returns.
async fn handshake(
    inner: &mut FlightServiceClient<Channel>,
    user: &str,
    password: &str,
) -> Result<String, String> {
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let mut request = tonic::Request::new(futures::stream::iter([HandshakeRequest::default()]));
    let value: tonic::metadata::AsciiMetadataValue = format!("Basic {basic}")
        .parse()
        .map_err(|_| "the user name or password cannot be sent in a header".to_string())?;
    request.metadata_mut().insert("authorization", value);
    let response = inner
        .handshake(request)
        .await
        .map_err(|s| format!("login as {user}: {:?}: {}", s.code(), s.message()))?;
    let token = response
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string)
        .ok_or_else(|| format!("login as {user}: the server returned no bearer token"))?;
    let mut replies = response.into_inner();
    while let Some(reply) = replies.next().await {
        reply.map_err(|s| format!("login as {user}: {:?}: {}", s.code(), s.message()))?;
    }
    Ok(token)
}

/// Largest message the CLI accepts from a server: 1 GiB, as the server.
const MAX_MESSAGE_SIZE: usize = 1 << 30;

/// The `http://` URI tonic connects to for a Flight location.
pub(crate) fn http_uri(location: &str) -> Result<String, String> {
    let (scheme, rest) = match location.split_once("://") {
        Some((scheme, rest)) => (scheme, rest),
        None => ("grpc+tcp", location),
    };
    match scheme {
        "grpc" | "grpc+tcp" | "http" => Ok(format!("http://{rest}")),
        "grpc+tls" | "https" => Ok(format!("https://{rest}")),
        other => Err(format!(
            "{location}: unsupported scheme {other:?} (use grpc+tcp://HOST:PORT)"
        )),
    }
}

/// Whether an endpoint location means "the server you asked": none given, or
/// Flight's reuse-connection location.
pub(crate) fn is_same_server(location: &str, server: &str) -> bool {
    location.is_empty()
        || location.starts_with("arrow-flight-reuse-connection:")
        || location == server
}

/// A connected Flight client.
pub(crate) async fn connect(location: &str) -> Result<FlightClient, Box<dyn std::error::Error>> {
    let settings = SETTINGS.get_or_init(ClientSettings::default);
    let uri = http_uri(location)?;
    let tls = uri.starts_with("https://");
    // The HTTP/2 settings the server advertises, for what this client
    // receives: hyper's client defaults are 16 KiB frames and a 2 MiB window.
    let mut endpoint = Endpoint::from_shared(uri)?
        .tcp_nodelay(true)
        .initial_stream_window_size(DEFAULT_STREAM_WINDOW)
        .initial_connection_window_size(DEFAULT_CONNECTION_WINDOW)
        .max_frame_size(DEFAULT_MAX_FRAME_SIZE);
    if tls {
        let ca = settings.tls_ca.as_ref().ok_or_else(|| {
            format!("{location}: give the CA certificate that verifies the server (--tls-ca)")
        })?;
        let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
        if let Some((cert, key)) = &settings.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        endpoint = endpoint.tls_config(config)?;
    }
    let channel: Channel = endpoint
        .connect()
        .await
        .map_err(|e| format!("cannot connect to {location}: {e}"))?;
    let mut inner = FlightServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_SIZE)
        .max_encoding_message_size(MAX_MESSAGE_SIZE);
    let bearer = match (&settings.token, &settings.login) {
        (Some(token), _) => Some(token.clone()),
        (None, Some((user, password))) => Some(
            BEARER
                .get_or_try_init(|| handshake(&mut inner, user, password))
                .await?
                .clone(),
        ),
        (None, None) => None,
    };
    let mut client = FlightClient::new_from_inner(inner);
    if let Some(token) = bearer {
        client.add_header("authorization", &format!("Bearer {token}"))?;
    }
    Ok(client)
}

/// A Flight error as a person should read it: the server's status code and message.
pub(crate) fn describe(e: FlightError) -> String {
    match e {
        FlightError::Tonic(status) => format!("{:?}: {}", status.code(), status.message()),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_to_uris() {
        assert_eq!(
            http_uri("grpc+tcp://127.0.0.1:8815").unwrap(),
            "http://127.0.0.1:8815"
        );
        assert_eq!(http_uri("localhost:1").unwrap(), "http://localhost:1");
        assert_eq!(http_uri("grpc+tls://h:1").unwrap(), "https://h:1");
        assert!(http_uri("ftp://h:1").is_err());
    }
}

//! Connecting to a quiver server (or any Flight server) from the CLI: a
//! [`Connector`] built once from the client flags and handed to whatever
//! connects.

use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{FlightClient, HandshakeRequest};
use base64::Engine as _;
use futures::StreamExt;
use quiver_flight::server::{
    DEFAULT_CONNECTION_WINDOW, DEFAULT_MAX_FRAME_SIZE, DEFAULT_MAX_MESSAGE_SIZE,
    DEFAULT_STREAM_WINDOW,
};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// The server the client commands talk to unless told otherwise.
pub(crate) const DEFAULT_SERVER: &str = "grpc+tcp://127.0.0.1:8815";

/// What a client proves itself with.
pub(crate) enum Credentials {
    /// Nothing: the server has no users file.
    None,
    /// A bearer token sent as it is (an API token, or one a Handshake gave).
    Token(String),
    /// A user and password, exchanged once in a Handshake for a bearer token.
    Login {
        /// The user's name.
        user: String,
        /// The user's password.
        password: String,
    },
}

/// How the client commands reach servers: the server they name, the TLS
/// material, the credentials, and the bearer token a Handshake gave. Every
/// connection it opens (the parallel endpoint fetches too) sends that token,
/// so a password is checked once.
pub(crate) struct Connector {
    server: String,
    tls_ca: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
    credentials: Credentials,
    bearer: tokio::sync::OnceCell<String>,
}

/// Says which settings are there, never a secret.
impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let credentials = match &self.credentials {
            Credentials::None => "none",
            Credentials::Token(_) => "token",
            Credentials::Login { .. } => "login",
        };
        f.debug_struct("Connector")
            .field("server", &self.server)
            .field("tls_ca", &self.tls_ca.is_some())
            .field("identity", &self.identity.is_some())
            .field("credentials", &credentials)
            .finish_non_exhaustive()
    }
}

impl Connector {
    /// A connector to `server`; `tls_ca` verifies grpc+tls:// servers,
    /// `identity` (certificate and key, PEM) is shown to servers that want
    /// mutual TLS.
    pub(crate) fn new(
        server: String,
        tls_ca: Option<Vec<u8>>,
        identity: Option<(Vec<u8>, Vec<u8>)>,
        credentials: Credentials,
    ) -> Self {
        Self {
            server,
            tls_ca,
            identity,
            credentials,
            bearer: tokio::sync::OnceCell::new(),
        }
    }

    /// The server the commands talk to (`--server`).
    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// A Flight client connected to `location` (the server, or an endpoint's
    /// location), with this connector's TLS and credentials.
    pub(crate) async fn connect(
        &self,
        location: &str,
    ) -> Result<FlightClient, Box<dyn std::error::Error>> {
        let uri = quiver_wire::http2::http_uri(location)?;
        let tls = uri.starts_with("https://");
        // The HTTP/2 settings the server advertises, for what this client
        // receives: hyper's client defaults are 16 KiB frames and a 2 MiB window.
        let mut endpoint = Endpoint::from_shared(uri)?
            .tcp_nodelay(true)
            .initial_stream_window_size(DEFAULT_STREAM_WINDOW)
            .initial_connection_window_size(DEFAULT_CONNECTION_WINDOW)
            .max_frame_size(DEFAULT_MAX_FRAME_SIZE);
        if tls {
            let ca = self.tls_ca.as_ref().ok_or_else(|| {
                format!("{location}: give the CA certificate that verifies the server (--tls-ca)")
            })?;
            let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
            if let Some((cert, key)) = &self.identity {
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
        let bearer = match &self.credentials {
            Credentials::None => None,
            Credentials::Token(token) => Some(token.clone()),
            Credentials::Login { user, password } => Some(
                self.bearer
                    .get_or_try_init(|| handshake(&mut inner, user, password))
                    .await?
                    .clone(),
            ),
        };
        let mut client = FlightClient::new_from_inner(inner);
        if let Some(token) = bearer {
            client.add_header("authorization", &format!("Bearer {token}"))?;
        }
        Ok(client)
    }

    /// A Flight client connected to the server the commands talk to.
    pub(crate) async fn connect_server(&self) -> Result<FlightClient, Box<dyn std::error::Error>> {
        self.connect(&self.server).await
    }
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

/// Largest message the CLI accepts from a server or sends: the server's default.
const MAX_MESSAGE_SIZE: usize = DEFAULT_MAX_MESSAGE_SIZE;

/// Whether an endpoint location means "the server you asked": none given, or
/// Flight's reuse-connection location.
pub(crate) fn is_same_server(location: &str, server: &str) -> bool {
    location.is_empty()
        || location.starts_with("arrow-flight-reuse-connection:")
        || location == server
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
    fn a_connector_shows_no_secret() {
        let login = Credentials::Login {
            user: "ann".into(),
            password: "hunter2".into(),
        };
        let connector = Connector::new(DEFAULT_SERVER.into(), None, None, login);
        let shown = format!("{connector:?}");
        assert!(
            shown.contains("login") && !shown.contains("hunter2"),
            "{shown}"
        );
        assert_eq!(connector.server(), DEFAULT_SERVER);
    }
}

//! Connecting to a quiver server (or any Flight server) from the CLI: a
//! [`Connector`] built once from the client flags and handed to whatever
//! connects, and the DoGet of an endpoint from the first of its locations
//! that can be reached ([`Connector::do_get`]).

use arrow_flight::decode::{DecodedPayload, FlightRecordBatchStream};
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{FlightClient, FlightEndpoint, HandshakeRequest, Ticket};
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
        self.try_connect(location).await.map_err(Into::into)
    }

    async fn try_connect(&self, location: &str) -> Result<FlightClient, ConnectError> {
        let uri = quiver_wire::http2::http_uri(location).map_err(ConnectError::other)?;
        let tls = uri.starts_with("https://");
        // The HTTP/2 settings the server advertises, for what this client
        // receives: hyper's client defaults are 16 KiB frames and a 2 MiB window.
        let mut endpoint = Endpoint::from_shared(uri)
            .map_err(ConnectError::other)?
            .initial_stream_window_size(DEFAULT_STREAM_WINDOW)
            .initial_connection_window_size(DEFAULT_CONNECTION_WINDOW)
            .max_frame_size(DEFAULT_MAX_FRAME_SIZE);
        if tls {
            let ca = self.tls_ca.as_ref().ok_or_else(|| {
                ConnectError::Other(format!(
                    "{location}: give the CA certificate that verifies the server (--tls-ca)"
                ))
            })?;
            let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
            if let Some((cert, key)) = &self.identity {
                config = config.identity(Identity::from_pem(cert, key));
            }
            endpoint = endpoint.tls_config(config).map_err(ConnectError::other)?;
        }
        let channel: Channel = quiver_wire::coalesce::connect(&endpoint)
            .await
            .map_err(|e| ConnectError::Unreachable {
                location: location.to_string(),
                message: e.to_string(),
            })?;
        let mut inner = FlightServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE);
        let bearer = match &self.credentials {
            Credentials::None => None,
            Credentials::Token(token) => Some(token.clone()),
            Credentials::Login { user, password } => Some(
                self.bearer
                    .get_or_try_init(|| handshake(&mut inner, user, password))
                    .await
                    .map_err(ConnectError::Other)?
                    .clone(),
            ),
        };
        let mut client = FlightClient::new_from_inner(inner);
        if let Some(token) = bearer {
            client
                .add_header("authorization", &format!("Bearer {token}"))
                .map_err(ConnectError::other)?;
        }
        Ok(client)
    }

    /// A Flight client connected to the server the commands talk to.
    pub(crate) async fn connect_server(&self) -> Result<FlightClient, Box<dyn std::error::Error>> {
        self.connect(&self.server).await
    }
}

impl Connector {
    /// Starts a DoGet of `endpoint` at the first of its locations that
    /// answers, and returns its batches once the stream's schema has arrived.
    ///
    /// The locations are tried in order; one that names the server the
    /// commands talk to (or an endpoint that lists none) means that server. A
    /// location that cannot be reached before the schema arrives (no
    /// connection, or UNAVAILABLE: the rule the Python client's reads fail
    /// over by) passes the call to the next; any other error (NOT_FOUND,
    /// ABORTED, a refused login) is returned at once. When no location can be
    /// reached, the last one's status is returned, its message naming the
    /// locations tried.
    pub(crate) async fn do_get(
        &self,
        endpoint: &FlightEndpoint,
    ) -> Result<FlightRecordBatchStream, FlightError> {
        let ticket = endpoint
            .ticket
            .clone()
            .ok_or_else(|| FlightError::protocol("endpoint without a ticket"))?;
        let locations = endpoint_locations(endpoint, self.server());
        let mut last = None;
        for location in &locations {
            match self.do_get_at(location, ticket.clone()).await {
                Err(FlightError::Tonic(status)) if status.code() == tonic::Code::Unavailable => {
                    last = Some(status);
                }
                done => return done,
            }
        }
        let last = last.unwrap_or_else(|| Box::new(tonic::Status::unavailable("no location")));
        Err(FlightError::Tonic(Box::new(tonic::Status::with_details(
            last.code(),
            format!(
                "{} (locations tried: {})",
                last.message(),
                locations.join(", ")
            ),
            last.details().to_vec().into(),
        ))))
    }

    /// Starts a DoGet of `ticket` at `location` and waits for the schema. A
    /// location that cannot be connected to is UNAVAILABLE.
    async fn do_get_at(
        &self,
        location: &str,
        ticket: Ticket,
    ) -> Result<FlightRecordBatchStream, FlightError> {
        let mut client = self.try_connect(location).await.map_err(|e| match e {
            ConnectError::Unreachable { .. } => tonic::Status::unavailable(e.to_string()).into(),
            ConnectError::Other(e) => FlightError::ExternalError(e.into()),
        })?;
        let mut decoder = client.do_get(ticket).await?.into_inner();
        while let Some(message) = decoder.next().await {
            match message?.payload {
                DecodedPayload::Schema(_) => break,
                DecodedPayload::None => {}
                DecodedPayload::RecordBatch(_) => {
                    return Err(FlightError::protocol("a record batch before the schema"));
                }
            }
        }
        // A stream that ended well before any schema is an empty one (errors
        // came as items): read as such, as before.
        Ok(FlightRecordBatchStream::new(decoder))
    }
}

/// Why [`Connector::connect`] failed.
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    /// No connection could be made to the location.
    #[error("cannot connect to {location}: {message}")]
    Unreachable {
        /// The location asked for.
        location: String,
        /// What the transport said.
        message: String,
    },
    /// Anything else: a location that is not one, the TLS settings, a
    /// refused login.
    #[error("{0}")]
    Other(String),
}

impl ConnectError {
    fn other(e: impl std::fmt::Display) -> Self {
        Self::Other(e.to_string())
    }
}

/// The locations to read `endpoint` from, in the order to try them: `server`
/// for one that means it (see [`is_same_server`]) and for an endpoint that
/// lists none.
fn endpoint_locations(endpoint: &FlightEndpoint, server: &str) -> Vec<String> {
    let mut locations: Vec<String> = Vec::new();
    for location in &endpoint.location {
        let uri = if is_same_server(&location.uri, server) {
            server
        } else {
            &location.uri
        };
        if !locations.iter().any(|l| l == uri) {
            locations.push(uri.to_string());
        }
    }
    if locations.is_empty() {
        locations.push(server.to_string());
    }
    locations
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

    #[test]
    fn an_endpoint_is_read_from_its_locations_in_order() {
        let server = "grpc+tcp://127.0.0.1:8815";
        let endpoint = |locations: &[&str]| {
            let endpoint = FlightEndpoint::new().with_ticket(Ticket::new("t"));
            locations.iter().fold(endpoint, |e, l| e.with_location(*l))
        };
        // No location, or Flight's reuse-connection one: the server asked.
        assert_eq!(endpoint_locations(&endpoint(&[]), server), [server]);
        let reuse = "arrow-flight-reuse-connection://?";
        assert_eq!(endpoint_locations(&endpoint(&[reuse]), server), [server]);
        // The order given, each location once.
        let (a, b) = ("grpc+tcp://127.0.0.2:1", "grpc+tcp://127.0.0.2:2");
        assert_eq!(
            endpoint_locations(&endpoint(&[a, server, b, a, reuse]), server),
            [a, server, b]
        );
    }

    /// DoGet from in-process Flight servers: a dead location, replicas that
    /// serve the ticket, and replicas that answer with an error status.
    mod failover {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};

        use arrow::array::{ArrayRef, Int64Array};
        use arrow::record_batch::RecordBatch;
        use arrow_flight::encode::FlightDataEncoderBuilder;
        use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
        use arrow_flight::{
            Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
            HandshakeResponse, PollInfo, PutResult, SchemaResult,
        };
        use futures::TryStreamExt;
        use futures::stream::BoxStream;
        use tonic::{Code, Request, Response, Status, Streaming};

        use super::*;

        /// What a replica answers a DoGet with.
        #[derive(Clone, Copy, Debug)]
        enum Answer {
            /// The batch of [`batch`].
            Serve,
            /// An error status of this code.
            Fail(Code),
        }

        #[derive(Debug)]
        struct Replica {
            answer: Answer,
            calls: Arc<AtomicUsize>,
        }

        /// A replica on a free loopback port: its location and the DoGets it received.
        async fn replica(answer: Answer) -> (String, Arc<AtomicUsize>) {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let location = format!("grpc+tcp://{}", listener.local_addr().expect("address"));
            let calls = Arc::new(AtomicUsize::new(0));
            let replica = Replica {
                answer,
                calls: Arc::clone(&calls),
            };
            let incoming = futures::stream::unfold(listener, |listener| async move {
                Some((listener.accept().await.map(|(s, _)| s), listener))
            });
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(FlightServiceServer::new(replica))
                    .serve_with_incoming(incoming),
            );
            (location, calls)
        }

        /// A location on 127.0.0.2 that nobody listens on (a port just freed).
        fn dead() -> String {
            let socket = std::net::TcpListener::bind("127.0.0.2:0").expect("bind");
            let port = socket.local_addr().expect("address").port();
            format!("grpc+tcp://127.0.0.2:{port}")
        }

        fn batch() -> RecordBatch {
            let x: ArrayRef = Arc::new(Int64Array::from_iter_values(0..10));
            RecordBatch::try_from_iter([("x", x)]).expect("batch")
        }

        /// The batches of a DoGet of an endpoint listing `locations`.
        async fn read(locations: &[&str]) -> Result<Vec<RecordBatch>, FlightError> {
            let connector = Connector::new(DEFAULT_SERVER.into(), None, None, Credentials::None);
            let endpoint = FlightEndpoint::new().with_ticket(Ticket::new("t"));
            let endpoint = locations.iter().fold(endpoint, |e, l| e.with_location(*l));
            connector.do_get(&endpoint).await?.try_collect().await
        }

        fn status(e: FlightError) -> tonic::Status {
            match e {
                FlightError::Tonic(status) => *status,
                other => panic!("not a status: {other}"),
            }
        }

        #[tokio::test]
        async fn an_unreachable_location_passes_the_read_to_the_next() {
            let (live, calls) = replica(Answer::Serve).await;
            let (decoy, decoy_calls) = replica(Answer::Serve).await;
            let got = read(&[&dead(), &live, &decoy]).await.expect("read");
            assert_eq!(got, [batch()]);
            assert_eq!(calls.load(Ordering::SeqCst), 1);
            assert_eq!(decoy_calls.load(Ordering::SeqCst), 0, "read once, in order");
        }

        #[tokio::test]
        async fn unavailable_before_the_schema_passes_the_read_to_the_next() {
            let (down, down_calls) = replica(Answer::Fail(Code::Unavailable)).await;
            let (live, calls) = replica(Answer::Serve).await;
            assert_eq!(read(&[&down, &live]).await.expect("read"), [batch()]);
            assert_eq!(down_calls.load(Ordering::SeqCst), 1);
            assert_eq!(calls.load(Ordering::SeqCst), 1);
        }

        #[tokio::test]
        async fn other_errors_are_the_reads_at_once() {
            for code in [Code::NotFound, Code::Aborted, Code::PermissionDenied] {
                let (failing, _) = replica(Answer::Fail(code)).await;
                let (live, calls) = replica(Answer::Serve).await;
                let e = status(read(&[&failing, &live]).await.expect_err("fails"));
                assert_eq!(e.code(), code);
                assert!(!e.message().contains("locations tried"), "{}", e.message());
                assert_eq!(calls.load(Ordering::SeqCst), 0, "{code:?} was retried");
            }
        }

        #[tokio::test]
        async fn when_no_location_answers_the_last_error_names_them_all() {
            let first = dead();
            let (down, _) = replica(Answer::Fail(Code::Unavailable)).await;
            let e = status(read(&[&first, &down]).await.expect_err("fails"));
            assert_eq!(e.code(), Code::Unavailable);
            assert_eq!(
                e.message(),
                format!("replica down (locations tried: {first}, {down})")
            );
            let only = dead();
            let e = status(read(&[&only]).await.expect_err("fails"));
            assert_eq!(e.code(), Code::Unavailable);
            let message = e.message();
            assert!(
                message.starts_with(&format!("cannot connect to {only}: ")),
                "{message}"
            );
            assert!(
                message.ends_with(&format!("(locations tried: {only})")),
                "{message}"
            );
        }

        type Stream<T> = BoxStream<'static, Result<T, Status>>;

        fn unimplemented<T>() -> Result<T, Status> {
            Err(Status::unimplemented("not in the test's replica"))
        }

        #[tonic::async_trait]
        impl FlightService for Replica {
            type HandshakeStream = Stream<HandshakeResponse>;
            type ListFlightsStream = Stream<FlightInfo>;
            type DoGetStream = Stream<FlightData>;
            type DoPutStream = Stream<PutResult>;
            type DoActionStream = Stream<arrow_flight::Result>;
            type ListActionsStream = Stream<ActionType>;
            type DoExchangeStream = Stream<FlightData>;

            async fn do_get(
                &self,
                _: Request<arrow_flight::Ticket>,
            ) -> Result<Response<Self::DoGetStream>, Status> {
                self.calls.fetch_add(1, Ordering::SeqCst);
                match self.answer {
                    Answer::Serve => {
                        let batches = futures::stream::iter([Ok(batch())]);
                        let stream = FlightDataEncoderBuilder::new()
                            .build(batches)
                            .map_err(Status::from);
                        Ok(Response::new(stream.boxed()))
                    }
                    Answer::Fail(Code::Unavailable) => Err(Status::unavailable("replica down")),
                    Answer::Fail(code) => Err(Status::new(code, "the replica refuses")),
                }
            }
            async fn handshake(
                &self,
                _: Request<Streaming<arrow_flight::HandshakeRequest>>,
            ) -> Result<Response<Self::HandshakeStream>, Status> {
                unimplemented()
            }
            async fn list_flights(
                &self,
                _: Request<Criteria>,
            ) -> Result<Response<Self::ListFlightsStream>, Status> {
                unimplemented()
            }
            async fn get_flight_info(
                &self,
                _: Request<FlightDescriptor>,
            ) -> Result<Response<FlightInfo>, Status> {
                unimplemented()
            }
            async fn poll_flight_info(
                &self,
                _: Request<FlightDescriptor>,
            ) -> Result<Response<PollInfo>, Status> {
                unimplemented()
            }
            async fn get_schema(
                &self,
                _: Request<FlightDescriptor>,
            ) -> Result<Response<SchemaResult>, Status> {
                unimplemented()
            }
            async fn do_put(
                &self,
                _: Request<Streaming<FlightData>>,
            ) -> Result<Response<Self::DoPutStream>, Status> {
                unimplemented()
            }
            async fn do_action(
                &self,
                _: Request<Action>,
            ) -> Result<Response<Self::DoActionStream>, Status> {
                unimplemented()
            }
            async fn list_actions(
                &self,
                _: Request<Empty>,
            ) -> Result<Response<Self::ListActionsStream>, Status> {
                unimplemented()
            }
            async fn do_exchange(
                &self,
                _: Request<Streaming<FlightData>>,
            ) -> Result<Response<Self::DoExchangeStream>, Status> {
                unimplemented()
            }
        }
    }
}

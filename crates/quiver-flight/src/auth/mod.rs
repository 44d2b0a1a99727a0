//! Authentication and roles.
//!
//! [`AuthLayer`] sits below tonic and in front of the direct wire paths, so
//! every RPC passes it: it checks the `authorization` header and puts the
//! [`Caller`] it names into the request's extensions, or answers
//! `UNAUTHENTICATED` itself. The Handshake is the one RPC that takes a
//! password (`authorization: Basic ...`); it answers with a signed, expiring
//! bearer token in its `authorization` response header (the convention of
//! pyarrow's `authenticate_basic_token`, ADBC and the JDBC driver). Every other
//! RPC carries `authorization: Bearer ...`: such a token, or a static API token
//! from the users file.
//!
//! What a caller may do depends on its [`Role`]; handlers check it with
//! [`Caller::require`] where the operation becomes known (a DoPut's descriptor,
//! an action's type, a SQL statement's plan). Without `--users` the layer puts
//! an unrestricted caller into every request, so handlers check the same way
//! either way, and a request that somehow skipped the layer is refused.
//!
//! On a cluster node the layer first looks for another node's signature
//! ([`NODE_HEADER`], `node.rs`): a valid one makes the caller [`Role::Node`],
//! a bad one is refused, and without one the cluster's internal services
//! ([`Nodes::internal`]) are refused.

mod node;
mod token;
mod users;

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use futures::future::BoxFuture;
use quiver_sql::Effect;
use serde::{Deserialize, Serialize};
use tonic::Status;
use tonic::body::Body;
use tower::{Layer, Service};

pub use node::{MAX_SKEW, NODE_HEADER, NodeKey, validate_node_id};
pub use token::{Claims, TOKEN_PREFIX, TokenSigner};
pub use users::{
    API_TOKEN_PREFIX, ApiTokenEntry, UserEntry, UsersFile, api_token_digest, hash_password,
    verify_password,
};

use crate::{Error, Result};

/// The HTTP/2 path of Flight's Handshake.
pub const HANDSHAKE_PATH: &str = "/arrow.flight.protocol.FlightService/Handshake";

/// Default lifetime of a token the Handshake gives out: 12 hours.
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(12 * 3600);

/// What a user or token may do; each role may do all the one before it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// List, describe and read tables; run SQL queries.
    Read,
    /// Also put, append, rename and delete tables; SQL that changes tables.
    Write,
    /// Also SQL that reaches the server's files (`CREATE EXTERNAL TABLE`).
    Admin,
    /// A cluster node, proven by [`NodeKey`]: also what the cluster does
    /// between its nodes (storing partitions, running SQL stages). No user
    /// or token has it.
    #[serde(skip)]
    Node,
}

impl Role {
    /// The SQL statements this role may run.
    pub fn effect(self) -> Effect {
        match self {
            Self::Read => Effect::Read,
            Self::Write => Effect::Write,
            Self::Admin | Self::Node => Effect::ServerFiles,
        }
    }

    /// The least role that may run statements of `effect`.
    pub fn for_effect(effect: Effect) -> Self {
        match effect {
            Effect::Read => Self::Read,
            Effect::Write => Self::Write,
            Effect::ServerFiles => Self::Admin,
        }
    }

    fn code(self) -> u8 {
        match self {
            Self::Read => 1,
            Self::Write => 2,
            Self::Admin => 3,
            Self::Node => 4,
        }
    }

    /// The role a signed token carries: never [`Role::Node`].
    fn from_code(code: u8) -> Option<Self> {
        [Self::Read, Self::Write, Self::Admin]
            .into_iter()
            .find(|r| r.code() == code)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Admin => "admin",
            Self::Node => "node",
        })
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "read" => Ok(Self::Read),
            "write" => Ok(Self::Write),
            "admin" => Ok(Self::Admin),
            other => Err(format!(
                "unknown role {other:?}: expected read, write or admin"
            )),
        }
    }
}

/// Who made a request, as [`AuthLayer`] established it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The user's name (or `token:NAME` for an API token); empty when
    /// authentication is off.
    pub name: Arc<str>,
    /// What the caller may do.
    pub role: Role,
}

impl Caller {
    /// The caller of every request when authentication is off: may do anything.
    pub fn unrestricted() -> Self {
        Self {
            name: Arc::from(""),
            role: Role::Admin,
        }
    }

    /// The caller of a request, from its extensions; a request that did not
    /// pass [`AuthLayer`] has none and is refused.
    pub(crate) fn of(extensions: &http::Extensions) -> Result<Self> {
        extensions
            .get::<Self>()
            .cloned()
            .ok_or_else(|| Error::Unauthenticated("the request was not authenticated".into()))
    }

    /// Ok if the caller's role is at least `needed`; else `PERMISSION_DENIED`
    /// saying what was refused (`what`, e.g. "DoPut of a table").
    pub(crate) fn require(&self, needed: Role, what: &str) -> Result<()> {
        if self.role >= needed {
            return Ok(());
        }
        Err(Error::PermissionDenied(format!(
            "user '{}' has the {} role; {what} needs the {needed} role",
            self.name, self.role
        )))
    }
}

/// A user of the users file, ready to check a password against.
#[derive(Debug)]
struct User {
    role: Role,
    hash: String,
}

/// Checks credentials: passwords of users, bearer tokens, API tokens.
#[derive(Debug)]
pub struct Authenticator {
    users: HashMap<String, User>,
    /// API tokens by the SHA-256 of the token: (name, role).
    api_tokens: HashMap<String, (String, Role)>,
    signer: TokenSigner,
    ttl: Duration,
    /// Checked against when the user does not exist, so a wrong name costs
    /// the same time as a wrong password.
    decoy_hash: String,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Authenticator {
    /// Credentials from `users`, tokens signed by `signer` that live `ttl`.
    pub fn new(users: UsersFile, signer: TokenSigner, ttl: Duration) -> Result<Self> {
        Ok(Self {
            users: users
                .users
                .into_iter()
                .map(|(name, u)| {
                    (
                        name,
                        User {
                            role: u.role,
                            hash: u.password,
                        },
                    )
                })
                .collect(),
            api_tokens: users
                .tokens
                .into_iter()
                .map(|(name, t)| (t.sha256.to_ascii_lowercase(), (name, t.role)))
                .collect(),
            signer,
            ttl,
            decoy_hash: hash_password("quiver decoy password")?,
        })
    }

    /// Checks `user`'s `password` (slow by design: argon2) and gives a token.
    pub fn login(&self, user: &str, password: &str) -> Result<(Caller, String)> {
        let found = self.users.get(user);
        let hash = found.map_or(self.decoy_hash.as_str(), |u| u.hash.as_str());
        let matches = verify_password(password, hash);
        match found {
            Some(u) if matches => {
                let expires = unix_now().saturating_add(self.ttl.as_secs());
                let token = self.signer.sign(user, u.role, expires);
                Ok((
                    Caller {
                        name: Arc::from(user),
                        role: u.role,
                    },
                    token,
                ))
            }
            _ => Err(Error::Unauthenticated("wrong user name or password".into())),
        }
    }

    /// The caller a bearer token (signed or API) stands for.
    pub fn bearer(&self, token: &str) -> Result<Caller> {
        if token.starts_with(API_TOKEN_PREFIX) {
            return match self.api_tokens.get(&api_token_digest(token)) {
                Some((name, role)) => Ok(Caller {
                    name: Arc::from(format!("token:{name}")),
                    role: *role,
                }),
                None => Err(Error::Unauthenticated("unknown API token".into())),
            };
        }
        let claims = self.signer.verify(token, unix_now())?;
        Ok(Caller {
            name: Arc::from(claims.user),
            role: claims.role,
        })
    }
}

/// The credentials an `authorization` header carries.
enum Credentials {
    Basic { user: String, password: String },
    Bearer(String),
}

fn credentials(headers: &http::HeaderMap) -> Result<Credentials> {
    let header = headers.get(http::header::AUTHORIZATION).ok_or_else(|| {
        Error::Unauthenticated(
            "no credentials: this server requires authentication (Handshake with a user name \
             and password, then send the bearer token it returns)"
                .into(),
        )
    })?;
    let malformed = || Error::Unauthenticated("malformed authorization header".into());
    let value = header.to_str().map_err(|_| malformed())?.trim();
    let (scheme, rest) = value.split_once(' ').ok_or_else(malformed)?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        Ok(Credentials::Bearer(rest.to_string()))
    } else if scheme.eq_ignore_ascii_case("basic") {
        // With or without padding: Go's Flight client (ADBC) sends it without.
        let decoded = STANDARD_NO_PAD
            .decode(rest.trim_end_matches('='))
            .map_err(|_| malformed())?;
        let text = String::from_utf8(decoded).map_err(|_| malformed())?;
        let (user, password) = text.split_once(':').ok_or_else(malformed)?;
        Ok(Credentials::Basic {
            user: user.to_string(),
            password: password.to_string(),
        })
    } else {
        Err(malformed())
    }
}

/// How a cluster node tells the other nodes' calls from clients'.
#[derive(Debug, Clone)]
pub struct Nodes {
    /// The cluster's secret, which signs the nodes' calls.
    pub key: NodeKey,
    /// Path prefixes of the services only nodes may call (the workers of
    /// distributed SQL).
    pub internal: Vec<String>,
}

impl Nodes {
    /// The node a request comes from (its [`NODE_HEADER`] verified); `None`
    /// for a client's request, which may not call the internal services.
    fn caller(&self, request: &http::Request<Body>, path: &str) -> Option<Result<Caller>> {
        match request.headers().get(NODE_HEADER) {
            Some(value) => Some(self.key.verify(value, path, unix_now()).map(|node| Caller {
                name: Arc::from(format!("node:{node}")),
                role: Role::Node,
            })),
            None if self.internal.iter().any(|p| path.starts_with(p.as_str())) => {
                Some(Err(Error::PermissionDenied(format!(
                    "{path} is the cluster's own service: only its nodes may call it"
                ))))
            }
            None => None,
        }
    }
}

/// Authenticates every request (see the module's documentation).
#[derive(Debug, Clone)]
pub struct AuthLayer {
    auth: Option<Arc<Authenticator>>,
    nodes: Option<Arc<Nodes>>,
}

impl AuthLayer {
    /// A layer checking credentials with `auth` (`None`: authentication off,
    /// every client unrestricted) and, on a cluster node, the other nodes'
    /// calls with `nodes`.
    pub fn new(auth: Option<Arc<Authenticator>>, nodes: Option<Nodes>) -> Self {
        Self {
            auth,
            nodes: nodes.map(Arc::new),
        }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = Auth<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Auth {
            inner,
            auth: self.auth.clone(),
            nodes: self.nodes.clone(),
        }
    }
}

/// The service [`AuthLayer`] makes.
#[derive(Debug, Clone)]
pub struct Auth<S> {
    inner: S,
    auth: Option<Arc<Authenticator>>,
    nodes: Option<Arc<Nodes>>,
}

fn refuse(path: &str, e: Error) -> http::Response<Body> {
    let status = Status::from(e);
    tracing::info!(rpc = path, code = ?status.code(), error = status.message(), "refused");
    status.into_http()
}

impl<S> Service<http::Request<Body>> for Auth<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, std::result::Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        if self.auth.is_none() && self.nodes.is_none() {
            request.extensions_mut().insert(Caller::unrestricted());
            return Box::pin(self.inner.call(request));
        }
        let path = request.uri().path().to_string();
        if let Some(node) = self.nodes.as_ref().and_then(|n| n.caller(&request, &path)) {
            return match node {
                Ok(caller) => {
                    request.extensions_mut().insert(caller);
                    Box::pin(self.inner.call(request))
                }
                Err(e) => Box::pin(std::future::ready(Ok(refuse(&path, e)))),
            };
        }
        let Some(auth) = self.auth.clone() else {
            request.extensions_mut().insert(Caller::unrestricted());
            return Box::pin(self.inner.call(request));
        };
        if path.starts_with(crate::health::HEALTH_PREFIX) {
            // Probes carry no credentials, and a health status tells nothing
            // about the data.
            return Box::pin(self.inner.call(request));
        }
        let found = credentials(request.headers());
        if path != HANDSHAKE_PATH {
            let caller = found.and_then(|c| match c {
                Credentials::Bearer(token) => auth.bearer(&token),
                Credentials::Basic { .. } => Err(Error::Unauthenticated(
                    "a user name and password are taken by the Handshake only: send the bearer \
                     token it returns"
                        .into(),
                )),
            });
            return match caller {
                Ok(caller) => {
                    request.extensions_mut().insert(caller);
                    Box::pin(self.inner.call(request))
                }
                Err(e) => Box::pin(std::future::ready(Ok(refuse(&path, e)))),
            };
        }
        // The inner service was made ready for this call; a clone takes its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let login = match found {
                Ok(Credentials::Basic { user, password }) => {
                    // argon2 takes milliseconds of CPU: off the async threads.
                    let auth = Arc::clone(&auth);
                    tokio::task::spawn_blocking(move || auth.login(&user, &password))
                        .await
                        .unwrap_or_else(|e| Err(Error::Internal(format!("login task: {e}"))))
                }
                Ok(Credentials::Bearer(token)) => auth.bearer(&token).map(|c| (c, token)),
                Err(e) => Err(e),
            };
            let (caller, token) = match login {
                Ok(ok) => ok,
                Err(e) => return Ok(refuse(&path, e)),
            };
            tracing::info!(user = %caller.name, role = %caller.role, "handshake");
            request.extensions_mut().insert(caller);
            let mut response = inner.call(request).await?;
            match http::HeaderValue::try_from(format!("Bearer {token}")) {
                Ok(value) => {
                    response
                        .headers_mut()
                        .insert(http::header::AUTHORIZATION, value);
                    Ok(response)
                }
                Err(e) => Ok(refuse(&path, Error::Internal(format!("token header: {e}")))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authenticator(ttl: Duration) -> (Authenticator, String) {
        let mut file = UsersFile::default();
        file.set_user("alice", Role::Write, "pw").unwrap();
        let token = file.new_api_token("ci", Role::Read).unwrap();
        (
            Authenticator::new(file, TokenSigner::random().unwrap(), ttl).unwrap(),
            token,
        )
    }

    #[test]
    fn login_gives_a_token_naming_the_user_and_role() {
        let (auth, api_token) = authenticator(DEFAULT_TOKEN_TTL);
        let (caller, token) = auth.login("alice", "pw").unwrap();
        assert_eq!((&*caller.name, caller.role), ("alice", Role::Write));
        assert_eq!(auth.bearer(&token).unwrap(), caller);
        let api = auth.bearer(&api_token).unwrap();
        assert_eq!((&*api.name, api.role), ("token:ci", Role::Read));
        for (user, password) in [("alice", "PW"), ("bob", "pw"), ("", "")] {
            assert!(matches!(
                auth.login(user, password),
                Err(Error::Unauthenticated(_))
            ));
        }
        assert!(auth.bearer("qk_not-a-token").is_err());
        assert!(auth.bearer("anything").is_err());
    }

    #[test]
    fn a_token_with_no_lifetime_is_expired() {
        let (auth, _) = authenticator(Duration::ZERO);
        let (_, token) = auth.login("alice", "pw").unwrap();
        assert!(
            matches!(auth.bearer(&token), Err(Error::Unauthenticated(m)) if m.contains("expired"))
        );
    }

    #[test]
    fn roles_order_and_parse() {
        assert!(Role::Read < Role::Write && Role::Write < Role::Admin);
        assert_eq!("write".parse::<Role>().unwrap(), Role::Write);
        assert!("root".parse::<Role>().is_err());
        let reader = Caller {
            name: Arc::from("r"),
            role: Role::Read,
        };
        assert!(reader.require(Role::Read, "DoGet").is_ok());
        let denied = reader.require(Role::Write, "DoPut of a table").unwrap_err();
        assert_eq!(Status::from(denied).code(), tonic::Code::PermissionDenied);
        assert_eq!(Role::for_effect(Role::Admin.effect()), Role::Admin);
        // No users file or token can give the node role.
        assert!(Role::Admin < Role::Node);
        assert!("node".parse::<Role>().is_err());
        assert!(serde_json::from_str::<Role>("\"node\"").is_err());
        assert_eq!(Role::from_code(Role::Node.code()), None);
    }

    #[test]
    fn authorization_headers_parse() {
        let mut headers = http::HeaderMap::new();
        assert!(credentials(&headers).is_err());
        headers.insert("authorization", "Basic YWxpY2U6cDpx".parse().unwrap());
        assert!(matches!(
            credentials(&headers).unwrap(),
            Credentials::Basic { user, password } if user == "alice" && password == "p:q"
        ));
        headers.insert("authorization", "bearer abc".parse().unwrap());
        assert!(matches!(credentials(&headers).unwrap(), Credentials::Bearer(t) if t == "abc"));
        for bad in ["Basic !!!", "Basic YWxpY2U=", "Digest x", "Bearer"] {
            headers.insert("authorization", bad.parse().unwrap());
            assert!(credentials(&headers).is_err(), "{bad}");
        }
    }
}

//! The client: a channel to etcd's endpoints and the calls quiver makes.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::error::{EtcdError, Result};
use crate::proto::{
    AuthenticateRequest, CompactionRequest, Compare, DeleteRangeRequest, KeyValue,
    LeaseGrantRequest, LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseRevokeRequest,
    PutRequest, RangeRequest, RangeResponse, RequestOp, TxnRequest, TxnResponse,
    WatchCreateRequest, WatchRequest, WatchResponse, auth_client::AuthClient, kv_client::KvClient,
    lease_client::LeaseClient, watch_client::WatchClient, watch_request::RequestUnion,
};

/// How the client reaches etcd and how long it waits.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// How long opening a connection to an endpoint may take.
    pub connect_timeout: Duration,
    /// How long one call may take, and the start of a stream (a watch, a
    /// lease's keep-alive) until etcd's first answer.
    pub request_timeout: Duration,
    /// How often an idle connection is pinged (HTTP/2 keep-alive).
    pub keep_alive_interval: Duration,
    /// How long a ping may go unanswered before the connection is dropped.
    pub keep_alive_timeout: Duration,
    /// TLS to etcd: endpoints without a scheme are then `https://`.
    pub tls: Option<Tls>,
    /// A user of etcd's own authentication: the client asks for a token
    /// with it and sends the token with every call.
    pub user: Option<Credentials>,
}

/// How the client speaks TLS to etcd.
#[derive(Clone)]
pub struct Tls {
    /// The CA certificates (PEM) that etcd's server certificate must chain to.
    pub ca: Vec<u8>,
    /// This client's certificate and key (PEM), for an etcd that checks
    /// its clients' certificates (`--client-cert-auth`).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("ca", &format_args!("{} bytes", self.ca.len()))
            .field("identity", &self.identity.is_some())
            .finish()
    }
}

/// A user name and password of etcd's authentication.
#[derive(Clone)]
pub struct Credentials {
    /// The user.
    pub name: String,
    /// Its password.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("name", &self.name)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Default for ConnectOptions {
    /// 3 s to connect and per call, a ping every 2 s answered within 3 s.
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(3),
            keep_alive_interval: Duration::from_secs(2),
            keep_alive_timeout: Duration::from_secs(3),
            tls: None,
            user: None,
        }
    }
}

/// A client of one etcd cluster. Cheap to clone: clones share the channel
/// and the authentication token.
#[derive(Debug, Clone)]
pub struct Client {
    channel: Channel,
    timeout: Duration,
    auth: Option<Arc<Auth>>,
}

/// etcd's authentication: the credentials and the token they gave.
#[derive(Debug)]
struct Auth {
    credentials: Credentials,
    /// The token of the last authentication; `None` before the first call.
    token: Mutex<Option<AsciiMetadataValue>>,
}

/// Whether `error` says the token is missing, expired or unknown to the
/// etcd member asked (tokens are per member unless etcd signs them), so a
/// fresh one may succeed.
fn is_token_error(error: &EtcdError) -> bool {
    match error {
        EtcdError::Status(status) => {
            status.code() == tonic::Code::Unauthenticated || is_token_refusal(status.message())
        }
        _ => false,
    }
}

/// Whether etcd's `message` (of a call's error, or of a watch it cancelled)
/// refuses the token: expired or unknown, older than a change to the users
/// and roles, or taken for no user at all.
fn is_token_refusal(message: &str) -> bool {
    [
        "invalid auth token",
        "revision of auth store is old",
        "user name is empty",
    ]
    .iter()
    .any(|refusal| message.contains(refusal))
}

/// The key and range end of every key that starts with `prefix`, as etcd's
/// range calls take them: `("\0", "\0")`, every key, for an empty prefix.
fn key_range(prefix: Vec<u8>) -> (Vec<u8>, Vec<u8>) {
    let mut end = prefix.clone();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return (prefix, end);
        }
    }
    // Empty, or all 0xff: no key follows every key with this prefix.
    let key = if prefix.is_empty() { vec![0] } else { prefix };
    (key, vec![0])
}

/// The endpoint of `address` (`host:port`, `http://...` or `https://...`),
/// with the timeouts, keep-alive and TLS of `options`.
fn endpoint(address: &str, options: &ConnectOptions) -> Result<Endpoint> {
    let uri = match (address.contains("://"), &options.tls) {
        (true, _) => address.to_string(),
        (false, None) => format!("http://{address}"),
        (false, Some(_)) => format!("https://{address}"),
    };
    let invalid = |e: &dyn std::fmt::Display| EtcdError::Endpoint(format!("{uri}: {e}"));
    let mut endpoint = Endpoint::from_shared(uri.clone())
        .map_err(|e| invalid(&e))?
        .connect_timeout(options.connect_timeout)
        .timeout(options.request_timeout)
        .http2_keep_alive_interval(options.keep_alive_interval)
        .keep_alive_timeout(options.keep_alive_timeout)
        .keep_alive_while_idle(true);
    match (&options.tls, uri.starts_with("https://")) {
        (Some(tls), true) => {
            let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&tls.ca));
            if let Some((cert, key)) = &tls.identity {
                config = config.identity(Identity::from_pem(cert, key));
            }
            endpoint = endpoint.tls_config(config).map_err(|e| invalid(&e))?;
        }
        (None, true) => {
            return Err(invalid(&"an https endpoint needs the TLS settings (a CA)"));
        }
        (Some(_), false) => {
            return Err(invalid(&"TLS is set, and this endpoint is not https"));
        }
        (None, false) => {}
    }
    Ok(endpoint)
}

/// `call`, failing with DEADLINE_EXCEEDED after `timeout`.
async fn deadline<T>(
    timeout: Duration,
    call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, call).await {
        Ok(answer) => Ok(answer?.into_inner()),
        Err(_) => Err(tonic::Status::deadline_exceeded(format!(
            "no answer within {:.1} s",
            timeout.as_secs_f64()
        ))
        .into()),
    }
}

impl Client {
    /// A client of the etcd cluster at `endpoints` (`host:port`, or
    /// `http://host:port`), calls spread over them. Connections are made
    /// when first needed: a client made while etcd is down works once it is
    /// up.
    pub fn connect(endpoints: &[String], options: ConnectOptions) -> Result<Self> {
        if endpoints.is_empty() {
            return Err(EtcdError::Endpoint("no etcd endpoint given".into()));
        }
        let endpoints = endpoints
            .iter()
            .map(|address| endpoint(address, &options))
            .collect::<Result<Vec<_>>>()?;
        let channel = match endpoints.as_slice() {
            [one] => one.connect_lazy(),
            _ => Channel::balance_list(endpoints.into_iter()),
        };
        Ok(Self {
            channel,
            timeout: options.request_timeout,
            auth: options.user.map(|credentials| {
                Arc::new(Auth {
                    credentials,
                    token: Mutex::new(None),
                })
            }),
        })
    }

    /// `message` as a request, with the authentication token when etcd's
    /// authentication is on, and that token. `refused`: the token etcd
    /// refused to this caller, replaced by a new one unless another call has
    /// replaced it already (so calls refused at once log in once).
    async fn request<T>(
        &self,
        message: T,
        refused: Option<&AsciiMetadataValue>,
    ) -> Result<(tonic::Request<T>, Option<AsciiMetadataValue>)> {
        let mut request = tonic::Request::new(message);
        let Some(auth) = &self.auth else {
            return Ok((request, None));
        };
        let mut held = auth.token.lock().await;
        let stale = match (held.as_ref(), refused) {
            (None, _) => true,
            (Some(held), Some(refused)) => held == refused,
            (Some(_), None) => false,
        };
        if stale {
            *held = Some(self.authenticate(&auth.credentials).await?);
        }
        let token = held.clone();
        if let Some(token) = &token {
            request.metadata_mut().insert("token", token.clone());
        }
        Ok((request, token))
    }

    /// A token for `credentials`.
    async fn authenticate(&self, credentials: &Credentials) -> Result<AsciiMetadataValue> {
        let request = AuthenticateRequest {
            name: credentials.name.clone(),
            password: credentials.password.clone(),
        };
        let answer = deadline(
            self.timeout,
            AuthClient::new(self.channel.clone()).authenticate(request),
        )
        .await
        .map_err(|e| match e {
            // etcd's answers to a wrong user or password, or to authentication
            // that is off; an unreachable etcd stays what it is.
            EtcdError::Status(status)
                if matches!(
                    status.code(),
                    tonic::Code::InvalidArgument
                        | tonic::Code::PermissionDenied
                        | tonic::Code::Unauthenticated
                        | tonic::Code::FailedPrecondition
                ) =>
            {
                EtcdError::Auth(format!(
                    "etcd refused user '{}': {}",
                    credentials.name,
                    status.message()
                ))
            }
            other => other,
        })?;
        MetadataValue::try_from(answer.token.as_str())
            .map_err(|_| EtcdError::Auth("etcd gave a token that is no header value".into()))
    }

    /// Calls `call` with `message`, with a deadline and the token; once
    /// more with a fresh token if etcd refused the one sent.
    async fn unary<Req: Clone, Resp, Fut>(
        &self,
        message: Req,
        call: impl Fn(Channel, tonic::Request<Req>) -> Fut,
    ) -> Result<Resp>
    where
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let (request, sent) = self.request(message.clone(), None).await?;
        match deadline(self.timeout, call(self.channel.clone(), request)).await {
            Err(e) if sent.is_some() && is_token_error(&e) => {
                let (request, _) = self.request(message, sent.as_ref()).await?;
                deadline(self.timeout, call(self.channel.clone(), request)).await
            }
            answer => answer,
        }
    }

    /// The value at `key`, if any, read linearizably.
    pub async fn get(&self, key: impl Into<Vec<u8>>) -> Result<Option<KeyValue>> {
        let request = RangeRequest {
            key: key.into(),
            ..RangeRequest::default()
        };
        let answer: RangeResponse = self
            .unary(request, |channel, request| async move {
                KvClient::new(channel).range(request).await
            })
            .await?;
        Ok(answer.kvs.into_iter().next())
    }

    /// Every key that starts with `prefix`, in key order, read
    /// linearizably; the answer's header has the revision read at.
    pub async fn get_prefix(&self, prefix: impl Into<Vec<u8>>) -> Result<RangeResponse> {
        let (key, range_end) = key_range(prefix.into());
        let request = RangeRequest {
            key,
            range_end,
            ..RangeRequest::default()
        };
        self.unary(request, |channel, request| async move {
            KvClient::new(channel).range(request).await
        })
        .await
    }

    /// Every key from `start` (included) to `end` (excluded), in key
    /// order, read linearizably.
    pub async fn get_range(
        &self,
        start: impl Into<Vec<u8>>,
        end: impl Into<Vec<u8>>,
    ) -> Result<RangeResponse> {
        let request = RangeRequest {
            key: start.into(),
            range_end: end.into(),
            ..RangeRequest::default()
        };
        self.unary(request, |channel, request| async move {
            KvClient::new(channel).range(request).await
        })
        .await
    }

    /// Writes `value` at `key`, attached to `lease` (0: none).
    pub async fn put(
        &self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        lease: i64,
    ) -> Result<()> {
        let request = PutRequest {
            key: key.into(),
            value: value.into(),
            lease,
            prev_kv: false,
        };
        self.unary(request, |channel, request| async move {
            KvClient::new(channel).put(request).await
        })
        .await?;
        Ok(())
    }

    /// Deletes `key`; how many keys were deleted (0 or 1).
    pub async fn delete(&self, key: impl Into<Vec<u8>>) -> Result<i64> {
        let request = DeleteRangeRequest {
            key: key.into(),
            range_end: Vec::new(),
            prev_kv: false,
        };
        let answer = self
            .unary(request, |channel, request| async move {
                KvClient::new(channel).delete_range(request).await
            })
            .await?;
        Ok(answer.deleted)
    }

    /// One transaction: if every comparison of `compare` holds, `success`
    /// is applied, else `failure`, atomically. The answer says which
    /// (`succeeded`) and holds the applied operations' results in order.
    pub async fn txn(
        &self,
        compare: Vec<Compare>,
        success: Vec<RequestOp>,
        failure: Vec<RequestOp>,
    ) -> Result<TxnResponse> {
        let request = TxnRequest {
            compare,
            success,
            failure,
        };
        self.unary(request, |channel, request| async move {
            KvClient::new(channel).txn(request).await
        })
        .await
    }

    /// Discards the history of every key before `revision` (etcd keeps
    /// each key's every version until told; without this its database
    /// grows with every write until its quota stops all writes). Reads at
    /// `revision` and after are unchanged. A revision already compacted is
    /// not an error: several nodes may compact the same history.
    pub async fn compact(&self, revision: i64) -> Result<()> {
        let request = CompactionRequest {
            revision,
            physical: false,
        };
        let answer = self
            .unary(request, |channel, request| async move {
                KvClient::new(channel).compact(request).await
            })
            .await;
        match answer {
            Err(EtcdError::Status(status))
                if status.code() == tonic::Code::OutOfRange
                    && status.message().contains("compacted") =>
            {
                Ok(())
            }
            other => other.map(|_| ()),
        }
    }

    /// A new lease of `ttl` seconds; its id.
    pub async fn lease_grant(&self, ttl: i64) -> Result<i64> {
        let request = LeaseGrantRequest { ttl, id: 0 };
        let answer = self
            .unary(request, |channel, request| async move {
                LeaseClient::new(channel).lease_grant(request).await
            })
            .await?;
        if answer.error.is_empty() {
            Ok(answer.id)
        } else {
            Err(EtcdError::Stream(format!(
                "lease not granted: {}",
                answer.error
            )))
        }
    }

    /// Ends `lease` now; the keys attached to it are deleted.
    pub async fn lease_revoke(&self, lease: i64) -> Result<()> {
        let request = LeaseRevokeRequest { id: lease };
        self.unary(request, |channel, request| async move {
            LeaseClient::new(channel).lease_revoke(request).await
        })
        .await?;
        Ok(())
    }

    /// A stream that renews `lease` each time [`LeaseKeeper::keep_alive`]
    /// is called.
    pub async fn lease_keep_alive(&self, lease: i64) -> Result<LeaseKeeper> {
        let (requests, answers, _) = self
            .stream(
                LeaseKeepAliveRequest { id: lease },
                None,
                |channel, request| async move {
                    LeaseClient::new(channel).lease_keep_alive(request).await
                },
            )
            .await?;
        Ok(LeaseKeeper {
            lease,
            requests,
            answers,
            timeout: self.timeout,
            sent: true,
        })
    }

    /// Watches every key that starts with `prefix` from now on: returns
    /// once etcd has created the watch. etcd refuses a watch not with an
    /// error but with a first answer that cancels it (an expired token
    /// among the reasons): then a new token is tried once.
    pub async fn watch_prefix(&self, prefix: impl Into<Vec<u8>>) -> Result<Watcher> {
        let (key, range_end) = key_range(prefix.into());
        let create = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key,
                range_end,
                ..WatchCreateRequest::default()
            })),
        };
        let mut refused = None;
        loop {
            let (requests, mut events, sent) = self
                .stream(create.clone(), refused.as_ref(), |channel, request| async move {
                    WatchClient::new(channel).watch(request).await
                })
                .await?;
            let first = match tokio::time::timeout(self.timeout, events.message()).await {
                Ok(first) => first?,
                Err(_) => {
                    return Err(tonic::Status::deadline_exceeded(
                        "etcd did not create the watch in time",
                    )
                    .into());
                }
            };
            match first {
                Some(answer) if answer.created && !answer.canceled => {
                    return Ok(Watcher {
                        _requests: requests,
                        events,
                    });
                }
                Some(answer)
                    if answer.canceled
                        && refused.is_none()
                        && sent.is_some()
                        && (is_token_refusal(&answer.cancel_reason)
                            // etcd 3.4's reason for a watch with an expired token
                            || answer.cancel_reason.contains("permission denied")) =>
                {
                    refused = sent;
                }
                Some(answer) => {
                    return Err(EtcdError::Stream(format!(
                        "etcd refused the watch: {}",
                        answer.cancel_reason
                    )));
                }
                None => {
                    return Err(EtcdError::Stream(
                        "etcd ended the watch stream before creating the watch".into(),
                    ));
                }
            }
        }
    }

    /// Opens a bidirectional stream with `first` as its first message, and
    /// the token it carries: etcd answers a stream's headers only once it
    /// has read a message, so `first` is queued before the call waits for
    /// them. Once more with a new token if etcd refused the one sent (or
    /// `refused`, refused before).
    async fn stream<Req: Clone + Send + 'static, Resp, Fut>(
        &self,
        first: Req,
        refused: Option<&AsciiMetadataValue>,
        call: impl Fn(Channel, tonic::Request<ReceiverStream<Req>>) -> Fut,
    ) -> Result<(
        mpsc::Sender<Req>,
        tonic::Streaming<Resp>,
        Option<AsciiMetadataValue>,
    )>
    where
        Fut: Future<Output = Result<tonic::Response<tonic::Streaming<Resp>>, tonic::Status>>,
    {
        let mut refused = refused.cloned();
        let mut retried = false;
        loop {
            let (requests, queue) = mpsc::channel(1);
            requests
                .send(first.clone())
                .await
                .map_err(|_| EtcdError::Stream("the request stream closed".into()))?;
            let (request, sent) = self
                .request(ReceiverStream::new(queue), refused.as_ref())
                .await?;
            match deadline(self.timeout, call(self.channel.clone(), request)).await {
                Err(e) if sent.is_some() && !retried && is_token_error(&e) => {
                    refused = sent;
                    retried = true;
                }
                answer => return answer.map(|answers| (requests, answers, sent)),
            }
        }
    }
}

/// Renews one lease over a keep-alive stream.
#[derive(Debug)]
pub struct LeaseKeeper {
    lease: i64,
    requests: mpsc::Sender<LeaseKeepAliveRequest>,
    answers: tonic::Streaming<LeaseKeepAliveResponse>,
    timeout: Duration,
    /// A renewal was sent whose answer is not read yet.
    sent: bool,
}

impl LeaseKeeper {
    /// Renews the lease once: the seconds it has left, 0 when it had
    /// already expired (its keys are gone).
    pub async fn keep_alive(&mut self) -> Result<i64> {
        if !self.sent {
            self.requests
                .send(LeaseKeepAliveRequest { id: self.lease })
                .await
                .map_err(|_| EtcdError::Stream("the keep-alive stream closed".into()))?;
            self.sent = true;
        }
        // A renewal unanswered in time stays sent: the next call reads its
        // answer rather than sending another, so answers match renewals.
        match tokio::time::timeout(self.timeout, self.answers.message()).await {
            Ok(Ok(Some(answer))) => {
                self.sent = false;
                Ok(answer.ttl)
            }
            Ok(Ok(None)) => Err(EtcdError::Stream(
                "etcd ended the lease's keep-alive stream".into(),
            )),
            Ok(Err(status)) => Err(status.into()),
            Err(_) => Err(tonic::Status::deadline_exceeded(format!(
                "lease renewal unanswered within {:.1} s",
                self.timeout.as_secs_f64()
            ))
            .into()),
        }
    }
}

/// The events of one watch, as etcd sends them.
#[derive(Debug)]
pub struct Watcher {
    /// Kept open: etcd ends a watch whose request stream closes.
    _requests: mpsc::Sender<WatchRequest>,
    events: tonic::Streaming<WatchResponse>,
}

impl Watcher {
    /// The next answer of the watch after its creation: a batch of events,
    /// or its cancellation; `None` when etcd ended the stream. Waits as long
    /// as the keys are quiet.
    pub async fn message(&mut self) -> Result<Option<WatchResponse>> {
        Ok(self.events.message().await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_where_its_last_byte_grows() {
        let range = |prefix: &[u8]| key_range(prefix.to_vec());
        assert_eq!(range(b"/q/"), (b"/q/".to_vec(), b"/q0".to_vec()));
        assert_eq!(range(b"a\xff"), (b"a\xff".to_vec(), b"b".to_vec()));
        assert_eq!(range(b"\xff\xff"), (b"\xff\xff".to_vec(), vec![0]));
        // Every key: etcd's ("\0", "\0").
        assert_eq!(range(b""), (vec![0], vec![0]));
    }

    #[test]
    fn an_endpoint_without_a_scheme_is_http_and_none_is_refused() {
        assert!(Client::connect(&[], ConnectOptions::default()).is_err());
        let error = Client::connect(&["bad host:1".into()], ConnectOptions::default()).unwrap_err();
        assert!(error.to_string().contains("bad host"), "{error}");
    }
}

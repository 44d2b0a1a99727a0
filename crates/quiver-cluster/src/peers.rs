//! The calls a node makes to other nodes: storing a partition on a replica
//! (a DoPut of `{"partition": NAME}`, which the replica's store commits like
//! any put, durably with `--data-dir`), reading one (DoGet) and the workers
//! of distributed SQL. Every one carries the node's signature ([`Signed`]):
//! the other nodes take partitions and SQL stages from nodes only.
//!
//! A node that stops answering is found out within seconds, not at the end
//! of its lease: every connection pings its peer over HTTP/2 and is closed
//! when a ping goes unanswered, a copy has a deadline, and a node whose call
//! failed is a suspect for a while, passed over by new puts and queries
//! while other nodes can stand in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow_flight::encode::{DictionaryHandling, FlightDataEncoderBuilder};
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use futures::StreamExt;
use quiver_flight::auth::{NODE_HEADER, NodeKey};
use tonic::Status;
use tonic::body::Body;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::error::{ClusterError, Result};

/// How long a node may take to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a connection pings its peer, and how long an answer may take
/// before the connection is taken for dead (a frozen or cut-off node).
const PING_EVERY: Duration = Duration::from_secs(1);
const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// How recent a node's last answer must be for a query to be planned on it
/// without asking again ([`Peers::confirm`]).
const FRESH: Duration = Duration::from_millis(250);

/// A copy's deadline: this, plus its bytes at [`COPY_RATE`].
const COPY_DEADLINE: Duration = Duration::from_secs(10);

/// The slowest rate a copy may go at before it is taken for stalled: a
/// tenth of the 1 Gbit/s links the benchmarks run over.
const COPY_RATE: u64 = 12 << 20;

/// A copy of `bytes`' deadline.
fn copy_deadline(bytes: u64) -> Duration {
    COPY_DEADLINE + Duration::from_secs(bytes / COPY_RATE)
}

/// The host and port of a node's location or worker URL
/// (`grpc+tcp://h:p`, `http://h:p/`): what suspicion is kept by, the same
/// for a Flight call and a worker call to one node.
fn node_address(location: &str) -> &str {
    let rest = location
        .split_once("://")
        .map_or(location, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest)
}

/// A channel to another node whose every request carries this node's
/// signature ([`NODE_HEADER`]), made for the request's path and time.
#[derive(Debug, Clone)]
pub(crate) struct Signed<S> {
    inner: S,
    key: NodeKey,
}

impl<S> Signed<S> {
    pub(crate) fn new(inner: S, key: NodeKey) -> Self {
        Self { inner, key }
    }
}

impl<S> tower::Service<http::Request<Body>> for Signed<S>
where
    S: tower::Service<http::Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let signature = self.key.sign(request.uri().path(), now);
        request.headers_mut().insert(NODE_HEADER, signature);
        self.inner.call(request)
    }
}

/// Channels to the other nodes, one per location, made on first use.
#[derive(Debug, Clone)]
pub(crate) struct Peers {
    /// For Flight calls: connected on first call.
    channels: Arc<Mutex<HashMap<String, Signed<Channel>>>>,
    /// For the workers of distributed SQL: connected before first use, so
    /// that a node out of reach is told apart from a failed call.
    connected: Arc<Mutex<HashMap<String, Signed<Channel>>>>,
    /// Locations whose last call failed, and when: passed over while
    /// others can stand in, until [`Peers::suspicion`] has passed.
    suspects: Arc<Mutex<HashMap<String, Instant>>>,
    suspicion: Duration,
    /// Locations and when they last answered a call.
    answered: Arc<Mutex<HashMap<String, Instant>>>,
    key: NodeKey,
    tls: Option<ClientTlsConfig>,
}

impl Peers {
    /// Channels whose calls `key` signs, over TLS with `tls`; a node whose
    /// call failed is a suspect for `suspicion` (the lease: by then it is
    /// gone from the catalog, or back).
    pub(crate) fn new(key: NodeKey, tls: Option<quiver_etcd::Tls>, suspicion: Duration) -> Self {
        let tls = tls.map(|tls| {
            let config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&tls.ca));
            match &tls.identity {
                Some((cert, key)) => config.identity(Identity::from_pem(cert, key)),
                None => config,
            }
        });
        Self {
            channels: Arc::default(),
            connected: Arc::default(),
            suspects: Arc::default(),
            suspicion,
            answered: Arc::default(),
            key,
            tls,
        }
    }

    /// Takes the node at `location` for failed: new work passes it over
    /// for a while, and its channels connect afresh.
    pub(crate) fn suspect(&self, location: &str) {
        self.suspects
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(node_address(location).to_string(), Instant::now());
        self.forget(location);
    }

    /// Whether a call to `location` failed lately.
    pub(crate) fn is_suspect(&self, location: &str) -> bool {
        let address = node_address(location);
        let mut suspects = self.suspects.lock().unwrap_or_else(PoisonError::into_inner);
        match suspects.get(address) {
            Some(since) if since.elapsed() < self.suspicion => true,
            Some(_) => {
                suspects.remove(address);
                false
            }
            None => false,
        }
    }

    /// A call to `location` succeeded: it is no suspect.
    fn cleared(&self, location: &str) {
        let address = node_address(location);
        {
            let mut suspects = self.suspects.lock().unwrap_or_else(PoisonError::into_inner);
            if !suspects.is_empty() {
                suspects.remove(address);
            }
        }
        self.answered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(address.to_string(), Instant::now());
    }

    /// Probes, at once and together, those of `locations` that are no
    /// suspects and have not answered in the last [`FRESH`]: before a query
    /// is planned, so that a node killed since the last round of probes is
    /// a suspect, passed over, and not given a task it cannot run.
    pub(crate) async fn confirm(&self, locations: impl Iterator<Item = &str>) {
        let stale: Vec<&str> = {
            let answered = self.answered.lock().unwrap_or_else(PoisonError::into_inner);
            locations
                .filter(|l| {
                    answered
                        .get(node_address(l))
                        .is_none_or(|at| at.elapsed() > FRESH)
                })
                .collect()
        };
        self.recheck(stale.into_iter()).await;
    }

    /// Probes, at once and together, every one of `locations` that is no
    /// suspect, however lately it answered: after a call failed in a way
    /// that does not name the node (a query's stage broken off), so that
    /// the nodes that stopped answering become suspects.
    pub(crate) async fn recheck(&self, locations: impl Iterator<Item = &str>) {
        let live: Vec<&str> = locations.filter(|l| !self.is_suspect(l)).collect();
        futures::future::join_all(live.into_iter().map(|l| self.probe(l))).await;
    }

    /// What signs this node's calls.
    pub(crate) fn key(&self) -> &NodeKey {
        &self.key
    }

    /// How to reach the node at `location` (`grpc+tcp://` or `grpc+tls://`).
    fn endpoint(&self, location: &str) -> Result<Endpoint> {
        let invalid = |e: &dyn std::fmt::Display| ClusterError::Invalid(format!("{location}: {e}"));
        let uri = quiver_wire::http2::http_uri(location).map_err(ClusterError::Invalid)?;
        let mut endpoint = Endpoint::from_shared(uri.clone())
            .map_err(|e| invalid(&e))?
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(PING_EVERY)
            .keep_alive_timeout(PING_TIMEOUT)
            .keep_alive_while_idle(true)
            .http2_adaptive_window(false)
            .initial_stream_window_size(quiver_wire::http2::STREAM_WINDOW)
            .initial_connection_window_size(quiver_wire::http2::CONNECTION_WINDOW);
        if uri.starts_with("https://") {
            let tls = self.tls.clone().ok_or_else(|| {
                invalid(&"a node over TLS, and this node has no TLS settings (--cluster-ca)")
            })?;
            endpoint = endpoint.tls_config(tls).map_err(|e| invalid(&e))?;
        }
        Ok(endpoint)
    }

    /// The channel to the node at `location`, made on first use.
    pub(crate) fn channel(&self, location: &str) -> Result<Signed<Channel>> {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(channel) = channels.get(location) {
            return Ok(channel.clone());
        }
        let channel = Signed::new(self.endpoint(location)?.connect_lazy(), self.key.clone());
        channels.insert(location.to_string(), channel.clone());
        Ok(channel)
    }

    /// A channel to the node at `location`, connected: an error when the
    /// node cannot be reached now. Kept for the next call.
    pub(crate) async fn connected(&self, location: &str) -> Result<Signed<Channel>> {
        let known = self
            .connected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(location)
            .cloned();
        if let Some(channel) = known {
            return Ok(channel);
        }
        // Not under the lock: a node slow to answer holds up no other.
        let channel = self.endpoint(location)?.connect().await.map_err(|e| {
            self.suspect(location);
            ClusterError::NodeUnreachable {
                location: location.to_string(),
                detail: quiver_wire::with_causes(&e),
            }
        })?;
        let channel = Signed::new(channel, self.key.clone());
        self.connected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(location.to_string(), channel.clone());
        Ok(channel)
    }

    /// Forgets the channels to `location` (its node left or failed a call),
    /// so the next call connects afresh.
    pub(crate) fn forget(&self, location: &str) {
        self.channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(location);
        self.connected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(location);
    }

    /// Asks the node at `location` whether it answers (ListActions, by
    /// [`PING_TIMEOUT`]); one that does not becomes a suspect, one that does
    /// stops being one. (A frozen node takes the whole timeout to be found
    /// out; a killed one refuses the connection at once.)
    pub(crate) async fn probe(&self, location: &str) {
        let answered = match self.channel(location) {
            Ok(channel) => {
                let mut client = FlightServiceClient::new(channel);
                let call = client.list_actions(arrow_flight::Empty {});
                matches!(tokio::time::timeout(PING_TIMEOUT, call).await, Ok(Ok(_)))
            }
            Err(_) => false,
        };
        if answered {
            self.cleared(location);
        } else if !self.is_suspect(location) {
            tracing::info!(%location, "a node does not answer; passing it over");
            self.suspect(location);
        }
    }

    /// Stores `batches` (`bytes` in all) as table `name` on the node at
    /// `location`, replacing any table of that name there, by a deadline
    /// that grows with `bytes`.
    pub(crate) async fn put(
        &self,
        location: &str,
        name: &str,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
        bytes: u64,
    ) -> Result<(), Status> {
        let channel = self
            .channel(location)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let mut client = FlightServiceClient::new(channel)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        // Encoded as the call sends, a batch at a time: no second copy of
        // the partition in memory. A stream that ended early would end the
        // request cleanly and the replica would store part of the rows, so
        // an encoding error ends the call instead (the replica sees the
        // stream broken off and stores nothing).
        let (failed, encoding) = tokio::sync::oneshot::channel();
        let encoded = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            // Dictionaries stay dictionaries (the default would decode them).
            .with_dictionary_handling(DictionaryHandling::Resend)
            .with_flight_descriptor(Some(quiver_flight::partition_descriptor(name)))
            .build(futures::stream::iter(
                batches.into_iter().map(Ok::<_, FlightError>),
            ));
        let data = futures::stream::unfold(
            (encoded, Some(failed)),
            |(mut encoded, mut failed)| async move {
                match encoded.next().await? {
                    Ok(data) => Some((data, (encoded, failed))),
                    Err(e) => {
                        if let Some(failed) = failed.take() {
                            let _ = failed.send(e);
                        }
                        futures::future::pending().await
                    }
                }
            },
        );
        let deadline = copy_deadline(bytes);
        let call = async {
            let mut answers = client.do_put(data).await?.into_inner();
            while answers.message().await?.is_some() {}
            Ok::<_, Status>(())
        };
        let encoding_failed = async {
            match encoding.await {
                Ok(e) => Status::internal(format!("encoding partition {name}: {e}")),
                // The whole stream was encoded.
                Err(_) => futures::future::pending().await,
            }
        };
        let call = async {
            tokio::select! {
                result = call => result,
                status = encoding_failed => Err(status),
            }
        };
        let result = tokio::time::timeout(deadline, call)
            .await
            .unwrap_or_else(|_| {
                Err(Status::deadline_exceeded(format!(
                    "no answer within {} s",
                    deadline.as_secs()
                )))
            });
        match &result {
            Ok(()) => self.cleared(location),
            Err(_) => self.suspect(location),
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_location_and_worker_url_are_one_address() {
        assert_eq!(node_address("grpc+tcp://127.0.0.2:7777"), "127.0.0.2:7777");
        assert_eq!(node_address("http://127.0.0.2:7777/"), "127.0.0.2:7777");
        assert_eq!(node_address("grpc+tls://n1.example:443"), "n1.example:443");
    }
}

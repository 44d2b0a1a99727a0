//! The calls a node makes to other nodes: storing a partition on a replica
//! (a DoPut of `{"partition": NAME}`, which the replica's store commits like
//! any put, durably with `--data-dir`), reading one (DoGet) and the workers
//! of distributed SQL. Every one carries the node's signature ([`Signed`]):
//! the other nodes take partitions and SQL stages from nodes only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow_flight::encode::{DictionaryHandling, FlightDataEncoderBuilder};
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use futures::TryStreamExt;
use quiver_flight::auth::{NODE_HEADER, NodeKey};
use tonic::Status;
use tonic::body::Body;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::error::{ClusterError, Result};

/// How long a node may take to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

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
    key: NodeKey,
    tls: Option<ClientTlsConfig>,
}

impl Peers {
    /// Channels whose calls `key` signs, over TLS with `tls`.
    pub(crate) fn new(key: NodeKey, tls: Option<quiver_etcd::Tls>) -> Self {
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
            key,
            tls,
        }
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

    /// Forgets the channel to `location` (its node left or failed a call), so
    /// the next call connects afresh.
    pub(crate) fn forget(&self, location: &str) {
        self.channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(location);
    }

    /// Stores `batches` as table `name` on the node at `location`, replacing
    /// any table of that name there.
    pub(crate) async fn put(
        &self,
        location: &str,
        name: &str,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Result<(), Status> {
        let channel = self
            .channel(location)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let mut client = FlightServiceClient::new(channel)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        // Encoded before the call: a stream that failed halfway would end
        // the request cleanly, and the replica would store part of the rows.
        let data: Vec<_> = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            // Dictionaries stay dictionaries (the default would decode them).
            .with_dictionary_handling(DictionaryHandling::Resend)
            .with_flight_descriptor(Some(quiver_flight::partition_descriptor(name)))
            .build(futures::stream::iter(
                batches.into_iter().map(Ok::<_, FlightError>),
            ))
            .try_collect()
            .await
            .map_err(|e| Status::internal(format!("encoding partition {name}: {e}")))?;
        let result = async {
            let mut answers = client
                .do_put(futures::stream::iter(data))
                .await?
                .into_inner();
            while answers.message().await?.is_some() {}
            Ok::<_, Status>(())
        }
        .await;
        if result.is_err() {
            self.forget(location);
        }
        result
    }
}

//! DoGet: the response body read frame by frame, each FlightData's body
//! copied once into aligned, pooled memory (`quiver-wire`), decoded into
//! record batches by arrow-flight's decoder.

use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow_flight::FlightData;
use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
use arrow_flight::error::FlightError;
use bytes::Bytes;
use futures::{FutureExt, Stream, StreamExt, TryStreamExt, stream};
use http_body::Body as _;
use prost::Message;
use quiver_wire::http2::DO_GET_PATH;
use quiver_wire::{BodyPool, Received, grpc_message, ipc_message};
use tonic::body::Body;
use tonic::transport::Channel;

use crate::connection::{Connections, end_status, status_in_headers, transport_failure};
use crate::error::{Error, Result};

/// A DoGet's record batches, once its schema has arrived.
pub(crate) struct BatchStream {
    schema: SchemaRef,
    decoder: FlightDataDecoder,
}

impl std::fmt::Debug for BatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchStream")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl BatchStream {
    /// The stream's schema.
    pub(crate) fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// The next batch; `None` at the end of the stream.
    pub(crate) async fn next_batch(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            match next_payload(&mut self.decoder).await? {
                Ok(DecodedPayload::RecordBatch(batch)) => return Some(Ok(batch)),
                Ok(DecodedPayload::Schema(_)) => {
                    return Some(Err(Error::Malformed(
                        "a second schema message in one stream".into(),
                    )));
                }
                Ok(DecodedPayload::None) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// Every remaining batch.
    pub(crate) async fn collect(mut self) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let mut batches = Vec::new();
        while let Some(batch) = self.next_batch().await {
            batches.push(batch?);
        }
        Ok((self.schema, batches))
    }
}

/// Starts a DoGet of `ticket` at the first of an endpoint's `locations` that
/// answers, and waits for its schema.
///
/// A location that cannot be reached before the schema arrives (no
/// connection, or UNAVAILABLE: [`Error::is_unreachable`]) passes the call to
/// the next one; any other error (NOT_FOUND, ABORTED, a refused
/// login) is the call's at once. When every location was unreachable, the
/// last one's error is returned, naming the locations tried.
pub(crate) async fn do_get_first(
    connections: Arc<Connections>,
    locations: Vec<String>,
    ticket: Bytes,
    bodies: BodyPool,
) -> Result<BatchStream> {
    let mut tried = Vec::with_capacity(locations.len());
    let mut last = None;
    for location in locations {
        let attempt = do_get(
            Arc::clone(&connections),
            location.clone(),
            ticket.clone(),
            bodies.clone(),
        )
        .await;
        match attempt {
            Err(e) if e.is_unreachable() => {
                tried.push(location);
                last = Some(e);
            }
            done => return done,
        }
    }
    match last {
        Some(last) => Err(Error::Unreachable {
            tried,
            last: Box::new(last),
        }),
        None => Err(Error::Invalid(
            "an endpoint to read with no location".into(),
        )),
    }
}

/// Starts a DoGet of `ticket` at `location` and waits for its schema, so a
/// call that fails at once (an unknown table, a refused login) fails here.
async fn do_get(
    connections: Arc<Connections>,
    location: String,
    ticket: Bytes,
    bodies: BodyPool,
) -> Result<BatchStream> {
    let started = Instant::now();
    let channel = connections.take(&location).await?;
    let request = grpc_message(&arrow_flight::Ticket { ticket }.encode_to_vec());
    let body = Body::new(http_body_util::Full::new(request));
    let response = connections.call(channel.clone(), DO_GET_PATH, body).await?;
    let deadline = connections.settings().timeout.map(|t| started + t);
    let max_message_size = connections.settings().max_message_size;
    let messages = Messages {
        status_in_headers: status_in_headers(&response),
        trailers: None,
        body: response.into_body(),
        received: Received::new(max_message_size, "max_message_size"),
        bodies,
        deadline,
        done: false,
        channel: Some((connections, location, channel)),
    };
    let mut decoder = FlightDataDecoder::new(Box::pin(messages.into_stream()));
    loop {
        match next_payload(&mut decoder).await {
            Some(Ok(DecodedPayload::Schema(schema))) => return Ok(BatchStream { schema, decoder }),
            Some(Ok(DecodedPayload::None)) => {}
            Some(Ok(DecodedPayload::RecordBatch(_))) => {
                return Err(Error::Malformed("a record batch before the schema".into()));
            }
            Some(Err(e)) => return Err(e),
            None => return Err(Error::Malformed("the stream ended without a schema".into())),
        }
    }
}

/// The decoder's next payload. arrow-ipc panics on some malformed messages
/// instead of failing: such a panic is the server's malformed data.
async fn next_payload(decoder: &mut FlightDataDecoder) -> Option<Result<DecodedPayload>> {
    let decoded = AssertUnwindSafe(decoder.next())
        .catch_unwind()
        .await
        .unwrap_or_else(|_| {
            Some(Err(FlightError::DecodeError(
                "the IPC decoder failed on a message".into(),
            )))
        })?;
    Some(decoded.map(|d| d.payload).map_err(from_flight))
}

fn from_flight(e: FlightError) -> Error {
    match e {
        FlightError::Tonic(status) => Error::Status(status),
        FlightError::ExternalError(e) => match e.downcast::<Error>() {
            Ok(e) => *e,
            Err(e) => Error::Malformed(e.to_string()),
        },
        e => Error::Malformed(e.to_string()),
    }
}

/// The FlightData messages of a response body, parsed as its frames arrive.
struct Messages {
    /// Whether the response's headers carried the call's status.
    status_in_headers: bool,
    /// The response's trailers, once they have arrived.
    trailers: Option<http::HeaderMap>,
    body: Body,
    received: Received,
    bodies: BodyPool,
    deadline: Option<Instant>,
    done: bool,
    /// The connection, given back for the next call once the stream ends well.
    channel: Option<(Arc<Connections>, String, Channel)>,
}

impl Messages {
    fn into_stream(self) -> impl Stream<Item = Result<FlightData, FlightError>> + Send + 'static {
        stream::unfold(self, |mut messages| async move {
            let next = messages.next_message().await;
            if next.as_ref().is_none_or(|r| r.is_err()) {
                messages.done = true;
            }
            next.map(|item| {
                (
                    item.map_err(|e| FlightError::ExternalError(Box::new(e))),
                    messages,
                )
            })
        })
        .try_filter_map(|data| {
            futures::future::ready(
                ipc_message(data).map_err(|e| FlightError::ExternalError(Box::new(Error::from(e)))),
            )
        })
    }

    async fn next_message(&mut self) -> Option<Result<FlightData>> {
        if self.done {
            return None;
        }
        loop {
            match self.received.next_message(&self.bodies) {
                Ok(Some(message)) => return Some(Ok(message)),
                Ok(None) => {}
                Err(e) => return Some(Err(e.into())),
            }
            let frame = std::future::poll_fn(|cx| Pin::new(&mut self.body).poll_frame(cx));
            let frame = match self.deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline.into(), frame).await {
                    Ok(frame) => frame,
                    Err(_) => {
                        return Some(Err(tonic::Status::deadline_exceeded(
                            "the call took longer than its timeout",
                        )
                        .into()));
                    }
                },
                None => frame.await,
            };
            match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.received.push(data),
                    Err(frame) => self.trailers = frame.into_trailers().ok(),
                },
                Some(Err(status)) => return Some(Err(transport_failure(status))),
                None if self.received.is_empty() => {
                    if let Err(e) = end_status(self.trailers.as_ref(), self.status_in_headers) {
                        return Some(Err(e));
                    }
                    if let Some((connections, location, channel)) = self.channel.take() {
                        connections.give_back(&location, channel);
                    }
                    return None;
                }
                None => {
                    return Some(Err(Error::Malformed(
                        "the stream ended inside a gRPC message".into(),
                    )));
                }
            }
        }
    }
}

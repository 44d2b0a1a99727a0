//! DoPut read below tonic: each body copied once, into aligned memory.
//!
//! tonic assembles every gRPC message into one contiguous buffer (a copy), and
//! the IPC decoder copies a body again unless it starts on a 64-byte boundary,
//! which a body inside a received message almost never does. Here the received
//! HTTP/2 frames stay as they arrived (references), the protobuf fields around
//! the body are read off them, and the body is copied once into a 64-byte
//! aligned buffer that the decoded arrays then use as it is.

use std::future::poll_fn;
use std::pin::Pin;

use arrow_flight::{FlightData, PutResult};
use futures::{Stream, StreamExt, stream};
use http_body::Body as _;
use prost::Message;
use quiver_wire::{BodyPool, GrpcBody, Received};
use tonic::Status;
use tonic::body::Body;

use crate::auth::Caller;
use crate::rpc_log::RpcLog;
use crate::{Error, QuiverService};
use quiver_store::MemoryCharge;
use quiver_wire::grpc_message;

pub(super) async fn respond(
    service: QuiverService,
    request: http::Request<Body>,
    log: RpcLog,
) -> Result<http::Response<Body>, Status> {
    let caller = Caller::of(request.extensions());
    let put_result = put_body(&service, request.into_body(), caller, log).await?;
    let frame = grpc_message(&put_result.encode_to_vec());
    Ok(super::grpc_response(GrpcBody::response(
        stream::iter([Ok(vec![frame])]).boxed(),
    )))
}

/// Stores the DoPut whose request body is `body`.
async fn put_body(
    service: &QuiverService,
    body: Body,
    caller: crate::Result<Caller>,
    mut log: RpcLog,
) -> Result<PutResult, Status> {
    let reader = FlightDataReader::new(
        body,
        service.max_message_size(),
        service.store().memory().charge(),
        service.body_pool().clone(),
    );
    let result = service
        .put(Box::pin(reader.into_stream()), None, caller, &mut log)
        .await;
    log.outcome(result.map_err(Status::from))
}

/// Stores the DoPut whose request body arrives as `frames` (the payloads of
/// its HTTP/2 DATA frames), through the same path as a DoPut from the network.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) async fn put_frames(
    service: &QuiverService,
    frames: Vec<bytes::Bytes>,
) -> Result<PutResult, Status> {
    let frames = frames
        .into_iter()
        .map(|frame| Ok::<_, Status>(http_body::Frame::data(frame)));
    let body = Body::new(http_body_util::StreamBody::new(stream::iter(frames)));
    put_body(
        service,
        body,
        Ok(Caller::unrestricted()),
        RpcLog::new("DoPut"),
    )
    .await
}

/// FlightData messages parsed off a request body as its frames arrive.
struct FlightDataReader {
    body: Body,
    received: Received,
    /// Where bodies are copied to.
    bodies: BodyPool,
    /// The message being received, charged to the memory pool from the moment
    /// its length is known until it is parsed (then the writer charges it).
    in_flight: MemoryCharge,
    done: bool,
}

impl FlightDataReader {
    fn new(body: Body, max_message_size: usize, in_flight: MemoryCharge, bodies: BodyPool) -> Self {
        Self {
            body,
            received: Received::new(max_message_size, "--max-message-size"),
            bodies,
            in_flight,
            done: false,
        }
    }

    fn into_stream(self) -> impl Stream<Item = Result<FlightData, Status>> + Send + 'static {
        stream::unfold(self, |mut reader| async move {
            let next = reader.next_message().await.map(|r| r.map_err(Status::from));
            if next.as_ref().is_some_and(|r| r.is_err()) {
                reader.done = true;
            }
            next.map(|item| (item, reader))
        })
    }

    async fn next_message(&mut self) -> Option<Result<FlightData, Error>> {
        if self.done {
            return None;
        }
        loop {
            match self.parse_one() {
                Ok(Some(message)) => return Some(Ok(message)),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
            match poll_fn(|cx| Pin::new(&mut self.body).poll_frame(cx)).await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.received.push(data);
                    }
                }
                Some(Err(e)) if e.code() == tonic::Code::DeadlineExceeded => {
                    return Some(Err(Error::Status(Box::new(e))));
                }
                Some(Err(e)) => {
                    return Some(Err(Error::Cancelled(format!(
                        "the DoPut stream broke off before its end; nothing was stored ({e})"
                    ))));
                }
                None if self.received.is_empty() => return None,
                None => {
                    return Some(Err(Error::invalid(
                        "the DoPut stream ended inside a gRPC message",
                    )));
                }
            }
        }
    }

    /// The next whole message, if it has arrived.
    fn parse_one(&mut self) -> Result<Option<FlightData>, Error> {
        let Some(len) = self.received.next_len()? else {
            return Ok(None);
        };
        if self.in_flight.bytes() < len as u64 {
            self.in_flight
                .try_grow(len as u64 - self.in_flight.bytes())?;
        }
        let Some(parsed) = self.received.next_message(&self.bodies)? else {
            return Ok(None);
        };
        self.in_flight.release();
        Ok(Some(parsed))
    }
}

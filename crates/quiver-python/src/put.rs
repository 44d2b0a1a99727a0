//! DoPut: batches framed by reference (`quiver-ipc`'s encoder and
//! `quiver-wire`'s framing), so the request body is a chain of the arrays' own
//! buffers that hyper hands to the socket; no copy is made in user space.
//!
//! The batches are read and framed on the calling thread (a pyarrow stream
//! may call back into Python, which takes the GIL itself) and handed to the
//! request's body through a small channel. A source that fails cancels the
//! call, so the server stores nothing of it.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;
use arrow_flight::{FlightDescriptor, PutResult};
use bytes::{Buf, Bytes};
use futures::StreamExt;
use http_body_util::BodyExt;
use prost::Message;
use quiver_ipc::{FlightMessage, FlightMessageEncoder};
use quiver_wire::http2::DO_PUT_PATH;
use quiver_wire::{GrpcBody, grpc_frame, grpc_frame_with, message_length};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tonic::body::Body;

use crate::connection::{Connections, end_status, status_in_headers, transport_failure};
use crate::error::{Error, Result};

/// Framed messages waiting for the connection: a little read-ahead, so the
/// socket is kept busy while the next batch is read, without holding a table.
const QUEUED_MESSAGES: usize = 4;

/// Longest PutResult read: they carry a little JSON.
const MAX_RESULT: usize = 16 << 20;

/// What a put sends: where, with which first-message metadata, and how large
/// a message may be before a batch is cut into row slices.
#[derive(Debug)]
pub(crate) struct PutRequest {
    pub(crate) location: String,
    pub(crate) descriptor: FlightDescriptor,
    pub(crate) app_metadata: Bytes,
    pub(crate) max_message_bytes: usize,
}

/// Sends `batches` of `schema` as one DoPut, blocking the calling thread, and
/// returns the `app_metadata` of the server's last PutResult.
pub(crate) fn do_put(
    runtime: &Runtime,
    connections: Arc<Connections>,
    request: PutRequest,
    schema: SchemaRef,
    batches: impl Iterator<Item = Result<RecordBatch, ArrowError>>,
) -> Result<Bytes> {
    let (tx, rx) = mpsc::channel::<Result<Vec<Bytes>, tonic::Status>>(QUEUED_MESSAGES);
    let messages = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|message| (message, rx))
    });
    let body = Body::new(GrpcBody::request(messages.boxed()));
    let location = request.location.clone();
    let call = runtime.spawn(async move {
        let channel = connections.take(&location).await?;
        let response = connections.call(channel.clone(), DO_PUT_PATH, body).await?;
        let in_headers = status_in_headers(&response);
        let result = read_put_result(response.into_body(), in_headers).await?;
        connections.give_back(&location, channel);
        Ok::<_, Error>(result)
    });
    let sent = send_batches(&tx, request, &schema, batches);
    if let Err(e) = &sent {
        // Breaks the request body off: the server stores nothing.
        let _ = tx.blocking_send(Err(tonic::Status::cancelled(e.to_string())));
    }
    drop(tx);
    let result = runtime
        .block_on(call)
        .map_err(|e| Error::Internal(format!("the put's task failed: {e}")))?;
    // The source's own error comes first: the server only saw a broken stream.
    sent?;
    result
}

/// Frames and queues every batch; stops early (without error) once the call
/// has ended, whose outcome then tells what happened.
fn send_batches(
    tx: &mpsc::Sender<Result<Vec<Bytes>, tonic::Status>>,
    request: PutRequest,
    schema: &SchemaRef,
    batches: impl Iterator<Item = Result<RecordBatch, ArrowError>>,
) -> Result<()> {
    let mut encoder =
        FlightMessageEncoder::try_new(schema, request.max_message_bytes).map_err(Error::Source)?;
    let descriptor = request.descriptor.encode_to_vec();
    let mut first = true;
    // The first message (the schema) carries the descriptor; the put's options
    // follow in a message of their own, as pyarrow's `write_metadata` sends
    // them, which any Flight server's reader hands over as metadata.
    let mut send = |message: FlightMessage| -> Result<bool> {
        let framed = if std::mem::take(&mut first) {
            let mut framed = grpc_frame_with(message, &descriptor, &[])?;
            if !request.app_metadata.is_empty() {
                let metadata = FlightMessage {
                    header: Bytes::new(),
                    body: Vec::new(),
                    body_len: 0,
                };
                framed.extend(grpc_frame_with(metadata, &[], &request.app_metadata)?);
            }
            framed
        } else {
            grpc_frame(message)?
        };
        Ok(tx.blocking_send(Ok(framed)).is_ok())
    };
    for batch in batches {
        let batch = batch.map_err(Error::Source)?;
        for message in encoder.encode(&batch).map_err(Error::Source)? {
            if !send(message)? {
                return Ok(());
            }
        }
    }
    for message in encoder.finish().map_err(Error::Source)? {
        if !send(message)? {
            return Ok(());
        }
    }
    Ok(())
}

/// The last PutResult's `app_metadata`, once the call has ended well.
async fn read_put_result(body: Body, status_in_headers: bool) -> Result<Bytes> {
    let collected = body.collect().await.map_err(transport_failure)?;
    end_status(collected.trailers(), status_in_headers)?;
    let mut data = collected.to_bytes();
    let mut last = Bytes::new();
    while !data.is_empty() {
        let prefix: [u8; 5] = data
            .get(..5)
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| Error::Malformed("a PutResult cut short".into()))?;
        let len = message_length(&prefix, MAX_RESULT, "PutResult")?;
        data.advance(5);
        if data.len() < len {
            return Err(Error::Malformed("a PutResult cut short".into()));
        }
        let message = data.split_to(len);
        last = PutResult::decode(message)
            .map_err(|e| Error::Malformed(format!("a PutResult: {e}")))?
            .app_metadata;
    }
    Ok(last)
}

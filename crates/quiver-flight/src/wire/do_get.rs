//! DoGet answered below tonic, with the zero-copy encoder.

use std::future::poll_fn;
use std::pin::Pin;

use arrow::record_batch::RecordBatch;
use arrow_flight::Ticket;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use bytes::BytesMut;
use futures::{StreamExt, stream};
use http_body::Body as _;
use prost::Message;
use quiver_store::batch_bytes;
use tonic::Status;
use tonic::body::Body;

use super::message_size;
use crate::rpc_log::{RpcLog, logged};
use crate::sql::Batches;
use crate::{Error, QuiverService, panics};
use quiver_ipc::FlightMessageEncoder;
use quiver_wire::{GrpcBody, grpc_frame, message_length};

/// Largest DoGet request (a ticket) read: 1 MiB.
const MAX_TICKET_REQUEST: usize = 1 << 20;

pub(super) async fn respond(
    service: QuiverService,
    request: http::Request<Body>,
    mut log: RpcLog,
) -> Result<http::Response<Body>, Status> {
    let prepared = prepare(&service, request, &mut log)
        .await
        .map_err(Status::from);
    let (schema, batches, mut encoder) = log.outcome(prepared)?;
    // `None` marks the end: a stream that gave no batch still sends its
    // schema (and one empty batch).
    let mut sent = false;
    let items = batches
        .map(Some)
        .chain(stream::once(futures::future::ready(None)));
    // The stream holds the log, whose line is written when it ends.
    let rpc = log.rpc();
    let frames = logged(items, log, move |log, item| {
        let batch = match item {
            Some(Ok(batch)) => batch,
            Some(Err(e)) => return log.outcome(Err(Status::from(e))),
            None if sent => return Ok(Vec::new()),
            None => RecordBatch::new_empty(Arc::clone(&schema)),
        };
        sent = true;
        log.add(batch.num_rows() as u64, batch_bytes(&batch));
        let framed = encoder
            .encode(&batch)
            .map_err(|e| Status::from(Error::Internal(format!("cannot encode a batch: {e}"))))
            .and_then(|messages| {
                let mut chunks = Vec::new();
                for message in messages {
                    chunks.extend(grpc_frame(message).map_err(Error::from)?);
                }
                Ok(chunks)
            });
        log.outcome(framed)
    });
    Ok(super::grpc_response(GrpcBody::response(
        panics::stream(rpc, frames).boxed(),
    )))
}

async fn prepare(
    service: &QuiverService,
    request: http::Request<Body>,
    log: &mut RpcLog,
) -> Result<(SchemaRef, Batches, FlightMessageEncoder), Error> {
    let max_message_bytes = message_size::for_request(
        request.headers(),
        service.max_flight_data_size(),
        service.large_flight_data_size(),
    );
    let ticket = read_ticket(request.into_body()).await?;
    let (schema, batches) = service.open_ticket(&ticket.ticket, log).await?;
    let encoder = FlightMessageEncoder::try_new(&schema, max_message_bytes)
        .map_err(|e| Error::Internal(format!("cannot encode the schema: {e}")))?;
    Ok((schema, batches, encoder))
}

/// Reads the one gRPC message of a DoGet request: a `Ticket`.
async fn read_ticket(mut body: Body) -> Result<Ticket, Error> {
    let mut buf = BytesMut::new();
    while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame =
            frame.map_err(|e| Error::Cancelled(format!("reading the DoGet request: {e}")))?;
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
            if buf.len() > 5 + MAX_TICKET_REQUEST {
                break;
            }
        }
    }
    let prefix: [u8; 5] = buf
        .get(..5)
        .and_then(|p| p.try_into().ok())
        .ok_or_else(|| Error::invalid("DoGet request carries no message"))?;
    let len = message_length(&prefix, MAX_TICKET_REQUEST, "tickets are at most 1 MiB")?;
    let message = buf.freeze().slice(5..);
    if len != message.len() {
        return Err(Error::invalid(
            "DoGet request must hold exactly one message",
        ));
    }
    Ticket::decode(message).map_err(|e| Error::invalid(format!("malformed Ticket: {e}")))
}

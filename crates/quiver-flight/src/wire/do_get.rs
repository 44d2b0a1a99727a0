//! DoGet answered below tonic, with the zero-copy encoder.

use std::future::poll_fn;
use std::pin::Pin;

use arrow::record_batch::RecordBatch;
use arrow_flight::Ticket;
use bytes::{Buf, Bytes, BytesMut};
use futures::{StreamExt, stream};
use http_body::Body as _;
use prost::Message;
use tonic::Status;
use tonic::body::Body;

use super::frames::FlightMessageEncoder;
use super::grpc_body::{GrpcBody, grpc_frame};
use crate::rpc_log::RpcLog;
use crate::{QuiverService, guard};

/// The HTTP/2 path of Flight's DoGet.
pub const DO_GET_PATH: &str = "/arrow.flight.protocol.FlightService/DoGet";

/// Largest DoGet request (a ticket) read: 1 MiB.
const MAX_TICKET_REQUEST: usize = 1 << 20;

pub(super) async fn respond(
    service: QuiverService,
    request: http::Request<Body>,
) -> http::Response<Body> {
    let mut log = RpcLog::new("DoGet");
    let ticket = match read_ticket(request.into_body()).await {
        Ok(ticket) => ticket,
        Err(status) => {
            log.failed(&status);
            return status.into_http();
        }
    };
    let resolved = service
        .resolve_ticket(&ticket.ticket, &mut log)
        .map_err(Status::from);
    let (schema, batches) = match log.outcome(resolved) {
        Ok(resolved) => resolved,
        Err(status) => return status.into_http(),
    };
    let mut encoder = match FlightMessageEncoder::try_new(&schema, service.max_flight_data_size()) {
        Ok(encoder) => encoder,
        Err(e) => return Status::internal(format!("cannot encode the schema: {e}")).into_http(),
    };
    let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    log.add(rows, batches.iter().map(quiver_store::batch_bytes).sum());
    // An empty table still sends its schema (and one empty batch).
    let batches = if batches.is_empty() {
        vec![RecordBatch::new_empty(schema)]
    } else {
        batches
    };
    let frames = stream::iter(batches).map(move |batch| {
        let framed = encoder
            .encode(&batch)
            .map_err(|e| Status::internal(format!("cannot encode a batch: {e}")))
            .and_then(|messages| {
                let mut chunks = Vec::new();
                for message in messages {
                    chunks.extend(grpc_frame(message)?);
                }
                Ok(chunks)
            });
        // The log lives as long as the stream: its line is written at the end.
        log.outcome(framed)
    });
    super::grpc_response(GrpcBody::new(guard::stream("DoGet", frames).boxed()))
}

/// Reads the one gRPC message of a DoGet request: a `Ticket`.
async fn read_ticket(mut body: Body) -> Result<Ticket, Status> {
    let mut buf = BytesMut::new();
    while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame =
            frame.map_err(|e| Status::cancelled(format!("reading the DoGet request: {e}")))?;
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
            if buf.len() > MAX_TICKET_REQUEST {
                return Err(Status::resource_exhausted("DoGet request over 1 MiB"));
            }
        }
    }
    let mut buf: Bytes = buf.freeze();
    if buf.len() < 5 {
        return Err(Status::invalid_argument("DoGet request carries no message"));
    }
    let compressed = buf.get_u8();
    let len = buf.get_u32() as usize;
    if compressed != 0 {
        return Err(Status::unimplemented(
            "compressed requests are not supported",
        ));
    }
    if len != buf.len() {
        return Err(Status::invalid_argument(
            "DoGet request must hold exactly one message",
        ));
    }
    Ticket::decode(buf).map_err(|e| Status::invalid_argument(format!("malformed Ticket: {e}")))
}

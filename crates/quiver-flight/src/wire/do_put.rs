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

use arrow_flight::{FlightData, FlightDescriptor, PutResult};
use futures::{Stream, StreamExt, stream};
use http_body::Body as _;
use prost::Message;
use tonic::Status;
use tonic::body::Body;

use super::body_pool::BodyPool;
use super::grpc_body::{GrpcBody, grpc_message, message_length};
use crate::auth::Caller;
use crate::rpc_log::RpcLog;
use crate::{Error, QuiverService};
use quiver_ipc::Rope;
use quiver_store::MemoryCharge;

/// The HTTP/2 path of Flight's DoPut.
pub const DO_PUT_PATH: &str = "/arrow.flight.protocol.FlightService/DoPut";

pub(super) async fn respond(
    service: QuiverService,
    request: http::Request<Body>,
    log: RpcLog,
) -> Result<http::Response<Body>, Status> {
    let caller = Caller::of(request.extensions());
    let put_result = put_body(&service, request.into_body(), caller, log).await?;
    let frame = grpc_message(&put_result.encode_to_vec());
    Ok(super::grpc_response(GrpcBody::new(
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
    received: Rope,
    max_message_size: usize,
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
            received: Rope::default(),
            max_message_size,
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
        let Some(prefix) = self.received.peek::<5>() else {
            return Ok(None);
        };
        let len = message_length(&prefix, self.max_message_size, "--max-message-size")?;
        if self.in_flight.bytes() < len as u64 {
            self.in_flight
                .try_grow(len as u64 - self.in_flight.bytes())?;
        }
        if self.received.len() < 5 + len {
            return Ok(None);
        }
        self.received.take(5).map_err(malformed)?;
        let message = self.received.split_to(len).map_err(malformed)?;
        let parsed = parse_flight_data(message, &self.bodies)?;
        self.in_flight.release();
        Ok(Some(parsed))
    }
}

fn malformed(e: impl std::fmt::Display) -> Error {
    Error::invalid(format!("malformed FlightData: {e}"))
}

fn read_varint(rope: &mut Rope) -> Result<u64, Error> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = rope
            .take_byte()
            .ok_or_else(|| malformed("message ends inside a varint"))?;
        if shift == 63 && byte > 1 {
            return Err(malformed("varint overflows 64 bits"));
        }
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(malformed("varint longer than 10 bytes"))
}

fn read_len(rope: &mut Rope) -> Result<usize, Error> {
    let len = usize::try_from(read_varint(rope)?).map_err(malformed)?;
    if len > rope.len() {
        return Err(malformed("field longer than its message"));
    }
    Ok(len)
}

/// Decodes one FlightData; `data_body` lands in a 64-byte aligned buffer from
/// `bodies`.
fn parse_flight_data(mut rope: Rope, bodies: &BodyPool) -> Result<FlightData, Error> {
    let mut data = FlightData::default();
    while !rope.is_empty() {
        let key = read_varint(&mut rope)?;
        let (field, wire_type) = (key >> 3, key & 7);
        match (field, wire_type) {
            (1, 2) => {
                let len = read_len(&mut rope)?;
                let bytes = rope.take_contiguous(len).map_err(malformed)?;
                data.flight_descriptor = Some(FlightDescriptor::decode(bytes).map_err(malformed)?);
            }
            (2, 2) => {
                let len = read_len(&mut rope)?;
                data.data_header = rope.take_contiguous(len).map_err(malformed)?;
            }
            (3, 2) => {
                let len = read_len(&mut rope)?;
                data.app_metadata = rope.take_contiguous(len).map_err(malformed)?;
            }
            (1000, 2) => {
                let len = read_len(&mut rope)?;
                data.data_body = bodies.copy(&rope.take(len).map_err(malformed)?);
            }
            (0, _) => return Err(malformed("field number 0")),
            (1 | 2 | 3 | 1000, wire_type) => {
                return Err(malformed(format!(
                    "field {field} with wire type {wire_type}, not bytes"
                )));
            }
            (_, 0) => {
                read_varint(&mut rope)?;
            }
            (_, 1) => {
                rope.take(8).map_err(malformed)?;
            }
            (_, 2) => {
                let len = read_len(&mut rope)?;
                rope.take(len).map_err(malformed)?;
            }
            (_, 5) => {
                rope.take(4).map_err(malformed)?;
            }
            (field, wire_type) => {
                return Err(malformed(format!(
                    "field {field} has unknown wire type {wire_type}"
                )));
            }
        }
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn rope_of(bytes: &[u8], piece: usize) -> Rope {
        Rope::new(bytes.chunks(piece).map(Bytes::copy_from_slice))
    }

    #[test]
    fn parses_what_prost_encodes_in_any_chunking() {
        let original = FlightData {
            flight_descriptor: Some(FlightDescriptor::new_path(vec!["a".into(), "b".into()])),
            data_header: Bytes::from(vec![7u8; 300]),
            app_metadata: Bytes::from_static(br#"{"mode":"append"}"#),
            data_body: Bytes::from((0..100_000u32).map(|i| i as u8).collect::<Vec<_>>()),
        };
        let encoded = original.encode_to_vec();
        for (piece, pool) in [1, 7, 4096, encoded.len()]
            .into_iter()
            .flat_map(|piece| [(piece, 0), (piece, 16 << 20)])
        {
            let parsed = parse_flight_data(rope_of(&encoded, piece), &BodyPool::new(pool)).unwrap();
            assert_eq!(parsed, original, "pieces of {piece}, pool of {pool}");
            assert_eq!(
                parsed.data_body.as_ptr() as usize % 64,
                0,
                "body is 64-byte aligned"
            );
        }
    }

    #[test]
    fn skips_unknown_fields_and_refuses_garbage() {
        let mut encoded = FlightData {
            data_header: Bytes::from_static(b"h"),
            ..Default::default()
        }
        .encode_to_vec();
        // field 9 varint 150, field 10 fixed32, field 11 fixed64, field 12 bytes
        encoded.extend_from_slice(&[
            0x48, 0x96, 0x01, 0x55, 1, 2, 3, 4, 0x59, 1, 2, 3, 4, 5, 6, 7, 8, 0x62, 2, 9, 9,
        ]);
        assert_eq!(
            parse_flight_data(rope_of(&encoded, 3), &BodyPool::new(0))
                .unwrap()
                .data_header,
            Bytes::from_static(b"h")
        );
        for garbage in [
            &[0x12, 0x05, 1][..],
            &[0x0b],
            &[0xff; 11],
            &[0xc2, 0x3e, 0xff, 0xff, 0xff, 0xff, 0x0f],
        ] {
            assert!(
                parse_flight_data(rope_of(garbage, 2), &BodyPool::new(0)).is_err(),
                "{garbage:?}"
            );
        }
    }
}

//! gRPC framing of FlightData messages, and the HTTP/2 response body that
//! carries them.
//!
//! A FlightData is a protobuf message; DoGet only sets `data_header` (field 2)
//! and `data_body` (field 1000), both `bytes`. Its encoding is a tag, a varint
//! length and the bytes, so the framing is a few bytes in front of the header
//! and the body; the body itself stays the chunks it came as.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use futures::stream::BoxStream;
use http::HeaderMap;
use http_body::{Body, Frame};
use tonic::Status;

use crate::Error;
use quiver_ipc::FlightMessage;

/// Protobuf tag of `FlightData.data_header` (field 2, length-delimited).
const DATA_HEADER_TAG: &[u8] = &[0x12];
/// Protobuf tag of `FlightData.data_body` (field 1000, length-delimited).
const DATA_BODY_TAG: &[u8] = &[0xc2, 0x3e];

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn put_varint(buf: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

/// The length of the gRPC message whose 5-byte prefix is `prefix`, refusing
/// compressed messages and lengths over `limit` (set by `flag`).
pub(crate) fn message_length(
    prefix: &[u8; 5],
    limit: usize,
    flag: &'static str,
) -> Result<usize, Error> {
    if prefix[0] != 0 {
        return Err(Error::Unimplemented(
            "compressed gRPC messages are not supported".into(),
        ));
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if len > limit {
        return Err(Error::MessageTooLarge { len, limit, flag });
    }
    Ok(len)
}

/// One gRPC length-prefixed message around an encoded protobuf message.
pub(crate) fn grpc_message(encoded: &[u8]) -> Bytes {
    let mut frame = BytesMut::with_capacity(5 + encoded.len());
    frame.put_u8(0);
    frame.put_u32(encoded.len() as u32);
    frame.put_slice(encoded);
    frame.freeze()
}

/// One gRPC length-prefixed message holding `message` as a FlightData: a small
/// prefix (gRPC header, protobuf tags and lengths, the IPC header), then the
/// body chunks untouched.
pub(crate) fn grpc_frame(message: FlightMessage) -> Result<Vec<Bytes>, Status> {
    let header_len = message.header.len();
    let header_field = if header_len > 0 {
        DATA_HEADER_TAG.len() + varint_len(header_len as u64) + header_len
    } else {
        0
    };
    let body_field = if message.body_len > 0 {
        DATA_BODY_TAG.len() + varint_len(message.body_len as u64) + message.body_len
    } else {
        0
    };
    let proto_len = u32::try_from(header_field + body_field).map_err(|_| {
        Status::from(Error::Internal(
            "a FlightData message over 4 GiB cannot be framed for gRPC".into(),
        ))
    })?;
    let mut prefix = BytesMut::with_capacity(5 + header_field + 12);
    prefix.put_u8(0); // not compressed
    prefix.put_u32(proto_len);
    if header_len > 0 {
        prefix.put_slice(DATA_HEADER_TAG);
        put_varint(&mut prefix, header_len as u64);
        prefix.put_slice(&message.header);
    }
    if message.body_len > 0 {
        prefix.put_slice(DATA_BODY_TAG);
        put_varint(&mut prefix, message.body_len as u64);
    }
    let mut out = Vec::with_capacity(1 + message.body.len());
    out.push(prefix.freeze());
    out.extend(message.body.into_iter().filter(|b| !b.is_empty()));
    Ok(out)
}

/// A gRPC response body: the chunks of a stream of gRPC frames, then the
/// trailers with the status (`grpc-status: 0`, or the error that ended it).
pub(crate) struct GrpcBody {
    frames: BoxStream<'static, Result<Vec<Bytes>, Status>>,
    pending: VecDeque<Bytes>,
    done: bool,
}

impl std::fmt::Debug for GrpcBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcBody")
            .field("pending", &self.pending.len())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl GrpcBody {
    pub(crate) fn new(frames: BoxStream<'static, Result<Vec<Bytes>, Status>>) -> Self {
        Self {
            frames,
            pending: VecDeque::new(),
            done: false,
        }
    }
}

fn trailers(status: &Status) -> HeaderMap {
    let mut map = HeaderMap::new();
    if status.add_header(&mut map).is_err() {
        // The message could not be a header value: send the code and the
        // details alone.
        let _ = Status::with_details(status.code(), "", status.details().to_vec().into())
            .add_header(&mut map);
    }
    map
}

impl Body for GrpcBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        loop {
            if let Some(chunk) = self.pending.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(chunk))));
            }
            if self.done {
                return Poll::Ready(None);
            }
            match ready!(self.frames.poll_next_unpin(cx)) {
                Some(Ok(chunks)) => self.pending.extend(chunks),
                Some(Err(status)) => {
                    self.done = true;
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers(&status)))));
                }
                None => {
                    self.done = true;
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers(&Status::ok(""))))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_flight::FlightData;
    use prost::Message;

    #[test]
    fn frames_decode_as_flight_data() {
        for (header, body) in [
            (vec![1u8; 10], vec![vec![2u8; 300], vec![3u8; 5]]),
            (vec![4u8; 200], vec![]),
            (vec![], vec![vec![5u8; 70_000]]),
        ] {
            let body_len = body.iter().map(Vec::len).sum();
            let message = FlightMessage {
                header: header.clone().into(),
                body: body.iter().cloned().map(Bytes::from).collect(),
                body_len,
            };
            let frame: Vec<u8> = grpc_frame(message).unwrap().concat();
            assert_eq!(frame[0], 0);
            let len = u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]) as usize;
            assert_eq!(len, frame.len() - 5);
            let decoded = FlightData::decode(&frame[5..]).unwrap();
            assert_eq!(decoded.data_header.to_vec(), header);
            assert_eq!(decoded.data_body.to_vec(), body.concat());
            assert!(decoded.app_metadata.is_empty() && decoded.flight_descriptor.is_none());
        }
    }

    #[test]
    fn varints() {
        for v in [0u64, 1, 127, 128, 300, 16_383, 16_384, 1 << 31, u64::MAX] {
            let mut buf = BytesMut::new();
            put_varint(&mut buf, v);
            assert_eq!(buf.len(), varint_len(v));
            assert_eq!(
                prost::encoding::decode_varint(&mut buf.freeze()).unwrap(),
                v
            );
        }
    }
}

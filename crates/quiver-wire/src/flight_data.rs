//! A FlightData parsed off the frames it arrived in.
//!
//! gRPC over HTTP/2 delivers a message in DATA frames of at most the frame
//! size the receiver allows; a stock client (tonic) copies them into one
//! buffer, and the IPC decoder copies a body again unless it starts on a
//! 64-byte boundary, which a body inside a message almost never does. Here the
//! frames stay as they arrived (a [`Rope`] of references), the protobuf fields
//! around the body are read off them, and the body is copied once, into
//! 64-byte aligned memory from a [`BodyPool`] that the decoded arrays use as
//! it is.

use arrow_flight::{FlightData, FlightDescriptor};
use prost::Message;
use quiver_ipc::{Rope, check_buffers};

use crate::body_pool::BodyPool;
use crate::grpc::message_length;
use crate::{WireError, malformed};

/// `data` as an IPC message for arrow-flight's decoder: `None` for a message
/// that carries none (a descriptor or `app_metadata` alone, as pyarrow's
/// `write_metadata` sends), an error if a buffer its header declares lies
/// outside its body (arrow-ipc's decoder would panic on it). Every incoming
/// stream, the server's DoPut and the client's DoGet, passes through it.
pub fn ipc_message(data: FlightData) -> Result<Option<FlightData>, WireError> {
    if data.data_header.is_empty() {
        return Ok(None);
    }
    check_buffers(&data.data_header, data.data_body.len()).map_err(WireError::Malformed)?;
    Ok(Some(data))
}

/// The bytes of a gRPC stream of FlightData received so far (the payloads of
/// its HTTP/2 DATA frames, kept as they arrived), cut into messages as they
/// complete. Both ends read their incoming streams through it: the server's
/// DoPut and the client's DoGet.
#[derive(Debug)]
pub struct Received {
    rope: Rope,
    limit: usize,
    flag: &'static str,
}

impl Received {
    /// An empty stream whose messages may be at most `limit` bytes; `flag`
    /// names what sets the limit, for the error.
    pub fn new(limit: usize, flag: &'static str) -> Self {
        Self {
            rope: Rope::default(),
            limit,
            flag,
        }
    }

    /// Adds the payload of the next DATA frame.
    pub fn push(&mut self, data: bytes::Bytes) {
        self.rope.push(data);
    }

    /// Whether nothing of a next message has arrived.
    pub fn is_empty(&self) -> bool {
        self.rope.is_empty()
    }

    /// The length of the next message, once its 5-byte prefix has arrived
    /// (before the rest has: a receiver can reserve memory for it).
    pub fn next_len(&self) -> Result<Option<usize>, WireError> {
        self.rope
            .peek::<5>()
            .map(|prefix| message_length(&prefix, self.limit, self.flag))
            .transpose()
    }

    /// The next message, parsed (its body copied into memory from
    /// `bodies`), once the whole of it has arrived.
    pub fn next_message(&mut self, bodies: &BodyPool) -> Result<Option<FlightData>, WireError> {
        let Some(len) = self.next_len()? else {
            return Ok(None);
        };
        if self.rope.len() < 5 + len {
            return Ok(None);
        }
        self.rope.take(5).map_err(malformed)?;
        let message = self.rope.split_to(len).map_err(malformed)?;
        parse_flight_data(message, bodies).map(Some)
    }
}

fn read_varint(rope: &mut Rope) -> Result<u64, WireError> {
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

fn read_len(rope: &mut Rope) -> Result<usize, WireError> {
    let len = usize::try_from(read_varint(rope)?).map_err(malformed)?;
    if len > rope.len() {
        return Err(malformed("field longer than its message"));
    }
    Ok(len)
}

/// Decodes one FlightData; `data_body` lands in a 64-byte aligned buffer from
/// `bodies`.
pub fn parse_flight_data(mut rope: Rope, bodies: &BodyPool) -> Result<FlightData, WireError> {
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

//! gRPC framing of FlightData messages.
//!
//! A FlightData is a protobuf message; a data stream only sets `data_header`
//! (field 2) and `data_body` (field 1000), both `bytes`. Its encoding is a
//! tag, a varint length and the bytes, so the framing is a few bytes in front
//! of the header and the body; the body itself stays the chunks it came as.

use bytes::{BufMut, Bytes, BytesMut};
use quiver_ipc::FlightMessage;

use crate::WireError;

/// Protobuf tag of `FlightData.flight_descriptor` (field 1, length-delimited).
const DESCRIPTOR_TAG: &[u8] = &[0x0a];
/// Protobuf tag of `FlightData.data_header` (field 2, length-delimited).
const DATA_HEADER_TAG: &[u8] = &[0x12];
/// Protobuf tag of `FlightData.app_metadata` (field 3, length-delimited).
const APP_METADATA_TAG: &[u8] = &[0x1a];
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
pub fn message_length(
    prefix: &[u8; 5],
    limit: usize,
    flag: &'static str,
) -> Result<usize, WireError> {
    if prefix[0] != 0 {
        return Err(WireError::Compressed);
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if len > limit {
        return Err(WireError::MessageTooLarge { len, limit, flag });
    }
    Ok(len)
}

/// One gRPC length-prefixed message around an encoded protobuf message.
pub fn grpc_message(encoded: &[u8]) -> Bytes {
    let mut frame = BytesMut::with_capacity(5 + encoded.len());
    frame.put_u8(0);
    frame.put_u32(encoded.len() as u32);
    frame.put_slice(encoded);
    frame.freeze()
}

/// One gRPC length-prefixed message holding `message` as a FlightData: a small
/// prefix (gRPC header, protobuf tags and lengths, the IPC header), then the
/// body chunks untouched.
pub fn grpc_frame(message: FlightMessage) -> Result<Vec<Bytes>, WireError> {
    grpc_frame_with(message, &[], &[])
}

/// [`grpc_frame`] with a FlightData's other fields: `descriptor` (an encoded
/// `FlightDescriptor`, which a DoPut's first message carries) and
/// `app_metadata`, each left out when empty.
pub fn grpc_frame_with(
    message: FlightMessage,
    descriptor: &[u8],
    app_metadata: &[u8],
) -> Result<Vec<Bytes>, WireError> {
    let field_len = |tag: &[u8], len: usize| {
        if len > 0 {
            tag.len() + varint_len(len as u64) + len
        } else {
            0
        }
    };
    let header_len = message.header.len();
    let small_fields = field_len(DESCRIPTOR_TAG, descriptor.len())
        + field_len(DATA_HEADER_TAG, header_len)
        + field_len(APP_METADATA_TAG, app_metadata.len());
    let proto_len = small_fields + field_len(DATA_BODY_TAG, message.body_len);
    let proto_len = u32::try_from(proto_len).map_err(|_| WireError::TooLargeToFrame)?;
    let mut prefix = BytesMut::with_capacity(5 + small_fields + 12);
    prefix.put_u8(0); // not compressed
    prefix.put_u32(proto_len);
    for (tag, field) in [
        (DESCRIPTOR_TAG, descriptor),
        (DATA_HEADER_TAG, &message.header[..]),
        (APP_METADATA_TAG, app_metadata),
    ] {
        if !field.is_empty() {
            prefix.put_slice(tag);
            put_varint(&mut prefix, field.len() as u64);
            prefix.put_slice(field);
        }
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
    fn descriptor_and_metadata_decode_too() {
        let descriptor = arrow_flight::FlightDescriptor::new_path(vec!["t".into()]);
        let message = FlightMessage {
            header: Bytes::from_static(b"header"),
            body: vec![Bytes::from(vec![9u8; 1000])],
            body_len: 1000,
        };
        let frame: Vec<u8> = grpc_frame_with(
            message,
            &descriptor.encode_to_vec(),
            br#"{"mode":"append"}"#,
        )
        .unwrap()
        .concat();
        let decoded = FlightData::decode(&frame[5..]).unwrap();
        assert_eq!(decoded.flight_descriptor, Some(descriptor));
        assert_eq!(&decoded.app_metadata[..], br#"{"mode":"append"}"#);
        assert_eq!(&decoded.data_header[..], b"header");
        assert_eq!(decoded.data_body.to_vec(), vec![9u8; 1000]);
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

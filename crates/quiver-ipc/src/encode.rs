//! Arrow record batches as FlightData messages whose bodies reference the
//! arrays' buffers.

use std::collections::VecDeque;

use arrow::buffer::Buffer;
use arrow::datatypes::Schema;
use arrow::error::ArrowError;
use arrow::ipc::writer::{IpcWriteOptions, StreamEncoder};
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use quiver_store::needed_bytes;

/// The IPC header of a message that carries none: a flatbuffer `Message`
/// table whose fields are all defaults (header type `NONE`, body length 0).
/// Flight messages with an empty `data_header` (a descriptor alone, or
/// `app_metadata` alone) are valid, but arrow-flight's decoder cannot parse
/// them; given this header it yields them as `DecodedPayload::None`.
pub const NO_HEADER: &[u8] = &[8, 0, 0, 0, 4, 0, 4, 0, 4, 0, 0, 0];

/// An arrow [`Buffer`] lent to `bytes`: the `Bytes` keeps it alive, no copy.
struct ArrowBytes(Buffer);

impl AsRef<[u8]> for ArrowBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

/// `buffer` as `Bytes` without copying.
pub fn to_bytes(buffer: Buffer) -> Bytes {
    Bytes::from_owner(ArrowBytes(buffer))
}

/// One IPC message as a FlightData carries it: the flatbuffer header and the
/// body as a chain of chunks.
#[derive(Debug, Clone)]
pub struct FlightMessage {
    /// The IPC message's flatbuffer metadata (FlightData's `data_header`).
    pub header: Bytes,
    /// The body as chunks that reference the arrays' buffers.
    pub body: Vec<Bytes>,
    /// The body's length, the sum of the chunks' lengths.
    pub body_len: usize,
}

/// Encodes a stream of batches of one schema into FlightData messages: the
/// schema (with the first batch), then for each batch its dictionaries (when
/// they changed) and the batch, batches larger than `max_message_bytes` split
/// into row slices.
pub struct FlightMessageEncoder {
    encoder: StreamEncoder,
    max_message_bytes: usize,
}

impl std::fmt::Debug for FlightMessageEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlightMessageEncoder")
            .field("max_message_bytes", &self.max_message_bytes)
            .finish_non_exhaustive()
    }
}

impl FlightMessageEncoder {
    /// An encoder for batches of `schema`; a batch over `max_message_bytes`
    /// goes out as several messages of row slices.
    pub fn try_new(schema: &Schema, max_message_bytes: usize) -> Result<Self, ArrowError> {
        Ok(Self {
            encoder: StreamEncoder::try_new_with_options(schema, IpcWriteOptions::default())?,
            max_message_bytes: max_message_bytes.max(1),
        })
    }

    /// The messages for `batch`.
    pub fn encode(&mut self, batch: &RecordBatch) -> Result<Vec<FlightMessage>, ArrowError> {
        let mut out = Vec::new();
        for part in split(batch, self.max_message_bytes) {
            // String views send every data buffer they hold, whatever the
            // views point to: such a slice goes out in buffers of its own.
            let part = quiver_store::compact_views(&part).unwrap_or(part);
            out.extend(messages(self.encoder.encode(&part)?)?);
        }
        Ok(out)
    }

    /// The messages that end the stream: the schema, if no batch carried it
    /// (a stream of no batches).
    pub fn finish(self) -> Result<Vec<FlightMessage>, ArrowError> {
        messages(self.encoder.finish()?)
    }
}

/// `batch` cut into row slices of about `max_bytes` each. Slices start at
/// multiples of 64 rows where they can, so validity bitmaps stay byte-aligned
/// and travel without a copy.
pub fn split(batch: &RecordBatch, max_bytes: usize) -> Vec<RecordBatch> {
    let rows = batch.num_rows();
    // What the messages will carry: a slice's own part of its buffers.
    let bytes: u64 = batch.columns().iter().map(|c| needed_bytes(c)).sum();
    let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
    if bytes <= max_bytes || rows <= 1 {
        return vec![batch.clone()];
    }
    let mut rows_per_part = ((rows as u128 * max_bytes as u128) / bytes as u128) as usize;
    if rows_per_part >= 64 {
        rows_per_part -= rows_per_part % 64;
    }
    let rows_per_part = rows_per_part.max(1);
    (0..rows)
        .step_by(rows_per_part)
        .map(|start| batch.slice(start, rows_per_part.min(rows - start)))
        .collect()
}

/// Cuts the framed IPC stream `StreamEncoder` writes (continuation marker,
/// metadata length, metadata, body) into messages, by reference.
fn messages(buffers: Vec<Buffer>) -> Result<Vec<FlightMessage>, ArrowError> {
    let mut rope = Rope::new(buffers.into_iter().map(to_bytes));
    let mut out = Vec::new();
    while !rope.is_empty() {
        let prefix = rope.take_contiguous(8)?;
        if prefix[..4] != [0xff; 4] {
            return Err(ArrowError::IpcError(
                "IPC message without continuation marker".into(),
            ));
        }
        let len = i32::from_le_bytes([prefix[4], prefix[5], prefix[6], prefix[7]]);
        let len = usize::try_from(len)
            .map_err(|_| ArrowError::IpcError("negative IPC metadata length".into()))?;
        if len == 0 {
            break; // end of stream
        }
        let header = rope.take_contiguous(len)?;
        let message = arrow::ipc::root_as_message(&header)
            .map_err(|e| ArrowError::IpcError(format!("unreadable IPC message: {e}")))?;
        let body_len = usize::try_from(message.bodyLength())
            .map_err(|_| ArrowError::IpcError("negative IPC body length".into()))?;
        let body = rope.take(body_len)?;
        out.push(FlightMessage {
            header,
            body,
            body_len,
        });
    }
    Ok(out)
}

/// A sequence of `Bytes` read front to back without copying.
#[derive(Debug, Default)]
pub struct Rope {
    parts: VecDeque<Bytes>,
    len: usize,
}

impl Rope {
    /// A rope of `parts`, in order.
    pub fn new(parts: impl IntoIterator<Item = Bytes>) -> Self {
        let mut rope = Self::default();
        for part in parts {
            rope.push(part);
        }
        rope
    }

    /// Appends `part` at the end.
    pub fn push(&mut self, part: Bytes) {
        if !part.is_empty() {
            self.len += part.len();
            self.parts.push_back(part);
        }
    }

    /// Bytes left.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no bytes are left.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first `N` bytes, not consumed (None if fewer are left).
    pub fn peek<const N: usize>(&self) -> Option<[u8; N]> {
        if self.len < N {
            return None;
        }
        let mut out = [0u8; N];
        let mut filled = 0;
        for part in &self.parts {
            let n = (N - filled).min(part.len());
            out[filled..filled + n].copy_from_slice(&part[..n]);
            filled += n;
            if filled == N {
                break;
            }
        }
        Some(out)
    }

    /// The next byte, consumed.
    pub fn take_byte(&mut self) -> Option<u8> {
        let part = self.parts.front_mut()?;
        let byte = part[0];
        if part.len() == 1 {
            self.parts.pop_front();
        } else {
            bytes::Buf::advance(part, 1);
        }
        self.len -= 1;
        Some(byte)
    }

    /// The next `n` bytes as chunks of the parts.
    pub fn take(&mut self, mut n: usize) -> Result<Vec<Bytes>, ArrowError> {
        if n > self.len {
            return Err(ArrowError::IpcError("stream ended inside a message".into()));
        }
        self.len -= n;
        let mut out = Vec::new();
        while n > 0 {
            let Some(mut part) = self.parts.pop_front() else {
                break;
            };
            if part.len() > n {
                let rest = part.split_off(n);
                self.parts.push_front(rest);
            }
            n -= part.len();
            out.push(part);
        }
        Ok(out)
    }

    /// The next `n` bytes as a rope of their own.
    pub fn split_to(&mut self, n: usize) -> Result<Rope, ArrowError> {
        Ok(Rope::new(self.take(n)?))
    }

    /// The next `n` bytes in one piece (copied only if they span parts).
    pub fn take_contiguous(&mut self, n: usize) -> Result<Bytes, ArrowError> {
        let mut chunks = self.take(n)?;
        if chunks.len() == 1 {
            return Ok(chunks.remove(0));
        }
        Ok(chunks.concat().into())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn no_header_is_a_message_of_no_kind() {
        let message = arrow::ipc::root_as_message(NO_HEADER).expect("a valid flatbuffer");
        assert_eq!(message.header_type(), arrow::ipc::MessageHeader::NONE);
        assert_eq!(message.bodyLength(), 0);
    }

    use super::*;
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array};
    use arrow::ipc::reader::StreamReader;

    /// Rebuilds an IPC stream from messages and reads it with arrow's reader.
    fn decode(messages: &[FlightMessage]) -> Vec<RecordBatch> {
        let mut stream = Vec::new();
        for m in messages {
            stream.extend_from_slice(&[0xff; 4]);
            stream.extend_from_slice(&(m.header.len() as i32).to_le_bytes());
            stream.extend_from_slice(&m.header);
            assert_eq!(m.header.len() % 8, 0, "metadata keeps 8-byte alignment");
            let body: Vec<u8> = m.body.concat();
            assert_eq!(body.len(), m.body_len);
            stream.extend_from_slice(&body);
        }
        stream.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        StreamReader::try_new(std::io::Cursor::new(stream), None)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
    }

    fn typed(rows: usize) -> RecordBatch {
        crate::testing::every_type(0, rows)
    }

    #[test]
    fn round_trips_through_arrows_reader_with_schema_intact() {
        let batch = typed(1000);
        let mut encoder = FlightMessageEncoder::try_new(&batch.schema(), usize::MAX).unwrap();
        let messages = encoder.encode(&batch).unwrap();
        let decoded = decode(&messages);
        assert_eq!(decoded, vec![batch.clone()]);
        let large = crate::testing::LARGE_LIST_COLUMN;
        assert_eq!(
            decoded[0].schema().field(large).data_type(),
            batch.schema().field(large).data_type()
        );
    }

    #[test]
    fn splits_large_batches_and_slices_round_trip() {
        let batch = typed(10_000);
        let mut encoder = FlightMessageEncoder::try_new(&batch.schema(), 16 << 10).unwrap();
        let mut messages = encoder.encode(&batch).unwrap();
        // A sliced batch (not at a multiple of 8 rows) and an empty one.
        messages.extend(encoder.encode(&batch.slice(3, 1001)).unwrap());
        messages.extend(encoder.encode(&batch.slice(0, 0)).unwrap());
        let decoded = decode(&messages);
        assert!(decoded.len() > 3, "split into several messages");
        let all = arrow::compute::concat_batches(&batch.schema(), &decoded).unwrap();
        let expected =
            arrow::compute::concat_batches(&batch.schema(), &[batch.clone(), batch.slice(3, 1001)])
                .unwrap();
        assert_eq!(all, expected);
    }

    #[test]
    fn body_chunks_point_into_the_arrays() {
        let values = Int64Array::from_iter_values(0..100_000);
        let data_ptr = values.values().inner().as_ptr() as usize;
        let batch = RecordBatch::try_from_iter([("x", Arc::new(values) as ArrayRef)]).unwrap();
        let mut encoder = FlightMessageEncoder::try_new(&batch.schema(), usize::MAX).unwrap();
        let messages = encoder.encode(&batch).unwrap();
        let last = messages.last().unwrap();
        assert!(
            last.body
                .iter()
                .any(|chunk| chunk.as_ptr() as usize == data_ptr),
            "the values travel by reference, not copied"
        );
    }

    #[test]
    fn rope_takes_across_parts() {
        let mut rope = Rope::new([
            Bytes::from_static(b"abc"),
            Bytes::new(),
            Bytes::from_static(b"defg"),
        ]);
        assert_eq!(rope.peek::<4>(), Some(*b"abcd"));
        assert_eq!(rope.take_byte(), Some(b'a'));
        assert_eq!(rope.take_contiguous(1).unwrap(), Bytes::from_static(b"b"));
        assert_eq!(rope.take_contiguous(3).unwrap(), Bytes::from_static(b"cde"));
        assert_eq!(rope.take(2).unwrap(), vec![Bytes::from_static(b"fg")]);
        assert!(rope.is_empty());
        assert!(rope.take(1).is_err());
    }
}

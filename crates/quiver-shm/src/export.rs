//! A table as an Arrow IPC stream in a sealed memfd, and where each message's
//! flatbuffer header and body buffers lie in it.
//!
//! A version is written to a memfd once, the first time a client reads it over
//! shared memory, and the memfd lives as long as the version (it is the
//! version's attachment) or a reader holds it. A table put over shared memory
//! needs no writing: the client's memfds are the export. An export of several
//! memfds is one stream over their concatenation: offsets run on from one
//! memfd into the next, the first memfd's schema heads the stream and the
//! other memfds' schema messages are left out.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::ipc::{MessageHeader, root_as_message};
use arrow::record_batch::RecordBatch;
use memmap2::Mmap;
use quiver_store::{MemoryCharge, MemoryPool, TableVersion};

use super::sys;
use crate::{Result, ShmError};
use quiver_ipc::FlightMessageEncoder;

/// The continuation marker every encapsulated IPC message starts with.
const CONTINUATION: [u8; 4] = [0xff; 4];

/// One IPC message of the stream in the memfd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MessageLayout {
    /// The memfd of the export that holds the message.
    pub(crate) region: usize,
    /// The flatbuffer header, padded, as a range of the memfd.
    pub(crate) metadata: Range<usize>,
    /// The body, as a range of the memfd (empty for a schema).
    pub(crate) body: Range<usize>,
    /// For a record batch or dictionary batch: its buffers as (offset in the
    /// memfd, length).
    pub(crate) buffers: Option<Vec<(u64, u64)>>,
}

impl MessageLayout {
    /// Whether the body's first buffer lies at the body's start, as arrow's
    /// writers lay bodies out. Clients rely on it to find a body from its pairs
    /// alone (the first pair is where the body starts), so a memfd whose stream
    /// is laid out otherwise is not served as it is.
    pub(crate) fn body_starts_at_first_buffer(&self) -> bool {
        match self.buffers.as_deref() {
            None | Some([]) => true,
            Some([(offset, _), ..]) => *offset == self.body.start as u64,
        }
    }
}

/// A sealed memfd and its mapping, at `base` in its export's concatenation.
#[derive(Debug)]
struct Region {
    memfd: OwnedFd,
    map: Arc<Mmap>,
    base: usize,
}

/// One IPC stream in one or more sealed memfds.
#[derive(Debug)]
pub(crate) struct Export {
    regions: Vec<Region>,
    /// The messages, offsets into the concatenation of the memfds.
    messages: Vec<MessageLayout>,
    /// The memory this export holds, charged to the store's pool (none when
    /// the memfd also holds the version's batches).
    _charge: Option<MemoryCharge>,
}

impl Export {
    /// Writes `version` into a new memfd (one copy of its buffers), seals it,
    /// and charges it to `pool`.
    pub(crate) fn write(version: &TableVersion, pool: &MemoryPool) -> Result<Self> {
        let mut charge = pool.charge();
        charge.try_grow(version.num_bytes())?;
        let memfd = sys::memfd(&format!("quiver:{}", version.name()))
            .map_err(|e| io_error("create a memfd", e))?;
        let mut file = BufWriter::with_capacity(1 << 16, File::from(memfd));
        let len = write_stream(&mut file, version.schema(), version.batches())
            .map_err(|e| io_error("write the table into its memfd", e))?;
        let memfd = OwnedFd::from(
            file.into_inner()
                .map_err(|e| io_error("write the table into its memfd", e.into_error()))?,
        );
        charge.try_grow(len.saturating_sub(version.num_bytes()))?;
        sys::seal(memfd.as_fd()).map_err(|e| io_error("seal the memfd", e))?;
        let map = Arc::new(map(&memfd)?);
        let messages = scan(&map).map_err(ShmError::Internal)?;
        if !messages
            .iter()
            .all(MessageLayout::body_starts_at_first_buffer)
        {
            return Err(ShmError::Internal(
                "the IPC writer laid a body out with space before its first buffer".to_string(),
            ));
        }
        Ok(Self {
            regions: vec![Region {
                memfd,
                map,
                base: 0,
            }],
            messages,
            _charge: Some(charge),
        })
    }

    /// The export of sealed memfds, in order, each holding a validated stream
    /// (mapped, with its messages as `scan` found them) of the same schema.
    pub(crate) fn adopt(parts: Vec<(OwnedFd, Arc<Mmap>, Vec<MessageLayout>)>) -> Self {
        let mut regions = Vec::with_capacity(parts.len());
        let mut messages = Vec::new();
        let mut base = 0usize;
        for (index, (memfd, map, layouts)) in parts.into_iter().enumerate() {
            // The first memfd's schema heads the stream; the others' are the same.
            let skip = usize::from(index > 0);
            messages.extend(layouts.into_iter().skip(skip).map(|m| MessageLayout {
                region: index,
                metadata: m.metadata.start + base..m.metadata.end + base,
                body: m.body.start + base..m.body.end + base,
                buffers: m.buffers.map(|pairs| {
                    pairs
                        .into_iter()
                        .map(|(offset, len)| (offset + base as u64, len))
                        .collect()
                }),
            }));
            let len = map.len();
            regions.push(Region { memfd, map, base });
            base += len;
        }
        Self {
            regions,
            messages,
            _charge: None,
        }
    }

    /// The memfds, in order, to pass to a client.
    pub(crate) fn fds(&self) -> Vec<BorrowedFd<'_>> {
        self.regions.iter().map(|r| r.memfd.as_fd()).collect()
    }

    /// The stream's messages, schema first.
    pub(crate) fn messages(&self) -> &[MessageLayout] {
        &self.messages
    }

    /// The flatbuffer header of `message`.
    pub(crate) fn metadata(&self, message: &MessageLayout) -> &[u8] {
        let region = &self.regions[message.region];
        &region.map[message.metadata.start - region.base..message.metadata.end - region.base]
    }
}

/// Maps `memfd` read-only ([`sys::map_sealed`]: it must be sealed against
/// writing, shrinking and growing).
pub(crate) fn map(memfd: &OwnedFd) -> Result<Mmap> {
    sys::map_sealed(memfd.as_fd()).map_err(|e| io_error("map the memfd", e))
}

fn io_error(what: &str, e: io::Error) -> ShmError {
    if e.raw_os_error() == Some(libc::ENOSPC) || e.raw_os_error() == Some(libc::ENOMEM) {
        ShmError::ResourceExhausted(format!("cannot {what}: {e}"))
    } else {
        ShmError::Internal(format!("cannot {what}: {e}"))
    }
}

/// Writes `batches` as one IPC stream (every message 8-byte aligned, bodies
/// as arrow lays them out) and returns its length.
fn write_stream<'a>(
    out: &mut impl Write,
    schema: &SchemaRef,
    batches: impl Iterator<Item = &'a RecordBatch>,
) -> io::Result<u64> {
    let invalid = |e: arrow::error::ArrowError| io::Error::new(io::ErrorKind::InvalidData, e);
    let mut encoder = FlightMessageEncoder::try_new(schema, usize::MAX).map_err(invalid)?;
    let mut len = 0u64;
    let mut wrote_any = false;
    let empty = RecordBatch::new_empty(schema.clone());
    let mut write = |batch: &RecordBatch, len: &mut u64| -> io::Result<()> {
        for message in encoder.encode(batch).map_err(invalid)? {
            let pad = (8 - message.header.len() % 8) % 8;
            let metadata_len = i32::try_from(message.header.len() + pad).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidData, "an IPC header over 2 GiB")
            })?;
            out.write_all(&CONTINUATION)?;
            out.write_all(&metadata_len.to_le_bytes())?;
            out.write_all(&message.header)?;
            out.write_all(&[0u8; 8][..pad])?;
            let mut body = 0;
            for chunk in &message.body {
                out.write_all(chunk)?;
                body += chunk.len();
            }
            if body != message.body_len {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a body of {body} bytes declared as {}", message.body_len),
                ));
            }
            *len += 8 + metadata_len as u64 + body as u64;
        }
        Ok(())
    };
    for batch in batches {
        write(batch, &mut len)?;
        wrote_any = true;
    }
    if !wrote_any {
        // The schema, and one empty batch: a reader learns the schema.
        write(&empty, &mut len)?;
    }
    out.write_all(&CONTINUATION)?;
    out.write_all(&[0u8; 4])?;
    out.flush()?;
    Ok(len + 8)
}

/// Where each message of the IPC stream `bytes` lies. The stream must start
/// with a schema, use the continuation marker, and end with End of Stream or
/// the end of `bytes`; every buffer must lie inside its message's body.
pub(crate) fn scan(bytes: &[u8]) -> Result<Vec<MessageLayout>, String> {
    let mut messages = Vec::new();
    let mut pos = 0usize;
    let read_u32 = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(
            bytes.get(at..at.checked_add(4)?)?.try_into().ok()?,
        ))
    };
    while pos < bytes.len() {
        let at = pos;
        if bytes.get(pos..pos + 4) != Some(&CONTINUATION[..]) {
            return Err(format!(
                "no continuation marker at byte {at}: not an Arrow IPC stream (or the legacy format)"
            ));
        }
        let metadata_len = read_u32(pos + 4).ok_or("the stream ends inside a message prefix")?;
        pos += 8;
        if metadata_len == 0 {
            if pos != bytes.len() {
                return Err(format!(
                    "{} bytes after the End of Stream marker",
                    bytes.len() - pos
                ));
            }
            break;
        }
        let metadata = pos..pos
            .checked_add(metadata_len as usize)
            .filter(|end| *end <= bytes.len())
            .ok_or_else(|| format!("the header at byte {at} runs past the end"))?;
        let message = root_as_message(&bytes[metadata.clone()])
            .map_err(|e| format!("the header at byte {at} is not a valid IPC message: {e}"))?;
        let body_len = usize::try_from(message.bodyLength())
            .map_err(|_| format!("the message at byte {at} has a negative body length"))?;
        let body = metadata.end
            ..metadata
                .end
                .checked_add(body_len)
                .filter(|end| *end <= bytes.len())
                .ok_or_else(|| format!("the body of the message at byte {at} runs past the end"))?;
        let batch = match message.header_type() {
            MessageHeader::Schema if messages.is_empty() => None,
            MessageHeader::Schema => return Err("a second schema message".to_string()),
            _ if messages.is_empty() => {
                return Err("the stream does not start with a schema".to_string());
            }
            MessageHeader::RecordBatch => message.header_as_record_batch(),
            MessageHeader::DictionaryBatch => {
                message.header_as_dictionary_batch().and_then(|d| d.data())
            }
            other => return Err(format!("unexpected message type {other:?}")),
        };
        let buffers = match batch {
            None if message.header_type() == MessageHeader::Schema => None,
            None => return Err(format!("the batch message at byte {at} has no header")),
            Some(batch) => {
                let mut pairs = Vec::new();
                for buffer in batch.buffers().into_iter().flatten() {
                    let (offset, len) = (buffer.offset(), buffer.length());
                    let end = offset.checked_add(len);
                    if offset < 0 || len < 0 || end.is_none_or(|e| e as u64 > body_len as u64) {
                        return Err(format!(
                            "a buffer at {offset} of {len} bytes lies outside its {body_len}-byte body"
                        ));
                    }
                    pairs.push(((body.start + offset as usize) as u64, len as u64));
                }
                Some(pairs)
            }
        };
        messages.push(MessageLayout {
            region: 0,
            metadata,
            body: body.clone(),
            buffers,
        });
        pos = body.end;
    }
    if messages.is_empty() {
        return Err("an empty stream: no schema message".to_string());
    }
    Ok(messages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use arrow::ipc::reader::StreamReader;

    fn batch(first: i64, n: usize) -> RecordBatch {
        let ints = Int64Array::from_iter_values(first..first + n as i64);
        let strings = StringArray::from_iter_values((0..n).map(|i| format!("s{i}")));
        RecordBatch::try_from_iter([
            ("i", Arc::new(ints) as ArrayRef),
            ("s", Arc::new(strings) as ArrayRef),
        ])
        .unwrap()
    }

    #[test]
    fn written_stream_reads_back_and_scans() {
        let batches = vec![batch(0, 100), batch(100, 3).slice(1, 2), batch(7, 0)];
        let mut out = Vec::new();
        let len = write_stream(&mut out, &batches[0].schema(), batches.iter()).unwrap();
        assert_eq!(len as usize, out.len());
        let read: Vec<_> = StreamReader::try_new(&out[..], None)
            .unwrap()
            .collect::<std::result::Result<_, _>>()
            .unwrap();
        assert_eq!(read, batches);
        let messages = scan(&out).unwrap();
        assert_eq!(messages.len(), 4, "schema and three batches");
        assert!(messages[0].buffers.is_none());
        for m in &messages {
            assert_eq!(m.metadata.start % 8, 0);
            assert_eq!(m.body.start % 8, 0);
            assert!(m.body_starts_at_first_buffer(), "clients find bodies by it");
            for (offset, len) in m.buffers.iter().flatten() {
                assert!(*offset as usize >= m.body.start);
                assert!((*offset + *len) as usize <= m.body.end);
            }
        }
        // The first batch's int column is where its pair says.
        let (offset, len) = messages[1].buffers.as_ref().unwrap()[1];
        let values: Vec<i64> = out[offset as usize..(offset + len) as usize]
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(values, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn a_body_with_room_before_its_first_buffer_is_told_apart() {
        let layout = |buffers: Option<Vec<(u64, u64)>>| MessageLayout {
            region: 0,
            metadata: 8..64,
            body: 64..128,
            buffers,
        };
        assert!(layout(None).body_starts_at_first_buffer());
        assert!(layout(Some(vec![])).body_starts_at_first_buffer());
        assert!(layout(Some(vec![(64, 0), (64, 8)])).body_starts_at_first_buffer());
        assert!(!layout(Some(vec![(72, 8)])).body_starts_at_first_buffer());
    }

    /// A sealed memfd holding `batches` as a stream, mapped, with its layout.
    fn sealed(batches: &[RecordBatch]) -> (OwnedFd, Arc<Mmap>, Vec<MessageLayout>) {
        let memfd = sys::memfd("test").unwrap();
        let mut file = File::from(memfd);
        write_stream(&mut file, &batches[0].schema(), batches.iter()).unwrap();
        let memfd = OwnedFd::from(file);
        sys::seal(memfd.as_fd()).unwrap();
        let map = Arc::new(map(&memfd).unwrap());
        let messages = scan(&map).unwrap();
        (memfd, map, messages)
    }

    #[test]
    fn an_export_of_several_memfds_is_one_stream_over_their_concatenation() {
        let first = sealed(&[batch(0, 10), batch(10, 5)]);
        let second = sealed(&[batch(100, 7)]);
        let first_len = first.1.len();
        let second_header = second.1[second.2[1].metadata.clone()].to_vec();
        let export = Export::adopt(vec![first, second]);
        assert_eq!(export.fds().len(), 2);
        let messages = export.messages();
        // One schema (the first memfd's), then the three batches in order.
        assert_eq!(messages.len(), 4);
        assert!(messages[0].buffers.is_none());
        assert_eq!(
            messages.iter().map(|m| m.region).collect::<Vec<_>>(),
            [0, 0, 0, 1]
        );
        // The second memfd's batch: its header read from its own mapping, its
        // offsets counted from the end of the first memfd.
        let last = &messages[3];
        assert_eq!(export.metadata(last), &second_header[..]);
        assert!(last.body.start >= first_len);
        let (offset, len) = last.buffers.as_ref().unwrap()[1];
        let region = &export.regions[1];
        let local = offset as usize - region.base;
        let values: Vec<i64> = region.map[local..local + len as usize]
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(values, (100..107).collect::<Vec<_>>());
    }

    #[test]
    fn empty_table_is_a_schema_and_an_empty_batch() {
        let schema = batch(0, 1).schema();
        let mut out = Vec::new();
        write_stream(&mut out, &schema, std::iter::empty()).unwrap();
        assert_eq!(scan(&out).unwrap().len(), 2);
    }

    #[test]
    fn scan_refuses_broken_streams() {
        let b = batch(0, 10);
        let mut out = Vec::new();
        write_stream(&mut out, &b.schema(), std::iter::once(&b)).unwrap();
        assert!(scan(&[]).is_err());
        assert!(scan(&out[..out.len() - 20]).is_err(), "cut inside a body");
        let mut trailing = out.clone();
        trailing.extend_from_slice(&[1, 2, 3]);
        assert!(scan(&trailing).is_err());
        let mut no_marker = out.clone();
        no_marker[0] = 0;
        assert!(scan(&no_marker).is_err());
        // Without the End of Stream marker the stream is still whole.
        assert_eq!(scan(&out[..out.len() - 8]).unwrap().len(), 2);
    }
}

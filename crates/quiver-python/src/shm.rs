//! The shared-memory get (docs/shm.md), in Rust: batches built from the
//! metadata received, their buffers in place in the server's memfds.
//!
//! The client connects to the location's Unix `SOCK_SEQPACKET` socket and
//! sends `want_bundled` (or `want_data`) with the ticket. The memfds come with
//! the first datagram (`SCM_RIGHTS`) and are mapped read-only; then the
//! metadata stream (each IPC header, End of Stream last) and, for each header
//! with a body, a body message listing its buffers as (offset, length) pairs
//! into the memfds, one after the other. Each batch is decoded by arrow-ipc
//! from its header as received and its body as a slice of the mapping: no
//! byte of a body is copied and no page of the mapping is touched here
//! (fixed-width columns without nulls are not even read by validation).
//!
//! Every buffer of the returned batches keeps the mappings alive (a
//! [`Lease`] shared by the mappings' owners); when the last one goes, the
//! lease sends `free_data` with every offset received and closes the
//! connection, as the Python client's finalizer does. A process that dies
//! simply disconnects, which frees as well.
//!
//! The messages are read with `quiver_shm::framing` and the system calls
//! (socket, `SCM_RIGHTS`, the sealed mapping) made with `quiver_shm::client`:
//! the server's own, so that both sides share one definition of the format.

use std::collections::HashMap;
use std::io::{self, IoSlice};
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::buffer::Buffer;
use arrow::datatypes::SchemaRef;
use arrow::ipc::convert::fb_to_schema;
use arrow::ipc::reader::{read_dictionary, read_record_batch};
use arrow::ipc::{MessageHeader, root_as_message};
use arrow::record_batch::{RecordBatch, RecordBatchIterator, RecordBatchReader};
use bytes::Bytes;
use memmap2::Mmap;
use pyo3::prelude::*;
use quiver_shm::client;
use quiver_shm::framing::{self, BODY_SHARED, Message, SharedBody};
use tonic::Code;

use crate::arrow_c;
use crate::error::{Error, Result, RpcStatus};

/// Largest datagram expected from the server (a bundle, a header or a list
/// of buffers), as in the Python client.
const MAX_MESSAGE: usize = 4 << 20;
/// Offsets per `free_data` message (well under the server's 1 MiB requests).
const FREE_CHUNK: usize = 8192;
const _: () = assert!(9 + 8 * FREE_CHUNK <= client::MAX_REQUEST);

/// Reads the table `ticket` names from the shared-memory socket at `path`,
/// asking with tag `want` (`want_bundled`, else `want_data`); `free` is the
/// `free_data` tag (none: the connection is only closed). A
/// `pyarrow.RecordBatchReader` over batches that point into the server's
/// memfds; `free_data` is sent once the last of their buffers is released.
#[pyfunction]
#[pyo3(signature = (path, want, free, ticket))]
pub(crate) fn shm_get<'py>(
    py: Python<'py>,
    path: String,
    want: u64,
    free: Option<u64>,
    ticket: Vec<u8>,
) -> PyResult<Bound<'py, PyAny>> {
    let (schema, batches) = py.detach(|| get(&path, want, free, &ticket))?;
    let reader: Box<dyn RecordBatchReader + Send> = Box::new(RecordBatchIterator::new(
        batches.into_iter().map(Ok),
        schema,
    ));
    arrow_c::to_pyarrow(py, reader)
}

/// The shared-memory get: the schema and the batches, in stream order.
fn get(
    path: &str,
    want: u64,
    free: Option<u64>,
    ticket: &[u8],
) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let socket = client::connect(Path::new(path)).map_err(|e| Error::Connect {
        location: format!("the shared-memory socket {path}"),
        message: format!("{e} (is the server on this host?)"),
    })?;
    let prefix = framing::tagged_prefix(want);
    let request = [IoSlice::new(&prefix), IoSlice::new(ticket)];
    client::send(socket.as_fd(), &request, &[])
        .map_err(|e| closed(format!("cannot send the request: {e}")))?;
    let mut datagram = RECEIVED.take();
    let fds = receive(socket.as_fd(), &mut datagram, true)?;
    if let Ok(Message::Reply { code, body }) = framing::message(&datagram) {
        return Err(reply_error(code, body));
    }
    if fds.is_empty() {
        return Err(Error::Malformed(
            "the server sent no memory handle with the stream".into(),
        ));
    }
    let maps = fds
        .iter()
        .map(|fd| {
            client::map_sealed(fd.as_fd()).map_err(|e| {
                Error::Malformed(format!(
                    "the server sent a memory handle it cannot map: {e}"
                ))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    drop(fds);
    let size = maps.iter().map(|m| m.len() as u64).sum();
    let mut stream = Stream::new(size);
    loop {
        for message in framing::unbundle(&datagram) {
            stream.add(message.map_err(Error::Malformed)?)?;
        }
        if stream.complete()? {
            break;
        }
        receive(socket.as_fd(), &mut datagram, false)?;
    }
    RECEIVED.set(datagram);
    let lease = Arc::new(Lease {
        socket,
        tag: free,
        offsets: stream.offsets(),
    });
    let mut base = 0u64;
    let regions: Vec<Region> = maps
        .into_iter()
        .map(|map| {
            let region = Region {
                base,
                bytes: Bytes::from_owner(Mapped {
                    map,
                    _lease: Arc::clone(&lease),
                }),
            };
            base += region.bytes.len() as u64;
            region
        })
        .collect();
    drop(lease);
    // arrow-ipc panics on some malformed messages (docs/limits.md): a panic
    // here is the server's malformed data, not a bug of the caller's.
    std::panic::catch_unwind(AssertUnwindSafe(|| stream.decode(&regions)))
        .unwrap_or_else(|_| Err(malformed("the IPC decoder failed on a message")))
}

thread_local! {
    /// The thread's buffer for datagrams received, kept between gets: filled
    /// by the kernel only (never zeroed), not allocated and freed per get.
    static RECEIVED: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The server ended the connection, or it broke.
fn closed(message: String) -> Error {
    tonic::Status::unavailable(message).into()
}

/// The error a reply carries: its gRPC status code and the serialized
/// `google.rpc.Status` (the details Python reads the error's class from).
fn reply_error(code: u8, body: &[u8]) -> Error {
    let code = Code::from(i32::from(code));
    if code == Code::Ok {
        return Error::Malformed("the server answered a get with a success reply".into());
    }
    let text = match <RpcStatus as prost::Message>::decode(body) {
        Ok(status) if status.code == code as i32 => status.message,
        _ => String::from_utf8_lossy(body).into_owned(),
    };
    tonic::Status::with_details(code, text, bytes::Bytes::copy_from_slice(body)).into()
}

// -- the metadata stream and the body messages -------------------------------

/// Where a body message's buffers lie in the memfds' concatenation.
#[derive(Debug, Clone, Copy)]
struct Body {
    /// The first buffer's offset: where the body starts (quiver's server
    /// serves only streams laid out so).
    start: u64,
    /// Where the last buffer ends.
    end: u64,
}

/// The metadata stream and the body messages received so far.
#[derive(Debug)]
struct Stream {
    /// Bytes of the memfds together.
    size: u64,
    /// The IPC headers received, one after the other (one buffer for the
    /// stream, not one per batch).
    headers: Vec<u8>,
    /// Where each IPC header lies in `headers`, by sequence number.
    metadata: HashMap<u32, Range<usize>>,
    /// The body messages, by sequence number (`None`: no buffers).
    bodies: HashMap<u32, Option<Body>>,
    /// Every buffer offset received, for `free_data`.
    offsets: Vec<u64>,
    /// End of Stream's sequence number, once received.
    end: Option<u32>,
}

impl Stream {
    fn new(size: u64) -> Self {
        Self {
            size,
            headers: Vec::new(),
            metadata: HashMap::new(),
            bodies: HashMap::new(),
            offsets: Vec::new(),
            end: None,
        }
    }

    /// Takes one message.
    fn add(&mut self, message: &[u8]) -> Result<()> {
        match framing::message(message).map_err(Error::Malformed)? {
            Message::EndOfStream { seq } => self.end = Some(seq),
            Message::Metadata { seq, header } => {
                let start = self.headers.len();
                self.headers.extend_from_slice(header);
                if self
                    .metadata
                    .insert(seq, start..self.headers.len())
                    .is_some()
                {
                    return Err(Error::Malformed(format!(
                        "metadata message {seq} sent twice"
                    )));
                }
            }
            Message::Tagged { tag, body } => {
                let (kind, seq) = framing::split_data_tag(tag).map_err(Error::Malformed)?;
                if kind != BODY_SHARED {
                    return Err(Error::Malformed(format!(
                        "body type {kind}: only type {BODY_SHARED} (shared memory) is read"
                    )));
                }
                let body =
                    self.buffers(framing::shared_buffers(body).map_err(Error::Malformed)?)?;
                if self.bodies.insert(seq, body).is_some() {
                    return Err(Error::Malformed(format!("body message {seq} sent twice")));
                }
            }
            Message::Reply { code, body } => return Err(reply_error(code, body)),
        }
        Ok(())
    }

    /// Reads a body message's buffers, each checked to lie in the memfds;
    /// their offsets are kept for `free_data`.
    fn buffers(&mut self, body: SharedBody<'_>) -> Result<Option<Body>> {
        let mut sum = 0u64;
        let mut body_range: Option<Body> = None;
        for (offset, length) in body.buffers() {
            let end = offset
                .checked_add(length)
                .filter(|&end| end <= self.size)
                .ok_or_else(|| {
                    Error::Malformed(format!(
                        "a buffer at {offset} of {length} bytes lies outside the {}-byte region",
                        self.size
                    ))
                })?;
            sum = sum.saturating_add(length);
            self.offsets.push(offset);
            match &mut body_range {
                None => body_range = Some(Body { start: offset, end }),
                Some(b) if offset < b.start => {
                    return Err(malformed(
                        "a body message whose first buffer is not its lowest",
                    ));
                }
                Some(b) => b.end = b.end.max(end),
            }
        }
        if sum != body.total {
            return Err(malformed(
                "a body message whose total does not match its buffers",
            ));
        }
        Ok(body_range)
    }

    /// Whether End of Stream and everything before it arrived.
    fn complete(&self) -> Result<bool> {
        let Some(end) = self.end else {
            return Ok(false);
        };
        if self.metadata.len() < end as usize {
            return Ok(false);
        }
        if self.metadata.len() != end as usize || (0..end).any(|s| !self.metadata.contains_key(&s))
        {
            return Err(malformed("gaps in the metadata stream's sequence numbers"));
        }
        // Every message but the schema (seq 0) has a body in quiver's streams.
        Ok((1..end).all(|s| self.bodies.contains_key(&s)))
    }

    /// Buffers may share an offset (one of length 0 and the next): each
    /// offset is freed once.
    fn offsets(&mut self) -> Vec<u64> {
        let mut offsets = std::mem::take(&mut self.offsets);
        offsets.sort_unstable();
        offsets.dedup();
        offsets
    }

    /// Decodes the stream: the schema, then each batch from its header and
    /// its body in place in `regions`.
    fn decode(&self, regions: &[Region]) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let end = self.end.unwrap_or(0);
        let header = |seq: u32| {
            self.metadata
                .get(&seq)
                .map(|range| &self.headers[range.clone()])
                .ok_or_else(|| Error::Malformed(format!("no metadata message {seq}")))
        };
        let message = root_as_message(header(0)?)
            .map_err(|e| Error::Malformed(format!("the schema message: {e}")))?;
        let schema: SchemaRef =
            Arc::new(fb_to_schema(message.header_as_schema().ok_or_else(
                || malformed("the stream does not start with a schema"),
            )?));
        let mut dictionaries: HashMap<i64, ArrayRef> = HashMap::new();
        let mut batches = Vec::with_capacity(end as usize);
        for seq in 1..end {
            let metadata = header(seq)?;
            let at = |e: String| Error::Malformed(format!("message {seq}: {e}"));
            let message = root_as_message(metadata).map_err(|e| at(e.to_string()))?;
            let body = self.body(seq, message.bodyLength(), regions)?;
            let version = message.version();
            match message.header_type() {
                MessageHeader::RecordBatch => {
                    let batch = message
                        .header_as_record_batch()
                        .ok_or_else(|| at("no record batch header".into()))?;
                    quiver_ipc::buffers_within(batch.buffers().into_iter().flatten(), body.len())
                        .map_err(at)?;
                    let batch = read_record_batch(
                        &body,
                        batch,
                        Arc::clone(&schema),
                        &dictionaries,
                        None,
                        &version,
                    )
                    .map_err(|e| at(e.to_string()))?;
                    batches.push(batch);
                }
                MessageHeader::DictionaryBatch => {
                    let dictionary = message
                        .header_as_dictionary_batch()
                        .ok_or_else(|| at("no dictionary batch header".into()))?;
                    quiver_ipc::buffers_within(
                        dictionary
                            .data()
                            .and_then(|d| d.buffers())
                            .into_iter()
                            .flatten(),
                        body.len(),
                    )
                    .map_err(at)?;
                    read_dictionary(&body, dictionary, &schema, &mut dictionaries, &version)
                        .map_err(|e| at(e.to_string()))?;
                }
                other => return Err(at(format!("an IPC message of type {other:?} in a stream"))),
            }
        }
        Ok((schema, batches))
    }

    /// The body of message `seq`, `length` bytes (as its header says) from
    /// its first buffer on, as a slice of the mapping that holds it.
    fn body(&self, seq: u32, length: i64, regions: &[Region]) -> Result<Buffer> {
        let at = |e: &str| Error::Malformed(format!("message {seq}: {e}"));
        let length = u64::try_from(length).map_err(|_| at("a negative body length"))?;
        if length == 0 {
            return Ok(Buffer::from_vec(Vec::<u8>::new()));
        }
        let Some(Some(body)) = self.bodies.get(&seq) else {
            return Err(at("its header has a body, its body message no buffers"));
        };
        // The region holding the body's start; the body must not run past it.
        let index = regions
            .partition_point(|r| r.base <= body.start)
            .saturating_sub(1);
        let region = regions
            .get(index)
            .ok_or_else(|| at("no memfd holds its body"))?;
        let local = body.start - region.base;
        if length < body.end - body.start
            || local.saturating_add(length) > region.bytes.len() as u64
        {
            return Err(at(&format!(
                "its header's body length ({length}) does not cover its buffers or runs past its memfd"
            )));
        }
        // In bounds of the region (checked above), so both fit in a usize.
        let (local, length) = (local as usize, length as usize);
        Ok(Buffer::from(region.bytes.slice(local..local + length)))
    }
}

fn malformed(message: &str) -> Error {
    Error::Malformed(message.to_string())
}

// -- the mappings and their lease ----------------------------------------------

/// One memfd's mapping, at `base` in the concatenation the offsets run over.
#[derive(Debug)]
struct Region {
    base: u64,
    /// The mapping, owned by a [`Mapped`]: its slices are the batches' buffers.
    bytes: Bytes,
}

/// A mapping, and the lease every mapping of one get shares.
#[derive(Debug)]
struct Mapped {
    map: Mmap,
    _lease: Arc<Lease>,
}

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

/// The connection of a get, held until the mappings are released: then it
/// sends `free_data` with every offset received, and closes.
#[derive(Debug)]
struct Lease {
    socket: OwnedFd,
    /// The `free_data` tag (none: the connection is only closed).
    tag: Option<u64>,
    offsets: Vec<u64>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(tag) = self.tag else { return };
        let prefix = framing::tagged_prefix(tag);
        let mut offsets = Vec::with_capacity(8 * self.offsets.len().min(FREE_CHUNK));
        for chunk in self.offsets.chunks(FREE_CHUNK) {
            offsets.clear();
            for offset in chunk {
                offsets.extend_from_slice(&offset.to_le_bytes());
            }
            let message = [IoSlice::new(&prefix), IoSlice::new(&offsets)];
            // A server gone is no error: it freed on the disconnect.
            if client::send(self.socket.as_fd(), &message, &[]).is_err() {
                break;
            }
        }
        // Dropping the socket closes the connection.
    }
}

/// Receives one datagram into `buffer` (its contents, up to its capacity)
/// and returns the descriptors attached to it if `want_fds` (otherwise any
/// attached is an error).
fn receive(socket: BorrowedFd<'_>, buffer: &mut Vec<u8>, want_fds: bool) -> Result<Vec<OwnedFd>> {
    let fds = match client::recv_into(socket, buffer, MAX_MESSAGE) {
        Ok(Some(fds)) => fds,
        Ok(None) => {
            return Err(closed(
                "the server closed the shared-memory connection".into(),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            return Err(Error::Malformed(format!(
                "a shared-memory message was cut short: {e}"
            )));
        }
        Err(e) => {
            return Err(closed(format!(
                "cannot read the shared-memory connection: {e}"
            )));
        }
    };
    if !want_fds && !fds.is_empty() {
        return Err(malformed(
            "memory handles attached to a message after the first",
        ));
    }
    Ok(fds)
}

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
//! The `unsafe` code is the socket's system calls and the mapping.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::panic::AssertUnwindSafe;
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
use quiver_ipc::check_buffers;
use tonic::Code;

use crate::arrow_c;
use crate::error::{Error, Result};

/// First byte of a metadata stream message.
const UNTAGGED: u8 = 0;
/// First byte of a tagged message.
const TAGGED: u8 = 1;
/// First byte of a reply (an error, on a get).
const REPLY: u8 = 2;
/// First byte of a bundle of length-prefixed messages.
const BUNDLE: u8 = 3;
/// Metadata stream message type: End of Stream.
const END_OF_STREAM: u8 = 0;
/// Metadata stream message type: an IPC header.
const METADATA: u8 = 1;
/// Body type 1: the buffers as (offset, length) pairs into the memfds.
const BODY_SHARED: u64 = 1;

/// Largest datagram expected from the server (a bundle, a header or a list
/// of buffers), as in the Python client.
const MAX_MESSAGE: usize = 4 << 20;
/// Most memfds passed with one message (the server's limit too).
const MAX_FDS: usize = 16;
/// Offsets per `free_data` message (well under the server's 1 MiB requests).
const FREE_CHUNK: usize = 8192;

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
    let socket = connect(path).map_err(|e| Error::Connect {
        location: format!("the shared-memory socket {path}"),
        message: format!("{e} (is the server on this host?)"),
    })?;
    send(socket.as_fd(), &tagged(want, ticket))
        .map_err(|e| closed(format!("cannot send the request: {e}")))?;
    let mut datagram = vec![0u8; MAX_MESSAGE];
    let (mut len, fds) = receive(socket.as_fd(), &mut datagram, true)?;
    if datagram[..len].first() == Some(&REPLY) {
        return Err(reply_error(&datagram[..len]));
    }
    if fds.is_empty() {
        return Err(Error::Malformed(
            "the server sent no memory handle with the stream".into(),
        ));
    }
    let maps = fds.iter().map(map_memfd).collect::<Result<Vec<_>>>()?;
    drop(fds);
    let size = maps.iter().map(|m| m.len() as u64).sum();
    let mut stream = Stream::new(size);
    loop {
        for message in Bundle::new(&datagram[..len]) {
            stream.add(message?)?;
        }
        if stream.complete()? {
            break;
        }
        len = receive(socket.as_fd(), &mut datagram, false)?.0;
    }
    drop(datagram);
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
    std::panic::catch_unwind(AssertUnwindSafe(|| stream.decode(&regions))).unwrap_or_else(|_| {
        Err(Error::Malformed(
            "the IPC decoder failed on a message".into(),
        ))
    })
}

/// The server ended the connection, or it broke.
fn closed(message: String) -> Error {
    tonic::Status::unavailable(message).into()
}

/// A tagged message: `[1][tag u64 LE][body]`.
fn tagged(tag: u64, body: &[u8]) -> Vec<u8> {
    let mut message = Vec::with_capacity(9 + body.len());
    message.push(TAGGED);
    message.extend_from_slice(&tag.to_le_bytes());
    message.extend_from_slice(body);
    message
}

/// The error a reply carries: its gRPC status code and the serialized
/// `google.rpc.Status` (the details Python reads the error's class from).
fn reply_error(message: &[u8]) -> Error {
    let code = message
        .get(1)
        .map_or(Code::Unknown, |&c| Code::from(i32::from(c)));
    let body = message.get(2..).unwrap_or_default();
    if code == Code::Ok {
        return Error::Malformed("the server answered a get with a success reply".into());
    }
    let text = match <RpcStatus as prost::Message>::decode(body) {
        Ok(status) if status.code == code as i32 => status.message,
        _ => String::from_utf8_lossy(body).into_owned(),
    };
    tonic::Status::with_details(code, text, bytes::Bytes::copy_from_slice(body)).into()
}

/// The fields of a `google.rpc.Status` read here (its details are skipped).
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    /// The gRPC status code.
    #[prost(int32, tag = "1")]
    code: i32,
    /// The error's message.
    #[prost(string, tag = "2")]
    message: String,
}

// -- the metadata stream and the body messages -------------------------------

/// The messages a datagram holds: itself, or those of a bundle.
struct Bundle<'a> {
    rest: &'a [u8],
    bundled: bool,
}

impl<'a> Bundle<'a> {
    fn new(datagram: &'a [u8]) -> Self {
        match datagram.split_first() {
            Some((&BUNDLE, rest)) => Self {
                rest,
                bundled: true,
            },
            _ => Self {
                rest: datagram,
                bundled: false,
            },
        }
    }
}

impl<'a> Iterator for Bundle<'a> {
    type Item = Result<&'a [u8]>;

    fn next(&mut self) -> Option<Self::Item> {
        if !self.bundled {
            return (!self.rest.is_empty()).then(|| Ok(std::mem::take(&mut self.rest)));
        }
        if self.rest.is_empty() {
            return None;
        }
        let Some((length, rest)) = self.rest.split_first_chunk::<4>() else {
            self.rest = &[];
            return Some(Err(Error::Malformed(
                "a bundle cut inside a message's length".into(),
            )));
        };
        let length = u32::from_le_bytes(*length) as usize;
        if length == 0 || length > rest.len() {
            self.rest = &[];
            return Some(Err(Error::Malformed(
                "a bundled message longer than its bundle, or empty".into(),
            )));
        }
        let (message, rest) = rest.split_at(length);
        self.rest = rest;
        Some(Ok(message))
    }
}

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
    /// The IPC headers, by sequence number.
    metadata: HashMap<u32, Vec<u8>>,
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
            metadata: HashMap::new(),
            bodies: HashMap::new(),
            offsets: Vec::new(),
            end: None,
        }
    }

    /// Takes one message.
    fn add(&mut self, message: &[u8]) -> Result<()> {
        match message.first() {
            Some(&UNTAGGED) => {
                let Some(&[kind, s0, s1, s2, s3]) = message.get(1..6) else {
                    return Err(malformed("a metadata message shorter than its prefix"));
                };
                let seq = u32::from_le_bytes([s0, s1, s2, s3]);
                match kind {
                    END_OF_STREAM if message.len() == 6 => self.end = Some(seq),
                    END_OF_STREAM => {
                        return Err(malformed("an End of Stream message of the wrong length"));
                    }
                    METADATA => {
                        if self.metadata.insert(seq, message[6..].to_vec()).is_some() {
                            return Err(Error::Malformed(format!(
                                "metadata message {seq} sent twice"
                            )));
                        }
                    }
                    other => {
                        return Err(Error::Malformed(format!(
                            "unknown metadata message type {other}"
                        )));
                    }
                }
            }
            Some(&TAGGED) => {
                let Some((tag, body)) = message[1..].split_first_chunk::<8>() else {
                    return Err(malformed("a tagged message shorter than its tag"));
                };
                let tag = u64::from_le_bytes(*tag);
                let seq = (tag & 0xFFFF_FFFF) as u32;
                let body = self.buffers(tag, body)?;
                if self.bodies.insert(seq, body).is_some() {
                    return Err(Error::Malformed(format!("body message {seq} sent twice")));
                }
            }
            Some(&REPLY) => return Err(reply_error(message)),
            Some(kind) => return Err(Error::Malformed(format!("unknown message kind {kind}"))),
            None => return Err(malformed("an empty message")),
        }
        Ok(())
    }

    /// Reads a body message: its buffers, each checked to lie in the memfds;
    /// their offsets are kept for `free_data`.
    fn buffers(&mut self, tag: u64, body: &[u8]) -> Result<Option<Body>> {
        if tag >> 56 != BODY_SHARED {
            return Err(Error::Malformed(format!(
                "body type {}: only type 1 (shared memory) is read",
                tag >> 56
            )));
        }
        if (tag >> 32) & 0xFF_FFFF != 0 {
            return Err(malformed("reserved tag bits set in a body message"));
        }
        if body.len() < 16 || body.len() % 16 != 0 {
            return Err(malformed("a body message that is not u64 pairs"));
        }
        let mut words = body
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()));
        let (total, count) = (words.next().unwrap_or(0), words.next().unwrap_or(0));
        if count != (body.len() / 16 - 1) as u64 {
            return Err(malformed(
                "a body message whose count does not match its pairs",
            ));
        }
        let mut sum = 0u64;
        let mut body_range: Option<Body> = None;
        while let (Some(offset), Some(length)) = (words.next(), words.next()) {
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
        if sum != total {
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
            check_buffers(metadata, body.len()).map_err(at)?;
            let version = message.version();
            match message.header_type() {
                MessageHeader::RecordBatch => {
                    let batch = message
                        .header_as_record_batch()
                        .ok_or_else(|| at("no record batch header".into()))?;
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
        for chunk in self.offsets.chunks(FREE_CHUNK) {
            let mut message = Vec::with_capacity(9 + 8 * chunk.len());
            message.push(TAGGED);
            message.extend_from_slice(&tag.to_le_bytes());
            for offset in chunk {
                message.extend_from_slice(&offset.to_le_bytes());
            }
            // A server gone is no error: it freed on the disconnect.
            if send(self.socket.as_fd(), &message).is_err() {
                break;
            }
        }
        // Dropping the socket closes the connection.
    }
}

/// Maps a memfd the server sent, read-only, once it is known to be sealed.
fn map_memfd(fd: &OwnedFd) -> Result<Mmap> {
    // SAFETY: `fcntl(F_GET_SEALS)` reads the seals of a descriptor we own;
    // it takes no pointer.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    let needed = libc::F_SEAL_WRITE | libc::F_SEAL_SHRINK;
    if seals < 0 || seals & needed != needed {
        return Err(malformed(
            "the server sent a memory handle that is not a memfd sealed against writes and shrinking",
        ));
    }
    let file = File::from(
        fd.try_clone()
            .map_err(|e| Error::Malformed(format!("cannot duplicate the memfd: {e}")))?,
    );
    // SAFETY: the memfd is sealed against writes and shrinking (checked
    // above): no process can change its contents or cut pages from under
    // the mapping, which is read-only.
    unsafe { Mmap::map(&file) }.map_err(|e| Error::Malformed(format!("cannot map the memfd: {e}")))
}

// -- the socket ------------------------------------------------------------------

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A `SOCK_SEQPACKET` connection to the Unix socket at `path`.
fn connect(path: &str) -> io::Result<OwnedFd> {
    // SAFETY: `sockaddr_un` is plain data, valid all zeros.
    let mut addr: libc::sockaddr_un = unsafe { zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = c_path.as_bytes();
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a Unix socket path has 1 to {} bytes",
                addr.sun_path.len() - 1
            ),
        ));
    }
    for (dst, src) in addr
        .sun_path
        .iter_mut()
        .zip(std::ffi::OsStr::new(path).as_bytes())
    {
        *dst = *src as libc::c_char;
    }
    let len = (size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
    // SAFETY: `socket` takes no pointers; a descriptor it returns is ours.
    let socket = unsafe {
        OwnedFd::from_raw_fd(check(libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
        ))?)
    };
    loop {
        // SAFETY: `addr` is a valid `sockaddr_un` of which `len` bytes are
        // used, alive for the call.
        let ret = unsafe {
            libc::connect(
                socket.as_raw_fd(),
                (&raw const addr).cast::<libc::sockaddr>(),
                len,
            )
        };
        match check(ret) {
            Ok(_) => return Ok(socket),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Sends one datagram.
fn send(socket: BorrowedFd<'_>, message: &[u8]) -> io::Result<()> {
    loop {
        // SAFETY: `message` is valid for reads of its length during the call.
        let ret = unsafe {
            libc::send(
                socket.as_raw_fd(),
                message.as_ptr().cast(),
                message.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        match usize::try_from(ret) {
            Ok(n) if n == message.len() => return Ok(()),
            Ok(n) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("sent {n} of a {}-byte datagram", message.len()),
                ));
            }
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// Control buffer of `recvmsg`: room for [`MAX_FDS`] descriptors, aligned
/// for `cmsghdr`.
type Control = [u64; 2 + MAX_FDS / 2 + 2];

/// Receives one datagram into `buffer`: its length, and the descriptors
/// attached to it if `want_fds` (otherwise any attached is an error).
fn receive(
    socket: BorrowedFd<'_>,
    buffer: &mut [u8],
    want_fds: bool,
) -> Result<(usize, Vec<OwnedFd>)> {
    let mut control: Control = [0; 2 + MAX_FDS / 2 + 2];
    let mut iov = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    // SAFETY: `msghdr` is plain data, valid all zeros (no control buffer).
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    if want_fds {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = size_of::<Control>();
    }
    let received = loop {
        // SAFETY: `msg` points at `iov` (over `buffer`) and at `control`,
        // all alive and exclusively borrowed for the call.
        let ret =
            unsafe { libc::recvmsg(socket.as_raw_fd(), &raw mut msg, libc::MSG_CMSG_CLOEXEC) };
        match usize::try_from(ret) {
            Ok(n) => break n,
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(closed(format!(
                        "cannot read the shared-memory connection: {e}"
                    )));
                }
            }
        }
    };
    let mut fds = Vec::new();
    if want_fds {
        // SAFETY: the kernel filled `msg`'s control buffer; the CMSG macros
        // walk it within `msg_controllen`, and each SCM_RIGHTS payload holds
        // descriptors just installed in this process, now owned here.
        unsafe {
            let mut header = libc::CMSG_FIRSTHDR(&raw const msg);
            while !header.is_null() {
                if (*header).cmsg_level == libc::SOL_SOCKET
                    && (*header).cmsg_type == libc::SCM_RIGHTS
                {
                    let data = libc::CMSG_DATA(header).cast::<RawFd>();
                    let payload = (*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    for i in 0..payload / size_of::<RawFd>() {
                        fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                    }
                }
                header = libc::CMSG_NXTHDR(&raw const msg, header);
            }
        }
    }
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(malformed("a shared-memory message was cut short"));
    }
    if received == 0 && fds.is_empty() {
        return Err(closed(
            "the server closed the shared-memory connection".into(),
        ));
    }
    Ok((received, fds))
}

//! The system calls a client of the shared-memory socket makes: connect,
//! send a request, receive datagrams with the memfds attached, and map a
//! sealed memfd read-only (quiver's Rust client, `quiver._core`, is built on
//! these and on [`crate::framing`]).
//!
//! Each is one of the crate's `sys` module, the same the server makes, with a
//! call interrupted by a signal (`EINTR`) retried: a client runs in a process
//! whose signal handlers it does not choose.

use std::io::{self, IoSlice};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

use memmap2::Mmap;

use crate::sys;

/// Most descriptors attached to one datagram; more are an error.
pub const MAX_FDS: usize = sys::MAX_FDS;

/// Largest datagram the server reads: a request must be shorter (a
/// `free_data` is split across several messages if it would not be).
pub const MAX_REQUEST: usize = sys::MAX_REQUEST;

/// The seals a memfd carries, as [`map_sealed`] requires them: no writes, no
/// shrinking, no growing (the server adds `F_SEAL_SEAL` too).
pub const IMMUTABLE: libc::c_int = sys::IMMUTABLE;

/// A `SOCK_SEQPACKET` connection to the Unix socket at `path`, close-on-exec.
pub fn connect(path: &Path) -> io::Result<OwnedFd> {
    retry(|| sys::connect(path))
}

/// Sends one datagram made of `parts`, with `fds` attached (at most
/// [`MAX_FDS`]); never raises `SIGPIPE` (a closed peer is an error).
pub fn send(
    socket: BorrowedFd<'_>,
    parts: &[IoSlice<'_>],
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    retry(|| sys::send(socket, parts, fds))
}

/// Receives one datagram of at most `max` bytes into `buffer` (its contents
/// replaced; its capacity grown to `max` once and kept, never zeroed: a
/// buffer reused for every datagram costs no allocation). The descriptors
/// attached, in order, close-on-exec; `Ok(None)` when the peer closed the
/// connection. A longer datagram, or more than [`MAX_FDS`] descriptors, is
/// an error of kind `InvalidData` (the descriptors are closed).
pub fn recv_into(
    socket: BorrowedFd<'_>,
    buffer: &mut Vec<u8>,
    max: usize,
) -> io::Result<Option<Vec<OwnedFd>>> {
    retry(|| sys::recv_into(socket, buffer, max))
}

/// Maps a memfd read-only, once it is known to be sealed [`IMMUTABLE`] (so
/// that no process can change its bytes or cut pages from under the
/// mapping); an error of kind `InvalidData` if it is not a memfd or lacks a
/// seal.
pub fn map_sealed(memfd: BorrowedFd<'_>) -> io::Result<Mmap> {
    sys::map_sealed(memfd)
}

/// The seals on `fd`; an error if it cannot carry seals (not a memfd).
pub fn seals(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    sys::seals(fd)
}

/// `call`, again while a signal interrupts it.
fn retry<T>(mut call: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match call() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

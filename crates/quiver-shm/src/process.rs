//! Child processes linked to the server by a socketpair, and Arrow IPC streams
//! passed between them in sealed memfds: what quiver's function workers run on
//! (`quiver-functions`, docs/functions.md).
//!
//! A [`Link`] is one end of a `SOCK_SEQPACKET` socketpair: whole datagrams,
//! with descriptors attached. [`spawn_linked`] starts a child with the other
//! end as its descriptor 3. [`sealed_memfd`] writes bytes into a new memfd and
//! seals it; [`read_sealed`] maps a memfd received from a child, checks its
//! seals, and decodes the Arrow IPC stream in it with full validation, the
//! arrays pointing into the mapping.

use std::io::{self, IoSlice, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::process::{Child, Command};
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use super::{adopt, export, sys};
use crate::{Result, ShmError};

/// Most descriptors one datagram may carry.
pub const MAX_FDS: usize = sys::MAX_FDS;

/// One end of a socketpair: datagrams in order, never split or merged.
#[derive(Debug)]
pub struct Link {
    socket: OwnedFd,
}

/// One datagram received on a [`Link`].
#[derive(Debug)]
pub struct Datagram {
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// The descriptors attached, in order, now owned here.
    pub fds: Vec<OwnedFd>,
}

impl Link {
    /// A new socketpair: this end, and the end to give a child.
    pub fn pair() -> io::Result<(Link, OwnedFd)> {
        let (ours, theirs) = sys::socketpair()?;
        Ok((Link { socket: ours }, theirs))
    }

    /// A link over an end of [`Link::pair`] (the child's side, in tests).
    pub fn from_fd(socket: OwnedFd) -> Link {
        Link { socket }
    }

    /// Sends one datagram made of `parts`, with `fds` attached.
    pub fn send(&self, parts: &[IoSlice<'_>], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        sys::send(self.socket.as_fd(), parts, fds)
    }

    /// Receives one datagram of at most `max` bytes; `Ok(None)` at end-of-file
    /// (the peer closed its end, or [`Link::shutdown`]). A read that waits
    /// longer than the read timeout fails with `WouldBlock`.
    pub fn recv(&self, max: usize) -> io::Result<Option<Datagram>> {
        Ok(sys::recv(self.socket.as_fd(), max)?.map(|r| Datagram {
            bytes: r.bytes,
            fds: r.fds,
        }))
    }

    /// How long [`Link::recv`] waits (`None`: forever).
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        sys::set_read_timeout(self.socket.as_fd(), timeout)
    }

    /// Ends the link both ways: a blocked [`Link::recv`] returns `Ok(None)`.
    pub fn shutdown(&self) -> io::Result<()> {
        sys::shutdown(self.socket.as_fd())
    }
}

/// Starts `command` with `theirs` (from [`Link::pair`]) as the child's
/// descriptor 3. The child inherits no other descriptor (quiver opens every
/// one close-on-exec) and is killed if the calling thread exits.
pub fn spawn_linked(command: &mut Command, theirs: OwnedFd) -> io::Result<Child> {
    sys::pass_as_fd3(command, theirs.as_raw_fd());
    let child = command.spawn();
    // The child has its copy (or failed to start); ours closes here.
    drop(theirs);
    child
}

/// A new memfd holding `parts` one after the other, sealed against writing,
/// shrinking and growing. `name` shows in `/proc/PID/fd`.
pub fn sealed_memfd(name: &str, parts: &[&[u8]]) -> io::Result<OwnedFd> {
    let memfd = sys::memfd(name)?;
    let mut file = std::fs::File::from(memfd);
    for part in parts {
        file.write_all(part)?;
    }
    let memfd = OwnedFd::from(file);
    sys::seal(memfd.as_fd())?;
    Ok(memfd)
}

/// A new memfd that `write` fills (through a buffered writer), then sealed
/// against writing, shrinking and growing.
pub fn sealed_memfd_with(
    name: &str,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<OwnedFd> {
    let mut file = std::fs::File::from(sys::memfd(name)?);
    {
        let mut buffered = io::BufWriter::with_capacity(1 << 16, &mut file);
        write(&mut buffered)?;
        buffered.flush()?;
    }
    let memfd = OwnedFd::from(file);
    sys::seal(memfd.as_fd())?;
    Ok(memfd)
}

/// The Arrow IPC stream in `memfd`, which must be sealed against writing,
/// shrinking and growing and hold one whole stream; its bytes are untrusted
/// and validated in full. The batches point into the memfd's mapping, which
/// they keep alive. `what` names the memfd in errors.
pub fn read_sealed(memfd: &OwnedFd, what: &str) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    adopt::checked_len(memfd, what)?;
    let map = std::sync::Arc::new(export::map(memfd)?);
    let messages = export::scan(&map).map_err(|e| ShmError::Decode(format!("{what}: {e}")))?;
    adopt::decode(&map, &messages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::ipc::writer::StreamWriter;

    fn stream() -> (RecordBatch, Vec<u8>) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("x", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])),
            ],
        )
        .unwrap();
        let mut writer = StreamWriter::try_new(Vec::new(), &schema).unwrap();
        writer.write(&batch).unwrap();
        writer.finish().unwrap();
        (batch, writer.into_inner().unwrap())
    }

    #[test]
    fn a_sealed_memfd_reads_back_as_its_batches() {
        let (batch, bytes) = stream();
        let memfd = sealed_memfd("test", &[&bytes]).unwrap();
        let (schema, batches) = read_sealed(&memfd, "the result").unwrap();
        assert_eq!(schema, batch.schema());
        assert_eq!(batches, vec![batch]);
    }

    #[test]
    fn unsealed_and_invalid_memfds_are_refused() {
        let (_, bytes) = stream();
        let unsealed = OwnedFd::from({
            let mut f = std::fs::File::from(sys::memfd("unsealed").unwrap());
            f.write_all(&bytes).unwrap();
            f
        });
        let e = read_sealed(&unsealed, "the result").unwrap_err();
        assert!(e.to_string().contains("not sealed"), "{e}");
        let garbage = sealed_memfd("garbage", &[&[7u8; 100]]).unwrap();
        assert!(matches!(
            read_sealed(&garbage, "the result"),
            Err(ShmError::Decode(_))
        ));
    }

    #[test]
    fn a_link_carries_datagrams_and_descriptors_and_ends() {
        let (a, b) = Link::pair().unwrap();
        let b = Link { socket: b };
        let memfd = sealed_memfd("attached", &[b"hello"]).unwrap();
        a.send(
            &[IoSlice::new(b"one"), IoSlice::new(b"two")],
            &[memfd.as_fd()],
        )
        .unwrap();
        let got = b.recv(1024).unwrap().unwrap();
        assert_eq!(got.bytes, b"onetwo");
        assert_eq!(got.fds.len(), 1);
        b.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let waited = b.recv(1024).unwrap_err();
        assert_eq!(waited.kind(), io::ErrorKind::WouldBlock);
        a.shutdown().unwrap();
        assert!(b.recv(1024).unwrap().is_none());
    }

    #[test]
    fn a_spawned_child_talks_on_fd3() {
        let (ours, theirs) = Link::pair().unwrap();
        // The child echoes one datagram's worth of bytes from fd 3 back to it.
        let mut command = Command::new("sh");
        command.args(["-c", "head -c 5 <&3 >&3"]);
        let mut child = spawn_linked(&mut command, theirs).unwrap();
        ours.send(&[IoSlice::new(b"ping!")], &[]).unwrap();
        ours.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let got = ours.recv(64).unwrap().unwrap();
        assert_eq!(got.bytes, b"ping!");
        assert!(child.wait().unwrap().success());
        assert!(ours.recv(64).unwrap().is_none());
    }
}

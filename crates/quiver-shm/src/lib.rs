//! The same-host data plane: Flight for control, shared memory for the bytes,
//! framed as Arrow's Dissociated IPC protocol (docs/shm.md).
//!
//! A client that asks GetFlightInfo for it (header `x-quiver-transport: shm`)
//! gets, next to the gRPC endpoints, one endpoint whose location is this
//! server's Unix socket,
//! `shm+unix:///PATH?want_data=1&free_data=2&put_data=3&want_bundled=4`, and
//! whose ticket is a one-time capability ([`grants`]). Over the socket it
//! sends `want_data` with the ticket and receives the memfd holding the table
//! as an Arrow IPC stream ([`export`]), the metadata stream and one body
//! message of (offset, length) pairs per batch ([`framing`]; with
//! `want_bundled`, the same messages packed a few hundred per datagram); it maps the memfd
//! read-only and builds the batches in place. A put goes the other way: the
//! client writes a stream into a memfd, seals it and passes it; the server
//! stores its batches in place, in its store or through a [`PutTarget`]
//! (`adopt`).
//!
//! Each connection is served on a thread of its own ([`connection`]); the
//! system calls are in [`sys`], the only module with `unsafe` code. A client
//! reads and writes the messages with [`framing`] and makes its system calls
//! with [`client`].
#![warn(missing_docs)]

mod adopt;
pub mod client;
mod connection;
mod error;
mod export;
pub mod framing;
pub mod grants;
pub mod process;
#[cfg(test)]
mod round_trip;
mod sys;

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_flight::{FlightEndpoint, Ticket};
use quiver_store::{TableStore, TableVersion, WriteMode};

use self::adopt::{PutInto, PutRequest};
pub use self::adopt::{PutTarget, Stored};
use self::connection::Shared;
use self::grants::{Grant, Grants};
pub use crate::error::{Finished, RecordOf, Result, ShmError, StatusOf};

/// The request header that asks GetFlightInfo for a shared-memory endpoint.
pub const TRANSPORT_HEADER: &str = "x-quiver-transport";

/// The URI scheme of a shared-memory location.
pub const SCHEME: &str = "shm+unix";

/// Most connections served at once; more are refused.
const MAX_CONNECTIONS: usize = 1024;

/// The shared-memory socket and the grants it honours.
#[derive(Debug)]
pub struct ShmServer {
    path: PathBuf,
    location: String,
    listener: Arc<OwnedFd>,
    shared: Arc<Shared>,
    /// Connections being served.
    active: Arc<AtomicUsize>,
}

impl ShmServer {
    /// Listens at `path` (a stale socket file left there is replaced; a live
    /// one is an error) and serves connections on background threads. A
    /// refused request is answered with the status `status_of` makes of its
    /// error; every request, once answered, is passed to `record`.
    pub fn start(
        path: &Path,
        store: Arc<TableStore>,
        status_of: StatusOf,
        record: RecordOf,
    ) -> io::Result<Self> {
        if path.exists() {
            if sys::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("another server listens at {}", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        let listener = Arc::new(sys::listen(path)?);
        // Anyone on the host may connect: the ticket, given only to an
        // authorized Flight caller, is what grants access.
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o666))?;
        let shared = Arc::new(Shared {
            store,
            grants: Arc::new(Grants::default()),
            status_of,
            record,
        });
        let accepting = Arc::clone(&listener);
        let serving = Arc::clone(&shared);
        let active = Arc::new(AtomicUsize::new(0));
        let counting = Arc::clone(&active);
        std::thread::Builder::new()
            .name("quiver-shm-accept".into())
            .spawn(move || accept_loop(&accepting, &serving, &counting))?;
        Ok(Self {
            location: location(path),
            path: path.to_path_buf(),
            listener,
            shared,
            active,
        })
    }

    /// The location clients are given.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    /// Tickets issued and neither used nor expired.
    pub fn grants(&self) -> usize {
        self.shared.grants.outstanding()
    }

    /// An endpoint that reads `version` over shared memory.
    pub fn get_endpoint(&self, version: Arc<TableVersion>) -> Result<FlightEndpoint> {
        let ticket = self.shared.grants.issue(Grant::Get(version))?;
        Ok(FlightEndpoint::new()
            .with_ticket(Ticket::new(ticket))
            .with_location(self.location.clone()))
    }

    /// A ticket to put `table` over shared memory into this server's store:
    /// the stored batches are the client's memfds.
    pub fn put_ticket(
        &self,
        table: String,
        mode: WriteMode,
        partitions: Option<usize>,
        caller: Arc<str>,
    ) -> Result<Vec<u8>> {
        self.shared.grants.issue(Grant::Put {
            into: PutInto::Store(PutRequest {
                table,
                mode,
                partitions,
            }),
            caller,
        })
    }

    /// A ticket to put a table over shared memory through `target`.
    pub fn put_ticket_to(&self, target: Arc<dyn PutTarget>, caller: Arc<str>) -> Result<Vec<u8>> {
        self.shared.grants.issue(Grant::Put {
            into: PutInto::Target(target),
            caller,
        })
    }
}

impl Drop for ShmServer {
    fn drop(&mut self) {
        // Wakes the accepting thread, which then ends.
        let _ = sys::shutdown(self.listener.as_fd());
        let _ = std::fs::remove_file(&self.path);
    }
}

fn accept_loop(listener: &OwnedFd, shared: &Arc<Shared>, active: &Arc<AtomicUsize>) {
    loop {
        let socket = match sys::accept(listener.as_fd()) {
            Ok(socket) => socket,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if e.raw_os_error() == Some(libc::EMFILE)
                    || e.raw_os_error() == Some(libc::ENFILE) =>
            {
                tracing::warn!(error = %e, "shm: cannot accept a connection");
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
            Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => continue,
            Err(_) => return,
        };
        if active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::AcqRel);
            let _ = connection::reply(
                socket.as_fd(),
                shared,
                Err(ShmError::ResourceExhausted(format!(
                    "{MAX_CONNECTIONS} shared-memory connections open: try again later"
                ))),
            );
            continue;
        }
        let shared = Arc::clone(shared);
        let active_now = Arc::clone(active);
        let spawned = std::thread::Builder::new()
            .name("quiver-shm".into())
            .stack_size(256 << 10)
            .spawn(move || {
                connection::serve(socket, &shared);
                active_now.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            active.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(error = %e, "shm: cannot start a connection thread");
        }
    }
}

/// `shm+unix://` + the socket's path (percent-encoded where needed) + the
/// Dissociated IPC tags.
fn location(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut encoded = String::new();
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!(
        "{SCHEME}://{encoded}?want_data={}&free_data={}&put_data={}&want_bundled={}",
        framing::WANT_DATA,
        framing::FREE_DATA,
        framing::PUT_DATA,
        framing::WANT_BUNDLED
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_names_the_socket_and_the_tags() {
        assert_eq!(
            location(Path::new("/run/user/1000/quiver-8815.sock")),
            "shm+unix:///run/user/1000/quiver-8815.sock?want_data=1&free_data=2&put_data=3\
             &want_bundled=4"
        );
        assert!(
            location(Path::new("/tmp/a b?.sock")).starts_with("shm+unix:///tmp/a%20b%3F.sock?")
        );
    }
}

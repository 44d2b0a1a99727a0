//! One client connection to the shared-memory socket: a stream sent
//! (`want_data`, then `free_data` until every offset is freed) or a put.

use std::collections::HashSet;
use std::io::IoSlice;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use quiver_store::TableStore;
use serde_json::json;

use super::adopt::{self, Stored};
use super::export::Export;
use super::framing::{self, Bundler, FREE_DATA, PUT_DATA, Request, WANT_BUNDLED, WANT_DATA};
use super::grants::{Grant, Grants};
use super::sys;
use crate::{Result, ShmError};

/// How long a new connection may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What every connection shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: Arc<TableStore>,
    pub(crate) grants: Arc<Grants>,
    pub(crate) status_of: crate::StatusOf,
    pub(crate) record: crate::RecordOf,
}

/// Serves `socket` until the client is done or gone.
pub(crate) fn serve(socket: OwnedFd, shared: &Shared) {
    let fd = socket.as_fd();
    let peer = sys::peer(fd).ok();
    if let Err(e) = sys::set_read_timeout(fd, Some(REQUEST_TIMEOUT)) {
        tracing::warn!(error = %e, "shm: cannot set a read timeout");
    }
    let first = match sys::recv(fd, sys::MAX_REQUEST) {
        Ok(Some(first)) => first,
        Ok(None) => return,
        Err(e) => {
            let _ = reply(
                fd,
                shared,
                Err(ShmError::invalid(format!("reading the request: {e}"))),
            );
            return;
        }
    };
    let started = std::time::Instant::now();
    let mut request = "Shm";
    let mut stored = (0, 0);
    let outcome = match framing::request(&first.bytes) {
        Ok(Request::Tagged {
            tag: tag @ (WANT_DATA | WANT_BUNDLED),
            body,
        }) => {
            request = "ShmGet";
            match send_stream(fd, shared, body, tag == WANT_BUNDLED, started) {
                // Sent and recorded: what remains was to wait for the frees.
                Ok(()) => {
                    tracing::debug!(?peer, elapsed = ?started.elapsed(), "shm get served");
                    return;
                }
                Err(e) => Err(e),
            }
        }
        Ok(Request::Tagged {
            tag: PUT_DATA,
            body,
        }) => {
            request = "ShmPut";
            put(shared, body, first.fds).map(|(v, user)| {
                tracing::info!(
                    ?peer,
                    %user,
                    table = v.table,
                    version = v.version,
                    rows = v.rows,
                    bytes = v.bytes,
                    "shm put"
                );
                stored = (v.rows, v.bytes);
                json!({
                    "table": v.table,
                    "version": v.version,
                    "rows": v.rows,
                    "bytes": v.bytes,
                })
                .to_string()
            })
        }
        Ok(Request::Tagged { tag, .. }) => Err(ShmError::invalid(format!(
            "a connection starts with want_data (tag {WANT_DATA}), want_bundled (tag \
             {WANT_BUNDLED}) or put_data (tag {PUT_DATA}), not tag {tag}"
        ))),
        Err(e) => Err(ShmError::invalid(e)),
    };
    if let Err(e) = &outcome {
        tracing::info!(?peer, error = %e, "shm request refused");
    }
    // Only a put gets here with a success (a stream returned above).
    let code = reply(fd, shared, outcome);
    (shared.record)(crate::Finished {
        request,
        code,
        seconds: started.elapsed().as_secs_f64(),
        rows: stored.0,
        bytes: stored.1,
    });
    if code == tonic::Code::Ok {
        // The version this put replaced is being freed on the store's free
        // thread, after the reply. The connection closes once it is, so that
        // a client about to put again can wait for the close: the pages of
        // its next memfds are then the ones just freed, not pages the
        // hypervisor may have taken back (docs/shm.md, Writing).
        shared.store.memory().settle();
    }
}

/// Sends the outcome of a request; returns the code sent. A client that
/// went away misses it, which is no error of the server's.
pub(crate) fn reply(fd: BorrowedFd<'_>, shared: &Shared, outcome: Result<String>) -> tonic::Code {
    let (code, message) = match outcome {
        Ok(json) => (
            tonic::Code::Ok,
            framing::reply(tonic::Code::Ok, json.as_bytes()),
        ),
        Err(e) => {
            // The status's details: a `google.rpc.Status` with its code,
            // message and kind, as gRPC's error trailer carries it.
            let status = (shared.status_of)(e);
            (
                status.code(),
                framing::reply(status.code(), status.details()),
            )
        }
    };
    if let Err(e) = sys::send(fd, &[IoSlice::new(&message)], &[]) {
        tracing::debug!(error = %e, "shm: the client left before the reply");
    }
    code
}

/// Stores the memfds a put ticket allows; returns what was stored and who
/// put it.
fn put(shared: &Shared, ticket: &[u8], memfds: Vec<OwnedFd>) -> Result<(Stored, Arc<str>)> {
    let Grant::Put { into, caller } = shared.grants.redeem(ticket)? else {
        return Err(ShmError::invalid("a read ticket sent with put_data"));
    };
    if memfds.is_empty() {
        return Err(ShmError::invalid(
            "put_data carries no memfd: attach one or more with SCM_RIGHTS",
        ));
    }
    Ok((adopt::put(&shared.store, &into, memfds)?, caller))
}

/// Sends messages one per datagram, or packed into bundles; the descriptors
/// go with the first datagram sent.
struct Outbox<'a> {
    socket: BorrowedFd<'a>,
    /// Present when the client asked for bundles.
    bundle: Option<Bundler>,
    /// Descriptors not sent yet.
    handles: Vec<BorrowedFd<'a>>,
}

impl<'a> Outbox<'a> {
    fn new(socket: BorrowedFd<'a>, bundled: bool, handles: Vec<BorrowedFd<'a>>) -> Self {
        Self {
            socket,
            bundle: bundled.then(Bundler::default),
            handles,
        }
    }

    /// Sends (or bundles) the message made of `parts`.
    fn send(&mut self, parts: &[&[u8]]) -> std::io::Result<()> {
        let len = parts.iter().map(|p| p.len()).sum();
        match &mut self.bundle {
            Some(bundle) if Bundler::takes(len) => {
                if !bundle.has_room(len) {
                    send_bundle(self.socket, bundle, &mut self.handles)?;
                }
                bundle.push(parts);
                Ok(())
            }
            _ => {
                // Not bundling, or too large for a bundle: alone, in order.
                self.flush()?;
                let slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
                sys::send(self.socket, &slices, &std::mem::take(&mut self.handles))
            }
        }
    }

    /// Sends the bundle as it stands, if bundling.
    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.bundle {
            Some(bundle) => send_bundle(self.socket, bundle, &mut self.handles),
            None => Ok(()),
        }
    }
}

/// Sends `bundle` if it holds anything, with the `handles` not sent yet, and
/// empties it (its buffer is kept for the next one).
fn send_bundle(
    socket: BorrowedFd<'_>,
    bundle: &mut Bundler,
    handles: &mut Vec<BorrowedFd<'_>>,
) -> std::io::Result<()> {
    if bundle.is_empty() {
        return Ok(());
    }
    let sent = sys::send(
        socket,
        &[IoSlice::new(bundle.bytes())],
        &std::mem::take(handles),
    );
    bundle.clear();
    sent
}

/// Sends the stream a `want_data` (or `want_bundled`) ticket names, then holds
/// the version until every offset sent is freed or the client disconnects.
fn send_stream(
    fd: BorrowedFd<'_>,
    shared: &Shared,
    ticket: &[u8],
    bundled: bool,
    started: std::time::Instant,
) -> Result<()> {
    let Grant::Get(version) = shared.grants.redeem(ticket)? else {
        return Err(ShmError::invalid("a put ticket sent with want_data"));
    };
    let export: Arc<Export> =
        version.attachment(|| Export::write(&version, shared.store.memory()))?;
    let send_failed = |e: std::io::Error| ShmError::Cancelled(format!("sending the stream: {e}"));
    let mut outstanding = HashSet::new();
    // The memfds travel with the first datagram, which holds the schema; the
    // offsets sent are into their concatenation, in the order attached.
    let mut outbox = Outbox::new(fd, bundled, export.fds());
    let mut body = Vec::new();
    let mut seq = 0u32;
    for message in export.messages() {
        let prefix = framing::metadata_prefix(seq);
        outbox
            .send(&[&prefix, export.metadata(message)])
            .map_err(send_failed)?;
        if let Some(buffers) = &message.buffers {
            framing::shared_body(seq, buffers, &mut body);
            outbox.send(&[&body]).map_err(send_failed)?;
            outstanding.extend(buffers.iter().map(|(offset, _)| *offset));
        }
        seq = seq.wrapping_add(1);
    }
    outbox
        .send(&[&framing::end_of_stream(seq)])
        .map_err(send_failed)?;
    outbox.flush().map_err(send_failed)?;
    (shared.record)(crate::Finished {
        request: "ShmGet",
        code: tonic::Code::Ok,
        seconds: started.elapsed().as_secs_f64(),
        rows: version.num_rows(),
        bytes: version.num_bytes(),
    });
    // The version and its memfd stay alive (even if the table is replaced or
    // deleted) until the client frees every offset or goes away.
    let _ = sys::set_read_timeout(fd, None);
    while !outstanding.is_empty() {
        let Ok(Some(message)) = sys::recv(fd, sys::MAX_REQUEST) else {
            break;
        };
        match framing::request(&message.bytes) {
            Ok(Request::Tagged {
                tag: FREE_DATA,
                body,
            }) => match framing::freed_offsets(body) {
                Ok(offsets) => {
                    for offset in offsets {
                        outstanding.remove(&offset);
                    }
                }
                Err(e) => {
                    let _ = reply(fd, shared, Err(ShmError::invalid(e)));
                    break;
                }
            },
            other => {
                let _ = reply(
                    fd,
                    shared,
                    Err(ShmError::invalid(format!(
                        "after a stream only free_data (tag {FREE_DATA}) is expected, got {other:?}"
                    ))),
                );
                break;
            }
        }
    }
    drop((export, version));
    Ok(())
}

//! The data plane end to end over a real Unix socket, from Rust: a put from
//! a sealed memfd, a get of the version it stored, and refusals.

use std::io::{IoSlice, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use quiver_store::{TableStore, WriteMode};

use crate::framing::{self, PUT_DATA, WANT_DATA};
use crate::{ShmError, ShmServer, sys};

fn batch(rows: i64) -> RecordBatch {
    RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from_iter_values(0..rows)) as ArrayRef,
        ),
        (
            "name",
            Arc::new(StringArray::from_iter_values(
                (0..rows).map(|i| format!("n{i}")),
            )) as ArrayRef,
        ),
    ])
    .unwrap()
}

fn start() -> (tempfile::TempDir, Arc<TableStore>, ShmServer) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(TableStore::new(1 << 30));
    let server = ShmServer::start(
        &dir.path().join("q.sock"),
        Arc::clone(&store),
        |e| {
            let code = match &e {
                ShmError::PermissionDenied(_) => tonic::Code::PermissionDenied,
                ShmError::InvalidArgument(_) | ShmError::Decode(_) => tonic::Code::InvalidArgument,
                _ => tonic::Code::Internal,
            };
            // quiver-flight puts a serialized google.rpc.Status in the details;
            // here the message itself, so that the test reads it back as text.
            let message = e.to_string();
            tonic::Status::with_details(code, message.clone(), message.into())
        },
        |_| {},
    )
    .unwrap();
    (dir, store, server)
}

/// A tagged request: tag, then body.
fn tagged(tag: u64, body: &[u8]) -> Vec<u8> {
    [&framing::tagged_prefix(tag)[..], body].concat()
}

/// An Arrow IPC stream of `batches` in a sealed memfd, as a client writes it.
fn sealed_stream(batches: &[RecordBatch]) -> OwnedFd {
    let fd = sys::memfd("quiver-test").unwrap();
    let mut file = std::fs::File::from(fd);
    let mut writer = StreamWriter::try_new(&mut file, &batches[0].schema()).unwrap();
    for b in batches {
        writer.write(b).unwrap();
    }
    writer.finish().unwrap();
    drop(writer);
    file.flush().unwrap();
    let fd = OwnedFd::from(file);
    sys::seal(fd.as_fd()).unwrap();
    fd
}

/// Connects to `server` and sends the tagged request `tag` with `ticket`,
/// `fds` attached; the connection, for the answer.
fn request(server: &ShmServer, tag: u64, ticket: &[u8], fds: &[&OwnedFd]) -> OwnedFd {
    let socket = sys::connect(server.path()).unwrap();
    let fds: Vec<_> = fds.iter().map(|fd| fd.as_fd()).collect();
    sys::send(socket.as_fd(), &[IoSlice::new(&tagged(tag, ticket))], &fds).unwrap();
    socket
}

/// The reply datagram's status code and body (JSON, or the status's details).
fn reply(socket: &OwnedFd) -> (u8, String) {
    let received = sys::recv(socket.as_fd(), sys::MAX_REQUEST)
        .unwrap()
        .unwrap();
    assert_eq!(received.bytes[0], 2, "a reply");
    (
        received.bytes[1],
        String::from_utf8(received.bytes[2..].to_vec()).unwrap(),
    )
}

#[test]
fn a_put_from_a_sealed_memfd_is_stored_and_read_back_over_the_socket() {
    let (_dir, store, server) = start();
    let ticket = server
        .put_ticket("t".into(), WriteMode::Replace, None, "tester".into())
        .unwrap();
    let memfd = sealed_stream(&[batch(1000), batch(10)]);
    let socket = request(&server, PUT_DATA, &ticket, &[&memfd]);
    let (code, text) = reply(&socket);
    assert_eq!(code, 0, "{text}");
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["rows"], 1010);
    let stored = store.get("t").unwrap();
    assert_eq!(stored.num_rows(), 1010);

    // Read it back: the memfd, then one metadata message per IPC message
    // and a body message for each batch, then the end of the stream.
    let endpoint = server.get_endpoint(stored).unwrap();
    let ticket = endpoint.ticket.unwrap().ticket;
    let socket = request(&server, WANT_DATA, &ticket, &[]);
    let (mut fds, mut metadata, mut bodies) = (Vec::new(), 0, 0);
    loop {
        let received = sys::recv(socket.as_fd(), sys::MAX_REQUEST)
            .unwrap()
            .unwrap();
        fds.extend(received.fds);
        match (received.bytes[0], received.bytes[1]) {
            (0, 1) => metadata += 1,
            (0, 0) => break,
            (1, _) => bodies += 1,
            other => panic!("unexpected message {other:?}"),
        }
    }
    assert_eq!(fds.len(), 1, "the version's memfd travels once");
    assert_eq!(metadata, 3, "the schema and two batches");
    assert_eq!(bodies, 2);
    // The memfd holds the stored batches as an Arrow IPC stream, sealed.
    assert_eq!(
        sys::seals(fds[0].as_fd()).unwrap() & sys::IMMUTABLE,
        sys::IMMUTABLE
    );
    let file = std::fs::File::from(fds.remove(0));
    let mut bytes = vec![0; file.metadata().unwrap().len() as usize];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut bytes, 0).unwrap();
    let read: Vec<RecordBatch> = StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(read, [batch(1000), batch(10)]);
}

#[test]
fn a_put_connection_closes_once_the_replaced_version_is_freed() {
    let (_dir, store, server) = start();
    let put = |rows| {
        let ticket = server
            .put_ticket("t".into(), WriteMode::Replace, None, "tester".into())
            .unwrap();
        let memfd = sealed_stream(&[batch(rows)]);
        let socket = request(&server, PUT_DATA, &ticket, &[&memfd]);
        let (code, text) = reply(&socket);
        assert_eq!(code, 0, "{text}");
        socket
    };
    drop(put(100));
    let first = Arc::downgrade(&store.get("t").unwrap());
    let socket = put(200);
    // The replaced version is freed on the store's free thread; the server
    // closes the connection after that, which a client putting again waits for.
    assert!(
        sys::recv(socket.as_fd(), sys::MAX_REQUEST)
            .unwrap()
            .is_none(),
        "nothing follows the reply but the close"
    );
    assert!(first.upgrade().is_none(), "the replaced version is freed");
    assert!(!store.memory().settle(), "no free is pending");
    assert_eq!(store.get("t").unwrap().num_rows(), 200);
}

#[test]
fn a_used_ticket_is_refused_and_a_put_without_memfd_too() {
    let (_dir, store, server) = start();
    let ticket = server
        .put_ticket("t".into(), WriteMode::Replace, None, "tester".into())
        .unwrap();
    let socket = request(&server, PUT_DATA, &ticket, &[]);
    let (code, text) = reply(&socket);
    assert_eq!(code, tonic::Code::InvalidArgument as u8);
    assert!(text.contains("carries no memfd"), "{text}");
    // The ticket was redeemed by that attempt: one use only.
    let memfd = sealed_stream(&[batch(5)]);
    let socket = request(&server, PUT_DATA, &ticket, &[&memfd]);
    let (code, text) = reply(&socket);
    assert_eq!(code, tonic::Code::PermissionDenied as u8, "{text}");
    assert!(store.get("t").is_err(), "nothing was stored");
}

//! The messages between the server and its workers (protocol version 1,
//! docs/functions.md; `python/quiver/functions/_wire.py` is the other side).
//!
//! One datagram per message: a little-endian `u32` length, a JSON header of
//! that length, then the payload. Arrow data is one whole IPC stream, inline
//! as the payload when at most [`INLINE_LIMIT`] bytes, otherwise in a sealed
//! memfd attached to the datagram.

use std::io::{Cursor, IoSlice, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::panic::AssertUnwindSafe;

use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;
use quiver_shm::process::{self, Datagram, Link};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{FunctionError, Result};

/// The protocol version the server speaks; a worker's hello must match.
pub const PROTOCOL: u32 = 1;

/// Largest IPC stream sent inline; larger ones travel in a memfd.
pub const INLINE_LIMIT: usize = 61_440;

/// Largest datagram read from a worker: an inline stream and its header.
pub(crate) const MAX_DATAGRAM: usize = 1 << 17;

/// A worker's first message.
#[derive(Debug, Deserialize)]
pub(crate) struct Hello {
    #[serde(default)]
    pub(crate) protocol: u32,
    #[serde(default)]
    pub(crate) quiver: String,
    #[serde(default)]
    pub(crate) python: String,
    #[serde(default)]
    pub(crate) pyarrow: String,
    #[serde(default)]
    pub(crate) pid: u32,
    #[serde(default)]
    pub(crate) functions: Value,
    pub(crate) error: Option<Failure>,
}

/// An exception in a worker, as it reports it.
#[derive(Debug, Deserialize)]
pub(crate) struct Failure {
    #[serde(rename = "type", default)]
    pub(crate) python_type: String,
    #[serde(default)]
    pub(crate) message: String,
    #[serde(default)]
    pub(crate) traceback: String,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Header {
    Hello(Hello),
    Result {
        seq: u64,
    },
    Error {
        seq: u64,
        kind: String,
        #[serde(flatten)]
        failure: Failure,
    },
}

/// A message from a worker.
#[derive(Debug)]
pub(crate) enum FromWorker {
    Hello(Hello),
    /// The answer to call `seq`: one or more batches.
    Result {
        seq: u64,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
    /// Call `seq` failed in Python.
    Error {
        seq: u64,
        /// `FUNCTION_ERROR` or `FUNCTION_OUTPUT`.
        kind: String,
        failure: Failure,
    },
}

fn malformed(what: impl std::fmt::Display) -> FunctionError {
    FunctionError::Internal(format!("a malformed message from a worker: {what}"))
}

/// Decodes one datagram from a worker.
pub(crate) fn parse(datagram: Datagram) -> Result<FromWorker> {
    let Datagram { bytes, mut fds } = datagram;
    let len = bytes
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or_else(|| malformed("shorter than its length prefix"))?;
    let header = bytes
        .get(4..4 + len)
        .ok_or_else(|| malformed("its header is cut short"))?;
    let header: Header = serde_json::from_slice(header).map_err(malformed)?;
    let payload = &bytes[4 + len..];
    Ok(match header {
        Header::Hello(hello) => FromWorker::Hello(hello),
        Header::Error { seq, kind, failure } => FromWorker::Error { seq, kind, failure },
        Header::Result { seq } => {
            let (schema, batches) = match fds.pop() {
                Some(memfd) => process::read_sealed(&memfd, "a worker's result memfd")
                    .map_err(|e| malformed(e.to_string()))?,
                None => read_inline(payload)?,
            };
            if batches.is_empty() {
                return Err(malformed("a result without a record batch"));
            }
            FromWorker::Result {
                seq,
                schema,
                batches,
            }
        }
    })
}

/// Decodes an inline IPC stream, validating it in full.
fn read_inline(payload: &[u8]) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let reader = StreamReader::try_new(Cursor::new(payload), None)?;
        let schema = reader.schema();
        let batches = reader.collect::<Result<Vec<_>, _>>()?;
        Ok::<_, arrow::error::ArrowError>((schema, batches))
    }));
    match decoded {
        Ok(Ok(decoded)) => Ok(decoded),
        Ok(Err(e)) => Err(malformed(e)),
        Err(_) => Err(malformed("the IPC decoder failed on its stream")),
    }
}

/// A batch encoded for a `call`: the IPC stream inline, or in a sealed memfd.
/// Encoded before the batch waits for a worker, so that the copy overlaps
/// the work of the batch before it.
#[derive(Debug)]
pub(crate) enum Encoded {
    /// Sent as the datagram's payload.
    Inline(Vec<u8>),
    /// Attached to the datagram.
    Memfd(OwnedFd),
}

impl Encoded {
    /// `batch` as one IPC stream: small batches in memory, others written
    /// straight into a memfd (one copy of their bytes).
    pub(crate) fn new(batch: &RecordBatch) -> Result<Self> {
        let io = |e: std::io::Error| FunctionError::Internal(format!("encoding a batch: {e}"));
        if batch.get_array_memory_size() <= INLINE_LIMIT {
            let stream = encode(Vec::new(), batch).map_err(io)?;
            if stream.len() <= INLINE_LIMIT {
                return Ok(Self::Inline(stream));
            }
            let memfd = process::sealed_memfd("quiver-function-input", &[&stream]).map_err(io)?;
            return Ok(Self::Memfd(memfd));
        }
        let memfd =
            process::sealed_memfd_with("quiver-function-input", |out| encode(out, batch).map(drop))
                .map_err(io)?;
        Ok(Self::Memfd(memfd))
    }
}

/// Sends a `call` of `function` on `input`, numbered `seq`.
pub(crate) fn send_call(link: &Link, function: &str, seq: u64, input: &Encoded) -> Result<()> {
    let header = json!({"op": "call", "function": function, "seq": seq}).to_string();
    let sent = match input {
        Encoded::Inline(stream) => send(link, &header, stream, None),
        Encoded::Memfd(memfd) => send(link, &header, &[], Some(memfd)),
    };
    sent.map_err(|e| FunctionError::Internal(format!("sending a batch: {e}")))
}

/// Sends `shutdown`.
pub(crate) fn send_shutdown(link: &Link) -> std::io::Result<()> {
    send(link, r#"{"op":"shutdown"}"#, &[], None)
}

fn send(link: &Link, header: &str, payload: &[u8], memfd: Option<&OwnedFd>) -> std::io::Result<()> {
    let len = (header.len() as u32).to_le_bytes();
    let parts = [
        IoSlice::new(&len),
        IoSlice::new(header.as_bytes()),
        IoSlice::new(payload),
    ];
    match memfd {
        Some(fd) => link.send(&parts, &[fd.as_fd()]),
        None => link.send(&parts, &[]),
    }
}

fn encode<W: Write>(out: W, batch: &RecordBatch) -> std::io::Result<W> {
    let io = |e: arrow::error::ArrowError| std::io::Error::other(e.to_string());
    let mut writer = StreamWriter::try_new(out, &batch.schema()).map_err(io)?;
    writer.write(batch).map_err(io)?;
    writer.finish().map_err(io)?;
    writer.into_inner().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    fn batch(rows: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from_iter_values(0..rows))],
        )
        .unwrap()
    }

    fn message(header: Value, payload: &[u8], fds: Vec<OwnedFd>) -> Datagram {
        let header = header.to_string();
        let mut bytes = (header.len() as u32).to_le_bytes().to_vec();
        bytes.extend(header.as_bytes());
        bytes.extend(payload);
        Datagram { bytes, fds }
    }

    /// Reads a `call` the way a worker does.
    fn received_call(link: &Link) -> (Value, RecordBatch) {
        let Datagram { bytes, mut fds } = link.recv(MAX_DATAGRAM).unwrap().unwrap();
        let len = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
        let header: Value = serde_json::from_slice(&bytes[4..4 + len]).unwrap();
        let (_, batches) = match fds.pop() {
            Some(fd) => process::read_sealed(&fd, "input").unwrap(),
            None => read_inline(&bytes[4 + len..]).unwrap(),
        };
        (header, batches.into_iter().next().unwrap())
    }

    #[test]
    fn calls_go_inline_when_small_and_by_memfd_when_large() {
        let (server, worker) = Link::pair().unwrap();
        let worker = Link::from_fd(worker);
        for rows in [3, 100_000] {
            let b = batch(rows);
            send_call(&server, "f", rows as u64, &Encoded::new(&b).unwrap()).unwrap();
            let (header, got) = received_call(&worker);
            assert_eq!(header["op"], "call");
            assert_eq!(header["seq"], rows);
            assert_eq!(got, b);
        }
    }

    #[test]
    fn results_errors_and_hellos_parse() {
        let b = batch(5);
        let stream = encode(Vec::new(), &b).unwrap();
        match parse(message(
            json!({"op": "result", "seq": 7, "rows": 5}),
            &stream,
            vec![],
        ))
        .unwrap()
        {
            FromWorker::Result { seq, batches, .. } => {
                assert_eq!(seq, 7);
                assert_eq!(batches, vec![b.clone()]);
            }
            other => panic!("{other:?}"),
        }
        let memfd = process::sealed_memfd("r", &[&stream]).unwrap();
        assert!(matches!(
            parse(message(
                json!({"op": "result", "seq": 8, "rows": 5}),
                &[],
                vec![memfd]
            )),
            Ok(FromWorker::Result { seq: 8, .. })
        ));
        let error = json!({"op": "error", "seq": 9, "kind": "FUNCTION_ERROR",
                           "type": "ValueError", "message": "bad", "traceback": "tb"});
        match parse(message(error, &[], vec![])).unwrap() {
            FromWorker::Error { seq, kind, failure } => {
                assert_eq!((seq, kind.as_str()), (9, "FUNCTION_ERROR"));
                assert_eq!(failure.python_type, "ValueError");
            }
            other => panic!("{other:?}"),
        }
        let hello = json!({"op": "hello", "protocol": 1, "quiver": "0.1.0", "functions": []});
        assert!(matches!(
            parse(message(hello, &[], vec![])),
            Ok(FromWorker::Hello(Hello { protocol: 1, .. }))
        ));
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        for bytes in [
            vec![],
            vec![9, 0, 0, 0, b'{'],
            b"\x02\x00\x00\x00{}".to_vec(),
            b"\x0f\x00\x00\x00{\"op\":\"result\"}".to_vec(),
        ] {
            assert!(parse(Datagram { bytes, fds: vec![] }).is_err());
        }
        let no_batch = json!({"op": "result", "seq": 1});
        assert!(parse(message(no_batch.clone(), b"garbage", vec![])).is_err());
        let unsealed = process::sealed_memfd("x", &[b"not arrow"]).unwrap();
        assert!(parse(message(no_batch, &[], vec![unsealed])).is_err());
    }
}

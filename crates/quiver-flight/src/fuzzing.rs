//! The DoPut decode path as one function over bytes, for fuzzing.
//!
//! [`PutHarness::run`] feeds bytes to the server's own DoPut path exactly as
//! they would arrive in a request body (gRPC-framed FlightData messages, cut
//! into HTTP/2 frames): the protobuf fields are read off the frames, each body
//! copied into aligned memory, the IPC messages decoded into record batches
//! with arrow's validation on, charged to the memory pool and stored. It then
//! checks what a malformed request must never break: nothing panics, every
//! stored array is valid, a put that succeeded stored the rows it reported,
//! and the memory pool returns to zero once the tables are dropped.
//!
//! [`seed_bodies`] are real DoPut request bodies (arrow-flight's encoder, as
//! the Rust client sends them) and [`mutate`] derives malformed ones from them
//! deterministically. The cargo-fuzz target in `fuzz/` and this crate's tests
//! both use them (docs/limits.md).

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array};
use arrow::record_batch::RecordBatch;
use arrow_flight::encode::{DictionaryHandling, FlightDataEncoderBuilder};
use arrow_flight::{FlightDescriptor, PutResult};
use bytes::Bytes;
use futures::TryStreamExt;
use prost::Message;
use quiver_sql::EngineOptions;
use quiver_store::TableStore;
use tonic::Status;

use crate::{Error, QuiverService, ServiceOptions};

/// Largest message the harness accepts: small, so huge declared lengths are
/// refused quickly instead of waiting for bytes that never come.
pub const HARNESS_MAX_MESSAGE_SIZE: usize = 64 << 20;
/// The harness store's memory limit.
pub const HARNESS_MAX_MEMORY: u64 = 256 << 20;

/// A store and the Flight service over it, with a runtime to drive DoPut.
#[derive(Debug)]
pub struct PutHarness {
    runtime: tokio::runtime::Runtime,
    service: QuiverService,
}

impl Default for PutHarness {
    fn default() -> Self {
        Self::new()
    }
}

impl PutHarness {
    /// An empty store behind a service with default options.
    ///
    /// # Panics
    /// If a single-threaded tokio runtime cannot be built.
    pub fn new() -> Self {
        #[allow(clippy::expect_used)]
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime");
        let store = Arc::new(TableStore::new(HARNESS_MAX_MEMORY));
        let service = QuiverService::new(
            store,
            ServiceOptions {
                location: "grpc+tcp://127.0.0.1:0".into(),
                default_partitions: 1,
                max_flight_data_size: 2 << 20,
                large_flight_data_size: 2 << 20,
                max_message_size: HARNESS_MAX_MESSAGE_SIZE,
                put_buffer_pool: 64 << 20,
                sql: EngineOptions::default(),
                shm: None,
                functions: None,
                topology: Arc::new(crate::cluster::SingleServer),
            },
        );
        Self { runtime, service }
    }

    /// Runs one DoPut whose request body is `input` after its first byte,
    /// which chooses how the body is cut into frames; returns what the client
    /// would be told.
    ///
    /// # Panics
    /// When the server's promises break (see the module's docs): that is what
    /// the fuzzer looks for.
    pub fn run(&self, input: &[u8]) -> Result<PutResult, Status> {
        let Some((&cut, body)) = input.split_first() else {
            return Err(Error::invalid("empty input").into());
        };
        let piece = match cut % 4 {
            0 => body.len().max(1),
            1 => 1 + usize::from(cut),
            2 => 4096,
            _ => 7,
        };
        let frames: Vec<Bytes> = body.chunks(piece).map(Bytes::copy_from_slice).collect();
        let result = self
            .runtime
            .block_on(crate::wire::put_frames(&self.service, frames));
        self.check(&result);
        result
    }

    fn check(&self, result: &Result<PutResult, Status>) {
        let store = self.service.store();
        if let Err(status) = result {
            assert_ne!(status.code(), tonic::Code::Internal, "{status:?}");
            assert_ne!(status.code(), tonic::Code::Unknown, "{status:?}");
        }
        let tables = store.list("");
        if let Ok(put) = result {
            let answer: serde_json::Value =
                serde_json::from_slice(&put.app_metadata).unwrap_or_default();
            let name = answer["table"].as_str().unwrap_or_default();
            let table = tables
                .iter()
                .find(|t| t.name() == name)
                .unwrap_or_else(|| panic!("a put acknowledged table {name:?} but it is not there"));
            assert_eq!(answer["rows"].as_u64(), Some(table.num_rows()));
        }
        for table in &tables {
            for batch in table.batches() {
                for column in batch.columns() {
                    if let Err(e) = column.to_data().validate_full() {
                        panic!("table {} holds an invalid array: {e}", table.name());
                    }
                }
            }
        }
        let charged: u64 = tables.iter().map(|t| t.num_bytes()).sum();
        store.memory().settle();
        assert_eq!(store.memory().used(), charged, "memory charged to no table");
        drop(tables);
        for table in store.list("") {
            let _ = store.remove(table.name());
        }
        store.memory().settle();
        assert_eq!(
            store.memory().used(),
            0,
            "memory left charged after deletes"
        );
    }
}

/// The batch of every type, ids from `offset`.
fn typed_batch(rows: usize, offset: i64) -> RecordBatch {
    quiver_ipc::testing::every_type(offset, rows)
}

/// One DoPut request body: `batches` as arrow-flight's encoder sends them
/// (the first message carrying `descriptor` and `app_metadata`), each
/// FlightData in its 5-byte gRPC frame.
fn put_body(
    descriptor: FlightDescriptor,
    app_metadata: &'static [u8],
    batches: Vec<RecordBatch>,
    dictionaries: DictionaryHandling,
) -> Vec<u8> {
    let stream = FlightDataEncoderBuilder::new()
        .with_flight_descriptor(Some(descriptor))
        .with_metadata(Bytes::from_static(app_metadata))
        .with_dictionary_handling(dictionaries)
        .with_max_flight_data_size(8 << 10)
        .build(futures::stream::iter(batches.into_iter().map(Ok)));
    #[allow(clippy::expect_used)]
    let messages: Vec<_> =
        futures::executor::block_on(stream.try_collect()).expect("encoding valid batches");
    let mut body = Vec::new();
    for message in messages {
        let encoded = message.encode_to_vec();
        body.push(0);
        body.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
        body.extend_from_slice(&encoded);
    }
    body
}

/// Real DoPut request bodies, named: several shapes of table (dictionaries
/// hydrated: arrow-flight 59's encoder with `DictionaryHandling::Resend`
/// sends batches of this shape its own decoder refuses), put options, an
/// empty table. `fuzz/make_seeds.py` adds pyarrow's, dictionaries included.
pub fn seed_bodies() -> Vec<(&'static str, Vec<u8>)> {
    let path = || FlightDescriptor::new_path(vec!["t".into()]);
    let typed = |rows| vec![typed_batch(rows, 0), typed_batch(rows / 2 + 1, 1000)];
    let ints = RecordBatch::try_from_iter([(
        "a",
        Arc::new(Int64Array::from_iter_values(0..100)) as ArrayRef,
    )]);
    #[allow(clippy::expect_used)]
    let ints = ints.expect("one column");
    vec![
        (
            "typed-hydrated",
            put_body(path(), b"", typed(300), DictionaryHandling::Hydrate),
        ),
        (
            "ints-append",
            put_body(
                path(),
                br#"{"mode":"append"}"#,
                vec![ints.clone()],
                DictionaryHandling::Hydrate,
            ),
        ),
        (
            "ints-partitions",
            put_body(
                path(),
                br#"{"mode":"replace","partitions":2}"#,
                vec![ints.clone(), ints.slice(3, 50)],
                DictionaryHandling::Hydrate,
            ),
        ),
        (
            "empty-table",
            put_body(
                path(),
                b"",
                vec![ints.slice(0, 0)],
                DictionaryHandling::Hydrate,
            ),
        ),
    ]
}

/// A malformed variant of `seed`, chosen by `n` alone (the same `n` always
/// gives the same bytes). The first byte of the result is the frame cut of
/// [`PutHarness::run`].
pub fn mutate(seed: &[u8], n: u64) -> Vec<u8> {
    let mut rng = XorShift(n.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut data = seed.to_vec();
    let edits = 1 + rng.below(4);
    for _ in 0..edits {
        if data.is_empty() {
            break;
        }
        let at = rng.below(data.len());
        match rng.below(6) {
            // Flip one bit.
            0 => data[at] ^= 1 << rng.below(8),
            // Cut the body short.
            1 => data.truncate(at),
            // A boundary value over four bytes: lengths, offsets, counts.
            2 => {
                let value: u32 =
                    [0, 1, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff, 0x00ff_ffff][rng.below(6)];
                for (i, b) in value.to_le_bytes().iter().enumerate() {
                    if let Some(slot) = data.get_mut(at + i) {
                        *slot = *b;
                    }
                }
            }
            // Drop a range.
            3 => {
                let end = (at + 1 + rng.below(64)).min(data.len());
                data.drain(at..end);
            }
            // Repeat a range (a message twice, a field twice).
            4 => {
                let end = (at + 1 + rng.below(256)).min(data.len());
                let copy = data[at..end].to_vec();
                data.splice(at..at, copy);
            }
            // A random byte.
            _ => data[at] = rng.below(256) as u8,
        }
    }
    let mut out = Vec::with_capacity(data.len() + 1);
    out.push(rng.below(256) as u8);
    out.extend_from_slice(&data);
    out
}

/// A small deterministic generator (xorshift64).
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each seed stores; its frames may be cut anywhere.
    #[test]
    fn seeds_are_stored_however_they_are_cut() {
        let harness = PutHarness::new();
        for (name, seed) in seed_bodies() {
            for cut in [0u8, 1, 2, 3, 200] {
                let mut input = vec![cut];
                input.extend_from_slice(&seed);
                let result = harness.run(&input);
                match name {
                    // Appending to a table that is not there.
                    "ints-append" => assert_eq!(
                        result.map_err(|s| s.code()).err(),
                        Some(tonic::Code::NotFound)
                    ),
                    _ => assert!(result.is_ok(), "{name} cut {cut}: {result:?}"),
                }
            }
        }
    }

    /// Malformed bodies: never a panic, an INTERNAL status, an invalid array
    /// stored or memory left charged (checked by `run`).
    #[test]
    fn mutated_seeds_are_refused_or_stored_cleanly() {
        let harness = PutHarness::new();
        let (mut stored, mut refused) = (0, 0);
        for (index, (_, seed)) in seed_bodies().iter().enumerate() {
            for n in 0..600u64 {
                match harness.run(&mutate(seed, n * 16 + index as u64)) {
                    Ok(_) => stored += 1,
                    Err(_) => refused += 1,
                }
            }
        }
        assert_eq!(stored + refused, 2400);
        assert!(refused > 1000, "mutations mostly break the body: {refused}");
    }
}

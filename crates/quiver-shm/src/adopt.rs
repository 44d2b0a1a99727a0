//! A put over shared memory: the client's sealed memfds, checked, validated and
//! stored as the table without copying, in this server's store or through a
//! [`PutTarget`].

use std::os::fd::{AsFd, OwnedFd};
use std::panic::AssertUnwindSafe;
use std::ptr::NonNull;
use std::sync::Arc;

use arrow::buffer::Buffer;
use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamDecoder;
use arrow::record_batch::RecordBatch;
use quiver_store::{StoreError, TableStore, TableVersion, WriteMode};

use super::export::{self, Export};
use super::sys;
use crate::{Result, ShmError};

/// An IPC stream's End of Stream marker.
const END_OF_STREAM: [u8; 8] = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];

/// What the client asked to store in this server's store.
#[derive(Debug, Clone)]
pub(crate) struct PutRequest {
    pub(crate) table: String,
    pub(crate) mode: WriteMode,
    pub(crate) partitions: Option<usize>,
}

/// Where a put's rows go.
#[derive(Debug, Clone)]
pub(crate) enum PutInto {
    /// This server's store, in place ([`adopt`]).
    Store(PutRequest),
    /// Where the server that issued the ticket said ([`PutTarget`]).
    Target(Arc<dyn PutTarget>),
}

/// Where a put over shared memory goes when it does not become a table of
/// this server's store in place: a cluster node's tables, which spread the
/// rows over the nodes as a put over gRPC is.
pub trait PutTarget: Send + Sync + std::fmt::Debug {
    /// Stores `batches`, all of `schema`, whole or not at all. Their buffers
    /// are the client's memfds, mapped read-only, validated and sealed.
    fn put(&self, schema: SchemaRef, batches: Vec<RecordBatch>) -> Result<Stored>;
}

/// What a put stored: the table's new version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The table's name.
    pub table: String,
    /// Its new version.
    pub version: u64,
    /// Rows of the whole new version.
    pub rows: u64,
    /// Arrow bytes of the whole new version.
    pub bytes: u64,
}

impl From<&TableVersion> for Stored {
    fn from(version: &TableVersion) -> Self {
        Self {
            table: version.name().to_string(),
            version: version.version(),
            rows: version.num_rows(),
            bytes: version.num_bytes(),
        }
    }
}

/// Stores the IPC streams in `memfds` where `into` says.
pub(crate) fn put(store: &TableStore, into: &PutInto, memfds: Vec<OwnedFd>) -> Result<Stored> {
    match into {
        PutInto::Store(request) => Ok(Stored::from(&*adopt(store, request, memfds)?)),
        PutInto::Target(target) => {
            let mapped = map(store, memfds)?;
            target.put(mapped.schema, mapped.batches)
        }
    }
}

/// The streams of a put's memfds, mapped and decoded.
struct Mapped {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    /// Each memfd, its mapping and its messages.
    parts: Vec<(OwnedFd, Arc<memmap2::Mmap>, Vec<export::MessageLayout>)>,
}

/// Stores the IPC streams in `memfds`, one after the other, as
/// `request.table`. The stored batches point into their mappings.
fn adopt(
    store: &TableStore,
    request: &PutRequest,
    memfds: Vec<OwnedFd>,
) -> Result<Arc<TableVersion>> {
    let Mapped {
        schema,
        batches,
        parts,
    } = map(store, memfds)?;
    let mut writer = store.writer(&request.table, request.mode, schema, request.partitions)?;
    for batch in batches {
        writer.push(batch)?;
    }
    let version = writer.commit()?;
    if !store.is_durable()
        && request.mode != WriteMode::Append
        && parts.iter().all(|(_, _, messages)| {
            messages
                .iter()
                .all(export::MessageLayout::body_starts_at_first_buffer)
        })
    {
        // The version's batches are the memfds': later reads over shared memory
        // pass them on as they are. (A stream whose bodies start before their
        // first buffer is written into a memfd of quiver's own when first read.)
        version.attach(Arc::new(Export::adopt(parts)));
    }
    Ok(version)
}

/// Maps and decodes the IPC streams in `memfds`, one after the other. Each
/// memfd must be sealed against writing, shrinking and growing and hold a
/// whole stream; all of them the same schema. Their bytes are untrusted and
/// validated in full. (A client writes several memfds at once to use several
/// cores: filling fresh pages of one memfd does not scale, the file's lock
/// serializes writers.) Refused before anything is mapped if `store`'s memory
/// could not hold them.
fn map(store: &TableStore, memfds: Vec<OwnedFd>) -> Result<Mapped> {
    let count = memfds.len();
    let which = |i: usize| {
        if count == 1 {
            "the memfd".to_string()
        } else {
            format!("memfd {} of {count}", i + 1)
        }
    };
    let mut total = 0u64;
    for (i, memfd) in memfds.iter().enumerate() {
        total = total.saturating_add(checked_len(memfd, &which(i))?);
    }
    let pool = store.memory();
    pool.settle();
    // Refused before anything is mapped, as the store would refuse the charge:
    // the same error (and kind, MEMORY_LIMIT) as a put over gRPC.
    let would_use = pool.used().saturating_add(total);
    if would_use > pool.limit() {
        return Err(StoreError::MemoryLimit {
            requested: total,
            would_use,
            limit: pool.limit(),
        }
        .into());
    }
    let mut parts = Vec::with_capacity(count);
    let mut schema: Option<SchemaRef> = None;
    let mut batches = Vec::new();
    for (i, memfd) in memfds.into_iter().enumerate() {
        let map = Arc::new(export::map(&memfd)?);
        let messages =
            export::scan(&map).map_err(|e| ShmError::Decode(format!("{}: {e}", which(i))))?;
        let (part_schema, part_batches) = decode(&map, &messages)?;
        match &schema {
            None => schema = Some(part_schema),
            Some(first) if *first != part_schema => {
                return Err(ShmError::invalid(format!(
                    "{}'s schema differs from the first memfd's: every memfd of a put holds \
                     the same schema",
                    which(i)
                )));
            }
            Some(_) => {}
        }
        batches.extend(part_batches);
        parts.push((memfd, map, messages));
    }
    let schema = schema.ok_or_else(|| ShmError::invalid("a put of no memfd"))?;
    Ok(Mapped {
        schema,
        batches,
        parts,
    })
}

/// The length of a memfd sealed against writing, shrinking and growing;
/// `what` names it in errors.
pub(crate) fn checked_len(memfd: &OwnedFd, what: &str) -> Result<u64> {
    let seals = sys::seals(memfd.as_fd()).map_err(|e| {
        ShmError::invalid(format!(
            "{what} is not a sealable memfd ({e}): create it with \
             memfd_create(MFD_ALLOW_SEALING)"
        ))
    })?;
    if seals & sys::IMMUTABLE != sys::IMMUTABLE {
        return Err(ShmError::invalid(format!(
            "{what} is not sealed: add F_SEAL_WRITE, F_SEAL_SHRINK and F_SEAL_GROW \
             (and unmap every writable mapping) before passing it"
        )));
    }
    let len = std::fs::File::from(
        memfd
            .try_clone()
            .map_err(|e| ShmError::Internal(format!("cannot duplicate the memfd: {e}")))?,
    )
    .metadata()
    .map_err(|e| ShmError::Internal(format!("cannot stat the memfd: {e}")))?
    .len();
    if len == 0 {
        return Err(ShmError::invalid(format!(
            "{what} is empty: expected an Arrow IPC stream"
        )));
    }
    Ok(len)
}

/// Decodes the stream in `map` with full validation; the arrays point into
/// the mapping (the decoder copies only buffers that are not aligned).
pub(crate) fn decode(
    map: &Arc<memmap2::Mmap>,
    messages: &[export::MessageLayout],
) -> Result<(arrow::datatypes::SchemaRef, Vec<RecordBatch>)> {
    let ptr = NonNull::new(map.as_ptr().cast_mut())
        .ok_or_else(|| ShmError::Internal("a mapping at address 0".to_string()))?;
    // SAFETY: `ptr` and `len` describe the mapping, which the buffer keeps alive
    // through its owner, and which cannot change (the memfd is sealed).
    let owner: Arc<memmap2::Mmap> = Arc::clone(map);
    let whole = unsafe { Buffer::from_custom_allocation(ptr, map.len(), owner) };
    let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let mut decoder = StreamDecoder::new();
        let mut batches = Vec::new();
        // The messages `scan` found, then an End of Stream marker of our own:
        // the decoder handles a message only once bytes follow it.
        let end = messages.last().map_or(0, |m| m.body.end);
        for mut bytes in [
            whole.slice_with_length(0, end),
            Buffer::from(END_OF_STREAM.to_vec()),
        ] {
            while !bytes.is_empty() {
                if let Some(batch) = decoder.decode(&mut bytes)? {
                    batches.push(batch);
                }
            }
        }
        decoder.finish()?;
        let schema = decoder
            .schema()
            .ok_or_else(|| arrow::error::ArrowError::IpcError("no schema message".into()))?;
        Ok::<_, arrow::error::ArrowError>((schema, batches))
    }));
    match decoded {
        Ok(Ok(decoded)) => Ok(decoded),
        Ok(Err(e)) => Err(ShmError::Decode(e.to_string())),
        Err(_) => Err(ShmError::Decode(
            "the Arrow IPC decoder failed on this stream".to_string(),
        )),
    }
}

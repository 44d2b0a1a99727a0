//! Immutable table versions and the segments they share.

use std::any::Any;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;

use crate::facts::SegmentFacts;
use crate::{MemoryCharge, Result, StoreError};

/// The batches written by one put or append, with the memory they are charged.
///
/// A segment is shared by every version that contains it (an append makes a new
/// version holding the old segments plus one new one), and its memory returns to
/// the pool when the last such version is dropped.
///
/// In a durable store a segment is one file of the data directory, and its
/// batches point into that file's memory mapping: they are charged nothing
/// (docs/durability.md, "Memory").
#[derive(Debug)]
pub(crate) struct Segment {
    batches: Vec<RecordBatch>,
    rows: u64,
    bytes: u64,
    file: Option<SegmentFile>,
    /// Computed at the first call of [`Segment::facts`], then shared by
    /// every version holding the segment.
    facts: OnceLock<Arc<SegmentFacts>>,
    _charge: MemoryCharge,
}

/// Where a durable segment's files are.
#[derive(Debug)]
pub(crate) struct SegmentFile {
    /// The segment file's id in its data directory.
    pub(crate) id: u64,
    /// The segment file.
    pub(crate) path: PathBuf,
    /// The file of its facts ([`SegmentFacts::load_or_compute`]).
    pub(crate) facts: PathBuf,
}

impl Segment {
    pub(crate) fn new(batches: Vec<RecordBatch>, charge: MemoryCharge) -> Self {
        let rows = batches.iter().map(|b| b.num_rows() as u64).sum();
        Self {
            batches,
            rows,
            bytes: charge.bytes(),
            file: None,
            facts: OnceLock::new(),
            _charge: charge,
        }
    }

    /// A segment read from its file, its batches mapped from it. `charge` is
    /// empty: mapped pages belong to the page cache.
    pub(crate) fn stored(
        file: SegmentFile,
        batches: Vec<RecordBatch>,
        charge: MemoryCharge,
    ) -> Self {
        let rows = batches.iter().map(|b| b.num_rows() as u64).sum();
        let bytes = batches.iter().map(crate::batch_bytes).sum();
        Self {
            batches,
            rows,
            bytes,
            file: Some(file),
            facts: OnceLock::new(),
            _charge: charge,
        }
    }

    /// The id of the segment file holding this segment, in a durable store.
    pub(crate) fn file(&self) -> Option<u64> {
        self.file.as_ref().map(|f| f.id)
    }

    /// The facts of the segment's batches (of `schema`), computed at the
    /// first call; a durable segment's are read from, or written to, the
    /// file beside its segment file.
    pub(crate) fn facts(&self, schema: &Schema) -> Arc<SegmentFacts> {
        let made = self.facts.get_or_init(|| {
            Arc::new(match &self.file {
                Some(file) => SegmentFacts::load_or_compute(file, schema, &self.batches),
                None => SegmentFacts::compute(schema, &self.batches),
            })
        });
        Arc::clone(made)
    }

    /// The segment's batches, in write order.
    pub(crate) fn batches(&self) -> &[RecordBatch] {
        &self.batches
    }

    /// Rows in this segment.
    pub(crate) fn num_rows(&self) -> u64 {
        self.rows
    }

    /// Bytes of the segment's buffers: what an in-memory segment is charged.
    pub(crate) fn num_bytes(&self) -> u64 {
        self.bytes
    }
}

/// Now, in milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One immutable version of a named table.
///
/// Held through an `Arc`: a reader that took a version keeps it, unchanged, for
/// as long as it likes, while writers publish newer versions.
#[derive(Debug)]
pub struct TableVersion {
    name: String,
    version: u64,
    schema: SchemaRef,
    segments: Vec<Arc<Segment>>,
    rows: u64,
    bytes: u64,
    partitions: Option<usize>,
    /// When its data was written, in milliseconds since the Unix epoch.
    written_ms: u64,
    /// What servers derived from this version and keep for as long as the
    /// version lives, one value of each type (the shared-memory export of
    /// `quiver-shm`, the statistics of `quiver-sql`).
    attachments: Mutex<Vec<Arc<dyn Any + Send + Sync>>>,
}

impl TableVersion {
    pub(crate) fn new(
        name: String,
        version: u64,
        schema: SchemaRef,
        segments: Vec<Arc<Segment>>,
        partitions: Option<usize>,
    ) -> Self {
        let rows = segments.iter().map(|s| s.num_rows()).sum();
        let bytes = segments.iter().map(|s| s.num_bytes()).sum();
        Self {
            name,
            version,
            schema,
            segments,
            rows,
            bytes,
            partitions,
            written_ms: now_ms(),
            attachments: Mutex::new(Vec::new()),
        }
    }

    /// The same version, written at `ms` (since the Unix epoch) as a
    /// manifest recorded it; 0 (not recorded) keeps now.
    #[must_use]
    pub(crate) fn written_at(mut self, ms: u64) -> Self {
        if ms != 0 {
            self.written_ms = ms;
        }
        self
    }

    /// The same data under another name and version number.
    pub(crate) fn renamed(&self, name: String, version: u64) -> Self {
        Self {
            name,
            version,
            schema: Arc::clone(&self.schema),
            segments: self.segments.clone(),
            rows: self.rows,
            bytes: self.bytes,
            partitions: self.partitions,
            written_ms: self.written_ms,
            attachments: Mutex::new(Vec::new()),
        }
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A number that changes with every write to the table (unique in the store).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The table's schema.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Total rows.
    pub fn num_rows(&self) -> u64 {
        self.rows
    }

    /// Total bytes of the table's buffers (see [`crate::batch_bytes`]).
    pub fn num_bytes(&self) -> u64 {
        self.bytes
    }

    /// When the table's data was last written (a put, an append, a
    /// statement), in milliseconds since the Unix epoch; a rename keeps it.
    pub fn written_ms(&self) -> u64 {
        self.written_ms
    }

    /// The partition count chosen when the table was written, if any.
    pub fn partitions(&self) -> Option<usize> {
        self.partitions
    }

    /// The value of type `T` attached to this version, made by `make` the first
    /// time. Callers asking at once wait for one `make`; a failed `make`
    /// attaches nothing. The value is dropped with the version.
    pub fn attachment<T, E>(
        &self,
        make: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<Arc<T>, E>
    where
        T: Any + Send + Sync,
    {
        let mut slot = self
            .attachments
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(value) = slot.iter().find_map(|v| Arc::clone(v).downcast::<T>().ok()) {
            return Ok(value);
        }
        let value = Arc::new(make()?);
        slot.push(Arc::clone(&value) as Arc<dyn Any + Send + Sync>);
        Ok(value)
    }

    /// Attaches `value` (see [`TableVersion::attachment`]), replacing the
    /// value of its type.
    pub fn attach<T: Any + Send + Sync>(&self, value: Arc<T>) {
        let mut slot = self
            .attachments
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slot.retain(|v| !v.is::<T>());
        slot.push(value);
    }

    pub(crate) fn segments(&self) -> &[Arc<Segment>] {
        &self.segments
    }

    /// The facts of every stored batch (rows and, per column, nulls, bytes,
    /// minimum and maximum), segment by segment in the order of
    /// [`TableVersion::batches`]. Each segment's are computed once, at the
    /// first call of any version holding it (an append computes only its
    /// own), and in a durable store kept beside the segment's file, so a
    /// restart reads them instead of every value.
    pub fn facts(&self) -> Vec<Arc<SegmentFacts>> {
        self.segments
            .iter()
            .map(|s| s.facts(&self.schema))
            .collect()
    }

    /// Every batch, in order.
    pub fn batches(&self) -> impl Iterator<Item = &RecordBatch> + '_ {
        self.segments.iter().flat_map(|s| s.batches().iter())
    }

    /// The batches of partition `index` of `count`: the rows
    /// `[index * rows / count, (index + 1) * rows / count)`, as zero-copy
    /// slices of the stored batches. Together the partitions hold every row
    /// exactly once, in order.
    pub fn partition(&self, index: usize, count: usize) -> Result<Vec<RecordBatch>> {
        partition_rows(self.batches(), self.rows, index, count)
    }
}

/// Of `batches` (holding `rows` rows), partition `index` of `count`: the
/// rows `[index * rows / count, (index + 1) * rows / count)`, as zero-copy
/// slices. Together the partitions hold every row exactly once, in order.
pub fn partition_rows<'a>(
    batches: impl IntoIterator<Item = &'a RecordBatch>,
    rows: u64,
    index: usize,
    count: usize,
) -> Result<Vec<RecordBatch>> {
    if count == 0 || index >= count {
        return Err(StoreError::InvalidPartition { index, count });
    }
    let (count, index) = (count as u128, index as u128);
    let rows = u128::from(rows);
    let start = (index * rows / count) as u64;
    let end = ((index + 1) * rows / count) as u64;
    let mut out = Vec::new();
    let mut offset = 0u64;
    for batch in batches {
        let len = batch.num_rows() as u64;
        let (lo, hi) = (offset, offset + len);
        offset = hi;
        if hi <= start || lo >= end {
            continue;
        }
        let from = start.max(lo) - lo;
        let to = end.min(hi) - lo;
        if from == 0 && to == len {
            out.push(batch.clone());
        } else {
            out.push(batch.slice(from as usize, (to - from) as usize));
        }
    }
    Ok(out)
}

//! What a segment's batches hold, batch by batch: rows and, per column,
//! nulls, bytes, minimum and maximum. The SQL engine's statistics and its
//! pruning of stored batches are made of these (`quiver-sql/src/stats.rs`).
//!
//! The facts are themselves one Arrow record batch with a row per stored
//! batch: `rows`, then for every column `i` of the table `i.nulls`,
//! `i.bytes`, `i.min` and `i.max`, the last two of the column's own type
//! (typed nulls where a batch's values are all null), or of type `Null` for
//! a type whose order quiver does not keep and for a string column with a
//! bound longer than [`LONGEST_BOUND`]. So they are computed with
//! arrow's kernels, kept as they are, and written as they are: in a data
//! directory, as an Arrow IPC stream beside the segment's file
//! ([`SegmentFacts::load_or_compute`]).

use std::io::{self, Cursor};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, LargeStringArray, NullArray, PrimitiveArray,
    RecordBatch, StringArray, StringViewArray, UInt64Array,
};
use arrow::compute::{
    concat, max, max_boolean, max_string, max_string_view, min, min_boolean, min_string,
    min_string_view,
};
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Date32Type, Date64Type, Decimal128Type, Decimal256Type, Field,
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, Schema, TimeUnit,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow::error::ArrowError;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;

use crate::version::SegmentFile;

/// The schema metadata key of a facts file saying what it is the facts of:
/// the format, and the identity of the segment file (its length, inode and
/// modification time), so that the file of another segment, one that took
/// the same id after a restart, is not taken for this one's.
const OF: &str = "quiver.facts.of";

/// The longest string kept as a bound, in bytes: a column with a longer
/// minimum or maximum in any batch keeps no bounds (as a type whose order is
/// not kept), rather than copies of its longest values.
const LONGEST_BOUND: usize = 1024;

/// A segment's facts: one row per stored batch, in the segment's order.
#[derive(Debug)]
pub struct SegmentFacts {
    facts: RecordBatch,
}

impl SegmentFacts {
    /// The facts of `batches`, whose schema is `schema`.
    pub(crate) fn compute(schema: &Schema, batches: &[RecordBatch]) -> Self {
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(1 + 4 * schema.fields().len());
        let mut ranged = Vec::with_capacity(schema.fields().len());
        columns.push(Arc::new(UInt64Array::from_iter_values(
            batches.iter().map(|b| b.num_rows() as u64),
        )));
        for (index, field) in schema.fields().iter().enumerate() {
            let of_column = || batches.iter().map(move |b| b.column(index));
            columns.push(Arc::new(UInt64Array::from_iter_values(
                of_column().map(|c| c.null_count() as u64),
            )));
            columns.push(Arc::new(UInt64Array::from_iter_values(
                of_column().map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64),
            )));
            let (low, high) = column_bounds(of_column(), field.data_type()).unwrap_or_else(|| {
                let none: ArrayRef = Arc::new(NullArray::new(batches.len()));
                (Arc::clone(&none), none)
            });
            ranged.push(*low.data_type() != DataType::Null);
            columns.push(low);
            columns.push(high);
        }
        // The columns follow the layout by construction.
        let facts = RecordBatch::try_new(Arc::new(layout(schema, &ranged)), columns)
            .unwrap_or_else(|e| unreachable!("facts laid out as their schema: {e}"));
        Self { facts }
    }

    /// The facts of a segment kept in a data directory: read from the file
    /// beside it if that holds the facts of exactly this segment file and
    /// these batches, else computed and written there for the next start.
    /// The file is a cache: a missing, damaged or stale one is replaced, and
    /// failing to write one is logged and costs only the computing again
    /// after a restart. A segment whose file is gone (the table was replaced
    /// while a query held it) gets its facts computed and not written.
    pub(crate) fn load_or_compute(
        file: &SegmentFile,
        schema: &Schema,
        batches: &[RecordBatch],
    ) -> Self {
        let Ok(of) = identity(&file.path) else {
            return Self::compute(schema, batches);
        };
        let path = &file.facts;
        match read(path) {
            Ok(facts) if facts.describes(&of, schema, batches) => return facts,
            Ok(_) => {
                tracing::warn!(path = %path.display(), "statistics file of another segment, computed again")
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read a statistics file, computed again")
            }
        }
        let facts = Self::compute(schema, batches);
        if let Err(e) = facts.write(path, &of) {
            tracing::warn!(path = %path.display(), error = %e, "cannot write a statistics file; a restart computes them again");
        }
        facts
    }

    /// Whether these are the facts, read from a file, of the segment file
    /// `of` names and of its `batches` of `schema`: written for that file,
    /// laid out for the schema, and a row per batch with its rows and each
    /// column's nulls.
    fn describes(&self, of: &str, schema: &Schema, batches: &[RecordBatch]) -> bool {
        let written = self.facts.schema();
        let fields = written.fields();
        if written.metadata().get(OF).map(String::as_str) != Some(of)
            || fields.len() != 1 + 4 * schema.fields().len()
        {
            return false;
        }
        // Which columns the file keeps bounds of; the layout checks the rest
        // before any column is read as what it should be.
        let ranged: Vec<bool> = (0..schema.fields().len())
            .map(|c| *fields[3 + 4 * c].data_type() != DataType::Null)
            .collect();
        fields == layout(schema, &ranged).fields()
            && self.facts.num_rows() == batches.len()
            && batches.iter().enumerate().all(|(i, b)| {
                self.rows(i) == b.num_rows() as u64
                    && b.columns()
                        .iter()
                        .enumerate()
                        .all(|(c, column)| self.nulls(i, c) == column.null_count() as u64)
            })
    }

    /// Writes the facts of the segment file `of` names to `path`, through a
    /// temporary file renamed over it, so a reader never sees half a file.
    /// Not synced: a crash loses at most a cache.
    fn write(&self, path: &Path, of: &str) -> io::Result<()> {
        // A name of this write's own: segments read back for two tables may
        // be one file, whose facts two queries may write at once.
        static WRITES: AtomicU64 = AtomicU64::new(0);
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".{}.tmp", WRITES.fetch_add(1, Ordering::Relaxed)));
        let tmp = PathBuf::from(tmp);
        let schema = Schema::new(self.facts.schema().fields().clone())
            .with_metadata([(OF.to_string(), of.to_string())].into());
        let facts = self
            .facts
            .clone()
            .with_schema(Arc::new(schema))
            .map_err(to_io)?;
        let mut bytes = Vec::new();
        let mut writer = StreamWriter::try_new(&mut bytes, &facts.schema()).map_err(to_io)?;
        writer.write(&facts).map_err(to_io)?;
        writer.finish().map_err(to_io)?;
        drop(writer);
        std::fs::write(&tmp, &bytes)
            .and_then(|()| std::fs::rename(&tmp, path))
            .inspect_err(|_| {
                let _ = std::fs::remove_file(&tmp);
            })
    }

    /// How many stored batches these are the facts of.
    pub fn batches(&self) -> usize {
        self.facts.num_rows()
    }

    /// The rows of batch `batch`.
    pub fn rows(&self, batch: usize) -> u64 {
        self.counts(0).value(batch)
    }

    /// The nulls of column `column` in batch `batch`.
    pub fn nulls(&self, batch: usize, column: usize) -> u64 {
        self.counts(1 + 4 * column).value(batch)
    }

    /// The bytes of column `column`'s own part of its buffers in batch
    /// `batch`.
    pub fn bytes(&self, batch: usize, column: usize) -> u64 {
        self.counts(2 + 4 * column).value(batch)
    }

    /// Column `column`'s minimums and maximums, one per batch (null where
    /// the batch holds no value), or `None` for a type whose order quiver
    /// does not keep and a string column with a bound longer than
    /// [`LONGEST_BOUND`].
    pub fn bounds(&self, column: usize) -> Option<(&ArrayRef, &ArrayRef)> {
        let low = self.facts.column(3 + 4 * column);
        let high = self.facts.column(4 + 4 * column);
        (*low.data_type() != DataType::Null).then_some((low, high))
    }

    fn counts(&self, index: usize) -> &UInt64Array {
        self.facts.column(index).as_primitive()
    }
}

/// The schema of the facts of a table of `schema`, whose columns `ranged`
/// keep bounds.
fn layout(schema: &Schema, ranged: &[bool]) -> Schema {
    let mut fields = vec![Field::new("rows", DataType::UInt64, false)];
    for ((index, field), &ranged) in schema.fields().iter().enumerate().zip(ranged) {
        let bound = if ranged {
            field.data_type().clone()
        } else {
            DataType::Null
        };
        fields.push(Field::new(
            format!("{index}.nulls"),
            DataType::UInt64,
            false,
        ));
        fields.push(Field::new(
            format!("{index}.bytes"),
            DataType::UInt64,
            false,
        ));
        fields.push(Field::new(format!("{index}.min"), bound.clone(), true));
        fields.push(Field::new(format!("{index}.max"), bound, true));
    }
    Schema::new(fields)
}

/// What names the segment file at `path` in its facts file: the format of
/// the facts, and the file's length, inode (on Unix) and modification time
/// (a segment file is written once and never changed).
fn identity(path: &Path) -> io::Result<String> {
    let meta = std::fs::metadata(path)?;
    let modified = meta
        .modified()?
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Ok(format!(
        "format 1; segment file of {} bytes, inode {inode}, modified {modified} ns",
        meta.len()
    ))
}

/// A column's minimums and maximums, one per batch, as two arrays of the
/// column's type; `None` where quiver keeps no bounds: a type whose order it
/// does not keep, or a string bound longer than [`LONGEST_BOUND`].
fn column_bounds<'a>(
    columns: impl Iterator<Item = &'a ArrayRef>,
    kind: &DataType,
) -> Option<(ArrayRef, ArrayRef)> {
    let each: Vec<(ArrayRef, ArrayRef)> = columns
        .map(|c| array_bounds(c.as_ref()))
        .collect::<Option<_>>()?;
    if each.is_empty() {
        // No batch to ask: the type decides.
        array_bounds(arrow::array::new_empty_array(kind).as_ref())?;
    }
    let (lows, highs): (Vec<ArrayRef>, Vec<ArrayRef>) = each.into_iter().unzip();
    Some((joined(&lows, kind)?, joined(&highs, kind)?))
}

/// The minimum and maximum of `array`, each as an array of one value of the
/// array's type, null when it holds none; `None` for the types whose order
/// arrow's kernels and DataFusion may not agree on, and for strings longer
/// than [`LONGEST_BOUND`]. Of a column's minimums (or maximums) over several
/// batches, as [`SegmentFacts::bounds`] gives them, it is their minimum (or
/// maximum).
pub fn array_bounds(array: &dyn Array) -> Option<(ArrayRef, ArrayRef)> {
    fn primitive<T: ArrowPrimitiveType>(array: &dyn Array) -> Option<(ArrayRef, ArrayRef)> {
        let values = array.as_primitive::<T>();
        let one = |value: Option<T::Native>| -> ArrayRef {
            Arc::new(
                PrimitiveArray::<T>::from_iter([value]).with_data_type(array.data_type().clone()),
            )
        };
        Some((one(min(values)), one(max(values))))
    }
    match array.data_type() {
        DataType::Int8 => primitive::<Int8Type>(array),
        DataType::Int16 => primitive::<Int16Type>(array),
        DataType::Int32 => primitive::<Int32Type>(array),
        DataType::Int64 => primitive::<Int64Type>(array),
        DataType::UInt8 => primitive::<UInt8Type>(array),
        DataType::UInt16 => primitive::<UInt16Type>(array),
        DataType::UInt32 => primitive::<UInt32Type>(array),
        DataType::UInt64 => primitive::<UInt64Type>(array),
        DataType::Float32 => primitive::<Float32Type>(array),
        DataType::Float64 => primitive::<Float64Type>(array),
        DataType::Decimal128(_, _) => primitive::<Decimal128Type>(array),
        DataType::Decimal256(_, _) => primitive::<Decimal256Type>(array),
        DataType::Date32 => primitive::<Date32Type>(array),
        DataType::Date64 => primitive::<Date64Type>(array),
        DataType::Timestamp(TimeUnit::Second, _) => primitive::<TimestampSecondType>(array),
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            primitive::<TimestampMillisecondType>(array)
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            primitive::<TimestampMicrosecondType>(array)
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => primitive::<TimestampNanosecondType>(array),
        DataType::Boolean => {
            let values = array.as_boolean();
            Some((
                Arc::new(BooleanArray::from(vec![min_boolean(values)])),
                Arc::new(BooleanArray::from(vec![max_boolean(values)])),
            ))
        }
        DataType::Utf8 => {
            let values = array.as_string::<i32>();
            text::<StringArray>(min_string(values), max_string(values))
        }
        DataType::LargeUtf8 => {
            let values = array.as_string::<i64>();
            text::<LargeStringArray>(min_string(values), max_string(values))
        }
        DataType::Utf8View => {
            let values = array.as_string_view();
            text::<StringViewArray>(min_string_view(values), max_string_view(values))
        }
        _ => None,
    }
}

/// A string column's minimum and maximum as arrays `A` of one value each;
/// `None` if either is longer than [`LONGEST_BOUND`].
fn text<'a, A>(low: Option<&'a str>, high: Option<&'a str>) -> Option<(ArrayRef, ArrayRef)>
where
    A: From<Vec<Option<&'a str>>> + Array + 'static,
{
    let long = |bound: Option<&str>| bound.is_some_and(|b| b.len() > LONGEST_BOUND);
    if long(low) || long(high) {
        return None;
    }
    Some((Arc::new(A::from(vec![low])), Arc::new(A::from(vec![high]))))
}

/// The one-value arrays `parts` as one array of `kind`; `None` if they do
/// not fit one array (string offsets past 2 GiB).
fn joined(parts: &[ArrayRef], kind: &DataType) -> Option<ArrayRef> {
    if parts.is_empty() {
        return Some(arrow::array::new_empty_array(kind));
    }
    let parts: Vec<&dyn Array> = parts.iter().map(AsRef::as_ref).collect();
    concat(&parts).ok()
}

/// The facts in the file at `path`: one IPC stream of one batch.
fn read(path: &Path) -> io::Result<SegmentFacts> {
    let bytes = std::fs::read(path)?;
    let mut reader = StreamReader::try_new(Cursor::new(bytes), None).map_err(to_io)?;
    let facts = reader
        .next()
        .ok_or_else(|| invalid("no batch"))?
        .map_err(to_io)?;
    if reader.next().is_some() {
        return Err(invalid("more than one batch"));
    }
    Ok(SegmentFacts { facts })
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

fn to_io(e: ArrowError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

    use arrow::array::{DictionaryArray, Int64Array};
    use arrow::datatypes::Int32Type;

    use super::*;
    use crate::{DurableOptions, Fsync, TableStore, TableVersion, WriteMode};

    /// Columns `id` (Int64), `s` (Utf8, all null in the second batch) and
    /// `d` (a dictionary, whose order is not kept); batch `b` holds ids
    /// `100 b + offset ..` of `rows` rows.
    fn batches(offset: i64, rows: i64) -> Vec<RecordBatch> {
        (0..3)
            .map(|b| {
                let ids = Int64Array::from_iter_values((0..rows).map(|i| 100 * b + offset + i));
                let s: StringArray = (0..rows)
                    .map(|i| (b != 1).then(|| format!("v{}", 100 * b + i)))
                    .collect();
                let d: DictionaryArray<Int32Type> = (0..rows).map(|_| "k").collect();
                RecordBatch::try_from_iter_with_nullable([
                    ("id", Arc::new(ids) as ArrayRef, false),
                    ("s", Arc::new(s) as ArrayRef, true),
                    ("d", Arc::new(d) as ArrayRef, false),
                ])
                .unwrap()
            })
            .collect()
    }

    fn put(store: &TableStore, offset: i64) -> Arc<TableVersion> {
        let batches = batches(offset, 10);
        store
            .put("t", WriteMode::Replace, batches[0].schema(), batches)
            .unwrap()
    }

    fn max_id(facts: &SegmentFacts, batch: usize) -> i64 {
        facts
            .bounds(0)
            .unwrap()
            .1
            .as_primitive::<Int64Type>()
            .value(batch)
    }

    fn durable(dir: &Path) -> TableStore {
        let options = DurableOptions {
            dir: dir.to_path_buf(),
            fsync: Fsync::Never,
        };
        TableStore::open(&options, 1 << 30).unwrap()
    }

    /// The facts files in `dir`, and the temporary files of their writes.
    fn facts_files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".stats."))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn facts_hold_each_batch_rows_nulls_bytes_and_bounds() {
        let batches = batches(0, 10);
        let facts = SegmentFacts::compute(&batches[0].schema(), &batches);
        assert_eq!(facts.batches(), 3);
        assert_eq!((0..3).map(|b| facts.rows(b)).collect::<Vec<_>>(), [10; 3]);
        assert_eq!(
            (0..3).map(|b| facts.nulls(b, 1)).collect::<Vec<_>>(),
            [0, 10, 0]
        );
        assert_eq!(facts.bytes(0, 0), 80);
        let (low, high) = facts.bounds(0).unwrap();
        assert_eq!(low.as_primitive::<Int64Type>().values(), &[0, 100, 200]);
        assert_eq!(high.as_primitive::<Int64Type>().values(), &[9, 109, 209]);
        let (low, high) = facts.bounds(1).unwrap();
        let (low, high) = (low.as_string::<i32>(), high.as_string::<i32>());
        assert_eq!((low.value(0), high.value(0)), ("v0", "v9"));
        // All null: no bounds, typed.
        assert!(low.is_null(1) && high.is_null(1));
        assert_eq!(low.data_type(), &DataType::Utf8);
        assert!(facts.bounds(2).is_none());
        // No batches: no rows, and the layout still holds.
        let none = SegmentFacts::compute(&batches[0].schema(), &[]);
        assert_eq!(none.batches(), 0);
        assert!(none.bounds(0).unwrap().0.is_empty());
    }

    #[test]
    fn an_append_computes_the_facts_of_its_own_rows_only() {
        let store = TableStore::new(1 << 30);
        let first = put(&store, 0);
        let more = batches(1000, 5);
        let appended = store
            .put("t", WriteMode::Append, more[0].schema(), more)
            .unwrap();
        let (before, after) = (first.facts(), appended.facts());
        assert_eq!(after.len(), 2);
        assert!(Arc::ptr_eq(&before[0], &after[0]));
        assert_eq!(max_id(&after[1], 2), 1204);
    }

    #[test]
    fn a_data_directory_keeps_the_facts_beside_the_segment_for_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let store = durable(dir.path());
        let version = put(&store, 0);
        // Written when first computed, not at the put.
        assert!(facts_files(dir.path()).is_empty());
        assert_eq!(max_id(&version.facts()[0], 2), 209);
        let files = facts_files(dir.path());
        assert_eq!(files.len(), 1, "{files:?}");
        drop((version, store));

        // Overwrite the file with the facts of other values, written for
        // this segment file: a restart reads them rather than the values.
        let path = dir.path().join(&files[0]);
        let segment = dir.path().join(files[0].replace(".stats", ""));
        let of = identity(&segment).unwrap();
        let other = batches(5000, 10);
        let facts_of =
            |batches: &[RecordBatch]| SegmentFacts::compute(&batches[0].schema(), batches);
        facts_of(&other).write(&path, &of).unwrap();
        let store = durable(dir.path());
        let version = store.get("t").unwrap();
        assert_eq!(max_id(&version.facts()[0], 2), 5209);
        drop((version, store));

        // Computed again from the values, and the file replaced: a damaged
        // file, one written for another segment file, one of other row
        // counts, one of other null counts.
        let mut no_nulls = batches(5000, 10);
        no_nulls[1] = no_nulls[0].clone();
        let written = |facts: SegmentFacts, of: &str| {
            facts.write(&path, of).unwrap();
            std::fs::read(&path).unwrap()
        };
        for replaced in [
            b"not arrow".to_vec(),
            written(facts_of(&other), &of)[..100].to_vec(),
            written(facts_of(&other), "format 1; segment file of another"),
            written(facts_of(&batches(7000, 3)), &of),
            written(facts_of(&no_nulls), &of),
            // Of another layout: checked before a column is read.
            written(
                SegmentFacts {
                    facts: batches(0, 10)[0].clone(),
                },
                &of,
            ),
        ] {
            std::fs::write(&path, replaced).unwrap();
            let store = durable(dir.path());
            assert_eq!(max_id(&store.get("t").unwrap().facts()[0], 2), 209);
            assert_eq!(max_id(&read(&path).unwrap(), 2), 209);
        }
        assert_eq!(facts_files(dir.path()), files);

        // Replacing the table removes the old segment's facts with it.
        let store = durable(dir.path());
        let replaced = put(&store, 0);
        replaced.facts();
        let now = facts_files(dir.path());
        assert_eq!(now.len(), 1);
        assert_ne!(now, files);
    }

    #[test]
    fn the_facts_file_of_a_segment_id_used_before_a_restart_is_not_taken() {
        let dir = tempfile::tempdir().unwrap();
        let store = durable(dir.path());
        put(&store, 0).facts();
        let [file] = &facts_files(dir.path())[..] else {
            panic!()
        };
        let stale = std::fs::read(dir.path().join(file)).unwrap();
        store.remove("t").unwrap();
        drop(store);
        // A restart takes longer than a tick of the clock that stamps files
        // (a jiffy, at most 10 ms, where it is coarse): the new segment file
        // may take the old one's id and inode, not its time.
        std::thread::sleep(std::time::Duration::from_millis(20));
        // The last segment gone, a restart hands its id out again; its old
        // facts file is back, as a build that did not know the files (or a
        // copy of an old directory) would leave it.
        let store = durable(dir.path());
        std::fs::write(dir.path().join(file), &stale).unwrap();
        let version = put(&store, 3000);
        assert_eq!(facts_files(dir.path()), std::slice::from_ref(file));
        assert_eq!(max_id(&version.facts()[0], 2), 3209);
    }

    #[test]
    fn long_strings_keep_no_bounds() {
        let long = "x".repeat(LONGEST_BOUND + 1);
        let batches: Vec<RecordBatch> = [vec!["a", "b"], vec!["c", long.as_str()]]
            .into_iter()
            .map(|values| {
                let s: ArrayRef = Arc::new(StringArray::from(values));
                RecordBatch::try_from_iter([("s", s)]).unwrap()
            })
            .collect();
        let facts = SegmentFacts::compute(&batches[0].schema(), &batches);
        assert!(facts.bounds(0).is_none());
        let short = SegmentFacts::compute(&batches[0].schema(), &batches[..1]);
        assert!(short.bounds(0).is_some());
    }

    #[test]
    fn a_start_removes_facts_files_of_no_segment_and_half_written_ones() {
        let dir = tempfile::tempdir().unwrap();
        let store = durable(dir.path());
        put(&store, 0).facts();
        drop(store);
        let kept = facts_files(dir.path());
        for stray in [
            "seg-00000000000000ff.stats.arrows",
            &format!("{}.3.tmp", kept[0]),
        ] {
            std::fs::write(dir.path().join(stray), b"x").unwrap();
        }
        assert_eq!(facts_files(dir.path()).len(), 3);
        let store = durable(dir.path());
        assert_eq!(facts_files(dir.path()), kept);
        assert_eq!(max_id(&store.get("t").unwrap().facts()[0], 0), 9);
    }
}

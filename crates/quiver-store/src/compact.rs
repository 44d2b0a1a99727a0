//! Batches whose buffers fit their rows.
//!
//! A slice of an array keeps the whole buffers it points into, and a string
//! view array keeps every data buffer any of its views ever pointed into: a
//! three-row slice of a million-row column, or a batch pyarrow cut from a
//! Parquet row group, can hold many times the bytes its rows need. Stored
//! or sent as they are, those bytes would be charged, written to disk and
//! sent over the network with the rows. [`compact`] copies such a batch into
//! buffers of its own; a batch whose buffers are tight is left as it is, with
//! no copy.
//!
//! A buffer that points into a larger allocation (a message body, a mapped
//! segment file) reports that whole allocation as its capacity, which is
//! what DataFusion charges a query for each array it holds: every column of
//! a stored batch, and every batch a `take` or filter made of it that still
//! points into a string view's data buffers, would be charged the whole body
//! or file again. [`fitted`] gives such a batch buffers that report their
//! own bytes, over the same memory.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions, make_array};
use arrow::array::{ArrayData, MutableArrayData};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow::datatypes::DataType;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::memory::data_bytes;

/// How much more than its rows need a batch may hold before it is copied:
/// an eighth more, plus this many bytes (a copy of a small batch to save a
/// few kilobytes is not worth its time).
const SLACK_BYTES: u64 = 64 * 1024;

/// Whether `held` bytes are too many for rows that need `needed`.
fn wasteful(held: u64, needed: u64) -> bool {
    held > needed + needed / 8 + SLACK_BYTES
}

/// The bytes `array`'s rows need: its own slice of every buffer, the data
/// its string views point to, a dictionary's values whole. Arrays nesting
/// views or dictionaries below another type count their buffers whole.
pub fn needed_bytes(array: &dyn Array) -> u64 {
    let nulls = array.nulls().map_or(0, |n| n.len().div_ceil(8)) as u64;
    match array.data_type() {
        DataType::Utf8View => view_bytes(array.as_string_view().views()) + nulls,
        DataType::BinaryView => view_bytes(array.as_binary_view().views()) + nulls,
        DataType::Dictionary(key, _) => {
            let keys = array.len() as u64 * key.primitive_width().unwrap_or(8) as u64;
            let values = array
                .to_data()
                .child_data()
                .iter()
                .map(data_bytes)
                .sum::<u64>();
            keys + nulls + values
        }
        t if nests_views_or_dictionaries(t) => data_bytes(&array.to_data()),
        _ => {
            let data = array.to_data();
            // Counts the validity bitmap too.
            data.get_slice_memory_size()
                .map_or_else(|_| data_bytes(&data), |n| n as u64)
        }
    }
}

/// 16 bytes per view, plus the bytes of the values not inlined in theirs.
fn view_bytes(views: &[u128]) -> u64 {
    let outside: u64 = views
        .iter()
        .map(|view| u64::from(*view as u32))
        .filter(|len| *len > 12)
        .sum();
    views.len() as u64 * 16 + outside
}

/// Whether `data_type` holds string views or dictionaries below its top level.
fn nests_views_or_dictionaries(data_type: &DataType) -> bool {
    fn is_or_nests(t: &DataType) -> bool {
        matches!(
            t,
            DataType::Utf8View | DataType::BinaryView | DataType::Dictionary(_, _)
        ) || nests_views_or_dictionaries(t)
    }
    match data_type {
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => is_or_nests(f.data_type()),
        DataType::Struct(fields) => fields.iter().any(|f| is_or_nests(f.data_type())),
        DataType::Union(fields, _) => fields.iter().any(|(_, f)| is_or_nests(f.data_type())),
        DataType::RunEndEncoded(_, values) => is_or_nests(values.data_type()),
        _ => false,
    }
}

/// `batch`, copied into buffers that fit its rows if it holds `held` bytes
/// (what its buffers keep alive: a received message's whole body, say) and
/// that is well over what its rows need; else `batch` itself, [`fitted`].
/// The second value is what the batch returned holds.
///
/// Every column is copied, not only the wasteful ones: columns decoded from
/// one message share its allocation, which is freed only when none of them
/// points into it any more.
pub fn compact(batch: RecordBatch, held: u64) -> (RecordBatch, u64) {
    let needed: u64 = batch.columns().iter().map(|c| needed_bytes(c)).sum();
    if !wasteful(held, needed) {
        return (fitted(batch), held);
    }
    let columns: Vec<ArrayRef> = batch.columns().iter().map(|c| copied(c)).collect();
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    match RecordBatch::try_new_with_options(batch.schema(), columns, &options) {
        Ok(compacted) => {
            let bytes = crate::batch_bytes(&compacted);
            (compacted, bytes)
        }
        // Copies keep their types and lengths: this cannot fail.
        Err(_) => (batch, held),
    }
}

/// `batch` with every string view column whose data buffers hold well over
/// what its views point to copied into buffers of its own; else `batch`
/// itself. Other slices need no such copy before they are encoded: Arrow's
/// IPC writer sends only their own part of each buffer.
pub fn compact_views(batch: &RecordBatch) -> Option<RecordBatch> {
    // Each column judged once: counting what views need reads every view.
    let wasteful_views: Vec<bool> = batch
        .columns()
        .iter()
        .map(|c| {
            matches!(c.data_type(), DataType::Utf8View | DataType::BinaryView)
                && wasteful(data_bytes(&c.to_data()), needed_bytes(c))
        })
        .collect();
    if !wasteful_views.contains(&true) {
        return None;
    }
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .zip(wasteful_views)
        .map(|(c, wasteful)| if wasteful { copied(c) } else { c.clone() })
        .collect();
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(batch.schema(), columns, &options).ok()
}

/// `batch` over the same memory, each of its buffers reporting its own
/// length as its capacity (module docs). No byte is copied.
pub(crate) fn fitted(batch: RecordBatch) -> RecordBatch {
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| make_array(fitted_data(c.to_data())))
        .collect();
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    // The same types and lengths: this cannot fail.
    RecordBatch::try_new_with_options(batch.schema(), columns, &options).unwrap_or(batch)
}

fn fitted_data(data: ArrayData) -> ArrayData {
    let buffers: Vec<Buffer> = data.buffers().iter().map(fitted_buffer).collect();
    let children: Vec<ArrayData> = data.child_data().iter().cloned().map(fitted_data).collect();
    let nulls = data.nulls().map(|n| {
        let bits = BooleanBuffer::new(fitted_buffer(n.buffer()), n.offset(), n.len());
        // SAFETY: the same bits as `n`, so the same null count.
        unsafe { NullBuffer::new_unchecked(bits, n.null_count()) }
    });
    let builder = data
        .into_builder()
        .buffers(buffers)
        .child_data(children)
        .nulls(nulls);
    // SAFETY: every buffer is the one it replaces (the same bytes at the same
    // address), so the data is as valid as it was.
    unsafe { builder.build_unchecked() }
}

/// `buffer`, reporting its own length as its capacity; the allocation it
/// points into is kept alive by the new buffer.
fn fitted_buffer(buffer: &Buffer) -> Buffer {
    if buffer.capacity() <= buffer.len() {
        return buffer.clone();
    }
    let Some(ptr) = NonNull::new(buffer.as_ptr().cast_mut()) else {
        return buffer.clone();
    };
    // SAFETY: `ptr` and `len` are `buffer`'s, whose allocation the owner
    // (a clone of `buffer`) keeps alive and unchanged.
    unsafe { Buffer::from_custom_allocation(ptr, buffer.len(), Arc::new(buffer.clone())) }
}

/// `array` in buffers of its own that hold its rows and no more.
fn copied(array: &ArrayRef) -> ArrayRef {
    match array.data_type() {
        DataType::Utf8View => Arc::new(array.as_string_view().gc()),
        DataType::BinaryView => Arc::new(array.as_binary_view().gc()),
        _ => {
            let data: ArrayData = array.to_data();
            let mut copy = MutableArrayData::new(vec![&data], false, array.len());
            // Fails only on offsets that overflow, which a copy of one
            // valid array cannot have: kept as it is then.
            match copy.try_extend(0, 0, array.len()) {
                Ok(()) => make_array(copy.freeze()),
                Err(_) => Arc::clone(array),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray, StringViewArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    fn batch(column: ArrayRef) -> RecordBatch {
        let schema = Schema::new(vec![Field::new("c", column.data_type().clone(), true)]);
        RecordBatch::try_new(Arc::new(schema), vec![column]).unwrap()
    }

    fn long_strings(rows: usize) -> Vec<String> {
        (0..rows)
            .map(|i| format!("a value longer than twelve bytes {i}"))
            .collect()
    }

    #[test]
    fn a_tight_batch_is_kept_without_a_copy() {
        let values = Arc::new(StringViewArray::from_iter_values(long_strings(10_000)));
        let tight = batch(values);
        let held = crate::batch_bytes(&tight);
        let (kept, bytes) = compact(tight.clone(), held);
        assert_eq!(bytes, held);
        let before = tight.column(0).to_data();
        let after = kept.column(0).to_data();
        assert_eq!(before.buffers()[1].as_ptr(), after.buffers()[1].as_ptr());
    }

    #[test]
    fn a_small_slice_of_string_views_is_copied_to_its_rows() {
        let values: ArrayRef = Arc::new(StringViewArray::from_iter_values(long_strings(100_000)));
        let whole = batch(values);
        let slice = whole.slice(500, 3);
        let held = crate::batch_bytes(&slice);
        assert!(held > 3_000_000, "{held}");
        let (compacted, bytes) = compact(slice.clone(), held);
        assert!(bytes < 1_000, "{bytes}");
        assert_eq!(compacted, slice);
        let views = compact_views(&slice).expect("wasteful views are copied");
        assert!(crate::batch_bytes(&views) < 1_000);
        assert_eq!(views, slice);
    }

    #[test]
    fn slices_of_other_types_are_copied_only_when_stored() {
        let strings: ArrayRef = Arc::new(StringArray::from_iter_values(long_strings(100_000)));
        let slice = batch(strings).slice(10, 5);
        let (compacted, bytes) = compact(slice.clone(), crate::batch_bytes(&slice));
        assert!(bytes < 1_000, "{bytes}");
        assert_eq!(compacted, slice);
        // The IPC writer sends only a plain slice's own part: no copy before encoding.
        assert!(compact_views(&slice).is_none());
        let ints: ArrayRef = Arc::new(Int64Array::from_iter_values(0..100_000));
        let slice = batch(ints).slice(99_990, 10);
        let (compacted, bytes) = compact(slice.clone(), crate::batch_bytes(&slice));
        assert_eq!(bytes, 80);
        assert_eq!(compacted, slice);
    }

    /// What DataFusion charges a query for an array: its buffers' capacities.
    fn charged(batch: &RecordBatch) -> usize {
        batch
            .columns()
            .iter()
            .map(|c| c.get_array_memory_size())
            .sum()
    }

    #[test]
    fn a_decoded_batch_reports_its_own_bytes_not_its_message() {
        // Decoded from one IPC stream, as a put's batches and a segment's are:
        // every buffer points into the stream's one allocation.
        let strings = long_strings(10_000);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(0..10_000)),
            Arc::new(StringViewArray::from_iter_values(&strings)),
            Arc::new(StringArray::from_iter(
                strings
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (i % 3 > 0).then_some(s)),
            )),
        ];
        let schema = Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int64, false),
            Field::new("v", DataType::Utf8View, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let sent = RecordBatch::try_new(Arc::clone(&schema), columns).unwrap();
        let mut stream = Vec::new();
        let mut writer = arrow::ipc::writer::StreamWriter::try_new(&mut stream, &schema).unwrap();
        writer.write(&sent).unwrap();
        writer.finish().unwrap();
        drop(writer);
        let stream_bytes = stream.len();
        let mut buffer = Buffer::from(stream);
        let mut decoder = arrow::ipc::reader::StreamDecoder::new();
        let decoded = std::iter::from_fn(|| decoder.decode(&mut buffer).unwrap())
            .next()
            .expect("a batch");
        // Each column reports the whole stream: three times its size in all.
        assert!(
            charged(&decoded) >= 3 * stream_bytes,
            "{}",
            charged(&decoded)
        );

        let fitted = fitted(decoded.clone());
        assert!(charged(&fitted) <= stream_bytes, "{}", charged(&fitted));
        assert_eq!(fitted, sent);
        // Over the same memory: nothing was copied.
        let (before, after) = (decoded.column(1).to_data(), fitted.column(1).to_data());
        assert_eq!(before.buffers()[1].as_ptr(), after.buffers()[1].as_ptr());
    }

    #[test]
    fn a_batch_holding_a_whole_message_is_copied_out_of_it() {
        // Columns that are tight by themselves, charged the message they came in.
        let ints: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1_000));
        let tight = batch(ints);
        let (_, bytes) = compact(tight.clone(), 10_000_000);
        assert_eq!(bytes, 8_000);
        let (_, bytes) = compact(tight, 8_000);
        assert_eq!(bytes, 8_000);
    }
}

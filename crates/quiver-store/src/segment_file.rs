//! One segment's batches as an Arrow IPC stream file, written once and read
//! back through a memory mapping without copying.
//!
//! The IPC *stream* format (`.arrows`) rather than the file format: a table's
//! batches may carry different dictionaries for the same column, which the
//! stream format allows (replacement dictionaries) and the file format does
//! not. Every buffer is 64-byte aligned in the file and the mapping is
//! page-aligned, so decoding slices the mapping instead of copying it.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;

use arrow::buffer::Buffer;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::ipc::reader::StreamDecoder;
use arrow::ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow::record_batch::RecordBatch;
use memmap2::Mmap;

use crate::disk::{Disk, DiskFile};

/// The end-of-stream marker every complete segment file ends with.
const END_OF_STREAM: [u8; 8] = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];

/// Buffer between the IPC writer and the file: large writes, few syscalls.
const WRITE_BUFFER: usize = 1 << 20;

/// Writes `batches` to a new file at `path`, synced to disk if `sync`.
/// Returns the file's length.
pub(crate) fn write(
    disk: &dyn Disk,
    path: &Path,
    schema: &SchemaRef,
    batches: &[RecordBatch],
    sync: bool,
) -> io::Result<u64> {
    let file = disk.create(path)?;
    let counted = CountingWriter {
        inner: file,
        len: 0,
    };
    let mut writer = StreamWriter::try_new_with_options(
        BufWriter::with_capacity(WRITE_BUFFER, counted),
        schema,
        IpcWriteOptions::default(),
    )
    .map_err(arrow_to_io)?;
    for batch in batches {
        writer.write(batch).map_err(arrow_to_io)?;
    }
    writer.finish().map_err(arrow_to_io)?;
    let buffered = writer.into_inner().map_err(arrow_to_io)?;
    let mut counted = buffered.into_inner().map_err(|e| e.into_error())?;
    if sync {
        counted.inner.sync()?;
    }
    Ok(counted.len)
}

/// A segment read back from its file.
#[derive(Debug)]
pub(crate) struct MappedSegment {
    pub(crate) schema: SchemaRef,
    pub(crate) batches: Vec<RecordBatch>,
}

/// Maps the file at `path` and decodes its batches, which point into the
/// mapping (kept alive by their buffers). Fails if the file is not one
/// complete IPC stream.
///
/// # Caveats
/// The mapping is shared with the file: a file truncated or rewritten by
/// another process while mapped would change or fault the batches. The store
/// only ever creates segment files and removes them (removing a mapped file
/// leaves the mapping intact), and holds the data directory's lock.
pub(crate) fn map(path: &Path) -> Result<MappedSegment, String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    if len < END_OF_STREAM.len() as u64 {
        return Err(format!("{len} bytes is too short for an Arrow IPC stream"));
    }
    // SAFETY: the store never modifies a segment file after writing it (see
    // the caveat above), so the mapping's contents do not change under it.
    let mmap = unsafe { Mmap::map(&file) }.map_err(|e| e.to_string())?;
    if mmap[mmap.len() - END_OF_STREAM.len()..] != END_OF_STREAM {
        return Err("no end-of-stream marker: the file was cut short".to_string());
    }
    let ptr = NonNull::new(mmap.as_ptr().cast_mut()).ok_or("mapping at null")?;
    let len = mmap.len();
    // SAFETY: `ptr` and `len` describe the mapping, which the buffer keeps
    // alive through its owner `Arc<Mmap>`.
    let mut buffer = unsafe { Buffer::from_custom_allocation(ptr, len, Arc::new(mmap)) };
    let mut decoder = StreamDecoder::new();
    let mut batches = Vec::new();
    while !buffer.is_empty() {
        match decoder.decode(&mut buffer).map_err(|e| e.to_string())? {
            // Each buffer reports its own bytes, not the file's.
            Some(batch) => batches.push(crate::compact::fitted(batch)),
            None if buffer.is_empty() => break,
            None => {}
        }
    }
    decoder.finish().map_err(|e| e.to_string())?;
    let schema = decoder.schema().ok_or("no schema message")?;
    Ok(MappedSegment { schema, batches })
}

/// Counts the bytes written through it.
struct CountingWriter {
    inner: Box<dyn DiskFile>,
    len: u64,
}

impl Write for CountingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// An IPC writer's error as the I/O error it wraps, or as invalid data.
fn arrow_to_io(e: ArrowError) -> io::Error {
    match e {
        ArrowError::IoError(_, source) => source,
        other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::OsDisk;
    use arrow::array::{ArrayRef, DictionaryArray, Int64Array, StringArray};
    use arrow::datatypes::Int32Type;

    #[test]
    fn round_trip_is_zero_copy_and_keeps_replaced_dictionaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.arrows");
        // Distinctive values, to find each batch's buffer in the file.
        const MAGIC: i64 = 0x0123_4567_89ab_cdef;
        let dict = |values: Vec<&str>, first: i64| -> RecordBatch {
            let d: DictionaryArray<Int32Type> = values.into_iter().collect();
            let n = Int64Array::from_iter_values(first..first + d.len() as i64);
            RecordBatch::try_from_iter([
                ("d", Arc::new(d) as ArrayRef),
                ("n", Arc::new(n) as ArrayRef),
            ])
            .unwrap()
        };
        let batches = vec![
            dict(vec!["a", "b", "a"], MAGIC),
            dict(vec!["x", "y"], MAGIC + 10),
        ];
        let schema = batches[0].schema();
        let len = write(&OsDisk, &path, &schema, &batches, true).unwrap();
        assert_eq!(len, std::fs::metadata(&path).unwrap().len());
        let mapped = map(&path).unwrap();
        assert_eq!(mapped.batches, batches);
        assert_eq!(mapped.schema, schema);
        // Each batch's values point into one page-aligned mapping of the file,
        // at the value's offset in the file: no copy was made.
        let file = std::fs::read(&path).unwrap();
        let bases: Vec<usize> = [MAGIC, MAGIC + 10]
            .iter()
            .zip(&mapped.batches)
            .map(|(first, batch)| {
                let offset = file
                    .windows(8)
                    .position(|w| w == first.to_le_bytes())
                    .unwrap();
                let values = batch.column(1).to_data().buffers()[0].clone();
                values.as_ptr() as usize - offset
            })
            .collect();
        assert_eq!(bases[0], bases[1]);
        assert_eq!(bases[0] % 4096, 0, "a page-aligned mapping");
    }

    #[test]
    fn truncated_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.arrows");
        let batch =
            RecordBatch::try_from_iter([("s", Arc::new(StringArray::from(vec!["a"])) as ArrayRef)])
                .unwrap();
        write(&OsDisk, &path, &batch.schema(), &[batch], false).unwrap();
        let full = std::fs::read(&path).unwrap();
        for cut in [0, 4, full.len() / 2, full.len() - 8, full.len() - 1] {
            std::fs::write(&path, &full[..cut]).unwrap();
            assert!(map(&path).is_err(), "cut at {cut}");
        }
    }
}

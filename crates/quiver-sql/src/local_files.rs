//! Local files read where their bytes are already in memory.
//!
//! DataFusion reads a Parquet file's column chunks through `object_store`'s
//! local file system, which hands every read to one of tokio's blocking
//! threads and zero-fills its buffer before reading into it. A scan then
//! waits, each row group, for another thread to be woken, read and wake it
//! again. [`LocalFiles`] reads the ranges on the task that asks for them when
//! the kernel can serve them from its page cache without waiting for a disk
//! (`preadv2` with `RWF_NOWAIT`), and hands a read that would wait to the
//! local file system as before, so a cold or slow disk never blocks a
//! runtime thread. Every other operation is the local file system's.

use std::fmt;
use std::fs::File;
use std::ops::Range;
use std::os::fd::AsRawFd;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

/// The local file system, with ranges in the page cache read in place
/// (module docs).
#[derive(Debug)]
pub(crate) struct LocalFiles {
    inner: LocalFileSystem,
}

impl LocalFiles {
    pub(crate) fn new() -> Self {
        Self {
            inner: LocalFileSystem::new(),
        }
    }

    /// `ranges` of the file at `location`, if the page cache holds every
    /// byte of them; `None` if any read would wait for a disk, or fails, or
    /// one runs past the end of the file (the local file system then reads
    /// them, and says why one fails). Nothing is allocated for a range the
    /// file does not hold.
    fn cached(&self, location: &Path, ranges: &[Range<u64>]) -> Option<Vec<Bytes>> {
        let path = self.inner.path_to_filesystem(location).ok()?;
        let file = File::open(path).ok()?;
        let len = file.metadata().ok()?.len();
        if ranges.iter().any(|range| range.end > len) {
            return None;
        }
        ranges
            .iter()
            .map(|range| read_cached(&file, range))
            .collect()
    }
}

/// The bytes of `range` in `file`, if the page cache holds all of them and
/// the file is that long.
fn read_cached(file: &File, range: &Range<u64>) -> Option<Bytes> {
    let len = usize::try_from(range.end.checked_sub(range.start)?).ok()?;
    let mut buf: Vec<u8> = Vec::with_capacity(len);
    while buf.len() < len {
        let done = buf.len();
        let spare = buf.spare_capacity_mut();
        let iov = libc::iovec {
            iov_base: spare.as_mut_ptr().cast(),
            iov_len: len - done,
        };
        let offset = libc::off_t::try_from(range.start + done as u64).ok()?;
        // SAFETY: `iov` points at the vector's spare capacity, `len - done`
        // bytes that nothing else refers to; the kernel writes at most that.
        let read = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
        // An error (`EAGAIN`: not cached; `EOPNOTSUPP`: no such reads here)
        // or the end of the file: the local file system reads it.
        let read = usize::try_from(read).ok().filter(|&n| n > 0)?;
        // SAFETY: the kernel initialized `read` more bytes after `done`.
        unsafe { buf.set_len(done + read) };
    }
    Some(Bytes::from(buf))
}

impl fmt::Display for LocalFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LocalFiles({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for LocalFiles {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        match self.cached(location, ranges) {
            Some(bytes) => Ok(bytes),
            None => self.inner.get_ranges(location, ranges).await,
        }
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

    use std::io::Write;

    use super::*;

    /// A file of `len` bytes (each its offset's low byte) in `dir`, and its path in the store.
    fn file(dir: &std::path::Path, len: usize) -> (std::path::PathBuf, Path) {
        let path = dir.join("data.bin");
        let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let mut f = File::create(&path).unwrap();
        f.write_all(&bytes).unwrap();
        f.sync_all().unwrap();
        let location = Path::from_filesystem_path(&path).unwrap();
        (path, location)
    }

    fn expected(range: &Range<u64>) -> Vec<u8> {
        range.clone().map(|i| i as u8).collect()
    }

    #[tokio::test]
    async fn ranges_in_the_page_cache_are_read_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let (path, location) = file(dir.path(), 1 << 20);
        let store = LocalFiles::new();
        let ranges = [0..10, 4096..300_000, (1 << 20) - 7..1 << 20];
        // Just written: the page cache holds it, and no read waits.
        let cached = store.cached(&location, &ranges).unwrap();
        let read = store.get_ranges(&location, &ranges).await.unwrap();
        for ((range, cached), read) in ranges.iter().zip(&cached).zip(&read) {
            assert_eq!(cached.as_ref(), expected(range).as_slice());
            assert_eq!(read.as_ref(), expected(range).as_slice());
        }
        assert!(
            read_cached(&File::open(path).unwrap(), &(0..0))
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn a_range_out_of_the_page_cache_is_read_by_the_local_file_system() {
        let dir = tempfile::tempdir().unwrap();
        let (path, location) = file(dir.path(), 1 << 20);
        let f = File::open(&path).unwrap();
        // Written and synced: the kernel may drop its clean pages, and is asked to.
        // SAFETY: a plain advice call on an open descriptor.
        let dropped =
            unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(dropped, 0);
        let range = 500_000..600_000;
        assert!(read_cached(&f, &range).is_none(), "read without waiting");
        let store = LocalFiles::new();
        let read = store
            .get_ranges(&location, std::slice::from_ref(&range))
            .await
            .unwrap();
        assert_eq!(read[0].as_ref(), expected(&range).as_slice());
        // Read once, it is in the page cache now.
        assert_eq!(
            read_cached(&f, &range).unwrap().as_ref(),
            expected(&range).as_slice()
        );
    }

    #[test]
    fn the_engine_reads_files_in_place_through_it() {
        use datafusion::execution::object_store::ObjectStoreUrl;
        let store = std::sync::Arc::new(quiver_store::TableStore::new(1 << 20));
        let engine = crate::SqlEngine::new(store, crate::EngineOptions::default());
        let files = engine
            .context()
            .runtime_env()
            .object_store(ObjectStoreUrl::local_filesystem())
            .unwrap();
        assert!(files.to_string().starts_with("LocalFiles("), "{files}");
    }

    #[tokio::test]
    async fn a_range_past_the_end_fails_as_the_local_file_systems_does() {
        let dir = tempfile::tempdir().unwrap();
        let (_, location) = file(dir.path(), 1000);
        let store = LocalFiles::new();
        let past = [0..10, 990..1010];
        let ours = store.get_ranges(&location, &past).await.unwrap_err();
        let theirs = LocalFileSystem::new()
            .get_ranges(&location, &past)
            .await
            .unwrap_err();
        assert_eq!(ours.to_string(), theirs.to_string());
        let missing = Path::from_filesystem_path(dir.path())
            .unwrap()
            .join("missing.bin");
        let ours = store
            .get_ranges(&missing, &[0..10, 20..30])
            .await
            .unwrap_err();
        assert!(
            matches!(ours, object_store::Error::NotFound { .. }),
            "{ours}"
        );
    }
}

//! One bucket's object store, as the engine reaches it.
//!
//! [`Bucket`] passes every call to the bucket's store and
//! - names the bucket in the errors: a store's own errors give a key alone
//!   (`trips/a.parquet`), a client should read `s3://lake/trips/a.parquet`;
//! - counts what the bucket serves ([`crate::metrics`]);
//! - reads ranges through the [`RangeCache`], when there is one. A range is
//!   cached under the version of its object that the last listing (or
//!   `HEAD`) of it gave, which every query makes before it reads; a miss is
//!   read with `If-Match` of that version's ETag, so bytes of another
//!   version are never read into the cache, nor returned: an object
//!   rewritten after the listing fails the read as changed, and the next
//!   query lists and reads the new one.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    Result,
};

use crate::WriteHold;
use crate::cache::{Found, ObjectVersion, RangeCache};
use crate::writes::{HeldUpload, Holds, hold_put};

/// Ranges this close together are read in one request on a miss, as
/// `object_store` coalesces them.
const COALESCE: u64 = object_store::OBJECT_STORE_COALESCE_DEFAULT;

/// A bucket's store (module docs).
pub struct Bucket {
    /// `scheme://bucket`.
    url: String,
    inner: Arc<dyn ObjectStore>,
    cache: Option<Arc<RangeCache>>,
    /// Each object's metadata as last listed or headed: the version its
    /// ranges are read and cached as. An object a whole listing of its
    /// prefix no longer gives is dropped, so this holds the objects there
    /// are, not every object ever seen.
    listed: Arc<Mutex<HashMap<Path, ObjectMeta>>>,
    /// Prefixes whose writes are held until their statement ends.
    holds: Arc<Holds>,
}

impl fmt::Debug for Bucket {
    // Not the store's own: its configuration may hold credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bucket")
            .field("url", &self.url)
            .field("cached", &self.cache.is_some())
            .finish_non_exhaustive()
    }
}

impl Bucket {
    /// `inner`, the store of the bucket `url` (`scheme://bucket`), its
    /// ranges read through `cache` if given.
    pub fn new(url: String, inner: Arc<dyn ObjectStore>, cache: Option<Arc<RangeCache>>) -> Self {
        Self {
            url,
            inner,
            cache,
            listed: Arc::default(),
            holds: Arc::default(),
        }
    }

    /// Holds the writes under `prefix` until the hold is committed
    /// ([`crate::WriteHold`]); fails if another statement's hold overlaps.
    pub fn hold_writes(&self, prefix: Path) -> crate::Result<WriteHold> {
        let hold = self.holds.hold(prefix).map_err(crate::Error::Busy)?;
        Ok(WriteHold::new(
            Arc::clone(&self.inner),
            Arc::clone(&self.holds),
            hold,
        ))
    }

    /// Takes `meta` as the version of its object, as a listing of it here
    /// would ([`note`]): what another node's listing gave for a scan it
    /// handed to this one (a task of a distributed query), so that this
    /// node reads, and caches, the ranges of that version.
    pub fn note_listed(&self, meta: ObjectMeta) {
        note(&self.listed, self.cache.as_deref(), &self.url, meta);
    }

    /// `listing` of the store, each object noted as listed ([`note`]) and
    /// each error named.
    fn noting(
        &self,
        listing: BoxStream<'static, Result<ObjectMeta>>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let (url, listed, cache) = (
            self.url.clone(),
            Arc::clone(&self.listed),
            self.cache.clone(),
        );
        listing
            .map(move |r| match r {
                Ok(meta) => Ok(note(&listed, cache.as_deref(), &url, meta)),
                Err(e) => Err(named(&url, e)),
            })
            .boxed()
    }

    /// `error`, its object named by its whole URL.
    fn named(&self, error: object_store::Error) -> object_store::Error {
        named(&self.url, error)
    }

    /// The version of `location` the last listing gave, if any.
    fn version_of(&self, location: &Path) -> Option<ObjectMeta> {
        self.listed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(location)
            .cloned()
    }

    /// `ranges` of `location` from the store (with `If-Match: if_match`),
    /// ranges less than [`COALESCE`] apart in one request, as `object_store`
    /// reads them; what each request brings is counted, gaps included.
    async fn fetch(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
        if_match: Option<String>,
    ) -> Result<Vec<Bytes>> {
        object_store::coalesce_ranges(
            ranges,
            |range| {
                let options = GetOptions {
                    range: Some(GetRange::Bounded(range)),
                    if_match: if_match.clone(),
                    ..GetOptions::default()
                };
                async move {
                    let bytes = self
                        .inner
                        .get_opts(location, options)
                        .await?
                        .bytes()
                        .await?;
                    crate::metrics::read(&self.url, bytes.len() as u64);
                    Ok(bytes)
                }
            },
            COALESCE,
        )
        .await
        .map_err(|e| self.named(e))
    }

    /// `ranges` of `location` (as listed: `meta`), from the cache where it
    /// holds them, else read from the store with `If-Match` of the listed
    /// ETag and cached.
    async fn cached_ranges(
        &self,
        cache: &RangeCache,
        location: &Path,
        meta: &ObjectMeta,
        ranges: &[Range<u64>],
    ) -> Result<Vec<Bytes>> {
        let object = ObjectVersion {
            url: format!("{}/{location}", self.url),
            version: version(meta),
        };
        let mut found: Vec<Option<Bytes>> = Vec::with_capacity(ranges.len());
        for range in ranges {
            let bytes = match cache.find(&object, range) {
                Some(Found::Bytes(bytes)) => Some(bytes),
                Some(Found::File(path, offset)) => {
                    let len = range.end - range.start;
                    let read = tokio::task::spawn_blocking(move || {
                        crate::cache::read_file(&path, offset, len)
                    })
                    .await;
                    // A file the cache lost (removed by hand): read again.
                    match read {
                        Ok(Ok(bytes)) => Some(bytes),
                        _ => None,
                    }
                }
                None => None,
            };
            let len = bytes.as_ref().map_or(0, |b| b.len() as u64);
            crate::metrics::cache_lookup(&self.url, bytes.is_some(), len);
            found.push(bytes);
        }
        let missing: Vec<Range<u64>> = ranges
            .iter()
            .zip(&found)
            .filter(|(_, found)| found.is_none())
            .map(|(range, _)| range.clone())
            .collect();
        if missing.is_empty() {
            return Ok(found.into_iter().flatten().collect());
        }
        let read = self.fetch(location, &missing, meta.e_tag.clone()).await?;
        let mut read = missing.iter().zip(read);
        for slot in &mut found {
            if slot.is_none()
                && let Some((range, bytes)) = read.next()
            {
                cache.insert(&object, range.start, bytes.clone());
                *slot = Some(bytes);
            }
        }
        Ok(found.into_iter().flatten().collect())
    }
}

/// The version of an object: its ETag, or its size and time where the
/// store gives none.
fn version(meta: &ObjectMeta) -> String {
    meta.e_tag.clone().unwrap_or_else(|| {
        format!(
            "{}@{}",
            meta.size,
            meta.last_modified.timestamp_nanos_opt().unwrap_or_default()
        )
    })
}

/// Keeps `meta` as the version of its object in `listed`, drops what
/// `cache` holds of the object's other versions, and returns the metadata
/// to hand on.
///
/// DataFusion keeps a file's parsed footer and statistics under its path,
/// valid while its size and modification time stay the same; an object
/// rewritten with the same size within the store's one-second clock would
/// pass for the old one. Such a new version is handed on one nanosecond
/// later than the one before it (the same time for every later listing of
/// it), so its footer is read again.
fn note(
    listed: &Mutex<HashMap<Path, ObjectMeta>>,
    cache: Option<&RangeCache>,
    url: &str,
    mut meta: ObjectMeta,
) -> ObjectMeta {
    let mut listed = listed.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(previous) = listed.get(&meta.location) {
        if version(previous) == version(&meta) {
            meta.last_modified = previous.last_modified;
        } else {
            if meta.size == previous.size && meta.last_modified <= previous.last_modified {
                meta.last_modified = previous.last_modified + chrono::TimeDelta::nanoseconds(1);
            }
            if let Some(cache) = cache {
                cache.forget_other_versions(&format!("{url}/{}", meta.location), &version(&meta));
            }
        }
    }
    listed.insert(meta.location.clone(), meta.clone());
    meta
}

/// Drops from `listed` the objects under `prefix` (all, with none) that a
/// whole listing of it did not give: they are gone from the store.
fn forget_unlisted(
    listed: &Mutex<HashMap<Path, ObjectMeta>>,
    prefix: Option<&Path>,
    given: &HashSet<Path>,
) {
    listed
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .retain(|location, _| {
            given.contains(location) || prefix.is_some_and(|p| !location.prefix_matches(p))
        });
}

/// `error` of the store of `url`, its object named by its whole URL.
fn named(url: &str, error: object_store::Error) -> object_store::Error {
    use object_store::Error as E;
    let full = |path: String| format!("{url}/{path}");
    match error {
        E::NotFound { path, source } => E::NotFound {
            path: full(path),
            source,
        },
        E::PermissionDenied { path, source } => E::PermissionDenied {
            path: full(path),
            source,
        },
        E::Unauthenticated { path, source } => E::Unauthenticated {
            path: full(path),
            source,
        },
        E::Precondition { path, source } => E::Precondition {
            path: full(path),
            source: format!("the object changed since it was listed: {source}").into(),
        },
        E::NotModified { path, source } => E::NotModified {
            path: full(path),
            source,
        },
        E::AlreadyExists { path, source } => E::AlreadyExists {
            path: full(path),
            source,
        },
        // A listing's failure comes as a generic error whatever S3
        // answered (object_store maps the status of other requests only):
        // its status is in its text.
        E::Generic { store, source } => {
            let text = source.to_string();
            let answered = |code: &str| text.contains(&format!("status code: {code} "));
            let path = url.to_string();
            if answered("403") {
                E::PermissionDenied { path, source }
            } else if answered("401") {
                E::Unauthenticated { path, source }
            } else if answered("404") {
                E::NotFound { path, source }
            } else {
                E::Generic {
                    store,
                    source: format!("{url}: {source}").into(),
                }
            }
        }
        other => other,
    }
}

impl fmt::Display for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bucket({})", self.url)
    }
}

#[async_trait]
impl ObjectStore for Bucket {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        if let Some(hold) = self.holds.covering(location) {
            return Ok(hold_put(&hold, location, payload, opts));
        }
        self.inner
            .put_opts(location, payload, opts)
            .await
            .map_err(|e| self.named(e))
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let upload = self
            .inner
            .put_multipart_opts(location, opts)
            .await
            .map_err(|e| self.named(e))?;
        Ok(match self.holds.covering(location) {
            Some(hold) => Box::new(HeldUpload::new(upload, hold)),
            None => upload,
        })
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let plain_range = match &options.range {
            Some(GetRange::Bounded(range))
                if options.if_match.is_none()
                    && options.if_none_match.is_none()
                    && options.if_modified_since.is_none()
                    && options.if_unmodified_since.is_none()
                    && options.version.is_none()
                    && !options.head =>
            {
                Some(range.clone())
            }
            _ => None,
        };
        // A range of a listed object: through the cache.
        if let (Some(cache), Some(range)) = (&self.cache, plain_range)
            && let Some(meta) = self.version_of(location)
        {
            let range = range.start..range.end.min(meta.size);
            if range.start < range.end {
                let bytes = self
                    .cached_ranges(cache, location, &meta, std::slice::from_ref(&range))
                    .await?;
                let bytes = bytes.into_iter().next().unwrap_or_default();
                let stream = futures::stream::once(async move { Ok(bytes) }).boxed();
                return Ok(GetResult {
                    payload: GetResultPayload::Stream(stream),
                    meta,
                    range,
                    attributes: Default::default(),
                });
            }
        }
        let head = options.head;
        let mut result = self
            .inner
            .get_opts(location, options)
            .await
            .map_err(|e| self.named(e))?;
        if head {
            result.meta = note(&self.listed, self.cache.as_deref(), &self.url, result.meta);
        } else {
            crate::metrics::read(&self.url, result.range.end - result.range.start);
        }
        Ok(result)
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        if let Some(cache) = &self.cache
            && let Some(meta) = self.version_of(location)
        {
            return self.cached_ranges(cache, location, &meta, ranges).await;
        }
        self.fetch(location, ranges, None).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let url = self.url.clone();
        self.inner
            .delete_stream(locations)
            .map_err(move |e| named(&url, e))
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        // What the listing gave, to drop once it has ended well what it no
        // longer gives (a listing stopped early or failed drops nothing).
        let given = Arc::new(Mutex::new(Some(HashSet::new())));
        let giving = Arc::clone(&given);
        let (listed, listing) = (Arc::clone(&self.listed), prefix.cloned());
        let end = futures::stream::once(async move {
            let given = given.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(given) = given {
                forget_unlisted(&listed, listing.as_ref(), &given);
            }
        })
        .filter_map(|()| futures::future::ready(None));
        self.noting(self.inner.list(prefix))
            .inspect(move |item| {
                let mut giving = giving.lock().unwrap_or_else(PoisonError::into_inner);
                match item {
                    Ok(meta) => {
                        if let Some(given) = giving.as_mut() {
                            given.insert(meta.location.clone());
                        }
                    }
                    Err(_) => *giving = None,
                }
            })
            .chain(end)
            .boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.noting(self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let mut listing = self
            .inner
            .list_with_delimiter(prefix)
            .await
            .map_err(|e| self.named(e))?;
        listing.objects = listing
            .objects
            .into_iter()
            .map(|meta| note(&self.listed, self.cache.as_deref(), &self.url, meta))
            .collect();
        Ok(listing)
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner
            .copy_opts(from, to, options)
            .await
            .map_err(|e| self.named(e))
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner
            .rename_opts(from, to, options)
            .await
            .map_err(|e| self.named(e))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a failed unwrap is a failed test
    // One range of a list of ranges: what `get_ranges` takes.
    #![allow(clippy::single_range_in_vec_init)]

    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    use super::*;

    #[tokio::test]
    async fn errors_name_the_bucket_and_the_key() {
        let bucket = Bucket::new("s3://lake".into(), Arc::new(InMemory::new()), None);
        let missing = bucket
            .get(&Path::from("trips/a.parquet"))
            .await
            .unwrap_err();
        assert!(
            matches!(&missing, object_store::Error::NotFound { path, .. }
                if path == "s3://lake/trips/a.parquet"),
            "{missing}"
        );
        assert!(missing.to_string().contains("s3://lake/trips/a.parquet"));
    }

    /// Ranges of a listed object are read once, then from the cache; an
    /// object rewritten is read anew once listed again, and one rewritten
    /// after its listing fails the read rather than mix versions.
    #[tokio::test]
    async fn listed_objects_are_read_through_the_cache_by_version() {
        let store = Arc::new(InMemory::new());
        let cache = Arc::new(RangeCache::open(None, 1 << 20).unwrap());
        let bucket = Bucket::new("s3://lake".into(), store.clone(), Some(cache.clone()));
        let key = Path::from("t/a.bin");
        store
            .put(&key, PutPayload::from_static(b"0123456789"))
            .await
            .unwrap();
        // Not listed yet: read through, nothing cached.
        assert_eq!(
            bucket.get_ranges(&key, &[2..4]).await.unwrap()[0].as_ref(),
            b"23"
        );
        assert_eq!(cache.bytes(), 0);
        let listed: Vec<_> = bucket.list(None).try_collect().await.unwrap();
        assert_eq!(listed.len(), 1);
        let read = bucket.get_ranges(&key, &[2..4, 6..9]).await.unwrap();
        assert_eq!(
            (read[0].as_ref(), read[1].as_ref()),
            (&b"23"[..], &b"678"[..])
        );
        assert_eq!(cache.bytes(), 5);
        // Now served by the cache: the store's copy changing unseen does
        // not show, until the object is listed again.
        store
            .put(&key, PutPayload::from_static(b"abcdefghij"))
            .await
            .unwrap();
        assert_eq!(bucket.get_range(&key, 6..8).await.unwrap().as_ref(), b"67");
        // A miss of the listed version after the rewrite: refused, not mixed.
        let changed = bucket.get_ranges(&key, &[0..1]).await.unwrap_err();
        assert!(
            matches!(changed, object_store::Error::Precondition { .. }),
            "{changed}"
        );
        let _: Vec<_> = bucket.list(None).try_collect().await.unwrap();
        assert_eq!(cache.bytes(), 0, "the old version's ranges are dropped");
        assert_eq!(
            bucket.get_ranges(&key, &[6..8]).await.unwrap()[0].as_ref(),
            b"gh"
        );
    }

    /// An object another bucket (another node's) listed is read here as
    /// that version, through this bucket's cache, though this one never
    /// listed it; rewritten since, its read fails rather than give the
    /// other version's bytes.
    #[tokio::test]
    async fn an_object_listed_elsewhere_is_read_as_that_version() {
        let store = Arc::new(InMemory::new());
        let key = Path::from("t/a.bin");
        store
            .put(&key, PutPayload::from_static(b"0123456789"))
            .await
            .unwrap();
        let planner = Bucket::new("s3://lake".into(), store.clone(), None);
        let listed: Vec<ObjectMeta> = planner.list(None).try_collect().await.unwrap();
        let cache = Arc::new(RangeCache::open(None, 1 << 20).unwrap());
        let worker = Bucket::new("s3://lake".into(), store.clone(), Some(cache.clone()));
        worker.note_listed(listed[0].clone());
        assert_eq!(
            worker.get_ranges(&key, &[2..4]).await.unwrap()[0].as_ref(),
            b"23"
        );
        assert_eq!(cache.bytes(), 2, "read through the cache");
        store
            .put(&key, PutPayload::from_static(b"abcdefghij"))
            .await
            .unwrap();
        let changed = worker.get_ranges(&key, &[5..6]).await.unwrap_err();
        assert!(
            matches!(changed, object_store::Error::Precondition { .. }),
            "{changed}"
        );
    }

    /// A whole listing drops the objects of its prefix that are gone, and
    /// keeps those of other prefixes; a listing stopped early drops none.
    #[tokio::test]
    async fn objects_gone_from_a_listing_are_forgotten() {
        let store = Arc::new(InMemory::new());
        let bucket = Bucket::new("s3://lake".into(), store.clone(), None);
        for key in ["t/a", "t/b", "t/c", "u/a"] {
            store
                .put(&Path::from(key), PutPayload::from_static(b"x"))
                .await
                .unwrap();
        }
        let all: Vec<_> = bucket.list(None).try_collect().await.unwrap();
        assert_eq!(all.len(), 4);
        store.delete(&Path::from("t/b")).await.unwrap();
        store.delete(&Path::from("u/a")).await.unwrap();
        // Stopped after its first object: nothing dropped.
        let first = bucket.list(Some(&Path::from("t"))).next().await;
        assert!(first.is_some_and(|r| r.is_ok()));
        assert!(bucket.version_of(&Path::from("t/b")).is_some());
        let t: Vec<_> = bucket
            .list(Some(&Path::from("t")))
            .try_collect()
            .await
            .unwrap();
        assert_eq!(t.len(), 2);
        assert!(bucket.version_of(&Path::from("t/b")).is_none());
        assert!(bucket.version_of(&Path::from("t/a")).is_some());
        // Another prefix's object is kept until its own prefix is listed.
        assert!(bucket.version_of(&Path::from("u/a")).is_some());
        let _: Vec<_> = bucket.list(None).try_collect().await.unwrap();
        assert!(bucket.version_of(&Path::from("u/a")).is_none());
        assert_eq!(bucket.listed.lock().unwrap().len(), 2);
    }

    /// A new version of the same size and time is handed on as newer, and
    /// every later listing of it gives that same time.
    #[test]
    fn a_same_size_rewrite_is_handed_on_as_newer() {
        let listed = Mutex::default();
        let meta = |etag: &str| ObjectMeta {
            location: Path::from("t/a.parquet"),
            last_modified: chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            size: 100,
            e_tag: Some(etag.into()),
            version: None,
        };
        let first = note(&listed, None, "s3://lake", meta("1"));
        assert_eq!(first.last_modified, meta("1").last_modified);
        let second = note(&listed, None, "s3://lake", meta("2"));
        assert!(second.last_modified > first.last_modified);
        let again = note(&listed, None, "s3://lake", meta("2"));
        assert_eq!(again.last_modified, second.last_modified);
    }
}

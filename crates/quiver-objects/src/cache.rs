//! [`RangeCache`]: the bytes read from object storage, kept so that the
//! next query reads them here instead of over the network.
//!
//! An entry is a byte range of one version of one object: the key names the
//! store, the object and its version (its ETag, or its size and
//! modification time where a store gives no ETag), so a rewritten object is
//! a new key and its old bytes are never served for it. Entries live in
//! memory, or in files of a directory (`--cache-dir`: the page cache then
//! keeps the hot ones in memory, and the process does not); past the size
//! (`--cache-size`) the least recently used are dropped. A read is a hit
//! when one cached range holds all of it.
//!
//! The directory is the cache's alone: what a previous run left there is
//! removed when the cache opens (the index lives in memory).

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;

use crate::{Error, Result};

/// What the cache keeps by default when no `--cache-size` is given.
pub const DEFAULT_CACHE_SIZE: u64 = 512 << 20;

/// Where the cache keeps ranges and how many bytes of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSettings {
    /// A directory of the cache's own (`--cache-dir`), or `None` to keep
    /// the ranges in memory.
    pub dir: Option<PathBuf>,
    /// Bytes of ranges kept (`--cache-size`); 0 turns the cache off.
    pub size: u64,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self {
            dir: None,
            size: DEFAULT_CACHE_SIZE,
        }
    }
}

/// One version of one object: `scheme://bucket/key` and its version.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ObjectVersion {
    pub(crate) url: String,
    pub(crate) version: String,
}

/// Where the entries are kept.
#[derive(Debug)]
enum Tier {
    Memory,
    Disk(PathBuf),
}

/// An entry's bytes: in memory, or the file holding them.
#[derive(Debug)]
enum Held {
    Memory(Bytes),
    File(PathBuf),
}

#[derive(Debug)]
struct Entry {
    held: Held,
    len: u64,
    /// When it was last used: its place in [`State::recency`].
    used: u64,
}

#[derive(Debug, Default)]
struct State {
    /// Each object version's entries by their first byte.
    objects: HashMap<ObjectVersion, BTreeMap<u64, Entry>>,
    /// Entries from least to most recently used: tick → (object, start).
    recency: BTreeMap<u64, (ObjectVersion, u64)>,
    tick: u64,
    bytes: u64,
    /// Names of the entries' files.
    files: u64,
}

/// The cache of ranges (module docs).
#[derive(Debug)]
pub struct RangeCache {
    tier: Tier,
    capacity: u64,
    state: Mutex<State>,
}

/// Where a cached read was found.
pub(crate) enum Found {
    /// In memory.
    Bytes(Bytes),
    /// In this file, from this offset.
    File(PathBuf, u64),
}

impl RangeCache {
    /// The cache `settings` ask for: `None` for a size of 0.
    pub fn from_settings(settings: &CacheSettings) -> Result<Option<Self>> {
        if settings.size == 0 {
            return Ok(None);
        }
        Self::open(settings.dir.clone(), settings.size).map(Some)
    }

    /// A cache of at most `capacity` bytes, in `dir` (created if missing,
    /// emptied of what a previous run left), or in memory without one.
    pub fn open(dir: Option<PathBuf>, capacity: u64) -> Result<Self> {
        let tier = match dir {
            None => Tier::Memory,
            Some(dir) => {
                let failed = |e: std::io::Error| Error::Setup {
                    store: "cache".into(),
                    reason: format!("--cache-dir {}: {e}", dir.display()),
                };
                std::fs::create_dir_all(&dir).map_err(failed)?;
                for entry in std::fs::read_dir(&dir).map_err(failed)? {
                    let path = entry.map_err(failed)?.path();
                    if path.extension().is_some_and(|e| e == "range") {
                        std::fs::remove_file(&path).map_err(failed)?;
                    }
                }
                Tier::Disk(dir)
            }
        };
        Ok(Self {
            tier,
            capacity,
            state: Mutex::default(),
        })
    }

    /// The bytes the cache holds now.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where `range` of `object` is cached, if one entry holds all of it;
    /// the entry becomes the most recently used.
    pub(crate) fn find(&self, object: &ObjectVersion, range: &Range<u64>) -> Option<Found> {
        let mut state = self.lock();
        let state = &mut *state;
        let entries = state.objects.get_mut(object)?;
        let (&start, entry) = entries.range_mut(..=range.start).next_back()?;
        if start + entry.len < range.end {
            return None;
        }
        state.recency.remove(&entry.used);
        state.tick += 1;
        entry.used = state.tick;
        state.recency.insert(state.tick, (object.clone(), start));
        let offset = range.start - start;
        Some(match &entry.held {
            Held::Memory(bytes) => {
                // Both ends lie within the entry, checked above.
                let from = usize::try_from(offset).unwrap_or(usize::MAX);
                let to = usize::try_from(range.end - start).unwrap_or(usize::MAX);
                Found::Bytes(bytes.slice(from.min(bytes.len())..to.min(bytes.len())))
            }
            Held::File(path) => Found::File(path.clone(), offset),
        })
    }

    /// Keeps `bytes`, read from `start` of `object`, dropping the least
    /// recently used entries to make room. A range larger than the whole
    /// cache, or one already held, is not kept.
    pub(crate) fn insert(&self, object: &ObjectVersion, start: u64, bytes: Bytes) {
        let len = bytes.len() as u64;
        if len == 0 || len > self.capacity {
            return;
        }
        let mut state = self.lock();
        if state
            .objects
            .get(object)
            .is_some_and(|entries| entries.contains_key(&start))
        {
            return;
        }
        while state.bytes + len > self.capacity {
            let Some((_, (victim, victim_start))) = state.recency.pop_first() else {
                break;
            };
            self.drop_entry(&mut state, &victim, victim_start);
        }
        let held = match &self.tier {
            // A copy of its own: a range read as part of a coalesced request
            // is a slice of that request's whole buffer (gaps included), which
            // kept here would hold far more memory than the entry counts.
            Tier::Memory => Held::Memory(Bytes::copy_from_slice(&bytes)),
            Tier::Disk(dir) => {
                state.files += 1;
                let path = dir.join(format!("{:016x}.range", state.files));
                // Written under the lock: a write to the page cache, and the
                // entry must exist before another read looks for it.
                if let Err(e) = std::fs::write(&path, &bytes) {
                    tracing::warn!(path = %path.display(), error = %e, "could not cache a range");
                    return;
                }
                Held::File(path)
            }
        };
        state.tick += 1;
        let used = state.tick;
        state.recency.insert(used, (object.clone(), start));
        state.bytes += len;
        state
            .objects
            .entry(object.clone())
            .or_default()
            .insert(start, Entry { held, len, used });
        crate::metrics::cache_size(state.bytes);
    }

    fn drop_entry(&self, state: &mut State, object: &ObjectVersion, start: u64) {
        let Some(entries) = state.objects.get_mut(object) else {
            return;
        };
        if let Some(entry) = entries.remove(&start) {
            state.bytes -= entry.len;
            if let Held::File(path) = entry.held {
                let _ = std::fs::remove_file(path);
            }
            crate::metrics::cache_evicted(entry.len);
        }
        if entries.is_empty() {
            state.objects.remove(object);
        }
    }

    /// Drops every entry of `url` that is not of `version`: the object
    /// changed, and its old bytes will not be asked for again.
    pub(crate) fn forget_other_versions(&self, url: &str, version: &str) {
        let mut state = self.lock();
        let stale: Vec<ObjectVersion> = state
            .objects
            .keys()
            .filter(|o| o.url == url && o.version != version)
            .cloned()
            .collect();
        for object in stale {
            let starts: Vec<u64> = state
                .objects
                .get(&object)
                .map(|e| e.keys().copied().collect())
                .unwrap_or_default();
            for start in starts {
                if let Some(entry) = state.objects.get(&object).and_then(|e| e.get(&start)) {
                    let used = entry.used;
                    state.recency.remove(&used);
                }
                self.drop_entry(&mut state, &object, start);
            }
        }
        crate::metrics::cache_size(state.bytes);
    }
}

/// Reads `len` bytes at `offset` of the cached range file `path` (into a
/// buffer read into, not zeroed first); a file shorter than that fails.
pub(crate) fn read_file(path: &std::path::Path, offset: u64, len: u64) -> std::io::Result<Bytes> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::with_capacity(usize::try_from(len).map_err(std::io::Error::other)?);
    file.take(len).read_to_end(&mut buf)?;
    if buf.len() as u64 != len {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
    }
    Ok(Bytes::from(buf))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

    use super::*;

    fn object(version: &str) -> ObjectVersion {
        ObjectVersion {
            url: "s3://lake/a.parquet".into(),
            version: version.into(),
        }
    }

    fn read(cache: &RangeCache, object: &ObjectVersion, range: Range<u64>) -> Option<Vec<u8>> {
        let len = range.end - range.start;
        cache.find(object, &range).map(|found| match found {
            Found::Bytes(bytes) => bytes.to_vec(),
            Found::File(path, offset) => read_file(&path, offset, len).unwrap().to_vec(),
        })
    }

    fn ranges_are_found_within_entries(cache: &RangeCache) {
        let v1 = object("\"etag-1\"");
        let data: Vec<u8> = (0..100).collect();
        cache.insert(&v1, 1000, Bytes::from(data.clone()));
        assert_eq!(read(cache, &v1, 1000..1100).unwrap(), data);
        assert_eq!(read(cache, &v1, 1010..1020).unwrap(), data[10..20].to_vec());
        assert!(
            read(cache, &v1, 990..1010).is_none(),
            "starts before the entry"
        );
        assert!(read(cache, &v1, 1090..1101).is_none(), "ends after it");
        // Another version of the same object is another object.
        assert!(read(cache, &object("\"etag-2\""), 1000..1010).is_none());
        cache.forget_other_versions("s3://lake/a.parquet", "\"etag-2\"");
        assert!(read(cache, &v1, 1000..1010).is_none());
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn in_memory() {
        ranges_are_found_within_entries(&RangeCache::open(None, 1 << 20).unwrap());
    }

    #[test]
    fn in_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("0000000000000001.range"), b"left over").unwrap();
        std::fs::write(dir.path().join("keep.txt"), b"not the cache's").unwrap();
        let cache = RangeCache::open(Some(dir.path().to_path_buf()), 1 << 20).unwrap();
        assert!(!dir.path().join("0000000000000001.range").exists());
        assert!(dir.path().join("keep.txt").exists());
        ranges_are_found_within_entries(&cache);
        let files = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(files, 1, "the forgotten entry's file is removed");
    }

    #[test]
    fn the_least_recently_used_go_first() {
        let cache = RangeCache::open(None, 300).unwrap();
        let v = object("v");
        for start in [0, 100, 200] {
            cache.insert(&v, start * 10, Bytes::from(vec![1; 100]));
        }
        // Used last: survives the next insert, which pushes out the oldest.
        assert!(read(&cache, &v, 0..10).is_some());
        cache.insert(&v, 5000, Bytes::from(vec![2; 100]));
        assert!(read(&cache, &v, 0..10).is_some());
        assert!(
            read(&cache, &v, 1000..1010).is_none(),
            "the least recently used"
        );
        assert!(read(&cache, &v, 2000..2010).is_some());
        assert_eq!(cache.bytes(), 300);
        // Larger than the whole cache: not kept, nothing pushed out.
        cache.insert(&v, 9000, Bytes::from(vec![3; 301]));
        assert_eq!(cache.bytes(), 300);
    }
}

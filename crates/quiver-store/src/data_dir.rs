//! The data directory: segment files, the manifest naming the tables they
//! make up, and recovery of both on start. docs/durability.md states the
//! promise; this module keeps it.
//!
//! ```text
//! data-dir/
//!   LOCK                            held (flock) while a server has the directory open
//!   MANIFEST                        JSON: every table, its version and segment ids
//!   seg-000000000000002a.arrows     one Arrow IPC stream per put or append
//!   seg-000000000000002a.stats.arrows  its batches' statistics, written when
//!                                   first computed (a cache: SegmentFacts)
//!   damaged/                        files of tables that could not be read back
//! ```
//!
//! A write is made durable in this order, so a crash at any point leaves
//! either the old manifest with all its files, or the new one with all its:
//!
//! 1. write the new segment file, fsync it, fsync the directory;
//! 2. write `MANIFEST.tmp`, fsync it, rename it over `MANIFEST`, fsync the
//!    directory: the write is acknowledged only now;
//! 3. remove the segment files the new manifest no longer names (a reader that
//!    mapped one keeps its mapping: Unix frees the file's blocks at the last
//!    unmap).

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::disk::Disk;
use crate::manifest::{FORMAT, Manifest, ManifestTable};
use crate::segment_file::{self, MappedSegment};
use crate::version::SegmentFile;
use crate::{IoFailure, Result, StoreError};

const MANIFEST: &str = "MANIFEST";
const MANIFEST_TMP: &str = "MANIFEST.tmp";
const LOCK: &str = "LOCK";
const DAMAGED: &str = "damaged";
const SEGMENT_PREFIX: &str = "seg-";
const SEGMENT_SUFFIX: &str = ".arrows";
const FACTS_SUFFIX: &str = ".stats.arrows";

/// When a write is synced to disk before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fsync {
    /// fsync every new file and the directory before acknowledging: an
    /// acknowledged write survives a crash of the server, of the operating
    /// system, or a power loss.
    #[default]
    Always,
    /// Never fsync: an acknowledged write is in the operating system's page
    /// cache. It survives a crash of the server (SIGKILL included), but an
    /// operating-system crash or power loss may lose recent writes.
    Never,
}

/// Where and how a durable store keeps its tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableOptions {
    /// The data directory, created if missing.
    pub dir: PathBuf,
    /// When writes are synced.
    pub fsync: Fsync,
}

/// A table read back from the data directory.
#[derive(Debug)]
pub(crate) struct RecoveredTable {
    pub(crate) name: String,
    pub(crate) version: u64,
    pub(crate) partitions: Option<usize>,
    pub(crate) schema: SchemaRef,
    /// (segment id, its batches), in row order.
    pub(crate) segments: Vec<(u64, Vec<RecordBatch>)>,
    /// When its data was last written (ms since the epoch; 0: not known).
    pub(crate) written_ms: u64,
}

/// What [`DataDir::open`] found.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub(crate) tables: Vec<RecoveredTable>,
    pub(crate) next_version: u64,
    /// Whether tables named in the manifest were set aside as damaged (the
    /// manifest should then be rewritten without them).
    pub(crate) dropped: bool,
}

/// Why a manifest commit failed, and whether the new manifest is in place.
#[derive(Debug)]
pub(crate) struct CommitFailure {
    pub(crate) error: StoreError,
    /// The rename happened: the new manifest is what a restart reads (unless
    /// a crash undoes the rename).
    pub(crate) renamed: bool,
}

/// An open data directory.
#[derive(Debug)]
pub(crate) struct DataDir {
    dir: PathBuf,
    disk: Box<dyn Disk>,
    fsync: Fsync,
    next_segment: AtomicU64,
    _lock: File,
}

impl DataDir {
    /// Opens (creating if need be) the data directory, takes its lock, and
    /// reads back every table its manifest names. Removes files no manifest
    /// names (left by writes a crash interrupted) and moves the files of
    /// tables that cannot be read to `damaged/`; logs what it did.
    pub(crate) fn open(options: &DurableOptions, disk: Box<dyn Disk>) -> Result<(Self, Recovered)> {
        let started = Instant::now();
        let dir = options.dir.clone();
        let lock = create_and_lock(&dir)?;
        let manifest = read_manifest(&dir)?;
        let named: BTreeSet<u64> = manifest
            .tables
            .iter()
            .flat_map(|t| t.segments.iter().copied())
            .collect();
        let (tables, dropped) = read_back(&dir, &manifest);
        let next_segment = remove_orphans(&dir, &named);
        let rows: u64 = tables
            .iter()
            .flat_map(|t| &t.segments)
            .flat_map(|(_, b)| b)
            .map(|b| b.num_rows() as u64)
            .sum();
        tracing::info!(
            dir = %dir.display(),
            tables = tables.len(),
            rows,
            fsync = ?options.fsync,
            millis = started.elapsed().as_millis() as u64,
            "data directory opened"
        );
        let data_dir = Self {
            dir,
            disk,
            fsync: options.fsync,
            next_segment: AtomicU64::new(next_segment),
            _lock: lock,
        };
        let recovered = Recovered {
            tables,
            next_version: manifest.next_version,
            dropped,
        };
        Ok((data_dir, recovered))
    }

    fn sync(&self) -> bool {
        self.fsync == Fsync::Always
    }

    fn segment_path(&self, id: u64) -> PathBuf {
        segment_path(&self.dir, id)
    }

    /// The files of segment `id`.
    pub(crate) fn segment_file(&self, id: u64) -> SegmentFile {
        SegmentFile {
            id,
            path: self.segment_path(id),
            facts: facts_path(&self.dir, id),
        }
    }

    /// Writes a new segment file holding `batches` (synced, with the
    /// directory, under [`Fsync::Always`]) and maps it back. Returns its id and
    /// its batches as read from the mapping. On failure nothing is left behind.
    pub(crate) fn write_segment(
        &self,
        schema: &SchemaRef,
        batches: &[RecordBatch],
    ) -> Result<(u64, MappedSegment)> {
        let id = self.next_segment.fetch_add(1, Ordering::Relaxed);
        let path = self.segment_path(id);
        let unchanged =
            |op, path: &Path, e: &io::Error| IoFailure::error(op, path, e, IoFailure::UNCHANGED);
        let written = segment_file::write(self.disk.as_ref(), &path, schema, batches, self.sync())
            .map_err(|e| unchanged("write segment file", &path, &e))
            .and_then(|_| {
                if self.sync() {
                    self.disk
                        .sync_dir(&self.dir)
                        .map_err(|e| unchanged("sync directory", &self.dir, &e))?;
                }
                segment_file::map(&path).map_err(|m| {
                    let e = io::Error::new(io::ErrorKind::InvalidData, m);
                    unchanged("read back segment file", &path, &e)
                })
            });
        match written {
            Ok(mapped) => Ok((id, mapped)),
            Err(e) => {
                self.discard([id]);
                Err(e)
            }
        }
    }

    /// Replaces the manifest atomically with `manifest`.
    pub(crate) fn commit(&self, manifest: &Manifest) -> Result<(), CommitFailure> {
        let tmp = self.dir.join(MANIFEST_TMP);
        let target = self.dir.join(MANIFEST);
        let before = |op, path: &Path, e: io::Error| CommitFailure {
            error: IoFailure::error(op, path, &e, IoFailure::UNCHANGED),
            renamed: false,
        };
        if tmp.exists() {
            // Left by a commit that failed before its rename.
            self.disk
                .remove(&tmp)
                .map_err(|e| before("remove", &tmp, e))?;
        }
        let mut file = self
            .disk
            .create(&tmp)
            .map_err(|e| before("create", &tmp, e))?;
        file.write_all(&manifest.to_bytes())
            .and_then(|()| file.flush())
            .map_err(|e| before("write", &tmp, e))?;
        if self.sync() {
            file.sync().map_err(|e| before("sync", &tmp, e))?;
        }
        drop(file);
        self.disk
            .rename(&tmp, &target)
            .map_err(|e| before("rename manifest", &tmp, e))?;
        if self.sync() {
            self.disk.sync_dir(&self.dir).map_err(|e| CommitFailure {
                error: IoFailure::error("sync directory", &self.dir, &e, IoFailure::NOT_DURABLE),
                renamed: true,
            })?;
        }
        Ok(())
    }

    /// Removes segment files no manifest names any more. Failures are logged:
    /// the next start removes what is left.
    pub(crate) fn discard(&self, ids: impl IntoIterator<Item = u64>) {
        for id in ids {
            let path = self.segment_path(id);
            match self.disk.remove(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot remove an unused segment file; the next start will");
                }
                _ => {}
            }
            remove_facts(&self.dir, id);
        }
    }
}

/// An I/O failure while opening: the store was not opened.
fn open_failure(op: &'static str, path: &Path, e: &io::Error) -> StoreError {
    IoFailure::error(op, path, e, IoFailure::NOT_STARTED)
}

/// Creates `dir` if missing and takes its lock file, held for as long as the
/// returned file is open: one server per directory.
fn create_and_lock(dir: &Path) -> Result<File> {
    std::fs::create_dir_all(dir).map_err(|e| open_failure("create directory", dir, &e))?;
    let lock_path = dir.join(LOCK);
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| open_failure("open", &lock_path, &e))?;
    lock.try_lock().map_err(|e| {
        let e = match e {
            std::fs::TryLockError::WouldBlock => io::Error::new(
                io::ErrorKind::ResourceBusy,
                "another quiver server holds the data directory",
            ),
            std::fs::TryLockError::Error(e) => e,
        };
        open_failure("lock", &lock_path, &e)
    })?;
    Ok(lock)
}

/// The manifest of `dir`; an empty one if there is none yet.
fn read_manifest(dir: &Path) -> Result<Manifest> {
    let manifest_path = dir.join(MANIFEST);
    match std::fs::read(&manifest_path) {
        Ok(bytes) => Manifest::from_bytes(&bytes).map_err(|m| {
            let e = io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{m} (the manifest is only ever replaced whole, so this is damage from outside; move it aside to start empty)"),
            );
            open_failure("read manifest", &manifest_path, &e)
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Manifest {
            format: FORMAT,
            next_version: 1,
            tables: Vec::new(),
        }),
        Err(e) => Err(open_failure("read manifest", &manifest_path, &e)),
    }
}

/// Reads back every table `manifest` names. A table that cannot be read is
/// left out, its files moved to `damaged/` and the error logged; the flag
/// says whether any was.
fn read_back(dir: &Path, manifest: &Manifest) -> (Vec<RecoveredTable>, bool) {
    let mut tables = Vec::with_capacity(manifest.tables.len());
    let mut dropped = false;
    let mut mapped: HashMap<u64, MappedSegment> = HashMap::new();
    for table in &manifest.tables {
        match recover_table(dir, table, &mut mapped) {
            Ok(t) => tables.push(t),
            Err(why) => {
                dropped = true;
                let moved = set_aside(dir, &table.segments);
                tracing::error!(
                    table = %table.name,
                    error = %why,
                    moved_to = %dir.join(DAMAGED).display(),
                    files = moved,
                    "cannot read back a stored table: left out of the store, its files set aside"
                );
            }
        }
    }
    (tables, dropped)
}

/// Removes the files no manifest names (see [`clean`]) and logs what went;
/// returns the id the next segment file gets.
fn remove_orphans(dir: &Path, named: &BTreeSet<u64>) -> u64 {
    let (max_segment, orphans, orphan_bytes) = clean(dir, named);
    if orphans > 0 {
        tracing::info!(
            dir = %dir.display(),
            files = orphans,
            bytes = orphan_bytes,
            "removed files no manifest names (writes a crash or an error interrupted)"
        );
    }
    max_segment.max(named.last().copied().unwrap_or(0)) + 1
}

fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{SEGMENT_PREFIX}{id:016x}{SEGMENT_SUFFIX}"))
}

fn facts_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{SEGMENT_PREFIX}{id:016x}{FACTS_SUFFIX}"))
}

/// Removes the facts file of segment `id`, if there is one. The facts are
/// a cache: a file left behind is removed at the next start.
fn remove_facts(dir: &Path, id: u64) {
    let path = facts_path(dir, id);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove an unused statistics file; the next start will");
        }
        _ => {}
    }
}

/// The id of a segment file's name.
fn segment_id(name: &str) -> Option<u64> {
    hex_id(
        name.strip_prefix(SEGMENT_PREFIX)?
            .strip_suffix(SEGMENT_SUFFIX)?,
    )
}

/// The segment id of a facts file's name, and whether it is a temporary
/// file a write of one left behind.
fn facts_id(name: &str) -> Option<(u64, bool)> {
    let rest = name.strip_prefix(SEGMENT_PREFIX)?;
    if let Some(hex) = rest.strip_suffix(FACTS_SUFFIX) {
        return Some((hex_id(hex)?, false));
    }
    let hex = rest.split_once(FACTS_SUFFIX)?.0;
    name.ends_with(".tmp").then_some(())?;
    Some((hex_id(hex)?, true))
}

fn hex_id(hex: &str) -> Option<u64> {
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok())?
}

fn recover_table(
    dir: &Path,
    table: &ManifestTable,
    mapped: &mut HashMap<u64, MappedSegment>,
) -> Result<RecoveredTable, String> {
    let mut schema: Option<SchemaRef> = None;
    let mut segments = Vec::with_capacity(table.segments.len());
    for &id in &table.segments {
        let path = segment_path(dir, id);
        let segment = match mapped.entry(id) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                e.insert(segment_file::map(&path).map_err(|e| format!("{}: {e}", path.display()))?)
            }
        };
        match &schema {
            None => schema = Some(segment.schema.clone()),
            Some(s) if s.fields() != segment.schema.fields() => {
                return Err(format!(
                    "{}: its columns differ from the table's first segment",
                    path.display()
                ));
            }
            Some(_) => {}
        }
        segments.push((id, segment.batches.clone()));
    }
    let schema = schema.ok_or("the manifest names no segment file")?;
    Ok(RecoveredTable {
        name: table.name.clone(),
        version: table.version,
        partitions: table.partitions,
        schema,
        segments,
        written_ms: table.written_ms,
    })
}

/// Moves the files of a damaged table to `damaged/`; returns how many moved.
fn set_aside(dir: &Path, ids: &[u64]) -> usize {
    let damaged = dir.join(DAMAGED);
    if let Err(e) = std::fs::create_dir_all(&damaged) {
        tracing::warn!(dir = %damaged.display(), error = %e, "cannot create");
        return 0;
    }
    ids.iter()
        .filter(|&&id| {
            remove_facts(dir, id);
            let from = segment_path(dir, id);
            let to = segment_path(&damaged, id);
            from.exists() && std::fs::rename(&from, &to).is_ok()
        })
        .count()
}

/// Removes segment files not in `named`, their facts files, and leftover
/// temporary files. Returns the largest segment id seen, and the count and
/// bytes removed.
fn clean(dir: &Path, named: &BTreeSet<u64>) -> (u64, usize, u64) {
    let (mut max_id, mut removed, mut bytes) = (0, 0, 0);
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot list the data directory");
            return (0, 0, 0);
        }
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let orphan = match (segment_id(&name), facts_id(&name)) {
            (Some(id), _) => {
                max_id = max_id.max(id);
                !named.contains(&id)
            }
            (None, Some((id, tmp))) => tmp || !named.contains(&id),
            (None, None) if name == MANIFEST_TMP => true,
            (None, None) if [MANIFEST, LOCK, DAMAGED].contains(&name.as_ref()) => false,
            (None, None) => {
                tracing::warn!(file = %entry.path().display(), "unknown file in the data directory, left alone");
                false
            }
        };
        if orphan {
            let len = entry.metadata().map(|m| m.len()).unwrap_or(0);
            match std::fs::remove_file(entry.path()) {
                Ok(()) => {
                    removed += 1;
                    bytes += len;
                }
                Err(e) => {
                    tracing::warn!(file = %entry.path().display(), error = %e, "cannot remove")
                }
            }
        }
    }
    (max_id, removed, bytes)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use arrow::array::Int64Array;

    use super::*;
    use crate::disk::faulty::FaultyDisk;
    use crate::{TableStore, WriteMode};

    type Model = BTreeMap<String, Vec<i64>>;

    use crate::test_batches::batch;

    fn state(store: &TableStore) -> Model {
        store
            .list("")
            .iter()
            .map(|t| {
                let values = t
                    .batches()
                    .flat_map(|b| {
                        let c = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                        c.values().to_vec()
                    })
                    .collect();
                (t.name().to_string(), values)
            })
            .collect()
    }

    /// One write against the store and the same change to the model.
    type Op = (&'static str, fn(&TableStore) -> Result<()>, fn(&mut Model));

    fn ops() -> Vec<Op> {
        fn put(store: &TableStore, name: &str, mode: WriteMode, values: &[i64]) -> Result<()> {
            let b = batch(values);
            store.put(name, mode, b.schema(), [b]).map(|_| ())
        }
        vec![
            (
                "put a",
                |s| put(s, "a", WriteMode::Replace, &[1, 2]),
                |m| drop(m.insert("a".into(), vec![1, 2])),
            ),
            (
                "append a",
                |s| put(s, "a", WriteMode::Append, &[3]),
                |m| m.get_mut("a").unwrap().push(3),
            ),
            (
                "create b",
                |s| put(s, "b", WriteMode::Create, &[4]),
                |m| drop(m.insert("b".into(), vec![4])),
            ),
            (
                "rename b to c",
                |s| s.rename("b", "c", false).map(|_| ()),
                |m| {
                    let b = m.remove("b").unwrap();
                    m.insert("c".into(), b);
                },
            ),
            (
                "replace c",
                |s| put(s, "c", WriteMode::Replace, &[5, 6, 7]),
                |m| drop(m.insert("c".into(), vec![5, 6, 7])),
            ),
            (
                "rename a over c",
                |s| s.rename("a", "c", true).map(|_| ()),
                |m| {
                    let a = m.remove("a").unwrap();
                    m.insert("c".into(), a);
                },
            ),
            (
                "delete c",
                |s| s.remove("c").map(|_| ()),
                |m| drop(m.remove("c")),
            ),
            (
                "put d",
                |s| put(s, "d", WriteMode::Replace, &[8]),
                |m| drop(m.insert("d".into(), vec![8])),
            ),
            (
                "put e",
                |s| put(s, "e", WriteMode::Replace, &[9]),
                |m| drop(m.insert("e".into(), vec![9])),
            ),
            (
                "publish e after d",
                |s| {
                    s.publish("d", &["e".into()], WriteMode::Append, None)
                        .map(|_| ())
                },
                |m| {
                    let e = m.remove("e").unwrap();
                    m.get_mut("d").unwrap().extend(e);
                },
            ),
            (
                "put f",
                |s| put(s, "f", WriteMode::Replace, &[10, 11]),
                |m| drop(m.insert("f".into(), vec![10, 11])),
            ),
            (
                "publish d and f as g",
                |s| {
                    let sources = ["d".to_string(), "f".to_string()];
                    s.publish("g", &sources, WriteMode::Replace, Some(2))
                        .map(|_| ())
                },
                |m| {
                    let mut g = m.remove("d").unwrap();
                    g.extend(m.remove("f").unwrap());
                    m.insert("g".into(), g);
                },
            ),
        ]
    }

    /// Runs every write with operation `fail_at` of the disk failing; checks
    /// the failed write's outcome, the store in memory after it, the writes
    /// after it, and what a restart reads back. Returns whether the fault was
    /// hit (false: `fail_at` is past the last operation).
    fn run(fail_at: u64, kind: io::ErrorKind, fsync: Fsync) -> bool {
        let dir = tempfile::tempdir().unwrap();
        let options = DurableOptions {
            dir: dir.path().to_path_buf(),
            fsync,
        };
        let disk = FaultyDisk::new(fail_at, kind);
        let faults = Arc::clone(&disk.faults);
        let store = TableStore::open_on(&options, 1 << 20, Box::new(disk)).unwrap();
        let mut model = Model::new();
        let mut failures = 0;
        for (what, op, change) in ops() {
            match op(&store) {
                Ok(()) => change(&mut model),
                Err(StoreError::Io(failure)) => {
                    failures += 1;
                    let context = format!("{what}, {:?}: {failure}", faults.failed());
                    assert_eq!(failure.kind, kind, "{context}");
                    assert!(!failure.path.as_os_str().is_empty(), "{context}");
                    if failure.outcome == IoFailure::NOT_DURABLE {
                        change(&mut model);
                        assert_eq!(state(&store), model, "{context}");
                    } else {
                        assert_eq!(failure.outcome, IoFailure::UNCHANGED, "{context}");
                        assert_eq!(state(&store), model, "{context}");
                        // The fault has passed: the same write now succeeds.
                        op(&store).unwrap_or_else(|e| panic!("{context}: retry: {e}"));
                        change(&mut model);
                    }
                }
                Err(other) => panic!("{what}: {other}"),
            }
        }
        let failed = faults.failed();
        // Removing an unused file fails quietly; any other fault fails a write.
        let quiet = failed.as_deref().is_some_and(|f| f.starts_with("remove"));
        assert_eq!(
            failures,
            usize::from(failed.is_some() && !quiet),
            "{failed:?}"
        );
        assert_eq!(state(&store), model, "{failed:?}");
        drop(store);
        let reopened = TableStore::open(&options, 1 << 20).unwrap();
        assert_eq!(state(&reopened), model, "after restart, {failed:?}");
        // Nothing but the live segments is left.
        let live: usize = reopened.list("").iter().map(|t| t.segments().len()).sum();
        let files = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                segment_id(&name.to_string_lossy()).is_some()
            })
            .count();
        assert_eq!(files, live, "{failed:?}");
        failed.is_some()
    }

    #[test]
    fn every_failing_file_operation_leaves_the_store_consistent() {
        for fsync in [Fsync::Always, Fsync::Never] {
            for kind in [io::ErrorKind::StorageFull, io::ErrorKind::Other] {
                let mut fail_at = 0;
                while run(fail_at, kind, fsync) {
                    fail_at += 1;
                }
                // Every write makes at least create+write+rename steps, more
                // with fsync: a run this short means the faults missed.
                assert!(fail_at > 8 * 3, "{fsync:?}: {fail_at} operations");
            }
        }
    }

    #[test]
    fn a_full_disk_reads_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let options = DurableOptions {
            dir: dir.path().to_path_buf(),
            fsync: Fsync::Always,
        };
        let disk = FaultyDisk::new(1, io::ErrorKind::StorageFull);
        let store = TableStore::open_on(&options, 1 << 20, Box::new(disk)).unwrap();
        let b = batch(&[1]);
        let err = store
            .put("t", WriteMode::Replace, b.schema(), [b])
            .unwrap_err();
        let StoreError::Io(failure) = &err else {
            panic!("{err}")
        };
        assert!(failure.is_storage_full());
        let message = err.to_string();
        assert!(message.contains("write segment file"), "{message}");
        assert!(message.contains(".arrows"), "{message}");
        assert!(message.contains("nothing was changed"), "{message}");
        assert!(store.get("t").is_err());
    }
}

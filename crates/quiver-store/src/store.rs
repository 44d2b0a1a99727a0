//! The table store: a map from names to the current version of each table.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;

use crate::data_dir::{CommitFailure, DataDir, DurableOptions};
use crate::disk::{Disk, OsDisk};
use crate::lazy_free::LazyFree;
use crate::manifest::{FORMAT, Manifest, ManifestTable};
use crate::{MemoryCharge, MemoryPool, Result, Segment, StoreError, TableLimits, TableVersion};
use crate::{batch_bytes, validate_storage_name};

type Tables = BTreeMap<String, Arc<TableVersion>>;

/// How a write treats an existing table of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteMode {
    /// Publish the written batches as the whole table, replacing any previous
    /// version (creating the table if it does not exist).
    #[default]
    Replace,
    /// Add the written batches after the existing table's rows. The table must
    /// exist and its schema must have exactly the written fields.
    Append,
    /// Publish the written batches as a new table: fails with
    /// [`StoreError::AlreadyExists`] if the name is taken when the write starts
    /// or when it commits.
    Create,
}

/// Totals over the whole store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreStats {
    /// Number of tables.
    pub tables: usize,
    /// Rows over all tables.
    pub rows: u64,
    /// Bytes over all tables.
    pub bytes: u64,
    /// Bytes charged to the memory pool: stored tables, writes in progress, and
    /// old versions still held by readers.
    pub memory_used: u64,
    /// The memory limit.
    pub memory_limit: u64,
}

/// Named Arrow tables, each an immutable [`TableVersion`] replaced atomically.
///
/// # Example
/// ```
/// # use std::sync::Arc;
/// # use arrow::array::Int64Array;
/// # use arrow::record_batch::RecordBatch;
/// use quiver_store::{TableStore, WriteMode};
///
/// let store = TableStore::new(1 << 20);
/// let batch = RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(vec![1, 2])) as _)])?;
/// store.put("numbers", WriteMode::Replace, batch.schema(), [batch.clone()])?;
/// store.put("numbers", WriteMode::Append, batch.schema(), [batch])?;
/// assert_eq!(store.get("numbers")?.num_rows(), 4);
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
///
/// # Durability
/// A store made with [`TableStore::open`] keeps its tables in a data
/// directory: a write returns only once it is there (docs/durability.md), and
/// the next `open` of the directory reads every table back. Writes then do
/// blocking file I/O (and fsync): async callers run them off the runtime's
/// worker threads.
#[derive(Debug)]
pub struct TableStore {
    tables: RwLock<Tables>,
    pool: MemoryPool,
    limits: TableLimits,
    next_version: AtomicU64,
    /// The data directory of a durable store.
    durable: Option<DataDir>,
    /// Held by every change to the table map, from reading the current state
    /// to publishing the next, so that manifests are written in the order the
    /// changes are published.
    commits: Mutex<()>,
    /// Where replaced maps (and the versions only they held) are dropped.
    lazy_free: LazyFree<Tables>,
}

impl TableStore {
    /// An empty store that holds at most `max_memory` bytes of table data.
    pub fn new(max_memory: u64) -> Self {
        Self {
            tables: RwLock::new(BTreeMap::new()),
            pool: MemoryPool::new(max_memory),
            limits: TableLimits::UNLIMITED,
            next_version: AtomicU64::new(1),
            durable: None,
            commits: Mutex::new(()),
            lazy_free: LazyFree::start(),
        }
    }

    /// A durable store over the data directory `options.dir`, with every table
    /// stored there read back (memory-mapped, not copied). Fails if the
    /// directory cannot be created or locked, or its manifest is damaged.
    pub fn open(options: &DurableOptions, max_memory: u64) -> Result<Self> {
        Self::open_on(options, max_memory, Box::new(OsDisk))
    }

    pub(crate) fn open_on(
        options: &DurableOptions,
        max_memory: u64,
        disk: Box<dyn Disk>,
    ) -> Result<Self> {
        let (dir, recovered) = DataDir::open(options, disk)?;
        let pool = MemoryPool::new(max_memory);
        let mut next_version = recovered.next_version;
        let mut tables = Tables::new();
        for table in recovered.tables {
            let segments = table
                .segments
                .into_iter()
                .map(|(id, batches)| {
                    Arc::new(Segment::stored(
                        dir.segment_file(id),
                        batches,
                        pool.charge(),
                    ))
                })
                .collect();
            next_version = next_version.max(table.version + 1);
            let version = TableVersion::new(
                table.name.clone(),
                table.version,
                table.schema,
                segments,
                table.partitions,
            )
            .written_at(table.written_ms);
            tables.insert(table.name, Arc::new(version));
        }
        let store = Self {
            tables: RwLock::new(tables),
            pool,
            limits: TableLimits::UNLIMITED,
            next_version: AtomicU64::new(next_version),
            durable: Some(dir),
            commits: Mutex::new(()),
            lazy_free: LazyFree::start(),
        };
        if recovered.dropped {
            // Forget the damaged tables on disk too.
            let _commit = store.lock_commits();
            store.apply(|_| {}, None)?;
        }
        Ok(store)
    }

    /// Whether writes are kept in a data directory.
    pub fn is_durable(&self) -> bool {
        self.durable.is_some()
    }

    /// The same store with `limits` on table sizes (none by default).
    pub fn with_limits(mut self, limits: TableLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The limits on table sizes.
    pub fn limits(&self) -> &TableLimits {
        &self.limits
    }

    /// The memory pool every table is charged to.
    pub fn memory(&self) -> &MemoryPool {
        &self.pool
    }

    /// The current version of `name`.
    pub fn get(&self, name: &str) -> Result<Arc<TableVersion>> {
        self.read()
            .get(name)
            .cloned()
            .ok_or_else(|| StoreError::NotFound {
                name: name.to_string(),
            })
    }

    /// The current version of every table whose name starts with `prefix`, by name.
    pub fn list(&self, prefix: &str) -> Vec<Arc<TableVersion>> {
        self.read()
            .range(prefix.to_string()..)
            .take_while(|(name, _)| name.starts_with(prefix))
            .map(|(_, v)| Arc::clone(v))
            .collect()
    }

    /// Starts writing `name`. Nothing is visible until [`TableWriter::commit`];
    /// dropping the writer discards what it holds.
    ///
    /// `partitions` is stored with the table and tells readers how many
    /// endpoints to split it over (`None`: the server's default).
    pub fn writer(
        &self,
        name: &str,
        mode: WriteMode,
        schema: SchemaRef,
        partitions: Option<usize>,
    ) -> Result<TableWriter<'_>> {
        validate_storage_name(name)?;
        let mut base = (0, 0);
        match mode {
            WriteMode::Append => {
                let current = self.get(name)?;
                check_schema(name, current.schema(), &schema)?;
                base = (current.num_rows(), current.num_bytes());
            }
            WriteMode::Create if self.read().contains_key(name) => {
                return Err(StoreError::AlreadyExists {
                    name: name.to_string(),
                });
            }
            WriteMode::Create | WriteMode::Replace => {}
        }
        Ok(TableWriter {
            store: self,
            name: name.to_string(),
            mode,
            schema,
            partitions,
            batches: Vec::new(),
            rows: 0,
            handed_on: 0,
            base,
            charge: self.pool.charge(),
        })
    }

    /// Writes `batches` under `name` in one step.
    pub fn put(
        &self,
        name: &str,
        mode: WriteMode,
        schema: SchemaRef,
        batches: impl IntoIterator<Item = RecordBatch>,
    ) -> Result<Arc<TableVersion>> {
        let mut writer = self.writer(name, mode, schema, None)?;
        for batch in batches {
            writer.push(batch)?;
        }
        writer.commit()
    }

    /// Drops `name`, returning its last version.
    pub fn remove(&self, name: &str) -> Result<Arc<TableVersion>> {
        let _commit = self.lock_commits();
        let old = self.get(name)?;
        self.apply(
            |tables| {
                tables.remove(name);
            },
            None,
        )?;
        Ok(old)
    }

    /// Drops those of `names` the store holds, in one commit (one manifest
    /// written with `--data-dir`, however many); returns how many it held.
    pub fn remove_all(&self, names: &[String]) -> Result<usize> {
        let _commit = self.lock_commits();
        let held = {
            let tables = self.read();
            names
                .iter()
                .filter(|n| tables.contains_key(n.as_str()))
                .count()
        };
        if held == 0 {
            return Ok(0);
        }
        self.apply(
            |tables| {
                for name in names {
                    tables.remove(name.as_str());
                }
            },
            None,
        )?;
        Ok(held)
    }

    /// Renames `from` to `to`. Fails with [`StoreError::AlreadyExists`] if `to`
    /// exists, unless `overwrite` is set.
    pub fn rename(&self, from: &str, to: &str, overwrite: bool) -> Result<Arc<TableVersion>> {
        validate_storage_name(to)?;
        let _commit = self.lock_commits();
        let tables = self.read();
        if !tables.contains_key(from) {
            return Err(StoreError::NotFound {
                name: from.to_string(),
            });
        }
        if from == to {
            return Ok(Arc::clone(&tables[from]));
        }
        if tables.contains_key(to) && !overwrite {
            return Err(StoreError::AlreadyExists {
                name: to.to_string(),
            });
        }
        let renamed = Arc::new(tables[from].renamed(to.to_string(), self.next_version()));
        drop(tables);
        self.apply(
            |tables| {
                tables.remove(from);
                tables.insert(to.to_string(), Arc::clone(&renamed));
            },
            None,
        )?;
        Ok(renamed)
    }

    /// Publishes the tables `sources` as `into` in one step, without copying:
    /// the new version of `into` is made of the sources' segments, in the
    /// order given, after `into`'s own for [`WriteMode::Append`] (which needs
    /// `into` to exist, as a put does) or alone for [`WriteMode::Replace`] and
    /// [`WriteMode::Create`] (which needs `into` not to exist); every source is
    /// removed. Readers see all of it or none: one change of the table map,
    /// one manifest written in a durable store (whose segment files stay as
    /// they are).
    ///
    /// `partitions` as for [`Self::writer`]: an append keeps the target's
    /// setting unless it gives one.
    ///
    /// Fails, changing nothing, with [`StoreError::InvalidSources`] if
    /// `sources` is empty, names a table twice or names `into`;
    /// [`StoreError::NotFound`] for the first source missing (or the target of
    /// an append); [`StoreError::SchemaMismatch`] if a source's fields differ
    /// from the first source's, or for an append from the target's; a
    /// [`TableLimits`] error as any write would.
    pub fn publish(
        &self,
        into: &str,
        sources: &[String],
        mode: WriteMode,
        partitions: Option<usize>,
    ) -> Result<Arc<TableVersion>> {
        validate_storage_name(into)?;
        let invalid = |detail: String| StoreError::InvalidSources {
            into: into.to_string(),
            detail,
        };
        if sources.is_empty() {
            return Err(invalid("no source tables given".to_string()));
        }
        let mut seen = BTreeSet::new();
        for source in sources {
            if source == into {
                return Err(invalid(format!(
                    "'{into}' is among the sources; a table cannot be published into itself"
                )));
            }
            if !seen.insert(source.as_str()) {
                return Err(invalid(format!("source '{source}' is named twice")));
            }
        }
        let _commit = self.lock_commits();
        let tables = self.read();
        let found = sources
            .iter()
            .map(|name| {
                tables.get(name).ok_or_else(|| StoreError::NotFound {
                    name: name.to_string(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let target = match mode {
            WriteMode::Append => Some(tables.get(into).ok_or_else(|| StoreError::NotFound {
                name: into.to_string(),
            })?),
            WriteMode::Create if tables.contains_key(into) => {
                return Err(StoreError::AlreadyExists {
                    name: into.to_string(),
                });
            }
            WriteMode::Create | WriteMode::Replace => None,
        };
        // Every source must have the fields of the table it joins: the
        // target's for an append, else the first source's.
        let (reference, schema) = match target {
            Some(t) => (into, t.schema()),
            None => (sources[0].as_str(), found[0].schema()),
        };
        for (name, source) in sources.iter().zip(&found) {
            check_schema(name, schema, source.schema()).map_err(|e| match e {
                StoreError::SchemaMismatch { name, detail } => StoreError::SchemaMismatch {
                    detail: format!("its columns differ from those of '{reference}': {detail}"),
                    name,
                },
                other => other,
            })?;
        }
        let mut segments = target.map(|t| t.segments().to_vec()).unwrap_or_default();
        for source in &found {
            segments.extend(source.segments().iter().cloned());
        }
        let rows = segments.iter().map(|s| s.num_rows()).sum();
        let bytes = segments.iter().map(|s| s.num_bytes()).sum();
        self.check_limits_removing(&tables, into, &seen, rows, bytes)?;
        let version = Arc::new(TableVersion::new(
            into.to_string(),
            self.next_version(),
            Arc::clone(schema),
            segments,
            partitions.or_else(|| target.and_then(|t| t.partitions())),
        ));
        drop(tables);
        self.apply(
            |tables| {
                for source in sources {
                    tables.remove(source);
                }
                tables.insert(into.to_string(), Arc::clone(&version));
            },
            None,
        )?;
        Ok(version)
    }

    /// Totals over the store.
    ///
    /// Waits for replaced versions still being freed, so that `memory_used`
    /// counts only what is held.
    pub fn stats(&self) -> StoreStats {
        self.pool.settle();
        let tables = self.read();
        StoreStats {
            tables: tables.len(),
            rows: tables.values().map(|t| t.num_rows()).sum(),
            bytes: tables.values().map(|t| t.num_bytes()).sum(),
            memory_used: self.pool.used(),
            memory_limit: self.pool.limit(),
        }
    }

    /// Checks the [`TableLimits`] for `name` holding `rows` rows of `bytes`
    /// bytes in place of what it holds in `tables` now.
    fn check_limits(&self, tables: &Tables, name: &str, rows: u64, bytes: u64) -> Result<()> {
        self.check_limits_removing(tables, name, &BTreeSet::new(), rows, bytes)
    }

    /// [`Self::check_limits`] for a change that also drops the tables `removed`.
    fn check_limits_removing(
        &self,
        tables: &Tables,
        name: &str,
        removed: &BTreeSet<&str>,
        rows: u64,
        bytes: u64,
    ) -> Result<()> {
        if self.limits == TableLimits::UNLIMITED {
            return Ok(());
        }
        let others: u64 = tables
            .iter()
            .filter(|(n, _)| n.as_str() != name && !removed.contains(n.as_str()))
            .map(|(_, t)| t.num_rows())
            .sum();
        self.limits
            .check(name, rows, bytes, others.saturating_add(rows))
    }

    fn next_version(&self) -> u64 {
        self.next_version.fetch_add(1, Ordering::Relaxed)
    }

    /// Serialises changes to the table map (see `commits`).
    fn lock_commits(&self) -> MutexGuard<'_, ()> {
        self.commits.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes `edit` of the table map; the caller holds [`Self::lock_commits`].
    ///
    /// In a durable store the edited map is first written as the new manifest;
    /// segment files only the old map named are removed afterwards. `added` is
    /// the segment file the change brings, removed again if the change fails
    /// before its manifest is in place. A failure after the manifest's rename
    /// (its directory sync) still publishes the change: the store in memory
    /// always matches the manifest on disk.
    ///
    /// The map replaced is freed on the lazy-free thread, never under the lock.
    fn apply(&self, edit: impl FnOnce(&mut Tables), added: Option<u64>) -> Result<()> {
        let mut next = self.read().clone();
        let Some(dir) = &self.durable else {
            edit(&mut next);
            self.install(next);
            return Ok(());
        };
        let before = segment_files(&next);
        edit(&mut next);
        let manifest = Manifest {
            format: FORMAT,
            next_version: self.next_version.load(Ordering::Relaxed),
            tables: next
                .iter()
                .map(|(name, table)| ManifestTable {
                    name: name.clone(),
                    version: table.version(),
                    partitions: table.partitions(),
                    segments: table.segments().iter().filter_map(|s| s.file()).collect(),
                    written_ms: table.written_ms(),
                })
                .collect(),
        };
        let unused: Vec<u64> = before.difference(&segment_files(&next)).copied().collect();
        match dir.commit(&manifest) {
            Ok(()) => {
                self.install(next);
                dir.discard(unused);
                Ok(())
            }
            Err(CommitFailure {
                error,
                renamed: true,
            }) => {
                self.install(next);
                Err(error)
            }
            Err(CommitFailure {
                error,
                renamed: false,
            }) => {
                dir.discard(added);
                Err(error)
            }
        }
    }

    /// Makes `next` the table map; the old one goes to the lazy-free thread.
    fn install(&self, next: Tables) {
        let old = std::mem::replace(&mut *self.write(), next);
        self.lazy_free.free(&self.pool, old);
    }

    // The map only ever holds complete `Arc`s, so a panic elsewhere while a lock
    // was held cannot leave it half-written: recover from poisoning.
    fn read(&self) -> RwLockReadGuard<'_, Tables> {
        self.tables.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Tables> {
        self.tables.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// The segment files the tables of `tables` are made of.
fn segment_files(tables: &Tables) -> BTreeSet<u64> {
    tables
        .values()
        .flat_map(|t| t.segments().iter().filter_map(|s| s.file()))
        .collect()
}

/// A write in progress: batches charged to the memory pool, not yet visible.
#[derive(Debug)]
pub struct TableWriter<'a> {
    store: &'a TableStore,
    name: String,
    mode: WriteMode,
    schema: SchemaRef,
    partitions: Option<usize>,
    batches: Vec<RecordBatch>,
    /// Rows pushed so far.
    rows: u64,
    /// Bytes of the batches [`TableWriter::take`] handed on.
    handed_on: u64,
    /// Rows and bytes of the table appended to, when the write started.
    base: (u64, u64),
    charge: MemoryCharge,
}

impl TableWriter<'_> {
    /// The table written.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The schema every pushed batch must have.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Rows pushed so far.
    pub fn num_rows(&self) -> u64 {
        self.rows
    }

    /// Bytes pushed so far (those handed on by [`TableWriter::take`] included).
    pub fn num_bytes(&self) -> u64 {
        self.handed_on + self.charge.bytes()
    }

    /// Adds a batch, charged its buffers' bytes ([`batch_bytes`]). Fails if its
    /// fields differ from the writer's schema or if it would pass the memory
    /// limit or a [`TableLimits`] limit; the writer is then best dropped.
    pub fn push(&mut self, batch: RecordBatch) -> Result<()> {
        let bytes = batch_bytes(&batch);
        self.push_charged(batch, bytes)
    }

    /// Adds a batch charged `bytes`: the memory it holds, when the caller knows
    /// it better than the batch's buffer lengths tell. A batch decoded from a
    /// wire message holds the whole message body, however little of it its
    /// arrays reference, and a dictionary sent once serves many batches.
    /// A batch holding well over what its rows need (a small slice, string
    /// views over large buffers) is copied into buffers that fit, and
    /// charged those ([`crate::compact`]).
    pub fn push_charged(&mut self, batch: RecordBatch, bytes: u64) -> Result<()> {
        if batch.schema_ref().fields() != self.schema.fields() {
            check_schema(&self.name, &self.schema, batch.schema_ref())?;
        }
        let (batch, bytes) = crate::compact(batch, bytes);
        let rows = self.rows + batch.num_rows() as u64;
        let store = self.store;
        store.check_limits(
            &store.read(),
            &self.name,
            self.base.0 + rows,
            self.base.1 + self.num_bytes() + bytes,
        )?;
        self.charge.try_grow(bytes)?;
        self.batches.push(batch);
        self.rows = rows;
        Ok(())
    }

    /// The batches pushed since the last call, with their charge: the caller
    /// holds them (a cluster node ships them to other nodes while the put
    /// goes on), and the writer goes on empty. Rows and bytes taken still
    /// count toward the table's limits.
    pub fn take(&mut self) -> (Vec<RecordBatch>, MemoryCharge) {
        let charge = std::mem::replace(&mut self.charge, self.store.pool.charge());
        self.handed_on += charge.bytes();
        (std::mem::take(&mut self.batches), charge)
    }

    /// Bytes pushed and not taken yet: what the writer holds.
    pub fn held_bytes(&self) -> u64 {
        self.charge.bytes()
    }

    /// Publishes the write atomically and returns the new version.
    ///
    /// In a durable store this writes the batches to a new segment file and
    /// the new manifest, and returns once both are on disk (blocking I/O).
    /// The version returned then holds the batches as mapped from the file,
    /// and the memory the written batches were charged is returned to the pool.
    /// A writer whose batches were [taken](TableWriter::take) is not committed:
    /// its rows are elsewhere.
    pub fn commit(self) -> Result<Arc<TableVersion>> {
        debug_assert_eq!(self.handed_on, 0, "a writer whose batches were taken");
        let store = self.store;
        let (rows, bytes) = (self.rows, self.charge.bytes());
        let (segment, added) = match &store.durable {
            None => (Segment::new(self.batches, self.charge), None),
            Some(dir) => {
                let (id, mapped) = dir.write_segment(&self.schema, &self.batches)?;
                drop((self.batches, self.charge));
                (
                    Segment::stored(dir.segment_file(id), mapped.batches, store.pool.charge()),
                    Some(id),
                )
            }
        };
        let segment = Arc::new(segment);
        let _commit = store.lock_commits();
        let version = match Self::build_version(
            store,
            &self.name,
            self.mode,
            self.schema,
            self.partitions,
            segment,
            (rows, bytes),
        ) {
            Ok(version) => Arc::new(version),
            Err(e) => {
                if let (Some(dir), Some(id)) = (&store.durable, added) {
                    dir.discard([id]);
                }
                return Err(e);
            }
        };
        store.apply(
            |tables| {
                tables.insert(self.name, Arc::clone(&version));
            },
            added,
        )?;
        Ok(version)
    }

    /// The version a commit publishes; the caller holds the store's commit lock.
    fn build_version(
        store: &TableStore,
        name: &str,
        mode: WriteMode,
        schema: SchemaRef,
        partitions: Option<usize>,
        segment: Arc<Segment>,
        (rows, bytes): (u64, u64),
    ) -> Result<TableVersion> {
        let tables = store.read();
        if mode == WriteMode::Create && tables.contains_key(name) {
            return Err(StoreError::AlreadyExists {
                name: name.to_string(),
            });
        }
        // Re-checked under the lock against what the table and the store hold
        // now: other writes may have committed since this one started.
        let base = match (mode, tables.get(name)) {
            (WriteMode::Append, Some(current)) => (current.num_rows(), current.num_bytes()),
            _ => (0, 0),
        };
        store.check_limits(&tables, name, base.0 + rows, base.1 + bytes)?;
        Ok(match mode {
            WriteMode::Replace | WriteMode::Create => TableVersion::new(
                name.to_string(),
                store.next_version(),
                schema,
                vec![segment],
                partitions,
            ),
            WriteMode::Append => {
                // Re-checked under the lock: the table may have been replaced or
                // dropped since the writer started.
                let current = tables.get(name).ok_or_else(|| StoreError::NotFound {
                    name: name.to_string(),
                })?;
                check_schema(name, current.schema(), &schema)?;
                let mut segments = current.segments().to_vec();
                segments.push(segment);
                TableVersion::new(
                    name.to_string(),
                    store.next_version(),
                    Arc::clone(current.schema()),
                    segments,
                    partitions.or(current.partitions()),
                )
            }
        })
    }
}

/// Checks that `actual` has exactly the fields of `expected` (names, types,
/// nullability, field metadata). Schema-level metadata is not compared.
fn check_schema(name: &str, expected: &Schema, actual: &Schema) -> Result<()> {
    if expected.fields() == actual.fields() {
        return Ok(());
    }
    let mismatch = |detail: String| StoreError::SchemaMismatch {
        name: name.to_string(),
        detail,
    };
    if expected.fields().len() != actual.fields().len() {
        return Err(mismatch(format!(
            "expected {} columns ({}), got {} ({})",
            expected.fields().len(),
            field_names(expected),
            actual.fields().len(),
            field_names(actual)
        )));
    }
    for (e, a) in expected.fields().iter().zip(actual.fields()) {
        if e != a {
            return Err(mismatch(format!(
                "column '{}' expected {}{}, got '{}' {}{}",
                e.name(),
                e.data_type(),
                if e.is_nullable() { "" } else { " NOT NULL" },
                a.name(),
                a.data_type(),
                if a.is_nullable() { "" } else { " NOT NULL" },
            )));
        }
    }
    Err(mismatch("field metadata differs".to_string()))
}

fn field_names(schema: &Schema) -> String {
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field};
    use std::thread;

    use crate::test_batches::batch;

    fn values(version: &TableVersion) -> Vec<i64> {
        version
            .batches()
            .flat_map(|b| {
                let col = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                col.values().to_vec()
            })
            .collect()
    }

    #[test]
    fn replace_publishes_whole_table() {
        let store = TableStore::new(1 << 20);
        let b = batch(&[1, 2, 3]);
        store
            .put("t", WriteMode::Replace, b.schema(), [b.clone(), b.clone()])
            .unwrap();
        let v1 = store.get("t").unwrap();
        assert_eq!(v1.num_rows(), 6);
        assert_eq!(v1.num_bytes(), 48);
        store
            .put("t", WriteMode::Replace, b.schema(), [batch(&[9])])
            .unwrap();
        let v2 = store.get("t").unwrap();
        assert_eq!(values(&v2), vec![9]);
        assert!(v2.version() > v1.version());
    }

    #[test]
    fn create_refuses_a_taken_name_at_start_and_at_commit() {
        let store = TableStore::new(1 << 20);
        let b = batch(&[1]);
        store
            .put("t", WriteMode::Create, b.schema(), [b.clone()])
            .unwrap();
        let err = store.writer("t", WriteMode::Create, b.schema(), None);
        assert!(matches!(err, Err(StoreError::AlreadyExists { .. })));
        // Taken while the write was under way: the first commit wins.
        let mut late = store
            .writer("u", WriteMode::Create, b.schema(), None)
            .unwrap();
        late.push(b.clone()).unwrap();
        store
            .put("u", WriteMode::Create, b.schema(), [batch(&[7])])
            .unwrap();
        assert!(matches!(
            late.commit(),
            Err(StoreError::AlreadyExists { .. })
        ));
        assert_eq!(values(&store.get("u").unwrap()), vec![7]);
        assert_eq!(store.memory().used(), 16);
    }

    #[test]
    fn append_adds_rows_after_existing() {
        let store = TableStore::new(1 << 20);
        let b = batch(&[1, 2]);
        store
            .put("t", WriteMode::Replace, b.schema(), [b.clone()])
            .unwrap();
        store
            .put("t", WriteMode::Append, b.schema(), [batch(&[3])])
            .unwrap();
        assert_eq!(values(&store.get("t").unwrap()), vec![1, 2, 3]);
    }

    #[test]
    fn append_to_missing_table_is_not_found() {
        let store = TableStore::new(1 << 20);
        let b = batch(&[1]);
        let err = store
            .put("nope", WriteMode::Append, b.schema(), [b])
            .unwrap_err();
        assert!(matches!(err, StoreError::NotFound { name } if name == "nope"));
        assert_eq!(store.stats().tables, 0);
    }

    #[test]
    fn append_with_other_schema_is_refused_and_table_unchanged() {
        let store = TableStore::new(1 << 20);
        let b = batch(&[1, 2]);
        store.put("t", WriteMode::Replace, b.schema(), [b]).unwrap();
        let other =
            RecordBatch::try_from_iter([("x", Arc::new(StringArray::from(vec!["a"])) as ArrayRef)])
                .unwrap();
        let err = store
            .put("t", WriteMode::Append, other.schema(), [other])
            .unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, StoreError::SchemaMismatch { .. }));
        assert!(message.contains("column 'x' expected Int64"), "{message}");
        assert_eq!(values(&store.get("t").unwrap()), vec![1, 2]);
    }

    #[test]
    fn batch_that_does_not_match_writer_schema_is_refused() {
        let store = TableStore::new(1 << 20);
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let mut writer = store.writer("t", WriteMode::Replace, schema, None).unwrap();
        writer.push(batch(&[1])).unwrap();
        let other =
            RecordBatch::try_from_iter([("y", Arc::new(Int64Array::from(vec![1])) as ArrayRef)])
                .unwrap();
        assert!(matches!(
            writer.push(other),
            Err(StoreError::SchemaMismatch { .. })
        ));
        drop(writer);
        assert!(matches!(store.get("t"), Err(StoreError::NotFound { .. })));
        assert_eq!(store.memory().used(), 0);
    }

    #[test]
    fn reader_keeps_its_version_during_replace_and_delete() {
        let store = Arc::new(TableStore::new(1 << 24));
        let b = batch(&[1, 2, 3]);
        store
            .put("t", WriteMode::Replace, b.schema(), [b.clone()])
            .unwrap();
        let snapshot = store.get("t").unwrap();

        let writers: Vec<_> = (0..4)
            .map(|i| {
                let store = Arc::clone(&store);
                thread::spawn(move || {
                    for j in 0..50 {
                        let b = batch(&[i * 1000 + j; 10]);
                        store.put("t", WriteMode::Replace, b.schema(), [b]).unwrap();
                    }
                })
            })
            .collect();
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let store = Arc::clone(&store);
                thread::spawn(move || {
                    for _ in 0..200 {
                        let v = store.get("t").unwrap();
                        let vals = values(&v);
                        // Every version is whole: one writer's ten equal values,
                        // or the original three.
                        assert!(
                            vals == vec![1, 2, 3]
                                || (vals.len() == 10 && vals.iter().all(|x| *x == vals[0])),
                            "torn read: {vals:?}"
                        );
                    }
                })
            })
            .collect();
        for t in writers.into_iter().chain(readers) {
            t.join().unwrap();
        }
        store.remove("t").unwrap();
        assert_eq!(values(&snapshot), vec![1, 2, 3]);
        store.memory().settle();
        assert_eq!(
            store.memory().used(),
            24,
            "only the held snapshot is charged"
        );
        drop(snapshot);
        assert_eq!(store.memory().used(), 0);
    }

    #[test]
    fn concurrent_appends_all_land() {
        let store = Arc::new(TableStore::new(1 << 24));
        let b = batch(&[]);
        store.put("t", WriteMode::Replace, b.schema(), [b]).unwrap();
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let store = Arc::clone(&store);
                thread::spawn(move || {
                    for j in 0..25 {
                        let b = batch(&[i * 100 + j]);
                        store.put("t", WriteMode::Append, b.schema(), [b]).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut vals = values(&store.get("t").unwrap());
        vals.sort();
        let mut expected: Vec<i64> = (0..8)
            .flat_map(|i| (0..25).map(move |j| i * 100 + j))
            .collect();
        expected.sort();
        assert_eq!(vals, expected);
    }

    #[test]
    fn back_to_back_replaces_near_the_limit_wait_for_the_free() {
        // Room for exactly two versions: each replace needs the one before
        // the current to be freed, which happens on the lazy-free thread.
        let big = batch(&(0..10_000).collect::<Vec<_>>());
        let store = TableStore::new(2 * batch_bytes(&big));
        for _ in 0..200 {
            store
                .put("t", WriteMode::Replace, big.schema(), [big.clone()])
                .expect("the replaced version is freed before the limit is checked");
        }
        assert_eq!(store.stats().memory_used, batch_bytes(&big));
    }

    #[test]
    fn memory_limit_refuses_put_and_keeps_previous_version() {
        let store = TableStore::new(100);
        let small = batch(&[1, 2, 3, 4, 5]); // 40 bytes
        store
            .put("t", WriteMode::Replace, small.schema(), [small.clone()])
            .unwrap();
        let big = batch(&[7; 8]); // 64 bytes: 40 + 64 > 100 while both are held
        let err = store
            .put("t", WriteMode::Replace, big.schema(), [big])
            .unwrap_err();
        assert!(
            matches!(err, StoreError::MemoryLimit { limit: 100, .. }),
            "{err}"
        );
        assert_eq!(values(&store.get("t").unwrap()), vec![1, 2, 3, 4, 5]);
        assert_eq!(store.memory().used(), 40);
        // Deleting frees the memory for the next put (which waits for the
        // free if it is still under way).
        store.remove("t").unwrap();
        store.memory().settle();
        assert_eq!(store.memory().used(), 0);
        let big = batch(&[7; 12]);
        store
            .put("t", WriteMode::Replace, big.schema(), [big])
            .unwrap();
    }

    #[test]
    fn table_limits_refuse_puts_and_appends_and_keep_the_table() {
        let limits = crate::TableLimits {
            max_table_rows: 6,
            max_table_bytes: 64,
            max_rows: 10,
        };
        let store = TableStore::new(1 << 20).with_limits(limits);
        let four = batch(&[1, 2, 3, 4]); // 4 rows, 32 bytes
        store
            .put("t", WriteMode::Replace, four.schema(), [four.clone()])
            .unwrap();
        let limit_of = |err: StoreError| match err {
            StoreError::TableLimit { limit, .. } => limit,
            other => panic!("not a table limit: {other}"),
        };
        // Append: 4 + 4 rows > 6.
        let err = store
            .put("t", WriteMode::Append, four.schema(), [four.clone()])
            .unwrap_err();
        assert!(err.to_string().contains("--max-table-rows"), "{err}");
        assert_eq!(limit_of(err), crate::Limit::TableRows);
        // Replace with 9 rows (72 bytes): over both; rows is reported first.
        let nine = batch(&[9; 9]);
        let err = store
            .put("t", WriteMode::Replace, nine.schema(), [nine])
            .unwrap_err();
        assert_eq!(limit_of(err), crate::Limit::TableRows);
        // Bytes alone.
        let store_bytes = TableStore::new(1 << 20).with_limits(crate::TableLimits {
            max_table_bytes: 40,
            ..crate::TableLimits::UNLIMITED
        });
        let err = store_bytes
            .put(
                "b",
                WriteMode::Replace,
                four.schema(),
                [four.clone(), four.clone()],
            )
            .unwrap_err();
        assert_eq!(limit_of(err), crate::Limit::TableBytes);
        assert!(store_bytes.get("b").is_err(), "nothing half-stored");
        // Total rows: 4 in t, 4 in u, 4 more in v > 10.
        store
            .put("u", WriteMode::Replace, four.schema(), [four.clone()])
            .unwrap();
        let err = store
            .put("v", WriteMode::Create, four.schema(), [four.clone()])
            .unwrap_err();
        assert!(err.to_string().contains("--max-rows"), "{err}");
        // Replacing a table counts its new rows, not old plus new.
        store
            .put("u", WriteMode::Replace, four.schema(), [batch(&[5, 6])])
            .unwrap();
        assert_eq!(values(&store.get("t").unwrap()), vec![1, 2, 3, 4]);
        assert_eq!(store.stats().rows, 6);
    }

    #[test]
    fn batches_taken_leave_the_writer_and_count_toward_the_limits() {
        let store = TableStore::new(1 << 20).with_limits(crate::TableLimits {
            max_table_rows: 10,
            max_table_bytes: 1 << 20,
            max_rows: 100,
        });
        let four = batch(&[1, 2, 3, 4]); // 4 rows, 32 bytes
        let mut writer = store
            .writer("t", WriteMode::Replace, four.schema(), None)
            .unwrap();
        writer.push(four.clone()).unwrap();
        writer.push(four.clone()).unwrap();
        let (taken, charge) = writer.take();
        assert_eq!((taken.len(), charge.bytes()), (2, 64));
        assert_eq!(
            store.memory().used(),
            64,
            "the charge went with the batches"
        );
        assert_eq!((writer.held_bytes(), writer.num_bytes()), (0, 64));
        drop(charge);
        assert_eq!(store.memory().used(), 0);
        // 8 rows taken + 4 > 10: the rows taken still count.
        let err = writer.push(four).unwrap_err();
        assert!(err.to_string().contains("--max-table-rows"), "{err}");
        assert_eq!(writer.num_rows(), 8);
    }

    #[test]
    fn table_limit_is_rechecked_at_commit() {
        let store = TableStore::new(1 << 20).with_limits(crate::TableLimits {
            max_rows: 6,
            ..crate::TableLimits::UNLIMITED
        });
        let four = batch(&[1, 2, 3, 4]);
        let mut a = store
            .writer("a", WriteMode::Replace, four.schema(), None)
            .unwrap();
        a.push(four.clone()).unwrap();
        store
            .put("b", WriteMode::Replace, four.schema(), [four.clone()])
            .unwrap();
        let err = a.commit().unwrap_err();
        assert!(err.to_string().contains("--max-rows"), "{err}");
        assert!(store.get("a").is_err());
        assert_eq!(
            store.memory().used(),
            32,
            "the refused write's memory is freed"
        );
    }

    #[test]
    fn append_shares_segments_and_charges_only_new_rows() {
        let store = TableStore::new(1 << 20);
        let b = batch(&[1, 2]);
        store
            .put("t", WriteMode::Replace, b.schema(), [b.clone()])
            .unwrap();
        store.put("t", WriteMode::Append, b.schema(), [b]).unwrap();
        assert_eq!(store.memory().used(), 32);
        assert_eq!(store.get("t").unwrap().num_bytes(), 32);
    }

    #[test]
    fn rename_moves_and_refuses_to_clobber() {
        let store = TableStore::new(1 << 20);
        let b = batch(&[1]);
        store
            .put("a", WriteMode::Replace, b.schema(), [b.clone()])
            .unwrap();
        store
            .put("b", WriteMode::Replace, b.schema(), [batch(&[2])])
            .unwrap();
        assert!(matches!(
            store.rename("a", "b", false),
            Err(StoreError::AlreadyExists { .. })
        ));
        assert_eq!(values(&store.get("b").unwrap()), vec![2]);
        store.rename("a", "c", false).unwrap();
        assert!(store.get("a").is_err());
        assert_eq!(values(&store.get("c").unwrap()), vec![1]);
        store.rename("c", "b", true).unwrap();
        assert_eq!(values(&store.get("b").unwrap()), vec![1]);
        assert!(matches!(
            store.rename("zz", "y", false),
            Err(StoreError::NotFound { .. })
        ));
    }

    /// Every table's name, version and rows (a version number changes with
    /// every write).
    fn snapshot(store: &TableStore) -> Vec<(String, u64, u64)> {
        store
            .list("")
            .iter()
            .map(|t| (t.name().to_string(), t.version(), t.num_rows()))
            .collect()
    }

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn publish_replace_moves_the_sources_segments_without_copying() {
        let store = TableStore::new(1 << 20);
        let b = batch(&[]);
        store
            .put("t", WriteMode::Replace, b.schema(), [batch(&[0])])
            .unwrap();
        store
            .put("a", WriteMode::Replace, b.schema(), [batch(&[1, 2])])
            .unwrap();
        store
            .put("a", WriteMode::Append, b.schema(), [batch(&[3])])
            .unwrap();
        store
            .put("b", WriteMode::Replace, b.schema(), [batch(&[4])])
            .unwrap();
        let (a, bb) = (store.get("a").unwrap(), store.get("b").unwrap());
        let before = store.get("t").unwrap().version();
        store.memory().settle();
        let used = store.memory().used();

        let published = store
            .publish("t", &names(&["b", "a"]), WriteMode::Replace, Some(3))
            .unwrap();
        assert_eq!(values(&published), [4, 1, 2, 3], "in the order given");
        assert!(published.version() > before);
        assert_eq!((published.num_rows(), published.num_bytes()), (4, 32));
        assert_eq!(published.partitions(), Some(3));
        assert_eq!(published.name(), "t");
        assert!(Arc::ptr_eq(&store.get("t").unwrap(), &published));
        // The very segments the sources held, not copies.
        let shared: Vec<_> = bb.segments().iter().chain(a.segments()).collect();
        assert_eq!(published.segments().len(), shared.len());
        for (p, s) in published.segments().iter().zip(shared) {
            assert!(Arc::ptr_eq(p, s));
        }
        assert!(matches!(store.get("a"), Err(StoreError::NotFound { .. })));
        assert!(matches!(store.get("b"), Err(StoreError::NotFound { .. })));
        assert_eq!(store.stats().tables, 1);
        // Nothing more is charged; t's old row is freed once readers let go.
        drop((a, bb));
        store.memory().settle();
        assert_eq!(store.memory().used(), used - 8);

        // Without partitions, a replace takes the server's default.
        store
            .put("c", WriteMode::Replace, b.schema(), [batch(&[5])])
            .unwrap();
        let plain = store
            .publish("t", &names(&["c"]), WriteMode::Replace, None)
            .unwrap();
        assert_eq!(plain.partitions(), None);
        assert_eq!(values(&plain), [5]);
    }

    #[test]
    fn publish_append_adds_after_the_target_and_keeps_its_partitions() {
        let store = TableStore::new(1 << 20);
        let b = batch(&[]);
        let mut writer = store
            .writer("t", WriteMode::Replace, b.schema(), Some(2))
            .unwrap();
        writer.push(batch(&[1, 2])).unwrap();
        writer.commit().unwrap();
        for (name, v) in [("p1", 3), ("p0", 4), ("p2", 5)] {
            store
                .put(name, WriteMode::Replace, b.schema(), [batch(&[v])])
                .unwrap();
        }
        let published = store
            .publish("t", &names(&["p1", "p0", "p2"]), WriteMode::Append, None)
            .unwrap();
        assert_eq!(values(&published), [1, 2, 3, 4, 5]);
        assert_eq!(published.partitions(), Some(2), "kept");
        assert_eq!(snapshot(&store).len(), 1);
        store
            .put("q", WriteMode::Replace, b.schema(), [batch(&[6])])
            .unwrap();
        let published = store
            .publish("t", &names(&["q"]), WriteMode::Append, Some(7))
            .unwrap();
        assert_eq!(published.partitions(), Some(7), "given");
        assert_eq!(values(&published), [1, 2, 3, 4, 5, 6]);
        // Create: only onto a free name.
        store
            .put("r", WriteMode::Replace, b.schema(), [batch(&[7])])
            .unwrap();
        assert!(matches!(
            store.publish("t", &names(&["r"]), WriteMode::Create, None),
            Err(StoreError::AlreadyExists { name }) if name == "t"
        ));
        let created = store
            .publish("new", &names(&["r"]), WriteMode::Create, None)
            .unwrap();
        assert_eq!(values(&created), [7]);
    }

    #[test]
    fn a_publish_that_fails_changes_nothing() {
        let limits = crate::TableLimits {
            max_table_rows: 5,
            ..crate::TableLimits::UNLIMITED
        };
        let store = TableStore::new(1 << 20).with_limits(limits);
        let b = batch(&[]);
        store
            .put("t", WriteMode::Replace, b.schema(), [batch(&[1, 2])])
            .unwrap();
        store
            .put("a", WriteMode::Replace, b.schema(), [batch(&[3, 4])])
            .unwrap();
        store
            .put("b", WriteMode::Replace, b.schema(), [batch(&[5, 6])])
            .unwrap();
        let strings =
            RecordBatch::try_from_iter([("x", Arc::new(StringArray::from(vec!["s"])) as ArrayRef)])
                .unwrap();
        store
            .put("s", WriteMode::Replace, strings.schema(), [strings])
            .unwrap();
        let before = snapshot(&store);
        let publish = |into: &str, sources: &[&str], mode| {
            let err = store
                .publish(into, &names(sources), mode, None)
                .unwrap_err();
            assert_eq!(snapshot(&store), before, "{err}");
            err
        };
        use WriteMode::{Append, Replace};

        let err = publish("t", &["a", "zz", "b"], Replace);
        assert!(
            matches!(&err, StoreError::NotFound { name } if name == "zz"),
            "{err}"
        );
        let err = publish("missing", &["a"], Append);
        assert!(
            matches!(&err, StoreError::NotFound { name } if name == "missing"),
            "{err}"
        );
        // A source unlike the first; a source unlike the target of an append.
        let err = publish("u", &["a", "s"], Replace);
        let message = err.to_string();
        assert!(
            matches!(err, StoreError::SchemaMismatch { .. }),
            "{message}"
        );
        assert!(
            message.contains("'s'") && message.contains("'a'"),
            "{message}"
        );
        let err = publish("t", &["s"], Append);
        let message = err.to_string();
        assert!(
            matches!(err, StoreError::SchemaMismatch { .. }),
            "{message}"
        );
        assert!(message.contains("column 'x' expected Int64"), "{message}");
        // Bad lists of sources and names.
        for (into, sources) in [
            ("t", &[][..]),
            ("t", &["a", "b", "a"][..]),
            ("t", &["a", "t"][..]),
        ] {
            let err = publish(into, sources, Replace);
            assert!(matches!(err, StoreError::InvalidSources { .. }), "{err}");
        }
        let err = publish(" t", &["a"], Replace);
        assert!(matches!(err, StoreError::InvalidName { .. }), "{err}");
        // Table limits: 2 + 2 + 2 rows > 5.
        let err = publish("t", &["a", "b"], Append);
        assert!(err.to_string().contains("--max-table-rows"), "{err}");
        // Under the limit it goes through.
        store.publish("t", &names(&["a"]), Append, None).unwrap();
        assert_eq!(values(&store.get("t").unwrap()), [1, 2, 3, 4]);
    }

    #[test]
    fn the_total_rows_limit_counts_a_publish_once() {
        let store = TableStore::new(1 << 20).with_limits(crate::TableLimits {
            max_rows: 6,
            ..crate::TableLimits::UNLIMITED
        });
        let b = batch(&[]);
        for name in ["a", "b", "c"] {
            store
                .put(name, WriteMode::Replace, b.schema(), [batch(&[1, 2])])
                .unwrap();
        }
        // 6 rows in all before and after: the sources' rows move.
        let published = store
            .publish("t", &names(&["a", "b", "c"]), WriteMode::Replace, None)
            .unwrap();
        assert_eq!(published.num_rows(), 6);
        assert_eq!(store.stats().rows, 6);
    }

    #[test]
    fn a_durable_publish_survives_a_restart_without_new_files() {
        let dir = tempfile::tempdir().unwrap();
        let options = DurableOptions {
            dir: dir.path().to_path_buf(),
            fsync: crate::Fsync::Always,
        };
        let segment_files = || {
            let mut names: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("seg-"))
                .collect();
            names.sort();
            names
        };
        let b = batch(&[]);
        let (version, files) = {
            let store = TableStore::open(&options, 1 << 20).unwrap();
            store
                .put("t", WriteMode::Replace, b.schema(), [batch(&[1])])
                .unwrap();
            store
                .put("old", WriteMode::Replace, b.schema(), [batch(&[0])])
                .unwrap();
            store
                .put("a", WriteMode::Replace, b.schema(), [batch(&[2, 3])])
                .unwrap();
            store
                .put("b", WriteMode::Replace, b.schema(), [batch(&[4])])
                .unwrap();
            let files = segment_files();
            assert_eq!(files.len(), 4);
            let published = store
                .publish("t", &names(&["a", "b"]), WriteMode::Append, Some(2))
                .unwrap();
            assert_eq!(segment_files(), files, "no file written or removed");
            // A failed publish writes nothing either.
            assert!(
                store
                    .publish("t", &names(&["nope"]), WriteMode::Append, None)
                    .is_err()
            );
            assert_eq!(segment_files(), files);
            store
                .publish("t", &names(&["old"]), WriteMode::Append, None)
                .unwrap();
            let version = store.get("t").unwrap().version();
            assert!(version > published.version());
            (version, files)
        };
        let store = TableStore::open(&options, 1 << 20).unwrap();
        let t = store.get("t").unwrap();
        assert_eq!(values(&t), [1, 2, 3, 4, 0]);
        assert_eq!(t.version(), version);
        assert_eq!(t.partitions(), Some(2));
        let listed: Vec<String> = store.list("").iter().map(|t| t.name().into()).collect();
        assert_eq!(listed, ["t"], "no sources left");
        assert_eq!(segment_files(), files);

        // Replace: the target's own files go, the sources' stay.
        store
            .put("c", WriteMode::Replace, b.schema(), [batch(&[9])])
            .unwrap();
        store
            .publish("t", &names(&["c"]), WriteMode::Replace, None)
            .unwrap();
        assert_eq!(segment_files().len(), 1);
        drop(store);
        let store = TableStore::open(&options, 1 << 20).unwrap();
        assert_eq!(values(&store.get("t").unwrap()), [9]);
        assert_eq!(store.stats().tables, 1);
    }

    #[test]
    fn list_filters_by_prefix_in_name_order() {
        let store = TableStore::new(1 << 20);
        let b = batch(&[1]);
        for name in ["taxi/2024", "taxi/2023", "weather", "tax"] {
            store
                .put(name, WriteMode::Replace, b.schema(), [b.clone()])
                .unwrap();
        }
        let names: Vec<String> = store
            .list("taxi/")
            .iter()
            .map(|t| t.name().to_string())
            .collect();
        assert_eq!(names, vec!["taxi/2023", "taxi/2024"]);
        assert_eq!(store.list("").len(), 4);
        let stats = store.stats();
        assert_eq!((stats.tables, stats.rows, stats.bytes), (4, 4, 32));
    }

    #[test]
    fn partitions_cover_every_row_once() {
        let store = TableStore::new(1 << 20);
        let b = batch(&[0, 1, 2, 3, 4, 5, 6]);
        store
            .put(
                "t",
                WriteMode::Replace,
                b.schema(),
                [b.clone(), batch(&[7, 8]), batch(&[]), batch(&[9])],
            )
            .unwrap();
        let table = store.get("t").unwrap();
        for count in 1..=12 {
            let mut all = Vec::new();
            for index in 0..count {
                for part in table.partition(index, count).unwrap() {
                    let col = part
                        .column(0)
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .unwrap();
                    all.extend(col.values().iter().copied());
                }
            }
            assert_eq!(all, (0..10).collect::<Vec<i64>>(), "count {count}");
        }
        assert!(matches!(
            table.partition(3, 3),
            Err(StoreError::InvalidPartition { .. })
        ));
    }
}

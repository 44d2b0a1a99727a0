//! A put through a cluster node: its rows cut into partitions, each stored
//! on its replicas, and published as the table's next version by one
//! catalog commit, or not at all.
//!
//! The node gathers a put's rows up to its put buffer
//! ([`ClusterNode::put_buffer`]). Each time they fill it, they become the
//! put's next partition, stored on its replicas in the background while the
//! next rows arrive, at most [`IN_FLIGHT`] at once; beyond that the put waits
//! for room, and gRPC's flow control slows the client down. At the commit,
//! the rows held are cut into as many partitions as the put asked for (one
//! per live node by default) less those shipped: a put that fits in the
//! buffer is spread evenly, and a node holds at most `IN_FLIGHT + 1` buffers
//! of one put, whatever its size. Each partition is named in the put's
//! intent before its first copy, so no node drops it as an orphan while the
//! put goes on.
//!
//! A put placed here (`"place": "here"`, an engine's task sent to a node of
//! its choosing) keeps each partition's first copy on this node and makes
//! one partition by default.
//!
//! Here too are the writes a put shares with the repair, the moves and the
//! compaction: a partition stored on its nodes with failover to the next
//! ([`ClusterNode::store_partition`]), and a commit to a table's entry,
//! retried over concurrent ones ([`ClusterNode::commit_table`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use quiver_flight::tables::TablePut;
use quiver_flight::{Placement, Published, PutOptions};
use quiver_store::{MemoryCharge, TableLimits, TableVersion, TableWriter, WriteMode, batch_bytes};
use tokio::task::JoinSet;

use crate::catalog::{
    IntentEntry, NodeEntry, PartitionEntry, RequestEntry, TableEntry, decode_schema, encode_schema,
    partition_name,
};
use crate::error::{ClusterError, Result, flight};
use crate::etcd::{Commit, Guard, Intent, Snapshot, Versioned};
use crate::node::ClusterNode;
use crate::placement::{Ring, replicas_for, split_rows};

/// Partitions of one put being stored at once, besides the one gathering.
const IN_FLIGHT: usize = 2;

/// The put buffer's bounds: an eighth of `--max-memory` between them.
const MIN_BUFFER: u64 = 16 << 20;
const MAX_BUFFER: u64 = 256 << 20;

/// The least a copy may lag behind the first of its partition before
/// another node is tried too ([`hedge_after`]), and the largest partition
/// for which it is: a larger one's copies take long enough that a node
/// found out by its missed pings costs them little, and a spare copy much.
const HEDGE_MIN: Duration = Duration::from_millis(250);
const HEDGE_BYTES: u64 = 4 << 20;

/// How many times a commit is tried again when another commit came first.
pub(crate) const COMMIT_ATTEMPTS: usize = 16;

/// How long the records of puts' request ids live, and how old the lease
/// they are written under may get before a new one is taken: a record
/// lives at least the difference, 5 minutes.
const REQUEST_TTL_S: i64 = 600;
const REQUEST_LEASE_RENEW: Duration = Duration::from_secs(300);

/// A partition of a put, placed and not yet stored.
pub(crate) struct Planned {
    pub(crate) entry: PartitionEntry,
    pub(crate) batches: Vec<RecordBatch>,
}

impl ClusterNode {
    /// The bytes of one put this node gathers before it ships them as a
    /// partition: an eighth of its memory limit, within 16 to 256 MiB.
    pub(crate) fn put_buffer(&self) -> u64 {
        (self.store.memory().limit() / 8).clamp(MIN_BUFFER, MAX_BUFFER)
    }

    /// Stores partition `name` (`bytes` in all) on `node` (this one or another).
    pub(crate) async fn store_on(
        &self,
        node: &NodeEntry,
        name: &str,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
        bytes: u64,
    ) -> Result<()> {
        if node.id == self.options.node_id {
            let store = Arc::clone(&self.store);
            let name = name.to_string();
            return tokio::task::spawn_blocking(move || {
                store
                    .put(&name, WriteMode::Replace, schema, batches)
                    .map(drop)
            })
            .await
            .map_err(|e| ClusterError::Invalid(format!("storing a partition: {e}")))?
            .map_err(ClusterError::from);
        }
        self.peers
            .put(&node.location, name, schema, batches, bytes)
            .await
            .map_err(|status| ClusterError::Replica {
                partition: name.to_string(),
                node: node.id.clone(),
                location: node.location.clone(),
                status: Box::new(status),
            })
    }

    /// Stores this node's copy `here` of partition `name` on `node` too.
    pub(crate) async fn copy_to(
        &self,
        node: &NodeEntry,
        name: &str,
        here: &TableVersion,
        bytes: u64,
    ) -> Result<()> {
        let batches = here.batches().cloned().collect();
        self.store_on(node, name, Arc::clone(here.schema()), batches, bytes)
            .await
    }

    /// The nodes new copies go to: the live ones, less those whose calls
    /// failed lately while enough others are left.
    pub(crate) fn placeable<'a>(&self, nodes: &'a Snapshot) -> Vec<&'a str> {
        let trusted: Vec<&str> = nodes
            .nodes
            .values()
            .filter(|n| !self.peers.is_suspect(&n.location))
            .map(|n| n.id.as_str())
            .collect();
        if trusted.len() >= self.options.replicas {
            trusted
        } else {
            nodes.nodes.keys().map(String::as_str).collect()
        }
    }

    /// Stores one partition on its planned nodes at once. A node that fails
    /// (down, out of memory, past its deadline) is replaced at once by the
    /// next live node for the partition that holds no copy, until the
    /// copies are made or no node is left. So is, for a partition of up to
    /// [`HEDGE_BYTES`] (an append's), a copy that lags behind the first
    /// ([`hedge_after`]): a frozen or cut-off node takes seconds to be found
    /// out, many times what the copy takes. The first copies made are the
    /// partition's; those still running then stop (one that finished anyway
    /// is an orphan, and collected). One bad node costs a put a retry, not a
    /// failure.
    pub(crate) async fn store_partition(
        &self,
        schema: &SchemaRef,
        planned: Planned,
        nodes: &Snapshot,
    ) -> Result<PartitionEntry> {
        let Planned { mut entry, batches } = planned;
        let (name, bytes, wanted) = (entry.name.as_str(), entry.bytes, entry.replicas.len());
        let store = |id: String| {
            let batches = batches.clone();
            async move {
                let node = nodes.nodes.get(&id).ok_or_else(|| {
                    ClusterError::Invalid(format!("node {id} left before the put"))
                })?;
                self.store_on(node, name, Arc::clone(schema), batches, bytes)
                    .await
                    .map(|()| id)
            }
        };
        let mut tried: HashSet<String> = entry.replicas.iter().cloned().collect();
        let mut next = || {
            let untried: Vec<&str> = self
                .placeable(nodes)
                .into_iter()
                .filter(|id| !tried.contains(*id))
                .collect();
            let next = replicas_for(name, untried, 1).pop()?;
            tried.insert(next.clone());
            Some(next)
        };
        let mut running: FuturesUnordered<_> = entry.replicas.iter().cloned().map(&store).collect();
        let started = Instant::now();
        let mut hedge_at: Option<Instant> = None;
        let mut holders = Vec::with_capacity(wanted);
        let mut failure = None;
        while holders.len() < wanted {
            if running.is_empty() {
                let Some(id) = next() else {
                    return Err(failure.unwrap_or(ClusterError::TooFewNodes {
                        live: nodes.nodes.len(),
                        replicas: self.options.replicas,
                    }));
                };
                running.push(store(id));
            }
            let lagging = async {
                match hedge_at {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some(done) = running.next() => match done {
                    Ok(id) => {
                        holders.push(id);
                        if bytes <= HEDGE_BYTES && hedge_at.is_none() {
                            hedge_at = Some(started + hedge_after(started.elapsed()));
                        }
                    }
                    Err(e) => {
                        tracing::warn!(partition = %name, "{e}; trying another node");
                        failure = Some(e);
                        if let Some(id) = next() {
                            running.push(store(id));
                        }
                    }
                },
                () = lagging => {
                    let waited = started.elapsed();
                    hedge_at = Some(Instant::now() + hedge_after(waited));
                    if let Some(id) = next() {
                        tracing::info!(
                            partition = %name,
                            node = %id,
                            "a copy lags {} ms behind the others; trying another node too",
                            waited.as_millis()
                        );
                        running.push(store(id));
                    }
                }
            }
        }
        // The copies still running stop.
        drop(running);
        // In the planned order, those that stood in after them: readers try
        // the first copy first, and the plan spreads the first copies.
        holders.sort_by_key(|id| {
            let planned = entry.replicas.iter().position(|planned| planned == id);
            planned.unwrap_or(usize::MAX)
        });
        entry.replicas = holders;
        Ok(entry)
    }

    /// Commits `change` to table `name`'s entry under `guard`, reading it
    /// again and retrying when another commit came first.
    pub(crate) async fn commit_table(
        &self,
        name: &str,
        guard: Guard<'_>,
        change: impl FnMut(Option<&TableEntry>) -> Result<Option<TableEntry>>,
    ) -> Result<Committed> {
        self.commit_table_from(name, None, guard, change).await
    }

    /// [`ClusterNode::commit_table`], trying first against `read`, the
    /// entry as read a moment ago (a put's snapshot): one read of etcd
    /// fewer on every put, and only a commit that came between costs one.
    pub(crate) async fn commit_table_from(
        &self,
        name: &str,
        mut read: Option<Versioned<TableEntry>>,
        guard: Guard<'_>,
        mut change: impl FnMut(Option<&TableEntry>) -> Result<Option<TableEntry>>,
    ) -> Result<Committed> {
        for _ in 0..COMMIT_ATTEMPTS {
            let Versioned {
                value: old,
                revision,
            } = match read.take() {
                Some(read) => read,
                None => self.etcd.table(name).await?,
            };
            let new = change(old.as_ref())?;
            match self
                .etcd
                .commit(&[(name, revision)], &[(name, new.as_ref())], guard)
                .await?
            {
                Commit::Done => return Ok(Committed::Changed(old, new)),
                Commit::Repeated(done) => return Ok(Committed::Repeated(done)),
                Commit::Lost => tracing::debug!(
                    table = name,
                    "commit lost to a concurrent one; trying again"
                ),
            }
        }
        Err(ClusterError::Conflict {
            table: name.to_string(),
            attempts: COMMIT_ATTEMPTS,
        })
    }

    /// The lease to record a request id under: taken anew once the last
    /// is [`REQUEST_LEASE_RENEW`] old.
    pub(crate) async fn requests_lease(&self) -> Result<i64> {
        let mut slot = self.requests_lease.lock().await;
        if let Some((lease, since)) = *slot
            && since.elapsed() < REQUEST_LEASE_RENEW
        {
            return Ok(lease);
        }
        let lease = self.etcd.lease(REQUEST_TTL_S).await?;
        *slot = Some((lease, Instant::now()));
        Ok(lease)
    }
}

/// A put of a cluster table through this node ([`TablePut`]).
pub(crate) struct CatalogPut<'a> {
    node: Arc<ClusterNode>,
    table: String,
    options: PutOptions,
    /// Reads, checks and charges the rows; never committed here.
    writer: TableWriter<'a>,
    buffer: u64,
    /// From the put's first shipment on: what it shipped.
    shipping: Option<Shipping>,
}

impl<'a> CatalogPut<'a> {
    pub(crate) fn new(
        node: Arc<ClusterNode>,
        table: &str,
        options: &PutOptions,
        writer: TableWriter<'a>,
    ) -> Self {
        Self {
            buffer: node.put_buffer(),
            node,
            table: table.to_string(),
            options: options.clone(),
            writer,
            shipping: None,
        }
    }

    /// Adds a batch charged `bytes`; ships the rows held once they fill
    /// the put buffer.
    pub(crate) async fn add(&mut self, batch: RecordBatch, bytes: u64) -> Result<()> {
        self.writer.push_charged(batch, bytes)?;
        if self.writer.held_bytes() < self.buffer {
            return Ok(());
        }
        let shipping = match &mut self.shipping {
            Some(shipping) => shipping,
            None => self.shipping.insert(self.begin().await?),
        };
        let (batches, charge) = self.writer.take();
        shipping.ship(batches, charge, 1).await
    }

    /// Ships the rows held, in as many partitions as the put asked for
    /// (one per live node by default, one placed here) less those shipped,
    /// one at least, and publishes the put once every partition is stored.
    pub(crate) async fn publish(mut self) -> Result<Published> {
        let mut shipping = match self.shipping.take() {
            Some(shipping) => shipping,
            None => self.begin().await?,
        };
        let asked = self.options.partitions.unwrap_or(match self.options.place {
            Placement::Spread => shipping.nodes.nodes.len(),
            Placement::Here => 1,
        });
        let count = asked.saturating_sub(shipping.planned.len()).max(1);
        let (batches, charge) = self.writer.take();
        let stored = match shipping.ship(batches, charge, count).await {
            Ok(()) => shipping.stored().await,
            Err(e) => Err(e),
        };
        shipping.publish(stored).await
    }

    async fn begin(&self) -> Result<Shipping> {
        Shipping::begin(
            Arc::clone(&self.node),
            self.table.clone(),
            &self.options,
            Arc::clone(self.writer.schema()),
        )
        .await
    }
}

#[tonic::async_trait]
impl TablePut for CatalogPut<'_> {
    async fn push_charged(&mut self, batch: RecordBatch, bytes: u64) -> quiver_flight::Result<()> {
        flight(self.add(batch, bytes).await)
    }

    fn num_rows(&self) -> u64 {
        self.writer.num_rows()
    }

    fn num_bytes(&self) -> u64 {
        self.writer.num_bytes()
    }

    async fn commit(self: Box<Self>) -> quiver_flight::Result<Published> {
        flight(self.publish().await)
    }
}

/// A put's partitions, from the catalog read it places them by to its
/// commit.
struct Shipping {
    node: Arc<ClusterNode>,
    table: String,
    mode: WriteMode,
    schema: SchemaRef,
    /// The catalog when the put began: the nodes it places on, and the
    /// table's entry it commits after.
    nodes: Arc<Snapshot>,
    read: Versioned<TableEntry>,
    /// The put's request id, and the lease its record lives under.
    request: Option<(String, i64)>,
    ring: Ring,
    /// The put's intent, from its first shipment until it is published or
    /// given up.
    intent: Option<Intent>,
    /// Every partition planned so far, in order, as planned.
    planned: Vec<PartitionEntry>,
    /// Those stored, by index, with the nodes that took their copies.
    stored: Vec<Option<PartitionEntry>>,
    /// The partitions being stored: their index and how it went.
    tasks: JoinSet<(usize, Result<PartitionEntry>)>,
}

impl Shipping {
    /// Begins a put of `table`: reads the catalog, and takes the lease its
    /// request id is recorded under.
    async fn begin(
        node: Arc<ClusterNode>,
        table: String,
        options: &PutOptions,
        schema: SchemaRef,
    ) -> Result<Self> {
        node.lease_for_write().await?;
        // A repeated request id is found by the commit, which records the
        // first: no read of its own on the path of every put.
        let nodes = node.etcd.snapshot().await?;
        let live = nodes.nodes.len();
        if live < node.options.replicas {
            return Err(ClusterError::TooFewNodes {
                live,
                replicas: node.options.replicas,
            });
        }
        let read = nodes.tables.get(&table).map_or(
            Versioned {
                value: None,
                revision: 0,
            },
            |(entry, revision)| Versioned {
                value: Some(entry.clone()),
                revision: *revision,
            },
        );
        let request = match &options.request {
            Some(id) => Some((id.clone(), node.requests_lease().await?)),
            None => None,
        };
        // Different puts start the ring at different nodes.
        let ring = Ring::new(
            &partition_name(&table, 0),
            node.placeable(&nodes),
            node.options.replicas,
        );
        let ring = match options.place {
            Placement::Spread => ring,
            Placement::Here => ring.first_on(&node.options.node_id),
        };
        Ok(Self {
            node,
            table,
            mode: options.mode,
            schema,
            nodes: Arc::new(nodes),
            read,
            request,
            ring,
            intent: None,
            planned: Vec::new(),
            stored: Vec::new(),
            tasks: JoinSet::new(),
        })
    }

    /// Stores `batches` as the put's next partitions (`count`, fewer if
    /// there are fewer rows) in the background, once fewer than
    /// [`IN_FLIGHT`] others are being stored. No rows make no partition,
    /// but for an empty put's one. Fails with the first partition that could
    /// not be stored, or when the put could not be committed.
    async fn ship(
        &mut self,
        batches: Vec<RecordBatch>,
        charge: MemoryCharge,
        count: usize,
    ) -> Result<()> {
        if batches.is_empty() && !self.planned.is_empty() {
            return Ok(());
        }
        while let Some(done) = self.tasks.try_join_next() {
            self.settle(done)?;
        }
        while self.tasks.len() >= IN_FLIGHT {
            match self.tasks.join_next().await {
                Some(done) => self.settle(done)?,
                None => break,
            }
        }
        let planned = self.plan(&batches, count);
        drop(batches);
        let first = self.planned.len();
        self.planned.extend(planned.iter().map(|p| p.entry.clone()));
        self.stored.resize(self.planned.len(), None);
        // The mode, the schema and the table's limits, over all shipped so
        // far: a put that cannot be committed stops at once.
        self.entry_after(self.read.value.as_ref(), self.planned.clone())?;
        let names: Vec<String> = self.planned.iter().map(|p| p.name.clone()).collect();
        match &self.intent {
            None => self.intent = Some(self.node.intend(&self.table, names).await?),
            Some(intent) => {
                let entry = IntentEntry {
                    table: self.table.clone(),
                    partitions: names,
                };
                let lease = self.node.lease_now()?;
                self.node.etcd.intend(&intent.key, &entry, lease).await?;
            }
        }
        let charge = Arc::new(charge);
        for (i, planned) in planned.into_iter().enumerate() {
            let (node, nodes) = (Arc::clone(&self.node), Arc::clone(&self.nodes));
            let (schema, charge) = (Arc::clone(&self.schema), Arc::clone(&charge));
            self.tasks.spawn(async move {
                let stored = node.store_partition(&schema, planned, &nodes).await;
                drop(charge);
                (first + i, stored)
            });
        }
        Ok(())
    }

    /// `batches` cut into `count` partitions (fewer if there are fewer
    /// rows), placed on the put's ring after those planned before.
    fn plan(&self, batches: &[RecordBatch], count: usize) -> Vec<Planned> {
        let rows = batches.iter().map(RecordBatch::num_rows).sum();
        let first = self.planned.len();
        split_rows(batches, rows, count.min(rows).max(1))
            .into_iter()
            .enumerate()
            .map(|(i, batches)| Planned {
                entry: PartitionEntry {
                    name: partition_name(&self.table, first + i),
                    rows: batches.iter().map(|b| b.num_rows() as u64).sum(),
                    bytes: batches.iter().map(batch_bytes).sum(),
                    replicas: self.ring.replicas(first + i),
                },
                batches,
            })
            .collect()
    }

    /// The table's entry with `partitions` put after `old`: checks the
    /// put's mode, schema and the table's limits.
    fn entry_after(
        &self,
        old: Option<&TableEntry>,
        partitions: Vec<PartitionEntry>,
    ) -> Result<TableEntry> {
        let limits = self.node.store.limits();
        next_entry(
            &self.table,
            old,
            self.mode,
            &self.schema,
            partitions,
            limits,
        )
    }

    /// Records how the storing of one partition ended.
    fn settle(
        &mut self,
        done: std::result::Result<(usize, Result<PartitionEntry>), tokio::task::JoinError>,
    ) -> Result<()> {
        let (index, stored) =
            done.map_err(|e| ClusterError::Invalid(format!("storing a partition: {e}")))?;
        let entry = stored?;
        if let Some(slot) = self.stored.get_mut(index) {
            *slot = Some(entry);
        }
        Ok(())
    }

    /// Waits for every partition to be stored; their entries, in order.
    async fn stored(&mut self) -> Result<Vec<PartitionEntry>> {
        while let Some(done) = self.tasks.join_next().await {
            self.settle(done)?;
        }
        self.stored
            .iter()
            .cloned()
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ClusterError::Invalid("a partition of the put was not stored".into()))
    }

    /// Commits the partitions the put `stored` (unless it failed) under its
    /// intent, which ends either way.
    async fn publish(mut self, stored: Result<Vec<PartitionEntry>>) -> Result<Published> {
        let intent = self.intent.take();
        let result = async {
            let partitions = stored?;
            let intent = intent.as_ref().ok_or_else(|| {
                ClusterError::Invalid("a put stored partitions under no intent".into())
            })?;
            let guard = Guard {
                intent: Some(intent),
                request: (self.request.as_ref()).map(|(id, lease)| (id.as_str(), *lease)),
            };
            let count = partitions.len();
            let read = Some(self.read.clone());
            self.node
                .commit_table_from(&self.table, read, guard, |old| {
                    self.entry_after(old, partitions.clone()).map(Some)
                })
                .await
                .map(|committed| (count, committed))
        }
        .await;
        if let Some(intent) = &intent {
            let applied = matches!(result, Ok((_, Committed::Changed(..))));
            self.node.abandon(intent, applied).await;
        }
        match result? {
            (_, Committed::Repeated(done)) => {
                let id = self.request.as_ref().map_or("", |(id, _)| id.as_str());
                tracing::info!(table = %self.table, request = %id, "a repeated put: answered, not applied");
                repeated(&self.table, id, done)
            }
            (partitions, Committed::Changed(_, new)) => {
                let new = new.ok_or_else(|| ClusterError::Invalid("nothing committed".into()))?;
                tracing::info!(
                    table = %self.table,
                    version = new.version,
                    partitions,
                    rows = new.rows,
                    "published"
                );
                Ok(published(&new))
            }
        }
    }
}

impl Drop for Shipping {
    /// A put dropped before it ended (its client broke off, a batch was
    /// refused): the copies being made stop (the tasks are aborted with
    /// the set), and the intent goes, so that its partitions are collected.
    fn drop(&mut self) {
        let Some(intent) = self.intent.take() else {
            return;
        };
        let node = Arc::clone(&self.node);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(async move { node.abandon(&intent, false).await })),
            // No runtime to delete it on: the upkeep deletes it.
            Err(_) => drop(node.lock_intents().remove(&intent.key)),
        }
    }
}

/// How long the copies of a partition still running may lag once one is
/// made in `first`: twice that again, and [`HEDGE_MIN`] at least (a copy
/// of a few rows takes milliseconds; one of hundreds of MiB, seconds).
fn hedge_after(first: Duration) -> Duration {
    (first * 3).max(first + HEDGE_MIN)
}

/// How a [`ClusterNode::commit_table`] ended.
#[derive(Debug)]
pub(crate) enum Committed {
    /// The table's entry before and after.
    Changed(Option<TableEntry>, Option<TableEntry>),
    /// A put with the same request id was committed before: its record.
    Repeated(RequestEntry),
}

impl Committed {
    /// The entries before and after, of a commit that carried no request id.
    pub(crate) fn changed(self) -> Result<(Option<TableEntry>, Option<TableEntry>)> {
        match self {
            Self::Changed(old, new) => Ok((old, new)),
            Self::Repeated(_) => Err(ClusterError::Invalid(
                "a commit without a request id was taken for a repeated one".into(),
            )),
        }
    }
}

/// What a put repeated with request id `id` answers: what the first put
/// with it published, if it was of the same table.
pub(crate) fn repeated(table: &str, id: &str, done: RequestEntry) -> Result<Published> {
    if done.table != table {
        return Err(ClusterError::Invalid(quiver_flight::cluster::reused(
            id,
            &done.table,
        )));
    }
    Ok(Published {
        version: done.version,
        rows: done.rows,
        bytes: done.bytes,
    })
}

/// The entry of a table made of `partitions` after `old`, whose fields must
/// match `schema` to be appended to.
pub(crate) fn next_entry(
    name: &str,
    old: Option<&TableEntry>,
    mode: WriteMode,
    schema: &SchemaRef,
    partitions: Vec<PartitionEntry>,
    limits: &TableLimits,
) -> Result<TableEntry> {
    let mut all = Vec::new();
    match (mode, old) {
        (WriteMode::Append, None) => return Err(ClusterError::NotFound(name.to_string())),
        (WriteMode::Append, Some(old)) => {
            let stored = decode_schema(&old.schema)?;
            if stored.fields() != schema.fields() {
                return Err(ClusterError::Invalid(format!(
                    "cannot append to table '{name}': its schema is {stored}, the put's is {schema}"
                )));
            }
            all.extend(old.partitions.iter().cloned());
        }
        (WriteMode::Create, Some(_)) => return Err(ClusterError::AlreadyExists(name.to_string())),
        (WriteMode::Create | WriteMode::Replace, _) => {}
    }
    all.extend(partitions);
    let rows = all.iter().map(|p| p.rows).sum();
    let bytes = all.iter().map(|p| p.bytes).sum();
    limits.check_table(name, rows, bytes)?;
    Ok(TableEntry {
        version: old.map_or(0, |o| o.version) + 1,
        schema: match (mode, old) {
            (WriteMode::Append, Some(old)) => old.schema.clone(),
            _ => encode_schema(schema)?,
        },
        rows,
        bytes,
        partitions: all,
        written_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    })
}

pub(crate) fn published(entry: &TableEntry) -> Published {
    Published {
        version: entry.version,
        rows: entry.rows,
        bytes: entry.bytes,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use arrow::array::{Array, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};
    use quiver_store::TableStore;
    use tonic::Status;

    use super::*;
    use crate::testing;

    /// Rows of one 1 MiB batch.
    const ROWS: i64 = 1 << 17;

    /// A node over `etcd` whose store may hold 128 MiB: a 16 MiB put buffer.
    async fn node(etcd: &quiver_etcd::testing::TestEtcd) -> Arc<ClusterNode> {
        let store = Arc::new(TableStore::new(128 << 20));
        let node = ClusterNode::join(testing::options(etcd, "n1"), store)
            .await
            .expect("the node joins");
        assert_eq!(node.put_buffer(), 16 << 20);
        node
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]))
    }

    /// The `i`th 1 MiB batch: values `i * ROWS..(i + 1) * ROWS`.
    fn batch(i: i64) -> RecordBatch {
        let values = Int64Array::from_iter_values(i * ROWS..(i + 1) * ROWS);
        RecordBatch::try_new(schema(), vec![Arc::new(values)]).expect("a batch")
    }

    /// A put of table `t` through `node`, as `mode`.
    fn open(node: &Arc<ClusterNode>, mode: WriteMode) -> CatalogPut<'_> {
        let writer = node
            .store
            .writer("t", WriteMode::Replace, schema(), None)
            .expect("a writer");
        let options = PutOptions {
            mode,
            ..PutOptions::default()
        };
        CatalogPut::new(Arc::clone(node), "t", &options, writer)
    }

    /// The partitions named by the intents in the catalog.
    async fn intended(node: &ClusterNode) -> Vec<String> {
        let snapshot = node.etcd.snapshot().await.expect("a snapshot");
        snapshot
            .intents
            .into_values()
            .flat_map(|i| i.partitions)
            .collect()
    }

    #[tokio::test]
    async fn a_put_past_the_buffer_is_shipped_as_it_arrives_and_published_whole() {
        let Some((etcd, _)) = testing::etcd().await else {
            return;
        };
        let node = node(&etcd).await;
        let mut put = open(&node, WriteMode::Replace);
        for i in 0..40 {
            put.push(batch(i)).await.expect("a push");
            // Held: never more than a buffer; shipped: named in the intent
            // before its copy is made.
            assert!(put.writer.held_bytes() < 16 << 20);
            if i == 20 {
                assert_eq!(intended(&node).await.len(), 1);
                assert!(node.etcd.snapshot().await.unwrap().tables.is_empty());
            }
        }
        let published = put.publish().await.expect("the commit");
        assert_eq!(published.rows, 40 * ROWS as u64);
        let snapshot = node.etcd.snapshot().await.unwrap();
        assert!(snapshot.intents.is_empty(), "{:?}", snapshot.intents);
        assert!(node.lock_intents().is_empty());
        let (entry, _) = &snapshot.tables["t"];
        let rows: Vec<u64> = entry.partitions.iter().map(|p| p.rows).collect();
        assert_eq!(rows, [16, 16, 8].map(|b| b * ROWS as u64));
        // Every row once, in order, across the partitions.
        let mut next = 0;
        for part in &entry.partitions {
            for batch in node.store.get(&part.name).unwrap().batches() {
                let values = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap();
                assert!(values.values().iter().all(|v| {
                    next += 1;
                    *v == next - 1
                }));
            }
        }
        assert_eq!(next, 40 * ROWS);
        // Only the stored partitions are charged: no buffer is left over.
        assert_eq!(node.store.memory().used(), 40 << 20);
    }

    #[tokio::test]
    async fn a_put_dropped_while_shipping_ends_its_intent_and_publishes_nothing() {
        let Some((etcd, _)) = testing::etcd().await else {
            return;
        };
        let node = node(&etcd).await;
        let mut put = open(&node, WriteMode::Replace);
        for i in 0..20 {
            put.push(batch(i)).await.expect("a push");
        }
        assert_eq!(intended(&node).await.len(), 1);
        drop(put);
        for _ in 0..50 {
            if intended(&node).await.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(intended(&node).await.is_empty());
        assert!(node.lock_intents().is_empty());
        assert!(node.etcd.snapshot().await.unwrap().tables.is_empty());
    }

    #[tokio::test]
    async fn a_put_refused_by_the_catalog_stops_at_its_first_shipment() {
        let Some((etcd, _)) = testing::etcd().await else {
            return;
        };
        let node = node(&etcd).await;
        // An append to a table that does not exist: refused when the first
        // buffer is shipped, not after the whole put has arrived.
        let mut put = open(&node, WriteMode::Append);
        let mut refused = None;
        for i in 0..20 {
            if let Err(e) = put.push(batch(i)).await {
                refused = Some((i, e));
                break;
            }
        }
        let (at, error) = refused.expect("the append is refused");
        assert_eq!(at, 15, "{error}");
        assert!(error.to_string().contains("not found"), "{error}");
    }

    fn schema_of(kind: DataType) -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("v", kind, false)]))
    }

    /// [`next_entry`] without limits.
    fn next(
        name: &str,
        old: Option<&TableEntry>,
        mode: WriteMode,
        schema: &SchemaRef,
        partitions: Vec<PartitionEntry>,
    ) -> Result<TableEntry> {
        next_entry(name, old, mode, schema, partitions, &TableLimits::UNLIMITED)
    }

    fn part(name: &str, rows: u64) -> PartitionEntry {
        PartitionEntry {
            name: name.into(),
            rows,
            bytes: rows * 8,
            replicas: vec!["n1".into()],
        }
    }

    #[test]
    fn versions_follow_the_write_mode() {
        let int = schema_of(DataType::Int64);
        let first = next("t", None, WriteMode::Create, &int, vec![part("a", 3)]).unwrap();
        assert_eq!((first.version, first.rows), (1, 3));
        let appended = next(
            "t",
            Some(&first),
            WriteMode::Append,
            &int,
            vec![part("b", 2)],
        )
        .unwrap();
        assert_eq!((appended.version, appended.rows), (2, 5));
        assert_eq!(appended.partitions.len(), 2);
        let replaced = next(
            "t",
            Some(&appended),
            WriteMode::Replace,
            &int,
            vec![part("c", 1)],
        )
        .unwrap();
        assert_eq!((replaced.version, replaced.rows), (3, 1));
        assert!(matches!(
            next("t", Some(&first), WriteMode::Create, &int, vec![]),
            Err(ClusterError::AlreadyExists(_))
        ));
        assert!(matches!(
            next("t", None, WriteMode::Append, &int, vec![]),
            Err(ClusterError::NotFound(_))
        ));
        let text = schema_of(DataType::Utf8);
        assert!(matches!(
            next("t", Some(&first), WriteMode::Append, &text, vec![]),
            Err(ClusterError::Invalid(_))
        ));
    }

    #[test]
    fn table_limits_bound_the_whole_table_across_appends() {
        let int = schema_of(DataType::Int64);
        for (limits, flag) in [
            (
                TableLimits {
                    max_table_rows: 5,
                    ..TableLimits::UNLIMITED
                },
                "--max-table-rows",
            ),
            (
                TableLimits {
                    max_table_bytes: 40,
                    ..TableLimits::UNLIMITED
                },
                "--max-table-bytes",
            ),
        ] {
            let create = |parts| next_entry("t", None, WriteMode::Create, &int, parts, &limits);
            let first = create(vec![part("a", 3)]).unwrap();
            let append =
                |parts| next_entry("t", Some(&first), WriteMode::Append, &int, parts, &limits);
            assert_eq!(append(vec![part("b", 2)]).unwrap().rows, 5);
            let err = append(vec![part("b", 3)]).unwrap_err();
            assert!(err.to_string().contains(flag), "{err}");
            assert_eq!(Status::from(err).code(), tonic::Code::ResourceExhausted);
            // Each partition alone is within the limit; together they are not.
            assert!(create(vec![part("a", 3), part("b", 3)]).is_err());
        }
    }

    #[tokio::test]
    async fn a_put_commits_under_its_intent_and_leaves_none_behind() {
        let Some((etcd, _)) = testing::etcd().await else {
            return;
        };
        let node = testing::node(&etcd, "n1").await;
        let published = testing::put(&node, "t", WriteMode::Replace, 10)
            .await
            .unwrap();
        assert_eq!((published.version, published.rows), (1, 10));
        let snapshot = node.etcd.snapshot().await.unwrap();
        assert!(snapshot.intents.is_empty(), "{:?}", snapshot.intents);
        assert!(node.lock_intents().is_empty());
        let (entry, _) = &snapshot.tables["t"];
        let stored = node.store.get(&entry.partitions[0].name).unwrap();
        assert_eq!(stored.num_rows(), 10);
    }

    #[tokio::test]
    async fn a_put_repeated_with_its_request_id_is_answered_not_applied() {
        let Some((etcd, _)) = testing::etcd().await else {
            return;
        };
        let node = testing::node(&etcd, "n1").await;
        let append = |id| testing::put_values(&node, "t", WriteMode::Append, 0..5, Some(id));
        testing::put(&node, "t", WriteMode::Replace, 10)
            .await
            .unwrap();
        let first = append("r1").await.unwrap();
        assert_eq!((first.version, first.rows), (2, 15));
        assert_eq!(append("r1").await.unwrap(), first);
        let entry = node.etcd.table("t").await.unwrap().value.unwrap();
        assert_eq!((entry.version, entry.rows), (2, 15));
        let second = append("r2").await.unwrap();
        assert_eq!((second.version, second.rows), (3, 20));
        let elsewhere = testing::put_values(&node, "u", WriteMode::Replace, 0..1, Some("r1"))
            .await
            .unwrap_err();
        let elsewhere = Status::from(elsewhere);
        assert_eq!(elsewhere.code(), tonic::Code::InvalidArgument);
        assert!(
            elsewhere.message().contains("request id 'r1'"),
            "{elsewhere}"
        );
        // The records are not part of what every node reads four times a second.
        let snapshot = node.etcd.snapshot().await.unwrap();
        assert_eq!(snapshot.tables.len(), 1);
    }

    #[tokio::test]
    async fn two_puts_with_one_request_id_at_once_apply_once() {
        let Some((etcd, _)) = testing::etcd().await else {
            return;
        };
        let node = testing::node(&etcd, "n1").await;
        testing::put(&node, "t", WriteMode::Replace, 10)
            .await
            .unwrap();
        let append = || testing::put_values(&node, "t", WriteMode::Append, 0..5, Some("r"));
        let (a, b) = tokio::join!(append(), append());
        assert_eq!(a.unwrap(), b.unwrap());
        let entry = node.etcd.table("t").await.unwrap().value.unwrap();
        assert_eq!(entry.rows, 15);
    }

    #[tokio::test]
    async fn a_commit_whose_intent_is_gone_publishes_nothing() {
        let Some((etcd, client)) = testing::etcd().await else {
            return;
        };
        let node = testing::node(&etcd, "n1").await;
        let intent = node.intend("t", vec!["p".into()]).await.unwrap();
        assert_eq!(node.etcd.snapshot().await.unwrap().intended().len(), 1);
        // As when the node's lease ends while it copies.
        client.delete(intent.key.as_str()).await.unwrap();
        let int = schema_of(DataType::Int64);
        let guard = Guard {
            intent: Some(&intent),
            request: None,
        };
        let result = node
            .commit_table("t", guard, |old| {
                next("t", old, WriteMode::Replace, &int, vec![part("p", 1)]).map(Some)
            })
            .await;
        assert!(matches!(result, Err(ClusterError::Fenced)), "{result:?}");
        assert!(node.etcd.table("t").await.unwrap().value.is_none());
        assert_eq!(
            Status::from(ClusterError::Fenced).code(),
            tonic::Code::Unavailable
        );
    }
}

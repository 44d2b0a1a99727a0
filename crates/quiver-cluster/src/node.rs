//! A node of the cluster, over the catalog in etcd and the node's own
//! store. What the Flight service asks of it is in [`crate::hooks`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use quiver_flight::Published;
use quiver_flight::tables::{NodeLocation, TableRead};
use quiver_flight::ticket::TableTicket;
use quiver_store::{TableLimits, TableStore, TableVersion, WriteMode};
use serde_json::json;

use crate::catalog::{
    IntentEntry, NodeEntry, PartitionEntry, RequestEntry, TableEntry, decode_schema, encode_schema,
};
use crate::error::{ClusterError, Result};
use crate::etcd::{Commit, Etcd, EtcdConfig, Guard, Intent, Snapshot, Versioned};
use crate::peers::Peers;
use crate::placement::replicas_for;
use crate::put::Planned;
use crate::reads::Reads;
use crate::sql::ClusterSql;

/// The least a copy may lag behind the first of its partition before
/// another node is tried too ([`hedge_after`]), and the largest partition
/// for which it is: a larger one's copies take long enough that a node
/// found out by its missed pings costs them little, and a spare copy much.
const HEDGE_MIN: Duration = Duration::from_millis(250);
const HEDGE_BYTES: u64 = 4 << 20;

/// How long a write waits for etcd to renew the node's lease when the
/// node is unsure of it, and how long after an unanswered ask the next
/// write is refused without asking ([`ClusterNode::lease_for_write`]).
const RENEW_ON_WRITE_AFTER: Duration = Duration::from_millis(500);

/// Where a node stands with its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Standing {
    /// etcd renewed it, and its time has not run out since.
    Held,
    /// etcd has not answered since the lease's time ran out: it may well
    /// be alive (etcd keeps leases over a restart), and is renewed once
    /// etcd answers.
    Unsure,
    /// etcd said it expired: the node registers again under a new one.
    Lost,
}

impl From<u8> for Standing {
    fn from(value: u8) -> Self {
        match value {
            0 => Self::Held,
            1 => Self::Unsure,
            _ => Self::Lost,
        }
    }
}

/// How many times a commit is tried again when another commit came first.
const COMMIT_ATTEMPTS: usize = 16;

/// How long the records of puts' request ids live, and how old the lease
/// they are written under may get before a new one is taken: a record
/// lives at least the difference, 5 minutes.
const REQUEST_TTL_S: i64 = 600;
const REQUEST_LEASE_RENEW: Duration = Duration::from_secs(300);

/// How often a node starting with an id still registered tries again
/// (the key of its own previous run, killed, lasts until its lease ends).
const REGISTER_RETRY: Duration = Duration::from_millis(250);

/// How a node joins and behaves in the cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// The catalog: etcd's endpoints, the keys' prefix, TLS and user.
    pub etcd: EtcdConfig,
    /// This node's id, unique in the cluster and the same across restarts.
    pub node_id: String,
    /// The location clients and other nodes reach this node at.
    pub location: String,
    /// TLS to the other nodes (their locations are `grpc+tls://`): the CA
    /// their certificates chain to, and this node's certificate for nodes
    /// that check their clients'.
    pub peer_tls: Option<quiver_etcd::Tls>,
    /// Copies of each partition.
    pub replicas: usize,
    /// The node's lease: how long after its last renewal the cluster
    /// takes it for lost.
    pub lease_ttl: Duration,
    /// How often the node reads the catalog, repairs under-replicated
    /// partitions it is responsible for and drops partitions no version holds.
    pub repair_every: Duration,
    /// How old a partition no version holds must be before it is dropped (a
    /// put's partitions are stored before their version is published).
    pub orphan_grace: Duration,
    /// How long the partitions handed to a reader (a table's endpoints, a
    /// query's plan) are kept after their version is replaced: the query
    /// timeout, so that no query loses what it planned over.
    pub read_hold: Duration,
    /// How many of etcd's latest revisions are kept: the first node by id
    /// compacts the history before them ([`crate::history`])...
    pub history_keep: i64,
    /// ...at most this often.
    pub compact_every: Duration,
    /// A table with more partitions than this has its runs of small ones
    /// merged ([`crate::compact`]), so that its catalog entry, and what a
    /// commit costs, stop growing with every append.
    pub compact_above: usize,
}

/// The catalog as a node last read it ([`Snapshot`], which it derefs to),
/// and the deletes the watch brought since.
#[derive(Debug)]
pub(crate) struct Cache {
    snapshot: Snapshot,
    /// Tables the watch brought deleted, at their deletes' revisions: kept
    /// until a catalog read as new as the delete, so that a read begun
    /// before it does not bring the table back.
    pub(crate) deleted: BTreeMap<String, i64>,
}

impl std::ops::Deref for Cache {
    type Target = Snapshot;

    fn deref(&self) -> &Snapshot {
        &self.snapshot
    }
}

/// This node's part in the cluster.
#[derive(Debug)]
pub struct ClusterNode {
    pub(crate) options: ClusterOptions,
    pub(crate) store: Arc<TableStore>,
    pub(crate) etcd: Etcd,
    pub(crate) peers: Peers,
    /// The catalog as last read: the fallback when etcd is unreachable.
    pub(crate) cache: RwLock<Cache>,
    /// The node's current lease (`None` once it left).
    pub(crate) lease: Mutex<Option<i64>>,
    /// Whether that lease is held now, as a [`Standing`]: the node takes
    /// writes while it is [`Standing::Held`].
    standing: AtomicU8,
    /// One renewal at a time by a write that found the node unsure of its
    /// lease ([`ClusterNode::lease_for_write`]), and when the last such
    /// renewal went unanswered.
    renewing: tokio::sync::Mutex<Option<Instant>>,
    /// Until when the lease surely lasts: its last answered renewal's ask
    /// plus the TTL etcd named, whoever renewed it (the lease's own
    /// renewal or a write). Past it, while etcd does not answer, the node
    /// is [`Standing::Unsure`].
    sure_until: Mutex<Instant>,
    /// The keys of this node's intents in flight: any other intent of this
    /// node in the catalog is left over from a failed put, and deleted.
    pub(crate) intents: Mutex<HashSet<String>>,
    /// The lease the records of request ids are written under, and since when.
    requests_lease: tokio::sync::Mutex<Option<(i64, Instant)>>,
    /// Local partitions no version held when last looked, and since when.
    pub(crate) orphans: Mutex<HashMap<String, Instant>>,
    /// When the upkeep last looked for orphans.
    pub(crate) collected: Mutex<Option<Instant>>,
    /// When this node last compacted etcd's history.
    pub(crate) compacted: Mutex<Option<Instant>>,
    /// The partitions this node handed to readers.
    pub(crate) reads: Reads,
    /// Distributed SQL over the cluster's tables.
    pub(crate) sql: ClusterSql,
}

impl ClusterNode {
    /// Joins the cluster: registers under a lease and reads the catalog.
    /// Fails if etcd cannot be reached now. The caller starts the
    /// background work with [`ClusterNode::spawn_background`].
    pub async fn join(options: ClusterOptions, store: Arc<TableStore>) -> Result<Arc<Self>> {
        if options.replicas == 0 {
            return Err(ClusterError::Invalid(
                "--replicas must be at least 1".into(),
            ));
        }
        quiver_flight::auth::validate_node_id(&options.node_id).map_err(ClusterError::Invalid)?;
        let etcd = Etcd::connect(&options.etcd)?;
        // Before registering: a node that cannot sign its calls must not
        // receive copies.
        let key = quiver_flight::auth::NodeKey::new(&etcd.secret().await?, &options.node_id)
            .map_err(|e| ClusterError::Malformed {
                key: "the cluster secret".into(),
                detail: e.to_string(),
            })?;
        let lease = first_registration(&etcd, &options).await?;
        let snapshot = etcd.snapshot().await?;
        tracing::info!(
            node = %options.node_id,
            location = %options.location,
            nodes = snapshot.nodes.len(),
            tables = snapshot.tables.len(),
            "joined the cluster"
        );
        let peers = Peers::new(key, options.peer_tls.clone(), options.lease_ttl);
        Ok(Arc::new_cyclic(|me| Self {
            sql: ClusterSql::new(
                me.clone(),
                options.node_id.clone(),
                options.location.clone(),
                Arc::clone(&store),
                peers.clone(),
            ),
            options,
            store,
            etcd,
            peers,
            cache: RwLock::new(Cache {
                snapshot,
                deleted: BTreeMap::new(),
            }),
            lease: Mutex::new(Some(lease)),
            standing: AtomicU8::new(Standing::Held as u8),
            renewing: tokio::sync::Mutex::new(None),
            // Nothing is known of the lease before its first renewal.
            sure_until: Mutex::new(Instant::now()),
            intents: Mutex::new(HashSet::new()),
            requests_lease: tokio::sync::Mutex::new(None),
            orphans: Mutex::new(HashMap::new()),
            collected: Mutex::new(None),
            compacted: Mutex::new(None),
            reads: Reads::default(),
        }))
    }

    /// The live nodes, to find `entry`'s replicas among: as last read (a
    /// tick ago), read again only when a replica is one this node has not
    /// seen yet (it joined since).
    async fn replicas_of(&self, entry: &TableEntry) -> BTreeMap<String, NodeEntry> {
        let nodes = self
            .cache
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .nodes
            .clone();
        let unseen = entry
            .partitions
            .iter()
            .flat_map(|p| &p.replicas)
            .any(|id| !nodes.contains_key(id));
        if unseen {
            return self.snapshot().await.nodes;
        }
        nodes
    }

    /// Leaves the cluster at once (a clean shutdown): revokes the lease, so
    /// the others repair without waiting for it to expire.
    pub async fn leave(&self) {
        let lease = self
            .lease
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(lease) = lease
            && let Err(e) = self.etcd.revoke(lease).await
        {
            tracing::warn!("leaving the cluster: {e}");
        }
    }

    /// The lease to write under, or [`ClusterError::NotRegistered`] while
    /// the node does not hold one it knows of (it lost it and has not
    /// registered again, or etcd has not answered since the lease's time
    /// ran out).
    pub(crate) fn lease_now(&self) -> Result<i64> {
        let lease = *self.lease.lock().unwrap_or_else(PoisonError::into_inner);
        match lease {
            Some(lease) if self.standing() == Standing::Held => Ok(lease),
            _ => Err(ClusterError::NotRegistered),
        }
    }

    /// The lease a write begins under: [`ClusterNode::lease_now`], but
    /// when the node is unsure of its lease (etcd was away for longer than
    /// the lease), it asks etcd to renew it first. So the first write
    /// after etcd is back is taken, instead of refused until the lease's
    /// own renewal comes round. One write asks at a time; writes within
    /// [`RENEW_ON_WRITE_AFTER`] of an unanswered ask are refused at once.
    pub(crate) async fn lease_for_write(&self) -> Result<i64> {
        if let Ok(lease) = self.lease_now() {
            return Ok(lease);
        }
        let lease = *self.lease.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(lease) = lease.filter(|_| self.standing() == Standing::Unsure) else {
            return Err(ClusterError::NotRegistered);
        };
        let mut unanswered = self.renewing.lock().await;
        if let Ok(lease) = self.lease_now() {
            return Ok(lease);
        }
        if unanswered.is_some_and(|at| at.elapsed() < RENEW_ON_WRITE_AFTER) {
            return Err(ClusterError::NotRegistered);
        }
        let asked = Instant::now();
        match tokio::time::timeout(RENEW_ON_WRITE_AFTER, self.etcd.renew(lease)).await {
            Ok(Ok(Some(ttl))) => {
                *unanswered = None;
                self.renewed(asked, ttl);
                self.stand_from(Standing::Unsure, Standing::Held);
                tracing::info!(node = %self.options.node_id, "cluster lease renewed by a write; still registered");
            }
            // Expired: the lease's own renewal finds it so, and registers again.
            Ok(Ok(None)) => *unanswered = None,
            Ok(Err(_)) | Err(_) => *unanswered = Some(Instant::now()),
        }
        self.lease_now()
    }

    /// Records a renewal etcd answered: asked at `asked`, for `ttl`.
    pub(crate) fn renewed(&self, asked: Instant, ttl: Duration) {
        let mut until = self
            .sure_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *until = (*until).max(asked + ttl);
    }

    /// Takes a held lease for unsure once it is past its last renewal's
    /// TTL (while etcd does not answer).
    pub(crate) fn doubt_lapsed_lease(&self) {
        let until = *self
            .sure_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if Instant::now() >= until {
            self.stand_from(Standing::Held, Standing::Unsure);
        }
    }

    /// Where the node stands with its lease.
    pub(crate) fn standing(&self) -> Standing {
        Standing::from(self.standing.load(Ordering::Acquire))
    }

    /// Sets where the node stands with its lease.
    pub(crate) fn stand(&self, standing: Standing) {
        self.standing.store(standing as u8, Ordering::Release);
    }

    /// Sets `to` if the node stands at `from` (a renewal by a write must
    /// not undo what the lease's own renewal found meanwhile).
    pub(crate) fn stand_from(&self, from: Standing, to: Standing) {
        let _ = self.standing.compare_exchange(
            from as u8,
            to as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Holds `entry`'s copies for a reader: no node drops the copies the
    /// entry lists for [`ClusterOptions::read_hold`], even once another
    /// version replaced it or a copy moved elsewhere.
    pub(crate) fn hold_for_reader(&self, entry: &TableEntry) {
        let until = Instant::now() + self.options.read_hold;
        let copies = entry.partitions.iter().flat_map(|p| {
            p.replicas
                .iter()
                .map(move |node| (p.name.as_str(), node.as_str()))
        });
        self.reads.hold(copies, until);
    }

    /// Records in the catalog, under this node's lease, that `partitions`
    /// of `table` are being stored: no node drops them as orphans while the
    /// intent lasts. The commit that publishes them deletes it
    /// ([`Etcd::commit`]); [`ClusterNode::abandon`] when none will.
    pub(crate) async fn intend(&self, table: &str, partitions: Vec<String>) -> Result<Intent> {
        let lease = self.lease_now()?;
        let intent = Intent {
            key: self.etcd.intent_key(&self.options.node_id),
        };
        // Known as this node's before it exists: the upkeep deletes only
        // the ones it does not know.
        self.lock_intents().insert(intent.key.clone());
        let entry = IntentEntry {
            table: table.to_string(),
            partitions,
        };
        if let Err(e) = self.etcd.intend(&intent.key, &entry, lease).await {
            self.lock_intents().remove(&intent.key);
            return Err(e);
        }
        Ok(intent)
    }

    /// The intent of a put or repair that ended: deleted from the catalog
    /// unless its commit did (best effort: the upkeep deletes what is left).
    pub(crate) async fn abandon(&self, intent: &Intent, committed: bool) {
        if !committed && let Err(e) = self.etcd.forget(intent).await {
            tracing::debug!("deleting an intent: {e}; the upkeep will");
        }
        self.lock_intents().remove(&intent.key);
    }

    pub(crate) fn lock_intents(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.intents.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn cached(&self) -> Snapshot {
        self.cache
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .snapshot
            .clone()
    }

    /// The locations of the live nodes, as last read.
    pub(crate) fn locations(&self) -> Vec<String> {
        let cache = self.cache.read().unwrap_or_else(PoisonError::into_inner);
        cache.nodes.values().map(|n| n.location.clone()).collect()
    }

    /// The live nodes no call found out lately, as last read: where a
    /// client may send a put placed here (the `nodes` action).
    pub(crate) fn trusted_nodes(&self) -> Vec<NodeLocation> {
        let cache = self.cache.read().unwrap_or_else(PoisonError::into_inner);
        cache
            .nodes
            .values()
            .filter(|n| !self.peers.is_suspect(&n.location))
            .map(|n| NodeLocation {
                id: n.id.clone(),
                location: n.location.clone(),
            })
            .collect()
    }

    /// Keeps `snapshot` as the catalog as last read, but for the tables
    /// the watch brought newer than it ([`ClusterNode::saw_table`]).
    pub(crate) fn remember(&self, mut snapshot: Snapshot) {
        let mut cache = self.cache.write().unwrap_or_else(PoisonError::into_inner);
        for (name, (entry, revision)) in &cache.snapshot.tables {
            if *revision > snapshot.revision {
                snapshot
                    .tables
                    .insert(name.clone(), (entry.clone(), *revision));
            }
        }
        // A delete the read began before: gone all the same. One it saw
        // needs no remembering any more.
        cache.deleted.retain(|name, revision| {
            let newer = *revision > snapshot.revision;
            if newer {
                snapshot.tables.remove(name);
            }
            newer
        });
        cache.snapshot = snapshot;
    }

    /// Keeps table `name`'s entry committed at `revision` (`None`: deleted)
    /// as last read, unless what is kept is as new.
    pub(crate) fn saw_table(&self, name: String, entry: Option<TableEntry>, revision: i64) {
        let mut cache = self.cache.write().unwrap_or_else(PoisonError::into_inner);
        let kept = cache
            .snapshot
            .tables
            .get(&name)
            .map(|(_, kept)| *kept)
            .or_else(|| cache.deleted.get(&name).copied());
        if kept.is_some_and(|kept| kept >= revision) {
            return;
        }
        match entry {
            Some(entry) => {
                cache.deleted.remove(&name);
                cache.snapshot.tables.insert(name, (entry, revision));
            }
            None => {
                cache.snapshot.tables.remove(&name);
                cache.deleted.insert(name, revision);
            }
        }
    }

    /// The catalog now, or as last read when etcd is unreachable.
    async fn snapshot(&self) -> Snapshot {
        match self.etcd.snapshot().await {
            Ok(snapshot) => {
                self.remember(snapshot.clone());
                snapshot
            }
            Err(e) => {
                tracing::debug!("catalog read failed, using the last one: {e}");
                self.cached()
            }
        }
    }

    /// Table `name`'s entry now, or as last read when etcd is unreachable.
    pub(crate) async fn entry(&self, name: &str) -> Option<TableEntry> {
        match self.etcd.table(name).await {
            Ok(read) => {
                match &read.value {
                    Some(entry) => {
                        self.saw_table(name.to_string(), Some(entry.clone()), read.revision)
                    }
                    // An absent key has no revision to compare.
                    None => {
                        let mut cache = self.cache.write().unwrap_or_else(PoisonError::into_inner);
                        cache.snapshot.tables.remove(name);
                    }
                }
                read.value
            }
            Err(e) => {
                tracing::debug!(table = name, "catalog read failed, using the last one: {e}");
                self.cached()
                    .tables
                    .get(name)
                    .map(|(entry, _)| entry.clone())
            }
        }
    }

    fn info(
        &self,
        name: &str,
        entry: &TableEntry,
        nodes: &BTreeMap<String, NodeEntry>,
        descriptor: FlightDescriptor,
    ) -> Result<FlightInfo> {
        let schema = entry.schema()?;
        let mut endpoints = Vec::with_capacity(entry.partitions.len());
        for part in &entry.partitions {
            let mut locations: Vec<&str> = part
                .replicas
                .iter()
                .filter_map(|id| nodes.get(id).map(|n| n.location.as_str()))
                .collect();
            // Clients read the first location first: a node whose calls
            // failed lately goes last.
            locations.sort_by_key(|location| self.peers.is_suspect(location));
            if locations.is_empty() {
                return Err(ClusterError::Unreadable(format!(
                    "no live node holds partition {} of table '{name}' (replicas: {})",
                    part.name,
                    part.replicas.join(", ")
                )));
            }
            let mut endpoint = FlightEndpoint::new()
                .with_ticket(Ticket::new(TableTicket::whole(part.name.clone()).encode()));
            for location in locations {
                endpoint = endpoint.with_location(location);
            }
            endpoints.push(endpoint);
        }
        let metadata = json!({
            "version": entry.version,
            "partitions": entry.partitions.len(),
            "cluster": true,
        });
        Ok(FlightInfo::new()
            .try_with_schema(&schema)?
            .with_descriptor(descriptor)
            .with_endpoints(endpoints)
            .with_total_records(i64::try_from(entry.rows).unwrap_or(i64::MAX))
            .with_total_bytes(i64::try_from(entry.bytes).unwrap_or(i64::MAX))
            .with_ordered(true)
            .with_app_metadata(metadata.to_string()))
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

/// Registers at start. A key left by this id's previous run (killed, so
/// its lease has not ended) is waited out for up to a lease; a key still
/// renewed after that belongs to another live process:
/// [`ClusterError::IdInUse`].
async fn first_registration(etcd: &Etcd, options: &ClusterOptions) -> Result<i64> {
    let deadline = Instant::now() + options.lease_ttl + Duration::from_secs(1);
    let mut told = false;
    loop {
        match etcd
            .register(&options.me(), options.ttl_seconds(), None)
            .await
        {
            Err(ClusterError::IdInUse { location, .. }) if Instant::now() < deadline => {
                if !told {
                    tracing::info!(
                        node = %options.node_id,
                        %location,
                        "this id is registered; waiting up to a lease for it to expire"
                    );
                    told = true;
                }
                tokio::time::sleep(REGISTER_RETRY).await;
            }
            other => return other,
        }
    }
}

impl ClusterOptions {
    /// This node's record in etcd.
    pub(crate) fn me(&self) -> NodeEntry {
        NodeEntry {
            id: self.node_id.clone(),
            location: self.location.clone(),
        }
    }

    /// The lease's length in etcd's unit.
    pub(crate) fn ttl_seconds(&self) -> i64 {
        i64::try_from(self.lease_ttl.as_secs())
            .unwrap_or(i64::MAX)
            .max(1)
    }
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
    })
}

pub(crate) fn published(entry: &TableEntry) -> Published {
    Published {
        version: entry.version,
        rows: entry.rows,
        bytes: entry.bytes,
    }
}

/// The catalog's tables; each method answers `None` when the catalog has no
/// table of that name ([`crate::tables::CatalogTables`] then asks the local
/// store).
impl ClusterNode {
    /// The FlightInfo of catalog table `name`: one endpoint per partition,
    /// its replicas' locations.
    pub(crate) async fn flight_info(
        &self,
        name: &str,
        descriptor: FlightDescriptor,
    ) -> Option<Result<FlightInfo>> {
        let entry = self.entry(name).await?;
        let nodes = self.replicas_of(&entry).await;
        self.hold_for_reader(&entry);
        Some(self.info(name, &entry, &nodes, descriptor))
    }

    /// Catalog table `name`'s schema.
    pub(crate) async fn schema(&self, name: &str) -> Option<Result<SchemaRef>> {
        let entry = self.entry(name).await?;
        Some(entry.schema())
    }

    /// Catalog table `name`'s current version, every partition read from
    /// this node's copy or a replica's.
    pub(crate) async fn read(&self, name: &str) -> Option<Result<TableRead>> {
        let entry = self.entry(name).await?;
        let nodes = self.replicas_of(&entry).await;
        self.hold_for_reader(&entry);
        let read = self.sql.read(name, &entry, &nodes).await;
        Some(read.map(|(schema, batches)| TableRead {
            version: entry.version,
            schema,
            batches,
            held: None,
        }))
    }

    /// The FlightInfo of every catalog table whose name starts with `prefix`.
    pub(crate) async fn list(&self, prefix: &str) -> Result<Vec<FlightInfo>> {
        let snapshot = self.snapshot().await;
        snapshot
            .tables
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(name, (entry, _))| {
                let descriptor = FlightDescriptor::new_path(vec![name.clone()]);
                self.info(name, entry, &snapshot.nodes, descriptor)
            })
            .collect()
    }

    /// Drops catalog table `name`.
    pub(crate) async fn delete(&self, name: &str) -> Option<Result<Published>> {
        if let Err(e) = self.lease_for_write().await {
            return Some(Err(e));
        }
        let result = self
            .commit_table(name, Guard::default(), |_| Ok(None))
            .await
            .and_then(Committed::changed);
        match result {
            Ok((None, _)) => None,
            Ok((Some(old), _)) => Some(Ok(published(&old))),
            Err(e) => Some(Err(e)),
        }
    }

    /// Renames catalog table `from` to `to` in one catalog transaction.
    pub(crate) async fn rename(
        &self,
        from: &str,
        to: &str,
        overwrite: bool,
    ) -> Option<Result<Published>> {
        if let Err(e) = self.lease_for_write().await {
            return Some(Err(e));
        }
        for _ in 0..COMMIT_ATTEMPTS {
            let result = async {
                let source = self.etcd.table(from).await?;
                let Some(entry) = source.value else {
                    return Ok(None);
                };
                if from == to {
                    return Ok(Some(Some(published(&entry))));
                }
                let target = self.etcd.table(to).await?;
                if let (Some(_), false) = (&target.value, overwrite) {
                    return Err(ClusterError::AlreadyExists(to.to_string()));
                }
                let renamed = TableEntry {
                    version: target.value.as_ref().map_or(0, |t| t.version) + 1,
                    ..entry
                };
                let reads = [(from, source.revision), (to, target.revision)];
                let done = self
                    .etcd
                    .commit(
                        &reads,
                        &[(from, None), (to, Some(&renamed))],
                        Guard::default(),
                    )
                    .await?;
                let done = matches!(done, Commit::Done);
                // Not done: another commit changed either table first; read again.
                Ok(Some(done.then(|| published(&renamed))))
            }
            .await;
            match result {
                Ok(None) => return None,
                Ok(Some(Some(done))) => return Some(Ok(done)),
                Ok(Some(None)) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Err(ClusterError::Conflict {
            table: to.to_string(),
            attempts: COMMIT_ATTEMPTS,
        }))
    }

    /// Publishes catalog tables `from` as table `into` in one catalog
    /// transaction (the `publish` action); `None` when none of `from` is a
    /// catalog table.
    pub(crate) async fn publish(
        &self,
        into: &str,
        from: &[String],
        mode: WriteMode,
    ) -> Option<Result<Published>> {
        if let Err(e) = self.lease_for_write().await {
            return Some(Err(e));
        }
        for attempt in 0..COMMIT_ATTEMPTS {
            let mut sources = Vec::with_capacity(from.len());
            for name in from {
                match self.etcd.table(name).await {
                    Ok(read) => sources.push((name.as_str(), read)),
                    Err(e) => return Some(Err(e)),
                }
            }
            if attempt == 0 && sources.iter().all(|(_, read)| read.value.is_none()) {
                return None;
            }
            match self.publish_sources(into, sources, mode).await {
                Ok(Some(done)) => return Some(Ok(done)),
                Ok(None) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Err(ClusterError::Conflict {
            table: into.to_string(),
            attempts: COMMIT_ATTEMPTS,
        }))
    }
}

impl ClusterNode {
    /// The `publish` action over catalog tables: one transaction puts the
    /// sources' partitions into `into` and deletes the sources. `None`: a
    /// concurrent commit changed one of them first.
    async fn publish_sources(
        &self,
        into: &str,
        sources: Vec<(&str, Versioned<TableEntry>)>,
        mode: WriteMode,
    ) -> Result<Option<Published>> {
        let mut partitions = Vec::new();
        let mut schema: Option<SchemaRef> = None;
        for (name, read) in &sources {
            let entry = read
                .value
                .as_ref()
                .ok_or_else(|| ClusterError::NotFound((*name).to_string()))?;
            let this = entry.schema()?;
            if let Some(first) = &schema
                && first.fields() != this.fields()
            {
                return Err(ClusterError::Invalid(format!(
                    "cannot publish into '{into}': source '{name}' has another schema"
                )));
            }
            schema.get_or_insert(this);
            partitions.extend(entry.partitions.iter().cloned());
        }
        let schema =
            schema.ok_or_else(|| ClusterError::Invalid("no source tables given".into()))?;
        let target = self.etcd.table(into).await?;
        let limits = self.store.limits();
        let new = next_entry(
            into,
            target.value.as_ref(),
            mode,
            &schema,
            partitions,
            limits,
        )?;
        let mut reads: Vec<(&str, i64)> = sources.iter().map(|(n, r)| (*n, r.revision)).collect();
        reads.push((into, target.revision));
        let mut writes: Vec<(&str, Option<&TableEntry>)> =
            sources.iter().map(|(n, _)| (*n, None)).collect();
        writes.push((into, Some(&new)));
        let done = matches!(
            self.etcd.commit(&reads, &writes, Guard::default()).await?,
            Commit::Done
        );
        Ok(done.then(|| published(&new)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use arrow::datatypes::{DataType, Field, Schema};
    use quiver_etcd::{Compare, CompareResult, RequestOp};
    use tonic::Status;

    use super::*;
    use crate::testing;

    fn schema(kind: DataType) -> SchemaRef {
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
        let int = schema(DataType::Int64);
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
        let text = schema(DataType::Utf8);
        assert!(matches!(
            next("t", Some(&first), WriteMode::Append, &text, vec![]),
            Err(ClusterError::Invalid(_))
        ));
    }

    #[test]
    fn table_limits_bound_the_whole_table_across_appends() {
        let int = schema(DataType::Int64);
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
    async fn a_live_id_is_refused_and_a_left_one_is_taken_at_once() {
        let Some((etcd, _)) = testing::etcd().await else {
            return;
        };
        let first = testing::node(&etcd, "n1").await;
        // Its lease renewed, as a running node's is.
        first.spawn_background();
        let started = Instant::now();
        let second = ClusterNode::join(
            testing::options(&etcd, "n1"),
            Arc::new(TableStore::new(u64::MAX)),
        )
        .await;
        let Err(ClusterError::IdInUse { id, location }) = second else {
            panic!("a second n1 joined: {second:?}");
        };
        assert_eq!(
            (id.as_str(), location),
            ("n1", first.options.location.clone())
        );
        // It waited out a lease (2 s) for a key a killed run would leave.
        assert!(started.elapsed() >= Duration::from_secs(2));
        first.leave().await;
        let started = Instant::now();
        let again = testing::node(&etcd, "n1").await;
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(again.lease_now().is_ok());
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
        let int = schema(DataType::Int64);
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

    #[tokio::test]
    async fn a_node_keeps_its_lease_over_an_etcd_restart() {
        let Some((mut etcd, _)) = testing::etcd().await else {
            return;
        };
        let node = testing::node(&etcd, "n1").await;
        node.spawn_background();
        let lease = node.lease_now().unwrap();
        // Away for longer than the 2 s lease: past its last renewal's TTL
        // the node does not know whether it holds it, and takes no write.
        etcd.kill();
        tokio::time::sleep(Duration::from_millis(3_000)).await;
        assert!(
            matches!(node.lease_now(), Err(ClusterError::NotRegistered)),
            "{:?}",
            node.lease_now()
        );
        etcd.start_again();
        // etcd kept the lease, and the node renews it rather than
        // registering again: its key and the intents of its puts in
        // flight stay as they were for the rest of the cluster.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match node.lease_now() {
                Ok(now) => {
                    assert_eq!(now, lease, "the node registered again under a new lease");
                    break;
                }
                Err(_) => assert!(Instant::now() < deadline, "not renewed in 10 s"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let client = etcd.client(quiver_etcd::ConnectOptions::default()).await;
        let key = client.get("/test/nodes/n1").await.unwrap().unwrap();
        assert_eq!(key.lease, lease);
        testing::put(&node, "t", WriteMode::Replace, 1)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_write_renews_a_lease_the_node_is_unsure_of() {
        let Some((mut etcd, _)) = testing::etcd().await else {
            return;
        };
        // No background renewal: only the writes ask etcd here.
        let node = testing::node(&etcd, "n1").await;
        let lease = node.lease_now().unwrap();
        // As the lease's renewal leaves it when etcd was away past its TTL.
        node.stand(Standing::Unsure);
        etcd.kill();
        let refused = testing::put(&node, "t", WriteMode::Replace, 1).await;
        assert!(
            matches!(refused, Err(ClusterError::NotRegistered)),
            "{refused:?}"
        );
        // Asked once, unanswered: the next write, within half a second of
        // the ask, is refused without asking (the ask's mark stays as it was).
        let asked = *node.renewing.lock().await;
        assert!(asked.is_some(), "the write did not ask etcd");
        let within = asked.is_some_and(|at| at.elapsed() < RENEW_ON_WRITE_AFTER);
        let refused = testing::put(&node, "t", WriteMode::Replace, 1).await;
        assert!(matches!(refused, Err(ClusterError::NotRegistered)));
        if within {
            assert_eq!(*node.renewing.lock().await, asked, "asked etcd again");
        }
        etcd.start_again();
        // etcd kept the lease: the first write taken once etcd answers
        // renews it, with no renewal of the node's own in between.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match testing::put(&node, "t", WriteMode::Replace, 1).await {
                Ok(_) => break,
                Err(e) => assert!(Instant::now() < deadline, "no write taken in 10 s: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(node.standing(), Standing::Held);
        assert_eq!(node.lease_now().unwrap(), lease);
        // The write's renewal counts as the lease's: the lease's own renewal,
        // still waiting for etcd, does not take it for unsure again.
        node.doubt_lapsed_lease();
        assert_eq!(node.standing(), Standing::Held, "taken for unsure again");
        // A lease etcd says expired is not taken for held.
        node.stand(Standing::Unsure);
        let client = etcd.client(quiver_etcd::ConnectOptions::default()).await;
        client.lease_revoke(lease).await.unwrap();
        let refused = testing::put(&node, "t", WriteMode::Replace, 1).await;
        assert!(matches!(refused, Err(ClusterError::NotRegistered)));
        assert_ne!(node.standing(), Standing::Held);
    }

    #[tokio::test]
    async fn a_node_that_lost_its_lease_refuses_writes_until_it_registers_again() {
        let Some((etcd, client)) = testing::etcd().await else {
            return;
        };
        let node = testing::node(&etcd, "n1").await;
        node.spawn_background();
        let lease = node.lease_now().unwrap();
        client.lease_revoke(lease).await.unwrap();
        // Found lost at the next renewal (a third of the 2 s lease), then
        // registered again half a second later.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut refused = None;
        loop {
            match node.lease_now() {
                Err(ClusterError::NotRegistered) if refused.is_none() => {
                    refused = Some(testing::put(&node, "t", WriteMode::Replace, 1).await);
                }
                Ok(new) if new != lease => break,
                _ => {}
            }
            assert!(Instant::now() < deadline, "not registered again in 10 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let refused = refused.expect("the node found its lease lost");
        let status = Status::from(refused.expect_err("a write while not registered"));
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status}");
        assert!(status.message().contains("not registered"), "{status}");
        testing::put(&node, "t", WriteMode::Replace, 1)
            .await
            .unwrap();
        // Its key is back, under the new lease.
        let key = client.get("/test/nodes/n1").await.unwrap().unwrap();
        assert_eq!(key.lease, node.lease_now().unwrap());
        // A key held under another lease is not taken over.
        let other = client.lease_grant(30).await.unwrap();
        let taken = client
            .txn(
                vec![Compare::create_revision(
                    "/test/nodes/n9",
                    CompareResult::Equal,
                    0,
                )],
                vec![RequestOp::put("/test/nodes/n9", key.value.clone(), other)],
                vec![],
            )
            .await
            .unwrap();
        assert!(taken.succeeded);
        let refused = node
            .etcd
            .register(
                &NodeEntry {
                    id: "n9".into(),
                    location: "grpc+tcp://127.0.0.1:1".into(),
                },
                2,
                Some(lease),
            )
            .await;
        assert!(
            matches!(refused, Err(ClusterError::IdInUse { .. })),
            "{refused:?}"
        );
    }
}

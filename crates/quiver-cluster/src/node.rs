//! A node of the cluster: its membership (registration under a lease, and
//! where it stands with that lease), the catalog as it last read it (kept
//! by the watches, [`crate::repair`]), and the intents and reader holds
//! that keep partitions from being dropped. What it serves lives beside it:
//! its tables in [`crate::tables`], its writes in [`crate::put`], what the
//! Flight service asks of it in [`crate::hooks`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use quiver_flight::tables::NodeLocation;
use quiver_store::TableStore;

use crate::catalog::{IntentEntry, NodeEntry, TableEntry};
use crate::error::{ClusterError, Result};
use crate::etcd::{Etcd, EtcdConfig, Intent, Snapshot};
use crate::peers::Peers;
use crate::reads::Reads;
use crate::sql::ClusterSql;

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
    /// The locations of this node's tables in place (`--table`): those in
    /// object storage are named in its entry, and distributed SQL gives it
    /// shares of scans of the files under them.
    pub tables_in_place: Vec<String>,
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
    pub(crate) requests_lease: tokio::sync::Mutex<Option<(i64, Instant)>>,
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
                options.in_place(),
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
            in_place: self.in_place(),
        }
    }

    /// The locations of its tables in place that are in object storage.
    pub(crate) fn in_place(&self) -> Vec<String> {
        self.tables_in_place
            .iter()
            .filter(|location| quiver_objects::is_object_store_url(location))
            .cloned()
            .collect()
    }

    /// The lease's length in etcd's unit.
    pub(crate) fn ttl_seconds(&self) -> i64 {
        i64::try_from(self.lease_ttl.as_secs())
            .unwrap_or(i64::MAX)
            .max(1)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use quiver_etcd::{Compare, CompareResult, RequestOp};
    use quiver_store::WriteMode;
    use tonic::Status;

    use super::*;
    use crate::testing;

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
                    in_place: Vec::new(),
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

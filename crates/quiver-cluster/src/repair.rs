//! The node's background work: keeping its registration alive, and on every
//! tick (and at once whenever a node joins or leaves) reading the
//! catalog, copying again the partitions that lost a replica (where this
//! node is the first live holder), merging small partitions, moving copies
//! onto nodes that hold less ([`crate::rebalance`]), and dropping the
//! partitions no version holds, no put in flight is storing and no reader
//! holds.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use quiver_store::TableVersion;

use crate::catalog::{PARTITION_PREFIX, PartitionEntry, TableEntry};
use crate::error::{ClusterError, Result};
use crate::etcd::{Change, Guard, Intent, LeaseEnd, Snapshot};
use crate::node::{ClusterNode, Standing};
use crate::placement::replicas_for;
use crate::reads::PUBLISH_EVERY;

/// How long a node waits between attempts to register again.
const REGISTER_BACKOFF: Duration = Duration::from_millis(500);

/// How often at most the upkeep looks for orphans: under the shortest
/// `--orphan-grace` (1 s), so none is kept much past its grace.
const COLLECT_EVERY: Duration = Duration::from_millis(500);

/// How often a node asks the others whether they answer (at most; a
/// quarter of the lease when that is shorter).
const PROBE_EVERY: Duration = Duration::from_millis(500);

impl ClusterNode {
    /// Starts the background work on the current tokio runtime; it runs
    /// while the runtime does.
    pub fn spawn_background(self: &Arc<Self>) {
        let node = Arc::clone(self);
        tokio::spawn(async move { node.stay_registered().await });
        let node = Arc::clone(self);
        tokio::spawn(async move { node.probe_peers().await });
        let node = Arc::clone(self);
        tokio::spawn(async move { node.publish_reads().await });
        let changed = Arc::new(tokio::sync::Notify::new());
        let node = Arc::clone(self);
        let wake = Arc::clone(&changed);
        tokio::spawn(async move { node.watch_catalog(&wake).await });
        let node = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(node.options.repair_every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                // The upkeep sees commits and the rest of the catalog on the tick.
                tokio::select! {
                    _ = tick.tick() => {}
                    () = changed.notified() => {}
                }
                if let Err(e) = node.tend().await {
                    tracing::warn!("cluster upkeep: {e}");
                }
            }
        });
    }

    /// Publishes what this node's readers hold ([`crate::reads`]) when it
    /// changed, every [`PUBLISH_EVERY`].
    async fn publish_reads(&self) {
        let mut tick = tokio::time::interval(PUBLISH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.publish_reads_once().await;
        }
    }

    /// One step of [`ClusterNode::publish_reads`].
    pub(crate) async fn publish_reads_once(&self) {
        let Some(copies) = self.reads.changed(Instant::now()) else {
            return;
        };
        let published = match self.lease_now() {
            Ok(lease) => {
                self.etcd
                    .hold_reads(&self.options.node_id, copies, lease)
                    .await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = published {
            tracing::debug!("what readers hold is not published yet: {e}");
            self.reads.unpublished();
        }
    }

    /// Asks every other live node whether it answers, every
    /// [`PROBE_EVERY`]: a node killed or frozen is passed over by puts and queries
    /// within about a second, long before its lease ends.
    async fn probe_peers(&self) {
        let mut tick = tokio::time::interval(PROBE_EVERY.min(self.options.lease_ttl / 4));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let me = self.options.node_id.as_str();
            let others: Vec<String> = self
                .cached()
                .nodes
                .values()
                .filter(|n| n.id != me)
                .map(|n| n.location.clone())
                .collect();
            futures::future::join_all(others.iter().map(|l| self.peers.probe(l))).await;
        }
    }

    /// Watches the catalog: wakes the upkeep whenever a node joins or
    /// leaves (a lost node is repaired as soon as etcd tells), and keeps
    /// the tables as last read up to date with every commit.
    async fn watch_catalog(&self, wake: &tokio::sync::Notify) {
        loop {
            let broke = self
                .etcd
                .watch(|change| match change {
                    Change::Nodes => wake.notify_one(),
                    Change::Table {
                        name,
                        entry,
                        revision,
                    } => self.saw_table(name, entry, revision),
                })
                .await;
            tracing::debug!("catalog watch: {broke}; watching again");
            tokio::time::sleep(REGISTER_BACKOFF).await;
        }
    }

    /// Renews the lease for as long as the node runs.
    ///
    /// When etcd stops answering, the node keeps its lease: etcd keeps
    /// leases over a restart, so the node renews the same lease once etcd
    /// is back, and nothing about it changes for the rest of the cluster.
    /// Meanwhile it writes under the lease only while the lease surely
    /// lasts (its last renewal's TTL). When etcd says the lease expired
    /// (etcd was away longer than the lease and did not keep it, or this
    /// process was frozen), the node stops taking writes and registers
    /// again, as often as it takes. A registration refused because another
    /// process took this id meanwhile is logged as the error it is; the
    /// node keeps serving reads of what it holds.
    async fn stay_registered(&self) {
        let every = self.options.lease_ttl / 3;
        loop {
            let lease = *self.lease.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(lease) = lease else { return };
            if let LeaseEnd::Unanswered(e) = self
                .etcd
                .keep_alive(lease, every, |asked, ttl| self.renewed(asked, ttl))
                .await
            {
                tracing::warn!(node = %self.options.node_id, "cluster lease: {e}; renewing it when etcd answers");
                if self.renew_when_etcd_answers(lease).await {
                    tracing::info!(node = %self.options.node_id, "cluster lease renewed again; still registered");
                    continue;
                }
            }
            self.stand(Standing::Lost);
            tracing::warn!(node = %self.options.node_id, "cluster lease {lease:x} expired; registering again");
            if !self.register_again(lease).await {
                return;
            }
        }
    }

    /// Renews `lease` once etcd answers again: true once renewed, false
    /// when etcd says it expired. Past its last renewal's TTL (by this
    /// loop or by a write), while etcd does not answer, the node is unsure
    /// whether it holds the lease, and a write asks etcd itself before it
    /// is taken ([`ClusterNode::lease_for_write`]).
    async fn renew_when_etcd_answers(&self, lease: i64) -> bool {
        loop {
            self.doubt_lapsed_lease();
            tokio::time::sleep(REGISTER_BACKOFF).await;
            let asked = Instant::now();
            match self.etcd.renew(lease).await {
                Ok(Some(ttl)) => {
                    self.renewed(asked, ttl);
                    self.stand(Standing::Held);
                    return true;
                }
                Ok(None) => {
                    self.stand(Standing::Lost);
                    return false;
                }
                Err(e) => tracing::debug!("renewing the cluster lease: {e}"),
            }
        }
    }

    /// Registers this node again under a new lease, after `lost`: false
    /// when it left meanwhile (a shutdown).
    async fn register_again(&self, lost: i64) -> bool {
        let mut told = false;
        loop {
            tokio::time::sleep(REGISTER_BACKOFF).await;
            if self
                .lease
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_none()
            {
                return false;
            }
            match self
                .etcd
                .register(&self.options.me(), self.options.ttl_seconds(), Some(lost))
                .await
            {
                Ok(new) => {
                    let mut slot = self.lease.lock().unwrap_or_else(PoisonError::into_inner);
                    if slot.is_none() {
                        return false;
                    }
                    *slot = Some(new);
                    self.stand(Standing::Held);
                    tracing::info!(node = %self.options.node_id, "registered again");
                    return true;
                }
                Err(e @ ClusterError::IdInUse { .. }) if !told => {
                    tracing::error!(node = %self.options.node_id, "{e}");
                    told = true;
                }
                Err(e) => tracing::debug!("registering again: {e}"),
            }
        }
    }

    /// One tick: read the catalog, delete this node's intents left over
    /// from failed puts, repair, merge small partitions, even out the nodes
    /// (when nothing else was done), and at most every [`COLLECT_EVERY`]
    /// collect.
    async fn tend(&self) -> Result<()> {
        let local = if self.collect_due() {
            Some(self.store.list(PARTITION_PREFIX))
        } else {
            None
        };
        let snapshot = self.etcd.snapshot().await?;
        self.remember(snapshot.clone());
        self.compact_history(&snapshot).await;
        self.forget_stale_intents(&snapshot).await;
        let mut acted = false;
        for (name, (entry, _)) in &snapshot.tables {
            acted |= self.repair(name, entry, &snapshot).await;
        }
        for (name, (entry, _)) in &snapshot.tables {
            acted |= self.compact(name, entry, &snapshot).await;
        }
        if !acted {
            acted = self.rebalance(&snapshot).await;
        }
        if acted {
            // Its copies are newer than this snapshot: look again.
            return self.collect().await;
        }
        if let Some(local) = local {
            self.drop_orphans(&local, &snapshot).await;
        }
        Ok(())
    }

    /// Whether the last collection is [`COLLECT_EVERY`] old; if so, the
    /// next starts now. A collection hashes every local partition, orphans
    /// included: once per upkeep, that cost would grow with how often nodes
    /// come and go.
    fn collect_due(&self) -> bool {
        let mut last = self
            .collected
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if last.is_some_and(|at| now.duration_since(at) < COLLECT_EVERY) {
            return false;
        }
        *last = Some(now);
        true
    }

    /// Deletes the intents of this node in `snapshot` that no put or repair
    /// of this process has in flight (one whose delete failed, or one of a
    /// previous run of this node under a lease not yet ended).
    async fn forget_stale_intents(&self, snapshot: &Snapshot) {
        let me = self.options.node_id.as_str();
        let stale: Vec<Intent> = {
            let active = self.lock_intents();
            snapshot
                .intents
                .keys()
                .filter(|id| id.rsplit_once('/').is_some_and(|(node, _)| node == me))
                .map(|id| Intent {
                    key: self.etcd.intent_at(id),
                })
                .filter(|intent| !active.contains(&intent.key))
                .collect()
        };
        for intent in stale {
            if let Err(e) = self.etcd.forget(&intent).await {
                tracing::debug!("deleting a stale intent: {e}");
            }
        }
    }

    /// Makes `entry`'s partitions whole where this node is responsible (the
    /// first live holder of a partition with too few live copies): copies
    /// them to new nodes under an intent, then commits the new replica
    /// lists into the table's current entry, whatever commits came since.
    /// Failures are logged; the next tick tries again. Whether it did
    /// anything (copied, or committed a change).
    async fn repair(&self, name: &str, entry: &TableEntry, snapshot: &Snapshot) -> bool {
        let me = self.options.node_id.as_str();
        let wanted = self.options.replicas.min(snapshot.nodes.len());
        let mut gone_here = HashSet::new();
        let mut copies = Vec::new();
        for part in &entry.partitions {
            let here = self.store.get(&part.name).ok();
            // Listed here but gone (a restart without --data-dir): not a holder.
            if here.is_none() && part.replicas.iter().any(|r| r == me) {
                gone_here.insert(part.name.clone());
            }
            let holders: Vec<String> = part
                .replicas
                .iter()
                .filter(|r| snapshot.nodes.contains_key(*r))
                .cloned()
                .collect();
            let Some(here) = here else { continue };
            if holders.first().map(String::as_str) != Some(me)
                || (holders.len() >= wanted && holders.len() == part.replicas.len())
            {
                continue;
            }
            copies.push((part, holders, here));
        }
        if gone_here.is_empty() && copies.is_empty() {
            return false;
        }
        let intent = if copies.is_empty() {
            None
        } else {
            let names = copies.iter().map(|(p, _, _)| p.name.clone()).collect();
            match self.intend(name, names).await {
                Ok(intent) => Some(intent),
                Err(e) => {
                    tracing::warn!(table = %name, "re-replication not started: {e}");
                    return false;
                }
            }
        };
        let mut repaired: HashMap<String, Vec<String>> = HashMap::new();
        for (part, holders, here) in copies {
            match self
                .copy_to_new_replicas(name, part, &holders, &here, snapshot, wanted)
                .await
            {
                Ok(replicas) => {
                    repaired.insert(part.name.clone(), replicas);
                }
                Err(e) => tracing::warn!(partition = %part.name, "re-replication failed: {e}"),
            }
        }
        if repaired.is_empty() && gone_here.is_empty() {
            if let Some(intent) = &intent {
                self.abandon(intent, false).await;
            }
            return true;
        }
        let guard = Guard {
            intent: intent.as_ref(),
            request: None,
        };
        let result = self
            .commit_table(name, guard, |old| {
                let Some(old) = old else { return Ok(None) };
                let mut new = old.clone();
                for part in &mut new.partitions {
                    if let Some(replicas) = repaired.get(&part.name) {
                        part.replicas.clone_from(replicas);
                    } else if gone_here.contains(&part.name) {
                        part.replicas.retain(|r| r != me);
                    }
                }
                Ok(Some(new))
            })
            .await;
        if let Some(intent) = &intent {
            self.abandon(intent, result.is_ok()).await;
        }
        match result {
            Ok(_) => tracing::info!(table = %name, version = entry.version, "replicas repaired"),
            Err(e) => tracing::warn!(table = %name, "committing repaired replicas: {e}"),
        }
        true
    }

    /// Copies partition `part` (held here as `here`) to live nodes until it
    /// has `wanted` holders; returns the new replica list.
    async fn copy_to_new_replicas(
        &self,
        table: &str,
        part: &PartitionEntry,
        holders: &[String],
        here: &Arc<TableVersion>,
        snapshot: &Snapshot,
        wanted: usize,
    ) -> Result<Vec<String>> {
        let candidates = snapshot
            .nodes
            .keys()
            .filter(|id| !holders.contains(id))
            .map(String::as_str);
        let targets = replicas_for(&part.name, candidates, wanted.saturating_sub(holders.len()));
        for target in &targets {
            let Some(node) = snapshot.nodes.get(target) else {
                continue;
            };
            self.copy_to(node, &part.name, here, part.bytes).await?;
            tracing::info!(%table, partition = %part.name, to = %target, "partition copied");
        }
        Ok(holders.iter().chain(&targets).cloned().collect())
    }

    /// Drops local partitions that no table's current version has on this
    /// node and no put or repair in flight is storing, once they have been
    /// seen so for the grace period. The local partitions are listed before
    /// the catalog is read, and the catalog is read afresh, at one
    /// revision: a partition stored for a put is named by the put's intent
    /// from before its first copy until the commit that names it in a
    /// version, so it is never seen unreferenced while it is needed.
    async fn collect(&self) -> Result<()> {
        let local = self.store.list(PARTITION_PREFIX);
        let snapshot = self.etcd.snapshot().await?;
        self.remember(snapshot.clone());
        self.drop_orphans(&local, &snapshot).await;
        Ok(())
    }

    /// The collection of [`ClusterNode::collect`] over `local`, listed
    /// before `snapshot` was read: the partitions held by nothing for
    /// `--orphan-grace` are dropped, all in one store commit, off the async
    /// runtime (with `--data-dir` a commit writes the manifest; one per
    /// partition froze a node for seconds when thousands came due at once).
    async fn drop_orphans(&self, local: &[Arc<TableVersion>], snapshot: &Snapshot) {
        let due = self.orphans_due(local, snapshot);
        if due.is_empty() {
            return;
        }
        for name in &due {
            tracing::debug!(partition = %name, "dropping a partition no version holds");
        }
        let store = Arc::clone(&self.store);
        match tokio::task::spawn_blocking(move || store.remove_all(&due)).await {
            Ok(Ok(dropped)) => tracing::info!(dropped, "dropped partitions no version holds"),
            Ok(Err(e)) => tracing::warn!("dropping partitions no version holds: {e}"),
            Err(e) => tracing::warn!("dropping partitions no version holds: {e}"),
        }
    }

    /// The partitions of `local` that no version, intent or reader has held
    /// for `--orphan-grace`; they are forgotten as orphans here, and the
    /// caller drops them.
    fn orphans_due(&self, local: &[Arc<TableVersion>], snapshot: &Snapshot) -> Vec<String> {
        let me = self.options.node_id.as_str();
        let mut held: HashSet<&str> = snapshot
            .tables
            .values()
            .flat_map(|(entry, _)| &entry.partitions)
            .filter(|p| p.replicas.iter().any(|r| r == me))
            .map(|p| p.name.as_str())
            .collect();
        held.extend(snapshot.intended());
        held.extend(snapshot.read_on(me));
        let now = Instant::now();
        let mut orphans = self.orphans.lock().unwrap_or_else(PoisonError::into_inner);
        let listed: HashSet<&str> = local.iter().map(|t| t.name()).collect();
        orphans.retain(|name, _| !held.contains(name.as_str()) && listed.contains(name.as_str()));
        let mut due = Vec::new();
        for table in local {
            let name = table.name();
            if held.contains(name) {
                continue;
            }
            let since = *orphans.entry(name.to_string()).or_insert(now);
            if now.duration_since(since) > self.options.orphan_grace {
                orphans.remove(name);
                due.push(name.to_string());
            }
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use quiver_store::WriteMode;

    use super::*;
    use crate::catalog::{IntentEntry, encode_schema};
    use crate::etcd::json;
    use crate::testing;

    fn store_partition(node: &ClusterNode, name: &str) {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
        )
        .unwrap();
        node.store
            .put(name, WriteMode::Replace, schema, [batch])
            .unwrap();
    }

    fn held(node: &ClusterNode, name: &str) -> bool {
        node.store.get(name).is_ok()
    }

    /// Two collections: the first starts an orphan's grace (zero here), the
    /// second drops it.
    async fn collect_twice(node: &ClusterNode) {
        node.collect().await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        node.collect().await.unwrap();
    }

    #[tokio::test]
    async fn collection_spares_what_an_intent_names_and_drops_the_rest() {
        let Some((etcd, _)) = testing::etcd().await else {
            return;
        };
        let node = testing::node(&etcd, "n1").await;
        let (wanted, orphan) = (".quiver-part/t#1.a.0", ".quiver-part/t#1.b.0");
        store_partition(&node, wanted);
        store_partition(&node, orphan);
        let intent = node.intend("t", vec![wanted.into()]).await.unwrap();
        collect_twice(&node).await;
        assert!(held(&node, wanted), "an intent names it");
        assert!(!held(&node, orphan), "nothing names it");
        // Its put failed: the intent goes, and the partition with it.
        node.abandon(&intent, false).await;
        collect_twice(&node).await;
        assert!(!held(&node, wanted));
    }

    #[tokio::test]
    async fn collection_spares_what_readers_hold_until_their_time_ends() {
        let Some((etcd, _)) = testing::etcd().await else {
            return;
        };
        let node = testing::node(&etcd, "n1").await;
        let (read, unread) = (".quiver-part/t#1.a.0", ".quiver-part/t#1.b.0");
        let elsewhere = ".quiver-part/t#1.c.0";
        store_partition(&node, read);
        store_partition(&node, unread);
        store_partition(&node, elsewhere);
        let schema = Schema::new(vec![Field::new("v", DataType::Int64, false)]);
        let part = |name: &str, on: &str| PartitionEntry {
            name: name.into(),
            rows: 3,
            bytes: 24,
            replicas: vec![on.into()],
        };
        // A version a reader was handed, since replaced: no version names
        // it. The reader was given `read` on n1, and `elsewhere` on n2 only
        // (as after a move from n1 to n2): n1's copy of it is no one's.
        let replaced = TableEntry {
            version: 1,
            schema: encode_schema(&schema).unwrap(),
            rows: 6,
            bytes: 48,
            partitions: vec![part(read, "n1"), part(elsewhere, "n2")],
            written_ms: 0,
        };
        node.hold_for_reader(&replaced);
        node.publish_reads_once().await;
        collect_twice(&node).await;
        assert!(held(&node, read), "a reader holds it");
        assert!(!held(&node, unread), "nothing holds it");
        assert!(
            !held(&node, elsewhere),
            "a reader holds another node's copy"
        );
        // Held for read_hold (2 s here), then let go and dropped.
        tokio::time::sleep(node.options.read_hold).await;
        node.publish_reads_once().await;
        assert!(node.etcd.snapshot().await.unwrap().reads.is_empty());
        collect_twice(&node).await;
        assert!(!held(&node, read));
    }

    /// Waits up to 5 s for `done`.
    async fn eventually(what: &str, done: impl Fn() -> bool) {
        for _ in 0..100 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("not within 5 s: {what}");
    }

    #[tokio::test]
    async fn the_watch_keeps_each_commit_and_wakes_the_upkeep_for_nodes_only() {
        let Some((etcd, client)) = testing::etcd().await else {
            return;
        };
        // No upkeep runs here, only the lease's renewal: only the watch can
        // bring the commits.
        let node = testing::node(&etcd, "n1").await;
        let renewal = {
            let node = Arc::clone(&node);
            tokio::spawn(async move { node.stay_registered().await })
        };
        let wake = Arc::new(tokio::sync::Notify::new());
        let watch = {
            let (node, wake) = (Arc::clone(&node), Arc::clone(&wake));
            tokio::spawn(async move { node.watch_catalog(&wake).await })
        };
        let schema = Schema::new(vec![Field::new("v", DataType::Int64, false)]);
        let entry = |version: u64, rows: u64| TableEntry {
            version,
            schema: encode_schema(&schema).unwrap(),
            rows,
            bytes: rows * 8,
            partitions: Vec::new(),
            written_ms: 0,
        };
        let key = format!("{}tables/t", testing::PREFIX);
        let kept = |version: u64| {
            node.cached()
                .tables
                .get("t")
                .is_some_and(|(e, _)| e.version == version)
        };
        // The watch sees what is written once it is created: written again
        // until it is seen.
        for attempt in 0.. {
            client
                .put(key.as_str(), json(&entry(1, 3)), 0)
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            if kept(1) {
                break;
            }
            assert!(attempt < 50, "the first commit not kept within 5 s");
        }
        client
            .put(key.as_str(), json(&entry(2, 5)), 0)
            .await
            .unwrap();
        eventually("the second commit kept", || kept(2)).await;
        // A read older than what the watch brought does not bring it back.
        let revision = node.cached().tables["t"].1;
        node.saw_table("t".into(), Some(entry(1, 3)), revision - 1);
        node.saw_table("t".into(), None, revision - 1);
        assert!(kept(2));
        // Nor does a catalog read that started before the watch brought it.
        let mut older = Snapshot {
            revision: revision - 1,
            ..Snapshot::default()
        };
        older.tables.insert("t".into(), (entry(1, 3), revision - 1));
        node.remember(older);
        assert!(kept(2));
        // Intents and commits do not wake the upkeep.
        let _intent = node.intend("t", vec!["p".into()]).await.unwrap();
        let woken = tokio::time::timeout(Duration::from_millis(300), wake.notified()).await;
        assert!(woken.is_err(), "a commit woke the upkeep");
        client.delete(key.as_str()).await.unwrap();
        eventually("the delete seen", || {
            !node.cached().tables.contains_key("t")
        })
        .await;
        // A catalog read that started before the delete does not bring the
        // table back; one as new as the delete is kept as it is.
        let mut older = Snapshot {
            revision,
            ..Snapshot::default()
        };
        older.tables.insert("t".into(), (entry(2, 5), revision));
        node.remember(older);
        assert!(!node.cached().tables.contains_key("t"), "a delete undone");
        node.saw_table("t".into(), Some(entry(2, 5)), revision);
        assert!(!node.cached().tables.contains_key("t"), "a delete undone");
        let newer = node.etcd.snapshot().await.unwrap();
        assert!(newer.revision > revision && !newer.tables.contains_key("t"));
        node.remember(newer);
        assert!(node.cache.read().unwrap().deleted.is_empty());
        // A node that joins does.
        let _n2 = testing::node(&etcd, "n2").await;
        let woken = tokio::time::timeout(Duration::from_secs(5), wake.notified()).await;
        assert!(woken.is_ok(), "a node's join did not wake the upkeep");
        watch.abort();
        renewal.abort();
    }

    #[tokio::test]
    async fn intents_of_this_node_that_nothing_has_in_flight_are_deleted() {
        let Some((etcd, client)) = testing::etcd().await else {
            return;
        };
        let node = testing::node(&etcd, "n1").await;
        let active = node.intend("t", vec!["p1".into()]).await.unwrap();
        let catalog = testing::catalog(&etcd);
        let entry = IntentEntry {
            table: "t".into(),
            partitions: vec!["p2".into()],
        };
        // Left by a failed delete, and one of another node ("n1/x" is not n1).
        let stale = catalog.intent_key("n1");
        let other = catalog.intent_key("n1/x");
        for key in [&stale, &other] {
            client
                .put(key.as_str(), serde_json::to_vec(&entry).unwrap(), 0)
                .await
                .unwrap();
        }
        let snapshot = node.etcd.snapshot().await.unwrap();
        assert_eq!(snapshot.intents.len(), 3);
        node.forget_stale_intents(&snapshot).await;
        let left: Vec<String> = node
            .etcd
            .snapshot()
            .await
            .unwrap()
            .intents
            .keys()
            .map(|id| node.etcd.intent_at(id))
            .collect();
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(left.contains(&active.key) && left.contains(&other));
    }

    #[tokio::test]
    async fn a_partition_listed_here_but_gone_leaves_its_replica_list() {
        let Some((etcd, _)) = testing::etcd().await else {
            return;
        };
        let node = testing::node(&etcd, "n1").await;
        let schema = Schema::new(vec![Field::new("v", DataType::Int64, false)]);
        let (kept, lost) = (".quiver-part/t#1.a.0", ".quiver-part/t#1.a.1");
        store_partition(&node, kept);
        let part = |name: &str| PartitionEntry {
            name: name.into(),
            rows: 3,
            bytes: 24,
            replicas: vec!["n1".into()],
        };
        let entry = TableEntry {
            version: 1,
            schema: encode_schema(&schema).unwrap(),
            rows: 6,
            bytes: 48,
            partitions: vec![part(kept), part(lost)],
            written_ms: 0,
        };
        assert!(matches!(
            node.etcd
                .commit(&[("t", 0)], &[("t", Some(&entry))], Guard::default())
                .await
                .unwrap(),
            crate::etcd::Commit::Done
        ));
        node.tend().await.unwrap();
        let now = node.etcd.table("t").await.unwrap().value.unwrap();
        assert_eq!(now.version, 1, "a repair publishes no new version");
        assert_eq!(now.partitions[0].replicas, ["n1"]);
        assert!(now.partitions[1].replicas.is_empty());
        assert!(held(&node, kept));
    }
}

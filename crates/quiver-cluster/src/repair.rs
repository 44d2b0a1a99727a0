//! The node's background work: keeping its registration alive, and on every
//! tick (and at once whenever the watched catalog changes) reading the
//! catalog, copying again the partitions that lost a replica (where this
//! node is the first live holder), and dropping the partitions no version
//! holds any more.

use std::collections::HashSet;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use quiver_store::TableVersion;

use crate::catalog::{PARTITION_PREFIX, PartitionEntry, TableEntry};
use crate::error::Result;
use crate::etcd::Snapshot;
use crate::node::ClusterNode;
use crate::placement::replicas_for;

/// How long a node waits between attempts to register again.
const REGISTER_BACKOFF: Duration = Duration::from_millis(500);

impl ClusterNode {
    /// Starts the background work on the current tokio runtime; it runs
    /// while the runtime does.
    pub fn spawn_background(self: &Arc<Self>) {
        let node = Arc::clone(self);
        tokio::spawn(async move { node.stay_registered().await });
        let changed = Arc::new(tokio::sync::Notify::new());
        let node = Arc::clone(self);
        let wake = Arc::clone(&changed);
        tokio::spawn(async move { node.watch_catalog(&wake).await });
        let node = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(node.options.repair_every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                // The tick is the fallback when the watch is broken (etcd away).
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

    /// Watches the catalog and wakes the upkeep whenever it changes: a lost
    /// node is repaired, and a commit seen, as soon as etcd tells.
    async fn watch_catalog(&self, wake: &tokio::sync::Notify) {
        loop {
            let broke = self.etcd.watch(|| wake.notify_one()).await;
            tracing::debug!("catalog watch: {broke}; watching again");
            tokio::time::sleep(REGISTER_BACKOFF).await;
        }
    }

    /// Renews the lease; when it is lost (etcd was away longer than the
    /// lease), registers again, as often as it takes.
    async fn stay_registered(&self) {
        let every = self.options.lease_ttl / 3;
        loop {
            let lease = *self.lease.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(lease) = lease else { return };
            let lost = self.etcd.keep_alive(lease, every).await;
            tracing::warn!(node = %self.options.node_id, "cluster lease: {lost}; registering again");
            loop {
                tokio::time::sleep(REGISTER_BACKOFF).await;
                match self
                    .etcd
                    .register(&self.options.me(), self.options.ttl_seconds())
                    .await
                {
                    Ok(new) => {
                        let mut slot = self.lease.lock().unwrap_or_else(PoisonError::into_inner);
                        if slot.is_none() {
                            // Left meanwhile (shutdown).
                            return;
                        }
                        *slot = Some(new);
                        tracing::info!(node = %self.options.node_id, "registered again");
                        break;
                    }
                    Err(e) => tracing::debug!("registering again: {e}"),
                }
            }
        }
    }

    /// One tick: read the catalog, repair, collect.
    async fn tend(&self) -> Result<()> {
        let snapshot = self.etcd.snapshot().await?;
        self.remember(snapshot.clone());
        for (name, (entry, revision)) in &snapshot.tables {
            if let Some(repaired) = self.repair(name, entry, &snapshot).await {
                let committed = self
                    .etcd
                    .commit(&[(name, *revision)], &[(name, Some(&repaired))])
                    .await?;
                if committed {
                    tracing::info!(table = %name, version = entry.version, "replicas repaired");
                }
            }
        }
        self.collect(&snapshot);
        Ok(())
    }

    /// `entry` with its partitions' replicas made whole where this node is
    /// responsible; `None` when there is nothing for this node to change.
    async fn repair(
        &self,
        name: &str,
        entry: &TableEntry,
        snapshot: &Snapshot,
    ) -> Option<TableEntry> {
        let me = self.options.node_id.as_str();
        let wanted = self.options.replicas.min(snapshot.nodes.len());
        let mut repaired = entry.clone();
        let mut changed = false;
        for part in &mut repaired.partitions {
            let here = self.store.get(&part.name).ok();
            // Listed here but gone (a restart without --data-dir): not a holder.
            if here.is_none() && part.replicas.iter().any(|r| r == me) {
                part.replicas.retain(|r| r != me);
                changed = true;
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
            match self
                .copy_to_new_replicas(name, part, &holders, &here, snapshot, wanted)
                .await
            {
                Ok(replicas) => {
                    part.replicas = replicas;
                    changed = true;
                }
                Err(e) => tracing::warn!(partition = %part.name, "re-replication failed: {e}"),
            }
        }
        changed.then_some(repaired)
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
        let batches: Vec<_> = here.batches().cloned().collect();
        for target in &targets {
            let Some(node) = snapshot.nodes.get(target) else {
                continue;
            };
            self.store_on(node, &part.name, Arc::clone(here.schema()), batches.clone())
                .await?;
            tracing::info!(%table, partition = %part.name, to = %target, "partition copied");
        }
        Ok(holders.iter().chain(&targets).cloned().collect())
    }

    /// Drops local partitions that no table's current version has on this
    /// node once they have been seen so for the grace period. The clock
    /// starts when this node first sees one unreferenced, not when the
    /// partition was made: a copy just received for a put or a repair whose
    /// commit this snapshot predates is kept.
    fn collect(&self, snapshot: &Snapshot) {
        let me = self.options.node_id.as_str();
        let held: HashSet<&str> = snapshot
            .tables
            .values()
            .flat_map(|(entry, _)| &entry.partitions)
            .filter(|p| p.replicas.iter().any(|r| r == me))
            .map(|p| p.name.as_str())
            .collect();
        let now = Instant::now();
        let mut orphans = self.orphans.lock().unwrap_or_else(PoisonError::into_inner);
        let local: Vec<_> = self.store.list(PARTITION_PREFIX);
        orphans.retain(|name, _| {
            !held.contains(name.as_str()) && local.iter().any(|t| t.name() == name)
        });
        for table in local {
            let name = table.name();
            if held.contains(name) {
                continue;
            }
            let since = *orphans.entry(name.to_string()).or_insert(now);
            if now.duration_since(since) > self.options.orphan_grace
                && self.store.remove(name).is_ok()
            {
                orphans.remove(name);
                tracing::info!(partition = %name, "dropped a partition no version holds");
            }
        }
    }
}

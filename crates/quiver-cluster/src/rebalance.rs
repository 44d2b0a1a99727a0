//! Moving copies of partitions onto nodes that hold less, so that a node
//! that joins takes its share of the tables already stored.
//!
//! A put spreads its partitions over the nodes live at the time; a node that
//! joins later would otherwise hold only what is put after it came. On each
//! upkeep tick of a whole cluster (every partition with all its listed
//! copies live, no repair, merge or move in flight), every node computes
//! the same plan from the catalog ([`plan`]): the bytes each live node
//! holds, and, while the most loaded node holds more than a tenth above the
//! average, a copy moved from it to the least loaded node that can take
//! one. A move is made only when it narrows the gap between the two, so the
//! plan never moves a copy back and forth. The node a planned move comes
//! from makes it, one batch of moves at a time across the cluster: it
//! stores its copy on the new node under an intent, then commits the new
//! replica lists into the table's current entry (appends that came
//! meanwhile kept). Its own copy becomes an orphan, held for the readers it
//! was handed to ([`crate::reads`]) and then dropped. Rows, order and
//! version stay as they were: readers keep reading throughout. A write
//! job's staging tables are left where the job's tasks put them.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::catalog::TableEntry;
use crate::etcd::{Guard, Snapshot};
use crate::node::ClusterNode;

/// The most moves one node makes in one batch (one commit per table).
const MOVES_PER_BATCH: usize = 8;

/// One copy to move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Move {
    pub(crate) table: String,
    pub(crate) partition: String,
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) bytes: u64,
}

/// The moves that even out the bytes the live `nodes` hold of `tables`;
/// none while some partition lists a node that is not live (a repair comes
/// first) or `busy` names one of the tables' partitions (a repair, merge or
/// move in flight).
pub(crate) fn plan(
    tables: &BTreeMap<String, (TableEntry, i64)>,
    nodes: &[&str],
    busy: &HashSet<&str>,
) -> Vec<Move> {
    if nodes.len() < 2 {
        return Vec::new();
    }
    let live: HashSet<&str> = nodes.iter().copied().collect();
    let mut load: BTreeMap<&str, u64> = nodes.iter().map(|n| (*n, 0)).collect();
    // Each copy: (table, partition, bytes) and the nodes holding it.
    let mut copies = Vec::new();
    for (table, (entry, _)) in tables {
        // A staging table lives for one job, its tasks' rows placed on the
        // nodes they were sent to: neither counted nor moved.
        if table.starts_with(quiver_store::STAGING_PREFIX) {
            continue;
        }
        for part in &entry.partitions {
            if busy.contains(part.name.as_str())
                || part.replicas.iter().any(|r| !live.contains(r.as_str()))
            {
                return Vec::new();
            }
            for replica in &part.replicas {
                *load.entry(replica.as_str()).or_default() += part.bytes;
            }
            let holders: HashSet<&str> = part.replicas.iter().map(String::as_str).collect();
            copies.push((table.as_str(), part, holders));
        }
    }
    let total: u64 = load.values().sum();
    let count = u64::try_from(load.len()).unwrap_or(u64::MAX);
    let high = total / count + total / count / 10;
    if load.values().all(|l| *l <= high) {
        return Vec::new();
    }
    // Largest first: the fewest moves; the name makes the order total.
    copies.sort_by(|a, b| {
        b.1.bytes
            .cmp(&a.1.bytes)
            .then_with(|| a.1.name.cmp(&b.1.name))
    });
    let mut moves = Vec::new();
    // Each move takes a copy off a node above `high`: at most every copy once.
    for _ in 0..copies.len() {
        let mut order: Vec<(&str, u64)> = load.iter().map(|(n, l)| (*n, *l)).collect();
        order.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let Some(&(from, from_load)) = order.first() else {
            break;
        };
        if from_load <= high {
            break;
        }
        let found = order.iter().rev().find_map(|&(to, to_load)| {
            copies
                .iter()
                .position(|(_, part, holders)| {
                    holders.contains(from)
                        && !holders.contains(to)
                        && from_load - to_load > part.bytes
                        && to_load + part.bytes <= high
                })
                .map(|at| (to, at))
        });
        let Some((to, at)) = found else { break };
        let (table, part, holders) = &mut copies[at];
        holders.remove(from);
        holders.insert(to);
        *load.entry(from).or_default() -= part.bytes;
        *load.entry(to).or_default() += part.bytes;
        moves.push(Move {
            table: (*table).to_string(),
            partition: part.name.clone(),
            from: from.to_string(),
            to: to.to_string(),
            bytes: part.bytes,
        });
    }
    moves
}

impl ClusterNode {
    /// Makes this node's moves of the plan for `snapshot`, if the plan's
    /// first move is this node's (so one node moves at a time, and the
    /// next plan sees its moves). Failures are logged; the next tick plans
    /// again. Whether it did anything.
    pub(crate) async fn rebalance(&self, snapshot: &Snapshot) -> bool {
        if !snapshot.settings.rebalance {
            // Turned off for the cluster (`quiver cluster rebalance off`).
            return false;
        }
        let me = self.options.node_id.as_str();
        let nodes: Vec<&str> = snapshot.nodes.keys().map(String::as_str).collect();
        if snapshot
            .nodes
            .values()
            .any(|n| self.peers.is_suspect(&n.location))
        {
            // A node is not answering: not the time to move data about.
            return false;
        }
        let moves = plan(&snapshot.tables, &nodes, &snapshot.intended());
        if moves.first().is_none_or(|m| m.from != me) {
            return false;
        }
        let mine: Vec<Move> = moves
            .into_iter()
            .filter(|m| m.from == me)
            .take(MOVES_PER_BATCH)
            .collect();
        let mut by_table: BTreeMap<&str, Vec<&Move>> = BTreeMap::new();
        for m in &mine {
            by_table.entry(m.table.as_str()).or_default().push(m);
        }
        for (table, moves) in by_table {
            self.move_copies(table, &moves, snapshot).await;
        }
        true
    }

    /// Stores this node's copies of `moves` (all of `table`) on their new
    /// nodes under an intent, then commits the new replica lists.
    async fn move_copies(&self, table: &str, moves: &[&Move], snapshot: &Snapshot) {
        let names = moves.iter().map(|m| m.partition.clone()).collect();
        let intent = match self.intend(table, names).await {
            Ok(intent) => intent,
            Err(e) => {
                tracing::warn!(%table, "moving partitions not started: {e}");
                return;
            }
        };
        let mut moved: HashMap<&str, &str> = HashMap::new();
        for m in moves {
            let (Ok(here), Some(node)) = (self.store.get(&m.partition), snapshot.nodes.get(&m.to))
            else {
                continue;
            };
            match self.copy_to(node, &m.partition, &here, m.bytes).await {
                Ok(()) => {
                    moved.insert(m.partition.as_str(), m.to.as_str());
                }
                Err(e) => {
                    tracing::warn!(partition = %m.partition, to = %m.to, "moving a partition: {e}")
                }
            }
        }
        if moved.is_empty() {
            self.abandon(&intent, false).await;
            return;
        }
        let me = self.options.node_id.as_str();
        let guard = Guard {
            intent: Some(&intent),
            request: None,
        };
        let result = self
            .commit_table(table, guard, |old| {
                let Some(old) = old else { return Ok(None) };
                let mut new = old.clone();
                for part in &mut new.partitions {
                    let Some(to) = moved.get(part.name.as_str()) else {
                        continue;
                    };
                    if part.replicas.iter().any(|r| r == to) {
                        continue;
                    }
                    if let Some(slot) = part.replicas.iter_mut().find(|r| *r == me) {
                        *slot = (*to).to_string();
                    }
                }
                Ok(Some(new))
            })
            .await;
        self.abandon(&intent, result.is_ok()).await;
        match result {
            Ok(_) => {
                tracing::info!(%table, moved = moved.len(), "partitions moved to even out the nodes")
            }
            Err(e) => tracing::warn!(%table, "committing moved partitions: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::PartitionEntry;

    fn table(parts: &[(&str, u64, &[&str])]) -> (TableEntry, i64) {
        let partitions: Vec<PartitionEntry> = parts
            .iter()
            .map(|(name, bytes, replicas)| PartitionEntry {
                name: (*name).to_string(),
                rows: 1,
                bytes: *bytes,
                replicas: replicas.iter().map(|r| (*r).to_string()).collect(),
            })
            .collect();
        let entry = TableEntry {
            version: 1,
            schema: String::new(),
            rows: 0,
            bytes: partitions.iter().map(|p| p.bytes).sum(),
            partitions,
            written_ms: 0,
        };
        (entry, 1)
    }

    fn loads(
        tables: &BTreeMap<String, (TableEntry, i64)>,
        moves: &[Move],
    ) -> BTreeMap<String, u64> {
        let mut load = BTreeMap::new();
        for (entry, _) in tables.values() {
            for part in &entry.partitions {
                for r in &part.replicas {
                    *load.entry(r.clone()).or_default() += part.bytes;
                }
            }
        }
        for m in moves {
            *load.get_mut(&m.from).unwrap() -= m.bytes;
            *load.entry(m.to.clone()).or_default() += m.bytes;
        }
        load
    }

    #[test]
    fn a_node_that_joins_takes_its_share() {
        // 12 partitions of 10 bytes, two copies each, on n1-n3: 80 each.
        let nodes = ["n1", "n2", "n3"];
        let parts: Vec<(String, [&str; 2])> = (0..12)
            .map(|i| (format!("p{i:02}"), [nodes[i % 3], nodes[(i + 1) % 3]]))
            .collect();
        let refs: Vec<(&str, u64, &[&str])> = parts
            .iter()
            .map(|(name, replicas)| (name.as_str(), 10, &replicas[..]))
            .collect();
        let tables = BTreeMap::from([("t".to_string(), table(&refs))]);
        let busy = HashSet::new();
        assert!(plan(&tables, &nodes, &busy).is_empty(), "balanced already");
        let moves = plan(&tables, &["n1", "n2", "n3", "n4"], &busy);
        assert!(moves.iter().all(|m| m.to == "n4"), "{moves:?}");
        // 240 bytes over four nodes: 60 each.
        let after = loads(&tables, &moves);
        assert_eq!(after["n4"], 60, "{after:?}");
        assert!(after.values().all(|l| (60..=70).contains(l)), "{after:?}");
        // No partition gets two copies on one node.
        let mut seen = HashSet::new();
        for m in &moves {
            assert!(seen.insert(&m.partition), "{m:?} moved twice");
        }
    }

    #[test]
    fn a_write_jobs_staging_tables_stay_where_their_tasks_put_them() {
        // Every copy on n1 and n2: a table would be evened out, a job's
        // staging table is not.
        let parts = [("p", 100, &["n1", "n2"][..]), ("q", 100, &["n1", "n2"][..])];
        let nodes = ["n1", "n2", "n3"];
        let staged = BTreeMap::from([(".quiver-staging/job/0-a".to_string(), table(&parts))]);
        assert!(plan(&staged, &nodes, &HashSet::new()).is_empty());
        let published = BTreeMap::from([("t".to_string(), table(&parts))]);
        assert!(!plan(&published, &nodes, &HashSet::new()).is_empty());
    }

    #[test]
    fn a_move_that_would_not_narrow_the_gap_is_not_made() {
        // One partition on two of three nodes: moving a copy to n3 would
        // only swap which node holds nothing.
        let tables = BTreeMap::from([("t".to_string(), table(&[("p", 100, &["n1", "n2"])]))]);
        assert!(plan(&tables, &["n1", "n2", "n3"], &HashSet::new()).is_empty());
        // Two partitions of unequal sizes on one node of two.
        let tables = BTreeMap::from([(
            "t".to_string(),
            table(&[("a", 100, &["n1"]), ("b", 10, &["n1"])]),
        )]);
        let moves = plan(&tables, &["n1", "n2"], &HashSet::new());
        assert_eq!(moves.len(), 1, "{moves:?}");
        assert_eq!(
            (moves[0].partition.as_str(), moves[0].to.as_str()),
            ("b", "n2")
        );
        // Planning again from the result moves nothing back.
        let tables = BTreeMap::from([(
            "t".to_string(),
            table(&[("a", 100, &["n1"]), ("b", 10, &["n2"])]),
        )]);
        assert!(plan(&tables, &["n1", "n2"], &HashSet::new()).is_empty());
    }

    #[test]
    fn nothing_moves_while_a_copy_is_lost_or_a_partition_is_busy() {
        let parts: &[(&str, u64, &[&str])] = &[("a", 10, &["n1"]), ("b", 10, &["n1"])];
        let tables = BTreeMap::from([("t".to_string(), table(parts))]);
        assert_eq!(plan(&tables, &["n1", "n2"], &HashSet::new()).len(), 1);
        // n1 is not live: its partitions are repaired first.
        assert!(plan(&tables, &["n2", "n3"], &HashSet::new()).is_empty());
        // A repair, merge or move of one of them in flight.
        assert!(plan(&tables, &["n1", "n2"], &HashSet::from(["a"])).is_empty());
        // A cluster of one.
        assert!(plan(&tables, &["n1"], &HashSet::new()).is_empty());
    }
}

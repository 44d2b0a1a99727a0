//! `quiver cluster status`: nodes, tables, partitions and the data with
//! fewer live copies than asked for, read from etcd; and `quiver cluster
//! rebalance`, which turns moving copies between nodes on or off.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use quiver_flight::cluster::{CopyOn, NodeOverview, PartitionCopies};
use serde::Serialize;

use crate::catalog::{NodeEntry, Settings};
use crate::error::Result;
use crate::etcd::{Etcd, EtcdConfig, Snapshot};
use crate::node::Standing;

/// The cluster as the catalog has it.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterStatus {
    /// Live nodes.
    pub nodes: Vec<NodeEntry>,
    /// Tables, by name.
    pub tables: Vec<TableStatus>,
    /// Copies each partition should have.
    pub replicas: usize,
    /// Partitions with fewer live copies than `replicas` (or than live nodes).
    pub under_replicated: usize,
    /// Partitions with no live copy.
    pub unavailable: usize,
    /// Whether nodes move copies to even out what they hold.
    pub rebalance: bool,
}

/// One table.
#[derive(Debug, Clone, Serialize)]
pub struct TableStatus {
    /// Its name.
    pub name: String,
    /// Its current version.
    pub version: u64,
    /// Its rows.
    pub rows: u64,
    /// Its bytes.
    pub bytes: u64,
    /// Its partitions.
    pub partitions: Vec<PartitionStatus>,
}

/// One partition.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionStatus {
    /// Its storage name.
    pub name: String,
    /// Its rows.
    pub rows: u64,
    /// Its bytes.
    pub bytes: u64,
    /// The nodes listed as holding it.
    pub replicas: Vec<String>,
    /// Those of them alive.
    pub live: usize,
    /// Whether fewer are alive than asked for.
    pub under_replicated: bool,
}

/// Reads the status of the cluster whose catalog `etcd` names, counting a
/// partition under-replicated below `replicas` live copies.
pub async fn status(etcd: &EtcdConfig, replicas: usize) -> Result<ClusterStatus> {
    let etcd = Etcd::connect(etcd)?;
    Ok(of(&etcd.snapshot().await?, replicas))
}

/// The status of the cluster as `snapshot` has it.
pub(crate) fn of(snapshot: &Snapshot, replicas: usize) -> ClusterStatus {
    let wanted = replicas.min(snapshot.nodes.len()).max(1);
    let (mut under, mut unavailable) = (0, 0);
    let tables = snapshot
        .tables
        .iter()
        .map(|(name, (entry, _))| TableStatus {
            name: name.clone(),
            version: entry.version,
            rows: entry.rows,
            bytes: entry.bytes,
            partitions: entry
                .partitions
                .iter()
                .map(|p| {
                    let live = p
                        .replicas
                        .iter()
                        .filter(|r| snapshot.nodes.contains_key(*r))
                        .count();
                    under += usize::from(live < wanted);
                    unavailable += usize::from(live == 0);
                    PartitionStatus {
                        name: p.name.clone(),
                        rows: p.rows,
                        bytes: p.bytes,
                        replicas: p.replicas.clone(),
                        live,
                        under_replicated: live < wanted,
                    }
                })
                .collect(),
        })
        .collect();
    ClusterStatus {
        nodes: snapshot.nodes.values().cloned().collect(),
        tables,
        replicas,
        under_replicated: under,
        unavailable,
        rebalance: snapshot.settings.rebalance,
    }
}

impl ClusterStatus {
    /// One row per node: the live ones, then those only listed as holding
    /// copies; `this` is the node answering, whose lease stands at
    /// `standing`.
    pub(crate) fn nodes_overview(&self, this: &str, standing: Standing) -> Vec<NodeOverview> {
        let mut rows: BTreeMap<&str, NodeOverview> = self
            .nodes
            .iter()
            .map(|node| {
                let row = NodeOverview {
                    id: node.id.clone(),
                    location: node.location.clone(),
                    this: node.id == this,
                    lease: "held",
                    partitions: 0,
                    bytes: 0,
                    under_replicated: 0,
                };
                (node.id.as_str(), row)
            })
            .collect();
        for partition in self.tables.iter().flat_map(|t| &t.partitions) {
            for node in &partition.replicas {
                let row = rows.entry(node).or_insert_with(|| NodeOverview {
                    id: node.clone(),
                    location: String::new(),
                    this: node == this,
                    lease: "none",
                    partitions: 0,
                    bytes: 0,
                    under_replicated: 0,
                });
                row.partitions += 1;
                row.bytes += partition.bytes;
                row.under_replicated += usize::from(partition.under_replicated);
            }
        }
        if let Some(row) = rows.get_mut(this) {
            row.lease = match standing {
                Standing::Held => "held",
                Standing::Unsure => "unsure",
                Standing::Lost => "lost",
            };
        }
        rows.into_values().collect()
    }

    /// Where the copies of each partition of table `name` are listed.
    pub(crate) fn placement(&self, name: &str) -> Option<Vec<PartitionCopies>> {
        let live: BTreeSet<&str> = self.nodes.iter().map(|n| n.id.as_str()).collect();
        let table = self.tables.iter().find(|t| t.name == name)?;
        Some(
            table
                .partitions
                .iter()
                .map(|p| PartitionCopies {
                    name: p.name.clone(),
                    rows: p.rows,
                    bytes: p.bytes,
                    copies: p
                        .replicas
                        .iter()
                        .map(|node| CopyOn {
                            node: node.clone(),
                            live: live.contains(node.as_str()),
                        })
                        .collect(),
                })
                .collect(),
        )
    }
}

/// Turns rebalancing on or off for the whole cluster whose catalog `etcd`
/// names: every node reads it with the catalog, and moves no copy while it
/// is off (a repair of lost copies is not a move: it goes on).
pub async fn set_rebalance(etcd: &EtcdConfig, on: bool) -> Result<()> {
    let etcd = Etcd::connect(etcd)?;
    let mut settings: Settings = etcd.settings().await?;
    settings.rebalance = on;
    etcd.set_settings(&settings).await
}

impl fmt::Display for ClusterStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "nodes: {}", self.nodes.len())?;
        for node in &self.nodes {
            writeln!(f, "  {}  {}", node.id, node.location)?;
        }
        writeln!(f, "tables: {}", self.tables.len())?;
        for table in &self.tables {
            writeln!(
                f,
                "  {}  version {}  {} rows  {} bytes  {} partitions",
                table.name,
                table.version,
                table.rows,
                table.bytes,
                table.partitions.len()
            )?;
            for p in &table.partitions {
                writeln!(
                    f,
                    "    {}  {} rows  on {} ({} live)",
                    p.name,
                    p.rows,
                    p.replicas.join(", "),
                    p.live
                )?;
            }
        }
        writeln!(
            f,
            "under-replicated partitions: {} (of {} copies each); unavailable: {}",
            self.under_replicated, self.replicas, self.unavailable
        )?;
        let rebalance = if self.rebalance { "on" } else { "off" };
        writeln!(f, "rebalancing: {rebalance}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{PartitionEntry, TableEntry};

    /// Nodes n1 and n2 live; table t with a partition on n1 and n2 and one
    /// on n2 and n3 (which left).
    fn snapshot() -> Snapshot {
        let mut snapshot = Snapshot::default();
        for id in ["n1", "n2"] {
            let node = NodeEntry {
                id: id.into(),
                location: format!("grpc+tcp://{id}:8815"),
                in_place: Vec::new(),
            };
            snapshot.nodes.insert(id.into(), node);
        }
        let part = |name: &str, replicas: [&str; 2]| PartitionEntry {
            name: name.into(),
            rows: 10,
            bytes: 80,
            replicas: replicas.iter().map(|r| (*r).to_string()).collect(),
        };
        let entry = TableEntry {
            version: 3,
            schema: String::new(),
            rows: 20,
            bytes: 160,
            partitions: vec![part("p0", ["n1", "n2"]), part("p1", ["n2", "n3"])],
            written_ms: 1,
        };
        snapshot.tables.insert("t".into(), (entry, 7));
        snapshot
    }

    #[test]
    fn each_node_has_a_row_with_its_lease_partitions_and_missing_copies() {
        let status = of(&snapshot(), 2);
        assert_eq!((status.under_replicated, status.unavailable), (1, 0));
        let rows = status.nodes_overview("n1", Standing::Unsure);
        let summary: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.id.as_str(),
                    r.this,
                    r.lease,
                    r.partitions,
                    r.under_replicated,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("n1", true, "unsure", 1, 0),
                ("n2", false, "held", 2, 1),
                ("n3", false, "none", 1, 1),
            ]
        );
        assert_eq!(rows[1].bytes, 160);
        assert!(rows[2].location.is_empty());
    }

    #[test]
    fn placement_names_each_copy_and_whether_its_node_lives() {
        let status = of(&snapshot(), 2);
        let placement = status.placement("t").unwrap();
        let copies: Vec<Vec<(&str, bool)>> = placement
            .iter()
            .map(|p| p.copies.iter().map(|c| (c.node.as_str(), c.live)).collect())
            .collect();
        assert_eq!(
            copies,
            [
                vec![("n1", true), ("n2", true)],
                vec![("n2", true), ("n3", false)]
            ]
        );
        assert!(status.placement("missing").is_none());
    }
}

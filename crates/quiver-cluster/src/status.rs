//! `quiver cluster status`: nodes, tables, partitions and the data with
//! fewer live copies than asked for, read from etcd; and `quiver cluster
//! rebalance`, which turns moving copies between nodes on or off.

use std::fmt;

use serde::Serialize;

use crate::catalog::{NodeEntry, Settings};
use crate::error::Result;
use crate::etcd::{Etcd, EtcdConfig};

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
}

/// Reads the status of the cluster whose catalog `etcd` names, counting a
/// partition under-replicated below `replicas` live copies.
pub async fn status(etcd: &EtcdConfig, replicas: usize) -> Result<ClusterStatus> {
    let etcd = Etcd::connect(etcd)?;
    let snapshot = etcd.snapshot().await?;
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
                    }
                })
                .collect(),
        })
        .collect();
    Ok(ClusterStatus {
        nodes: snapshot.nodes.into_values().collect(),
        tables,
        replicas,
        under_replicated: under,
        unavailable,
        rebalance: snapshot.settings.rebalance,
    })
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

//! quiver on several machines.
//!
//! Membership and the table catalog live in etcd (crate [`quiver_etcd`]):
//! each node registers under a lease, and each table's current version is
//! one key, published by a compare-and-swap transaction. A put through any
//! node is split into partitions placed over the live nodes by rendezvous
//! hashing, each stored on `--replicas` nodes as a table of the local store
//! (by DoPut between nodes), and published only when every copy is stored.
//! GetFlightInfo on any node gives one endpoint per partition whose
//! locations are its replicas. Each node repairs the partitions whose first
//! live holder it is when a node is lost, and drops partitions no version
//! and no put in flight (an intent) holds; a node that stops answering is
//! passed over within a second, long before its lease ends. Flight SQL on any node plans across the cluster with
//! `datafusion-distributed` (module `sql`): scans run on the nodes holding the
//! partitions. docs/cluster.md tells the design and what it promises.

mod catalog;
mod compact;
mod error;
mod etcd;
mod history;
mod hooks;
mod node;
mod peers;
mod placement;
mod put;
mod reads;
mod rebalance;
mod repair;
mod sql;
mod status;
mod tables;
#[cfg(test)]
mod testing;

pub use catalog::{NodeEntry, PARTITION_PREFIX, PartitionEntry, TableEntry};
pub use error::{ClusterError, Result};
pub use etcd::EtcdConfig;
pub use node::{ClusterNode, ClusterOptions};
pub use quiver_etcd::{Credentials as EtcdCredentials, Tls as EtcdTls};
pub use status::{ClusterStatus, PartitionStatus, TableStatus, set_rebalance, status};

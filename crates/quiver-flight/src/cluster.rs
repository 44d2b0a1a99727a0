//! Where a server's tables live: on it alone ([`SingleServer`], its
//! [`LocalTables`]) or across a cluster (crates/quiver-cluster's node: the
//! catalog in etcd laid over the local store's tables, the services only
//! nodes call, and the SQL engine's view of the catalog). The service holds
//! one [`Topology`] and never asks which.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Serialize;

pub use crate::requests::reused;

use crate::tables::{LocalTables, Tables};

/// Where a server's tables live, as the Flight service sees it.
pub trait Topology: Send + Sync + std::fmt::Debug {
    /// How this node tells the other nodes' calls from clients' (the
    /// cluster's secret and the services only nodes may call); `None`
    /// where there are no other nodes.
    fn nodes(&self) -> Option<crate::auth::Nodes>;

    /// The tables every handler reads and writes, laid over this node's
    /// `local` ones.
    fn tables(self: Arc<Self>, local: LocalTables) -> Arc<dyn Tables>;

    /// The tables the SQL engine reads, laid over this node's `local` ones,
    /// and the session that plans queries over them.
    fn sql_tables(&self, local: Arc<quiver_sql::StoreTables>) -> Arc<dyn quiver_sql::TableSource>;

    /// Adds what a node serves besides Flight on the same port (a cluster
    /// node's workers of distributed SQL) to `routes`.
    fn add_services(&self, routes: &mut tonic::service::RoutesBuilder);

    /// The nodes as this node's catalog has them, one row each (the
    /// console's Live page); `None` where there are no other nodes.
    fn nodes_overview(&self) -> BoxFuture<'_, Option<Vec<NodeOverview>>> {
        Box::pin(async { None })
    }

    /// Where the copies of each partition of table `name` live; `None`
    /// where there are no other nodes, or no such table in the catalog.
    fn placement<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Option<Vec<PartitionCopies>>> {
        let _ = name;
        Box::pin(async { None })
    }
}

/// A node of a cluster, as the console's Live page lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeOverview {
    /// Its `--node-id`.
    pub id: String,
    /// Its Flight location; empty for a node the catalog lists as holding
    /// copies but that is not registered.
    pub location: String,
    /// Whether it is the node answering.
    pub this: bool,
    /// Where it stands with its lease: `held` (registered under a live
    /// lease), `none` (not registered: stopped or lost); for the node
    /// answering, also `unsure` (etcd has not answered since the lease's
    /// time ran out) or `lost`.
    pub lease: &'static str,
    /// The partition copies the catalog lists on it.
    pub partitions: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Of those partitions, the ones with fewer live copies than asked for.
    pub under_replicated: usize,
}

/// One partition of a table, and the nodes its copies are listed on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionCopies {
    /// Its storage name.
    pub name: String,
    /// Its rows.
    pub rows: u64,
    /// Its bytes.
    pub bytes: u64,
    /// The nodes listed as holding a copy, each with whether it is live.
    pub copies: Vec<CopyOn>,
}

/// A copy of a partition: the node it is on, and whether that node is live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CopyOn {
    /// The node's id.
    pub node: String,
    /// Whether the node is registered (holds a lease).
    pub live: bool,
}

/// A server alone: its own store's tables, and nothing served besides
/// Flight.
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleServer;

impl Topology for SingleServer {
    fn nodes(&self) -> Option<crate::auth::Nodes> {
        None
    }

    fn tables(self: Arc<Self>, local: LocalTables) -> Arc<dyn Tables> {
        Arc::new(local)
    }

    fn sql_tables(&self, local: Arc<quiver_sql::StoreTables>) -> Arc<dyn quiver_sql::TableSource> {
        local
    }

    fn add_services(&self, _routes: &mut tonic::service::RoutesBuilder) {}
}

//! Where a server's tables live: on it alone ([`SingleServer`], its
//! [`LocalTables`]) or across a cluster (crates/quiver-cluster's node: the
//! catalog in etcd laid over the local store's tables, the services only
//! nodes call, and the SQL engine's view of the catalog). The service holds
//! one [`Topology`] and never asks which.

use std::sync::Arc;

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

//! What a cluster node adds to the Flight service: its tables (the catalog
//! in etcd, laid over the local store's), the services only nodes call, and
//! the SQL engine's view of the catalog. crates/quiver-cluster implements
//! [`ClusterHooks`]; with no cluster the service holds `None` and serves
//! its [`LocalTables`].

use std::sync::Arc;

pub use crate::requests::reused;

use crate::tables::{LocalTables, Tables};

/// The cluster side of a node, as the Flight service sees it.
pub trait ClusterHooks: Send + Sync + std::fmt::Debug {
    /// How this node tells the other nodes' calls from clients': the
    /// cluster's secret and the services only nodes may call.
    fn nodes(&self) -> crate::auth::Nodes;

    /// The cluster's tables, laid over this node's `local` ones: every
    /// handler reads and writes tables through them.
    fn tables(self: Arc<Self>, local: LocalTables) -> Arc<dyn Tables>;

    /// The cluster's tables as the SQL engine reads them, laid over this
    /// node's `local` ones, and the session that plans queries over them
    /// across the nodes.
    fn sql_tables(&self, local: Arc<quiver_sql::StoreTables>) -> Arc<dyn quiver_sql::TableSource>;

    /// Adds what a node serves besides Flight on the same port (the workers
    /// of distributed SQL) to `routes`.
    fn add_services(&self, routes: &mut tonic::service::RoutesBuilder);
}

/// The hooks a service holds.
pub type Cluster = Arc<dyn ClusterHooks>;

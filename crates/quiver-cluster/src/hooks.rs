//! What the Flight service asks of a cluster node ([`Topology`]): its
//! tables, the services only nodes call, and the SQL engine's tables.

use std::sync::Arc;

use futures::future::BoxFuture;
use quiver_flight::cluster::{NodeOverview, PartitionCopies, Topology};
use quiver_flight::tables::{LocalTables, Tables};

use crate::node::ClusterNode;
use crate::sql::CatalogSource;
use crate::tables::CatalogTables;

impl Topology for ClusterNode {
    fn nodes(&self) -> Option<quiver_flight::auth::Nodes> {
        Some(quiver_flight::auth::Nodes {
            key: self.peers.key().clone(),
            internal: self.sql.internal_paths(),
        })
    }

    fn tables(self: Arc<Self>, local: LocalTables) -> Arc<dyn Tables> {
        Arc::new(CatalogTables::new(self, local))
    }

    fn sql_tables(&self, local: Arc<quiver_sql::StoreTables>) -> Arc<dyn quiver_sql::TableSource> {
        Arc::new(CatalogSource::new(self.sql.clone(), local))
    }

    fn add_services(&self, routes: &mut tonic::service::RoutesBuilder) {
        self.sql.add_services(routes);
    }

    // Both from the catalog as last read (the watch keeps it current), so
    // that a page polling them costs etcd nothing.
    fn nodes_overview(&self) -> BoxFuture<'_, Option<Vec<NodeOverview>>> {
        let status = crate::status::of(&self.cached(), self.options.replicas);
        let rows = status.nodes_overview(&self.options.node_id, self.standing());
        Box::pin(async move { Some(rows) })
    }

    fn placement<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Option<Vec<PartitionCopies>>> {
        let copies = crate::status::of(&self.cached(), self.options.replicas).placement(name);
        Box::pin(async move { copies })
    }
}

//! Tables of a cluster's catalog, as the engine sees them.
//!
//! On a cluster node (crates/quiver-cluster) the tables clients put live in
//! the cluster's catalog, spread over the nodes, and the local store holds
//! only this node's copies of their partitions. The engine asks a
//! [`ClusterCatalog`] for those tables and lets it set up the session they
//! are planned in (the distributed planner). With no cluster nothing here
//! is used.

use std::fmt::Debug;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::datasource::TableProvider;
use datafusion::error::Result;
use datafusion::execution::SessionStateBuilder;

/// A cluster's tables and how to plan over them.
#[async_trait]
pub trait ClusterCatalog: Send + Sync + Debug {
    /// Every table of the catalog by name, with its schema, as last read.
    fn tables(&self) -> Vec<(String, SchemaRef)>;

    /// Table `name` as the catalog has it now; `None` when it has none.
    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>>;

    /// The engine's session with what planning over the cluster needs.
    fn session(&self, builder: SessionStateBuilder) -> SessionStateBuilder;

    /// Finds out now which nodes answer, so that the next plan passes over
    /// those that do not: called before a query that failed because a node
    /// was out of reach is planned again.
    async fn recheck(&self);

    /// The locations of the cluster's live nodes, as last read: where else a
    /// client may ask a query should this node stop answering.
    fn locations(&self) -> Vec<String>;
}

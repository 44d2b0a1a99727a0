//! What a cluster node adds to the Flight service: its tables (the catalog
//! in etcd, laid over the local store's), the services only nodes call, and
//! the SQL engine's view of the catalog. crates/quiver-cluster implements
//! [`ClusterHooks`]; with no cluster the service holds `None` and serves
//! its [`LocalTables`].

use std::sync::Arc;

pub use crate::requests::reused;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use quiver_store::{MemoryCharge, TableWriter, WriteMode};

use crate::tables::{LocalTables, Tables};

/// A put received by a cluster node, to spread over the cluster.
#[derive(Debug)]
pub struct ClusterPut {
    /// The table written.
    pub table: String,
    /// Replace, append or create.
    pub mode: WriteMode,
    /// Partitions asked for by the put (`None`: one per live node).
    pub partitions: Option<usize>,
    /// The batches' schema.
    pub schema: SchemaRef,
    /// The batches, in order.
    pub batches: Vec<RecordBatch>,
    /// Their memory, charged to this node's pool until they are shipped.
    pub charge: MemoryCharge,
    /// The put's request id: a put with the id of one already committed is
    /// answered with that commit's result, not applied again.
    pub request: Option<String>,
}

impl ClusterPut {
    /// A put of `writer`'s rows as `table`: the writer read, checked and
    /// charged them, and is never committed.
    pub fn gathered(
        table: String,
        mode: WriteMode,
        partitions: Option<usize>,
        writer: TableWriter<'_>,
    ) -> Self {
        let (schema, batches, charge) = writer.into_batches();
        Self {
            table,
            mode,
            partitions,
            schema,
            batches,
            charge,
            request: None,
        }
    }

    /// The put, carrying request id `request`.
    #[must_use]
    pub fn with_request(mut self, request: Option<String>) -> Self {
        self.request = request;
        self
    }
}

/// What a cluster commit published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    /// The table's new version in the catalog.
    pub version: u64,
    /// Rows of the whole new version.
    pub rows: u64,
    /// Bytes of the whole new version.
    pub bytes: u64,
}

impl From<&quiver_store::TableVersion> for Published {
    /// What committing `version` to a single node's store published.
    fn from(version: &quiver_store::TableVersion) -> Self {
        Self {
            version: version.version(),
            rows: version.num_rows(),
            bytes: version.num_bytes(),
        }
    }
}

/// The cluster side of a node, as the Flight service sees it.
pub trait ClusterHooks: Send + Sync + std::fmt::Debug {
    /// How this node tells the other nodes' calls from clients': the
    /// cluster's secret and the services only nodes may call.
    fn nodes(&self) -> crate::auth::Nodes;

    /// The cluster's tables, laid over this node's `local` ones: every
    /// handler reads and writes tables through them.
    fn tables(self: Arc<Self>, local: LocalTables) -> Arc<dyn Tables>;

    /// The cluster's tables as the SQL engine sees them, and the session
    /// that plans queries over them across the nodes.
    fn sql_catalog(&self) -> Arc<dyn quiver_sql::ClusterCatalog>;

    /// Adds what a node serves besides Flight on the same port (the workers
    /// of distributed SQL) to `routes`.
    fn add_services(&self, routes: &mut tonic::service::RoutesBuilder);
}

/// The hooks a service holds.
pub type Cluster = Arc<dyn ClusterHooks>;

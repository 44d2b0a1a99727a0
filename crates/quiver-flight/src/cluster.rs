//! What a cluster node adds to the Flight service. The service calls these
//! hooks when `--cluster` is on; crates/quiver-cluster implements them over
//! etcd. With no cluster the service holds `None` and none of this runs.

use std::sync::Arc;

pub use crate::requests::reused;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow_flight::{FlightDescriptor, FlightInfo};
use quiver_store::{MemoryCharge, TableWriter, WriteMode};
use tonic::Status;

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

/// A cluster table's whole current version, read from its partitions'
/// replicas.
#[derive(Debug)]
pub struct ClusterRead {
    /// The version read.
    pub version: u64,
    /// The table's schema.
    pub schema: SchemaRef,
    /// Its rows, partition after partition.
    pub batches: Vec<RecordBatch>,
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
#[tonic::async_trait]
pub trait ClusterHooks: Send + Sync + std::fmt::Debug {
    /// How this node tells the other nodes' calls from clients': the
    /// cluster's secret and the services only nodes may call.
    fn nodes(&self) -> crate::auth::Nodes;

    /// The FlightInfo of table `name` from the catalog: one endpoint per
    /// partition, its replicas' locations. `None` when the catalog has no
    /// such table.
    async fn flight_info(
        &self,
        name: &str,
        descriptor: FlightDescriptor,
    ) -> Option<Result<FlightInfo, Status>>;

    /// The FlightInfo of every catalog table whose name starts with `prefix`.
    async fn list(&self, prefix: &str) -> Result<Vec<FlightInfo>, Status>;

    /// Table `name`'s schema from the catalog; `None` when the catalog has
    /// no such table.
    async fn schema(&self, name: &str) -> Option<Result<SchemaRef, Status>>;

    /// Table `name`'s current version, every partition read from this
    /// node's copy or a replica's; `None` when the catalog has no such table.
    async fn read(&self, name: &str) -> Option<Result<ClusterRead, Status>>;

    /// Spreads `put` over the live nodes and publishes it as the table's next
    /// version, once every partition is stored on its replicas.
    async fn put(&self, put: ClusterPut) -> Result<Published, Status>;

    /// Drops a catalog table; `None` when the catalog has no such table.
    async fn delete(&self, name: &str) -> Option<Result<Published, Status>>;

    /// Renames catalog table `from` to `to` in one catalog transaction;
    /// `None` when the catalog has no table `from`.
    async fn rename(
        &self,
        from: &str,
        to: &str,
        overwrite: bool,
    ) -> Option<Result<Published, Status>>;

    /// Publishes catalog tables `from` as table `into` in one catalog
    /// transaction (the `publish` action); `None` when none of `from` is a
    /// catalog table.
    async fn publish(
        &self,
        into: &str,
        from: &[String],
        mode: WriteMode,
    ) -> Option<Result<Published, Status>>;

    /// The cluster's tables as the SQL engine sees them, and the session
    /// that plans queries over them across the nodes.
    fn sql_catalog(&self) -> Arc<dyn quiver_sql::ClusterCatalog>;

    /// Adds what a node serves besides Flight on the same port (the workers
    /// of distributed SQL) to `routes`.
    fn add_services(&self, routes: &mut tonic::service::RoutesBuilder);
}

/// The hooks a service holds.
pub type Cluster = Arc<dyn ClusterHooks>;

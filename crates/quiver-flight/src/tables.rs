//! Where a node's tables live, as every handler sees them.
//!
//! The Flight service, functions' `apply` and the shared-memory data plane
//! reach tables only through [`Tables`]; none of them asks whether the node
//! is in a cluster. A single node's tables are its store ([`LocalTables`]).
//! A cluster node's are the cluster's catalog, which crates/quiver-cluster
//! lays over the same local tables (they hold this node's copies of
//! partitions, and any table a single node left in the data directory).
//!
//! Partition storage names ([`quiver_store::RESERVED_PREFIX`]) are not
//! tables: every name a client gives is checked by
//! [`quiver_store::validate_name`] before it gets here, so only the
//! node-only `{"partition": NAME}` put and endpoint tickets name them.

use std::fmt::Debug;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use quiver_shm::ShmServer;
use quiver_store::{TableStore, TableVersion, TableWriter, WriteMode};
use serde_json::json;

use crate::published::Published;
use crate::put_options::PutOptions;
use crate::requests::Requests;
use crate::ticket::TableTicket;
use crate::{Error, Result};

/// Rows read from a table: a whole version, or one of its partitions.
#[derive(Debug)]
pub struct TableRead {
    /// The version read.
    pub version: u64,
    /// The table's schema.
    pub schema: SchemaRef,
    /// The rows, in order.
    pub batches: Vec<RecordBatch>,
    /// The local version the rows are read from, held (its memory charged)
    /// while they are sent; `None` for rows gathered from other nodes.
    pub held: Option<Arc<TableVersion>>,
}

/// A node's tables.
#[tonic::async_trait]
pub trait Tables: Send + Sync + Debug {
    /// Table `name`'s FlightInfo: its endpoints and where each is read.
    /// With `shm`, what this node holds is offered over shared memory too.
    async fn flight_info(
        &self,
        name: &str,
        descriptor: FlightDescriptor,
        shm: Option<&ShmServer>,
    ) -> Result<FlightInfo>;

    /// The FlightInfo of every table whose name starts with `prefix`.
    async fn list(&self, prefix: &str) -> Result<Vec<FlightInfo>>;

    /// Table `name`'s schema.
    async fn schema(&self, name: &str) -> Result<SchemaRef>;

    /// Partition `index` of `count` of table `name`'s current version
    /// (`0` of `1`: the whole table). `name` may be a partition's storage
    /// name: the ticket of an endpoint on this node.
    async fn read(&self, name: &str, index: usize, count: usize) -> Result<TableRead>;

    /// A put of table `name`: it reads, checks and charges the rows pushed,
    /// and [`TablePut::commit`] publishes them. A repeated put (the request
    /// id of one committed lately) is answered with that commit's result,
    /// not applied again.
    fn open(
        &self,
        name: &str,
        options: &PutOptions,
        schema: SchemaRef,
    ) -> Result<Box<dyn TablePut + '_>>;

    /// Drops table `name`; answers with what it held.
    async fn delete(&self, name: &str) -> Result<Published>;

    /// Renames table `from` to `to`, replacing a table `to` only with
    /// `overwrite`.
    async fn rename(&self, from: &str, to: &str, overwrite: bool) -> Result<Published>;

    /// Publishes tables `from` as table `into` at once (the `publish`
    /// action), and drops them.
    async fn publish(
        &self,
        into: &str,
        from: &[String],
        mode: WriteMode,
        partitions: Option<usize>,
    ) -> Result<Published>;

    /// Whether a put over shared memory may become a table of this node's
    /// store in place (its batches the client's memfds, passed on as they
    /// are to later shared-memory reads); if not, it goes through
    /// [`Tables::open`] as any put. A cluster spreads every put over its
    /// nodes.
    fn direct_puts(&self) -> bool;

    /// The nodes a client may send a put placed here to (the `nodes`
    /// action): a cluster's live nodes; none on a single server.
    async fn nodes(&self) -> Result<Vec<NodeLocation>>;
}

/// A node of a cluster, as the `nodes` action lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeLocation {
    /// Its `--node-id`.
    pub id: String,
    /// Its Flight location.
    pub location: String,
}

/// A put under way: the rows pushed as they are received, published at
/// once by [`TablePut::commit`]; dropped uncommitted, it publishes nothing.
#[tonic::async_trait]
pub trait TablePut: Send {
    /// Adds a batch charged `bytes` ([`TableWriter::push_charged`]). A
    /// cluster node may hand rows on to other nodes here, and wait for room.
    async fn push_charged(&mut self, batch: RecordBatch, bytes: u64) -> Result<()>;

    /// Adds a batch charged its buffers' bytes.
    async fn push(&mut self, batch: RecordBatch) -> Result<()> {
        let bytes = quiver_store::batch_bytes(&batch);
        self.push_charged(batch, bytes).await
    }

    /// Rows pushed so far.
    fn num_rows(&self) -> u64;

    /// Bytes pushed so far.
    fn num_bytes(&self) -> u64;

    /// Publishes the rows pushed as the table's next version.
    async fn commit(self: Box<Self>) -> Result<Published>;
}

/// A put into this node's store.
#[derive(Debug)]
struct LocalPut<'a> {
    writer: TableWriter<'a>,
    /// The put's request id.
    request: Option<String>,
    requests: &'a Requests,
}

#[tonic::async_trait]
impl TablePut for LocalPut<'_> {
    async fn push_charged(&mut self, batch: RecordBatch, bytes: u64) -> Result<()> {
        Ok(self.writer.push_charged(batch, bytes)?)
    }

    fn num_rows(&self) -> u64 {
        self.writer.num_rows()
    }

    fn num_bytes(&self) -> u64 {
        self.writer.num_bytes()
    }

    async fn commit(self: Box<Self>) -> Result<Published> {
        let Self {
            writer,
            request,
            requests,
        } = *self;
        let name = writer.name().to_string();
        requests.once(request.as_deref(), &name, || {
            let version = quiver_sql::store_write(|| writer.commit())?;
            Ok(Published::from(&*version))
        })
    }
}

/// The tables of this node's store.
#[derive(Debug)]
pub struct LocalTables {
    store: Arc<TableStore>,
    /// The location put in every endpoint.
    location: String,
    /// Endpoints per table when its put chose none.
    default_partitions: usize,
    /// The request ids of puts committed lately.
    requests: Requests,
}

impl LocalTables {
    /// The tables of `store`, served at `location`, split over
    /// `default_partitions` endpoints unless a put chose otherwise.
    pub fn new(store: Arc<TableStore>, location: String, default_partitions: usize) -> Self {
        Self {
            store,
            location,
            default_partitions: default_partitions.max(1),
            requests: Requests::default(),
        }
    }

    /// The store behind the tables.
    pub fn store(&self) -> &Arc<TableStore> {
        &self.store
    }

    /// How many endpoints `table` is split over: its own setting or the
    /// server's, never more than its rows, at least one.
    fn partitions_for(&self, table: &TableVersion) -> usize {
        let wanted = table.partitions().unwrap_or(self.default_partitions);
        let rows = usize::try_from(table.num_rows()).unwrap_or(usize::MAX);
        wanted.min(rows).max(1)
    }

    fn info(&self, table: &TableVersion, descriptor: FlightDescriptor) -> Result<FlightInfo> {
        let partitions = self.partitions_for(table);
        let endpoints = (0..partitions).map(|partition| {
            let ticket = TableTicket {
                table: table.name().to_string(),
                version: Some(table.version()),
                partition,
                partitions,
                columns: None,
                filter: None,
            };
            FlightEndpoint::new()
                .with_ticket(Ticket::new(ticket.encode()))
                .with_location(self.location.clone())
        });
        let metadata = json!({
            "version": table.version(),
            "partitions": partitions,
            "written_ms": table.written_ms(),
        });
        Ok(FlightInfo::new()
            .try_with_schema(table.schema())?
            .with_descriptor(descriptor)
            .with_endpoints(endpoints.collect())
            .with_total_records(i64::try_from(table.num_rows()).unwrap_or(i64::MAX))
            .with_total_bytes(i64::try_from(table.num_bytes()).unwrap_or(i64::MAX))
            .with_ordered(true)
            .with_app_metadata(metadata.to_string()))
    }

    /// Replaces each endpoint of `info` whose partition this node holds by
    /// one over shared memory, in the same place; the others stay as they
    /// are (gRPC endpoints on other nodes).
    pub fn local_endpoints_over_shm(&self, info: &mut FlightInfo, shm: &ShmServer) -> Result<()> {
        for endpoint in &mut info.endpoint {
            let Some(ticket) = &endpoint.ticket else {
                continue;
            };
            let Ok(ticket) = TableTicket::decode(&ticket.ticket) else {
                continue;
            };
            if let Ok(version) = self.store.get(&ticket.table) {
                *endpoint = shm.get_endpoint(version)?;
            }
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl Tables for LocalTables {
    async fn flight_info(
        &self,
        name: &str,
        descriptor: FlightDescriptor,
        shm: Option<&ShmServer>,
    ) -> Result<FlightInfo> {
        let table = self.store.get(name)?;
        let mut info = self.info(&table, descriptor)?;
        // One more endpoint, over shared memory (a client that did not ask,
        // or a server with it off, sees only the gRPC endpoints).
        if let Some(shm) = shm {
            info.endpoint.push(shm.get_endpoint(table)?);
        }
        Ok(info)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<FlightInfo>> {
        self.store
            .list(prefix)
            .into_iter()
            // A cluster node's partitions are its catalog tables' pieces.
            .filter(|t| !quiver_store::is_reserved(t.name()))
            .map(|t| self.info(&t, FlightDescriptor::new_path(vec![t.name().to_string()])))
            .collect()
    }

    async fn schema(&self, name: &str) -> Result<SchemaRef> {
        Ok(Arc::clone(self.store.get(name)?.schema()))
    }

    async fn read(&self, name: &str, index: usize, count: usize) -> Result<TableRead> {
        let table = self.store.get(name)?;
        Ok(TableRead {
            version: table.version(),
            schema: Arc::clone(table.schema()),
            batches: table.partition(index, count)?,
            held: Some(table),
        })
    }

    fn open(
        &self,
        name: &str,
        options: &PutOptions,
        schema: SchemaRef,
    ) -> Result<Box<dyn TablePut + '_>> {
        let writer = self
            .store
            .writer(name, options.mode, schema, options.partitions)?;
        Ok(Box::new(LocalPut {
            writer,
            request: options.request.clone(),
            requests: &self.requests,
        }))
    }

    async fn delete(&self, name: &str) -> Result<Published> {
        let removed = quiver_sql::store_write(|| self.store.remove(name))?;
        Ok(Published::from(&*removed))
    }

    async fn rename(&self, from: &str, to: &str, overwrite: bool) -> Result<Published> {
        let renamed = quiver_sql::store_write(|| self.store.rename(from, to, overwrite))?;
        Ok(Published::from(&*renamed))
    }

    async fn publish(
        &self,
        into: &str,
        from: &[String],
        mode: WriteMode,
        partitions: Option<usize>,
    ) -> Result<Published> {
        let version = quiver_sql::store_write(|| self.store.publish(into, from, mode, partitions))?;
        Ok(Published::from(&*version))
    }

    fn direct_puts(&self) -> bool {
        true
    }

    async fn nodes(&self) -> Result<Vec<NodeLocation>> {
        Ok(Vec::new())
    }
}

impl From<tonic::Status> for Error {
    /// A status from another crate's part of a request (the cluster's).
    fn from(status: tonic::Status) -> Self {
        Self::Status(Box::new(status))
    }
}

/// The SQL engine's writes (`CREATE TABLE [AS]`, `INSERT`, `DROP TABLE`)
/// through a node's [`Tables`]: the path of a DoPut, so on a cluster node
/// they are spread and replicated as a put is.
#[derive(Debug)]
pub(crate) struct SqlWrites(pub(crate) Arc<dyn Tables>);

#[tonic::async_trait]
impl quiver_sql::TableSink for SqlWrites {
    async fn write(
        &self,
        name: &str,
        mode: WriteMode,
        schema: SchemaRef,
        rows: quiver_sql::Rows<'_>,
    ) -> quiver_sql::Result<u64> {
        let options = PutOptions {
            mode,
            ..PutOptions::default()
        };
        let (written, _) = put_rows(&*self.0, name, &options, schema, rows)
            .await
            .map_err(sql_error)?;
        Ok(written)
    }

    async fn remove(&self, name: &str) -> quiver_sql::Result<()> {
        self.0.delete(name).await.map_err(sql_error)?;
        Ok(())
    }
}

/// Puts `rows` as table `name` through `tables`, as a DoPut does: each
/// batch pushed as it comes, all published at the commit. Answers the rows
/// pushed and what the commit published.
async fn put_rows<E>(
    tables: &dyn Tables,
    name: &str,
    options: &PutOptions,
    schema: SchemaRef,
    mut rows: impl futures::Stream<Item = std::result::Result<RecordBatch, E>> + Unpin,
) -> Result<(u64, Published)>
where
    Error: From<E>,
{
    let mut put = tables.open(name, options, schema)?;
    while let Some(batch) = futures::StreamExt::next(&mut rows).await {
        put.push(batch?).await?;
    }
    let pushed = put.num_rows();
    Ok((pushed, put.commit().await?))
}

/// A table error as the SQL engine's: the store's as they are (the engine
/// tells a missing table by them), any other kept whole, to come back out
/// unchanged when the statement's error reaches the client.
fn sql_error(error: Error) -> quiver_sql::SqlError {
    match error {
        Error::Store(store) => quiver_sql::SqlError::Store(store),
        Error::Sql(sql) => sql,
        other => quiver_sql::SqlError::Sink(Box::new(other)),
    }
}

/// A put over shared memory through a node's [`Tables`] (a cluster node's,
/// which spread it as a put over gRPC): run on the socket's connection
/// thread, on the service's runtime.
#[derive(Debug)]
pub(crate) struct ShmPuts {
    pub(crate) tables: Arc<dyn Tables>,
    pub(crate) table: String,
    pub(crate) options: PutOptions,
    pub(crate) runtime: tokio::runtime::Handle,
}

impl quiver_shm::PutTarget for ShmPuts {
    fn put(
        &self,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> quiver_shm::Result<quiver_shm::Stored> {
        let rows = futures::stream::iter(batches.into_iter().map(Ok::<_, Error>));
        let put = put_rows(&*self.tables, &self.table, &self.options, schema, rows);
        match self.runtime.block_on(put) {
            Ok((_, published)) => Ok(quiver_shm::Stored {
                table: self.table.clone(),
                version: published.version,
                rows: published.rows,
                bytes: published.bytes,
            }),
            Err(e) => Err(quiver_shm::ShmError::Status(Box::new(e.into()))),
        }
    }
}

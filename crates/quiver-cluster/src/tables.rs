//! A cluster node's tables: the catalog's, laid over the local store's.
//!
//! A name the catalog has is a cluster table: read from its partitions'
//! replicas, written by spreading the put over the nodes, changed by a
//! catalog transaction. Any other name is the local store's: a partition's
//! storage name (an endpoint's ticket, or a copy another node stores here
//! with the node role), or a table a single node left in the data
//! directory. Puts of table names always go to the catalog.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow_flight::{FlightDescriptor, FlightInfo};
use quiver_flight::tables::{LocalTables, NodeLocation, TablePut, TableRead, Tables};
use quiver_flight::{Published, PutOptions};
use quiver_shm::ShmServer;
use quiver_store::{WriteMode, is_reserved};

use crate::error::flight;
use crate::node::ClusterNode;
use crate::put::CatalogPut;

/// The tables a cluster node serves.
#[derive(Debug)]
pub(crate) struct CatalogTables {
    node: Arc<ClusterNode>,
    local: LocalTables,
}

impl CatalogTables {
    pub(crate) fn new(node: Arc<ClusterNode>, local: LocalTables) -> Self {
        Self { node, local }
    }
}

#[tonic::async_trait]
impl Tables for CatalogTables {
    async fn flight_info(
        &self,
        name: &str,
        descriptor: FlightDescriptor,
        shm: Option<&ShmServer>,
    ) -> quiver_flight::Result<FlightInfo> {
        let Some(info) = self.node.flight_info(name, descriptor.clone()).await else {
            return self.local.flight_info(name, descriptor, shm).await;
        };
        let mut info = flight(info)?;
        if let Some(shm) = shm {
            self.local.local_endpoints_over_shm(&mut info, shm)?;
        }
        Ok(info)
    }

    async fn list(&self, prefix: &str) -> quiver_flight::Result<Vec<FlightInfo>> {
        let mut infos = flight(self.node.list(prefix).await)?;
        infos.extend(self.local.list(prefix).await?);
        Ok(infos)
    }

    async fn schema(&self, name: &str) -> quiver_flight::Result<SchemaRef> {
        match self.node.schema(name).await {
            Some(schema) => flight(schema),
            None => self.local.schema(name).await,
        }
    }

    async fn read(
        &self,
        name: &str,
        index: usize,
        count: usize,
    ) -> quiver_flight::Result<TableRead> {
        // A partition is this node's own: no catalog read on the path of
        // every endpoint.
        if is_reserved(name) {
            return self.local.read(name, index, count).await;
        }
        if count != 1 {
            // Refused before anything is read.
            if self.node.schema(name).await.is_some() {
                return Err(quiver_flight::Error::invalid(format!(
                    "a ticket naming cluster table '{name}' reads it whole: take its \
                     partitions' tickets from GetFlightInfo"
                )));
            }
            return self.local.read(name, index, count).await;
        }
        match self.node.read(name).await {
            Some(read) => flight(read),
            None => self.local.read(name, index, count).await,
        }
    }

    fn open(
        &self,
        name: &str,
        options: &PutOptions,
        schema: SchemaRef,
    ) -> quiver_flight::Result<Box<dyn TablePut + '_>> {
        if is_reserved(name) {
            return self.local.open(name, options, schema);
        }
        // Never committed here: a writer only to read and charge the rows
        // (a replace writer checks nothing of the local store); the mode is
        // checked against the catalog when the put begins and at commit.
        let writer =
            self.local
                .store()
                .writer(name, WriteMode::Replace, schema, options.partitions)?;
        Ok(Box::new(CatalogPut::new(
            Arc::clone(&self.node),
            name,
            options,
            writer,
        )))
    }

    async fn delete(&self, name: &str) -> quiver_flight::Result<Published> {
        match self.node.delete(name).await {
            Some(deleted) => flight(deleted),
            None => self.local.delete(name).await,
        }
    }

    async fn rename(
        &self,
        from: &str,
        to: &str,
        overwrite: bool,
    ) -> quiver_flight::Result<Published> {
        match self.node.rename(from, to, overwrite).await {
            Some(renamed) => flight(renamed),
            None => self.local.rename(from, to, overwrite).await,
        }
    }

    async fn publish(
        &self,
        into: &str,
        from: &[String],
        mode: WriteMode,
        partitions: Option<usize>,
    ) -> quiver_flight::Result<Published> {
        match self.node.publish(into, from, mode).await {
            Some(published) => flight(published),
            None => self.local.publish(into, from, mode, partitions).await,
        }
    }

    fn direct_puts(&self) -> bool {
        false
    }

    async fn nodes(&self) -> quiver_flight::Result<Vec<NodeLocation>> {
        Ok(self.node.trusted_nodes())
    }
}

//! A cluster node's tables: the catalog's, laid over the local store's.
//!
//! A name the catalog has is a cluster table: read from its partitions'
//! replicas, written by spreading the put over the nodes, changed by a
//! catalog transaction. Any other name is the local store's: a partition's
//! storage name (an endpoint's ticket, or a copy another node stores here
//! with the node role), or a table a single node left in the data
//! directory. Puts of table names always go to the catalog.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};

use arrow::datatypes::SchemaRef;
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use quiver_flight::tables::{LocalTables, NodeLocation, TablePut, TableRead, Tables};
use quiver_flight::ticket::TableTicket;
use quiver_flight::{Published, PutOptions};
use quiver_shm::ShmServer;
use quiver_store::{WriteMode, is_reserved};
use serde_json::json;

use crate::catalog::{NodeEntry, TableEntry};
use crate::error::{ClusterError, Result, flight};
use crate::etcd::{Commit, Guard, Snapshot, Versioned};
use crate::node::ClusterNode;
use crate::put::{COMMIT_ATTEMPTS, CatalogPut, Committed, next_entry, published};

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
        let Some(entry) = self.node.entry(name).await else {
            return self.local.flight_info(name, descriptor, shm).await;
        };
        let nodes = self.replicas_of(&entry).await;
        self.node.hold_for_reader(&entry);
        let mut info = flight(self.info(name, &entry, &nodes, descriptor, Dead::Refuse))?;
        if let Some(shm) = shm {
            self.local.local_endpoints_over_shm(&mut info, shm)?;
        }
        Ok(info)
    }

    async fn list(&self, prefix: &str) -> quiver_flight::Result<Vec<FlightInfo>> {
        let snapshot = self.snapshot().await;
        let catalog: Result<Vec<FlightInfo>> = snapshot
            .tables
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(name, (entry, _))| {
                let descriptor = FlightDescriptor::new_path(vec![name.clone()]);
                self.info(name, entry, &snapshot.nodes, descriptor, Dead::List)
            })
            .collect();
        let mut infos = flight(catalog)?;
        infos.extend(self.local.list(prefix).await?);
        Ok(infos)
    }

    async fn schema(&self, name: &str) -> quiver_flight::Result<SchemaRef> {
        match self.node.entry(name).await {
            Some(entry) => flight(entry.schema()),
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
            if self.node.entry(name).await.is_some() {
                return Err(quiver_flight::Error::invalid(format!(
                    "a ticket naming cluster table '{name}' reads it whole: take its \
                     partitions' tickets from GetFlightInfo"
                )));
            }
            return self.local.read(name, index, count).await;
        }
        let Some(entry) = self.node.entry(name).await else {
            return self.local.read(name, index, count).await;
        };
        // Every partition read from this node's copy or a replica's.
        let nodes = self.replicas_of(&entry).await;
        self.node.hold_for_reader(&entry);
        let (schema, batches) = flight(self.node.sql.read(name, &entry, &nodes).await)?;
        Ok(TableRead {
            version: entry.version,
            schema,
            batches,
            held: None,
        })
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
        match self.delete_entry(name).await {
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
        match self.rename_entry(from, to, overwrite).await {
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
        match self.publish_entries(into, from, mode).await {
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

/// What a FlightInfo does with a partition no live node holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dead {
    /// Refuses the whole table (GetFlightInfo: a reader would miss rows).
    Refuse,
    /// Lists it, as an endpoint with no location, and counts it in the
    /// `unavailable_partitions` of `app_metadata` (ListFlights: one table
    /// short of copies does not hide the others). A reader of that endpoint
    /// asks this node, which answers NOT_FOUND (as any node not holding a
    /// partition does).
    List,
}

/// The catalog's side: reads of it, and the changes to its tables' entries.
/// The changes answer `None` when the catalog has no table of that name
/// (the local store's then is asked).
impl CatalogTables {
    /// The catalog now, or as last read when etcd is unreachable.
    async fn snapshot(&self) -> Snapshot {
        match self.node.etcd.snapshot().await {
            Ok(snapshot) => {
                self.node.remember(snapshot.clone());
                snapshot
            }
            Err(e) => {
                tracing::debug!("catalog read failed, using the last one: {e}");
                self.node.cached()
            }
        }
    }

    /// The live nodes, to find `entry`'s replicas among: as last read (a
    /// tick ago), read again only when a replica is one this node has not
    /// seen yet (it joined since).
    async fn replicas_of(&self, entry: &TableEntry) -> BTreeMap<String, NodeEntry> {
        let nodes = self
            .node
            .cache
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .nodes
            .clone();
        let unseen = entry
            .partitions
            .iter()
            .flat_map(|p| &p.replicas)
            .any(|id| !nodes.contains_key(id));
        if unseen {
            return self.snapshot().await.nodes;
        }
        nodes
    }

    /// The FlightInfo of catalog table `name` at `entry`: one endpoint per
    /// partition, its replicas' live locations among `nodes`; a partition
    /// no live node holds is refused or listed as `dead` says.
    fn info(
        &self,
        name: &str,
        entry: &TableEntry,
        nodes: &BTreeMap<String, NodeEntry>,
        descriptor: FlightDescriptor,
        dead: Dead,
    ) -> Result<FlightInfo> {
        let schema = entry.schema()?;
        let mut endpoints = Vec::with_capacity(entry.partitions.len());
        let mut unavailable = 0;
        for part in &entry.partitions {
            let mut locations: Vec<&str> = part
                .replicas
                .iter()
                .filter_map(|id| nodes.get(id).map(|n| n.location.as_str()))
                .collect();
            // Clients read the first location first: a node whose calls
            // failed lately goes last.
            locations.sort_by_key(|location| self.node.peers.is_suspect(location));
            if locations.is_empty() && dead == Dead::List {
                unavailable += 1;
            } else if locations.is_empty() {
                return Err(ClusterError::Unreadable(format!(
                    "no live node holds partition {} of table '{name}' (replicas: {})",
                    part.name,
                    part.replicas.join(", ")
                )));
            }
            let mut endpoint = FlightEndpoint::new()
                .with_ticket(Ticket::new(TableTicket::whole(part.name.clone()).encode()));
            for location in locations {
                endpoint = endpoint.with_location(location);
            }
            endpoints.push(endpoint);
        }
        let mut metadata = json!({
            "version": entry.version,
            "partitions": entry.partitions.len(),
            "written_ms": entry.written_ms,
            "cluster": true,
        });
        if unavailable > 0 {
            metadata["unavailable_partitions"] = json!(unavailable);
        }
        Ok(FlightInfo::new()
            .try_with_schema(&schema)?
            .with_descriptor(descriptor)
            .with_endpoints(endpoints)
            .with_total_records(i64::try_from(entry.rows).unwrap_or(i64::MAX))
            .with_total_bytes(i64::try_from(entry.bytes).unwrap_or(i64::MAX))
            .with_ordered(true)
            .with_app_metadata(metadata.to_string()))
    }

    /// Drops catalog table `name`.
    async fn delete_entry(&self, name: &str) -> Option<Result<Published>> {
        if let Err(e) = self.node.lease_for_write().await {
            return Some(Err(e));
        }
        let result = self
            .node
            .commit_table(name, Guard::default(), |_| Ok(None))
            .await
            .and_then(Committed::changed);
        match result {
            Ok((None, _)) => None,
            Ok((Some(old), _)) => Some(Ok(published(&old))),
            Err(e) => Some(Err(e)),
        }
    }

    /// Renames catalog table `from` to `to` in one catalog transaction.
    async fn rename_entry(
        &self,
        from: &str,
        to: &str,
        overwrite: bool,
    ) -> Option<Result<Published>> {
        if let Err(e) = self.node.lease_for_write().await {
            return Some(Err(e));
        }
        for _ in 0..COMMIT_ATTEMPTS {
            let result = async {
                let source = self.node.etcd.table(from).await?;
                let Some(entry) = source.value else {
                    return Ok(None);
                };
                if from == to {
                    return Ok(Some(Some(published(&entry))));
                }
                let target = self.node.etcd.table(to).await?;
                if let (Some(_), false) = (&target.value, overwrite) {
                    return Err(ClusterError::AlreadyExists(to.to_string()));
                }
                let renamed = TableEntry {
                    version: target.value.as_ref().map_or(0, |t| t.version) + 1,
                    ..entry
                };
                let reads = [(from, source.revision), (to, target.revision)];
                let done = self
                    .node
                    .etcd
                    .commit(
                        &reads,
                        &[(from, None), (to, Some(&renamed))],
                        Guard::default(),
                    )
                    .await?;
                let done = matches!(done, Commit::Done);
                // Not done: another commit changed either table first; read again.
                Ok(Some(done.then(|| published(&renamed))))
            }
            .await;
            match result {
                Ok(None) => return None,
                Ok(Some(Some(done))) => return Some(Ok(done)),
                Ok(Some(None)) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Err(ClusterError::Conflict {
            table: to.to_string(),
            attempts: COMMIT_ATTEMPTS,
        }))
    }

    /// Publishes catalog tables `from` as table `into` in one catalog
    /// transaction (the `publish` action); `None` when none of `from` is a
    /// catalog table.
    async fn publish_entries(
        &self,
        into: &str,
        from: &[String],
        mode: WriteMode,
    ) -> Option<Result<Published>> {
        if let Err(e) = self.node.lease_for_write().await {
            return Some(Err(e));
        }
        for attempt in 0..COMMIT_ATTEMPTS {
            let mut sources = Vec::with_capacity(from.len());
            for name in from {
                match self.node.etcd.table(name).await {
                    Ok(read) => sources.push((name.as_str(), read)),
                    Err(e) => return Some(Err(e)),
                }
            }
            if attempt == 0 && sources.iter().all(|(_, read)| read.value.is_none()) {
                return None;
            }
            match self.publish_sources(into, sources, mode).await {
                Ok(Some(done)) => return Some(Ok(done)),
                Ok(None) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Err(ClusterError::Conflict {
            table: into.to_string(),
            attempts: COMMIT_ATTEMPTS,
        }))
    }

    /// The `publish` action over catalog tables: one transaction puts the
    /// sources' partitions into `into` and deletes the sources. `None`: a
    /// concurrent commit changed one of them first.
    async fn publish_sources(
        &self,
        into: &str,
        sources: Vec<(&str, Versioned<TableEntry>)>,
        mode: WriteMode,
    ) -> Result<Option<Published>> {
        let mut partitions = Vec::new();
        let mut schema: Option<SchemaRef> = None;
        for (name, read) in &sources {
            let entry = read
                .value
                .as_ref()
                .ok_or_else(|| ClusterError::NotFound((*name).to_string()))?;
            let this = entry.schema()?;
            if let Some(first) = &schema
                && first.fields() != this.fields()
            {
                return Err(ClusterError::Invalid(format!(
                    "cannot publish into '{into}': source '{name}' has another schema"
                )));
            }
            schema.get_or_insert(this);
            partitions.extend(entry.partitions.iter().cloned());
        }
        let schema =
            schema.ok_or_else(|| ClusterError::Invalid("no source tables given".into()))?;
        let target = self.node.etcd.table(into).await?;
        let limits = self.node.store.limits();
        let new = next_entry(
            into,
            target.value.as_ref(),
            mode,
            &schema,
            partitions,
            limits,
        )?;
        let mut reads: Vec<(&str, i64)> = sources.iter().map(|(n, r)| (*n, r.revision)).collect();
        reads.push((into, target.revision));
        let mut writes: Vec<(&str, Option<&TableEntry>)> =
            sources.iter().map(|(n, _)| (*n, None)).collect();
        writes.push((into, Some(&new)));
        let done = matches!(
            self.node
                .etcd
                .commit(&reads, &writes, Guard::default())
                .await?,
            Commit::Done
        );
        Ok(done.then(|| published(&new)))
    }
}

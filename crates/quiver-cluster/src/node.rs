//! A node of the cluster: what the Flight service asks of it (the
//! [`ClusterHooks`]), over the catalog in etcd and the node's own store.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use futures::future::try_join_all;
use quiver_flight::cluster::{ClusterHooks, ClusterPut, ClusterRead, Published};
use quiver_flight::ticket::TableTicket;
use quiver_store::{TableStore, WriteMode, batch_bytes};
use serde_json::json;
use tonic::Status;

use crate::catalog::{
    NodeEntry, PartitionEntry, TableEntry, decode_schema, encode_schema, partition_name,
};
use crate::error::{ClusterError, Result};
use crate::etcd::{Etcd, EtcdConfig, Snapshot, Versioned};
use crate::peers::Peers;
use crate::placement::{place, split_rows};
use crate::sql::ClusterSql;

/// How many times a commit is tried again when another commit came first.
const COMMIT_ATTEMPTS: usize = 16;

/// How a node joins and behaves in the cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// The catalog: etcd's endpoints, the keys' prefix, TLS and user.
    pub etcd: EtcdConfig,
    /// This node's id, unique in the cluster and the same across restarts.
    pub node_id: String,
    /// The location clients and other nodes reach this node at.
    pub location: String,
    /// TLS to the other nodes (their locations are `grpc+tls://`): the CA
    /// their certificates chain to, and this node's certificate for nodes
    /// that check their clients'.
    pub peer_tls: Option<quiver_etcd::Tls>,
    /// Copies of each partition.
    pub replicas: usize,
    /// The node's lease: how long after its last renewal the cluster
    /// takes it for lost.
    pub lease_ttl: Duration,
    /// How often the node reads the catalog, repairs under-replicated
    /// partitions it is responsible for and drops partitions no version holds.
    pub repair_every: Duration,
    /// How old a partition no version holds must be before it is dropped (a
    /// put's partitions are stored before their version is published).
    pub orphan_grace: Duration,
}

/// This node's part in the cluster.
#[derive(Debug)]
pub struct ClusterNode {
    pub(crate) options: ClusterOptions,
    pub(crate) store: Arc<TableStore>,
    pub(crate) etcd: Etcd,
    pub(crate) peers: Peers,
    /// The catalog as last read: the fallback when etcd is unreachable.
    pub(crate) cache: RwLock<Snapshot>,
    /// The node's current lease.
    pub(crate) lease: Mutex<Option<i64>>,
    /// Local partitions no version held when last looked, and since when.
    pub(crate) orphans: Mutex<HashMap<String, Instant>>,
    /// Distributed SQL over the cluster's tables.
    sql: ClusterSql,
}

impl ClusterNode {
    /// Joins the cluster: registers under a lease and reads the catalog.
    /// Fails if etcd cannot be reached now. The caller starts the
    /// background work with [`ClusterNode::spawn_background`].
    pub async fn join(options: ClusterOptions, store: Arc<TableStore>) -> Result<Arc<Self>> {
        if options.replicas == 0 {
            return Err(ClusterError::Invalid(
                "--replicas must be at least 1".into(),
            ));
        }
        quiver_flight::auth::validate_node_id(&options.node_id).map_err(ClusterError::Invalid)?;
        let etcd = Etcd::connect(&options.etcd)?;
        // Before registering: a node that cannot sign its calls must not
        // receive copies.
        let key = quiver_flight::auth::NodeKey::new(&etcd.secret().await?, &options.node_id)
            .map_err(|e| ClusterError::Malformed {
                key: "the cluster secret".into(),
                detail: e.to_string(),
            })?;
        let lease = etcd.register(&options.me(), options.ttl_seconds()).await?;
        let snapshot = etcd.snapshot().await?;
        tracing::info!(
            node = %options.node_id,
            location = %options.location,
            nodes = snapshot.nodes.len(),
            tables = snapshot.tables.len(),
            "joined the cluster"
        );
        let peers = Peers::new(key, options.peer_tls.clone());
        Ok(Arc::new_cyclic(|me| Self {
            sql: ClusterSql::new(
                me.clone(),
                options.node_id.clone(),
                options.location.clone(),
                Arc::clone(&store),
                peers.clone(),
            ),
            options,
            store,
            etcd,
            peers,
            cache: RwLock::new(snapshot),
            lease: Mutex::new(Some(lease)),
            orphans: Mutex::new(HashMap::new()),
        }))
    }

    /// The live nodes, to find `entry`'s replicas among: as last read (a
    /// tick ago), read again only when a replica is one this node has not
    /// seen yet (it joined since).
    async fn replicas_of(&self, entry: &TableEntry) -> BTreeMap<String, NodeEntry> {
        let nodes = self
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

    /// Leaves the cluster at once (a clean shutdown): revokes the lease, so
    /// the others repair without waiting for it to expire.
    pub async fn leave(&self) {
        let lease = self
            .lease
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(lease) = lease
            && let Err(e) = self.etcd.revoke(lease).await
        {
            tracing::warn!("leaving the cluster: {e}");
        }
    }

    pub(crate) fn cached(&self) -> Snapshot {
        self.cache
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn remember(&self, snapshot: Snapshot) {
        *self.cache.write().unwrap_or_else(PoisonError::into_inner) = snapshot;
    }

    /// The catalog now, or as last read when etcd is unreachable.
    async fn snapshot(&self) -> Snapshot {
        match self.etcd.snapshot().await {
            Ok(snapshot) => {
                self.remember(snapshot.clone());
                snapshot
            }
            Err(e) => {
                tracing::debug!("catalog read failed, using the last one: {e}");
                self.cached()
            }
        }
    }

    /// Table `name`'s entry now, or as last read when etcd is unreachable.
    pub(crate) async fn entry(&self, name: &str) -> Option<TableEntry> {
        match self.etcd.table(name).await {
            Ok(read) => {
                let mut cache = self.cache.write().unwrap_or_else(PoisonError::into_inner);
                match &read.value {
                    Some(entry) => cache
                        .tables
                        .insert(name.to_string(), (entry.clone(), read.revision)),
                    None => cache.tables.remove(name),
                };
                read.value
            }
            Err(e) => {
                tracing::debug!(table = name, "catalog read failed, using the last one: {e}");
                self.cached()
                    .tables
                    .get(name)
                    .map(|(entry, _)| entry.clone())
            }
        }
    }

    fn info(
        &self,
        name: &str,
        entry: &TableEntry,
        nodes: &BTreeMap<String, NodeEntry>,
        descriptor: FlightDescriptor,
    ) -> Result<FlightInfo> {
        let schema = entry.schema()?;
        let mut endpoints = Vec::with_capacity(entry.partitions.len());
        for part in &entry.partitions {
            let locations: Vec<&str> = part
                .replicas
                .iter()
                .filter_map(|id| nodes.get(id).map(|n| n.location.as_str()))
                .collect();
            if locations.is_empty() {
                return Err(ClusterError::Catalog(format!(
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
        let metadata = json!({
            "version": entry.version,
            "partitions": entry.partitions.len(),
            "cluster": true,
        });
        Ok(FlightInfo::new()
            .try_with_schema(&schema)?
            .with_descriptor(descriptor)
            .with_endpoints(endpoints)
            .with_total_records(i64::try_from(entry.rows).unwrap_or(i64::MAX))
            .with_total_bytes(i64::try_from(entry.bytes).unwrap_or(i64::MAX))
            .with_ordered(true)
            .with_app_metadata(metadata.to_string()))
    }

    /// Stores partition `name` on `node` (this one or another).
    pub(crate) async fn store_on(
        &self,
        node: &NodeEntry,
        name: &str,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Result<()> {
        if node.id == self.options.node_id {
            let store = Arc::clone(&self.store);
            let name = name.to_string();
            return tokio::task::spawn_blocking(move || {
                store
                    .put(&name, WriteMode::Replace, schema, batches)
                    .map(drop)
            })
            .await
            .map_err(|e| ClusterError::Invalid(format!("storing a partition: {e}")))?
            .map_err(ClusterError::from);
        }
        self.peers
            .put(&node.location, name, schema, batches)
            .await
            .map_err(|status| ClusterError::Replica {
                partition: name.to_string(),
                node: node.id.clone(),
                location: node.location.clone(),
                status: Box::new(status),
            })
    }

    /// Spreads and stores a put's partitions; returns their entries.
    async fn store_partitions(
        &self,
        put: &ClusterPut,
        nodes: &Snapshot,
    ) -> Result<Vec<PartitionEntry>> {
        let live = nodes.nodes.len();
        if live < self.options.replicas {
            return Err(ClusterError::TooFewNodes {
                live,
                replicas: self.options.replicas,
            });
        }
        let rows: usize = put.batches.iter().map(RecordBatch::num_rows).sum();
        let count = put.partitions.unwrap_or(live).min(rows).max(1);
        let parts = split_rows(&put.batches, rows, count);
        let names: Vec<String> = (0..count).map(|i| partition_name(&put.table, i)).collect();
        let placed = place(
            &names[0],
            nodes.nodes.keys().map(String::as_str),
            count,
            self.options.replicas,
        );
        let mut entries = Vec::with_capacity(count);
        let mut stores = Vec::new();
        for ((name, batches), replicas) in names.into_iter().zip(parts).zip(placed) {
            entries.push(PartitionEntry {
                name: name.clone(),
                rows: batches.iter().map(|b| b.num_rows() as u64).sum(),
                bytes: batches.iter().map(batch_bytes).sum(),
                replicas: replicas.clone(),
            });
            for id in replicas {
                let Some(node) = nodes.nodes.get(&id).cloned() else {
                    continue;
                };
                let (name, schema, batches) =
                    (name.clone(), Arc::clone(&put.schema), batches.clone());
                stores.push(async move { self.store_on(&node, &name, schema, batches).await });
            }
        }
        try_join_all(stores).await?;
        Ok(entries)
    }

    /// Commits `change` to table `name`'s entry, reading it again and
    /// retrying when another commit came first.
    async fn commit_table(
        &self,
        name: &str,
        mut change: impl FnMut(Option<&TableEntry>) -> Result<Option<TableEntry>>,
    ) -> Result<(Option<TableEntry>, Option<TableEntry>)> {
        for _ in 0..COMMIT_ATTEMPTS {
            let Versioned {
                value: old,
                revision,
            } = self.etcd.table(name).await?;
            let new = change(old.as_ref())?;
            if self
                .etcd
                .commit(&[(name, revision)], &[(name, new.as_ref())])
                .await?
            {
                return Ok((old, new));
            }
            tracing::debug!(
                table = name,
                "commit lost to a concurrent one; trying again"
            );
        }
        Err(ClusterError::Conflict {
            table: name.to_string(),
            attempts: COMMIT_ATTEMPTS,
        })
    }
}

impl ClusterOptions {
    /// This node's record in etcd.
    pub(crate) fn me(&self) -> NodeEntry {
        NodeEntry {
            id: self.node_id.clone(),
            location: self.location.clone(),
        }
    }

    /// The lease's length in etcd's unit.
    pub(crate) fn ttl_seconds(&self) -> i64 {
        i64::try_from(self.lease_ttl.as_secs())
            .unwrap_or(i64::MAX)
            .max(1)
    }
}

/// The entry of a table made of `partitions` after `old`, whose fields must
/// match `schema` to be appended to.
fn next_entry(
    name: &str,
    old: Option<&TableEntry>,
    mode: WriteMode,
    schema: &SchemaRef,
    partitions: Vec<PartitionEntry>,
) -> Result<TableEntry> {
    let mut all = Vec::new();
    match (mode, old) {
        (WriteMode::Append, None) => return Err(ClusterError::NotFound(name.to_string())),
        (WriteMode::Append, Some(old)) => {
            let stored = decode_schema(&old.schema)?;
            if stored.fields() != schema.fields() {
                return Err(ClusterError::Invalid(format!(
                    "cannot append to table '{name}': its schema is {stored}, the put's is {schema}"
                )));
            }
            all.extend(old.partitions.iter().cloned());
        }
        (WriteMode::Create, Some(_)) => return Err(ClusterError::AlreadyExists(name.to_string())),
        (WriteMode::Create | WriteMode::Replace, _) => {}
    }
    all.extend(partitions);
    Ok(TableEntry {
        version: old.map_or(0, |o| o.version) + 1,
        schema: match (mode, old) {
            (WriteMode::Append, Some(old)) => old.schema.clone(),
            _ => encode_schema(schema)?,
        },
        rows: all.iter().map(|p| p.rows).sum(),
        bytes: all.iter().map(|p| p.bytes).sum(),
        partitions: all,
    })
}

fn published(entry: &TableEntry) -> Published {
    Published {
        version: entry.version,
        rows: entry.rows,
        bytes: entry.bytes,
    }
}

#[tonic::async_trait]
impl ClusterHooks for ClusterNode {
    fn nodes(&self) -> quiver_flight::auth::Nodes {
        quiver_flight::auth::Nodes {
            key: self.peers.key().clone(),
            internal: self.sql.internal_paths(),
        }
    }

    fn sql_catalog(&self) -> Arc<dyn quiver_sql::ClusterCatalog> {
        Arc::new(self.sql.clone())
    }

    fn add_services(&self, routes: &mut tonic::service::RoutesBuilder) {
        self.sql.add_services(routes);
    }

    async fn flight_info(
        &self,
        name: &str,
        descriptor: FlightDescriptor,
    ) -> Option<Result<FlightInfo, Status>> {
        let entry = self.entry(name).await?;
        let nodes = self.replicas_of(&entry).await;
        Some(
            self.info(name, &entry, &nodes, descriptor)
                .map_err(Status::from),
        )
    }

    async fn schema(&self, name: &str) -> Option<Result<SchemaRef, Status>> {
        let entry = self.entry(name).await?;
        Some(entry.schema().map_err(Status::from))
    }

    async fn read(&self, name: &str) -> Option<Result<ClusterRead, Status>> {
        let entry = self.entry(name).await?;
        let nodes = self.replicas_of(&entry).await;
        let read = self.sql.read(name, &entry, &nodes).await;
        Some(
            read.map(|(schema, batches)| ClusterRead {
                version: entry.version,
                schema,
                batches,
            })
            .map_err(Status::from),
        )
    }

    async fn list(&self, prefix: &str) -> Result<Vec<FlightInfo>, Status> {
        let snapshot = self.snapshot().await;
        snapshot
            .tables
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(name, (entry, _))| {
                let descriptor = FlightDescriptor::new_path(vec![name.clone()]);
                self.info(name, entry, &snapshot.nodes, descriptor)
                    .map_err(Status::from)
            })
            .collect()
    }

    async fn put(&self, put: ClusterPut) -> Result<Published, Status> {
        let nodes = self.etcd.snapshot().await?;
        // Checked before anything is shipped, and again in the commit.
        let current = nodes.tables.get(&put.table).map(|(entry, _)| entry);
        next_entry(&put.table, current, put.mode, &put.schema, Vec::new())?;
        let partitions = self.store_partitions(&put, &nodes).await?;
        drop(put.batches);
        let (_, new) = self
            .commit_table(&put.table, |old| {
                next_entry(&put.table, old, put.mode, &put.schema, partitions.clone()).map(Some)
            })
            .await?;
        let new = new.ok_or_else(|| ClusterError::Invalid("nothing committed".into()))?;
        tracing::info!(
            table = %put.table,
            version = new.version,
            partitions = partitions.len(),
            rows = new.rows,
            "published"
        );
        Ok(published(&new))
    }

    async fn delete(&self, name: &str) -> Option<Result<Published, Status>> {
        let result = self.commit_table(name, |_| Ok(None)).await;
        match result {
            Ok((None, _)) => None,
            Ok((Some(old), _)) => Some(Ok(published(&old))),
            Err(e) => Some(Err(e.into())),
        }
    }

    async fn rename(
        &self,
        from: &str,
        to: &str,
        overwrite: bool,
    ) -> Option<Result<Published, Status>> {
        for _ in 0..COMMIT_ATTEMPTS {
            let result = async {
                let source = self.etcd.table(from).await?;
                let Some(entry) = source.value else {
                    return Ok(None);
                };
                if from == to {
                    return Ok(Some(Some(published(&entry))));
                }
                let target = self.etcd.table(to).await?;
                if let (Some(_), false) = (&target.value, overwrite) {
                    return Err(ClusterError::AlreadyExists(to.to_string()));
                }
                let renamed = TableEntry {
                    version: target.value.as_ref().map_or(0, |t| t.version) + 1,
                    ..entry
                };
                let reads = [(from, source.revision), (to, target.revision)];
                let done = self
                    .etcd
                    .commit(&reads, &[(from, None), (to, Some(&renamed))])
                    .await?;
                // Not done: another commit changed either table first; read again.
                Ok(Some(done.then(|| published(&renamed))))
            }
            .await;
            match result {
                Ok(None) => return None,
                Ok(Some(Some(done))) => return Some(Ok(done)),
                Ok(Some(None)) => continue,
                Err(e) => return Some(Err(e.into())),
            }
        }
        Some(Err(ClusterError::Conflict {
            table: to.to_string(),
            attempts: COMMIT_ATTEMPTS,
        }
        .into()))
    }

    async fn publish(
        &self,
        into: &str,
        from: &[String],
        mode: WriteMode,
    ) -> Option<Result<Published, Status>> {
        for attempt in 0..COMMIT_ATTEMPTS {
            let mut sources = Vec::with_capacity(from.len());
            for name in from {
                match self.etcd.table(name).await {
                    Ok(read) => sources.push((name.as_str(), read)),
                    Err(e) => return Some(Err(e.into())),
                }
            }
            if attempt == 0 && sources.iter().all(|(_, read)| read.value.is_none()) {
                return None;
            }
            match self.publish_sources(into, sources, mode).await {
                Ok(Some(done)) => return Some(Ok(done)),
                Ok(None) => continue,
                Err(e) => return Some(Err(e.into())),
            }
        }
        Some(Err(ClusterError::Conflict {
            table: into.to_string(),
            attempts: COMMIT_ATTEMPTS,
        }
        .into()))
    }
}

impl ClusterNode {
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
        let target = self.etcd.table(into).await?;
        let new = next_entry(into, target.value.as_ref(), mode, &schema, partitions)?;
        let mut reads: Vec<(&str, i64)> = sources.iter().map(|(n, r)| (*n, r.revision)).collect();
        reads.push((into, target.revision));
        let mut writes: Vec<(&str, Option<&TableEntry>)> =
            sources.iter().map(|(n, _)| (*n, None)).collect();
        writes.push((into, Some(&new)));
        let done = self.etcd.commit(&reads, &writes).await?;
        Ok(done.then(|| published(&new)))
    }
}

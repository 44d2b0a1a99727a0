//! Distributed SQL: Flight SQL on any node plans over the cluster's tables
//! with `datafusion-distributed`. Scans run as tasks on the nodes holding
//! the partitions they read ([`tasks`]), scans of files in object storage
//! on the nodes that serve them ([`in_place`]); the stages above them stream
//! between nodes through the worker service mounted on each node's Flight
//! port. docs/cluster.md tells the design.

mod codec;
mod in_place;
mod scan;
mod table;
mod tasks;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, Weak};

use arrow::array::RecordBatch;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion_distributed::{DistributedExt, SessionStateBuilderExt, Worker, WorkerQueryContext};
use quiver_objects::ObjectStores;
use quiver_sql::{StoreTables, TableSource};

use crate::catalog::{NodeEntry, TableEntry};
use crate::node::ClusterNode;
use crate::peers::Peers;

pub(crate) use scan::ScanContext;

use codec::ClusterCodec;
use in_place::InPlaceScans;
use table::ClusterTable;
use tasks::{CatalogWorkers, NodeChannels, TaskRouter, desired_tasks, scale_up, worker_url};

/// The SQL side of a cluster node: its catalog for the engine, and the
/// worker that runs other nodes' tasks.
#[derive(Clone)]
pub(crate) struct ClusterSql {
    node: Weak<ClusterNode>,
    scan: Arc<ScanContext>,
    worker: Worker,
    location: String,
    /// The engine's runtime (its object stores and their cache), set when
    /// the engine sets up its session: the worker's sessions run with it,
    /// so a task that scans files in object storage reads them through the
    /// same stores, settings and cache as a query planned here.
    runtime: Arc<OnceLock<Arc<RuntimeEnv>>>,
}

impl std::fmt::Debug for ClusterSql {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSql")
            .field("node", &self.scan.node_id)
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl ClusterSql {
    pub(crate) fn new(
        node: Weak<ClusterNode>,
        node_id: String,
        location: String,
        store: Arc<quiver_store::TableStore>,
        peers: Peers,
        in_place: Vec<String>,
    ) -> Self {
        let channels = NodeChannels::new(peers.clone());
        let scan = Arc::new(ScanContext {
            node_id,
            store,
            peers,
            in_place,
            stores: OnceLock::new(),
        });
        let for_worker = Arc::clone(&scan);
        let runtime: Arc<OnceLock<Arc<RuntimeEnv>>> = Arc::default();
        let worker_runtime = Arc::clone(&runtime);
        let worker = Worker::from_session_builder(move |ctx: WorkerQueryContext| {
            let scan = Arc::clone(&for_worker);
            let channels = channels.clone();
            let runtime = worker_runtime.get().cloned();
            async move {
                let mut builder = ctx.builder;
                if let Some(runtime) = runtime {
                    builder = builder.with_runtime_env(runtime);
                }
                // quiver's own functions its plans call (a decimal
                // quotient's operands), decoded by name.
                builder
                    .scalar_functions()
                    .get_or_insert_default()
                    .push(quiver_sql::decimal_to_double());
                let config = builder.config().get_or_insert_default();
                config.set_distributed_user_codec(ClusterCodec);
                config.set_distributed_channel_resolver(channels);
                config.set_extension(scan);
                Ok(builder.build())
            }
        });
        Self {
            node,
            scan,
            worker,
            location,
            runtime,
        }
    }

    fn node(&self) -> Result<Arc<ClusterNode>> {
        self.node
            .upgrade()
            .ok_or_else(|| DataFusionError::Execution("the cluster node is shutting down".into()))
    }

    /// Table `name` as `entry` has it, every partition read (this node's
    /// copy, else a replica's among `nodes`), partition after partition.
    pub(crate) async fn read(
        &self,
        name: &str,
        entry: &TableEntry,
        nodes: &BTreeMap<String, NodeEntry>,
    ) -> crate::Result<(SchemaRef, Vec<RecordBatch>)> {
        let table = ClusterTable::new(name, entry, nodes, &|l| self.scan.peers.is_suspect(l))?;
        let batches = self
            .scan
            .read_all(name, table.parts().to_vec())
            .await
            .map_err(|e| crate::ClusterError::Unreadable(e.to_string()))?;
        Ok((table.schema(), batches))
    }

    /// The worker service, to mount on the node's Flight port.
    pub(crate) fn add_services(&self, routes: &mut tonic::service::RoutesBuilder) {
        routes.add_service(self.worker.clone().into_worker_server());
    }

    /// The path prefixes of the services [`ClusterSql::add_services`] mounts:
    /// only nodes may call them.
    pub(crate) fn internal_paths(&self) -> Vec<String> {
        fn name<S: tonic::server::NamedService>(_: &S) -> &'static str {
            S::NAME
        }
        vec![format!(
            "/{}/",
            name(&self.worker.clone().into_worker_server())
        )]
    }
}

/// The stored tables of a cluster node's SQL engine: the catalog's, laid
/// over the local store's (a table a single node left in the data
/// directory), as [`crate::tables::CatalogTables`] lays them for Flight.
#[derive(Debug)]
pub(crate) struct CatalogSource {
    sql: ClusterSql,
    local: Arc<StoreTables>,
}

impl CatalogSource {
    pub(crate) fn new(sql: ClusterSql, local: Arc<StoreTables>) -> Self {
        Self { sql, local }
    }
}

#[async_trait]
impl TableSource for CatalogSource {
    fn tables(&self) -> Vec<(String, SchemaRef)> {
        let mut tables = self.local.tables();
        if let Ok(node) = self.sql.node() {
            tables.extend(
                node.cached()
                    .tables
                    .iter()
                    .filter_map(|(name, (entry, _))| Some((name.clone(), entry.schema().ok()?))),
            );
        }
        tables
    }

    fn exists(&self, name: &str) -> bool {
        self.local.exists(name)
            || self
                .sql
                .node()
                .is_ok_and(|node| node.cached().tables.contains_key(name))
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let node = self.sql.node()?;
        let Some(entry) = node.entry(name).await else {
            return self.local.table(name).await;
        };
        let sql = &self.sql;
        node.hold_for_reader(&entry);
        let nodes = node.cached().nodes;
        let others = nodes.values().filter(|n| n.id != sql.scan.node_id);
        sql.scan
            .peers
            .confirm(others.map(|n| n.location.as_str()))
            .await;
        let suspect = |location: &str| sql.scan.peers.is_suspect(location);
        let table = ClusterTable::new(name, &entry, &nodes, &suspect)
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        Ok(Some(Arc::new(table)))
    }

    fn locations(&self) -> Option<Vec<String>> {
        Some(
            self.sql
                .node()
                .map(|node| node.locations())
                .unwrap_or_default(),
        )
    }

    fn plans_again(&self) -> bool {
        true
    }

    fn session(&self, mut builder: SessionStateBuilder) -> SessionStateBuilder {
        let sql = &self.sql;
        if let Some(runtime) = builder.runtime_env().clone() {
            // The first engine's: a node has one.
            let _ = sql.runtime.set(runtime);
        }
        if let Some(stores) = builder
            .config()
            .as_ref()
            .and_then(|config| config.get_extension::<ObjectStores>())
        {
            let _ = sql.scan.stores.set(stores);
        }
        let workers = CatalogWorkers {
            node: sql.node.clone(),
        };
        let in_place = InPlaceScans {
            node: sql.node.clone(),
        };
        let local = worker_url(&sql.location).ok();
        let mut builder = builder
            .with_distributed_planner()
            .with_distributed_worker_resolver(workers.clone())
            .with_distributed_user_codec(ClusterCodec)
            .with_distributed_channel_resolver(NodeChannels::new(sql.scan.peers.clone()))
            .with_distributed_desired_task_count_handler(desired_tasks)
            .with_distributed_scale_up_leaf_node_handler(scale_up)
            .with_distributed_desired_task_count_handler(in_place.clone())
            .with_distributed_scale_up_leaf_node_handler(in_place)
            .with_distributed_route_tasks_handler(TaskRouter::new(workers, local.clone()));
        // A join that collects its small side (DataFusion's CollectLeft) runs
        // in every task of the large side, the small side broadcast to each;
        // without this such a join, and all above it, would run on one node.
        if let Err(e) = builder.set_distributed_broadcast_joins(true) {
            tracing::warn!("distributed SQL: broadcast joins stay off: {e}");
        }
        // Tasks this node runs itself stay in the process.
        if let Some(url) = local {
            builder = builder
                .with_distributed_local_worker_context(sql.worker.to_local_worker_context(url));
        }
        builder
            .config()
            .get_or_insert_default()
            .set_extension(Arc::clone(&sql.scan));
        builder
    }

    async fn recheck(&self) {
        let sql = &self.sql;
        let Ok(node) = sql.node() else {
            return;
        };
        let nodes = node.cached().nodes;
        let others = nodes.values().filter(|n| n.id != sql.scan.node_id);
        sql.scan
            .peers
            .recheck(others.map(|n| n.location.as_str()))
            .await;
    }
}

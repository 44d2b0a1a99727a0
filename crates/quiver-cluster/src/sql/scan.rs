//! The scan of a cluster table: its partitions, each read from the node's
//! own store when this node holds a copy, else by DoGet from a replica.

use std::fmt;
use std::sync::{Arc, OnceLock};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{FlightClient, Ticket};
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Statistics, internal_err};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType, SchedulingType};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use quiver_flight::ticket::TableTicket;
use quiver_objects::ObjectStores;
use quiver_store::TableStore;
use serde::{Deserialize, Serialize};

use crate::peers::Peers;
use crate::sql::tasks::unreachable_error;

/// What a node's scans read with: set on every session that plans or runs
/// a cluster scan (coordinator and workers alike).
#[derive(Debug)]
pub(crate) struct ScanContext {
    /// This node's id.
    pub(crate) node_id: String,
    /// This node's store, which holds its copies of partitions.
    pub(crate) store: Arc<TableStore>,
    /// Channels to the other nodes.
    pub(crate) peers: Peers,
    /// The object storage locations of this node's tables in place
    /// (`--table`): the files of a scan's share it may be given.
    pub(crate) in_place: Vec<String>,
    /// The engine's object stores, set when it sets up its session: a
    /// share of a scan of files in place reads through them.
    pub(crate) stores: OnceLock<Arc<ObjectStores>>,
}

impl ScanContext {
    /// Every row of `parts` of table `table`, partition after partition.
    pub(crate) async fn read_all(
        self: &Arc<Self>,
        table: &str,
        parts: Vec<ScanPart>,
    ) -> Result<Vec<RecordBatch>> {
        let reader = PartReader {
            scan: Arc::clone(self),
            table: table.to_string(),
            projection: None,
            columns: None,
        };
        let mut batches = Vec::new();
        for part in parts {
            let mut read = reader.clone().read(part);
            while let Some(batch) = read.next().await {
                batches.push(batch?);
            }
        }
        Ok(batches)
    }
}

/// A node holding a copy of a partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Replica {
    pub(crate) node: String,
    pub(crate) location: String,
}

/// One partition of the table's version, as the scan reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ScanPart {
    /// Its storage name on the nodes holding it.
    pub(crate) name: String,
    pub(crate) rows: u64,
    pub(crate) bytes: u64,
    /// Its live replicas, in the catalog's order.
    pub(crate) replicas: Vec<Replica>,
}

/// What a scan is, without its plan properties: what travels to a worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ScanSpec {
    /// The table, for messages.
    pub(crate) table: String,
    /// The table's schema, as the catalog stores it.
    pub(crate) schema: String,
    pub(crate) projection: Option<Vec<usize>>,
    pub(crate) limit: Option<usize>,
    /// The partitions each output partition reads, in order.
    pub(crate) groups: Vec<Vec<ScanPart>>,
    /// The node this scan is meant to run on (a task of a distributed
    /// plan), and its location; `None`: wherever it is planned.
    pub(crate) node: Option<Replica>,
}

/// Scans a cluster table's partitions.
#[derive(Debug)]
pub(crate) struct ClusterScanExec {
    pub(crate) spec: ScanSpec,
    /// The table's full schema (`spec.schema`, decoded).
    table_schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl ClusterScanExec {
    pub(crate) fn try_new(spec: ScanSpec, table_schema: SchemaRef) -> Result<Self> {
        let schema = match &spec.projection {
            Some(columns) => Arc::new(table_schema.project(columns)?),
            None => Arc::clone(&table_schema),
        };
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(spec.groups.len().max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        )
        .with_scheduling_type(SchedulingType::Cooperative);
        Ok(Self {
            spec,
            table_schema,
            properties: Arc::new(properties),
        })
    }

    /// The same scan over `groups`, meant to run on `node`.
    pub(crate) fn with_groups(
        &self,
        groups: Vec<Vec<ScanPart>>,
        node: Option<Replica>,
    ) -> Result<Self> {
        let spec = ScanSpec {
            groups,
            node,
            ..self.spec.clone()
        };
        Self::try_new(spec, Arc::clone(&self.table_schema))
    }

    /// Every partition the scan reads.
    pub(crate) fn parts(&self) -> impl Iterator<Item = &ScanPart> {
        self.spec.groups.iter().flatten()
    }

    fn rows(&self, partition: Option<usize>) -> u64 {
        let count = |parts: &Vec<ScanPart>| parts.iter().map(|p| p.rows).sum::<u64>();
        match partition {
            Some(i) => self.spec.groups.get(i).map_or(0, count),
            None => self.spec.groups.iter().map(count).sum(),
        }
    }
}

impl DisplayAs for ClusterScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let node = self.spec.node.as_ref().map_or("any", |n| n.node.as_str());
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => write!(
                f,
                "ClusterScanExec: table={}, partitions={}, rows={}, node={node}",
                self.spec.table,
                self.parts().count(),
                self.rows(None)
            ),
            DisplayFormatType::TreeRender => write!(f, "table={}", self.spec.table),
        }
    }
}

impl ExecutionPlan for ClusterScanExec {
    fn name(&self) -> &'static str {
        "ClusterScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            internal_err!("ClusterScanExec has no children")
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let schema = self.schema();
        let parts = match self.spec.groups.get(partition) {
            Some(parts) => parts.clone(),
            // A scan of no partitions still has one (empty) output partition.
            None if partition == 0 => Vec::new(),
            None => {
                return internal_err!(
                    "ClusterScanExec: partition {partition} of {}",
                    self.spec.groups.len()
                );
            }
        };
        let Some(scan) = context.session_config().get_extension::<ScanContext>() else {
            return internal_err!("ClusterScanExec runs only on a cluster node's session");
        };
        let columns = self.spec.projection.as_ref().map(|columns| {
            columns
                .iter()
                .map(|&i| self.table_schema.field(i).name().clone())
                .collect::<Vec<_>>()
        });
        let reader = PartReader {
            scan,
            table: self.spec.table.clone(),
            projection: self.spec.projection.clone(),
            columns,
        };
        let batches = stream::iter(parts)
            .map(move |part| reader.clone().read(part))
            .flatten();
        let batches = match self.spec.limit {
            Some(limit) => limited(batches, limit),
            None => batches.boxed(),
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, batches)))
    }

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        let mut stats = Statistics::new_unknown(&self.schema());
        let rows = usize::try_from(self.rows(args.partition())).unwrap_or(usize::MAX);
        stats.num_rows = Precision::Exact(rows);
        Ok(Arc::new(stats))
    }
}

/// The first `limit` rows of `batches`.
fn limited(
    batches: impl futures::Stream<Item = Result<RecordBatch>> + Send + 'static,
    limit: usize,
) -> BoxStream<'static, Result<RecordBatch>> {
    batches
        .scan(limit, |left, batch| {
            let out = match batch {
                _ if *left == 0 => None,
                Ok(batch) => {
                    let take = batch.num_rows().min(*left);
                    *left -= take;
                    Some(Ok(batch.slice(0, take)))
                }
                Err(e) => Some(Err(e)),
            };
            futures::future::ready(out)
        })
        .boxed()
}

#[derive(Debug, Clone)]
struct PartReader {
    scan: Arc<ScanContext>,
    table: String,
    projection: Option<Vec<usize>>,
    /// The projection's column names, for a ticket.
    columns: Option<Vec<String>>,
}

impl PartReader {
    /// The batches of `part`: this node's copy when it holds one, else a
    /// replica's, trying each in turn until one answers.
    fn read(self, part: ScanPart) -> BoxStream<'static, Result<RecordBatch>> {
        if let Ok(version) = self.scan.store.get(&part.name) {
            let batches: Vec<Result<RecordBatch>> = version
                .batches()
                .map(|batch| match &self.projection {
                    Some(columns) => batch.project(columns).map_err(DataFusionError::from),
                    None => Ok(batch.clone()),
                })
                .collect();
            return stream::iter(batches).boxed();
        }
        stream::once(async move { self.remote(part).await })
            .try_flatten()
            .boxed()
    }

    async fn remote(self, part: ScanPart) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let ticket = TableTicket {
            columns: self.columns.clone(),
            ..TableTicket::whole(part.name.clone())
        };
        let mut failures = Vec::new();
        for replica in part.replicas.iter().filter(|r| r.node != self.scan.node_id) {
            match self.open(&replica.location, &ticket).await {
                Ok(batches) => return Ok(batches),
                Err(status) => {
                    self.scan.peers.forget(&replica.location);
                    failures.push(format!(
                        "{} ({}): {}",
                        replica.node, replica.location, status
                    ));
                }
            }
        }
        let tried = if failures.is_empty() {
            "no replica is live".to_string()
        } else {
            failures.join("; ")
        };
        Err(unreachable_error(format!(
            "no replica of partition {} of table '{}' could be read: {tried}",
            part.name, self.table
        )))
    }

    /// DoGet of `ticket` from `location`, up to its first batch: a replica
    /// that fails before it is passed over, one that fails after fails the scan.
    async fn open(
        &self,
        location: &str,
        ticket: &TableTicket,
    ) -> std::result::Result<BoxStream<'static, Result<RecordBatch>>, String> {
        let channel = self
            .scan
            .peers
            .channel(location)
            .map_err(|e| e.to_string())?;
        let mut client = FlightClient::new_from_inner(
            FlightServiceClient::new(channel).max_decoding_message_size(usize::MAX),
        );
        let mut batches = client
            .do_get(Ticket::new(ticket.encode()))
            .await
            .map_err(|e| e.to_string())?;
        let first = match batches.next().await {
            None => return Ok(stream::empty().boxed()),
            Some(Err(e)) => return Err(e.to_string()),
            Some(Ok(batch)) => batch,
        };
        let rest = batches.map_err(|e| DataFusionError::External(Box::new(e)));
        Ok(stream::once(futures::future::ready(Ok(first)))
            .chain(rest)
            .boxed())
    }
}

//! Scans of tables in place in object storage (`--table t=s3://lake/t/`),
//! spread over the nodes that serve them.
//!
//! A table in place is not in the catalog: each node registers its own, and
//! its entry in etcd names the object storage locations of its `--table`s
//! ([`crate::catalog::NodeEntry::in_place`]). A file scan in object storage
//! may run on the node that planned it and on every live node whose
//! locations hold all its files (its readers). The planner asks for one
//! task per reader at most ([`InPlaceScans`]) and cuts the scan's files into
//! one share per task, by bytes, each share an [`InPlaceScanExec`] meant for
//! its reader; the router sends each share to its node, else to another
//! reader, else fails as unreachable, and the query is planned again over
//! the nodes live then. A node that serves no table over the files is never
//! given a share (and refuses one as unreachable, should it get one).
//!
//! A share carries its objects' versions as the planning node listed them:
//! the node running it reads those versions through its own stores and
//! cache of ranges as if it had listed them itself, so that each node's
//! cache holds what its tasks read, and no node reads another version.

use std::fmt;
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Statistics, internal_err};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfig};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::object_store::ObjectMeta;
use datafusion::object_store::path::Path;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion_distributed::{
    DesiredTaskCountEvent, DesiredTaskCountEventResponse, DesiredTaskCountHandler,
    DistributedLeafExec, ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse,
    ScaleUpLeafNodeHandler,
};
use serde::{Deserialize, Serialize};
use url::Url;

use crate::node::ClusterNode;
use crate::sql::scan::{Replica, ScanContext};
use crate::sql::tasks::unreachable_error;

/// Whether a node whose tables in place are at `locations` serves every
/// one of `files` (URLs): each lies under one of the locations (up to its
/// first glob character).
pub(crate) fn serves(locations: &[String], files: &[String]) -> bool {
    let prefixes: Vec<String> = locations.iter().map(|l| prefix(l)).collect();
    files
        .iter()
        .all(|file| prefixes.iter().any(|p| file.starts_with(p.as_str())))
}

/// The URL prefix of the files of a table at `location`: the location up to
/// its first glob character, as a URL spells it.
fn prefix(location: &str) -> String {
    let plain = location
        .split(['*', '?', '[', '{'])
        .next()
        .unwrap_or_default();
    match Url::parse(plain) {
        Ok(url) => url.to_string(),
        Err(_) => plain.to_string(),
    }
}

/// A scan of files in object storage, and its files' URLs; `None` for any
/// other plan (a scan of local files is left to the library).
fn in_place_scan(plan: &Arc<dyn ExecutionPlan>) -> Option<(&FileScanConfig, Vec<String>)> {
    let config = plan
        .downcast_ref::<DataSourceExec>()?
        .data_source()
        .downcast_ref::<FileScanConfig>()?;
    let store = config.object_store_url.as_str();
    if !quiver_objects::is_object_store_url(store) {
        return None;
    }
    let base = store.trim_end_matches('/');
    let files = config
        .file_groups
        .iter()
        .flat_map(FileGroup::iter)
        .map(|file| format!("{base}/{}", file.object_meta.location))
        .collect();
    Some((config, files))
}

/// An object as the planning node listed it, to be read as that version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ListedObject {
    location: String,
    size: u64,
    modified_ns: i64,
    e_tag: Option<String>,
    version: Option<String>,
}

impl ListedObject {
    fn of(meta: &ObjectMeta) -> Self {
        Self {
            location: meta.location.to_string(),
            size: meta.size,
            modified_ns: meta.last_modified.timestamp_nanos_opt().unwrap_or_default(),
            e_tag: meta.e_tag.clone(),
            version: meta.version.clone(),
        }
    }

    fn meta(&self) -> Result<ObjectMeta> {
        let location = Path::parse(&self.location).map_err(|e| {
            DataFusionError::Internal(format!("a listed object's path {}: {e}", self.location))
        })?;
        Ok(ObjectMeta {
            location,
            last_modified: chrono::DateTime::from_timestamp_nanos(self.modified_ns),
            size: self.size,
            e_tag: self.e_tag.clone(),
            version: self.version.clone(),
        })
    }
}

/// What a share of a scan of files in place is, beside its file scan: what
/// travels to the node that runs it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct InPlaceSpec {
    /// The objects' store, `scheme://bucket/`.
    pub(crate) store: String,
    /// The node the share is meant for; `None` for a share of no files.
    pub(crate) node: Option<Replica>,
    /// Every node that serves the scan's files (its readers), this share's
    /// first: where it may run should its node be lost.
    pub(crate) readers: Vec<Replica>,
    /// The share's objects, as the planning node listed them.
    pub(crate) objects: Vec<ListedObject>,
}

/// One task's share of a scan of files in place: its file scan, run on a
/// node that serves the files, which reads the objects as listed (module
/// docs).
#[derive(Debug)]
pub(crate) struct InPlaceScanExec {
    pub(crate) spec: InPlaceSpec,
    input: Arc<dyn ExecutionPlan>,
}

impl InPlaceScanExec {
    pub(crate) fn new(spec: InPlaceSpec, input: Arc<dyn ExecutionPlan>) -> Self {
        Self { spec, input }
    }

    /// The URLs of the share's objects.
    fn files(&self) -> Vec<String> {
        let base = self.spec.store.trim_end_matches('/');
        self.spec
            .objects
            .iter()
            .map(|o| format!("{base}/{}", o.location))
            .collect()
    }

    /// Fails as unreachable unless this node may read the share: the node
    /// it is meant for, or one serving its files.
    fn check_here(&self, scan: &ScanContext) -> Result<()> {
        let meant = self
            .spec
            .node
            .as_ref()
            .is_none_or(|n| n.node == scan.node_id);
        if meant || serves(&scan.in_place, &self.files()) {
            return Ok(());
        }
        Err(unreachable_error(format!(
            "node {} serves no table in place over the files of a scan's share in {} (its \
             --table locations: {:?}): only the nodes that do are given such shares",
            scan.node_id, self.spec.store, scan.in_place
        )))
    }
}

impl DisplayAs for InPlaceScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let node = self.spec.node.as_ref().map_or("any", |n| n.node.as_str());
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => write!(
                f,
                "InPlaceScanExec: store={}, files={}, bytes={}, node={node}",
                self.spec.store.trim_end_matches('/'),
                self.spec.objects.len(),
                self.spec.objects.iter().map(|o| o.size).sum::<u64>()
            ),
            DisplayFormatType::TreeRender => write!(f, "node={node}"),
        }
    }
}

impl ExecutionPlan for InPlaceScanExec {
    fn name(&self) -> &'static str {
        "InPlaceScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match (children.pop(), children.is_empty()) {
            (Some(input), true) => Ok(Arc::new(Self::new(self.spec.clone(), input))),
            _ => internal_err!("InPlaceScanExec has one child"),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let Some(scan) = context.session_config().get_extension::<ScanContext>() else {
            return internal_err!("InPlaceScanExec runs only on a cluster node's session");
        };
        if !self.spec.objects.is_empty() {
            self.check_here(&scan)?;
            if let Some(stores) = scan.stores.get() {
                let url = Url::parse(&self.spec.store)
                    .map_err(|e| DataFusionError::Internal(format!("{}: {e}", self.spec.store)))?;
                let metas = self
                    .spec
                    .objects
                    .iter()
                    .map(ListedObject::meta)
                    .collect::<Result<Vec<_>>>()?;
                stores
                    .note_listed(&url, metas)
                    .map_err(|e| DataFusionError::External(Box::new(e)))?;
            }
        }
        self.input.execute(partition, context)
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        match input_stats.first() {
            Some(stats) => Ok(Arc::clone(stats)),
            None => Ok(Arc::new(Statistics::new_unknown(&self.schema()))),
        }
    }
}

/// The planner's handlers for scans of files in object storage (module
/// docs): how many tasks one wants, and its shares.
#[derive(Debug, Clone)]
pub(crate) struct InPlaceScans {
    pub(crate) node: Weak<ClusterNode>,
}

impl InPlaceScans {
    /// The nodes that may read `files`: this one, and every other live node
    /// (less the suspects) whose tables in place hold them all; by id.
    fn readers(&self, files: &[String]) -> Vec<Replica> {
        let Some(node) = self.node.upgrade() else {
            return Vec::new();
        };
        let me = Replica {
            node: node.options.node_id.clone(),
            location: node.options.location.clone(),
        };
        let mut readers: Vec<Replica> = node
            .cached()
            .nodes
            .values()
            .filter(|n| {
                n.id != me.node && !node.peers.is_suspect(&n.location) && serves(&n.in_place, files)
            })
            .map(|n| Replica {
                node: n.id.clone(),
                location: n.location.clone(),
            })
            .collect();
        readers.push(me);
        readers.sort_by(|a, b| a.node.cmp(&b.node));
        readers
    }
}

#[async_trait]
impl DesiredTaskCountHandler for InPlaceScans {
    async fn handle(
        &self,
        ev: DesiredTaskCountEvent<'_>,
    ) -> Option<Result<DesiredTaskCountEventResponse>> {
        let (config, files) = in_place_scan(ev.plan)?;
        // A scan whose partitions are values of its partition columns is not
        // cut: it runs here.
        if config.output_partitioning.is_some() {
            return Some(Ok(DesiredTaskCountEventResponse::maximum(1)));
        }
        // A task per reader at most: a stage scanning these files runs on no
        // node that does not serve them.
        let readers = self.readers(&files).len();
        Some(Ok(DesiredTaskCountEventResponse::maximum(
            readers.min(files.len()).max(1),
        )))
    }
}

impl ScaleUpLeafNodeHandler for InPlaceScans {
    fn handle(&self, ev: ScaleUpLeafNodeEvent) -> Option<Result<ScaleUpLeafNodeEventResponse>> {
        let (config, files) = in_place_scan(ev.plan)?;
        if ev.task_count <= 1 || config.output_partitioning.is_some() {
            return None;
        }
        let readers = self.readers(&files);
        if readers.is_empty() {
            return None;
        }
        let target = ev.session_config.target_partitions();
        let leaf = shares(config, &readers, ev.task_count, target)
            .and_then(|variants| DistributedLeafExec::try_new(Arc::clone(ev.plan), variants));
        Some(leaf.map(|leaf| ScaleUpLeafNodeEventResponse::new(Arc::new(leaf))))
    }
}

/// `config`'s files cut into `tasks` shares, each a scan of its own files
/// meant for one of `readers` (share i for reader i; shares past the
/// readers read nothing), all of one width: each share's files in as many
/// groups, of at most `target` (padded with empty ones).
fn shares(
    config: &FileScanConfig,
    readers: &[Replica],
    tasks: usize,
    target: usize,
) -> Result<Vec<Arc<dyn ExecutionPlan>>> {
    // A scan in a declared order reads each group in order: its groups are
    // kept whole. Any other is cut file by file.
    let ordered = !config.output_ordering.is_empty() || config.preserve_order;
    let units: Vec<Vec<PartitionedFile>> = if ordered {
        config
            .file_groups
            .iter()
            .map(|group| group.files().to_vec())
            .collect()
    } else {
        config
            .file_groups
            .iter()
            .flat_map(FileGroup::iter)
            .map(|file| vec![file.clone()])
            .collect()
    };
    let bytes =
        |unit: &Vec<PartitionedFile>| unit.iter().map(|f| f.effective_size().max(1)).sum::<u64>();
    let sharing = tasks.min(readers.len()).max(1);
    let assigned = balance(&units.iter().map(bytes).collect::<Vec<_>>(), sharing);
    let mut per_task: Vec<Vec<Vec<PartitionedFile>>> = vec![Vec::new(); tasks];
    for (unit, task) in units.into_iter().zip(assigned) {
        per_task[task].push(unit);
    }
    let width = per_task
        .iter()
        .map(|units| {
            if ordered {
                units.len()
            } else {
                units.len().min(target)
            }
        })
        .max()
        .unwrap_or(1)
        .max(1);
    let store = config.object_store_url.as_str().to_string();
    per_task
        .into_iter()
        .enumerate()
        .map(|(task, units)| {
            let mut groups: Vec<FileGroup> = if ordered {
                units.into_iter().map(FileGroup::new).collect()
            } else {
                let files: Vec<PartitionedFile> = units.into_iter().flatten().collect();
                runs(files, width).into_iter().map(FileGroup::new).collect()
            };
            groups.resize_with(width, || FileGroup::new(Vec::new()));
            let mut objects: Vec<ListedObject> = Vec::new();
            for file in groups.iter().flat_map(FileGroup::iter) {
                let object = ListedObject::of(&file.object_meta);
                if !objects.iter().any(|o| o.location == object.location) {
                    objects.push(object);
                }
            }
            let node = (!objects.is_empty())
                .then(|| readers.get(task).cloned())
                .flatten();
            let mut others: Vec<Replica> = node.iter().cloned().collect();
            others.extend(
                readers
                    .iter()
                    .filter(|r| Some(*r) != node.as_ref())
                    .cloned(),
            );
            let mut scan = config.clone();
            scan.file_groups = groups;
            let spec = InPlaceSpec {
                store: store.clone(),
                node,
                readers: if objects.is_empty() {
                    Vec::new()
                } else {
                    others
                },
                objects,
            };
            Ok(Arc::new(InPlaceScanExec::new(
                spec,
                DataSourceExec::from_data_source(scan),
            )) as Arc<dyn ExecutionPlan>)
        })
        .collect()
}

/// The share each of units of `sizes` goes to, of `shares`: the largest
/// first, each to the least loaded share (the first among equals).
fn balance(sizes: &[u64], shares: usize) -> Vec<usize> {
    let shares = shares.max(1);
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by(|&a, &b| sizes[b].cmp(&sizes[a]).then(a.cmp(&b)));
    let mut load = vec![0u64; shares];
    let mut assigned = vec![0usize; sizes.len()];
    for unit in order {
        let share = (0..shares).min_by_key(|&s| (load[s], s)).unwrap_or(0);
        load[share] += sizes[unit];
        assigned[unit] = share;
    }
    assigned
}

/// `items` in at most `count` runs, in order, as even in number as can be.
fn runs<T: Clone>(items: Vec<T>, count: usize) -> Vec<Vec<T>> {
    let count = count.min(items.len()).max(1);
    (0..count)
        .map(|i| {
            let from = items.len() * i / count;
            let to = items.len() * (i + 1) / count;
            items[from..to].to_vec()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_string()).collect()
    }

    #[test]
    fn a_node_serves_the_files_under_its_locations() {
        let files = strings(&["s3://lake/t/00.parquet", "s3://lake/t/01.parquet"]);
        assert!(serves(&strings(&["s3://lake/t/"]), &files));
        assert!(serves(&strings(&["s3://lake/t"]), &files));
        assert!(serves(&strings(&["s3://lake/t/*.parquet"]), &files));
        assert!(serves(
            &strings(&[
                "s3://lake/u/",
                "s3://lake/t/00.parquet",
                "s3://lake/t/01.parquet"
            ]),
            &files
        ));
        assert!(!serves(&strings(&["s3://lake/t/00.parquet"]), &files));
        assert!(!serves(&strings(&["s3://lake/u/"]), &files));
        assert!(!serves(&strings(&["s3://other/t/"]), &files));
        assert!(!serves(&[], &files));
    }

    #[test]
    fn units_are_balanced_by_bytes_largest_first() {
        assert_eq!(balance(&[10, 10, 10, 10, 10, 10], 3), [0, 1, 2, 0, 1, 2]);
        // The large unit alone; the small ones on the others.
        assert_eq!(balance(&[1, 30, 1, 1, 1], 2), [1, 0, 1, 1, 1]);
        assert_eq!(balance(&[5, 5], 3), [0, 1]);
        assert!(balance(&[], 2).is_empty());
    }

    #[test]
    fn runs_keep_order_and_are_even() {
        assert_eq!(runs(vec![1, 2, 3, 4, 5], 2), [vec![1, 2], vec![3, 4, 5]]);
        assert_eq!(runs(vec![1], 3), [vec![1]]);
        assert_eq!(runs(Vec::<u8>::new(), 2), [Vec::<u8>::new()]);
    }

    #[test]
    fn a_listed_object_travels_with_its_version() {
        let meta = ObjectMeta {
            location: Path::parse("t/a.parquet").unwrap(),
            last_modified: chrono::DateTime::from_timestamp_nanos(1_700_000_000_123_456_789),
            size: 42,
            e_tag: Some("\"etag\"".into()),
            version: None,
        };
        let listed = ListedObject::of(&meta);
        let json = serde_json::to_string(&listed).unwrap();
        let back: ListedObject = serde_json::from_str(&json).unwrap();
        assert_eq!(back.meta().unwrap(), meta);
    }
}

//! Where the tasks of a distributed query run: the live nodes are the
//! workers, each task of a stage that scans a cluster table goes to a node
//! holding copies of the partitions it reads, and each share of a scan of
//! files in place to a node that serves them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::grpc::{BoxCloneSyncChannel, create_worker_client};
use datafusion_distributed::{
    ChannelResolver, DesiredTaskCountEvent, DesiredTaskCountEventResponse, DistributedLeafExec,
    RouteTasksEvent, RouteTasksEventResponse, RouteTasksHandler, ScaleUpLeafNodeEvent,
    ScaleUpLeafNodeEventResponse, WorkerChannel, WorkerResolver,
};
use url::Url;

use crate::node::ClusterNode;
use crate::peers::Peers;
use crate::sql::in_place::InPlaceScanExec;
use crate::sql::scan::{ClusterScanExec, Replica, ScanPart};
use crate::sql::table::split;

/// The URL a node's worker service is reached at (the same port as Flight).
pub(crate) fn worker_url(location: &str) -> Result<Url> {
    let uri = quiver_wire::http2::http_uri(location).map_err(DataFusionError::Plan)?;
    Url::parse(&uri).map_err(|e| DataFusionError::Plan(format!("{location}: {e}")))
}

/// The workers: every live node, as this node last read the catalog, less
/// the suspects (nodes whose last call failed) while others are left.
#[derive(Debug, Clone)]
pub(crate) struct CatalogWorkers {
    pub(crate) node: Weak<ClusterNode>,
}

impl WorkerResolver for CatalogWorkers {
    fn get_urls(&self) -> Result<Vec<Url>> {
        let Some(node) = self.node.upgrade() else {
            return Err(DataFusionError::Execution(
                "the cluster node is shutting down".into(),
            ));
        };
        let nodes = node.cached().nodes;
        let trusted: Vec<_> = nodes
            .values()
            .filter(|n| !node.peers.is_suspect(&n.location))
            .collect();
        let workers = if trusted.is_empty() {
            nodes.values().collect()
        } else {
            trusted
        };
        workers.iter().map(|n| worker_url(&n.location)).collect()
    }
}

/// Connections to the other nodes' workers: the library's, but a node that
/// cannot be reached is reported as such (an I/O error of kind
/// `NotConnected`, which survives the trip between nodes and reaches the
/// client as UNAVAILABLE: worth trying again once the node is gone from the
/// catalog), not as a failure of the statement.
/// Every call carries this node's signature: the workers answer nodes only.
/// Connected before first use (over TLS to nodes with `grpc+tls://`
/// locations) and kept for the next query.
#[derive(Clone)]
pub(crate) struct NodeChannels(Peers);

impl NodeChannels {
    /// Connections made with `peers`' settings.
    pub(crate) fn new(peers: Peers) -> Self {
        Self(peers)
    }
}

#[async_trait]
impl ChannelResolver for NodeChannels {
    async fn get_worker_client_for_url(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        let channel = self
            .0
            .connected(url.as_str())
            .await
            .map_err(|e| unreachable_error(e.to_string()))?;
        Ok(create_worker_client(BoxCloneSyncChannel::new(channel)))
    }
}

/// The error of data or a node out of reach now.
pub(crate) fn unreachable_error(message: String) -> DataFusionError {
    DataFusionError::IoError(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        message,
    ))
}

/// A stage scanning a cluster table wants one task per node holding its
/// partitions (the planner caps it at the live workers).
pub(crate) fn desired_tasks(
    ev: DesiredTaskCountEvent,
) -> Option<Result<DesiredTaskCountEventResponse>> {
    let scan = ev.plan.downcast_ref::<ClusterScanExec>()?;
    let holders: BTreeSet<&str> = scan
        .parts()
        .flat_map(|p| p.replicas.iter().map(|r| r.node.as_str()))
        .collect();
    let tasks = holders.len().min(scan.parts().count()).max(1);
    Some(Ok(DesiredTaskCountEventResponse::desired(tasks)))
}

/// Cuts a cluster scan into one variant per task, each reading the
/// partitions its node holds.
pub(crate) fn scale_up(ev: ScaleUpLeafNodeEvent) -> Option<Result<ScaleUpLeafNodeEventResponse>> {
    let scan = ev.plan.downcast_ref::<ClusterScanExec>()?;
    let target = ev.session_config.target_partitions();
    let variants = assign(scan.parts(), ev.task_count);
    // Every variant has as many output partitions as the widest needs.
    let width = variants
        .iter()
        .map(|(_, parts)| parts.len().min(target))
        .max()
        .unwrap_or(1)
        .max(1);
    let leaf = variants
        .into_iter()
        .map(|(node, parts)| {
            let mut groups = split(&parts, width);
            groups.resize_with(width, Vec::new);
            scan.with_groups(groups, node)
                .map(|v| Arc::new(v) as Arc<dyn ExecutionPlan>)
        })
        .collect::<Result<Vec<_>>>()
        .and_then(|variants| DistributedLeafExec::try_new(Arc::clone(ev.plan), variants));
    Some(leaf.map(|leaf| ScaleUpLeafNodeEventResponse::new(Arc::new(leaf))))
}

/// Where the tasks of a query's stages run, chosen when the query starts
/// (not when it was planned: a node may have been lost since).
///
/// A task of a stage scanning a cluster table goes to the node its variant
/// was cut for, else (that node is lost) to a live node holding copies of
/// its partitions, else to the least loaded live node: a scan reads the
/// copies it does not hold from the nodes that do. The tasks of a stage of
/// more than one task above the scans are spread over the live nodes.
///
/// This node runs at most one task of a stage. The tasks it runs itself get
/// the coordinator's plan as it is, not a decoded copy, so two of one stage
/// would share its exchanges and each take the other's streams ("stream ...
/// already consumed"). That happens when a node is lost between planning
/// and running, which leaves a stage more tasks than live nodes; a stage
/// that cannot be placed so fails as unreachable, and is planned again.
#[derive(Debug, Clone)]
pub(crate) struct TaskRouter {
    workers: CatalogWorkers,
    /// This node's worker URL.
    local: Option<Url>,
    /// Turns the first node of a stage's spread from query to query.
    turn: Arc<AtomicUsize>,
}

impl TaskRouter {
    pub(crate) fn new(workers: CatalogWorkers, local: Option<Url>) -> Self {
        Self {
            workers,
            local,
            turn: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl RouteTasksHandler for TaskRouter {
    fn handle(&self, ev: RouteTasksEvent) -> Option<Result<RouteTasksEventResponse>> {
        let (wants, only) = match scan_wants(ev.plan) {
            Some(Ok((wants, only))) if wants.len() == ev.task_count => (wants, only),
            Some(Ok((wants, _))) => {
                return Some(Err(DataFusionError::Internal(format!(
                    "a scan was cut for {} tasks, the stage has {}",
                    wants.len(),
                    ev.task_count
                ))));
            }
            Some(Err(e)) => return Some(Err(e)),
            // One task above the scans: the library's own choice (this
            // node, or the node of the task it reads from).
            None if ev.task_count <= 1 => return None,
            None => (vec![Vec::new(); ev.task_count], Vec::new()),
        };
        let turn = self.turn.fetch_add(1, Ordering::Relaxed);
        let placed = self
            .workers
            .get_urls()
            .and_then(|live| place(&wants, &only, &live, self.local.as_ref(), turn));
        Some(placed.map(RouteTasksEventResponse::new))
    }
}

/// For each task of a stage, the nodes it would run on, best first; and
/// whether it may run on those only.
type StageWants = (Vec<Vec<Url>>, Vec<bool>);

/// The tasks of a stage scanning a cluster table or files in place: for
/// each, the nodes it would run on, best first, and whether it may run on
/// those only. A cluster scan's task: the node its variant was cut for,
/// then the nodes holding copies of its partitions, most bytes first (any
/// other node may read them from those). A share of files in place: its
/// node, then the other nodes that serve the files, and those only. `None`
/// for a stage that scans neither.
fn scan_wants(plan: &Arc<dyn ExecutionPlan>) -> Option<Result<StageWants>> {
    let mut wants = None;
    let walked = plan.apply(|node| {
        let Some(leaf) = node.downcast_ref::<DistributedLeafExec>() else {
            return Ok(TreeNodeRecursion::Continue);
        };
        if leaf.original().downcast_ref::<ClusterScanExec>().is_some() {
            wants = Some(
                leaf.variants()
                    .iter()
                    .filter_map(|v| v.downcast_ref::<ClusterScanExec>())
                    .map(variant_wants)
                    .collect::<Result<Vec<_>>>()
                    .map(|wants| {
                        let only = vec![false; wants.len()];
                        (wants, only)
                    }),
            );
            return Ok(TreeNodeRecursion::Stop);
        }
        let shares: Vec<&InPlaceScanExec> = leaf
            .variants()
            .iter()
            .filter_map(|v| v.downcast_ref::<InPlaceScanExec>())
            .collect();
        if !shares.is_empty() {
            wants = Some(
                shares
                    .iter()
                    .map(|share| {
                        share
                            .spec
                            .readers
                            .iter()
                            .map(|r| worker_url(&r.location))
                            .collect::<Result<Vec<_>>>()
                    })
                    .collect::<Result<Vec<_>>>()
                    .map(|wants| {
                        // A share of no files may run anywhere.
                        let only = wants.iter().map(|w| !w.is_empty()).collect();
                        (wants, only)
                    }),
            );
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    match walked {
        Err(e) => Some(Err(e)),
        Ok(_) => wants,
    }
}

/// The nodes a scan variant would run on, best first.
fn variant_wants(scan: &ClusterScanExec) -> Result<Vec<Url>> {
    let mut held: BTreeMap<&str, u64> = BTreeMap::new();
    for part in scan.parts() {
        for replica in &part.replicas {
            *held.entry(replica.location.as_str()).or_default() += part.bytes.max(1);
        }
    }
    let mut holders: Vec<(&str, u64)> = held.into_iter().collect();
    holders.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let cut_for = scan.spec.node.as_ref().map(|n| n.location.as_str());
    let mut wants = Vec::with_capacity(holders.len() + 1);
    for location in cut_for
        .into_iter()
        .chain(holders.into_iter().map(|(l, _)| l))
    {
        let url = worker_url(location)?;
        if !wants.contains(&url) {
            wants.push(url);
        }
    }
    Ok(wants)
}

/// One live worker per task: its first want when that is live; else the
/// least loaded of its live `wants` (the better ranked among equals); else,
/// unless the task may run on its wants `only`, the least loaded of the
/// live workers (from the `turn`th on, among equals). `local` takes one
/// task at most. An unreachable error when a task has nowhere to go: the
/// stage has more tasks than live nodes and this node is the only one
/// left, or none of the nodes a task may run on is live and free.
fn place(
    wants: &[Vec<Url>],
    only: &[bool],
    live: &[Url],
    local: Option<&Url>,
    turn: usize,
) -> Result<Vec<Url>> {
    let mut load = vec![0usize; live.len()];
    let mut placed: Vec<Option<usize>> = vec![None; wants.len()];
    let mut local_taken = false;
    let free = |worker: usize, local_taken: bool| !(local_taken && local == Some(&live[worker]));
    // First every task whose best node is live, so that none is moved off
    // its node by a task placed before it; then the others.
    for first_only in [true, false] {
        for (task, want) in wants.iter().enumerate() {
            if placed[task].is_some() {
                continue;
            }
            let wanted = want
                .iter()
                .take(if first_only { 1 } else { want.len() })
                .filter_map(|url| live.iter().position(|l| l == url))
                .filter(|&w| free(w, local_taken))
                .min_by_key(|&w| load[w]);
            let worker = match wanted {
                Some(worker) => worker,
                None if first_only => continue,
                None if only.get(task).copied().unwrap_or(false) => {
                    return Err(unreachable_error(format!(
                        "no node that serves the files of task {task} of a scan is live and \
                         free (of {} live nodes): the query was planned before a node was lost",
                        live.len()
                    )));
                }
                None => {
                    let start = turn % live.len().max(1);
                    let spread = (0..live.len()).map(|i| (start + i) % live.len());
                    let least = spread
                        .filter(|&w| free(w, local_taken))
                        .min_by_key(|&w| load[w]);
                    least.ok_or_else(|| {
                        unreachable_error(format!(
                            "a stage of {} tasks has {} live nodes to run on: the query was \
                             planned before a node was lost",
                            wants.len(),
                            live.len()
                        ))
                    })?
                }
            };
            load[worker] += 1;
            local_taken |= local == Some(&live[worker]);
            placed[task] = Some(worker);
        }
    }
    placed
        .into_iter()
        .map(|w| w.map(|w| live[w].clone()))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| DataFusionError::Internal("a task was left unplaced".into()))
}

/// `parts` over `tasks` tasks: each task is given a node (the nodes that
/// hold the most bytes first), and each partition goes to the least loaded
/// task whose node holds a copy of it, or the least loaded of all when none
/// does.
pub(crate) fn assign<'a>(
    parts: impl Iterator<Item = &'a ScanPart>,
    tasks: usize,
) -> Vec<(Option<Replica>, Vec<ScanPart>)> {
    let parts: Vec<&ScanPart> = parts.collect();
    let tasks = tasks.max(1);
    let mut held: BTreeMap<&str, (u64, &Replica)> = BTreeMap::new();
    for part in &parts {
        for replica in &part.replicas {
            held.entry(replica.node.as_str()).or_insert((0, replica)).0 += part.bytes.max(1);
        }
    }
    let mut ranked: Vec<(u64, &Replica)> = held.into_values().collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.node.cmp(&b.1.node)));
    let nodes: Vec<Option<Replica>> = (0..tasks)
        .map(|t| (!ranked.is_empty()).then(|| ranked[t % ranked.len()].1.clone()))
        .collect();
    let mut load = vec![0u64; tasks];
    let mut assigned: Vec<Vec<(usize, ScanPart)>> = vec![Vec::new(); tasks];
    let mut order: Vec<(usize, &ScanPart)> = parts.into_iter().enumerate().collect();
    order.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
    for (index, part) in order {
        let candidates: Vec<usize> = (0..tasks).filter(|&t| holds(&nodes[t], part)).collect();
        let pool = if candidates.is_empty() {
            (0..tasks).collect()
        } else {
            candidates
        };
        let task = pool.into_iter().min_by_key(|&t| (load[t], t)).unwrap_or(0);
        load[task] += part.bytes.max(1);
        assigned[task].push((index, part.clone()));
    }
    rebalance(&nodes, &mut assigned, &mut load);
    nodes
        .into_iter()
        .zip(assigned)
        .map(|(node, mut parts)| {
            // In the table's order within a task.
            parts.sort_by_key(|(index, _)| *index);
            (node, parts.into_iter().map(|(_, p)| p).collect())
        })
        .collect()
}

/// Whether `node` (a task's) holds a copy of `part`.
fn holds(node: &Option<Replica>, part: &ScanPart) -> bool {
    node.as_ref()
        .is_some_and(|n| part.replicas.iter().any(|r| r.node == n.node))
}

/// Moves partitions off the most loaded task to a less loaded one whose
/// node also holds them, while that lowers the most loaded task's load (the
/// greedy pass in table order can leave one node with more than its share).
fn rebalance(nodes: &[Option<Replica>], assigned: &mut [Vec<(usize, ScanPart)>], load: &mut [u64]) {
    // Each move lowers the sum of squared loads: bounded by the partitions.
    let moves = assigned.iter().map(Vec::len).sum::<usize>().pow(2);
    for _ in 0..moves {
        let Some(from) = (0..load.len()).max_by_key(|&t| (load[t], usize::MAX - t)) else {
            return;
        };
        let mut best: Option<(usize, usize)> = None;
        for (i, (_, part)) in assigned[from].iter().enumerate() {
            let bytes = part.bytes.max(1);
            for to in (0..load.len()).filter(|&t| t != from && holds(&nodes[t], part)) {
                let better =
                    load[to] + bytes < load[from] && best.is_none_or(|(_, b)| load[to] < load[b]);
                if better {
                    best = Some((i, to));
                }
            }
        }
        let Some((i, to)) = best else { return };
        let moved = assigned[from].remove(i);
        load[from] -= moved.1.bytes.max(1);
        load[to] += moved.1.bytes.max(1);
        assigned[to].push(moved);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(name: &str, bytes: u64, replicas: &[&str]) -> ScanPart {
        ScanPart {
            name: name.into(),
            rows: bytes,
            bytes,
            replicas: replicas
                .iter()
                .map(|n| Replica {
                    node: (*n).into(),
                    location: format!("grpc+tcp://{n}:1"),
                })
                .collect(),
        }
    }

    fn names(parts: &[ScanPart]) -> Vec<&str> {
        parts.iter().map(|p| p.name.as_str()).collect()
    }

    #[test]
    fn each_partition_goes_to_a_node_holding_it_and_the_load_is_even() {
        let parts = [
            part("a", 10, &["n1", "n2"]),
            part("b", 10, &["n2", "n3"]),
            part("c", 10, &["n3", "n1"]),
            part("d", 10, &["n1", "n2"]),
            part("e", 10, &["n2", "n3"]),
            part("f", 10, &["n3", "n1"]),
        ];
        let tasks = assign(parts.iter(), 3);
        assert_eq!(tasks.len(), 3);
        for (node, parts) in &tasks {
            let node = node.as_ref().expect("a node per task");
            assert_eq!(parts.len(), 2, "{node:?}: {:?}", names(parts));
            assert!(
                parts
                    .iter()
                    .all(|p| p.replicas.iter().any(|r| r.node == node.node))
            );
        }
        let mut all: Vec<&str> = tasks.iter().flat_map(|(_, p)| names(p)).collect();
        all.sort_unstable();
        assert_eq!(all, ["a", "b", "c", "d", "e", "f"]);
    }

    #[test]
    fn every_ring_placement_of_six_partitions_is_read_two_per_node() {
        let pairs = [["n1", "n2"], ["n2", "n3"], ["n3", "n1"]];
        // Every order of the ring's pairs over six partitions (each pair twice).
        for order in 0..729usize {
            let picks: Vec<usize> = (0..6).map(|i| order / 3usize.pow(i) % 3).collect();
            if (0..3).any(|p| picks.iter().filter(|&&x| x == p).count() != 2) {
                continue;
            }
            let parts: Vec<ScanPart> = picks
                .iter()
                .enumerate()
                .map(|(i, &p)| part(&format!("p{i}"), 10, &pairs[p]))
                .collect();
            let tasks = assign(parts.iter(), 3);
            let counts: Vec<usize> = tasks.iter().map(|(_, p)| p.len()).collect();
            assert_eq!(counts, [2, 2, 2], "{picks:?}");
        }
    }

    #[test]
    fn fewer_tasks_than_holders_still_read_every_partition_once() {
        let parts = [
            part("a", 5, &["n1"]),
            part("b", 5, &["n2"]),
            part("c", 5, &["n3"]),
        ];
        let tasks = assign(parts.iter(), 2);
        let mut all: Vec<&str> = tasks.iter().flat_map(|(_, p)| names(p)).collect();
        all.sort_unstable();
        assert_eq!(all, ["a", "b", "c"]);
    }

    #[test]
    fn partitions_without_live_replicas_are_still_scanned_to_fail_clearly() {
        let parts = [part("a", 5, &[]), part("b", 5, &[])];
        let tasks = assign(parts.iter(), 1);
        assert_eq!(tasks.len(), 1);
        assert!(tasks[0].0.is_none());
        assert_eq!(names(&tasks[0].1), ["a", "b"]);
    }

    fn url(node: &str) -> Url {
        worker_url(&format!("grpc+tcp://{node}:1")).expect("a url")
    }

    fn urls(nodes: &[&str]) -> Vec<Url> {
        nodes.iter().map(|n| url(n)).collect()
    }

    #[test]
    fn a_stage_planned_for_three_nodes_runs_on_two_with_one_task_here() {
        // n3 was lost after planning: its scan task goes to a node holding its
        // partitions, and n1 (this node) takes no second task of the stage.
        let local = url("n1");
        let live = urls(&["n1", "n2"]);
        let scan = [
            urls(&["n1", "n3"]),
            urls(&["n2", "n1"]),
            urls(&["n3", "n1", "n2"]),
        ];
        for turn in 0..4 {
            let placed = place(&scan, &[], &live, Some(&local), turn).expect("placed");
            assert_eq!(placed[..2], urls(&["n1", "n2"])[..], "turn {turn}");
            assert_eq!(placed[2], url("n2"), "turn {turn}");
            // Above the scans: whatever node the spread starts from.
            let placed =
                place(&[vec![], vec![], vec![]], &[], &live, Some(&local), turn).expect("placed");
            assert_eq!(
                placed.iter().filter(|u| **u == local).count(),
                1,
                "{placed:?}"
            );
            assert!(placed.iter().all(|u| live.contains(u)), "{placed:?}");
        }
    }

    #[test]
    fn tasks_go_to_their_nodes_and_spread_over_the_live_ones() {
        let live = urls(&["n1", "n2", "n3"]);
        let scan = [urls(&["n3"]), urls(&["n1"]), urls(&["n2"])];
        let placed = place(&scan, &[], &live, Some(&url("n1")), 0).expect("placed");
        assert_eq!(placed, urls(&["n3", "n1", "n2"]));
        // A task whose own node is live keeps it, though another task lost
        // its node and is placed first.
        let scan = [urls(&["n4", "n2"]), urls(&["n2"])];
        let placed = place(&scan, &[], &live, None, 0).expect("placed");
        assert_eq!(placed[1], url("n2"));
        assert_eq!(placed[0], url("n2"), "the lost node's copies are on n2");
        for turn in 0..3 {
            let placed = place(&[vec![], vec![], vec![]], &[], &live, None, turn).expect("placed");
            let mut distinct = placed.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(distinct.len(), 3, "{placed:?}");
            assert_eq!(placed[0], live[turn], "the spread starts at turn {turn}");
        }
    }

    #[test]
    fn a_stage_with_only_this_node_left_fails_as_unreachable() {
        let local = url("n1");
        let live = [local.clone()];
        let placed = place(&[vec![], vec![]], &[], &live, Some(&local), 0);
        let Err(DataFusionError::IoError(e)) = placed else {
            panic!("{placed:?}");
        };
        assert_eq!(e.kind(), std::io::ErrorKind::NotConnected);
        // One task is this node's to run.
        let placed = place(&[vec![]], &[], &live, Some(&local), 0).expect("placed");
        assert_eq!(placed, [local]);
    }

    #[test]
    fn a_share_of_files_in_place_runs_only_on_a_node_serving_them() {
        let local = url("n1");
        let live = urls(&["n1", "n2", "n3"]);
        // n3 serves no table over the files: not given the share whose node
        // (n4) is lost, though it is the least loaded.
        let shares = [urls(&["n1", "n2"]), urls(&["n4", "n2", "n1"])];
        let placed = place(&shares, &[true, true], &live, Some(&local), 0).expect("placed");
        assert_eq!(placed, urls(&["n1", "n2"]));
        // Nowhere left to go (n1 is this node and runs one task at most):
        // unreachable, so that the query is planned again.
        let shares = [urls(&["n1"]), urls(&["n4", "n1"])];
        let placed = place(&shares, &[true, true], &live, Some(&local), 0);
        let Err(DataFusionError::IoError(e)) = placed else {
            panic!("{placed:?}");
        };
        assert_eq!(e.kind(), std::io::ErrorKind::NotConnected);
        // A share of no files goes anywhere.
        let placed = place(
            &[urls(&["n1"]), vec![]],
            &[true, false],
            &live,
            Some(&local),
            0,
        )
        .expect("placed");
        assert_eq!(placed[0], local);
        assert_ne!(placed[1], local);
    }

    #[test]
    fn worker_urls_are_the_flight_port_over_http() {
        let url = worker_url("grpc+tcp://127.0.0.2:7777").expect("a url");
        assert_eq!(url.as_str(), "http://127.0.0.2:7777/");
    }
}

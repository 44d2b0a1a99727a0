//! An aggregation a plan computes more than once, computed once.
//!
//! A `WITH` read twice is planned twice: TPC-H q15 reads its `revenue` (an
//! aggregation of `lineitem`) joined to `supplier` and again for its
//! maximum, and DataFusion scans and aggregates `lineitem` for each.
//! [`SharedAggregations`], a physical optimizer rule, finds aggregations a
//! plan holds more than once (the same operators with the same expressions
//! and partitions, over the same files or stored batches, and no volatile
//! function) and puts a [`SharedExec`] over each copy, all of them holding
//! one [`Kept`]. The first copy executed runs its own input's partitions to
//! their end and keeps their batches, charged to the query's memory pool;
//! every copy then yields them, partition by partition, and the copies'
//! inputs are not run. Where the batches grow past a quarter of the pool,
//! the copy that ran its input goes on reading its streams where it stopped
//! (after the batches kept so far, which stay charged until it hands them
//! on) and each other copy runs its own input, as without the rule: no input
//! is run twice.
//!
//! The rule runs before DataFusion's last filter pushdown, which gives the
//! scans under a join the join's dynamic filter: the copies are compared as
//! planned, and a filter from above one copy cannot reach rows another copy
//! reads, because a `SharedExec` passes no filter down. Only aggregations are
//! shared: their result holds one row per group, mostly far fewer rows than
//! they read. Single node only, like the rules above (a distributed plan's
//! codec does not know the node).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use arrow::record_batch::RecordBatch;
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Statistics, internal_err};
use datafusion::config::ConfigOptions;
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::{DataFusionError, Result, SharedResult};
use datafusion::execution::TaskContext;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit, MemoryReservation};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PhysicalExpr,
    PlanProperties, SendableRecordBatchStream, displayable, replace_children_if_necessary,
};
use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, StreamExt, TryStreamExt};

use crate::scan::StoredScanExec;

/// The operators whose one-line display names everything they compute
/// from their inputs (expressions, modes, partitions): two of them that
/// display alike over inputs that compute alike compute alike.
const DISPLAYED_IN_FULL: [&str; 9] = [
    "AggregateExec",
    "FilterExec",
    "ProjectionExec",
    "RepartitionExec",
    "CoalescePartitionsExec",
    "HashJoinExec",
    "SortExec",
    "SortPreservingMergeExec",
    "CooperativeExec",
];

/// The name of DataFusion's rule the shared aggregations are found before.
const BEFORE: &str = "FilterPushdown(Post)";

/// Where no pool limit is known: the most a [`Kept`] holds.
const KEPT_WITHOUT_LIMIT: usize = 256 << 20;

/// The physical optimizer rule (module docs).
#[derive(Debug, Default)]
pub(crate) struct SharedAggregations;

impl SharedAggregations {
    /// DataFusion's physical optimizer rules, with this one before the
    /// pushdown of dynamic filters (module docs).
    pub(crate) fn among_datafusions() -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
        let mut rules = PhysicalOptimizer::new().rules;
        let at = rules
            .iter()
            .position(|rule| rule.name() == BEFORE)
            .unwrap_or(rules.len());
        rules.insert(at, Arc::new(Self));
        rules
    }
}

impl PhysicalOptimizerRule for SharedAggregations {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let mut found = Vec::new();
        let mut next = 0;
        candidates(&plan, &mut next, &mut found);
        // Pre-order: an aggregation comes before those under it, so the
        // largest copies are shared, and what lies under them is left alone.
        found.sort_by_key(|c| c.start);
        let mut chosen: Vec<Chosen> = Vec::new();
        for (i, candidate) in found.iter().enumerate() {
            let covered = |c: &Candidate| chosen.iter().any(|s| s.candidate.covers(c));
            if covered(candidate) {
                continue;
            }
            let copies: Vec<&Candidate> = std::iter::once(candidate)
                .chain(
                    found[i + 1..]
                        .iter()
                        .filter(|other| !covered(other) && same(&candidate.plan, &other.plan)),
                )
                .collect();
            if copies.len() < 2 {
                continue;
            }
            let kept = Arc::new(Kept::new(copies.len(), None));
            for (n, copy) in copies.into_iter().enumerate() {
                chosen.push(Chosen {
                    candidate: copy.clone(),
                    kept: Arc::clone(&kept),
                    copy: n + 1,
                });
            }
        }
        if chosen.is_empty() {
            return Ok(plan);
        }
        rebuild(plan, &mut 0, &chosen)
    }

    fn name(&self) -> &str {
        "SharedAggregations"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// An aggregation that may be shared: its place in the plan's pre-order
/// (`start`, and `end`, past the last node under it).
#[derive(Clone)]
struct Candidate {
    start: usize,
    end: usize,
    plan: Arc<dyn ExecutionPlan>,
}

/// A copy of an aggregation found more than once: the [`Kept`] its copies
/// share, and which copy it is, from 1.
struct Chosen {
    candidate: Candidate,
    kept: Arc<Kept>,
    copy: usize,
}

impl Candidate {
    fn covers(&self, other: &Candidate) -> bool {
        (self.start..self.end).contains(&other.start)
    }
}

/// Numbers `plan`'s nodes in pre-order from `next`, and adds the
/// aggregations among them to `found`.
fn candidates(plan: &Arc<dyn ExecutionPlan>, next: &mut usize, found: &mut Vec<Candidate>) {
    let start = *next;
    *next += 1;
    for child in plan.children() {
        candidates(child, next, found);
    }
    if plan.is::<AggregateExec>() {
        found.push(Candidate {
            start,
            end: *next,
            plan: Arc::clone(plan),
        });
    }
}

/// `plan` with a [`SharedExec`] over each chosen copy; `next` numbers the
/// nodes as [`candidates`] did.
fn rebuild(
    plan: Arc<dyn ExecutionPlan>,
    next: &mut usize,
    chosen: &[Chosen],
) -> Result<Arc<dyn ExecutionPlan>> {
    if let Some(chosen) = chosen.iter().find(|c| c.candidate.start == *next) {
        *next = chosen.candidate.end;
        let kept = Arc::clone(&chosen.kept);
        return Ok(Arc::new(SharedExec::new(plan, kept, chosen.copy)));
    }
    *next += 1;
    let children = plan
        .children()
        .into_iter()
        .map(|child| rebuild(Arc::clone(child), next, chosen))
        .collect::<Result<Vec<_>>>()?;
    replace_children_if_necessary(plan, children)
}

/// Whether `a` and `b` yield the same rows in the same partitions: the same
/// operators, displayed alike, with no volatile function, over the same
/// files or stored batches.
fn same(a: &Arc<dyn ExecutionPlan>, b: &Arc<dyn ExecutionPlan>) -> bool {
    if Arc::ptr_eq(a, b) {
        return !volatile(a);
    }
    let (left, right) = (a.children(), b.children());
    a.name() == b.name()
        && a.schema() == b.schema()
        // (DataFusion counts no two unknown partitionings equal; the nodes'
        // displays show how their rows are split.)
        && a.output_partitioning().partition_count() == b.output_partitioning().partition_count()
        && one_line(a) == one_line(b)
        && !volatile(a)
        && same_source(a, b)
        && left.len() == right.len()
        && left.iter().zip(right).all(|(x, y)| same(x, y))
}

/// Whether `a` (displayed as `b` is) computes what `b` does from the same
/// inputs: an operator that displays all it computes, a scan of the same
/// files, or a scan of the same stored batches.
fn same_source(a: &Arc<dyn ExecutionPlan>, b: &Arc<dyn ExecutionPlan>) -> bool {
    if DISPLAYED_IN_FULL.contains(&a.name()) {
        return true;
    }
    if let Some(scan) = a.downcast_ref::<DataSourceExec>() {
        // A file scan displays its files, byte ranges, columns and predicate.
        return scan.data_source().is::<FileScanConfig>()
            && b.downcast_ref::<DataSourceExec>()
                .is_some_and(|other| other.data_source().is::<FileScanConfig>());
    }
    match (
        a.downcast_ref::<StoredScanExec>(),
        b.downcast_ref::<StoredScanExec>(),
    ) {
        (Some(a), Some(b)) => a.reads_same(b),
        _ => false,
    }
}

fn one_line(plan: &Arc<dyn ExecutionPlan>) -> String {
    displayable(plan.as_ref()).one_line().to_string()
}

/// Whether one of `plan`'s own expressions calls a volatile function
/// (`random()`): two copies of it need not yield the same rows.
fn volatile(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let mut found = false;
    let walked = plan.apply_expressions(&mut |expr: &Arc<dyn PhysicalExpr>| {
        found = expr.exists(|e| Ok(e.is_volatile_node()))?;
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found || walked.is_err()
}

/// What the copies of one aggregation share: the outcome of the first
/// copy's run, made once by a task of its own, which the others wait for
/// (dropping the plan stops it).
pub(crate) struct Kept {
    copies: usize,
    /// The most bytes kept; `None`: a quarter of the query's memory pool.
    keep_at_most: Option<usize>,
    outcome: OnceLock<Shared<BoxFuture<'static, SharedResult<Arc<Outcome>>>>>,
}

impl fmt::Debug for Kept {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kept")
            .field("copies", &self.copies)
            .field("keep_at_most", &self.keep_at_most)
            .field("started", &self.outcome.get().is_some())
            .finish()
    }
}

/// What the first copy's run gave.
enum Outcome {
    /// Each partition's batches.
    Kept {
        partitions: Vec<Vec<RecordBatch>>,
        _reservation: MemoryReservation,
    },
    /// Too large to keep: copy `copy` takes each partition's batches read so
    /// far and the rest of its stream; the others run their own inputs.
    Handed {
        copy: usize,
        partitions: Vec<Mutex<Option<Handed>>>,
    },
}

/// A partition's batches read before the result grew too large, and its
/// stream, to be read on.
struct Handed {
    read: Vec<RecordBatch>,
    /// What `read` is charged to the query's pool: each batch's share is
    /// released as the batch is handed on (the operators above charge what
    /// they keep).
    charge: MemoryReservation,
    rest: SendableRecordBatchStream,
}

impl Kept {
    fn new(copies: usize, keep_at_most: Option<usize>) -> Self {
        Self {
            copies,
            keep_at_most,
            outcome: OnceLock::new(),
        }
    }

    /// The outcome, run by the first copy to ask (`copy`, with `input`).
    async fn outcome(
        &self,
        copy: usize,
        input: &Arc<dyn ExecutionPlan>,
        context: &Arc<TaskContext>,
    ) -> Result<Arc<Outcome>> {
        let outcome = self.outcome.get_or_init(|| {
            let pool = context.memory_pool();
            let most = self.keep_at_most.unwrap_or(match pool.memory_limit() {
                MemoryLimit::Finite(limit) => limit / 4,
                MemoryLimit::Infinite | MemoryLimit::Unknown => KEPT_WITHOUT_LIMIT,
            });
            let task = SpawnedTask::spawn(run(copy, Arc::clone(input), Arc::clone(context), most));
            async move {
                match task.join().await {
                    Ok(outcome) => outcome.map(Arc::new).map_err(Arc::new),
                    Err(e) => Err(Arc::new(DataFusionError::Internal(format!(
                        "a shared aggregation's run stopped: {e}"
                    )))),
                }
            }
            .boxed()
            .shared()
        });
        outcome.clone().await.map_err(DataFusionError::Shared)
    }
}

/// Runs every partition of `input` to its end, keeping the batches while
/// they hold at most `most` bytes (module docs).
async fn run(
    copy: usize,
    input: Arc<dyn ExecutionPlan>,
    context: Arc<TaskContext>,
    most: usize,
) -> Result<Outcome> {
    let reservation = Arc::new(MemoryConsumer::new("SharedExec").register(context.memory_pool()));
    let full = Arc::new(AtomicBool::new(false));
    let count = input.output_partitioning().partition_count();
    let mut tasks = Vec::with_capacity(count);
    for partition in 0..count {
        let mut stream = input.execute(partition, Arc::clone(&context))?;
        let (reservation, full) = (Arc::clone(&reservation), Arc::clone(&full));
        tasks.push(SpawnedTask::spawn(async move {
            // The batches read, and the bytes of them charged: all but a
            // last one that did not fit.
            let (mut read, mut charged) = (Vec::new(), 0);
            while !full.load(Ordering::Relaxed) {
                let Some(batch) = stream.next().await.transpose()? else {
                    return Ok::<_, DataFusionError>((read, charged, None));
                };
                let size = batch.get_array_memory_size();
                let fits = reservation.size() + size <= most && reservation.try_grow(size).is_ok();
                read.push(batch);
                if fits {
                    charged += size;
                } else {
                    full.store(true, Ordering::Relaxed);
                }
            }
            Ok((read, charged, Some(stream)))
        }));
    }
    let mut partitions = Vec::with_capacity(count);
    for task in tasks {
        match task.join().await {
            Ok(result) => partitions.push(result?),
            Err(e) => return internal_err!("a shared aggregation's partition stopped: {e}"),
        }
    }
    // Every task has ended: none holds the reservation any more.
    let Ok(reservation) = Arc::try_unwrap(reservation) else {
        return internal_err!("a shared aggregation's partition outlived its run");
    };
    if !full.load(Ordering::Relaxed) {
        return Ok(Outcome::Kept {
            partitions: partitions.into_iter().map(|(read, ..)| read).collect(),
            _reservation: reservation,
        });
    }
    // Too large: the batches read so far go to the copy that read them,
    // each partition's charged until they are handed on.
    let partitions = partitions
        .into_iter()
        .map(|(read, charged, rest)| {
            let rest = rest.unwrap_or_else(|| {
                Box::pin(RecordBatchStreamAdapter::new(
                    input.schema(),
                    futures::stream::empty(),
                ))
            });
            // The charges add up to the reservation; `min` keeps a split in it.
            let charge = reservation.split(charged.min(reservation.size()));
            Mutex::new(Some(Handed { read, charge, rest }))
        })
        .collect();
    Ok(Outcome::Handed { copy, partitions })
}

/// One copy of a shared aggregation (module docs): yields the rows of
/// `input`, run once for all copies.
#[derive(Debug)]
pub(crate) struct SharedExec {
    input: Arc<dyn ExecutionPlan>,
    kept: Arc<Kept>,
    /// Which copy this is, from 1.
    copy: usize,
    metrics: ExecutionPlanMetricsSet,
}

impl SharedExec {
    fn new(input: Arc<dyn ExecutionPlan>, kept: Arc<Kept>, copy: usize) -> Self {
        Self {
            input,
            kept,
            copy,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for SharedExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => {
                write!(f, "SharedExec: copy {} of {}", self.copy, self.kept.copies)
            }
            DisplayFormatType::TreeRender => write!(f, "copy={}/{}", self.copy, self.kept.copies),
        }
    }
}

impl ExecutionPlan for SharedExec {
    fn name(&self) -> &'static str {
        "SharedExec"
    }

    /// The input's: the rows are its rows, in its partitions and order.
    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
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
        match <[_; 1]>::try_from(children) {
            Ok([input]) => Ok(Arc::new(Self::new(
                input,
                Arc::clone(&self.kept),
                self.copy,
            ))),
            Err(children) => internal_err!("SharedExec has one input, got {}", children.len()),
        }
    }

    /// A copy run again on its own: it shares with no other.
    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        let kept = Arc::new(Kept::new(self.kept.copies, self.kept.keep_at_most));
        Ok(Arc::new(Self::new(
            Arc::clone(&self.input),
            kept,
            self.copy,
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let (input, kept, copy) = (Arc::clone(&self.input), Arc::clone(&self.kept), self.copy);
        let rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let alone = MetricBuilder::new(&self.metrics).global_counter("ran_alone");
        let schema = self.schema();
        let stream = futures::stream::once(async move {
            let outcome = kept.outcome(copy, &input, &context).await?;
            let stream: SendableRecordBatchStream = match outcome.as_ref() {
                Outcome::Kept { partitions, .. } => {
                    let batches = partitions.get(partition).cloned().unwrap_or_default();
                    Box::pin(RecordBatchStreamAdapter::new(
                        input.schema(),
                        futures::stream::iter(batches.into_iter().map(Ok)),
                    ))
                }
                Outcome::Handed {
                    copy: ran,
                    partitions,
                } if *ran == copy => {
                    let handed = partitions
                        .get(partition)
                        .and_then(|p| p.lock().unwrap_or_else(PoisonError::into_inner).take());
                    let Some(Handed { read, charge, rest }) = handed else {
                        return internal_err!(
                            "a shared aggregation's partition {partition} was read twice"
                        );
                    };
                    let read = read.into_iter().map(move |batch| {
                        charge.shrink(batch.get_array_memory_size().min(charge.size()));
                        Ok(batch)
                    });
                    Box::pin(RecordBatchStreamAdapter::new(
                        input.schema(),
                        futures::stream::iter(read).chain(rest),
                    ))
                }
                Outcome::Handed { .. } => {
                    alone.add(1);
                    input.execute(partition, context)?
                }
            };
            Ok::<_, datafusion::error::DataFusionError>(stream)
        })
        .try_flatten()
        .inspect_ok(move |batch| rows.add(batch.num_rows()));
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        vec![ChildStats::At(partition)]
    }

    /// The input's: the rows are its rows.
    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        match input_stats {
            [input] => Ok(Arc::clone(input)),
            _ => internal_err!("SharedExec has one input"),
        }
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{ArrayRef, Int64Array};
    use arrow::util::pretty::pretty_format_batches;
    use datafusion::execution::SessionStateBuilder;
    use datafusion::physical_plan::collect;
    use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};

    use super::*;

    /// `t(k, v)`: 20,000 rows in a Parquet file in `dir`, in a session of two
    /// partitions, with the rule where DataFusion's rules are if `shared`.
    async fn session(dir: &std::path::Path, shared: bool) -> SessionContext {
        let path = dir.join("t.parquet");
        if !path.exists() {
            let batch = RecordBatch::try_from_iter([
                (
                    "k",
                    Arc::new(Int64Array::from_iter_values(0..20_000)) as ArrayRef,
                ),
                (
                    "v",
                    Arc::new(Int64Array::from_iter_values(
                        (0..20_000).map(|i| i * 7 % 1009),
                    )),
                ),
            ])
            .unwrap();
            crate::rule_testing::write_parquet(&path, &batch, None);
        }
        let mut builder = SessionStateBuilder::new()
            .with_config(SessionConfig::new().with_target_partitions(2))
            .with_default_features();
        if shared {
            builder =
                builder.with_physical_optimizer_rules(SharedAggregations::among_datafusions());
        }
        let context = SessionContext::new_with_state(builder.build());
        context
            .register_parquet("t", path.to_str().unwrap(), ParquetReadOptions::default())
            .await
            .unwrap();
        context
    }

    /// The rows of `sql`, printed, how many `SharedExec`s its plan holds, and
    /// how many rows its scans read.
    async fn run_sql(context: &SessionContext, sql: &str) -> (String, usize, usize) {
        let plan = context
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let batches = collect(Arc::clone(&plan), context.task_ctx())
            .await
            .unwrap();
        let mut copies = 0;
        plan.apply(|node| {
            copies += usize::from(node.is::<SharedExec>());
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        let rows = pretty_format_batches(&batches).unwrap().to_string();
        (rows, copies, scanned(&plan))
    }

    /// The rows the file scans under `plan` read.
    fn scanned(plan: &Arc<dyn ExecutionPlan>) -> usize {
        let mut rows = 0;
        plan.apply(|node| {
            if node.is::<DataSourceExec>() {
                rows += node.metrics().and_then(|m| m.output_rows()).unwrap_or(0);
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        rows
    }

    /// TPC-H q15's shape: an aggregation named once, read twice.
    const READ_TWICE: &str = "WITH r AS (SELECT k % 100 AS g, sum(v) AS s FROM t GROUP BY k % 100) \
        SELECT g, s FROM r WHERE s = (SELECT max(s) FROM r) ORDER BY g";

    #[tokio::test]
    async fn an_aggregation_read_twice_reads_its_input_once() {
        let dir = tempfile::tempdir().unwrap();
        let (rows, copies, scanned) = run_sql(&session(dir.path(), true).await, READ_TWICE).await;
        let (alone, none, twice) = run_sql(&session(dir.path(), false).await, READ_TWICE).await;
        assert_eq!(rows, alone);
        assert!(rows.lines().count() > 4, "{rows}");
        assert_eq!((copies, none), (2, 0));
        assert_eq!((scanned, twice), (20_000, 40_000));
    }

    #[tokio::test]
    async fn copies_that_differ_or_call_a_volatile_function_run_on_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let context = session(dir.path(), true).await;
        let without = session(dir.path(), false).await;
        for sql in [
            // Different filters under the aggregations.
            "SELECT g, s FROM (SELECT k % 100 AS g, sum(v) AS s FROM t WHERE k > 5 GROUP BY k % 100) \
             WHERE s = (SELECT max(s) FROM (SELECT k % 100 AS g, sum(v) AS s FROM t GROUP BY k % 100))",
            // A volatile filter: each copy may keep other rows.
            "WITH r AS (SELECT k % 100 AS g, sum(v) AS s FROM t WHERE random() < 2.0 GROUP BY k % 100) \
             SELECT g, s FROM r WHERE s = (SELECT max(s) FROM r)",
        ] {
            let (rows, copies, scanned) = run_sql(&context, sql).await;
            assert_eq!(rows, run_sql(&without, sql).await.0);
            assert_eq!((copies, scanned), (0, 40_000), "{sql}");
        }
    }

    /// Two copies of one aggregation's plan over one [`Kept`] keeping at
    /// most `most` bytes; the rows each yields, and each copy's input's
    /// scanned rows and partitions run alone.
    async fn two_copies(most: usize) -> (String, [(String, usize, usize); 2]) {
        let dir = tempfile::tempdir().unwrap();
        let context = session(dir.path(), false).await;
        let sql = "SELECT k % 1000 AS g, sum(v) AS s FROM t GROUP BY k % 1000";
        let plan = || async {
            let frame = context.sql(sql).await.unwrap();
            frame.create_physical_plan().await.unwrap()
        };
        let expected = collect(plan().await, context.task_ctx()).await.unwrap();
        let sorted = |batches: &[RecordBatch]| {
            let mut lines: Vec<String> = pretty_format_batches(batches)
                .unwrap()
                .to_string()
                .lines()
                .map(str::to_string)
                .collect();
            lines.sort();
            lines.join("\n")
        };
        let kept = Arc::new(Kept::new(2, Some(most)));
        let copies = [
            Arc::new(SharedExec::new(plan().await, Arc::clone(&kept), 1)),
            Arc::new(SharedExec::new(plan().await, Arc::clone(&kept), 2)),
        ];
        let mut yielded = Vec::new();
        for copy in &copies {
            let batches = collect(Arc::clone(copy) as _, context.task_ctx())
                .await
                .unwrap();
            let alone = copy
                .metrics()
                .and_then(|m| m.sum_by_name("ran_alone"))
                .map_or(0, |v| v.as_usize());
            yielded.push((sorted(&batches), scanned(&copy.input), alone));
        }
        let yielded: [(String, usize, usize); 2] = yielded.try_into().unwrap();
        (sorted(&expected), yielded)
    }

    #[tokio::test]
    async fn a_kept_result_is_read_by_every_copy() {
        let (expected, [first, second]) = two_copies(usize::MAX).await;
        assert_eq!((first.1, first.2), (20_000, 0));
        assert_eq!((second.1, second.2), (0, 0));
        assert_eq!(first.0, expected);
        assert_eq!(second.0, expected);
    }

    #[tokio::test]
    async fn batches_read_before_a_result_grew_too_large_stay_charged_until_handed_on() {
        let dir = tempfile::tempdir().unwrap();
        let context = session(dir.path(), false).await;
        // The scan itself: batches of at most 8,192 rows (131 kB of `k`
        // and `v`).
        let frame = context.sql("SELECT k, v FROM t").await.unwrap();
        let input = frame.create_physical_plan().await.unwrap();
        let most = 200_000;
        let kept = Arc::new(Kept::new(2, Some(most)));
        let copy = Arc::new(SharedExec::new(input, Arc::clone(&kept), 1));
        let task = context.task_ctx();
        let outcome = kept.outcome(1, &copy.input, &task).await.unwrap();
        assert!(matches!(outcome.as_ref(), Outcome::Handed { copy: 1, .. }));
        // The first batch fitted, the next did not: one is charged.
        let charged = task.memory_pool().reserved();
        assert!(0 < charged && charged <= most, "{charged}");
        // Each partition's charged batches come first: once each has handed
        // on its first, nothing is charged, while the streams are still open.
        let (mut streams, mut rows) = (Vec::new(), 0);
        for partition in 0..copy.properties().output_partitioning().partition_count() {
            let mut stream = copy.execute(partition, Arc::clone(&task)).unwrap();
            if let Some(batch) = stream.next().await {
                rows += batch.unwrap().num_rows();
            }
            streams.push(stream);
        }
        assert_eq!(task.memory_pool().reserved(), 0);
        for mut stream in streams {
            while let Some(batch) = stream.next().await {
                rows += batch.unwrap().num_rows();
            }
        }
        assert_eq!(rows, 20_000);
    }

    #[tokio::test]
    async fn a_result_too_large_to_keep_is_read_on_by_its_copy_and_run_by_the_others() {
        let (expected, [first, second]) = two_copies(1).await;
        // The first copy's input ran once, read on where the run stopped.
        assert_eq!((first.1, first.2), (20_000, 0));
        // The second ran its own input, in each of its two partitions.
        assert_eq!((second.1, second.2), (20_000, 2));
        assert_eq!(first.0, expected);
        assert_eq!(second.0, expected);
    }
}

//! A planned query: its partitions run on demand, under a deadline and a
//! cancel switch shared by all of them.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::analyze::AnalyzeExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, displayable};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::{self, BoxStream};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use crate::{Result, SqlError};

/// Record batches of one partition of a query, as the engine produces them.
pub type BatchStream = BoxStream<'static, Result<RecordBatch>>;

/// A physical plan ready to run. Each output partition runs when
/// [`Query::execute`] is called for it, on the caller's task; nothing is
/// computed before, and no result is collected whole.
#[derive(Debug, Clone)]
pub struct Query {
    plan: Arc<dyn ExecutionPlan>,
    task: Arc<TaskContext>,
    control: Arc<Control>,
    /// How to plan the statement again, if it may be (a query over a
    /// cluster's tables that loses a node).
    again: Option<Replan>,
}

/// One operator of a query's physical plan and what it measured while it
/// ran: what `EXPLAIN ANALYZE` prints, as data (the web console draws it as
/// a tree).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator {
    /// Its name: `ProjectionExec`, `AggregateExec`...
    pub name: String,
    /// Its line of `EXPLAIN`: the name and what it does.
    pub detail: String,
    /// How many partitions it puts out.
    pub partitions: usize,
    /// Rows it put out over all its partitions; `None` before it ran.
    pub output_rows: Option<usize>,
    /// Its CPU time over all its partitions, in nanoseconds; `None` before
    /// it ran.
    pub elapsed_compute_ns: Option<usize>,
    /// Every metric it keeps, summed over its partitions, as `EXPLAIN
    /// ANALYZE` prints them (name, value), most useful first.
    pub metrics: Vec<(String, String)>,
    /// The operators it reads, in order.
    pub children: Vec<Operator>,
}

impl Operator {
    fn of(plan: &dyn ExecutionPlan) -> Self {
        let metrics = plan.metrics().map(|m| m.aggregate_by_name());
        Self {
            name: plan.name().to_string(),
            detail: displayable(plan)
                .one_line()
                .to_string()
                .trim_end()
                .to_string(),
            partitions: plan.output_partitioning().partition_count(),
            output_rows: metrics.as_ref().and_then(|m| m.output_rows()),
            elapsed_compute_ns: metrics.as_ref().and_then(|m| m.elapsed_compute()),
            metrics: metrics
                .map(|m| {
                    m.sorted_for_display()
                        .timestamps_removed()
                        .iter()
                        .map(|metric| {
                            let value = metric.value();
                            (value.name().to_string(), value.to_string())
                        })
                        .collect()
                })
                .unwrap_or_default(),
            children: plan
                .children()
                .into_iter()
                .map(|child| Self::of(child.as_ref()))
                .collect(),
        }
    }
}

/// A physical plan and the task context to run it in.
type Planned = (Arc<dyn ExecutionPlan>, Arc<TaskContext>);

/// Plans a query's statement again, as of now.
#[derive(Clone)]
pub(crate) struct Replan(Arc<dyn Fn() -> BoxFuture<'static, Result<Planned>> + Send + Sync>);

impl Replan {
    pub(crate) fn new(
        replan: impl Fn() -> BoxFuture<'static, Result<Planned>> + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(replan))
    }
}

impl std::fmt::Debug for Replan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Replan")
    }
}

/// How many times in all a query that loses a node runs.
const TRIES: u32 = 3;

#[derive(Debug)]
struct Control {
    cancel: watch::Sender<bool>,
    deadline: Instant,
    timeout: Duration,
    /// When the statement arrived, if the query is recorded in the metrics
    /// when it ends (its last handle and partition dropped).
    counted_from: OnceLock<std::time::Instant>,
    /// How the first partition that did not end well ended.
    outcome: OnceLock<&'static str>,
}

impl Control {
    /// Records that a partition ended with `outcome`, unless one ended badly before.
    fn ended(&self, outcome: &'static str) {
        let _ = self.outcome.set(outcome);
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        if let Some(started) = self.counted_from.get() {
            let cancelled = *self.cancel.borrow();
            let outcome = self.outcome.get().copied();
            let outcome = outcome.unwrap_or(if cancelled { "cancelled" } else { "ok" });
            crate::metrics::record(*started, outcome);
        }
    }
}

/// One partition running: a partition dropped before its end (its client went
/// away) makes the query `cancelled`.
#[derive(Debug)]
struct Running {
    control: Arc<Control>,
    ended: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.ended {
            self.control.ended("cancelled");
        }
    }
}

/// One partition of a query as it runs.
struct Partition {
    batches: SendableRecordBatchStream,
    cancelled: watch::Receiver<bool>,
    deadline: Pin<Box<Sleep>>,
    running: Running,
    schema: SchemaRef,
    /// Set until the first batch is out, if the query may be planned again.
    again: Option<Replan>,
    /// How many times the query has run.
    tries: u32,
}

impl Partition {
    /// The next batch, the end, or how the partition failed.
    async fn next(&mut self) -> Result<Option<RecordBatch>> {
        tokio::select! {
            biased;
            // The sender lives in `control`, which this stream holds.
            _ = self.cancelled.wait_for(|c| *c) => Err(SqlError::Cancelled),
            () = &mut self.deadline => Err(SqlError::Timeout(self.running.control.timeout)),
            next = self.batches.next() => next.transpose().map_err(SqlError::from),
        }
    }

    /// How to plan the query again, while it may be.
    fn replan(&self) -> Option<Replan> {
        self.again.clone().filter(|_| self.tries < TRIES)
    }

    /// Plans the query again with `replan` and starts it over, after it
    /// lost a node (`lost` says how); on failure, how.
    async fn try_again(&mut self, replan: Replan, lost: &str) -> Result<()> {
        self.tries += 1;
        tracing::warn!(
            run = self.tries,
            "a query lost a node; planning it again: {lost}"
        );
        metrics::counter!(crate::metrics::QUERIES_PLANNED_AGAIN).increment(1);
        let (plan, task) = tokio::select! {
            biased;
            _ = self.cancelled.wait_for(|c| *c) => return Err(SqlError::Cancelled),
            () = &mut self.deadline => {
                return Err(SqlError::Timeout(self.running.control.timeout));
            }
            planned = (replan.0)() => planned?,
        };
        // The table may have been replaced by one of other columns since.
        if plan.schema() != self.schema || plan.output_partitioning().partition_count() != 1 {
            return Err(SqlError::Unavailable(lost.to_string()));
        }
        self.batches = plan.execute(0, task)?;
        Ok(())
    }
}

impl Query {
    pub(crate) fn new(
        plan: Arc<dyn ExecutionPlan>,
        task: Arc<TaskContext>,
        timeout: Duration,
    ) -> Self {
        let (cancel, _) = watch::channel(false);
        Self {
            plan,
            task,
            control: Arc::new(Control {
                cancel,
                deadline: Instant::now() + timeout,
                timeout,
                counted_from: OnceLock::new(),
                outcome: OnceLock::new(),
            }),
            again: None,
        }
    }

    /// The query, planned again by `replan` and run once more when it loses
    /// a node before any row is out ([`SqlError::Unavailable`]).
    pub(crate) fn planned_again_by(self, replan: Replan) -> Self {
        Self {
            again: Some(replan),
            ..self
        }
    }

    /// A query whose result is `batch`, already computed.
    pub fn from_batch(batch: RecordBatch) -> Result<Self> {
        let schema = batch.schema();
        let plan = MemorySourceConfig::try_new_exec(&[vec![batch]], schema, None)?;
        Ok(Self::new(
            plan,
            Arc::new(TaskContext::default()),
            Duration::from_secs(3600),
        ))
    }

    /// Records the query in the metrics when it ends, as a statement that
    /// arrived at `started`.
    pub(crate) fn count_from(&self, started: std::time::Instant) {
        let _ = self.control.counted_from.set(started);
    }

    /// The schema of every batch the query returns.
    pub fn schema(&self) -> SchemaRef {
        self.plan.schema()
    }

    /// How many partitions the result has; each can be fetched separately
    /// and in parallel.
    pub fn partitions(&self) -> usize {
        self.plan.output_partitioning().partition_count()
    }

    /// Runs partition `partition`. The stream ends with an error if the query
    /// passes its deadline or is cancelled. A one-partition query that can be
    /// planned again ([`Query::planned_again_by`]) and loses a node before
    /// its first batch is planned again and run once more, twice at most.
    pub fn execute(&self, partition: usize) -> Result<BatchStream> {
        if partition >= self.partitions() {
            return Err(SqlError::invalid(format!(
                "partition {partition} out of range: the query has {} partitions",
                self.partitions()
            )));
        }
        if *self.control.cancel.borrow() {
            return Err(SqlError::Cancelled);
        }
        let batches = self.plan.execute(partition, Arc::clone(&self.task))?;
        let control = Arc::clone(&self.control);
        let cancelled = control.cancel.subscribe();
        let again = match (&self.again, self.partitions()) {
            (Some(replan), 1) => Some(replan.clone()),
            _ => None,
        };
        let state = Partition {
            batches,
            cancelled,
            // One timer for the whole partition, not one per batch.
            deadline: Box::pin(tokio::time::sleep_until(control.deadline)),
            running: Running {
                control,
                ended: false,
            },
            schema: self.schema(),
            again,
            tries: 1,
        };
        Ok(stream::unfold(Some(state), |state| async move {
            let mut state = state?;
            let failed = loop {
                match state.next().await {
                    Ok(Some(batch)) => {
                        // Rows are out: the query cannot start over.
                        state.again = None;
                        return Some((Ok(batch), Some(state)));
                    }
                    Ok(None) => {
                        state.running.ended = true;
                        return None;
                    }
                    Err(SqlError::Unavailable(lost)) => match state.replan() {
                        Some(replan) => match state.try_again(replan, &lost).await {
                            Ok(()) => continue,
                            Err(e) => break e,
                        },
                        None => break SqlError::Unavailable(lost),
                    },
                    Err(e) => break e,
                }
            };
            state.running.ended = true;
            state
                .running
                .control
                .ended(crate::metrics::outcome_of(&failed));
            Some((Err(failed), None))
        })
        .boxed())
    }

    /// The operators of the plan, from its root, with what they measured
    /// so far; of an `EXPLAIN ANALYZE`, those of the statement analyzed
    /// (measured once the query has run). A plain `EXPLAIN` is a plan of its
    /// own, which only holds text: plan the statement itself instead.
    pub fn operators(&self) -> Operator {
        fn analyzed(plan: &Arc<dyn ExecutionPlan>) -> Option<&Arc<dyn ExecutionPlan>> {
            match plan.downcast_ref::<AnalyzeExec>() {
                Some(analyze) => Some(analyze.input()),
                None => plan.children().into_iter().find_map(analyzed),
            }
        }
        Operator::of(analyzed(&self.plan).unwrap_or(&self.plan).as_ref())
    }

    /// Cancels the query: running partitions end with [`SqlError::Cancelled`]
    /// and none starts any more.
    pub fn cancel(&self) {
        self.control.cancel.send_replace(true);
    }

    /// Whether [`Query::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        *self.control.cancel.borrow()
    }
}

//! A planned query: its partitions run on demand, under a deadline and a
//! cancel switch shared by all of them.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use futures::StreamExt;
use futures::stream::{self, BoxStream};
use tokio::sync::watch;
use tokio::time::Instant;

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
}

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
    /// passes its deadline or is cancelled.
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
        // One timer for the whole partition, not one per batch.
        let deadline = Box::pin(tokio::time::sleep_until(control.deadline));
        let running = Running {
            control,
            ended: false,
        };
        let state = Some((batches, cancelled, deadline, running));
        Ok(stream::unfold(state, |state| async move {
            let (mut batches, mut cancelled, mut deadline, mut running) = state?;
            let next = tokio::select! {
                biased;
                // The sender lives in `control`, which this stream holds.
                _ = cancelled.wait_for(|c| *c) => Err(SqlError::Cancelled),
                () = &mut deadline => Err(SqlError::Timeout(running.control.timeout)),
                next = batches.next() => Ok(next),
            };
            let failed = match next {
                Ok(Some(Ok(batch))) => {
                    return Some((Ok(batch), Some((batches, cancelled, deadline, running))));
                }
                Ok(None) => {
                    running.ended = true;
                    return None;
                }
                Ok(Some(Err(e))) => SqlError::from(e),
                Err(e) => e,
            };
            running.ended = true;
            running.control.ended(crate::metrics::outcome_of(&failed));
            Some((Err(failed), None))
        })
        .boxed())
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

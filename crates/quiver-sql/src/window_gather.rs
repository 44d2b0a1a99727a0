//! Window partitions gathered by hashing their keys, not by sorting the
//! rows (issue 68).
//!
//! A window function without an `ORDER BY` of its own (`avg(x) OVER
//! (PARTITION BY a, b, c)`) needs only each partition's rows together, and
//! DataFusion gets them together with a `SortExec` on the partition keys:
//! every row's keys converted and compared, and sorted runs merged. The
//! window then reads its partitions in the sort's order. [`GatherWindowPartitions`]
//! puts a [`PartitionGatherExec`] in the `SortExec`'s place: it reads its
//! input whole, as the sort does, gives each row the number of its
//! partition by hashing its keys (DataFusion's group values, as an
//! aggregation does), sorts the partitions' keys (one row each) in the sort's
//! order, and writes the rows out partition by partition in that order, a
//! counting sort. The window sees what the sort gave it: rows ordered by the
//! partition keys (within a partition, in the order they came, which the
//! window does not look at).
//!
//! Should its input outgrow the query's memory, the rows it holds and the
//! rest of its input go to the `SortExec` it replaced, which spills.

use std::fmt;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::compute::{SortColumn, interleave_record_batch, lexsort_to_indices};
use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::utils::memory::get_record_batch_memory_size;
use datafusion::common::{Result, internal_err};
use datafusion::config::ConfigOptions;
use datafusion::execution::TaskContext;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_expr::{LexOrdering, PhysicalExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::group_values::new_group_values;
use datafusion::physical_plan::aggregates::order::GroupOrdering;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
    SendableRecordBatchStream, replace_children_if_necessary,
};
use futures::{StreamExt, TryStreamExt};

/// The physical optimizer rule: the sort under a window whose functions
/// have no `ORDER BY` replaced by a [`PartitionGatherExec`].
#[derive(Debug, Default)]
pub(crate) struct GatherWindowPartitions;

impl GatherWindowPartitions {
    /// The gather in place of `sort`, if `sort` orders a window's input by
    /// exactly its partition keys and the window's functions order nothing.
    fn replacement(window: &Arc<dyn ExecutionPlan>) -> Option<PartitionGatherExec> {
        let (exprs, input) = if let Some(w) = window.downcast_ref::<WindowAggExec>() {
            (w.window_expr(), w.input())
        } else if let Some(w) = window.downcast_ref::<BoundedWindowAggExec>() {
            (w.window_expr(), w.input())
        } else {
            return None;
        };
        let sort = input.downcast_ref::<SortExec>()?;
        let first = exprs.first()?;
        let keys = first.partition_by();
        let ordered = exprs.iter().any(|e| !e.order_by().is_empty());
        let same_keys = exprs.iter().all(|e| e.partition_by() == keys);
        let whole = sort.preserve_partitioning()
            || sort.input().output_partitioning().partition_count() == 1;
        if keys.is_empty() || ordered || !same_keys || !whole || sort.fetch().is_some() {
            return None;
        }
        // Each sort key a partition key, each partition key sorted on.
        let ordering = sort.expr();
        let covers = ordering.len() == keys.len()
            && ordering.iter().all(|s| keys.iter().any(|k| k == &s.expr))
            && keys.iter().all(|k| ordering.iter().any(|s| &s.expr == k));
        covers.then(|| {
            PartitionGatherExec::new(
                ordering.clone(),
                Arc::clone(sort.input()),
                sort.preserve_partitioning(),
            )
        })
    }
}

impl PhysicalOptimizerRule for GatherWindowPartitions {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(gather) = Self::replacement(&node) else {
                return Ok(Transformed::no(node));
            };
            let rebuilt = replace_children_if_necessary(node, vec![Arc::new(gather)])?;
            Ok(Transformed::yes(rebuilt))
        })
        .data()
    }

    fn name(&self) -> &str {
        "quiver_gather_window_partitions"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The rows of each input partition, out in the order of `ordering`'s
/// keys, gathered by hashing them (module docs). Its properties are those
/// of the `SortExec` it stands for.
#[derive(Debug)]
pub(crate) struct PartitionGatherExec {
    ordering: LexOrdering,
    input: Arc<dyn ExecutionPlan>,
    preserve_partitioning: bool,
    /// What the rows would be sorted by if they outgrow the memory.
    sort: Arc<SortExec>,
    metrics: ExecutionPlanMetricsSet,
}

impl PartitionGatherExec {
    fn new(ordering: LexOrdering, input: Arc<dyn ExecutionPlan>, preserve: bool) -> Self {
        let sort = SortExec::new(ordering.clone(), Arc::clone(&input))
            .with_preserve_partitioning(preserve);
        Self {
            ordering,
            input,
            preserve_partitioning: preserve,
            sort: Arc::new(sort),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for PartitionGatherExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => {
                write!(f, "PartitionGatherExec: expr=[{}]", self.ordering)
            }
            DisplayFormatType::TreeRender => write!(f, "{}", self.ordering),
        }
    }
}

impl ExecutionPlan for PartitionGatherExec {
    fn name(&self) -> &'static str {
        "PartitionGatherExec"
    }

    /// The sort's: the same partitions, ordered by the same keys.
    fn properties(&self) -> &Arc<PlanProperties> {
        self.sort.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        let mut recursion = TreeNodeRecursion::Continue;
        for key in self.ordering.iter() {
            recursion = f(&key.expr)?;
            if recursion == TreeNodeRecursion::Stop {
                break;
            }
        }
        Ok(recursion)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match <[_; 1]>::try_from(children) {
            Ok([input]) => Ok(Arc::new(Self::new(
                self.ordering.clone(),
                input,
                self.preserve_partitioning,
            ))),
            Err(children) => {
                internal_err!("PartitionGatherExec has one input, got {}", children.len())
            }
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, Arc::clone(&context))?;
        let reservation = MemoryConsumer::new(format!("PartitionGatherExec[{partition}]"))
            .register(context.memory_pool());
        let rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let sorted = MetricBuilder::new(&self.metrics).global_counter("sorted_instead");
        let gather = Gather {
            ordering: self.ordering.clone(),
            schema: self.input.schema(),
            batch_size: context.session_config().batch_size(),
            context,
            reservation,
        };
        let schema = self.schema();
        let stream = futures::stream::once(async move {
            let out = gather.run(input).await?;
            if matches!(out, Gathered::Sorted(_)) {
                sorted.add(1);
            }
            Ok::<_, datafusion::error::DataFusionError>(out.into_stream())
        })
        .try_flatten()
        .inspect_ok(move |batch| rows.add(batch.num_rows()));
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// One partition's gather.
struct Gather {
    ordering: LexOrdering,
    schema: SchemaRef,
    batch_size: usize,
    context: Arc<TaskContext>,
    reservation: MemoryReservation,
}

/// What a gather gives: its rows in order, or a sort's stream of them.
enum Gathered {
    Rows(futures::stream::BoxStream<'static, Result<RecordBatch>>),
    Sorted(SendableRecordBatchStream),
}

impl Gathered {
    fn into_stream(self) -> futures::stream::BoxStream<'static, Result<RecordBatch>> {
        match self {
            Self::Rows(rows) => rows,
            Self::Sorted(sorted) => sorted.boxed(),
        }
    }
}

impl Gather {
    async fn run(self, mut input: SendableRecordBatchStream) -> Result<Gathered> {
        let fields: Vec<Field> = self
            .ordering
            .iter()
            .enumerate()
            .map(|(i, key)| {
                Ok(Field::new(
                    format!("key{i}"),
                    key.expr.data_type(&self.schema)?,
                    key.expr.nullable(&self.schema)?,
                ))
            })
            .collect::<Result<_>>()?;
        let mut groups = new_group_values(Arc::new(Schema::new(fields)), &GroupOrdering::None)?;
        let mut batches: Vec<RecordBatch> = Vec::new();
        let mut ids: Vec<Vec<u32>> = Vec::new();
        let mut interned = Vec::new();
        let mut held = 0usize;
        while let Some(batch) = input.next().await {
            let batch = batch?;
            if batch.num_rows() == 0 {
                continue;
            }
            let size = get_record_batch_memory_size(&batch) + 4 * batch.num_rows();
            if self.reservation.try_grow(size).is_err() {
                // Too many rows to hold: the sort takes them, and spills.
                batches.push(batch);
                return self.sort(batches, input).map(Gathered::Sorted);
            }
            let keys = self
                .ordering
                .iter()
                .map(|key| key.expr.evaluate(&batch)?.into_array(batch.num_rows()))
                .collect::<Result<Vec<ArrayRef>>>()?;
            groups.intern(&keys, &mut interned)?;
            ids.push(interned.iter().map(|&g| g as u32).collect());
            batches.push(batch);
            let now = groups.size();
            if now > held {
                if self.reservation.try_grow(now - held).is_err() {
                    return self.sort(batches, input).map(Gathered::Sorted);
                }
                held = now;
            }
        }
        let count = groups.len();
        if count == 0 {
            return Ok(Gathered::Rows(futures::stream::empty().boxed()));
        }
        // The partitions' keys, one row each, sorted as the sort would.
        let keys = groups.emit(EmitTo::All)?;
        let columns: Vec<SortColumn> = keys
            .into_iter()
            .zip(self.ordering.iter())
            .map(|(values, key)| SortColumn {
                values,
                options: Some(key.options),
            })
            .collect();
        let order = lexsort_to_indices(&columns, None)?;
        let mut rank = vec![0u32; count];
        for (place, &group) in order.values().iter().enumerate() {
            rank[group as usize] = place as u32;
        }
        // A counting sort of the rows by their partition's place.
        let mut starts = vec![0usize; count + 1];
        for batch_ids in &ids {
            for &group in batch_ids {
                starts[rank[group as usize] as usize + 1] += 1;
            }
        }
        for place in 1..=count {
            starts[place] += starts[place - 1];
        }
        let total = starts[count];
        // Where each row is, in its output order: held beside the rows.
        if self
            .reservation
            .try_grow(total * std::mem::size_of::<(usize, usize)>())
            .is_err()
        {
            return self.sort(batches, input).map(Gathered::Sorted);
        }
        let mut at = vec![(0usize, 0usize); total];
        for (b, batch_ids) in ids.iter().enumerate() {
            for (row, &group) in batch_ids.iter().enumerate() {
                let place = rank[group as usize] as usize;
                at[starts[place]] = (b, row);
                starts[place] += 1;
            }
        }
        drop(ids);
        let batches = Arc::new(batches);
        let at = Arc::new(at);
        let size = self.batch_size.max(1);
        let reservation = self.reservation;
        let out = futures::stream::iter((0..total).step_by(size)).map(move |start| {
            let _held = &reservation;
            let refs: Vec<&RecordBatch> = batches.iter().collect();
            let end = (start + size).min(total);
            Ok(interleave_record_batch(&refs, &at[start..end])?)
        });
        Ok(Gathered::Rows(out.boxed()))
    }

    /// The rows held and the rest of `input` sorted by the sort this gather
    /// stands for.
    fn sort(
        self,
        held: Vec<RecordBatch>,
        input: SendableRecordBatchStream,
    ) -> Result<SendableRecordBatchStream> {
        drop(self.reservation);
        let rest = futures::stream::iter(held.into_iter().map(Ok)).chain(input);
        let rows = crate::once_plan::once(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            rest,
        )))?;
        SortExec::new(self.ordering, rows).execute(0, self.context)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch, StringViewArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::util::pretty::pretty_format_batches;
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use datafusion::physical_plan::collect;
    use datafusion::prelude::SessionConfig;

    use super::*;
    use crate::rule_testing::{rows, session, session_in};

    /// 60,000 rows: a of 4 values (a null among them), b of 5, c of
    /// 10,000, and x.
    fn data() -> RecordBatch {
        let n = 60_000i64;
        let a: Vec<Option<String>> = (0..n)
            .map(|i| (i % 4 != 2).then(|| format!("a{}", i % 4)))
            .collect();
        let b: Vec<String> = (0..n).map(|i| format!("b{}", (i * 7) % 5)).collect();
        let c: Vec<i64> = (0..n).map(|i| (i * 13) % 10_000).collect();
        let x: Vec<i64> = (0..n).map(|i| (i * 7919) % 1000).collect();
        let schema = Schema::new(vec![
            Field::new("a", DataType::Utf8View, true),
            Field::new("b", DataType::Utf8View, false),
            Field::new("c", DataType::Int64, false),
            Field::new("x", DataType::Int64, false),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(StringViewArray::from(a)),
                Arc::new(StringViewArray::from_iter_values(b)),
                Arc::new(Int64Array::from(c)),
                Arc::new(Int64Array::from(x)),
            ],
        )
        .unwrap()
    }

    fn gathers(plan: &Arc<dyn ExecutionPlan>) -> usize {
        let mut found = 0;
        plan.apply(|node| {
            if node.downcast_ref::<PartitionGatherExec>().is_some() {
                found += 1;
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        found
    }

    #[tokio::test]
    async fn a_window_over_whole_partitions_gets_the_same_rows_without_a_sort() {
        let data = data();
        let rule: Arc<dyn PhysicalOptimizerRule + Send + Sync> = Arc::new(GatherWindowPartitions);
        for sql in [
            "SELECT a, b, count(*), sum(x), min(m) FROM (SELECT a, b, x, \
             avg(x) OVER (PARTITION BY a, b) AS m FROM t) WHERE x > 2 * m \
             GROUP BY a, b ORDER BY a NULLS FIRST, b",
            "SELECT c, x, sum(x) OVER (PARTITION BY c) AS s, count(*) OVER (PARTITION BY c) \
             FROM t ORDER BY c, x, s LIMIT 200",
            // Sorted DESC NULLS FIRST by one key, the window reads it in order.
            "SELECT a, x, max(x) OVER (PARTITION BY a) FROM t \
             ORDER BY a DESC NULLS FIRST, x LIMIT 50",
        ] {
            let (without, none) = rows(&session(&data, None), sql, gathers).await;
            let (with, found) = rows(&session(&data, Some(Arc::clone(&rule))), sql, gathers).await;
            assert_eq!(none, 0, "{sql}");
            assert_eq!(found, 1, "{sql}");
            assert_eq!(with, without, "{sql}");
        }
    }

    #[tokio::test]
    async fn rows_beyond_the_memory_limit_are_sorted_instead() {
        // 3 MiB for a query over 15 batches that count about 1 MiB each
        // (slices of one batch, each counted with its strings' buffers
        // whole): the gather gives up and the sort it stands for spills.
        let data = data();
        let rule: Arc<dyn PhysicalOptimizerRule + Send + Sync> = Arc::new(GatherWindowPartitions);
        let runtime = || {
            RuntimeEnvBuilder::new()
                .with_memory_limit(3 << 20, 1.0)
                .build_arc()
                .unwrap()
        };
        // The sort's merge reserves 10 MiB by default: a little here.
        let one = || {
            SessionConfig::new()
                .with_target_partitions(1)
                .with_sort_spill_reservation_bytes(64 * 1024)
        };
        let sql = "SELECT c, count(*), sum(s) FROM (SELECT c, x, sum(x) OVER (PARTITION BY c) \
                   AS s FROM t) WHERE x > 990 GROUP BY c ORDER BY c LIMIT 100";
        let (without, _) = rows(&session_in(one(), runtime(), &data, None), sql, gathers).await;
        let context = session_in(one(), runtime(), &data, Some(rule));
        let plan = context
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        assert_eq!(gathers(&plan), 1);
        let batches = collect(Arc::clone(&plan), context.task_ctx())
            .await
            .unwrap();
        assert_eq!(
            pretty_format_batches(&batches).unwrap().to_string(),
            without
        );
        let mut sorted = 0;
        plan.apply(|node| {
            if let Some(gather) = node.downcast_ref::<PartitionGatherExec>() {
                let metrics = gather.metrics().unwrap();
                sorted = metrics
                    .sum_by_name("sorted_instead")
                    .map_or(0, |m| m.as_usize());
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        assert_eq!(sorted, 1);
    }

    #[tokio::test]
    async fn windows_that_order_their_rows_keep_the_sort() {
        let data = data();
        let rule: Arc<dyn PhysicalOptimizerRule + Send + Sync> = Arc::new(GatherWindowPartitions);
        for sql in [
            "SELECT a, x, sum(x) OVER (PARTITION BY a ORDER BY x, c) FROM t",
            "SELECT a, row_number() OVER (PARTITION BY a ORDER BY c) FROM t",
            "SELECT x, sum(x) OVER () FROM t",
        ] {
            let (_, found) = rows(&session(&data, Some(Arc::clone(&rule))), sql, gathers).await;
            assert_eq!(found, 0, "{sql}");
        }
    }
}

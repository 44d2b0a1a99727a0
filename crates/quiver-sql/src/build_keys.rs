//! A hash join's build-side keys, collected as the join reads them, as
//! bitmaps the probe side's scans test their rows against.
//!
//! A hash join pushes a dynamic filter to the scans of its probe side: the
//! build keys' bounds, and their membership as an `IN` list or a lookup in
//! the join's hash table. The scans apply it to every row they read
//! (`pushed.rs`), which hashes each probe key and probes the table: about
//! as much work per row as decoding it from Parquet (docs/performance.md,
//! "Build keys as a bitmap"). The build keys of an integer column fit a
//! bitmap over their range, and a probe key is tested with one subtraction
//! and one bit.
//!
//! [`BuildKeySets`], a physical optimizer rule run after the rules that put
//! the join's filter in its scans, puts a [`BuildKeysExec`] over the build
//! side of each such join: it hands the join its batches unchanged and
//! notes the keys of its integer key columns in a [`BuildKeys`]. The scans
//! holding the join's filter get that [`BuildKeys`], and once every build
//! partition has been read they test their rows against its bitmaps instead
//! of the pushed filter: a row passes if its key in each such column is
//! among the build side's in that column. That holds for every row the join
//! can match (exactly those, for a join on one integer column), as the
//! pushed filter does.

use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, new_empty_array};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::{
    DataType, Date32Type, Date64Type, Int8Type, Int16Type, Int32Type, Int64Type, SchemaRef,
    UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeIterator, TreeNodeRecursion};
use datafusion::common::{NullEquality, Statistics, internal_err};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::JoinType;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::metrics::{
    ExecutionPlanMetricsSet, Gauge, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
    replace_children_if_necessary,
};
use futures::Stream;

use crate::file_scan::DynamicFilterExec;
use crate::scan::StoredScanExec;

/// The widest range of keys a bitmap covers: 2^26 bits, 8 MiB. A build
/// side whose keys span more keeps the join's own filter.
const MAX_BITMAP_BITS: u64 = 1 << 26;

/// The keys of one join's build side, noted as its partitions are read.
pub(crate) struct BuildKeys {
    /// How many partitions the build side has: the keys are complete once
    /// each has been read to its end.
    partitions: usize,
    state: Mutex<Collecting>,
    /// Set once every partition has been read to its end and one key
    /// column fits a bitmap: a check without the lock.
    complete: AtomicBool,
    /// The [`BuildKeysExec`]'s metrics: the bitmaps' size, once made.
    metrics: ExecutionPlanMetricsSet,
    bitmap_bytes: Gauge,
}

struct Collecting {
    /// Which partitions have been read to their end.
    finished: Vec<bool>,
    /// Each key column's keys (one for a join on one column).
    columns: Vec<ColumnKeys>,
}

/// One key column's keys.
#[derive(Default)]
struct ColumnKeys {
    /// The keys seen, as 64-bit integers, until the bitmap is made.
    keys: Vec<Int64Array>,
    bounds: Option<(i64, i64)>,
    /// The keys cannot be a bitmap: of a type it does not take, spread
    /// over more than [`MAX_BITMAP_BITS`], or given up.
    unusable: bool,
    /// The keys as a bitmap, made when first asked for once complete.
    bitmap: Option<Arc<KeyBitmap>>,
}

impl ColumnKeys {
    fn give_up(&mut self) {
        *self = Self {
            unusable: true,
            ..Self::default()
        };
    }

    fn add(&mut self, keys: &ArrayRef) {
        if self.unusable {
            return;
        }
        let Some(keys) = as_i64(keys) else {
            return self.give_up();
        };
        let (Some(low), Some(high)) = (arrow::compute::min(&keys), arrow::compute::max(&keys))
        else {
            // Only nulls, or no row: nothing a probe key can match.
            return;
        };
        let (low, high) = match self.bounds {
            Some((l, h)) => (l.min(low), h.max(high)),
            None => (low, high),
        };
        if span(low, high) > MAX_BITMAP_BITS {
            return self.give_up();
        }
        self.bounds = Some((low, high));
        self.keys.push(keys);
    }

    /// The bitmap, made from the keys the first time.
    fn bitmap(&mut self, bytes: &Gauge) -> Option<Arc<KeyBitmap>> {
        if self.unusable {
            return None;
        }
        let bitmap = self.bitmap.get_or_insert_with(|| {
            let bitmap = KeyBitmap::new(&std::mem::take(&mut self.keys), self.bounds);
            bytes.add(bitmap.words.len() * 8);
            Arc::new(bitmap)
        });
        Some(Arc::clone(bitmap))
    }
}

impl fmt::Debug for BuildKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BuildKeys")
            .field("partitions", &self.partitions)
            .field("complete", &self.complete.load(Ordering::Acquire))
            .finish_non_exhaustive()
    }
}

impl BuildKeys {
    /// The keys of a build side of `partitions` partitions, joined on
    /// columns of `types`: those [`as_i64`] does not take are not noted.
    pub(crate) fn new(partitions: usize, types: &[DataType]) -> Self {
        let metrics = ExecutionPlanMetricsSet::new();
        let bitmap_bytes = MetricBuilder::new(&metrics).global_gauge("key_bitmap_bytes");
        let columns = types
            .iter()
            .map(|t| ColumnKeys {
                unusable: !takes(t),
                ..ColumnKeys::default()
            })
            .collect();
        Self {
            partitions,
            state: Mutex::new(Collecting {
                finished: vec![false; partitions],
                columns,
            }),
            complete: AtomicBool::new(false),
            metrics,
            bitmap_bytes,
        }
    }

    fn collecting(&self) -> std::sync::MutexGuard<'_, Collecting> {
        // A panic elsewhere while the lock was held leaves the keys as they
        // were: still a subset, never used unless complete.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Gives up on the keys: they are never complete from now on.
    fn give_up(&self) {
        let mut state = self.collecting();
        state.columns.iter_mut().for_each(ColumnKeys::give_up);
        self.complete.store(false, Ordering::Release);
    }

    /// Whether a key column is still noted: a bitmap can be made of it.
    fn noted(&self, column: usize) -> bool {
        self.collecting()
            .columns
            .get(column)
            .is_some_and(|c| !c.unusable)
    }

    /// Notes the keys of one build-side batch, a column's for each key
    /// column.
    fn add(&self, keys: &[Option<ArrayRef>]) {
        let mut state = self.collecting();
        for (column, keys) in state.columns.iter_mut().zip(keys) {
            match keys {
                Some(keys) => column.add(keys),
                None => column.give_up(),
            }
        }
    }

    /// Notes that partition `partition` has been read to its end.
    fn finish(&self, partition: usize) {
        let mut state = self.collecting();
        if let Some(done) = state.finished.get_mut(partition) {
            *done = true;
        }
        if state.finished.iter().all(|&done| done) && state.columns.iter().any(|c| !c.unusable) {
            self.complete.store(true, Ordering::Release);
        }
    }

    /// Whether every build partition has been read and a key column fits a
    /// bitmap: [`BuildKeys::bitmaps`] has one.
    pub(crate) fn complete(&self) -> bool {
        self.complete.load(Ordering::Acquire)
    }

    /// Once the build keys are all known, a bitmap of each key column's
    /// that fits one, with the column's place among the join's keys.
    pub(crate) fn bitmaps(&self) -> Option<Vec<(usize, Arc<KeyBitmap>)>> {
        if !self.complete() {
            return None;
        }
        let mut state = self.collecting();
        let bitmaps: Vec<_> = state
            .columns
            .iter_mut()
            .enumerate()
            .filter_map(|(i, c)| c.bitmap(&self.bitmap_bytes).map(|b| (i, b)))
            .collect();
        (!bitmaps.is_empty()).then_some(bitmaps)
    }
}

/// How many values `low..=high` holds, saturated at `u64::MAX`.
fn span(low: i64, high: i64) -> u64 {
    u64::try_from(i128::from(high) - i128::from(low) + 1).unwrap_or(u64::MAX)
}

/// `array`'s values as 64-bit integers, for the integer and date types: a
/// `u64` past `i64::MAX` wraps, which keeps distinct values distinct.
/// `None` for other types.
fn as_i64(array: &ArrayRef) -> Option<Int64Array> {
    macro_rules! widen {
        ($t:ty) => {
            array
                .as_primitive::<$t>()
                .unary::<_, Int64Type>(|v| v as i64)
        };
    }
    Some(match array.data_type() {
        DataType::Int64 => array.as_primitive::<Int64Type>().clone(),
        DataType::Int32 => widen!(Int32Type),
        DataType::Int16 => widen!(Int16Type),
        DataType::Int8 => widen!(Int8Type),
        DataType::UInt64 => widen!(UInt64Type),
        DataType::UInt32 => widen!(UInt32Type),
        DataType::UInt16 => widen!(UInt16Type),
        DataType::UInt8 => widen!(UInt8Type),
        DataType::Date32 => widen!(Date32Type),
        DataType::Date64 => widen!(Date64Type),
        _ => return None,
    })
}

/// Whether [`as_i64`] takes values of `data_type`.
fn takes(data_type: &DataType) -> bool {
    as_i64(&new_empty_array(data_type)).is_some()
}

/// A set of 64-bit keys, one bit per value between the least and the
/// greatest.
#[derive(Debug)]
pub(crate) struct KeyBitmap {
    low: i64,
    /// How many values the bitmap spans: `high - low + 1`, or 0 if empty.
    span: u64,
    words: Vec<u64>,
}

impl KeyBitmap {
    /// The set of `keys`' non-null values, which lie in `bounds`.
    fn new(keys: &[Int64Array], bounds: Option<(i64, i64)>) -> Self {
        let Some((low, high)) = bounds else {
            return Self {
                low: 0,
                span: 0,
                words: Vec::new(),
            };
        };
        let span = span(low, high);
        let mut words = vec![0_u64; span.div_ceil(64) as usize];
        let mut set = |key: i64| {
            let bit = key.wrapping_sub(low) as u64;
            words[(bit >> 6) as usize] |= 1 << (bit & 63);
        };
        for array in keys {
            match array.nulls() {
                None => array.values().iter().for_each(|&k| set(k)),
                Some(_) => array.iter().flatten().for_each(&mut set),
            }
        }
        Self { low, span, words }
    }

    fn contains(&self, key: i64) -> bool {
        let bit = key.wrapping_sub(self.low) as u64;
        bit < self.span && (self.words[(bit >> 6) as usize] >> (bit & 63)) & 1 == 1
    }

    /// Which of `keys` are in the set (a null is not).
    pub(crate) fn mask(&self, keys: &ArrayRef) -> Result<BooleanArray> {
        let Some(keys) = as_i64(keys) else {
            return internal_err!("build keys of type {} cannot be tested", keys.data_type());
        };
        let values = keys.values();
        let found = BooleanBuffer::collect_bool(values.len(), |i| self.contains(values[i]));
        Ok(match keys.nulls() {
            Some(valid) => BooleanArray::new(&found & valid.inner(), None),
            None => BooleanArray::new(found, None),
        })
    }
}

/// Its input's batches, unchanged, their keys noted in a [`BuildKeys`].
#[derive(Debug)]
pub(crate) struct BuildKeysExec {
    input: Arc<dyn ExecutionPlan>,
    /// The join's build-side keys, over the input's columns.
    keys_on: Vec<Arc<dyn PhysicalExpr>>,
    /// Shared with the scans that test their rows against the keys.
    keys: Arc<BuildKeys>,
}

impl DisplayAs for BuildKeysExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => {
                write!(f, "BuildKeysExec: keys=[{}]", shown(&self.keys_on))
            }
            DisplayFormatType::TreeRender => write!(f, "keys=[{}]", shown(&self.keys_on)),
        }
    }
}

impl ExecutionPlan for BuildKeysExec {
    fn name(&self) -> &'static str {
        "BuildKeysExec"
    }

    /// The input's: its batches pass unchanged.
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
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        self.keys_on.iter().apply_until_stop(f)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match <[_; 1]>::try_from(children) {
            // The same build side, planned anew: the scans that hold
            // these keys are to get its keys.
            Ok([input]) => Ok(Arc::new(Self {
                input,
                keys_on: self.keys_on.clone(),
                keys: Arc::clone(&self.keys),
            })),
            Err(children) => {
                internal_err!("BuildKeysExec has one input, got {}", children.len())
            }
        }
    }

    /// A plan run again (a recursive query's next round) may read other
    /// build rows, and the scans would test against the first round's:
    /// the keys are given up, and the scans keep the join's own filter.
    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        self.keys.give_up();
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        // Only the columns still noted are evaluated.
        let keys_on = (self.keys_on.iter().enumerate())
            .map(|(i, on)| self.keys.noted(i).then(|| Arc::clone(on)))
            .collect();
        Ok(Box::pin(NotingKeys {
            input,
            keys_on,
            keys: Arc::clone(&self.keys),
            partition,
        }))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.keys.metrics.clone_inner())
    }

    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        vec![ChildStats::At(partition)]
    }

    /// The input's: its batches pass unchanged.
    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        match input_stats {
            [input] => Ok(Arc::clone(input)),
            _ => internal_err!("BuildKeysExec has one input"),
        }
    }
}

/// One build partition's batches, their keys noted as they pass.
struct NotingKeys {
    input: SendableRecordBatchStream,
    /// The key columns noted (`None` for the others).
    keys_on: Vec<Option<Arc<dyn PhysicalExpr>>>,
    keys: Arc<BuildKeys>,
    partition: usize,
}

impl Stream for NotingKeys {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = self.input.as_mut().poll_next(cx);
        match &next {
            Poll::Ready(Some(Ok(batch))) => {
                // A key the join cannot evaluate is its error to report;
                // that column's keys are given up.
                let keys: Vec<Option<ArrayRef>> = (self.keys_on.iter())
                    .map(|on| {
                        let value = on.as_ref()?.evaluate(batch).ok()?;
                        value.into_array(batch.num_rows()).ok()
                    })
                    .collect();
                self.keys.add(&keys);
            }
            Poll::Ready(None) => self.keys.finish(self.partition),
            Poll::Ready(Some(Err(_))) | Poll::Pending => {}
        }
        next
    }
}

impl RecordBatchStream for NotingKeys {
    fn schema(&self) -> SchemaRef {
        self.input.schema()
    }
}

/// The build keys of the joins whose dynamic filters a scan holds, by the
/// filters' expression ids.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeySets(Vec<(u64, Arc<BuildKeys>)>);

impl KeySets {
    /// The build keys of the join that produced `filter`, if known.
    pub(crate) fn of(&self, filter: &Arc<dyn PhysicalExpr>) -> Option<Arc<BuildKeys>> {
        self.by_id(filter.expression_id()?).cloned()
    }

    fn by_id(&self, id: u64) -> Option<&Arc<BuildKeys>> {
        self.0
            .iter()
            .find(|(known, _)| *known == id)
            .map(|(_, keys)| keys)
    }

    fn with(&self, id: u64, keys: &Arc<BuildKeys>) -> Self {
        let mut sets = self.0.clone();
        sets.push((id, Arc::clone(keys)));
        Self(sets)
    }
}

/// A scan that applies pushed filters, and can be given the build keys of
/// the join that produced one of them.
pub(crate) trait KeyedScan {
    fn filters(&self) -> &[Arc<dyn PhysicalExpr>];

    fn key_sets(&self) -> &KeySets;

    /// The scan, its key sets `key_sets`.
    fn with_key_sets(&self, key_sets: KeySets) -> Arc<dyn ExecutionPlan>;
}

/// The scan `node` as a [`KeyedScan`], if it is one.
fn keyed_scan(node: &Arc<dyn ExecutionPlan>) -> Option<&dyn KeyedScan> {
    if let Some(scan) = node.downcast_ref::<DynamicFilterExec>() {
        return Some(scan);
    }
    node.downcast_ref::<StoredScanExec>()
        .map(|scan| scan as &dyn KeyedScan)
}

/// The physical optimizer rule (module docs).
#[derive(Debug, Default)]
pub(crate) struct BuildKeySets;

impl PhysicalOptimizerRule for BuildKeySets {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            let Some((id, types)) = keyed_filter(join)? else {
                return Ok(Transformed::no(node));
            };
            if join.left().is::<BuildKeysExec>() {
                // The rule ran on this plan before.
                return Ok(Transformed::no(node));
            }
            let build = join.left();
            let keys = Arc::new(BuildKeys::new(
                build.output_partitioning().partition_count(),
                &types,
            ));
            let probe = Arc::clone(join.right()).transform_down(|child| {
                let Some(scan) = keyed_scan(&child) else {
                    return Ok(Transformed::no(child));
                };
                let holds = scan.filters().iter().any(|f| f.expression_id() == Some(id));
                if !holds || scan.key_sets().by_id(id).is_some() {
                    return Ok(Transformed::no(child));
                }
                Ok(Transformed::yes(
                    scan.with_key_sets(scan.key_sets().with(id, &keys)),
                ))
            })?;
            if !probe.transformed {
                // No scan below applies the join's filter.
                return Ok(Transformed::no(node));
            }
            let build: Arc<dyn ExecutionPlan> = Arc::new(BuildKeysExec {
                input: Arc::clone(build),
                keys_on: join.on().iter().map(|(on, _)| Arc::clone(on)).collect(),
                keys,
            });
            Ok(Transformed::yes(replace_children_if_necessary(
                Arc::clone(&node),
                vec![build, probe.data],
            )?))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "quiver_build_key_sets"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The expression id of `join`'s dynamic filter and the types of its
/// build-side keys, when a bitmap of one of them can stand for the filter:
/// a key column of an integer or date type (a probe row whose key in that
/// column is not among the build side's cannot match), `NULL` matching
/// nothing, and a join type whose answer needs no probe row without a
/// match. An anti or mark join of the build side's rows (`NOT EXISTS`, a
/// subquery in a disjunction) is one: a probe row matches none of them or
/// is not needed. A null-aware anti join (`NOT IN`) is not: a probe row
/// whose key is null empties its answer.
fn keyed_filter(join: &HashJoinExec) -> Result<Option<(u64, Vec<DataType>)>> {
    if join.null_equality() != NullEquality::NullEqualsNothing
        || join.null_aware
        || !matches!(
            join.join_type(),
            JoinType::Inner
                | JoinType::Left
                | JoinType::LeftSemi
                | JoinType::RightSemi
                | JoinType::LeftAnti
                | JoinType::LeftMark
        )
    {
        return Ok(None);
    }
    let schema = join.left().schema();
    let types = (join.on().iter())
        .map(|(on, _)| on.data_type(&schema))
        .collect::<Result<Vec<_>>>()?;
    if !types.iter().any(takes) {
        return Ok(None);
    }
    let id = join
        .dynamic_expressions_produced()
        .iter()
        .find_map(|e| e.expression_id());
    Ok(id.map(|id| (id, types)))
}

/// `exprs`, shown as a list.
fn shown(exprs: &[Arc<dyn PhysicalExpr>]) -> String {
    let shown: Vec<String> = exprs.iter().map(|e| e.to_string()).collect();
    shown.join(", ")
}

#[cfg(test)]
mod tests {
    use arrow::array::{StringArray, UInt64Array};
    use datafusion::execution::SessionStateBuilder;
    use datafusion::physical_plan::collect;
    use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};

    use super::*;
    use crate::file_scan::FileDynamicFilters;

    fn int64(values: Vec<Option<i64>>) -> ArrayRef {
        Arc::new(Int64Array::from(values))
    }

    /// Keys of one column of `data_type` over `partitions` partitions.
    fn one_column(partitions: usize, data_type: DataType) -> BuildKeys {
        BuildKeys::new(partitions, &[data_type])
    }

    fn add(keys: &BuildKeys, array: ArrayRef) {
        keys.add(&[Some(array)]);
    }

    /// The one key column's bitmap, once complete.
    fn bitmap_of(keys: &BuildKeys) -> Option<Arc<KeyBitmap>> {
        let mut bitmaps = keys.bitmaps()?;
        assert_eq!(bitmaps.len(), 1);
        bitmaps.pop().map(|(_, b)| b)
    }

    fn kept(bitmap: &KeyBitmap, probe: ArrayRef) -> Vec<bool> {
        let mask = bitmap.mask(&probe).expect("mask");
        assert_eq!(mask.null_count(), 0);
        mask.iter().map(|m| m.expect("not null")).collect()
    }

    #[test]
    fn a_bitmap_holds_exactly_the_non_null_build_keys() {
        let keys = one_column(1, DataType::Int64);
        add(&keys, int64(vec![Some(-3), None, Some(70)]));
        add(&keys, int64(vec![Some(5), Some(5)]));
        keys.finish(0);
        let bitmap = bitmap_of(&keys).expect("complete");
        let probe = int64(vec![
            Some(-4),
            Some(-3),
            Some(0),
            Some(5),
            Some(70),
            Some(71),
            None,
        ]);
        assert_eq!(
            kept(&bitmap, probe),
            [false, true, false, true, true, false, false]
        );
        // Keys of another integer type are tested as the same values.
        let narrow: ArrayRef = Arc::new(arrow::array::Int32Array::from(vec![5, 6]));
        assert_eq!(kept(&bitmap, narrow), [true, false]);
    }

    #[test]
    fn unsigned_keys_past_the_signed_range_stay_apart() {
        let keys = one_column(1, DataType::UInt64);
        add(
            &keys,
            Arc::new(UInt64Array::from(vec![u64::MAX, u64::MAX - 2])) as ArrayRef,
        );
        keys.finish(0);
        let bitmap = bitmap_of(&keys).expect("complete");
        let probe: ArrayRef = Arc::new(UInt64Array::from(vec![u64::MAX, u64::MAX - 1, 1]));
        assert_eq!(kept(&bitmap, probe), [true, false, false]);
    }

    #[test]
    fn keys_are_known_once_every_partition_has_ended() {
        let keys = one_column(2, DataType::Int64);
        add(&keys, int64(vec![Some(1)]));
        keys.finish(0);
        // A partition run twice still counts once.
        keys.finish(0);
        assert!(!keys.complete() && bitmap_of(&keys).is_none());
        add(&keys, int64(vec![Some(9)]));
        keys.finish(1);
        let bitmap = bitmap_of(&keys).expect("complete");
        assert_eq!(
            kept(&bitmap, int64(vec![Some(1), Some(9), Some(2)])),
            [true, true, false]
        );
        // An empty build side: no probe key matches.
        let none = one_column(1, DataType::Int64);
        none.finish(0);
        assert_eq!(
            kept(&bitmap_of(&none).expect("complete"), int64(vec![Some(0)])),
            [false]
        );
    }

    #[test]
    fn keys_too_far_apart_of_another_type_or_run_again_are_given_up() {
        let wide = one_column(1, DataType::Int64);
        add(&wide, int64(vec![Some(0)]));
        add(&wide, int64(vec![Some(MAX_BITMAP_BITS as i64)]));
        wide.finish(0);
        assert!(!wide.complete() && bitmap_of(&wide).is_none());

        let strings = one_column(1, DataType::Int64);
        // A batch's keys of another type than planned are given up.
        add(&strings, Arc::new(StringArray::from(vec!["a"])) as ArrayRef);
        strings.finish(0);
        assert!(bitmap_of(&strings).is_none());

        let again = one_column(1, DataType::Int64);
        add(&again, int64(vec![Some(1)]));
        again.finish(0);
        assert!(bitmap_of(&again).is_some());
        again.give_up();
        assert!(!again.complete() && bitmap_of(&again).is_none());
    }

    /// Sums `name` over the plan's nodes called `node`.
    fn metric(plan: &Arc<dyn ExecutionPlan>, node: &str, name: &str) -> usize {
        let mut total = 0;
        plan.apply(|n| {
            if n.name() == node {
                let metrics = n.metrics().expect("metrics");
                total += match name {
                    "output_rows" => metrics.output_rows().expect("output rows"),
                    _ => metrics.sum_by_name(name).map_or(0, |v| v.as_usize()),
                };
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        total
    }

    /// The tag of id `id` in the probe side's file.
    fn tag(id: i64) -> String {
        format!("t{}", id.rem_euclid(3))
    }

    /// `SELECT count(*)` of a join `ON` `on` of a Parquet file of 100,000
    /// ids (and their tags) with one of `keys` (ids and tags), the join
    /// partitioned or not.
    async fn joined_count(
        keys: Vec<(i64, String)>,
        on: &str,
        partitioned: bool,
    ) -> (i64, Arc<dyn ExecutionPlan>) {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, rows: Vec<(i64, String)>| {
            let path = dir.path().join(format!("{name}.parquet"));
            let (ids, tags): (Vec<i64>, Vec<String>) = rows.into_iter().unzip();
            let batch = RecordBatch::try_from_iter([
                ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
                ("tag", Arc::new(StringArray::from(tags)) as ArrayRef),
            ])
            .unwrap();
            crate::rule_testing::write_parquet(&path, &batch, None);
            path
        };
        let ids = write("ids", (0..100_000).map(|id| (id, tag(id))).collect());
        let keys = write("keys", keys);
        let mut config = SessionConfig::new()
            .with_target_partitions(2)
            .with_batch_size(1024);
        if partitioned {
            let options = config.options_mut();
            options.optimizer.hash_join_single_partition_threshold = 0;
            options.optimizer.hash_join_single_partition_threshold_rows = 0;
        }
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .with_physical_optimizer_rule(Arc::new(FileDynamicFilters))
            .with_physical_optimizer_rule(Arc::new(BuildKeySets))
            .build();
        let context = SessionContext::new_with_state(state);
        for (name, path) in [("ids", ids), ("keys", keys)] {
            context
                .register_parquet(name, path.to_str().unwrap(), ParquetReadOptions::default())
                .await
                .unwrap();
        }
        let plan = context
            .sql(&format!("SELECT count(*) FROM ids JOIN keys ON {on}"))
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let batches = collect(Arc::clone(&plan), context.task_ctx())
            .await
            .unwrap();
        let count = batches[0].column(0).as_primitive::<Int64Type>().value(0);
        (count, plan)
    }

    /// `SELECT count(*)` of the ids among `keys`.
    async fn count_of_ids_among(
        keys: Vec<i64>,
        partitioned: bool,
    ) -> (i64, Arc<dyn ExecutionPlan>) {
        let keys = keys.into_iter().map(|id| (id, tag(id))).collect();
        joined_count(keys, "ids.id = keys.id", partitioned).await
    }

    #[tokio::test]
    async fn the_probe_scan_keeps_exactly_the_rows_of_build_keys() {
        // Keys spread over the ids' range, some outside it, one twice.
        let keys = vec![-5, 0, 17, 17, 4_096, 50_001, 99_999, 100_000, 250_000];
        let (count, plan) = count_of_ids_among(keys, false).await;
        assert_eq!(count, 6);
        assert_eq!(metric(&plan, "BuildKeysExec", "key_bitmap_bytes"), 31_256);
        // Every probe batch was tested against the keys, and only the
        // rows the join matches passed.
        assert!(metric(&plan, "DynamicFilterExec", "build_key_batches") > 0);
        assert_eq!(metric(&plan, "DynamicFilterExec", "output_rows"), 5);
        // Run again, the rule changes nothing.
        let again = BuildKeySets
            .optimize(Arc::clone(&plan), &ConfigOptions::default())
            .unwrap();
        let mut build_keys = 0;
        again
            .apply(|n| {
                build_keys += usize::from(n.is::<BuildKeysExec>());
                Ok(TreeNodeRecursion::Continue)
            })
            .unwrap();
        assert_eq!(build_keys, 1);
    }

    #[tokio::test]
    async fn a_partitioned_join_counts_the_keys_of_every_build_partition() {
        let keys: Vec<i64> = (0..100_000).step_by(7).collect();
        let expected = keys.len() as i64;
        // Whether the scan's first batches wait for every build partition
        // is the scheduler's: the rows it passes are not checked here (the
        // partition count is, in `keys_are_known_once_every_partition_has_ended`).
        let (count, _) = count_of_ids_among(keys, true).await;
        assert_eq!(count, expected);
    }

    #[tokio::test]
    async fn a_join_on_two_columns_tests_the_integer_one_against_its_keys() {
        // Ids 3, 7 and 90,000 with their own tags; id 8 with another tag
        // (it passes the bitmap of ids, and the join drops it).
        let keys = vec![(3, tag(3)), (7, tag(7)), (8, tag(9)), (90_000, tag(90_000))];
        let on = "ids.id = keys.id AND ids.tag = keys.tag";
        let (count, plan) = joined_count(keys, on, false).await;
        assert_eq!(count, 3);
        assert!(metric(&plan, "DynamicFilterExec", "build_key_batches") > 0);
        assert_eq!(metric(&plan, "DynamicFilterExec", "output_rows"), 4);
    }
}

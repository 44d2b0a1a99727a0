//! What the planner knows of a stored table: each stored batch's rows and,
//! per column, its bytes, nulls, minimum and maximum.
//!
//! Made once per version, at the first query that scans it, from its
//! segments' facts (`quiver_store::SegmentFacts`: computed once per segment
//! and shared by the versions holding it; in a data directory kept in a
//! file beside the segment's, so a restart reads them instead of every
//! value), and kept with the version for as long as it lives. With
//! them DataFusion sizes a scan exactly: it picks join sides and broadcasts
//! small tables by their bytes, and estimates filters from the columns'
//! ranges. A query's filters prune stored batches by the same minimums and
//! maximums ([`BatchStatistics`], DataFusion's `PruningPredicate`), as
//! Parquet row groups are pruned.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::{Arc, OnceLock};

use arrow::array::{Array, ArrayRef, BooleanArray, UInt32Array, UInt64Array};
use arrow::compute::{concat, take};
use arrow::datatypes::Schema;
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::stats::Precision;
use datafusion::common::{Column, ColumnStatistics, ScalarValue, Statistics};
use quiver_store::{SegmentFacts, TableVersion, array_bounds};

/// One column, batch by batch.
#[derive(Debug)]
struct ColumnFacts {
    nulls: UInt64Array,
    /// The bytes of the column's own part of its buffers.
    bytes: UInt64Array,
    /// The smallest and largest values of each batch, null where a batch
    /// holds none; `None` for a type whose order quiver does not keep.
    bounds: Option<(ArrayRef, ArrayRef)>,
}

/// A version's statistics, batch by batch in its order: its segments'
/// facts laid end to end, as the arrays DataFusion's pruning reads.
#[derive(Debug)]
pub(crate) struct VersionStats {
    rows: UInt64Array,
    columns: Vec<ColumnFacts>,
    /// Each column's distinct values, estimated when first asked for
    /// ([`VersionStats::distinct`]).
    distinct: Vec<OnceLock<Option<u64>>>,
}

impl VersionStats {
    /// The statistics of `version`, computed at the first call.
    pub(crate) fn of(version: &TableVersion) -> Arc<Self> {
        let made = version.attachment(|| {
            let segments = version.facts();
            let columns = version.schema().fields().len();
            Ok::<_, Infallible>(Self {
                rows: per_batch(&segments, |s, b| s.rows(b)),
                columns: (0..columns)
                    .map(|c| ColumnFacts {
                        nulls: per_batch(&segments, |s, b| s.nulls(b, c)),
                        bytes: per_batch(&segments, |s, b| s.bytes(b, c)),
                        bounds: joined_bounds(&segments, c),
                    })
                    .collect(),
                distinct: (0..columns).map(|_| OnceLock::new()).collect(),
            })
        });
        match made {
            Ok(stats) => stats,
            Err(never) => match never {},
        }
    }

    /// How many stored batches there are.
    pub(crate) fn batches(&self) -> usize {
        self.rows.len()
    }

    /// The version's rows.
    pub(crate) fn rows(&self) -> usize {
        self.rows.values().iter().sum::<u64>() as usize
    }

    /// Column `column`'s nulls, bytes, minimum and maximum over the whole
    /// version.
    pub(crate) fn column(&self, column: usize) -> ColumnStatistics {
        column_statistics(&self.columns[column], None)
    }

    /// Column `column`'s distinct non-null values in `version` (the version
    /// these statistics are of), estimated at the first call for that
    /// column and kept: a pass over the column's values, which only the
    /// columns a join or a filter estimate needs pay for. `None` for a
    /// type that is not hashed.
    pub(crate) fn distinct(&self, version: &TableVersion, column: usize) -> Option<u64> {
        *self.distinct.get(column)?.get_or_init(|| {
            crate::distinct::distinct_values(version.batches().map(|b| b.column(column)))
        })
    }

    /// The statistics of the batches `kept` (indexes into the version's
    /// batches), projected to `projection` (all `columns` when `None`).
    /// Exact: the batches are scanned whole, sliced at most into the scan's
    /// partitions.
    pub(crate) fn of_batches(
        &self,
        kept: &[usize],
        projection: Option<&[usize]>,
        columns: usize,
    ) -> Statistics {
        let chosen: Vec<usize> =
            projection.map_or_else(|| (0..columns).collect(), <[usize]>::to_vec);
        let kept = (kept.len() < self.batches()).then_some(kept);
        let column_statistics: Vec<ColumnStatistics> = chosen
            .iter()
            .map(|&c| column_statistics(&self.columns[c], kept))
            .collect();
        let bytes = column_statistics
            .iter()
            .map(|c| match c.byte_size {
                Precision::Exact(bytes) => bytes,
                _ => 0,
            })
            .sum();
        Statistics {
            num_rows: Precision::Exact(sum(&self.rows, kept)),
            total_byte_size: Precision::Exact(bytes),
            column_statistics,
        }
    }

    /// The batches a predicate is checked against, with `schema` naming
    /// their columns.
    pub(crate) fn pruning<'a>(&'a self, schema: &'a Schema) -> BatchStatistics<'a> {
        BatchStatistics {
            stats: self,
            schema,
        }
    }
}

/// `value(segment, batch)` of every batch of `segments`, in order.
fn per_batch(
    segments: &[Arc<SegmentFacts>],
    value: impl Fn(&SegmentFacts, usize) -> u64,
) -> UInt64Array {
    UInt64Array::from_iter_values(
        segments
            .iter()
            .flat_map(|s| (0..s.batches()).map(|b| value(s, b))),
    )
}

/// Column `column`'s minimums and maximums over every batch of `segments`;
/// `None` if a segment keeps none.
fn joined_bounds(segments: &[Arc<SegmentFacts>], column: usize) -> Option<(ArrayRef, ArrayRef)> {
    let each: Vec<(&ArrayRef, &ArrayRef)> = segments
        .iter()
        .map(|s| s.bounds(column))
        .collect::<Option<_>>()?;
    let join = |parts: Vec<&ArrayRef>| -> Option<ArrayRef> {
        match parts[..] {
            [one] => Some(Arc::clone(one)),
            _ => {
                let parts: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
                concat(&parts).ok()
            }
        }
    };
    let (lows, highs): (Vec<_>, Vec<_>) = each.into_iter().unzip();
    if lows.is_empty() {
        return None;
    }
    Some((join(lows)?, join(highs)?))
}

/// The sum of `values` at `kept` (all of them when `None`).
fn sum(values: &UInt64Array, kept: Option<&[usize]>) -> usize {
    let total: u64 = match kept {
        Some(kept) => kept.iter().map(|&i| values.value(i)).sum(),
        None => values.values().iter().sum(),
    };
    total as usize
}

/// One column's statistics over its batches `kept` (all when `None`).
fn column_statistics(column: &ColumnFacts, kept: Option<&[usize]>) -> ColumnStatistics {
    let range = column.bounds.as_ref().and_then(|(lows, highs)| {
        let of = |array: &ArrayRef| -> Option<ArrayRef> {
            match kept {
                Some(kept) => {
                    let indices = UInt32Array::from_iter_values(kept.iter().map(|&i| i as u32));
                    take(array.as_ref(), &indices, None).ok()
                }
                None => Some(Arc::clone(array)),
            }
        };
        let (low, _) = array_bounds(of(lows)?.as_ref())?;
        let (_, high) = array_bounds(of(highs)?.as_ref())?;
        Some((
            ScalarValue::try_from_array(&low, 0).ok()?,
            ScalarValue::try_from_array(&high, 0).ok()?,
        ))
    });
    let exact = |value: Option<ScalarValue>| match value {
        Some(value) if !value.is_null() => Precision::Exact(value),
        _ => Precision::Absent,
    };
    let (low, high) = range.unzip();
    ColumnStatistics {
        null_count: Precision::Exact(sum(&column.nulls, kept)),
        max_value: exact(high),
        min_value: exact(low),
        sum_value: Precision::Absent,
        distinct_count: Precision::Absent,
        byte_size: Precision::Exact(sum(&column.bytes, kept)),
    }
}

/// A version's batches as the containers DataFusion's pruning checks a
/// predicate against.
#[derive(Debug)]
pub(crate) struct BatchStatistics<'a> {
    stats: &'a VersionStats,
    schema: &'a Schema,
}

impl BatchStatistics<'_> {
    fn column(&self, column: &Column) -> Option<&ColumnFacts> {
        let index = self.schema.index_of(column.name()).ok()?;
        self.stats.columns.get(index)
    }
}

impl PruningStatistics for BatchStatistics<'_> {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        let (low, _) = self.column(column)?.bounds.as_ref()?;
        Some(Arc::clone(low))
    }

    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        let (_, high) = self.column(column)?.bounds.as_ref()?;
        Some(Arc::clone(high))
    }

    fn num_containers(&self) -> usize {
        self.stats.batches()
    }

    fn null_counts(&self, column: &Column) -> Option<ArrayRef> {
        Some(Arc::new(self.column(column)?.nulls.clone()))
    }

    fn row_counts(&self) -> Option<ArrayRef> {
        Some(Arc::new(self.stats.rows.clone()))
    }

    fn contained(&self, _column: &Column, _values: &HashSet<ScalarValue>) -> Option<BooleanArray> {
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

    use super::*;
    use crate::table::StoredTable;
    use arrow::array::{Int64Array, RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field};
    use datafusion::datasource::TableProvider;
    use datafusion::logical_expr::{col, lit};
    use datafusion::physical_plan::ExecutionPlan;
    use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
    use datafusion::prelude::SessionContext;
    use quiver_store::{TableStore, WriteMode};

    /// Table `t`: 4 batches of 100 rows, ids 0..400, a string column
    /// `s` that is null in the second batch.
    fn version() -> Arc<TableVersion> {
        let store = TableStore::new(1 << 30);
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let batches: Vec<RecordBatch> = (0..4)
            .map(|b| {
                let ids = Int64Array::from_iter_values(b * 100..(b + 1) * 100);
                let names: StringArray = (b * 100..(b + 1) * 100)
                    .map(|i| (b != 1).then(|| format!("v{i:03}")))
                    .collect();
                RecordBatch::try_new(
                    Arc::clone(&schema),
                    vec![Arc::new(ids) as ArrayRef, Arc::new(names) as ArrayRef],
                )
                .unwrap()
            })
            .collect();
        store.put("t", WriteMode::Replace, schema, batches).unwrap()
    }

    fn whole(plan: &dyn ExecutionPlan) -> Arc<Statistics> {
        StatisticsContext::new()
            .compute(plan, &StatisticsArgs::new())
            .unwrap()
    }

    async fn scan(filters: &[datafusion::logical_expr::Expr]) -> Arc<dyn ExecutionPlan> {
        let context = SessionContext::new();
        StoredTable::new(version())
            .scan(&context.state(), None, filters, None)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_scan_knows_its_rows_bytes_nulls_and_ranges_exactly() {
        let plan = scan(&[]).await;
        let stats = whole(plan.as_ref());
        assert_eq!(stats.num_rows, Precision::Exact(400));
        let Precision::Exact(bytes) = stats.total_byte_size else {
            panic!("{stats:?}");
        };
        // 400 ids of 8 bytes, and the strings with their offsets.
        assert!(bytes > 3200, "{bytes}");
        let [id, s] = &stats.column_statistics[..] else {
            panic!("{stats:?}");
        };
        assert_eq!(id.min_value, Precision::Exact(ScalarValue::Int64(Some(0))));
        assert_eq!(
            id.max_value,
            Precision::Exact(ScalarValue::Int64(Some(399)))
        );
        assert_eq!(id.null_count, Precision::Exact(0));
        assert_eq!(s.null_count, Precision::Exact(100));
        assert_eq!(
            s.min_value,
            Precision::Exact(ScalarValue::Utf8(Some("v000".into())))
        );
        assert_eq!(
            s.max_value,
            Precision::Exact(ScalarValue::Utf8(Some("v399".into())))
        );
        // Computed once, kept with the version.
        let version = version();
        assert!(Arc::ptr_eq(
            &VersionStats::of(&version),
            &VersionStats::of(&version)
        ));
    }

    #[tokio::test]
    async fn filters_prune_the_batches_their_ranges_rule_out() {
        let plan = scan(&[col("id").gt_eq(lit(250_i64))]).await;
        // Batches 0 and 1 hold ids below 250.
        let stats = whole(plan.as_ref());
        assert_eq!(stats.num_rows, Precision::Exact(200));
        // The ranges are the kept batches' own.
        let id = &stats.column_statistics[0];
        assert_eq!(
            id.min_value,
            Precision::Exact(ScalarValue::Int64(Some(200)))
        );
        assert_eq!(id.null_count, Precision::Exact(0));
        let shown = datafusion::physical_plan::displayable(plan.as_ref())
            .one_line()
            .to_string();
        assert!(shown.contains("pruned_batches=2"), "{shown}");
        // A batch all null is ruled out by a filter on values...
        let plan = scan(&[col("s").eq(lit("v150"))]).await;
        assert_eq!(whole(plan.as_ref()).num_rows, Precision::Exact(0));
        // ...and kept for IS NULL, the only batch that may match.
        let plan = scan(&[col("s").is_null()]).await;
        assert_eq!(whole(plan.as_ref()).num_rows, Precision::Exact(100));
        // A filter its ranges say nothing of keeps every batch.
        let plan = scan(&[(col("id") % lit(7_i64)).eq(lit(3_i64))]).await;
        assert_eq!(whole(plan.as_ref()).num_rows, Precision::Exact(400));
    }
}

//! Parquet files queried in place (`--table`, `CREATE EXTERNAL TABLE`):
//! DataFusion's listing table, and what the join order estimates from the
//! files.
//!
//! DataFusion's listing table gives its statistics to the physical plan
//! only, so the logical join order ([`crate::join_order`]) would see no
//! rows for a file and keep the query's order. [`FileTable`] reads the
//! files' footers the first time an estimate needs them: rows, and each
//! column's nulls and range from the row groups' statistics. A column's
//! distinct values take one pass over that column of every file, made the
//! first time a join or an equality filter needs it. What was read is kept
//! with the files' sizes and modification times and read again when they
//! change (or the files in a directory do). Estimates choose the order of
//! joins only; every query reads the files as they are.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use arrow::array::ArrayRef;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{ScanArgs, ScanResult, Session};
use datafusion::common::{Constraints, ScalarValue, Statistics};
use datafusion::datasource::TableProvider;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::ListingTable;
use datafusion::error::Result;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, LogicalPlan, TableProviderFilterPushDown, TableType};
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use datafusion::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use datafusion::parquet::file::metadata::ParquetMetaDataReader;
use datafusion::physical_plan::ExecutionPlan;

use crate::distinct::Sketch;
use crate::join_order::{ColumnEstimate, Estimated};

/// Rows read at a time when counting a column's distinct values.
const BATCH_ROWS: usize = 65_536;
/// How long the files listed last stand for the files as they are: the
/// estimates of one query's planning list them once, not per estimate.
const RELIST: Duration = Duration::from_secs(1);

/// A listing table of local Parquet files, with estimates (module docs).
#[derive(Debug)]
pub(crate) struct FileTable {
    listing: Arc<dyn TableProvider>,
    /// What the listing table reads: files, or directories of files.
    roots: Vec<PathBuf>,
    /// The data files' extension, with its dot.
    extension: String,
    read: Mutex<Option<Read>>,
}

/// The footers read last (none when the files could not be read), and when
/// the files were listed for them.
#[derive(Debug)]
struct Read {
    listed: Instant,
    footers: Option<Arc<Footers>>,
}

/// A data file as it was when its footer was read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileIdentity {
    path: PathBuf,
    len: u64,
    modified: Option<SystemTime>,
}

/// The footers of the files as they were, and what was read from them,
/// by the table's column: nulls and range from the row groups' statistics,
/// and the distinct values counted in the column's values.
#[derive(Debug)]
struct Footers {
    files: Vec<(FileIdentity, ArrowReaderMetadata)>,
    columns: Vec<OnceLock<Option<ColumnEstimate>>>,
    distinct: Vec<OnceLock<Option<u64>>>,
}

impl FileTable {
    /// `table` with estimates when it is a listing table of local Parquet
    /// files (not a glob, no partition columns); otherwise `table` itself.
    pub(crate) fn wrap(table: Arc<dyn TableProvider>) -> Arc<dyn TableProvider> {
        let Some(listing) = table.downcast_ref::<ListingTable>() else {
            return table;
        };
        let options = listing.options();
        let parquet = options.format.is::<ParquetFormat>();
        if !parquet || !options.table_partition_cols.is_empty() {
            return table;
        }
        let roots = listing
            .table_paths()
            .iter()
            .map(|url| {
                (url.scheme() == "file" && url.get_glob().is_none())
                    .then(|| url.get_url().to_file_path().ok())
                    .flatten()
            })
            .collect::<Option<Vec<_>>>();
        let Some(roots) = roots else {
            return table;
        };
        let extension = options.file_extension.clone();
        Arc::new(Self {
            listing: table,
            roots,
            extension,
            read: Mutex::new(None),
        })
    }

    /// The data files as they are now, sorted; `None` when a directory holds
    /// directories (partitions this does not read) or cannot be listed.
    fn files(&self) -> Option<Vec<FileIdentity>> {
        let identity = |path: PathBuf, metadata: std::fs::Metadata| FileIdentity {
            path,
            len: metadata.len(),
            modified: metadata.modified().ok(),
        };
        let mut files = Vec::new();
        for root in &self.roots {
            let metadata = std::fs::metadata(root).ok()?;
            if metadata.is_file() {
                files.push(identity(root.clone(), metadata));
                continue;
            }
            for entry in std::fs::read_dir(root).ok()? {
                let entry = entry.ok()?;
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.starts_with('.') || name.starts_with('_') {
                    continue;
                }
                let metadata = entry.metadata().ok()?;
                if metadata.is_dir() {
                    return None;
                }
                if name.ends_with(&self.extension) {
                    files.push(identity(entry.path(), metadata));
                }
            }
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Some(files)
    }

    /// The footers of the files as they are now (as listed at most
    /// [`RELIST`] ago): those read before if no file changed since, else
    /// read again. `None` when the files cannot be listed or a file cannot
    /// be read as Parquet.
    fn footers(&self) -> Option<Arc<Footers>> {
        let mut read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(read) = read.as_ref()
            && read.listed.elapsed() < RELIST
        {
            return read.footers.clone();
        }
        let before = read.take().and_then(|read| read.footers);
        let footers = match (self.files(), before) {
            (None, _) => None,
            (Some(files), Some(before)) if before.are(&files) => Some(before),
            (Some(files), _) => self.read_footers(files),
        };
        *read = Some(Read {
            listed: Instant::now(),
            footers: footers.clone(),
        });
        footers
    }

    fn read_footers(&self, files: Vec<FileIdentity>) -> Option<Arc<Footers>> {
        let files = files
            .into_iter()
            .map(|identity| {
                let file = File::open(&identity.path).ok()?;
                let metadata = ParquetMetaDataReader::new().parse_and_finish(&file).ok()?;
                let metadata =
                    ArrowReaderMetadata::try_new(Arc::new(metadata), ArrowReaderOptions::new())
                        .ok()?;
                Some((identity, metadata))
            })
            .collect::<Option<Vec<_>>>();
        let Some(files) = files else {
            tracing::debug!(roots = ?self.roots, "no estimates: a file is not readable Parquet");
            return None;
        };
        let columns = self.listing.schema().fields().len();
        Some(Arc::new(Footers {
            files,
            columns: (0..columns).map(|_| OnceLock::new()).collect(),
            distinct: (0..columns).map(|_| OnceLock::new()).collect(),
        }))
    }
}

impl Footers {
    /// Whether these are the footers of `files`.
    fn are(&self, files: &[FileIdentity]) -> bool {
        self.files.len() == files.len() && self.files.iter().zip(files).all(|((a, _), b)| a == b)
    }

    /// The files' rows.
    fn rows(&self) -> Option<u64> {
        let rows = self
            .files
            .iter()
            .map(|(_, metadata)| metadata.metadata().file_metadata().num_rows())
            .sum::<i64>();
        u64::try_from(rows).ok()
    }

    /// The rows, and the nulls, minimum and maximum of the column `name`
    /// over every row group of every file; a bound when every row group
    /// has one.
    fn column(&self, name: &str) -> Option<ColumnEstimate> {
        let mut nulls = 0;
        let (mut min, mut max) = (Bound::Unset, Bound::Unset);
        for (_, metadata) in &self.files {
            let converter =
                StatisticsConverter::try_new(name, metadata.schema(), metadata.parquet_schema())
                    .ok()?;
            let groups = metadata.metadata().row_groups();
            nulls += converter
                .row_group_null_counts(groups)
                .ok()?
                .iter()
                .map(|count| count.unwrap_or(0))
                .sum::<u64>();
            let mins = converter.row_group_mins(groups).ok()?;
            let maxes = converter.row_group_maxes(groups).ok()?;
            for i in 0..mins.len() {
                min = min.with(&mins, i, Ordering::Less);
                max = max.with(&maxes, i, Ordering::Greater);
            }
        }
        Some(ColumnEstimate::new(
            self.rows()?,
            nulls,
            min.value().as_ref(),
            max.value().as_ref(),
        ))
    }

    /// The distinct non-null values of the column `name`, counted in one
    /// pass over it in every file.
    fn count_distinct(&self, name: &str) -> Option<u64> {
        let mut sketch = Sketch::default();
        for (identity, metadata) in &self.files {
            let root = metadata.schema().index_of(name).ok()?;
            let mask = ProjectionMask::roots(metadata.parquet_schema(), [root]);
            let file = File::open(&identity.path).ok()?;
            let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(file, metadata.clone())
                .with_projection(mask)
                .with_batch_size(BATCH_ROWS)
                .build()
                .ok()?;
            for batch in reader {
                sketch.add(batch.ok()?.column(0))?;
            }
        }
        Some(sketch.estimate())
    }
}

/// The least (or greatest) of the row groups' minimums (or maximums).
#[derive(Debug)]
enum Bound {
    Unset,
    Value(ScalarValue),
    /// A row group has none.
    Unknown,
}

impl Bound {
    /// This bound and row group `i`'s, of `values`: the one that is
    /// `beyond` the other.
    fn with(self, values: &ArrayRef, i: usize, beyond: Ordering) -> Self {
        let value = match ScalarValue::try_from_array(values, i) {
            Ok(value) if !value.is_null() => value,
            _ => return Self::Unknown,
        };
        match self {
            Self::Unset => Self::Value(value),
            Self::Value(current) => match value.partial_cmp(&current) {
                Some(order) if order == beyond => Self::Value(value),
                Some(_) => Self::Value(current),
                None => Self::Unknown,
            },
            Self::Unknown => Self::Unknown,
        }
    }

    fn value(self) -> Option<ScalarValue> {
        match self {
            Self::Value(value) => Some(value),
            Self::Unset | Self::Unknown => None,
        }
    }
}

impl Estimated for FileTable {
    fn rows(&self) -> Option<u64> {
        self.footers()?.rows()
    }

    fn column(&self, index: usize) -> Option<ColumnEstimate> {
        let footers = self.footers()?;
        let schema = self.listing.schema();
        let name = schema.fields().get(index)?.name();
        *footers
            .columns
            .get(index)?
            .get_or_init(|| footers.column(name))
    }

    fn distinct(&self, index: usize) -> Option<u64> {
        let footers = self.footers()?;
        let schema = self.listing.schema();
        let name = schema.fields().get(index)?.name();
        *footers
            .distinct
            .get(index)?
            .get_or_init(|| footers.count_distinct(name))
    }
}

#[async_trait]
impl TableProvider for FileTable {
    fn schema(&self) -> SchemaRef {
        self.listing.schema()
    }

    fn constraints(&self) -> Option<&Constraints> {
        self.listing.constraints()
    }

    fn table_type(&self) -> TableType {
        self.listing.table_type()
    }

    fn get_table_definition(&self) -> Option<&str> {
        self.listing.get_table_definition()
    }

    fn get_logical_plan(&'_ self) -> Option<Cow<'_, LogicalPlan>> {
        self.listing.get_logical_plan()
    }

    fn get_column_default(&self, column: &str) -> Option<&Expr> {
        self.listing.get_column_default(column)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.listing.scan(state, projection, filters, limit).await
    }

    async fn scan_with_args<'a>(
        &self,
        state: &dyn Session,
        args: ScanArgs<'a>,
    ) -> Result<ScanResult> {
        self.listing.scan_with_args(state, args).await
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        self.listing.supports_filters_pushdown(filters)
    }

    fn statistics(&self) -> Option<Statistics> {
        self.listing.statistics()
    }

    async fn insert_into(
        &self,
        state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.listing.insert_into(state, input, insert_op).await
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Int64Array, RecordBatch};
    use datafusion::prelude::{ParquetReadOptions, SessionContext};

    use super::*;

    /// Writes `values` as the column `k` of a Parquet file at `path`, in row
    /// groups of 100 rows.
    fn write(path: &std::path::Path, values: Vec<Option<i64>>) {
        let batch =
            RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(values)) as ArrayRef)])
                .unwrap();
        let properties = datafusion::parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(100))
            .build();
        crate::rule_testing::write_parquet(path, &batch, Some(properties));
    }

    async fn table(path: &std::path::Path) -> Arc<dyn TableProvider> {
        let context = SessionContext::new();
        let path = path.to_str().unwrap();
        context
            .register_parquet("t", path, ParquetReadOptions::default())
            .await
            .unwrap();
        FileTable::wrap(context.table_provider("t").await.unwrap())
    }

    fn estimates(table: &Arc<dyn TableProvider>) -> &dyn Estimated {
        table.downcast_ref::<FileTable>().expect("a file table")
    }

    #[tokio::test]
    async fn reads_rows_nulls_ranges_and_distinct_values_and_again_when_a_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.parquet");
        // 1,000 rows in 10 row groups: 250 keys from 10 to 259, each 3 times, and 250 nulls.
        let values = (0..1_000)
            .map(|i| (i % 4 != 3).then_some(10 + i % 250))
            .collect();
        write(&path, values);
        let table = table(&path).await;
        let estimates = estimates(&table);
        assert_eq!(estimates.rows(), Some(1_000));
        let column = estimates.column(0).unwrap();
        assert_eq!(column.rows, 1_000.0);
        assert_eq!(column.nulls, 250.0);
        assert_eq!(column.range, Some((10.0, 259.0)));
        // The footers gave those; the values were not read for them.
        let footers = table
            .downcast_ref::<FileTable>()
            .unwrap()
            .footers()
            .unwrap();
        assert!(footers.distinct[0].get().is_none());
        let distinct = estimates.distinct(0).unwrap();
        assert!((240..=260).contains(&distinct), "{distinct}");

        // The file rewritten: 10 rows, 5 keys from 0 to 4, read once the files are
        // listed again.
        write(&path, (0..10).map(|i| Some(i % 5)).collect());
        std::thread::sleep(RELIST);
        assert_eq!(estimates.rows(), Some(10));
        let column = estimates.column(0).unwrap();
        assert_eq!((column.nulls, column.range), (0.0, Some((0.0, 4.0))));
        assert_eq!(estimates.distinct(0), Some(5));
    }

    #[tokio::test]
    async fn a_directory_counts_its_files_and_gives_no_estimate_once_it_holds_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        write(&dir.path().join("a.parquet"), vec![Some(1); 30]);
        write(&dir.path().join("b.parquet"), vec![Some(2); 20]);
        let table = table(dir.path()).await;
        let estimates = estimates(&table);
        assert_eq!(estimates.rows(), Some(50));
        assert_eq!(estimates.column(0).unwrap().range, Some((1.0, 2.0)));
        std::fs::create_dir(dir.path().join("day=1")).unwrap();
        std::thread::sleep(RELIST);
        assert_eq!(estimates.rows(), None);
    }
}

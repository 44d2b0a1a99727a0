//! [`SqlEngine`]: DataFusion over the table store and registered files.

use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider};
use datafusion::common::{DataFusionError, ParamValues, TableReference};
use datafusion::datasource::file_format::options::{ArrowReadOptions, ReadOptions};
use datafusion::datasource::listing::{ListingTable, ListingTableConfig};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::execution::cache::cache_manager::CacheManagerConfig;
use datafusion::execution::memory_pool::{GreedyMemoryPool, TrackConsumersPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{CreateMemoryTable, ScalarUDF};
use datafusion::logical_expr::{DdlStatement, DmlStatement, LogicalPlan, WriteOp};
use datafusion::physical_plan::{ExecutionPlan, execute_stream};
use datafusion::prelude::{CsvReadOptions, ParquetReadOptions, SessionContext};
use futures::{StreamExt, TryStreamExt};
use quiver_store::{StoreError, TableStore, WriteMode};

use crate::tables::{StoreTables, TableSink, TableSource};

use datafusion::catalog::SchemaProvider;

use crate::catalog::{CATALOG, SCHEMA, StoreSchema, TableKind};
use crate::params::number_placeholders;
use crate::query::{Query, Replan};
use crate::settings::Setting;
use crate::{Result, SqlError};
use quiver_objects::{
    CacheSettings, ObjectStoreSettings, ObjectStores, RangeCache, is_object_store_url,
    refused_option,
};

/// Default memory one query may hold in its operators: 1 GiB.
pub const DEFAULT_QUERY_MEMORY_LIMIT: usize = 1 << 30;

/// Default time a query may run, from planning to its last batch: 300 s.
pub const DEFAULT_QUERY_TIMEOUT: Duration = Duration::from_secs(300);

/// Limits and sizes of the SQL engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineOptions {
    /// Memory one query may hold in its operators (sorts, joins, aggregates);
    /// past it the query fails with [`SqlError::ResourcesExhausted`].
    pub query_memory_limit: usize,
    /// How long a query may run, from planning to its last batch.
    pub query_timeout: Duration,
    /// Partitions a query runs in (and endpoints a result is offered as);
    /// 0: one per core.
    pub target_partitions: usize,
    /// DataFusion settings over quiver's own choices (`--sql-setting`).
    pub settings: Vec<Setting>,
    /// How buckets of object storage are reached, over the environment.
    pub object_stores: ObjectStoreSettings,
    /// The cache of the ranges read from object storage.
    pub cache: CacheSettings,
    /// How long the files of a table in place are listed for once: `None`
    /// lists them at every query, so files that arrive or go are seen by
    /// the next one (`--list-ttl`).
    pub list_ttl: Option<Duration>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            query_memory_limit: DEFAULT_QUERY_MEMORY_LIMIT,
            query_timeout: DEFAULT_QUERY_TIMEOUT,
            target_partitions: 0,
            settings: Vec::new(),
            object_stores: ObjectStoreSettings::default(),
            cache: CacheSettings::default(),
            list_ttl: None,
        }
    }
}

/// What running a statement gave.
#[derive(Debug)]
pub enum Outcome {
    /// A query, planned and ready to run partition by partition.
    Query(Query),
    /// A statement that changed tables (DDL or DML), already done, and the
    /// rows it wrote (0 for `DROP` and other statements that write no rows).
    Changed(u64),
}

/// What a statement does, from least to most: what running it needs to be
/// allowed ([`SqlEngine::run_allowed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Effect {
    /// Returns rows and changes nothing (a query).
    Read,
    /// Changes tables or views: `CREATE TABLE [AS]`, `INSERT`, `DROP`,
    /// `CREATE VIEW`, and any other DDL or DML.
    Write,
    /// Reaches the server's file system: `CREATE EXTERNAL TABLE` (reads any
    /// file the server process can), `COPY` (writes one).
    ServerFiles,
}

impl Effect {
    /// What `plan` does.
    pub fn of(plan: &LogicalPlan) -> Self {
        match plan {
            // EXPLAIN ANALYZE runs its statement: it does what the statement does.
            LogicalPlan::Analyze(analyze) => Self::of(&analyze.input),
            LogicalPlan::Ddl(DdlStatement::CreateExternalTable(_)) | LogicalPlan::Copy(_) => {
                Self::ServerFiles
            }
            plan if changes_tables(plan) => Self::Write,
            _ => Self::Read,
        }
    }

    /// What the effect is, in words: "a query", ...
    pub fn describe(self) -> &'static str {
        match self {
            Self::Read => "a query",
            Self::Write => "a statement that changes tables",
            Self::ServerFiles => "a statement that reaches the server's files",
        }
    }
}

/// A statement planned once for its shapes, as a prepared statement needs them.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The statement, with `?` placeholders numbered.
    pub sql: String,
    /// One field per parameter (`$1`, `$2`, ...), typed where the statement
    /// tells the type, `Null` where it does not.
    pub parameters: SchemaRef,
    /// The schema of the result (empty for statements that return none).
    pub result: SchemaRef,
    /// Whether the statement returns rows (a query) or changes tables.
    pub is_query: bool,
}

/// A table as the catalog lists it.
#[derive(Debug, Clone)]
pub struct TableInfo {
    /// Its name, in `quiver.public`.
    pub name: String,
    /// Stored, external or view.
    pub kind: TableKind,
    /// Its columns.
    pub schema: SchemaRef,
}

/// DataFusion over stored tables: every stored table is a SQL table of the
/// same name, next to tables over files registered with
/// [`SqlEngine::register_location`] or `CREATE EXTERNAL TABLE`.
pub struct SqlEngine {
    /// Where stored tables are read from, and how queries are planned.
    source: Arc<dyn TableSource>,
    /// How stored tables are written.
    sink: Arc<dyn TableSink>,
    /// Where tables in place are read from (the session's registry).
    object_stores: Arc<ObjectStores>,
    schema: Arc<StoreSchema>,
    context: SessionContext,
    options: EngineOptions,
}

impl std::fmt::Debug for SqlEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlEngine")
            .field("tables", &self.schema.table_names().len())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl SqlEngine {
    /// An engine over `store`: its tables read and written directly.
    pub fn new(store: Arc<TableStore>, options: EngineOptions) -> Self {
        let tables = Arc::new(StoreTables::new(store));
        Self::over(Arc::clone(&tables) as _, tables, options)
    }

    /// An engine over the stored tables of `source`, planned in the session
    /// it sets up and written through `sink`, beside tables over files.
    pub fn over(
        source: Arc<dyn TableSource>,
        sink: Arc<dyn TableSink>,
        options: EngineOptions,
    ) -> Self {
        let partitions = match options.target_partitions {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let mut config = crate::settings::session_config(partitions, &options.settings)
            .with_create_default_catalog_and_schema(false)
            .with_default_catalog_and_schema(CATALOG, SCHEMA)
            .with_information_schema(true);
        // Table and column names are as stored: `SELECT VendorID FROM Taxi`
        // reads the column and table of exactly those names, and so do
        // `vendorid` and `taxi` (crate::identifiers matches unquoted names
        // ignoring case before DataFusion plans them).
        config.options_mut().sql_parser.enable_ident_normalization = false;
        // An operator's `execution.target_partitions` wins over the cores.
        let partitions = config.target_partitions();
        let mut builder = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .with_statistics_registry(crate::join_sizes::registry())
            .with_optimizer_rule(Arc::new(crate::join_order::JoinOrder));
        // Files in place, local or in object storage, through one registry;
        // listings kept for `list_ttl` at most (by default, listed at every
        // query), so files that arrive or go are seen without a restart.
        let cache = match RangeCache::from_settings(&options.cache) {
            Ok(cache) => cache.map(Arc::new),
            // The server checks the directory before it builds the engine.
            Err(e) => {
                tracing::error!(error = %e, "the cache of object ranges is off");
                None
            }
        };
        let object_stores = Arc::new(ObjectStores::new(
            Arc::new(crate::local_files::LocalFiles::new()),
            options.object_stores.clone(),
            cache,
        ));
        // On the session too: a cluster's source hands the stores to the
        // tasks other nodes give this one, which read what those listed.
        builder
            .config()
            .get_or_insert_default()
            .set_extension(Arc::clone(&object_stores));
        let caches = CacheManagerConfig::default()
            .with_list_files_cache_limit(if options.list_ttl.is_some() {
                CacheManagerConfig::default().list_files_cache_limit
            } else {
                0
            })
            .with_list_files_cache_ttl(options.list_ttl);
        let runtime = RuntimeEnvBuilder::new()
            .with_object_store_registry(Arc::clone(&object_stores) as _)
            .with_cache_manager(caches)
            .build_arc();
        let builder = match runtime {
            Ok(runtime) => builder.with_runtime_env(runtime),
            Err(e) => {
                tracing::warn!(error = %e, "the object stores could not be set up");
                builder
            }
        };
        let mut state = source.session(builder).build();
        // A decimal quotient is a double, as in DuckDB (crate::division).
        // Neither call can fail: the registry only adds to its lists.
        let _ = datafusion::execution::FunctionRegistry::register_function_rewrite(
            &mut state,
            Arc::new(crate::division::DecimalDivision),
        );
        let _ = datafusion::execution::FunctionRegistry::register_udf(
            &mut state,
            crate::division::decimal_to_double(),
        );
        let context = SessionContext::new_with_state(state);
        let schema = Arc::new(StoreSchema::new(Arc::clone(&source)));
        let catalog = MemoryCatalogProvider::new();
        // A fresh catalog has no schema to replace: this cannot fail.
        let _ = catalog.register_schema(SCHEMA, Arc::clone(&schema) as _);
        context.register_catalog(CATALOG, Arc::new(catalog));
        Self {
            source,
            sink,
            object_stores,
            schema,
            context,
            options: EngineOptions {
                target_partitions: partitions,
                ..options
            },
        }
    }

    /// The DataFusion session every statement is planned in.
    pub(crate) fn context(&self) -> &SessionContext {
        &self.context
    }

    /// Registers `udf`: SQL may call it by its name from now on, in
    /// statements and in queries over a stream.
    pub fn register_udf(&self, udf: ScalarUDF) {
        tracing::info!(function = udf.name(), "registered SQL function");
        self.context.register_udf(udf);
    }

    /// Where else a query may be asked, any of which plans and runs it as
    /// this engine does ([`TableSource::locations`]); `None`: here only.
    pub fn locations(&self) -> Option<Vec<String>> {
        self.source.locations()
    }

    /// The engine's limits.
    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// The schema of `name`, if it is a table in place (files registered
    /// with [`SqlEngine::register_location`] or `CREATE EXTERNAL TABLE`).
    pub fn table_in_place(&self, name: &str) -> Option<SchemaRef> {
        self.in_place(name).map(|table| table.schema())
    }

    /// The provider of `name`, if it is a table in place (not a view).
    fn in_place(&self, name: &str) -> Option<Arc<dyn datafusion::catalog::TableProvider>> {
        self.schema
            .registered(name)
            .filter(|table| table.table_type() != datafusion::logical_expr::TableType::View)
    }

    /// A read of the whole of `name`, a table in place, by this server: one
    /// partition per group of files. Planned without the session's rules, so
    /// on a cluster too the partitions stay this server's, each an endpoint
    /// a client's task reads on its own.
    pub async fn scan_in_place(&self, name: &str) -> Result<Query> {
        let table = self
            .in_place(name)
            .ok_or_else(|| SqlError::NotFound(format!("no table in place named '{name}'")))?;
        let state = self.context().state();
        let plan = table.scan(&state, None, &[], None).await?;
        self.limited(&state, plan)
    }

    /// Every table, by name.
    pub fn tables(&self) -> Vec<TableInfo> {
        self.schema
            .tables()
            .into_iter()
            .map(|(name, kind, schema)| TableInfo { name, kind, schema })
            .collect()
    }

    /// Registers the Parquet, CSV (with a header row) or Arrow IPC files at
    /// `location` as the table `name`, queried in place. `location` is a
    /// local file or directory, or an object store URL (`s3://bucket/key`,
    /// `s3://bucket/prefix/`, `gs://...`, `az://...`), where a glob
    /// (`s3://bucket/trips/*.parquet`) picks files too. The format comes
    /// from the files' extension; directories named `key=value` are
    /// partition columns, usable in filters and pruned by them.
    pub async fn register_location(&self, name: &str, location: &str) -> Result<()> {
        quiver_store::validate_name(name)?;
        let state = self.context.state();
        let url = crate::location::table_url(&state, location).await?;
        let extension = crate::location::data_extension(&state, &url, location).await?;
        let dotted = format!(".{extension}");
        let config = state.config();
        let table_options = state.default_table_options();
        let listing = match extension.as_str() {
            "parquet" | "parq" => ParquetReadOptions::default()
                .file_extension(&dotted)
                .to_listing_options(config, table_options),
            "csv" | "tsv" => {
                let delimiter = if extension == "tsv" { b'\t' } else { b',' };
                CsvReadOptions::new()
                    .has_header(true)
                    .delimiter(delimiter)
                    .file_extension(&dotted)
                    .to_listing_options(config, table_options)
            }
            "arrow" | "feather" | "ipc" | "arrows" => ArrowReadOptions {
                file_extension: &dotted,
                ..Default::default()
            }
            .to_listing_options(config, table_options),
            other => {
                return Err(SqlError::File(format!(
                    "{location}: unknown file type '.{other}' (expected .parquet, .csv, .tsv, \
                     .arrow, .feather or .ipc)"
                )));
            }
        };
        // `key=value/` directories: partition columns, as CREATE EXTERNAL
        // TABLE infers them. One file has none (and is not opened for it: a
        // local file may be a FIFO, opened once by the schema's inference).
        let partitions = if url.is_collection() || url.get_glob().is_some() {
            listing.infer_partitions(&state, &url).await?
        } else {
            Vec::new()
        };
        let partition_type =
            DataType::Dictionary(Box::new(DataType::UInt16), Box::new(DataType::Utf8));
        let listing = listing.with_table_partition_cols(
            partitions
                .into_iter()
                .map(|column| (column, partition_type.clone()))
                .collect(),
        );
        let config = ListingTableConfig::new(url)
            .with_listing_options(listing)
            .infer_schema(&state)
            .await
            .map_err(|e| crate::location::about(location, e))?;
        let table = ListingTable::try_new(config)?;
        self.context
            .register_table(TableReference::bare(name), Arc::new(table))?;
        tracing::info!(table = name, location, "registered external table");
        Ok(())
    }

    /// Plans `sql` for its shapes: what a prepared statement reports.
    pub async fn prepare(&self, sql: &str) -> Result<Prepared> {
        let sql = number_placeholders(sql);
        let plan = crate::identifiers::plan(&self.context.state(), &sql).await?;
        let mut parameters: Vec<(usize, Field)> = plan
            .get_parameter_types()?
            .into_iter()
            .map(|(name, data_type)| {
                let index = name
                    .strip_prefix('$')
                    .and_then(|n| n.parse::<usize>().ok())
                    .ok_or_else(|| {
                        SqlError::invalid(format!(
                            "parameter {name}: quiver takes positional parameters ($1, $2, ... or ?)"
                        ))
                    })?;
                Ok((index, Field::new(name, data_type.unwrap_or(DataType::Null), true)))
            })
            .collect::<Result<_>>()?;
        parameters.sort_by_key(|(index, _)| *index);
        let is_query = !changes_tables(&plan);
        let result = if is_query {
            Arc::new(plan.schema().as_arrow().clone())
        } else {
            Arc::new(Schema::empty())
        };
        Ok(Prepared {
            sql,
            parameters: Arc::new(Schema::new(
                parameters.into_iter().map(|(_, f)| f).collect::<Vec<_>>(),
            )),
            result,
            is_query,
        })
    }

    /// Runs `sql` (with `?` or `$n` placeholders bound to `params`): a query
    /// is planned and returned to be run; any other statement runs now.
    pub async fn run(&self, sql: &str, params: Option<ParamValues>) -> Result<Outcome> {
        self.run_allowed(sql, params, Effect::ServerFiles).await
    }

    /// Like [`SqlEngine::run`], but a statement whose [`Effect`] is more than
    /// `allowed` is refused with [`SqlError::Denied`] after planning, before
    /// anything runs.
    pub async fn run_allowed(
        &self,
        sql: &str,
        params: Option<ParamValues>,
        allowed: Effect,
    ) -> Result<Outcome> {
        let started = std::time::Instant::now();
        let outcome = self.plan_and_run(sql, params, allowed, started).await;
        // A query is recorded when its last partition ends (`Query`).
        match &outcome {
            Ok(Outcome::Query(_)) => {}
            Ok(Outcome::Changed(_)) => crate::metrics::record(started, "ok"),
            Err(e) => crate::metrics::record(started, crate::metrics::outcome_of(e)),
        }
        outcome
    }

    async fn plan_and_run(
        &self,
        sql: &str,
        params: Option<ParamValues>,
        allowed: Effect,
        started: std::time::Instant,
    ) -> Result<Outcome> {
        let sql = number_placeholders(sql);
        let plan = crate::identifiers::plan(&self.context.state(), &sql).await?;
        let effect = Effect::of(&plan);
        if effect > allowed {
            return Err(SqlError::Denied(effect));
        }
        // DataFusion would run the write itself, past quiver's own paths
        // (and their checks) for writes.
        if let LogicalPlan::Analyze(analyze) = &plan
            && changes_tables(&analyze.input)
        {
            return Err(SqlError::Unsupported(
                "EXPLAIN ANALYZE of a statement that changes tables: quiver runs it for \
                 queries only (EXPLAIN shows the plan without running it)"
                    .into(),
            ));
        }
        match bind(plan, params.clone())? {
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) => {
                self.create_table(create).await.map(Outcome::Changed)
            }
            LogicalPlan::Ddl(DdlStatement::DropTable(drop)) => {
                let name = self.local_name(&drop.name)?;
                // DDL changes no rows: 0, as JDBC's executeUpdate expects.
                if self.schema.registered(&name).is_none() {
                    match self.sink.remove(&name).await {
                        Ok(()) => return Ok(Outcome::Changed(0)),
                        Err(SqlError::Store(StoreError::NotFound { .. })) => {}
                        Err(e) => return Err(e),
                    }
                }
                if self.schema.registered(&name).is_some() {
                    self.context
                        .execute_logical_plan(LogicalPlan::Ddl(DdlStatement::DropTable(drop)))
                        .await?;
                    return Ok(Outcome::Changed(0));
                }
                if drop.if_exists {
                    Ok(Outcome::Changed(0))
                } else {
                    Err(StoreError::NotFound { name }.into())
                }
            }
            LogicalPlan::Ddl(DdlStatement::CreateExternalTable(create)) => {
                // How storage is reached is the server's to say.
                if let Some(refused) = create.options.keys().find_map(|k| refused_option(k)) {
                    return Err(SqlError::Forbidden(refused));
                }
                // A location with no files to infer the schema from: gone,
                // rather than a statement DataFusion cannot plan.
                if create.schema.fields().is_empty() {
                    let state = self.context.state();
                    for location in &create.locations {
                        let url = crate::location::table_url(&state, location).await?;
                        crate::location::data_extension(&state, &url, location).await?;
                    }
                }
                self.context
                    .execute_logical_plan(LogicalPlan::Ddl(DdlStatement::CreateExternalTable(
                        create,
                    )))
                    .await?
                    .collect()
                    .await?;
                Ok(Outcome::Changed(0))
            }
            LogicalPlan::Ddl(ddl @ (DdlStatement::CreateView(_) | DdlStatement::DropView(_))) => {
                self.context
                    .execute_logical_plan(LogicalPlan::Ddl(ddl))
                    .await?
                    .collect()
                    .await?;
                Ok(Outcome::Changed(0))
            }
            LogicalPlan::Ddl(ddl) => Err(SqlError::Unsupported(format!(
                "{} is not supported: quiver has one catalog and schema, quiver.public",
                ddl.name()
            ))),
            LogicalPlan::Dml(dml) if matches!(dml.op, WriteOp::Insert(_)) => {
                self.insert(dml).await.map(Outcome::Changed)
            }
            LogicalPlan::Dml(dml) => Err(SqlError::Unsupported(format!(
                "{} is not supported: stored tables are replaced or appended to, not changed \
                 row by row",
                dml.op
            ))),
            LogicalPlan::Statement(statement) => Err(SqlError::Unsupported(format!(
                "{} is not supported: quiver has no transactions or session settings; \
                 use Flight SQL prepared statements for parameters",
                statement.name()
            ))),
            LogicalPlan::Copy(copy) => {
                // Object storage only: a local path would write the server's
                // own files (its data directory among them).
                if !is_object_store_url(&copy.output_url) {
                    return Err(SqlError::Forbidden(format!(
                        "COPY TO '{}': quiver writes to object storage only (s3://, gs://, \
                         az://); fetch the result to write it on the client",
                        copy.output_url
                    )));
                }
                if let Some(refused) = copy.options.keys().find_map(|k| refused_option(k)) {
                    return Err(SqlError::Forbidden(refused));
                }
                // The writes are held until the statement has succeeded: each
                // object appears whole, or (the query failed) not at all.
                let url = url::Url::parse(&copy.output_url)
                    .map_err(|e| SqlError::invalid(format!("{}: {e}", copy.output_url)))?;
                let hold = self.object_stores.hold_writes(&url)?;
                match self.count_written(LogicalPlan::Copy(copy)).await {
                    Ok(rows) => {
                        hold.commit().await.map_err(DataFusionError::from)?;
                        Ok(Outcome::Changed(rows))
                    }
                    Err(e) => {
                        hold.abort().await;
                        Err(e)
                    }
                }
            }
            plan => {
                let mut query = self.query(&plan).await?;
                if self.source.plans_again() {
                    query = query.planned_again_by(self.replan(sql, params));
                }
                query.count_from(started);
                Ok(Outcome::Query(query))
            }
        }
    }

    /// Plans `plan` for execution with the per-query memory limit and
    /// timeout; an `EXPLAIN` also shows the session's settings.
    async fn query(&self, plan: &LogicalPlan) -> Result<Query> {
        let state = self.context.state();
        let mut physical = state.create_physical_plan(plan).await?;
        if let Some(rows) = crate::settings::explained_with_settings(
            &physical,
            state.config_options(),
            &self.options.settings,
        )
        .await?
        {
            let schema = rows.schema();
            physical = MemorySourceConfig::try_new_exec(&[vec![rows]], schema, None)?;
        }
        self.limited(&state, physical)
    }

    /// How to plan the query `sql` (bound to `params`) again over the
    /// tables as they are then, with the nodes that answer then.
    fn replan(&self, sql: String, params: Option<ParamValues>) -> Replan {
        let source = Arc::clone(&self.source);
        let context = self.context.clone();
        let memory_limit = self.options.query_memory_limit;
        Replan::new(move || {
            let (source, context, sql, params) = (
                Arc::clone(&source),
                context.clone(),
                sql.clone(),
                params.clone(),
            );
            Box::pin(async move {
                source.recheck().await;
                let state = context.state();
                let plan = bind(crate::identifiers::plan(&state, &sql).await?, params)?;
                let physical = state.create_physical_plan(&plan).await?;
                Ok((physical, task_context(&state, memory_limit)?))
            })
        })
    }

    /// The engine's session with one partition (a plan over one stream or
    /// partition reads it in order, without repartitioning) and no tables:
    /// its catalog list is empty until the caller registers one.
    pub(crate) fn one_partition_state(&self) -> SessionState {
        let base = self.context().state();
        let mut config = base.config().clone().with_target_partitions(1);
        config.options_mut().execution.coalesce_batches = true;
        SessionStateBuilder::new_from_existing(base)
            .with_config(config)
            .with_catalog_list(Arc::new(
                datafusion::catalog::MemoryCatalogProviderList::new(),
            ))
            .build()
    }

    /// `physical`, planned in `state`, ready to run with the per-query memory
    /// limit and timeout.
    pub(crate) fn limited(
        &self,
        state: &SessionState,
        physical: Arc<dyn ExecutionPlan>,
    ) -> Result<Query> {
        let task = task_context(state, self.options.query_memory_limit)?;
        Ok(Query::new(physical, task, self.options.query_timeout))
    }

    /// `CREATE [OR REPLACE] TABLE name [AS query]`: a stored table.
    async fn create_table(&self, create: CreateMemoryTable) -> Result<u64> {
        let name = self.local_name(&create.name)?;
        if self.schema.registered(&name).is_some() {
            return Err(SqlError::invalid(format!(
                "'{name}' is an external table or view: DROP it first"
            )));
        }
        if create.if_not_exists && self.source.exists(&name) {
            return Ok(0);
        }
        let mode = if create.or_replace {
            WriteMode::Replace
        } else {
            WriteMode::Create
        };
        let query = self.query(&create.input).await?;
        let schema = query.schema();
        self.write(&name, mode, schema, &query).await
    }

    /// `INSERT INTO` a stored table: appended (or, for `INSERT OVERWRITE`,
    /// replaced) atomically when the whole input has been read.
    async fn insert(&self, dml: DmlStatement) -> Result<u64> {
        let name = self.local_name(&dml.table_name)?;
        let schema = match self.source.table(&name).await? {
            Some(current) => current.schema(),
            None if self.schema.registered(&name).is_some() => {
                // Files: DataFusion writes them and counts the rows.
                return self.count_written(LogicalPlan::Dml(dml)).await;
            }
            None => return Err(StoreError::NotFound { name }.into()),
        };
        let mode = match dml.op {
            WriteOp::Insert(InsertOp::Append) => WriteMode::Append,
            _ => WriteMode::Replace,
        };
        let query = self.query(&dml.input).await?;
        self.write(&name, mode, schema, &query).await
    }

    /// Runs `query` into the stored table `name` under `schema`, through
    /// the sink: partition after partition, each batch given the table's
    /// fields (same columns; nullability and metadata as the table has them).
    async fn write(
        &self,
        name: &str,
        mode: WriteMode,
        schema: SchemaRef,
        query: &Query,
    ) -> Result<u64> {
        let fields = Arc::clone(&schema);
        let rows = futures::stream::iter(0..query.partitions())
            .map(|partition| query.execute(partition))
            .try_flatten()
            .map(move |batch| {
                let batch = batch?;
                if batch.schema_ref().fields() == fields.fields() {
                    return Ok(batch);
                }
                let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
                RecordBatch::try_new_with_options(
                    Arc::clone(&fields),
                    batch.columns().to_vec(),
                    &options,
                )
                .map_err(|e| SqlError::invalid(format!("cannot write into '{name}': {e}")))
            });
        self.sink.write(name, mode, schema, Box::pin(rows)).await
    }

    async fn count_written(&self, plan: LogicalPlan) -> Result<u64> {
        let state = self.context.state();
        let physical: Arc<dyn ExecutionPlan> = state.create_physical_plan(&plan).await?;
        let mut batches = execute_stream(physical, state.task_ctx())?;
        let mut rows = 0;
        while let Some(batch) = batches.next().await {
            let batch = batch?;
            if let Some(counts) = batch
                .column(0)
                .as_any()
                .downcast_ref::<arrow::array::UInt64Array>()
            {
                rows += counts.values().iter().sum::<u64>();
            }
        }
        Ok(rows)
    }

    /// The name in `quiver.public` a reference points to.
    fn local_name(&self, reference: &TableReference) -> Result<String> {
        let ours = |catalog: Option<&str>, schema: Option<&str>| {
            catalog.is_none_or(|c| c == CATALOG) && schema.is_none_or(|s| s == SCHEMA)
        };
        if ours(reference.catalog(), reference.schema()) {
            // A table name as a client gives it: never quiver's own storage.
            quiver_store::validate_name(reference.table())?;
            Ok(reference.table().to_string())
        } else {
            Err(SqlError::invalid(format!(
                "'{reference}' is outside quiver.public, the one schema quiver has"
            )))
        }
    }
}

/// `plan` with its placeholders bound to `params`, if any.
fn bind(plan: LogicalPlan, params: Option<ParamValues>) -> Result<LogicalPlan> {
    Ok(match params {
        Some(params) => plan.with_param_values(params)?,
        None => plan,
    })
}

/// A task context of `state` whose memory pool holds `memory_limit` bytes.
fn task_context(state: &SessionState, memory_limit: usize) -> Result<Arc<TaskContext>> {
    let runtime = RuntimeEnvBuilder::from_runtime_env(state.runtime_env())
        .with_memory_pool(Arc::new(TrackConsumersPool::new(
            GreedyMemoryPool::new(memory_limit),
            std::num::NonZeroUsize::new(3).unwrap_or(std::num::NonZeroUsize::MIN),
        )))
        .build_arc()?;
    Ok(Arc::new(TaskContext::from(state).with_runtime(runtime)))
}

/// Whether a plan changes tables rather than returning rows.
fn changes_tables(plan: &LogicalPlan) -> bool {
    matches!(
        plan,
        LogicalPlan::Ddl(_)
            | LogicalPlan::Dml(_)
            | LogicalPlan::Statement(_)
            | LogicalPlan::Copy(_)
    )
}

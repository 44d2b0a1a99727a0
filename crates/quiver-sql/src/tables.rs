//! Where the engine's stored tables live, and how it writes them.
//!
//! The engine reads stored tables from a [`TableSource`] and writes them
//! through a [`TableSink`]; it knows nothing of what is behind either. A
//! single node's source and sink are its store ([`StoreTables`]). The Flight
//! service writes through the same tables its DoPut does, and a cluster node
//! (crates/quiver-cluster) gives the engine a source of its own: the
//! catalog's tables, and a session that plans queries across the nodes.

use std::fmt::Debug;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result as DataFusionResult};
use datafusion::execution::SessionStateBuilder;
use futures::StreamExt;
use futures::stream::BoxStream;
use quiver_store::{StoreError, TableStore, WriteMode};

use crate::Result;
use crate::table::StoredTable;

/// The rows a statement writes, in order.
pub type Rows<'a> = BoxStream<'a, Result<RecordBatch>>;

/// The stored tables the engine reads, and how it plans over them.
#[async_trait]
pub trait TableSource: Send + Sync + Debug {
    /// Every stored table by name, with its schema, as last read. Partition
    /// storage names ([`quiver_store::is_reserved`]) are never tables.
    fn tables(&self) -> Vec<(String, SchemaRef)>;

    /// Stored table `name` as it is now; `None` when there is none.
    async fn table(&self, name: &str) -> DataFusionResult<Option<Arc<dyn TableProvider>>>;

    /// Whether stored table `name` exists, as last read.
    fn exists(&self, name: &str) -> bool {
        self.tables().iter().any(|(table, _)| table == name)
    }

    /// The engine's session with the rules its plans need. The default:
    /// plans that run on this node alone ([`single_node_rules`]).
    fn session(&self, builder: SessionStateBuilder) -> SessionStateBuilder {
        single_node_rules(builder)
    }

    /// Whether a query that lost a node before its first row is planned
    /// again ([`TableSource::recheck`] first) and run once more.
    fn plans_again(&self) -> bool {
        false
    }

    /// Finds out now which nodes answer, so that the next plan passes over
    /// those that do not: called before a query is planned again.
    async fn recheck(&self) {}

    /// Where else a client may ask a query, should this node stop answering
    /// (a cluster's live nodes); `None` on a single node.
    fn locations(&self) -> Option<Vec<String>> {
        None
    }
}

/// How the engine writes stored tables: `CREATE TABLE [AS]`, `INSERT`,
/// `DROP TABLE`.
#[async_trait]
pub trait TableSink: Send + Sync + Debug {
    /// Writes `rows` as table `name` (created, replaced or appended to, as
    /// `mode` says), published at once when the last row is in; rows that
    /// fail leave the table as it was. Answers the rows written.
    async fn write(
        &self,
        name: &str,
        mode: WriteMode,
        schema: SchemaRef,
        rows: Rows<'_>,
    ) -> Result<u64>;

    /// Drops table `name`.
    async fn remove(&self, name: &str) -> Result<()>;
}

/// The session rules of plans that stay on one node (their nodes have no
/// codec to cross to another).
pub fn single_node_rules(builder: SessionStateBuilder) -> SessionStateBuilder {
    builder
        .with_physical_optimizer_rules(crate::shared::SharedAggregations::among_datafusions())
        .with_physical_optimizer_rule(Arc::new(crate::file_scan::FileDynamicFilters))
        .with_physical_optimizer_rule(Arc::new(crate::decimal::DecimalArithmetic))
        .with_physical_optimizer_rule(Arc::new(crate::conjunction::SequentialConjunctions))
        .with_physical_optimizer_rule(Arc::new(crate::build_keys::BuildKeySets))
        .with_physical_optimizer_rule(Arc::new(crate::grouping_sets::RollUpGroupingSets))
        .with_physical_optimizer_rule(Arc::new(crate::window_gather::GatherWindowPartitions))
}

/// A store's tables: the source and sink of a single node's engine.
#[derive(Debug, Clone)]
pub struct StoreTables {
    store: Arc<TableStore>,
}

impl StoreTables {
    /// The tables of `store`.
    pub fn new(store: Arc<TableStore>) -> Self {
        Self { store }
    }
}

#[async_trait]
impl TableSource for StoreTables {
    fn tables(&self) -> Vec<(String, SchemaRef)> {
        self.store
            .list("")
            .iter()
            .filter(|t| !quiver_store::is_reserved(t.name()))
            .map(|t| (t.name().to_string(), Arc::clone(t.schema())))
            .collect()
    }

    async fn table(&self, name: &str) -> DataFusionResult<Option<Arc<dyn TableProvider>>> {
        if quiver_store::is_reserved(name) {
            return Ok(None);
        }
        match self.store.get(name) {
            Ok(version) => Ok(Some(Arc::new(StoredTable::new(version)))),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(DataFusionError::External(Box::new(e))),
        }
    }

    fn exists(&self, name: &str) -> bool {
        !quiver_store::is_reserved(name) && self.store.get(name).is_ok()
    }
}

#[async_trait]
impl TableSink for StoreTables {
    async fn write(
        &self,
        name: &str,
        mode: WriteMode,
        schema: SchemaRef,
        mut rows: Rows<'_>,
    ) -> Result<u64> {
        let mut writer = self.store.writer(name, mode, schema, None)?;
        while let Some(batch) = rows.next().await {
            writer.push(batch?)?;
        }
        let rows = writer.num_rows();
        crate::store_write(|| writer.commit())?;
        Ok(rows)
    }

    async fn remove(&self, name: &str) -> Result<()> {
        crate::store_write(|| self.store.remove(name))?;
        Ok(())
    }
}

//! The SQL namespace: `quiver.public` holds every stored table and every
//! table registered over files (or as a view).

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use async_trait::async_trait;
use datafusion::catalog::SchemaProvider;
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::TableType;
use quiver_store::StoreError;

use crate::file_table::FileTable;
use crate::tables::TableSource;

/// The catalog every table lives in.
pub const CATALOG: &str = "quiver";
/// The schema every table lives in.
pub const SCHEMA: &str = "public";

/// What kind of table a name holds, as Flight SQL's GetTables reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableKind {
    /// A table held in quiver's store (DoPut, `CREATE TABLE`, bulk ingest).
    Stored,
    /// Files queried in place (`--table`, `CREATE EXTERNAL TABLE`).
    External,
    /// A view (`CREATE VIEW`).
    View,
}

impl TableKind {
    /// The table type string of Flight SQL / JDBC metadata.
    pub fn table_type(self) -> &'static str {
        match self {
            Self::Stored => "TABLE",
            Self::External => "EXTERNAL TABLE",
            Self::View => "VIEW",
        }
    }

    /// Every table type, as GetTableTypes lists them.
    pub const ALL: [TableKind; 3] = [Self::Stored, Self::External, Self::View];
}

/// `quiver.public`: the stored tables (a [`TableSource`]'s), then the
/// registered ones. A name is one or the other, never both.
#[derive(Debug)]
pub(crate) struct StoreSchema {
    source: Arc<dyn TableSource>,
    registered: RwLock<BTreeMap<String, Arc<dyn TableProvider>>>,
}

impl StoreSchema {
    pub(crate) fn new(source: Arc<dyn TableSource>) -> Self {
        Self {
            source,
            registered: RwLock::default(),
        }
    }

    /// The registered (not stored) table `name`, if any.
    pub(crate) fn registered(&self, name: &str) -> Option<Arc<dyn TableProvider>> {
        self.registered
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// Every table by name, with its kind and schema.
    pub(crate) fn tables(&self) -> Vec<(String, TableKind, arrow::datatypes::SchemaRef)> {
        let mut tables: Vec<_> = self
            .source
            .tables()
            .into_iter()
            .map(|(name, schema)| (name, TableKind::Stored, schema))
            .collect();
        let registered = self
            .registered
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        tables.extend(registered.iter().map(|(name, table)| {
            let kind = match table.table_type() {
                TableType::View => TableKind::View,
                _ => TableKind::External,
            };
            (name.clone(), kind, table.schema())
        }));
        tables.sort_by(|a, b| a.0.cmp(&b.0));
        tables
    }
}

#[async_trait]
impl SchemaProvider for StoreSchema {
    fn table_names(&self) -> Vec<String> {
        self.tables().into_iter().map(|(name, _, _)| name).collect()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        match self.source.table(name).await? {
            Some(table) => Ok(Some(table)),
            None => Ok(self.registered(name)),
        }
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        quiver_store::validate_name(&name).map_err(|e| DataFusionError::External(Box::new(e)))?;
        if self.source.exists(&name) {
            return Err(DataFusionError::External(Box::new(
                StoreError::AlreadyExists { name },
            )));
        }
        let mut registered = self
            .registered
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        // Parquet files in place give the join order estimates.
        Ok(registered.insert(name, FileTable::wrap(table)))
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let mut registered = self
            .registered
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(registered.remove(name))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.source.exists(name) || self.registered(name).is_some()
    }
}

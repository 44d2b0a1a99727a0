//! quiver's SQL engine: DataFusion over the table store.
//!
//! [`SqlEngine`] makes every table of a [`quiver_store::TableStore`] a SQL
//! table of the same name in `quiver.public`, beside tables over Parquet, CSV
//! and Arrow IPC files queried in place. Statements that change tables
//! (`CREATE TABLE ... AS`, `INSERT`, `DROP TABLE`) write through a
//! [`TableSink`], whole or not at all; stored tables come from a
//! [`TableSource`] (a single node's store, or one its caller supplies).
//! Queries come back planned ([`Query`]), to be run partition by partition as
//! a client fetches them, each under a memory limit and a deadline.
//!
//! The Flight SQL protocol around it lives in `quiver-flight`.
#![warn(missing_docs)]

mod blocking;
mod build_keys;
mod catalog;
mod conjunction;
mod decimal;
mod distinct;
mod division;
mod engine;
mod error;
mod file_scan;
mod file_table;
mod filter;
mod grouping_sets;
mod identifiers;
mod join_order;
mod join_sizes;
mod local_files;
mod location;
pub mod metrics;
mod once_plan;
mod params;
mod pushed;
mod query;
#[cfg(test)]
mod rule_testing;
mod scan;
mod settings;
mod shared;
mod stats;
mod stream;
mod table;
mod tables;
mod window_gather;

pub use datafusion::common::ParamValues;

pub use blocking::store_write;
pub use catalog::{CATALOG, SCHEMA, TableKind};
pub use division::decimal_to_double;
pub use engine::{
    DEFAULT_QUERY_MEMORY_LIMIT, DEFAULT_QUERY_TIMEOUT, Effect, EngineOptions, Outcome, Prepared,
    SqlEngine, TableInfo,
};
pub use error::{Result, SqlError};
pub use params::{number_placeholders, row_values};
pub use query::{BatchStream, Operator, Query};
pub use quiver_objects::{BucketSettings, CacheSettings, DEFAULT_CACHE_SIZE, ObjectStoreSettings};
pub use settings::{SETTINGS_ROW, Setting};
pub use stream::{INPUT_TABLE, InputStream};
pub use tables::{Rows, StoreTables, TableSink, TableSource, single_node_rules};

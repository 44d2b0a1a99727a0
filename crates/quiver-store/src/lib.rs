//! Named, versioned Arrow tables held in memory, optionally kept durable in a
//! data directory.
//!
//! The store maps a table name to an immutable [`TableVersion`]. Writers build
//! a new version off to the side ([`TableWriter`]) and publish it atomically on
//! [`TableWriter::commit`]; readers take an `Arc` snapshot and keep seeing that
//! version however the table changes afterwards.
//!
//! Batches are kept as plain [`arrow::record_batch::RecordBatch`]es whose buffers
//! may live anywhere arrow's [`arrow::buffer::Buffer`] can point: the body of a
//! received wire message (no copy on put), a memory-mapped file, or shared
//! memory. Nothing in the store assumes heap allocation.
//!
//! Every byte a version holds is charged to a [`MemoryPool`]; a write that would
//! pass the limit fails with [`StoreError::MemoryLimit`] before anything is
//! published. [`TableLimits`] bound the rows and bytes of one table and the
//! rows of all, refused with [`StoreError::TableLimit`] the same way.
//!
//! A store opened over a data directory ([`TableStore::open`]) writes every
//! put, append, rename, publish and delete to disk before it returns: Arrow
//! IPC segment files plus an atomically replaced manifest (docs/durability.md).
//! On open it reads the tables back by memory-mapping those files.
#![warn(missing_docs)]

mod compact;
mod data_dir;
mod disk;
mod error;
mod facts;
mod lazy_free;
mod limits;
mod manifest;
mod memory;
pub mod metrics;
mod name;
mod segment_file;
mod store;
#[cfg(test)]
mod test_batches;
mod version;

pub use compact::{compact, compact_views, needed_bytes};
pub use data_dir::{DurableOptions, Fsync};
pub use error::{IoFailure, Result, StoreError};
pub use facts::{SegmentFacts, array_bounds};
pub use limits::{Limit, MAX_ROWS_FLAG, MAX_TABLE_BYTES_FLAG, MAX_TABLE_ROWS_FLAG, TableLimits};
pub use memory::{MemoryCharge, MemoryPool, batch_bytes};
pub use name::{
    MAX_NAME_LEN, RESERVED_PREFIX, STAGING_PREFIX, is_reserved, validate_name,
    validate_storage_name,
};
pub use store::{StoreStats, TableStore, TableWriter, WriteMode};
use version::Segment;
pub use version::{TableVersion, partition_rows};

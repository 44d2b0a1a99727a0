//! The store's error type.

/// Result alias for store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Everything that can go wrong in the table store.
///
/// Each variant maps to one gRPC status code in `quiver-flight`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// No table of that name.
    #[error("table '{name}' not found")]
    NotFound {
        /// The name looked up.
        name: String,
    },
    /// The target name of a create or rename is taken.
    #[error("table '{name}' already exists")]
    AlreadyExists {
        /// The name that is taken.
        name: String,
    },
    /// A table name that the store does not accept.
    #[error("invalid table name {name:?}: {reason}")]
    InvalidName {
        /// The offending name (possibly truncated).
        name: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A batch or append whose schema differs from the table's.
    #[error("schema mismatch for table '{name}': {detail}")]
    SchemaMismatch {
        /// The table written to.
        name: String,
        /// What differs.
        detail: String,
    },
    /// Storing this would pass the configured memory limit.
    #[error(
        "memory limit exceeded: storing {requested} more bytes would use {would_use} of the \
         {limit}-byte limit (--max-memory)"
    )]
    MemoryLimit {
        /// Bytes asked for by this write.
        requested: u64,
        /// Total the pool would hold after the request.
        would_use: u64,
        /// The configured limit.
        limit: u64,
    },
    /// Storing this would pass one of the configured [`crate::TableLimits`].
    #[error(
        "table limit exceeded: writing table '{name}' would make {would} {}, over the \
         {max} limit ({})",
        limit.unit(),
        limit.flag()
    )]
    TableLimit {
        /// The table written to.
        name: String,
        /// Which limit.
        limit: crate::Limit,
        /// The count the write would reach.
        would: u64,
        /// The configured limit.
        max: u64,
    },
    /// A partition index outside `0..count`.
    #[error("partition {index} out of range for {count} partitions")]
    InvalidPartition {
        /// Requested partition.
        index: usize,
        /// Number of partitions.
        count: usize,
    },
}

//! The store's error type.

use std::path::PathBuf;

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
    /// A file operation in the data directory failed (disk full, failed fsync,
    /// failed rename, damaged manifest, directory in use).
    #[error("{0}")]
    Io(Box<IoFailure>),
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
    /// A publish whose list of source tables cannot be published as asked
    /// (empty, naming a table twice, or naming the target).
    #[error("cannot publish into table '{into}': {detail}")]
    InvalidSources {
        /// The target table.
        into: String,
        /// What is wrong with the sources.
        detail: String,
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

/// What failed in the data directory, and what it means for the store.
#[derive(Debug, Clone, thiserror::Error)]
#[error("I/O error: could not {op} {path}: {message}; {outcome}")]
pub struct IoFailure {
    /// The operation, in words ("write segment file", "sync directory", ...).
    pub op: &'static str,
    /// The file or directory operated on.
    pub path: PathBuf,
    /// The operating system's error kind.
    pub kind: std::io::ErrorKind,
    /// The operating system's message.
    pub message: String,
    /// What became of the request: see [`IoFailure::UNCHANGED`] and
    /// [`IoFailure::NOT_DURABLE`].
    pub outcome: &'static str,
}

impl IoFailure {
    /// The outcome of a write that failed before anything changed.
    pub const UNCHANGED: &str = "nothing was changed";
    /// The outcome of a write whose new manifest was renamed into place but
    /// whose directory sync failed: it is in effect, but a crash may undo it.
    pub const NOT_DURABLE: &str =
        "the change is in effect but may not survive a crash (the directory sync failed)";
    /// The outcome of a failure while opening the data directory.
    pub const NOT_STARTED: &str = "the store was not opened";

    /// A [`StoreError::Io`].
    pub(crate) fn error(
        op: &'static str,
        path: impl Into<PathBuf>,
        source: &std::io::Error,
        outcome: &'static str,
    ) -> StoreError {
        StoreError::Io(Box::new(Self {
            op,
            path: path.into(),
            kind: source.kind(),
            message: source.to_string(),
            outcome,
        }))
    }

    /// Whether the disk (or the user's quota on it) is full.
    pub fn is_storage_full(&self) -> bool {
        matches!(
            self.kind,
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
        )
    }
}

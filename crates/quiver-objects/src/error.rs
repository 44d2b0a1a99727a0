//! The crate's error type: what setting up a store can fail with. Failures
//! of the stores themselves are `object_store::Error`s, as the stores give
//! them (with the bucket named, [`crate::Bucket`]).

/// Why a bucket's store could not be had.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A name S3 does not allow for a bucket.
    #[error("{0:?} is not a bucket name (3 to 63 lower-case letters, digits, dots and hyphens)")]
    InvalidBucket(String),
    /// A URL of a scheme quiver does not read: refused before anything is
    /// reached, as the server's configuration alone says where it connects.
    #[error(
        "{0}:// locations are not read by quiver: tables in place are local files, s3://, \
         gs:// or az:// URLs"
    )]
    UnsupportedScheme(String),
    /// Another statement is writing the same objects now.
    #[error("{0}")]
    Busy(String),
    /// A store that could not be set up: its settings, or the credentials
    /// files they name.
    #[error("{store}: cannot set up the object store: {reason}")]
    Setup {
        /// `scheme://bucket`.
        store: String,
        /// What went wrong (never a credential).
        reason: String,
    },
}

/// Result alias of the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

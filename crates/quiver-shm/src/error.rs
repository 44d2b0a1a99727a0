//! The shared-memory data plane's error type.
//!
//! It knows no gRPC status: the service that starts the [`crate::ShmServer`]
//! gives it the one mapping from errors to statuses it uses for Flight
//! (`quiver-flight`'s `impl From<Error> for tonic::Status`), so a refusal reads
//! the same over the socket as over gRPC.

use quiver_store::StoreError;

/// Result alias for the shared-memory data plane.
pub type Result<T, E = ShmError> = std::result::Result<T, E>;

/// Everything a shared-memory request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// From the table store (a put's writer, a table's limits).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The request is malformed (framing, ticket kind, memfd seals or size).
    #[error("{0}")]
    InvalidArgument(String),
    /// A client's memfd does not hold a valid Arrow IPC stream.
    #[error("invalid Arrow data: {0}")]
    Decode(String),
    /// An unknown, used or expired ticket.
    #[error("{0}")]
    PermissionDenied(String),
    /// Too many grants or connections at once.
    #[error("{0}")]
    ResourceExhausted(String),
    /// The client went away while the stream was being sent.
    #[error("{0}")]
    Cancelled(String),
    /// A system call failed on the server's side.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ShmError {
    /// An [`ShmError::InvalidArgument`] from anything printable.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidArgument(message.into())
    }
}

/// How the server that starts the data plane turns its errors into the
/// statuses replies carry: their code, and their details (a serialized
/// `google.rpc.Status`, the message and kind), which must not be empty.
pub type StatusOf = fn(ShmError) -> tonic::Status;

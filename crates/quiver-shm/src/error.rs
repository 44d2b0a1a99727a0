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
    /// Refused by the [`crate::PutTarget`] a put went through, with the
    /// status it gave (its code, message and details as they are).
    #[error("{}", .0.message())]
    Status(Box<tonic::Status>),
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

/// A request the data plane finished, for the server's metrics.
#[derive(Debug, Clone, Copy)]
pub struct Finished {
    /// `ShmGet`, `ShmPut`, or `Shm` for a request that was neither.
    pub request: &'static str,
    /// The code replied (`Ok` for a stream sent).
    pub code: tonic::Code,
    /// From the request to the reply (for a get: to the end of the stream
    /// sent, not to the client's frees).
    pub seconds: f64,
    /// Rows stored or sent.
    pub rows: u64,
    /// Arrow bytes stored or sent.
    pub bytes: u64,
}

/// How the server that starts the data plane records a finished request.
pub type RecordOf = fn(Finished);

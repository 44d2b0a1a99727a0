//! The Flight service's error type and its one mapping to `tonic::Status`.

use arrow::error::ArrowError;
use arrow_flight::error::FlightError;
use quiver_sql::SqlError;
use quiver_store::StoreError;
use tonic::Status;

/// Result alias for the Flight service.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Longest message put into a status; longer ones are cut.
const MAX_STATUS_MESSAGE: usize = 4096;

/// Everything a Flight RPC can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// From the table store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The request itself is wrong (bad descriptor, ticket, options, action body).
    #[error("{0}")]
    InvalidArgument(String),
    /// From the SQL engine (a statement that fails to plan or run).
    #[error(transparent)]
    Sql(SqlError),
    /// A handle (query result, prepared statement) that is gone or never was.
    #[error("{0}")]
    NotFound(String),
    /// Too many of something held for clients at once.
    #[error("{0}")]
    ResourceExhausted(String),
    /// The client's data could not be decoded as Arrow IPC.
    #[error("invalid Arrow data: {0}")]
    Decode(String),
    /// The table changed between GetFlightInfo and DoGet of a pinned ticket.
    #[error("{0}")]
    Aborted(String),
    /// An RPC, action or encoding the server does not offer.
    #[error("{0}")]
    Unimplemented(String),
    /// A message over a configured size limit.
    #[error("a message of {len} bytes is over the {limit}-byte limit ({flag})")]
    MessageTooLarge {
        /// Declared length of the message.
        len: usize,
        /// The limit.
        limit: usize,
        /// The flag that sets the limit.
        flag: &'static str,
    },
    /// The client's request stream broke off (reset, cancelled, connection lost).
    #[error("{0}")]
    Cancelled(String),
    /// A status that should reach the client unchanged (e.g. the client cancelled).
    #[error("{}", .0.message())]
    Status(Box<Status>),
    /// No credentials, or credentials that are wrong, expired or forged.
    #[error("{0}")]
    Unauthenticated(String),
    /// The caller's role does not allow the operation.
    #[error("{0}")]
    PermissionDenied(String),
    /// A configuration file or flag is unusable (users file, TLS files).
    #[error("{0}")]
    Config(String),
    /// A bug or an unexpected failure on the server's side.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// An [`Error::InvalidArgument`] from anything printable.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidArgument(message.into())
    }
}

/// The status for an error reading the client's request stream. tonic reports a
/// message over the size limit as `OUT_OF_RANGE`; gRPC's convention (and
/// quiver's) is `RESOURCE_EXHAUSTED`, naming the flag that sets the limit.
pub(crate) fn inbound_status(status: Status) -> Status {
    if status.code() == tonic::Code::OutOfRange && status.message().contains("too large") {
        Status::resource_exhausted(format!(
            "{} (raise the server's --max-message-size, or send smaller batches)",
            status.message()
        ))
    } else {
        status
    }
}

impl From<FlightError> for Error {
    fn from(e: FlightError) -> Self {
        match e {
            FlightError::Tonic(status) => Self::Status(status),
            FlightError::DecodeError(m) | FlightError::ProtocolError(m) => Self::Decode(m),
            FlightError::Arrow(e) => Self::Decode(e.to_string()),
            FlightError::NotYetImplemented(m) => Self::Unimplemented(m),
            FlightError::ExternalError(e) => Self::Internal(e.to_string()),
        }
    }
}

impl From<SqlError> for Error {
    fn from(e: SqlError) -> Self {
        match e {
            SqlError::Store(s) => Self::Store(s),
            SqlError::Denied(effect) => Self::PermissionDenied(format!(
                "permission denied: the statement is {}, which needs the {} role",
                effect.describe(),
                crate::auth::Role::for_effect(effect)
            )),
            other => Self::Sql(other),
        }
    }
}

impl From<ArrowError> for Error {
    fn from(e: ArrowError) -> Self {
        Self::Internal(e.to_string())
    }
}

fn store_code(e: &StoreError) -> tonic::Code {
    match e {
        StoreError::NotFound { .. } => tonic::Code::NotFound,
        StoreError::AlreadyExists { .. } => tonic::Code::AlreadyExists,
        StoreError::InvalidName { .. }
        | StoreError::SchemaMismatch { .. }
        | StoreError::InvalidPartition { .. } => tonic::Code::InvalidArgument,
        StoreError::MemoryLimit { .. } | StoreError::TableLimit { .. } => {
            tonic::Code::ResourceExhausted
        }
        StoreError::Io(failure) if failure.is_storage_full() => tonic::Code::ResourceExhausted,
        StoreError::Io(_) => tonic::Code::Internal,
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Self {
        let code = match &e {
            Error::Store(s) => store_code(s),
            Error::Sql(s) => match s {
                SqlError::Invalid(_) | SqlError::File(_) => tonic::Code::InvalidArgument,
                SqlError::Unsupported(_) => tonic::Code::Unimplemented,
                SqlError::ResourcesExhausted(_) => tonic::Code::ResourceExhausted,
                SqlError::Timeout(_) => tonic::Code::DeadlineExceeded,
                SqlError::Cancelled => tonic::Code::Cancelled,
                SqlError::Store(s) => store_code(s),
                SqlError::Denied(_) => tonic::Code::PermissionDenied,
                SqlError::Internal(_) => tonic::Code::Internal,
            },
            Error::NotFound(_) => tonic::Code::NotFound,
            Error::ResourceExhausted(_) => tonic::Code::ResourceExhausted,
            Error::InvalidArgument(_) | Error::Decode(_) => tonic::Code::InvalidArgument,
            Error::Aborted(_) => tonic::Code::Aborted,
            Error::Unimplemented(_) => tonic::Code::Unimplemented,
            Error::MessageTooLarge { .. } => tonic::Code::ResourceExhausted,
            Error::Cancelled(_) => tonic::Code::Cancelled,
            Error::Status(status) => return (**status).clone(),
            Error::Unauthenticated(_) => tonic::Code::Unauthenticated,
            Error::PermissionDenied(_) => tonic::Code::PermissionDenied,
            Error::Config(_) | Error::Internal(_) => tonic::Code::Internal,
        };
        let mut message = e.to_string();
        if message.len() > MAX_STATUS_MESSAGE {
            let mut cut = MAX_STATUS_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        if code == tonic::Code::Internal {
            tracing::warn!(%message, "internal error");
        }
        Status::new(code, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_stays_small() {
        // Errors travel through every Result on the data path.
        assert!(
            std::mem::size_of::<Error>() <= 64,
            "{}",
            std::mem::size_of::<Error>()
        );
    }

    #[test]
    fn codes() {
        let s: Status = Error::Store(StoreError::NotFound { name: "t".into() }).into();
        assert_eq!(s.code(), tonic::Code::NotFound);
        assert_eq!(s.message(), "table 't' not found");
        let s: Status = Error::Store(StoreError::MemoryLimit {
            requested: 1,
            would_use: 2,
            limit: 1,
        })
        .into();
        assert_eq!(s.code(), tonic::Code::ResourceExhausted);
        let s: Status = Error::Decode("x".repeat(10_000)).into();
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert!(s.message().len() <= MAX_STATUS_MESSAGE + 4);
        let io = |kind| {
            let e = std::io::Error::new(kind, "boom");
            Error::Store(StoreError::Io(Box::new(quiver_store::IoFailure {
                op: "sync directory",
                path: "/data".into(),
                kind: e.kind(),
                message: e.to_string(),
                outcome: quiver_store::IoFailure::UNCHANGED,
            })))
        };
        let s: Status = io(std::io::ErrorKind::StorageFull).into();
        assert_eq!(s.code(), tonic::Code::ResourceExhausted);
        let s: Status = io(std::io::ErrorKind::Other).into();
        assert_eq!(s.code(), tonic::Code::Internal);
        assert_eq!(
            s.message(),
            "I/O error: could not sync directory /data: boom; nothing was changed"
        );
        let s: Status = Error::from(FlightError::Tonic(Box::new(Status::cancelled("gone")))).into();
        assert_eq!(s.code(), tonic::Code::Cancelled);
    }
}

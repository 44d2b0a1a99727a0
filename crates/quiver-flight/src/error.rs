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
    /// Other writes changed the table first, every time the write was
    /// tried: worth trying again.
    #[error("{0}")]
    Conflict(String),
    /// What the request needs is out of reach now (a cluster's catalog or
    /// nodes): worth trying again, here or on another node.
    #[error("{0}")]
    Unavailable(String),
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
    /// A message over a size limit, as the transport reported it.
    #[error("{0}")]
    TooLarge(String),
    /// The client's request stream broke off (reset, cancelled, connection lost).
    #[error("{0}")]
    Cancelled(String),
    /// A time limit on the RPC passed (`--request-timeout`).
    #[error("{0}")]
    Deadline(String),
    /// A request stream went silent for longer than `--stream-idle-timeout`.
    #[error("{0}")]
    Idle(String),
    /// A handler or a response stream panicked: a bug, reported as INTERNAL.
    #[error("internal error in {rpc}: {what}")]
    Panicked {
        /// The RPC whose handler panicked.
        rpc: &'static str,
        /// What the panic said.
        what: String,
    },
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
    /// From a deployed function or its workers.
    #[error(transparent)]
    Function(Box<quiver_functions::FunctionError>),
    /// A bug or an unexpected failure on the server's side.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<quiver_functions::FunctionError> for Error {
    fn from(e: quiver_functions::FunctionError) -> Self {
        Self::Function(Box::new(e))
    }
}

/// The status code of a function error; its kind is its own.
fn function_class(e: &quiver_functions::FunctionError) -> (tonic::Code, &'static str) {
    use quiver_functions::FunctionError as F;
    use tonic::Code;
    let code = match e {
        F::NotFound { .. } => Code::NotFound,
        F::SchemaMismatch(_) => Code::InvalidArgument,
        F::Timeout { .. } => Code::DeadlineExceeded,
        F::NoWorkers(_) => Code::Unavailable,
        F::Raised { .. }
        | F::Output { .. }
        | F::WorkerDied { .. }
        | F::Startup(_)
        | F::Internal(_) => Code::Internal,
    };
    (code, e.kind())
}

/// The status for an error reading the client's request stream. tonic reports a
/// message over the size limit as `OUT_OF_RANGE`; gRPC's convention (and
/// quiver's) is `RESOURCE_EXHAUSTED`, naming the flag that sets the limit.
pub(crate) fn inbound_status(status: Status) -> Status {
    if status.code() == tonic::Code::OutOfRange && status.message().contains("too large") {
        Error::TooLarge(format!(
            "{} (raise the server's --max-message-size, or send smaller batches)",
            status.message()
        ))
        .into()
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
            // Ours, passed through arrow-flight's encoder: kept as it was.
            FlightError::ExternalError(e) => match e.downcast::<Error>() {
                Ok(e) => *e,
                Err(e) => Self::Internal(e.to_string()),
            },
        }
    }
}

impl From<quiver_wire::WireError> for Error {
    fn from(e: quiver_wire::WireError) -> Self {
        use quiver_wire::WireError as W;
        match e {
            W::Malformed(_) => Self::InvalidArgument(e.to_string()),
            W::Compressed => Self::Unimplemented(e.to_string()),
            W::MessageTooLarge { len, limit, flag } => Self::MessageTooLarge { len, limit, flag },
            W::TooLargeToFrame => Self::Internal(e.to_string()),
        }
    }
}

impl From<SqlError> for Error {
    fn from(e: SqlError) -> Self {
        match e {
            SqlError::Store(s) => Self::Store(s),
            // A write through the node's tables: their error as it was.
            SqlError::Sink(e) => match e.downcast::<Error>() {
                Ok(e) => *e,
                Err(e) => Self::Internal(e.to_string()),
            },
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

impl From<quiver_shm::ShmError> for Error {
    fn from(e: quiver_shm::ShmError) -> Self {
        use quiver_shm::ShmError as E;
        match e {
            E::Store(s) => Self::Store(s),
            E::InvalidArgument(m) => Self::InvalidArgument(m),
            E::Decode(m) => Self::Decode(m),
            E::PermissionDenied(m) => Self::PermissionDenied(m),
            E::ResourceExhausted(m) => Self::ResourceExhausted(m),
            E::Cancelled(m) => Self::Cancelled(m),
            E::Internal(m) => Self::Internal(m),
            E::Status(status) => Self::Status(status),
        }
    }
}

/// The status code and the kind (`ErrorInfo.reason`) of a store error.
fn store_class(e: &StoreError) -> (tonic::Code, &'static str) {
    use tonic::Code;
    match e {
        StoreError::NotFound { .. } => (Code::NotFound, "TABLE_NOT_FOUND"),
        StoreError::AlreadyExists { .. } => (Code::AlreadyExists, "TABLE_EXISTS"),
        StoreError::InvalidName { .. } => (Code::InvalidArgument, "INVALID_NAME"),
        StoreError::SchemaMismatch { .. } => (Code::InvalidArgument, "SCHEMA_MISMATCH"),
        StoreError::InvalidPartition { .. } => (Code::InvalidArgument, "INVALID_PARTITION"),
        StoreError::InvalidSources { .. } => (Code::InvalidArgument, "INVALID_ARGUMENT"),
        StoreError::MemoryLimit { .. } => (Code::ResourceExhausted, "MEMORY_LIMIT"),
        StoreError::TableLimit { .. } => (Code::ResourceExhausted, "TABLE_LIMIT"),
        StoreError::Io(failure) if failure.is_storage_full() => {
            (Code::ResourceExhausted, "STORAGE_FULL")
        }
        StoreError::Io(_) => (Code::Internal, "IO_ERROR"),
    }
}

impl Error {
    /// An [`Error::InvalidArgument`] from anything printable.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidArgument(message.into())
    }

    /// The gRPC status code and the error's kind: the `reason` of the
    /// `google.rpc.ErrorInfo` its status carries (docs/protocol.md lists them).
    /// `None` for a status passed through unchanged.
    pub fn class(&self) -> Option<(tonic::Code, &'static str)> {
        use tonic::Code;
        Some(match self {
            Error::Store(s) => store_class(s),
            Error::Sql(s) => match s {
                SqlError::Invalid(_) => (Code::InvalidArgument, "INVALID_SQL"),
                SqlError::File(_) | SqlError::Setting(_) => {
                    (Code::InvalidArgument, "INVALID_ARGUMENT")
                }
                SqlError::Unsupported(_) => (Code::Unimplemented, "UNIMPLEMENTED"),
                SqlError::ResourcesExhausted(_) => (Code::ResourceExhausted, "QUERY_RESOURCES"),
                SqlError::Timeout(_) => (Code::DeadlineExceeded, "DEADLINE_EXCEEDED"),
                SqlError::Cancelled => (Code::Cancelled, "CANCELLED"),
                SqlError::Store(s) => store_class(s),
                // Never here: `From<SqlError>` unwraps it.
                SqlError::Sink(_) => (Code::Internal, "INTERNAL"),
                SqlError::Denied(_) => (Code::PermissionDenied, "PERMISSION_DENIED"),
                SqlError::Internal(_) => (Code::Internal, "INTERNAL"),
                SqlError::Unavailable(_) => (Code::Unavailable, "UNAVAILABLE"),
                SqlError::NotFound(_) => (Code::NotFound, "OBJECT_NOT_FOUND"),
                SqlError::Forbidden(_) => (Code::PermissionDenied, "PERMISSION_DENIED"),
                SqlError::Unauthenticated(_) => (Code::Unauthenticated, "UNAUTHENTICATED"),
                // A function called from SQL: classified as when called alone.
                SqlError::Function(f) => {
                    match f.downcast_ref::<quiver_functions::FunctionError>() {
                        Some(f) => function_class(f),
                        None => (Code::Internal, "INTERNAL"),
                    }
                }
            },
            Error::NotFound(_) => (Code::NotFound, "HANDLE_NOT_FOUND"),
            Error::ResourceExhausted(_) => (Code::ResourceExhausted, "TOO_MANY"),
            Error::InvalidArgument(_) => (Code::InvalidArgument, "INVALID_ARGUMENT"),
            Error::Decode(_) => (Code::InvalidArgument, "INVALID_DATA"),
            Error::Aborted(_) => (Code::Aborted, "VERSION_CHANGED"),
            Error::Conflict(_) => (Code::Aborted, "CONFLICT"),
            Error::Unavailable(_) => (Code::Unavailable, "UNAVAILABLE"),
            Error::Unimplemented(_) => (Code::Unimplemented, "UNIMPLEMENTED"),
            Error::MessageTooLarge { .. } | Error::TooLarge(_) => {
                (Code::ResourceExhausted, "MESSAGE_TOO_LARGE")
            }
            Error::Cancelled(_) => (Code::Cancelled, "CANCELLED"),
            Error::Deadline(_) => (Code::DeadlineExceeded, "DEADLINE_EXCEEDED"),
            Error::Idle(_) => (Code::DeadlineExceeded, "IDLE_TIMEOUT"),
            Error::Status(_) => return None,
            Error::Unauthenticated(_) => (Code::Unauthenticated, "UNAUTHENTICATED"),
            Error::Function(f) => function_class(f),
            Error::PermissionDenied(_) => (Code::PermissionDenied, "PERMISSION_DENIED"),
            Error::Config(_) | Error::Internal(_) | Error::Panicked { .. } => {
                (Code::Internal, "INTERNAL")
            }
        })
    }
}

/// The rich-error details every status carries (`grpc-status-details-bin`):
/// a `google.rpc.Status` holding one `google.rpc.ErrorInfo` whose reason is the
/// error's kind, so clients choose by kind instead of reading the message.
mod details {
    use arrow_flight::sql::Any;
    use prost::Message;

    /// The error-info domain of quiver's kinds.
    pub(crate) const DOMAIN: &str = "quiver";
    /// The type URL of `google.rpc.ErrorInfo`.
    pub(crate) const ERROR_INFO_TYPE: &str = "type.googleapis.com/google.rpc.ErrorInfo";

    /// `google.rpc.Status`.
    #[derive(Clone, PartialEq, Message)]
    pub(crate) struct RpcStatus {
        #[prost(int32, tag = "1")]
        pub(crate) code: i32,
        #[prost(string, tag = "2")]
        pub(crate) message: String,
        #[prost(message, repeated, tag = "3")]
        pub(crate) details: Vec<Any>,
    }

    /// `google.rpc.ErrorInfo` (its `metadata` map left empty).
    #[derive(Clone, PartialEq, Message)]
    pub(crate) struct ErrorInfo {
        #[prost(string, tag = "1")]
        pub(crate) reason: String,
        #[prost(string, tag = "2")]
        pub(crate) domain: String,
    }

    /// The encoded details of a status.
    pub(crate) fn encode(code: tonic::Code, message: &str, kind: &str) -> Vec<u8> {
        let info = ErrorInfo {
            reason: kind.to_string(),
            domain: DOMAIN.to_string(),
        };
        RpcStatus {
            code: code as i32,
            message: message.to_string(),
            details: vec![Any {
                type_url: ERROR_INFO_TYPE.to_string(),
                value: info.encode_to_vec().into(),
            }],
        }
        .encode_to_vec()
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Self {
        let (code, kind) = match &e {
            Error::Status(status) => return (**status).clone(),
            other => other.class().unwrap_or((tonic::Code::Internal, "INTERNAL")),
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
        crate::metrics::record_rejection(code, kind);
        let details = details::encode(code, &message, kind);
        Status::with_details(code, message, details.into())
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

    #[test]
    fn every_status_carries_its_kind_in_the_details() {
        use prost::Message;
        let s: Status = Error::Store(StoreError::NotFound { name: "t".into() }).into();
        let status = details::RpcStatus::decode(s.details()).unwrap();
        assert_eq!(status.code, tonic::Code::NotFound as i32);
        assert_eq!(status.message, "table 't' not found");
        assert_eq!(status.details.len(), 1);
        assert_eq!(status.details[0].type_url, details::ERROR_INFO_TYPE);
        let info = details::ErrorInfo::decode(status.details[0].value.clone()).unwrap();
        assert_eq!(info.reason, "TABLE_NOT_FOUND");
        assert_eq!(info.domain, "quiver");
        let kind = |e: Error| {
            let s = Status::from(e);
            let status = details::RpcStatus::decode(s.details()).unwrap();
            details::ErrorInfo::decode(status.details[0].value.clone())
                .unwrap()
                .reason
        };
        assert_eq!(kind(Error::Aborted("x".into())), "VERSION_CHANGED");
        assert_eq!(kind(Error::NotFound("x".into())), "HANDLE_NOT_FOUND");
        assert_eq!(kind(Error::Idle("x".into())), "IDLE_TIMEOUT");
        let sources = Error::Store(StoreError::InvalidSources {
            into: "t".into(),
            detail: "no source tables given".into(),
        });
        assert_eq!(
            sources.class(),
            Some((tonic::Code::InvalidArgument, "INVALID_ARGUMENT"))
        );
        assert_eq!(kind(sources), "INVALID_ARGUMENT");
        assert_eq!(
            kind(Error::Panicked {
                rpc: "DoGet",
                what: "x".into()
            }),
            "INTERNAL"
        );
    }
}

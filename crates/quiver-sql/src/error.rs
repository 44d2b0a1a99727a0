//! The SQL engine's error type.
//!
//! DataFusion reports every failure as one `DataFusionError`; here it is sorted
//! once, by what the client should do about it, so the Flight layer can give
//! each kind its status code without looking inside DataFusion's errors.

use std::time::Duration;

use datafusion::error::DataFusionError;
use quiver_store::StoreError;

/// Result alias for the SQL engine.
pub type Result<T, E = SqlError> = std::result::Result<T, E>;

/// Everything planning or running a statement can fail with.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// The statement is wrong: it does not parse, names what does not exist,
    /// has mismatched types, or fails on the data (a failed cast, say).
    #[error("{0}")]
    Invalid(String),
    /// SQL quiver does not run (transactions, `SET`, `DELETE`, ...).
    #[error("{0}")]
    Unsupported(String),
    /// The query needed more memory than its limit.
    #[error("{0} (raise the server's --query-memory-limit, or narrow the query)")]
    ResourcesExhausted(String),
    /// The query ran longer than its time limit.
    #[error("the query ran longer than its {0:?} limit (the server's --query-timeout)")]
    Timeout(Duration),
    /// The query was cancelled by a client.
    #[error("the query was cancelled")]
    Cancelled,
    /// A function registered with [`crate::SqlEngine::register_udf`] failed:
    /// its own error, kept whole for the caller to classify (the engine does
    /// not know what it calls). A UDF reports it as
    /// `DataFusionError::External(Box::new(SqlError::Function(..)))`.
    #[error("{0}")]
    Function(std::sync::Arc<dyn std::error::Error + Send + Sync>),
    /// A [`crate::TableSink`] refused a write or a drop: its own error, kept
    /// whole for the caller to classify (the engine does not know what is
    /// behind the sink). Its missing tables, names taken and memory limits
    /// are [`SqlError::Store`] instead.
    #[error("{0}")]
    Sink(Box<dyn std::error::Error + Send + Sync>),
    /// From the table store (a missing table, a name taken, the memory limit).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A file or directory given to `--table` or `CREATE EXTERNAL TABLE` is unusable.
    #[error("{0}")]
    File(String),
    /// A DataFusion setting (`--sql-setting`) DataFusion does not have, or
    /// a value it does not take.
    #[error("{0}")]
    Setting(String),
    /// The statement does more than the caller may.
    #[error("permission denied: the statement is {}, more than this caller may run", .0.describe())]
    Denied(crate::Effect),
    /// Data the statement reads is out of reach now: a cluster node that
    /// does not answer, or no live node holding a partition it scans. Worth
    /// trying again.
    #[error("{0}")]
    Unavailable(String),
    /// Object storage has no such bucket or object (a table in place whose
    /// files are gone).
    #[error("{0}")]
    NotFound(String),
    /// Object storage refused the server's credentials for a bucket or
    /// object, or a statement asked to reach storage the way only the
    /// server's configuration may say (an endpoint, credentials, a URL
    /// scheme quiver does not read).
    #[error("{0}")]
    Forbidden(String),
    /// Object storage does not know the server's credentials.
    #[error("{0}")]
    Unauthenticated(String),
    /// A bug or an unexpected failure.
    #[error("internal error: {0}")]
    Internal(String),
}

impl SqlError {
    /// An [`SqlError::Invalid`] from anything printable.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid(message.into())
    }
}

impl From<quiver_objects::Error> for SqlError {
    fn from(e: quiver_objects::Error) -> Self {
        objects_kind(&e)(e.to_string())
    }
}

/// The kind of a store that could not be had.
fn objects_kind(error: &quiver_objects::Error) -> fn(String) -> SqlError {
    use quiver_objects::Error as E;
    match error {
        E::InvalidBucket(_) => SqlError::Invalid,
        E::UnsupportedScheme(_) => SqlError::Forbidden,
        E::Setup { .. } => SqlError::File,
        E::Busy(_) => SqlError::Unavailable,
    }
}

impl From<DataFusionError> for SqlError {
    fn from(e: DataFusionError) -> Self {
        // The message keeps DataFusion's context; the kind comes from the root.
        let message = e.to_string();
        if let Some(kind) = object_store_kind(&e) {
            return kind(message);
        }
        match e.find_root() {
            DataFusionError::ResourcesExhausted(_) => Self::ResourcesExhausted(message),
            DataFusionError::NotImplemented(_) => Self::Unsupported(message),
            DataFusionError::Internal(_) => Self::Internal(message),
            DataFusionError::External(inner) => match inner.downcast_ref::<SqlError>() {
                Some(SqlError::Store(s)) => Self::Store(s.clone()),
                Some(SqlError::Timeout(d)) => Self::Timeout(*d),
                Some(SqlError::Cancelled) => Self::Cancelled,
                Some(SqlError::ResourcesExhausted(m)) => Self::ResourcesExhausted(m.clone()),
                Some(SqlError::Function(f)) => Self::Function(std::sync::Arc::clone(f)),
                Some(SqlError::Forbidden(m)) => Self::Forbidden(m.clone()),
                Some(SqlError::File(m)) => Self::File(m.clone()),
                _ => match inner.downcast_ref::<StoreError>() {
                    Some(s) => Self::Store(s.clone()),
                    // A call to another cluster node that did not get
                    // through (datafusion-distributed passes its status on,
                    // or, from a stage on a third node, its text).
                    None if out_of_reach(inner.as_ref()) || says_out_of_reach(&message) => {
                        Self::Unavailable(message)
                    }
                    None => Self::Invalid(message),
                },
            },
            // A cluster node or partition out of reach (quiver-cluster
            // reports it so, and the kind survives the trip between nodes).
            DataFusionError::IoError(e) if is_unreachable(e.kind()) => Self::Unavailable(message),
            DataFusionError::IoError(_) | DataFusionError::ObjectStore(_) => Self::File(message),
            // Plan, SQL, schema, execution and Arrow errors (a failed cast, a
            // division by zero) are the statement's.
            _ => Self::Invalid(message),
        }
    }
}

/// The kind of a failure of object storage, if `error` is one or comes from
/// one (a scan's read reaches DataFusion as a Parquet or Arrow error whose
/// source is the store's): a store that could not be had, or one that
/// failed. The local file system's own failures stay [`SqlError::File`].
fn object_store_kind(error: &DataFusionError) -> Option<fn(String) -> SqlError> {
    use object_store::Error as E;
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = next {
        if let Some(objects) = error.downcast_ref::<quiver_objects::Error>() {
            return Some(objects_kind(objects));
        }
        if let Some(store) = error.downcast_ref::<E>() {
            return Some(match store {
                E::NotFound { .. } => SqlError::NotFound,
                E::PermissionDenied { .. } => SqlError::Forbidden,
                E::Unauthenticated { .. } => SqlError::Unauthenticated,
                // A store that did not answer, or answered with a failure
                // of its own (retried already), or an object that changed
                // while it was read: worth trying again.
                E::Generic { store, .. } if *store != "LocalFileSystem" => SqlError::Unavailable,
                E::Precondition { .. } => SqlError::Unavailable,
                _ => SqlError::File,
            });
        }
        next = error.source();
    }
    None
}

/// Whether `error`, or an error it comes from, says a peer did not answer:
/// a gRPC status UNAVAILABLE, an I/O error of a peer out of reach, or a
/// status the transport made (its source an HTTP error: the connection
/// closed, or its body broke off), not one the peer answered.
fn out_of_reach(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(status) = error.downcast_ref::<tonic::Status>()
            && status.code() == tonic::Code::Unavailable
        {
            return true;
        }
        if error.is::<hyper::Error>() {
            return true;
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && is_unreachable(io.kind())
        {
            return true;
        }
        next = error.source();
    }
    false
}

/// Whether an error that crossed nodes as text alone says what
/// [`out_of_reach`] finds in a status: datafusion-distributed sends a
/// stage's external error on as its message, so a status a stage's own call
/// to a lost node ended with reaches the query's node as tonic's words for
/// it (`code: '...', message: ..., source: ...`).
fn says_out_of_reach(text: &str) -> bool {
    let unavailable = format!("code: '{}'", tonic::Code::Unavailable.description());
    text.contains(&unavailable)
        || text.contains("source: hyper::Error(")
        || text.contains("source: tonic::transport::Error(")
}

/// Whether an I/O error says a peer is out of reach.
fn is_unreachable(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        kind,
        K::NotConnected
            | K::ConnectionRefused
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::BrokenPipe
            | K::HostUnreachable
            | K::NetworkUnreachable
            | K::NetworkDown
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_come_from_the_root_cause() {
        let e = DataFusionError::ResourcesExhausted("pool full".into()).context("sorting");
        assert!(matches!(SqlError::from(e), SqlError::ResourcesExhausted(_)));
        let e = DataFusionError::Plan("table 'x' not found".into());
        assert!(matches!(SqlError::from(e), SqlError::Invalid(m) if m.contains("'x'")));
        let e = DataFusionError::External(Box::new(SqlError::Timeout(Duration::from_secs(1))));
        assert!(matches!(SqlError::from(e), SqlError::Timeout(_)));
        let e = DataFusionError::NotImplemented("DELETE".into());
        assert!(matches!(SqlError::from(e), SqlError::Unsupported(_)));
        let down = std::io::Error::new(std::io::ErrorKind::NotConnected, "node n3 is down");
        let e = DataFusionError::IoError(down).context("scanning");
        assert!(matches!(SqlError::from(e), SqlError::Unavailable(m) if m.contains("n3")));
        // A worker call that did not get through, as datafusion-distributed
        // reports it; a status of another kind stays the statement's.
        let refused = tonic::Status::unavailable("tcp connect error: Connection refused");
        let e = DataFusionError::External(Box::new(refused));
        assert!(matches!(SqlError::from(e), SqlError::Unavailable(_)));
        // A node that died while a stage streamed to it: the pipe broke.
        let broken = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stream closed");
        let e = DataFusionError::External(Box::new(broken));
        assert!(matches!(SqlError::from(e), SqlError::Unavailable(_)));
        let bad = tonic::Status::invalid_argument("no such column");
        let e = DataFusionError::External(Box::new(bad));
        assert!(matches!(SqlError::from(e), SqlError::Invalid(_)));
        let missing = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        assert!(matches!(
            SqlError::from(DataFusionError::IoError(missing)),
            SqlError::File(_)
        ));
    }

    /// A status the transport made, not one a peer answered: a stage whose
    /// node died under it ends with a status whose source is the HTTP
    /// layer's error (the connection closed, its body broke off).
    #[tokio::test]
    async fn a_status_the_transport_made_is_unavailable() {
        use tokio::io::AsyncWriteExt;
        let (mut client, server) = tokio::io::duplex(1024);
        client.write_all(b"not HTTP\r\n\r\n").await.unwrap();
        let service = hyper::service::service_fn(|_| async {
            Ok::<_, std::convert::Infallible>(hyper::Response::new(String::new()))
        });
        let broken = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(server), service)
            .await
            .expect_err("not HTTP");
        let status = tonic::Status::from_error(Box::new(broken));
        assert_eq!(status.code(), tonic::Code::Unknown);
        let text = status.to_string();
        let e = DataFusionError::External(Box::new(status));
        assert!(matches!(SqlError::from(e), SqlError::Unavailable(_)));
        // The same from a stage on another node: its text alone.
        let e = DataFusionError::External(text.into());
        assert!(matches!(SqlError::from(e), SqlError::Unavailable(_)));
    }

    /// A stage on a third node whose call to a lost node was refused: its
    /// status reaches the query's node as text.
    #[test]
    fn a_status_that_crossed_nodes_as_text_keeps_its_kind() {
        let refused = tonic::Status::unavailable("tcp connect error");
        let e = DataFusionError::External(refused.to_string().into());
        assert!(matches!(SqlError::from(e), SqlError::Unavailable(_)));
        let bad = tonic::Status::invalid_argument("no such column");
        let e = DataFusionError::External(bad.to_string().into());
        assert!(matches!(SqlError::from(e), SqlError::Invalid(_)));
    }
}

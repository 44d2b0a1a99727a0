//! The crate's one error type.

/// What can go wrong talking to etcd.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// An endpoint that is no URI, or a TLS setting tonic refuses.
    #[error("etcd endpoint: {0}")]
    Endpoint(String),
    /// etcd answered with an error, or could not be reached (tonic's
    /// UNAVAILABLE, DEADLINE_EXCEEDED, ...).
    #[error("etcd: {} ({:?})", .0.message(), .0.code())]
    Status(Box<tonic::Status>),
    /// etcd's authentication refused the user, or is not on.
    #[error("etcd authentication: {0}")]
    Auth(String),
    /// etcd ended a stream (a watch, a lease's keep-alive) or refused to
    /// keep it going.
    #[error("etcd: {0}")]
    Stream(String),
}

/// Shorthand for results of this crate.
pub type Result<T, E = EtcdError> = std::result::Result<T, E>;

impl From<tonic::Status> for EtcdError {
    fn from(status: tonic::Status) -> Self {
        Self::Status(Box::new(status))
    }
}

impl EtcdError {
    /// The gRPC code etcd (or the transport) answered with; UNAVAILABLE for
    /// a stream that ended, INVALID_ARGUMENT for a bad endpoint.
    pub fn code(&self) -> tonic::Code {
        match self {
            Self::Endpoint(_) => tonic::Code::InvalidArgument,
            Self::Auth(_) => tonic::Code::Unauthenticated,
            Self::Status(status) => status.code(),
            Self::Stream(_) => tonic::Code::Unavailable,
        }
    }
}

//! The crate's one error type, and the one place it becomes a Python exception.
//!
//! A call's failure reaches Python as `quiver._core.CallError(code, message,
//! details)`: the gRPC status code (a number), the message, and the
//! `grpc-status-details-bin` trailer (a serialized `google.rpc.Status`, empty
//! from servers that send none). `quiver.errors` turns it into the same
//! `QuiverError` subclass a pyarrow call's failure becomes.

use arrow::error::ArrowError;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use quiver_wire::WireError;
use tonic::Code;

pyo3::create_exception!(
    _core,
    CallError,
    PyException,
    "A Flight call failed: args are (code, message, details)."
);

/// What can go wrong in the core.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The server (or the transport) ended the call with this status.
    #[error("{}", .0.message())]
    Status(Box<tonic::Status>),
    /// No connection could be made to a location.
    #[error("cannot connect to {location}: {message}")]
    Connect {
        /// The location asked for.
        location: String,
        /// What the transport said.
        message: String,
    },
    /// A bad argument from the Python side.
    #[error("{0}")]
    Invalid(String),
    /// The server sent data that is not a well-formed Flight stream.
    #[error("the server sent a malformed stream: {0}")]
    Malformed(String),
    /// The batches given to a put could not be read or encoded.
    #[error("{0}")]
    Source(ArrowError),
    /// A failure inside the core: a task's panic, threads it could not
    /// start, a request it could not build.
    #[error("{0}")]
    Internal(String),
}

/// Shorthand for results of this crate.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

impl From<tonic::Status> for Error {
    fn from(status: tonic::Status) -> Self {
        Self::Status(Box::new(status))
    }
}

impl From<WireError> for Error {
    fn from(e: WireError) -> Self {
        Self::Malformed(e.to_string())
    }
}

impl Error {
    /// The gRPC status code the error is reported with.
    fn code(&self) -> Code {
        match self {
            Error::Status(s) => s.code(),
            Error::Connect { .. } => Code::Unavailable,
            Error::Invalid(_) => Code::InvalidArgument,
            Error::Malformed(_) => Code::Internal,
            Error::Source(_) => Code::InvalidArgument,
            Error::Internal(_) => Code::Internal,
        }
    }
}

impl From<Error> for PyErr {
    fn from(e: Error) -> Self {
        match e {
            Error::Invalid(message) => PyValueError::new_err(message),
            e => Python::attach(|py| {
                let details: &[u8] = match &e {
                    Error::Status(s) => s.details(),
                    _ => &[],
                };
                CallError::new_err((
                    e.code() as i32,
                    e.to_string(),
                    PyBytes::new(py, details).unbind(),
                ))
            }),
        }
    }
}

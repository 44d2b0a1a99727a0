//! The crate's one error type, and the one place it becomes a Python exception.
//!
//! A call's failure reaches Python as `quiver._core.CallError(code, message,
//! details)`: the gRPC status code (a number), the message, and the
//! `grpc-status-details-bin` trailer (a serialized `google.rpc.Status`, empty
//! from servers that send none). `quiver.errors` turns it into the same
//! `QuiverError` subclass a pyarrow call's failure becomes.

use arrow::error::ArrowError;
use prost::Message;
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
    /// No location of an endpoint could be reached: the last one's error.
    #[error("{last}{}", tried_suffix(.tried))]
    Unreachable {
        /// The locations tried, in order.
        tried: Vec<String>,
        /// The last location's error.
        last: Box<Error>,
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
            Error::Unreachable { last, .. } => last.code(),
            Error::Invalid(_) => Code::InvalidArgument,
            Error::Malformed(_) => Code::Internal,
            Error::Source(_) => Code::InvalidArgument,
            Error::Internal(_) => Code::Internal,
        }
    }

    /// Whether the error says the location could not be reached (no
    /// connection, or UNAVAILABLE), so another location of the same endpoint
    /// may serve the call (the pyarrow path's rule too:
    /// `quiver._endpoints.unreachable`).
    pub(crate) fn is_unreachable(&self) -> bool {
        match self {
            Error::Connect { .. } => true,
            Error::Status(s) => s.code() == Code::Unavailable,
            _ => false,
        }
    }

    /// The server's `grpc-status-details-bin` trailer (a serialized
    /// `google.rpc.Status`), empty if it sent none. For an unreachable
    /// endpoint it is the last location's, its message naming the locations
    /// tried too (the Python side takes the message from it).
    fn details(&self) -> Vec<u8> {
        match self {
            Error::Status(s) => s.details().to_vec(),
            Error::Unreachable { tried, last } => {
                let details = last.details();
                match RpcStatus::decode(details.as_slice()) {
                    Ok(status) if !details.is_empty() => RpcStatus {
                        message: format!("{}{}", status.message, tried_suffix(tried)),
                        ..status
                    }
                    .encode_to_vec(),
                    _ => details,
                }
            }
            _ => Vec::new(),
        }
    }
}

/// What an unreachable endpoint's error adds to the last location's message
/// (the Python client's pyarrow path words it the same).
fn tried_suffix(tried: &[String]) -> String {
    format!(" (locations tried: {})", tried.join(", "))
}

/// A `google.rpc.Status`, its details kept as the bytes of each `Any`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RpcStatus {
    /// The gRPC status code.
    #[prost(int32, tag = "1")]
    pub(crate) code: i32,
    /// The error's message.
    #[prost(string, tag = "2")]
    pub(crate) message: String,
    /// Each detail, an `Any`'s bytes.
    #[prost(bytes = "vec", repeated, tag = "3")]
    pub(crate) details: Vec<Vec<u8>>,
}

impl From<Error> for PyErr {
    fn from(e: Error) -> Self {
        match e {
            Error::Invalid(message) => PyValueError::new_err(message),
            e => Python::attach(|py| {
                CallError::new_err((
                    e.code() as i32,
                    e.to_string(),
                    PyBytes::new(py, &e.details()).unbind(),
                ))
            }),
        }
    }
}

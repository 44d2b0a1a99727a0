//! Flight's data RPCs on the wire, by hand, for both ends of quiver's
//! connections: the server's DoGet and DoPut below tonic (`quiver-flight`'s
//! `wire/`) and the Python package's Rust client (`quiver-python`).
//!
//! - [`grpc`]: gRPC length-prefixed messages and the FlightData framing
//!   around an IPC message whose body stays the Arrow buffers it references.
//! - [`flight_data`]: a FlightData parsed off the HTTP/2 frames it arrived in,
//!   its body copied once into 64-byte aligned memory the decoded arrays use
//!   as is.
//! - [`body_pool`]: where those bodies are copied to, reused warm once the
//!   arrays that held them are dropped.
//! - [`body`]: the HTTP/2 body of a stream of framed messages (a server's
//!   response with its status trailers, or a client's request).
//! - [`http2`]: the RPC paths, the flow-control windows, and a location's URI.
//! - [`coalesce`]: a connection's small HTTP/2 writes gathered into few large
//!   ones, for peers that keep 16 KiB frames (the server's connections and
//!   the clients' channels).
#![warn(missing_docs)]

pub mod body;
pub mod body_pool;
pub mod coalesce;
mod error;
pub mod flight_data;
pub mod grpc;
pub mod http2;

pub use body::GrpcBody;
pub use body_pool::BodyPool;
pub use coalesce::Coalesced;
pub use error::{WireError, malformed, with_causes};
pub use flight_data::{Received, ipc_message, parse_flight_data};
pub use grpc::{grpc_frame, grpc_frame_with, grpc_message, message_length};

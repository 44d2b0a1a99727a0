//! quiver's own DoGet data path: Arrow buffers to the socket without copies.
//!
//! The stock path (arrow-flight's `FlightDataEncoder` and tonic's prost codec)
//! copies every body twice on the way out: the IPC writer copies the arrays
//! into one `Vec`, and prost copies the message into tonic's send buffer. Here
//! arrow-ipc's [`arrow::ipc::writer::StreamEncoder`] describes each message as
//! references to the arrays' own buffers ([`frames`]), the gRPC and protobuf
//! framing around them is a few bytes written by hand ([`grpc_body`]), and the
//! resulting chain of `Bytes` goes to hyper as the response body, which hands
//! large chunks to the socket as they are. [`DirectGetLayer`] routes DoGet
//! requests here before tonic sees them; every other RPC passes through.
//!
//! It also sends the table's schema as stored: arrow-flight 59's encoder
//! rewrites fields on the way (it turns `LargeList` into `List` and drops union
//! nullability).

mod do_get;
pub(crate) mod frames;
pub(crate) mod grpc_body;

pub use do_get::{DO_GET_PATH, DirectGet, DirectGetLayer};

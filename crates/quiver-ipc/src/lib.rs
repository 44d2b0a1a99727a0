//! Arrow IPC messages by reference, shared by quiver's gRPC data path
//! (`quiver-flight`'s `wire/`) and its shared-memory data plane (`quiver-shm`).
//!
//! - [`encode`]: record batches as IPC messages whose bodies are chains of
//!   references to the arrays' own buffers ([`FlightMessageEncoder`]), and
//!   [`Rope`], a sequence of received bytes read front to back without copying.
//! - [`bounds`]: refusing IPC messages whose buffers lie outside their body,
//!   before arrow-ipc's decoder would panic on them.
#![warn(missing_docs)]

pub mod bounds;
pub mod encode;
pub mod testing;

pub use bounds::{buffers_within, check_buffers};
pub use encode::{FlightMessage, FlightMessageEncoder, NO_HEADER, Rope, split, to_bytes};

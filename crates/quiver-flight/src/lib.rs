//! quiver's Arrow Flight service.
//!
//! [`QuiverService`] implements every RPC of the standard `FlightService` over a
//! [`quiver_store::TableStore`], so any Flight client (pyarrow, Java, Go, Rust,
//! C++) works unchanged. [`server::serve`] runs it with quiver's transport
//! settings. The wire conventions (names, tickets, put options, actions) are
//! specified in `docs/protocol.md`.
//!
//! Flight SQL shares the port: a descriptor, ticket or action that carries a
//! Flight SQL message goes to the SQL side (`sql`), which runs statements on
//! [`quiver_sql::SqlEngine`] over the same store.
//!
//! Errors of every kind meet in [`Error`], which becomes a `tonic::Status` in
//! exactly one place (`impl From<Error> for tonic::Status`).
#![warn(missing_docs)]

pub mod actions;
pub mod auth;
mod descriptor;
mod error;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
mod guard;
mod ipc_bounds;
pub mod lingering;
mod put_options;
mod request_body;
mod rpc_log;
pub mod server;
mod service;
pub mod shm;
mod sql;
pub mod ticket;
pub mod timeouts;
mod tls;
pub mod wire;

pub use descriptor::table_name;
pub use error::{Error, Result};
pub use put_options::{MAX_PARTITIONS, PutOptions};
pub use request_body::{WatchBody, WatchBodyLayer};
pub use server::{Http2Config, ServeError, ServerConfig, ServerLimits, serve};
pub use service::{QuiverService, ServiceOptions};
pub use tls::TlsConfig;

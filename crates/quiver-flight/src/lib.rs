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

mod actions;
pub mod auth;
mod body_watch;
pub mod cluster;
mod console;
mod descriptor;
mod error;
mod exchange;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
mod health;
pub mod lingering;
pub mod metrics;
mod panics;
mod published;
mod put_options;
mod request;
mod requests;
mod rpc_log;
mod running;
pub mod server;
mod service;
mod session;
mod sql;
pub mod tables;
pub mod ticket;
pub mod timeouts;
mod tls;
pub mod wire;

pub use body_watch::{WatchBody, WatchBodyLayer};
pub use descriptor::table_name;
pub use error::{Error, Result};
pub use exchange::STOP_INPUT;
pub use published::Published;
pub use put_options::{MAX_PARTITIONS, MAX_REQUEST_ID, Placement, PutOptions};
pub use request::partition_descriptor;
pub use server::{Http2Config, ServeError, ServerConfig, ServerLimits, serve};
pub use service::{QuiverService, ServiceOptions};
pub use tls::TlsConfig;

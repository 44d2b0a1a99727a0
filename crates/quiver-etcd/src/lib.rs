//! The etcd v3 client of quiver's cluster.
//!
//! quiver keeps its cluster catalog in etcd: keys read whole or by prefix,
//! compare-and-swap transactions, leases kept alive, and a watch of the
//! cluster's keys. This crate speaks that part of etcd's gRPC API on tonic,
//! the same tonic as the Flight service. Its protobuf code is compiled at
//! build time from `proto/etcd.proto` by protox, a protobuf compiler in
//! Rust, so building quiver needs cargo alone: no `protoc` anywhere.
//!
//! Every unary call and the start of every stream carry the deadline of
//! [`ConnectOptions::request_timeout`]; connections send HTTP/2 keep-alive
//! pings, so a frozen etcd shows up as an error within a bounded time
//! instead of a hang.
//!
//! ```no_run
//! # async fn example() -> Result<(), quiver_etcd::EtcdError> {
//! use quiver_etcd::{Client, Compare, CompareResult, ConnectOptions, RequestOp};
//!
//! let client = Client::connect(&["127.0.0.1:2379".to_string()], ConnectOptions::default())?;
//! client.put("/app/a", "1", 0).await?;
//! let current = client.get("/app/a").await?.expect("just written");
//! // Write /app/a again only if no one changed it since it was read.
//! let swapped = client
//!     .txn(
//!         vec![Compare::mod_revision("/app/a", CompareResult::Equal, current.mod_revision)],
//!         vec![RequestOp::put("/app/a", "2", 0)],
//!         vec![],
//!     )
//!     .await?
//!     .succeeded;
//! # let _ = swapped;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod client;
mod error;
mod proto;
pub mod testing;

pub use client::{Client, ConnectOptions, Credentials, LeaseKeeper, Tls, Watcher};
pub use error::{EtcdError, Result};
pub use proto::compare::CompareResult;
pub use proto::{
    Compare, Event, KeyValue, RangeResponse, RequestOp, TxnResponse, WatchResponse,
    event::EventType,
};

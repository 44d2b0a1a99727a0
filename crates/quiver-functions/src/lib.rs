//! Operator-deployed Python functions, run beside the server in worker
//! processes (docs/functions.md).
//!
//! [`FunctionPool`] keeps `--function-workers` Python processes alive, each
//! started fresh (`python -m quiver.functions.worker MODULE...`) with one end of
//! a socketpair as its descriptor 3 ([`quiver_shm::process`]). The first
//! worker's hello fixes the [`Registry`] of functions served. A call hands one
//! record batch to the next free worker and awaits its result; batches travel
//! as Arrow IPC streams, inline when small, otherwise in sealed memfds that
//! the other side maps and reads in place ([`protocol`]). A worker that
//! crashes or runs past `--function-timeout` is replaced; the batch it ran
//! fails with a clear [`FunctionError`], every other call goes on.
//!
//! This crate knows neither Flight nor the store: the Flight service
//! (`quiver-flight`'s `exchange`) streams batches through [`FunctionPool::call`]
//! and maps [`FunctionError`] to a status in its one place.
#![warn(missing_docs)]

mod config;
mod error;
mod metrics;
mod pool;
pub mod protocol;
mod registry;
mod udf;
mod worker;

pub use config::{DEFAULT_STARTUP_TIMEOUT, DEFAULT_TIMEOUT, FunctionConfig};
pub use error::{FunctionError, Result};
pub use pool::{FunctionPool, PoolStatus, Results};
pub use registry::{FunctionSpec, Registry, fields, same_shape};
pub use udf::sql_functions;

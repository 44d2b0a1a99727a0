//! Catching panics in handlers and response streams, reported as INTERNAL.

use std::any::Any;
use std::panic::AssertUnwindSafe;

use futures::{FutureExt, Stream, StreamExt};
use tonic::Status;

fn panic_status(rpc: &str, panic: Box<dyn Any + Send>) -> Status {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    tracing::error!(rpc, panic = %what, "handler panicked");
    Status::internal(format!("internal error in {rpc}: {what}"))
}

/// Runs a handler, turning a panic into `INTERNAL`.
pub(crate) async fn handler<T>(
    rpc: &'static str,
    fut: impl Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    AssertUnwindSafe(fut)
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| Err(panic_status(rpc, panic)))
}

/// Wraps a response stream so that a panic while producing an item ends the
/// stream with `INTERNAL` instead of tearing down the connection task.
pub(crate) fn stream<T: Send + 'static>(
    rpc: &'static str,
    inner: impl Stream<Item = Result<T, Status>> + Send + 'static,
) -> impl Stream<Item = Result<T, Status>> + Send + 'static {
    let mut failed = false;
    AssertUnwindSafe(inner)
        .catch_unwind()
        .map(move |item| match item {
            Ok(item) => item,
            Err(panic) => Err(panic_status(rpc, panic)),
        })
        .take_while(move |item| {
            let go = !failed;
            failed |= item.is_err();
            futures::future::ready(go)
        })
}

//! Catching panics in handlers and response streams, reported as INTERNAL.

use std::any::Any;
use std::panic::AssertUnwindSafe;

use futures::{FutureExt, Stream, StreamExt};
use tonic::Status;

use crate::Error;

/// What a caught panic said.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

fn panic_status(rpc: &'static str, panic: Box<dyn Any + Send>) -> Status {
    let what = panic_message(&*panic);
    tracing::error!(rpc, panic = %what, "handler panicked");
    Error::Panicked { rpc, what }.into()
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

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;

    #[tokio::test]
    async fn a_panicking_handler_is_internal() {
        let result: Result<(), Status> = handler("DoPut", async { panic!("decoder bug") }).await;
        let status = result.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Internal);
        assert!(status.message().contains("DoPut") && status.message().contains("decoder bug"));
        assert_eq!(
            handler("DoPut", async { Ok::<_, Status>(7) })
                .await
                .unwrap(),
            7
        );
    }

    #[tokio::test]
    async fn a_panicking_stream_ends_with_internal() {
        let items = stream::iter(0..5).map(|i| {
            assert!(i < 2, "encoder bug at {i}");
            Ok::<_, Status>(i)
        });
        let out: Vec<Result<i32, Status>> = stream("DoGet", items).collect().await;
        assert_eq!(out.len(), 3, "two items, then the error, then nothing");
        assert_eq!(out[1].as_ref().unwrap(), &1);
        let status = out[2].as_ref().unwrap_err();
        assert_eq!(status.code(), tonic::Code::Internal);
        assert!(status.message().contains("encoder bug at 2"));
    }
}

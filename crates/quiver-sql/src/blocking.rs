//! Running a store write, which may block on disk I/O, from async code.

/// Runs `write` without stalling the async runtime's other tasks.
///
/// A durable store's writes block on fsync (milliseconds, more on a busy
/// disk). On tokio's multi-threaded runtime this hands the worker's other
/// tasks to another thread for the duration (`block_in_place`), so the write
/// can still borrow from the caller (a `TableWriter` borrows its store, which
/// rules out `spawn_blocking`). Anywhere else (a current-thread runtime, no
/// runtime at all) it runs `write` in place.
pub fn store_write<R>(write: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(write),
        _ => write(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_in_place_without_a_runtime() {
        assert_eq!(store_write(|| 7), 7);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn runs_in_place_on_a_current_thread_runtime() {
        assert_eq!(store_write(|| 8), 8);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn other_tasks_run_while_a_write_blocks() {
        let (tx, rx) = std::sync::mpsc::channel();
        let other = tokio::spawn(async move { tx.send(()).unwrap() });
        // Blocks until the other task has run: with one worker stuck here and
        // the task queued behind it, only handing the queue on lets it run.
        store_write(|| rx.recv_timeout(std::time::Duration::from_secs(30)).unwrap());
        other.await.unwrap();
    }
}

//! The tokio runtime every call runs on: one per process.
//!
//! A runtime does not survive `fork` (its threads stay in the parent), and
//! engines fork workers (Spark's Python workers, multiprocessing): a process
//! that finds a runtime made by another process makes its own. The parent's is
//! left alone, not dropped, since dropping it would join threads the child
//! does not have.

use std::sync::{Arc, Mutex};

use tokio::runtime::Runtime;

use crate::error::{Error, Result};

static RUNTIME: Mutex<Option<(u32, Arc<Runtime>)>> = Mutex::new(None);

/// Most worker threads: enough to decode several endpoints at once.
const MAX_WORKERS: usize = 8;

/// This process's runtime, made on first use.
pub(crate) fn runtime() -> Result<Arc<Runtime>> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((owner, runtime)) = slot.as_ref()
        && *owner == pid
    {
        return Ok(Arc::clone(runtime));
    }
    let workers = std::thread::available_parallelism()
        .map_or(2, usize::from)
        .clamp(2, MAX_WORKERS);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("quiver-core")
        .enable_all()
        .build()
        .map_err(|e| Error::Internal(format!("cannot start the client's threads: {e}")))?;
    let runtime = Arc::new(runtime);
    if let Some(old) = slot.replace((pid, Arc::clone(&runtime))) {
        // Made by the parent of a fork: its threads are not in this process.
        std::mem::forget(old);
    }
    Ok(runtime)
}

/// Whether `pid` is this process: a channel made before a fork is unusable.
pub(crate) fn is_this_process(pid: u32) -> bool {
    pid == std::process::id()
}

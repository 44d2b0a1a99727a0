//! Frees replaced and renamed-over table versions on a thread of their own.
//!
//! Dropping the last reference to a large version returns its pages to the
//! kernel, which costs about a tenth of a second per GiB here. Done inline it
//! would sit in the latency of the put that replaced the table (and, before
//! this module, inside the store's write lock). The store hands the map it
//! replaced to this thread instead, as Redis's `lazyfree` does. The memory
//! stays charged until it is actually freed; a charge that would pass the
//! limit meanwhile waits for the pending frees (`MemoryPool::pending_free`)
//! rather than failing, so the accounting a client sees does not change.

use std::sync::mpsc::{self, Sender};
use std::thread;

use crate::MemoryPool;
use crate::memory::PendingFree;

/// A thread that drops what it is sent; it ends when the store is dropped.
#[derive(Debug)]
pub(crate) struct LazyFree<T: Send + 'static> {
    /// `None` when the thread could not be started: everything is dropped inline.
    sender: Option<Sender<(T, PendingFree)>>,
}

impl<T: Send + 'static> LazyFree<T> {
    pub(crate) fn start() -> Self {
        let (sender, garbage) = mpsc::channel::<(T, PendingFree)>();
        let spawned = thread::Builder::new()
            .name("quiver-free".to_string())
            .spawn(move || {
                for (value, pending) in garbage {
                    drop(value);
                    drop(pending);
                }
            });
        if let Err(e) = &spawned {
            tracing::warn!(error = %e, "no thread to free replaced tables on: freeing inline");
        }
        Self {
            sender: spawned.ok().map(|_| sender),
        }
    }

    /// Drops `value` on the free thread, marked pending in `pool` until done.
    pub(crate) fn free(&self, pool: &MemoryPool, value: T) {
        match &self.sender {
            Some(sender) => {
                // A send fails only if the thread is gone: the value comes
                // back in the error and is dropped here instead.
                let _ = sender.send((value, pool.pending_free()));
            }
            None => drop(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn values_are_dropped_and_the_pool_settles() {
        let pool = MemoryPool::new(100);
        let mut charge = pool.charge();
        charge.try_grow(70).unwrap();
        let value = Arc::new(charge);
        let weak = Arc::downgrade(&value);
        let free = LazyFree::start();
        free.free(&pool, value);
        pool.settle();
        assert!(weak.upgrade().is_none());
        assert_eq!(pool.used(), 0);
    }
}

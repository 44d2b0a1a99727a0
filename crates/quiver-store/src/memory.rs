//! Memory accounting: a pool with a byte limit and charges against it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use arrow::array::{Array, ArrayData};
use arrow::record_batch::RecordBatch;

use crate::{Result, StoreError};

/// A byte budget shared by everything the store holds.
///
/// Cloning is cheap; clones share the same budget.
#[derive(Debug, Clone)]
pub struct MemoryPool {
    inner: Arc<PoolInner>,
}

#[derive(Debug)]
struct PoolInner {
    limit: u64,
    used: AtomicU64,
    /// Frees under way off the caller's thread ([`PendingFree`]s alive).
    pending_frees: Mutex<usize>,
    freed: Condvar,
}

/// How long a charge that would pass the limit waits for pending frees before
/// it is refused: far longer than freeing any table takes, short enough that a
/// stuck free cannot hang a write.
const FREE_WAIT: Duration = Duration::from_secs(10);

impl MemoryPool {
    /// A pool that admits at most `limit` bytes.
    pub fn new(limit: u64) -> Self {
        Self {
            inner: Arc::new(PoolInner {
                limit,
                used: AtomicU64::new(0),
                pending_frees: Mutex::new(0),
                freed: Condvar::new(),
            }),
        }
    }

    /// The configured limit in bytes.
    pub fn limit(&self) -> u64 {
        self.inner.limit
    }

    /// Bytes currently charged, including versions a replace or delete has
    /// let go of that are still being freed ([`Self::settle`] waits for those).
    pub fn used(&self) -> u64 {
        self.inner.used.load(Ordering::Acquire)
    }

    /// A new, empty charge against this pool.
    pub fn charge(&self) -> MemoryCharge {
        MemoryCharge {
            pool: self.clone(),
            bytes: 0,
        }
    }

    /// Marks memory that is about to be freed on another thread: until the
    /// returned guard drops, a charge that would pass the limit waits for it
    /// (and [`Self::settle`] waits for it) instead of failing on bytes that
    /// are on their way back.
    pub(crate) fn pending_free(&self) -> PendingFree {
        *self.lock_pending() += 1;
        PendingFree { pool: self.clone() }
    }

    /// Waits (up to a bound) until no free is pending, so that [`Self::used`]
    /// counts only what is still held. Returns whether any free was pending.
    pub fn settle(&self) -> bool {
        let pending = self.lock_pending();
        if *pending == 0 {
            return false;
        }
        let _ = self
            .inner
            .freed
            .wait_timeout_while(pending, FREE_WAIT, |n| *n > 0);
        true
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, usize> {
        self.inner
            .pending_frees
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn try_reserve(&self, bytes: u64) -> Result<()> {
        match self.try_reserve_now(bytes) {
            // Retried whether or not a free is still pending when settling: one
            // may have ended between the refusal and the look, its bytes already
            // back (a replace near the limit was refused so, under load).
            Err(StoreError::MemoryLimit { .. }) => {
                self.settle();
                self.try_reserve_now(bytes)
            }
            result => result,
        }
    }

    fn try_reserve_now(&self, bytes: u64) -> Result<()> {
        let inner = &self.inner;
        let mut used = inner.used.load(Ordering::Acquire);
        loop {
            let would_use = used.saturating_add(bytes);
            if would_use > inner.limit {
                return Err(StoreError::MemoryLimit {
                    requested: bytes,
                    would_use,
                    limit: inner.limit,
                });
            }
            match inner.used.compare_exchange_weak(
                used,
                would_use,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(actual) => used = actual,
            }
        }
    }

    fn release(&self, bytes: u64) {
        self.inner.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// A free under way on another thread; see [`MemoryPool::pending_free`].
#[derive(Debug)]
pub(crate) struct PendingFree {
    pool: MemoryPool,
}

impl Drop for PendingFree {
    fn drop(&mut self) {
        let mut pending = self.pool.lock_pending();
        *pending -= 1;
        if *pending == 0 {
            self.pool.inner.freed.notify_all();
        }
    }
}

/// Bytes charged to a [`MemoryPool`], returned to it on drop.
#[derive(Debug)]
pub struct MemoryCharge {
    pool: MemoryPool,
    bytes: u64,
}

impl MemoryCharge {
    /// Charges `bytes` more, or fails without charging anything.
    pub fn try_grow(&mut self, bytes: u64) -> Result<()> {
        self.pool.try_reserve(bytes)?;
        self.bytes += bytes;
        Ok(())
    }

    /// Bytes held by this charge.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Returns everything this charge holds to the pool, keeping the charge
    /// for reuse.
    pub fn release(&mut self) {
        self.pool.release(self.bytes);
        self.bytes = 0;
    }
}

impl Drop for MemoryCharge {
    fn drop(&mut self) {
        self.pool.release(self.bytes);
    }
}

/// The bytes a batch's buffers occupy: the lengths of every data, offset and
/// validity buffer, children and dictionaries included.
///
/// Unlike `RecordBatch::get_array_memory_size`, this counts buffer lengths, not
/// the capacity of the allocation behind them: several buffers decoded without a
/// copy from one wire message share that message's allocation, and counting its
/// capacity once per buffer would charge it many times over.
pub fn batch_bytes(batch: &RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|column| data_bytes(&column.to_data()))
        .sum()
}

pub(crate) fn data_bytes(data: &ArrayData) -> u64 {
    let buffers: usize = data.buffers().iter().map(|b| b.len()).sum();
    let nulls = data.nulls().map_or(0, |n| n.buffer().len());
    let children: u64 = data.child_data().iter().map(data_bytes).sum();
    (buffers + nulls) as u64 + children
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use std::sync::Arc as StdArc;

    #[test]
    fn charge_is_returned_on_drop() {
        let pool = MemoryPool::new(100);
        let mut a = pool.charge();
        a.try_grow(60).unwrap();
        let mut b = pool.charge();
        let err = b.try_grow(41).unwrap_err();
        assert!(matches!(
            err,
            StoreError::MemoryLimit {
                requested: 41,
                would_use: 101,
                limit: 100
            }
        ));
        assert_eq!(pool.used(), 60, "a refused reservation charges nothing");
        b.try_grow(40).unwrap();
        assert_eq!(pool.used(), 100);
        drop(a);
        assert_eq!(pool.used(), 40);
        drop(b);
        assert_eq!(pool.used(), 0);
    }

    #[test]
    fn a_charge_waits_for_pending_frees_before_failing() {
        let pool = MemoryPool::new(100);
        let mut held = pool.charge();
        held.try_grow(80).unwrap();
        let pending = pool.pending_free();
        let freer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
            drop(pending);
        });
        let mut next = pool.charge();
        next.try_grow(60)
            .expect("admitted once the pending free is done");
        freer.join().unwrap();
        assert_eq!(pool.used(), 60);
        assert!(!pool.settle(), "nothing pending any more");
        let mut more = pool.charge();
        assert!(
            more.try_grow(41).is_err(),
            "no pending free: refused at once"
        );
    }

    #[test]
    fn batch_bytes_counts_buffer_lengths() {
        let ints = Int64Array::from(vec![Some(1), None, Some(3), Some(4)]);
        let strings = StringArray::from(vec!["a", "bb", "ccc", "dddd"]);
        let batch = RecordBatch::try_from_iter([
            ("i", StdArc::new(ints) as _),
            ("s", StdArc::new(strings) as _),
        ])
        .unwrap();
        // i: 4 * 8 values + 1 validity byte; s: 5 * 4 offsets + 10 value bytes.
        assert_eq!(batch_bytes(&batch), 32 + 1 + 20 + 10);
    }
}

//! Recycled memory for received bodies: the server's DoPut bodies and the
//! client's DoGet bodies.
//!
//! A received FlightData's body is copied once, into 64-byte aligned memory
//! that the decoded arrays then use ([`crate::flight_data`]). Fresh memory is
//! the expensive part of that copy here: the kernel zeroes every page on first
//! touch, which cost more than the copy itself (`clear_page_erms` was the
//! largest item in a profile of 1 GiB replace-puts, and 98% of the server's
//! page faults were in this copy). jemalloc keeps freed pages for a while, but
//! which of them a new put gets back depends on arenas and decay: half of each
//! steady-state 1 GiB replace still landed on fresh pages.
//!
//! The pool keeps the bodies of freed arrays (on a server, the versions of a
//! replaced or deleted table; on a client, the batches a streaming reader has
//! passed on and its consumer dropped) and hands them to the next message, by
//! size class, warm. It holds at most `capacity` bytes, and memory idle for
//! [`IDLE`] goes back to the allocator, so RSS falls after deletes as it did
//! before. Bodies under [`MIN_POOLED`] stay with the allocator, whose
//! small-size caches serve them well.

use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread;
use std::time::{Duration, Instant};

use arrow::buffer::{Buffer, MutableBuffer};
use bytes::Bytes;

use quiver_ipc::to_bytes;

/// How long a body may sit unused in the pool before it is freed.
pub const IDLE: Duration = Duration::from_secs(10);

/// Bodies smaller than this are not pooled.
pub const MIN_POOLED: usize = 64 << 10;

/// Alignment of every body (Arrow's preferred alignment).
const ALIGNMENT: usize = 64;

/// How often the trimming thread looks for idle memory.
const TRIM_EVERY: Duration = Duration::from_secs(1);

/// A pool of body-sized allocations shared by the service's DoPuts; clones
/// share one pool.
#[derive(Debug, Clone)]
pub struct BodyPool {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    capacity: usize,
    /// How long a region may stay idle ([`IDLE`] but in tests).
    idle: Duration,
    state: Mutex<State>,
    /// Whether a trimming thread is running.
    trimming: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    /// Idle regions by size class, the most recently returned last.
    classes: HashMap<usize, Vec<(Region, Instant)>>,
    idle_bytes: usize,
}

/// What the pool holds (reported by the `stats` action).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes held idle, ready for reuse.
    pub idle_bytes: usize,
    /// Idle regions.
    pub idle_regions: usize,
}

impl BodyPool {
    /// A pool holding at most `capacity` idle bytes; 0 turns pooling off.
    pub fn new(capacity: usize) -> Self {
        Self::with_idle(capacity, IDLE)
    }

    fn with_idle(capacity: usize, idle: Duration) -> Self {
        Self {
            shared: Arc::new(Shared {
                capacity,
                idle,
                state: Mutex::new(State::default()),
                trimming: AtomicBool::new(false),
            }),
        }
    }

    /// `chunks` copied, one after the other, into one 64-byte aligned buffer:
    /// pooled memory when the size allows.
    pub fn copy(&self, chunks: &[Bytes]) -> Bytes {
        let len = chunks.iter().map(Bytes::len).sum::<usize>();
        if len < MIN_POOLED || self.shared.capacity == 0 {
            return copy_unpooled(chunks, len);
        }
        let class = size_class(len);
        // Taken in a statement of its own: the lock is released before a new
        // region is allocated and populated.
        let taken = self.shared.lock().take(class);
        let region = match taken {
            Some(region) => region,
            None => {
                let Some(region) = Region::new(class) else {
                    return copy_unpooled(chunks, len);
                };
                populate(region.ptr.as_ptr(), len);
                region
            }
        };
        let mut offset = 0;
        for chunk in chunks {
            // SAFETY: the region holds `class >= len` bytes and is not shared
            // yet; the chunks add up to `len`, so every write is in bounds.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    chunk.as_ptr(),
                    region.ptr.as_ptr().add(offset),
                    chunk.len(),
                );
            }
            offset += chunk.len();
        }
        Bytes::from_owner(PooledBody {
            region: Some(region),
            len,
            pool: Arc::clone(&self.shared),
        })
    }

    /// What the pool holds now.
    pub fn stats(&self) -> PoolStats {
        let state = self.shared.lock();
        PoolStats {
            idle_bytes: state.idle_bytes,
            idle_regions: state.classes.values().map(Vec::len).sum(),
        }
    }
}

/// `chunks` copied into a fresh allocation of the global allocator.
fn copy_unpooled(chunks: &[Bytes], len: usize) -> Bytes {
    let mut buffer = MutableBuffer::with_capacity(len);
    for chunk in chunks {
        buffer.extend_from_slice(chunk);
    }
    to_bytes(Buffer::from(buffer))
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent between statements, so a panic elsewhere
        // while it was locked leaves nothing half-done.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `region` for reuse, or frees it if the pool is full.
    fn give_back(self: &Arc<Self>, region: Region) {
        let mut state = self.lock();
        if state.idle_bytes + region.size > self.capacity {
            drop(state);
            drop(region);
            return;
        }
        state.idle_bytes += region.size;
        state
            .classes
            .entry(region.size)
            .or_default()
            .push((region, Instant::now()));
        drop(state);
        if !self.trimming.swap(true, Ordering::AcqRel) {
            self.start_trimming();
        }
    }

    /// Starts a thread that frees idle regions and ends when none are left
    /// (or the pool is gone).
    fn start_trimming(self: &Arc<Self>) {
        let pool = Arc::downgrade(self);
        let started = thread::Builder::new()
            .name("quiver-body-pool".to_string())
            .spawn(move || trim_until_empty(&pool));
        if let Err(e) = started {
            // Without the thread idle memory is freed only when the pool is
            // dropped; the pool still works.
            tracing::warn!(error = %e, "no thread to trim the body pool");
            self.trimming.store(false, Ordering::Release);
        }
    }
}

fn trim_until_empty(pool: &Weak<Shared>) {
    let every = pool
        .upgrade()
        .map_or(TRIM_EVERY, |p| p.idle.min(TRIM_EVERY));
    loop {
        thread::sleep(every);
        let Some(shared) = pool.upgrade() else { return };
        let mut state = shared.lock();
        let expired = state.trim(Instant::now(), shared.idle);
        let empty = state.idle_bytes == 0;
        if empty {
            // Cleared under the lock: a region given back after this sees
            // `false` and starts a new thread.
            shared.trimming.store(false, Ordering::Release);
        }
        drop(state);
        // Freed outside the lock.
        drop(expired);
        if empty {
            return;
        }
    }
}

impl State {
    fn take(&mut self, class: usize) -> Option<Region> {
        let regions = self.classes.get_mut(&class)?;
        let (region, _) = regions.pop()?;
        if regions.is_empty() {
            self.classes.remove(&class);
        }
        self.idle_bytes -= region.size;
        Some(region)
    }

    /// Removes and returns the regions idle for `idle` or longer at `now`.
    fn trim(&mut self, now: Instant, idle: Duration) -> Vec<Region> {
        let mut expired = Vec::new();
        self.classes.retain(|_, regions| {
            // Oldest first: the expired ones are a prefix.
            let keep_from = regions
                .iter()
                .position(|(_, since)| now.duration_since(*since) < idle)
                .unwrap_or(regions.len());
            expired.extend(regions.drain(..keep_from).map(|(region, _)| region));
            !regions.is_empty()
        });
        self.idle_bytes -= expired.iter().map(|r| r.size).sum::<usize>();
        expired
    }
}

/// Has the kernel back the pages of `len` bytes at `ptr` before they are
/// written: one `madvise(MADV_POPULATE_WRITE)` allocates and zeroes them all,
/// where a copy into fresh memory stops at a fault on every 4 KiB page. Pages
/// already backed (memory the allocator reused) are left as they are. A kernel
/// without the advice (before Linux 5.14) refuses it, and the copy faults the
/// pages in as before.
#[cfg(target_os = "linux")]
fn populate(ptr: *mut u8, len: usize) {
    let Some(page) = page_size() else {
        return;
    };
    let start = (ptr as usize).next_multiple_of(page);
    let end = (ptr as usize + len) / page * page;
    if end > start {
        // SAFETY: the range lies inside an allocation this pool owns and has
        // not handed out; the advice only backs its pages, it changes no byte
        // and no mapping.
        unsafe {
            libc::madvise(
                start as *mut libc::c_void,
                end - start,
                libc::MADV_POPULATE_WRITE,
            );
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn populate(_ptr: *mut u8, _len: usize) {}

/// The kernel's page size.
#[cfg(target_os = "linux")]
fn page_size() -> Option<usize> {
    // SAFETY: sysconf only reads a constant of the process.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()
}

/// The size class of a `len`-byte body: `len` rounded up to an eighth of the
/// power of two at or below it, so at most 12.5% (and for bodies of one size,
/// nothing) is wasted, and bodies of nearly equal size share a class.
fn size_class(len: usize) -> usize {
    let floor = 1usize << (usize::BITS - 1 - len.leading_zeros());
    let step = (floor / 8).max(ALIGNMENT);
    len.div_ceil(step) * step
}

/// One 64-byte aligned allocation of `size` bytes.
#[derive(Debug)]
struct Region {
    ptr: NonNull<u8>,
    size: usize,
}

// SAFETY: a region owns its allocation alone; nothing else points into it
// while it is idle, and a `PooledBody` hands it out read-only.
unsafe impl Send for Region {}
// SAFETY: as above; `&Region` gives no access to the bytes.
unsafe impl Sync for Region {}

impl Region {
    /// A new region; `None` if `size` is too large for any allocation.
    fn new(size: usize) -> Option<Self> {
        let layout = Layout::from_size_align(size, ALIGNMENT).ok()?;
        // SAFETY: `size` is at least MIN_POOLED, so the layout is not zero-sized.
        let ptr = unsafe { alloc(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| handle_alloc_error(layout));
        Some(Self { ptr, size })
    }

    /// The first `len` bytes.
    ///
    /// # Safety
    /// They must have been written (`len <= size`).
    unsafe fn prefix(&self, len: usize) -> &[u8] {
        // SAFETY: the caller vouches for `len`; the region lives as long as
        // the borrow.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), len) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: allocated in `Region::new` with this size and alignment,
        // which therefore form a valid layout.
        unsafe {
            dealloc(
                self.ptr.as_ptr(),
                Layout::from_size_align_unchecked(self.size, ALIGNMENT),
            );
        }
    }
}

/// A body in pooled memory, the owner behind its `Bytes` (and the arrays the
/// IPC decoder makes of them): the region goes back to the pool when the last
/// of them is dropped.
struct PooledBody {
    /// Always `Some` until dropped.
    region: Option<Region>,
    /// Bytes written at the start of the region.
    len: usize,
    pool: Arc<Shared>,
}

impl AsRef<[u8]> for PooledBody {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `BodyPool::copy` wrote `len` bytes before making the body.
        self.region
            .as_ref()
            .map_or(&[], |region| unsafe { region.prefix(self.len) })
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        if let Some(region) = self.region.take() {
            self.pool.give_back(region);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(len: usize, seed: u8) -> Vec<Bytes> {
        let bytes: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_add(seed)).collect();
        bytes.chunks(7919).map(Bytes::copy_from_slice).collect()
    }

    fn joined(chunks: &[Bytes]) -> Vec<u8> {
        chunks.concat()
    }

    /// Which of the `pages` pages at `base` the kernel has backed.
    #[cfg(target_os = "linux")]
    fn resident(base: *mut u8, pages: usize) -> Vec<bool> {
        let mut vec = vec![0u8; pages];
        let page = page_size().unwrap();
        // SAFETY: `base` is a page-aligned mapping of `pages` pages.
        let ret = unsafe { libc::mincore(base.cast(), pages * page, vec.as_mut_ptr()) };
        assert_eq!(ret, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.into_iter().map(|v| v & 1 == 1).collect()
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn populate_backs_the_whole_pages_of_its_range_only() {
        let page = page_size().unwrap();
        let pages = 16;
        // SAFETY: a fresh private anonymous mapping, unmapped below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                pages * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let base = base.cast::<u8>();
        assert!(
            resident(base, pages).iter().all(|&r| !r),
            "fresh pages are not backed"
        );

        // From the middle of page 1 to the middle of page 14: pages 2..=13
        // lie whole inside the range; 1 and 14 are shared with bytes the
        // caller does not own, and are left to the copy.
        // SAFETY: inside the mapping.
        populate(unsafe { base.add(page + page / 2) }, 13 * page);
        let backed = resident(base, pages);
        let expected: Vec<bool> = (0..pages).map(|p| (2..=13).contains(&p)).collect();
        assert_eq!(backed, expected);

        // SAFETY: mapped above, no reference into it remains.
        assert_eq!(unsafe { libc::munmap(base.cast(), pages * page) }, 0);
    }

    #[test]
    fn size_classes_round_up_by_an_eighth() {
        assert_eq!(size_class(64 << 10), 64 << 10);
        assert_eq!(size_class((64 << 10) + 1), 72 << 10);
        assert_eq!(size_class(2 << 20), 2 << 20);
        assert_eq!(size_class((2 << 20) + 256), (2 << 20) + (256 << 10));
        assert_eq!(size_class(3 << 20), 3 << 20);
        for len in [MIN_POOLED, 100_000, 1 << 20, 5_555_555, 1 << 30] {
            let class = size_class(len);
            assert!(class >= len && class - len <= len / 8, "{len} -> {class}");
            assert_eq!(class % ALIGNMENT, 0);
        }
    }

    #[test]
    fn copies_are_exact_and_aligned() {
        let pool = BodyPool::new(64 << 20);
        for len in [
            0,
            1,
            1000,
            MIN_POOLED - 1,
            MIN_POOLED,
            3 << 20,
            (3 << 20) + 5,
        ] {
            let chunks = body(len, 3);
            let copied = pool.copy(&chunks);
            assert_eq!(copied.as_ref(), joined(&chunks).as_slice(), "{len} bytes");
            assert_eq!(copied.as_ptr() as usize % ALIGNMENT, 0, "{len} bytes");
        }
    }

    #[test]
    fn freed_bodies_are_reused_by_the_next_put() {
        let pool = BodyPool::new(64 << 20);
        let len = (2 << 20) + 192;
        let first = pool.copy(&body(len, 1));
        let address = first.as_ptr();
        assert_eq!(pool.stats(), PoolStats::default());
        // An arrow buffer sharing the body keeps it out of the pool (the IPC
        // decoder makes its arrays' buffers so).
        let array_buffer = Buffer::from(first.clone());
        drop(first);
        assert_eq!(pool.stats().idle_regions, 0);
        drop(array_buffer);
        assert_eq!(
            pool.stats(),
            PoolStats {
                idle_bytes: size_class(len),
                idle_regions: 1
            }
        );
        // Same class, new contents, same memory.
        let second_chunks = body(len - 100, 9);
        let second = pool.copy(&second_chunks);
        assert_eq!(second.as_ptr(), address);
        assert_eq!(second.as_ref(), joined(&second_chunks).as_slice());
        assert_eq!(pool.stats(), PoolStats::default());
        // Another class gets other memory.
        let other = pool.copy(&body(len * 2, 0));
        assert_ne!(other.as_ptr(), address);
    }

    #[test]
    fn holds_no_more_than_its_capacity() {
        let len = 1 << 20;
        let pool = BodyPool::new(3 * len);
        let bodies: Vec<Bytes> = (0..5).map(|i| pool.copy(&body(len, i))).collect();
        drop(bodies);
        assert_eq!(
            pool.stats(),
            PoolStats {
                idle_bytes: 3 * len,
                idle_regions: 3
            }
        );
        let off = BodyPool::new(0);
        drop(off.copy(&body(len, 0)));
        assert_eq!(off.stats(), PoolStats::default());
    }

    #[test]
    fn idle_regions_expire_oldest_first() {
        let len = 1 << 20;
        let mut state = State::default();
        let start = Instant::now();
        for (i, size) in [len, len, 2 * len].into_iter().enumerate() {
            state.idle_bytes += size;
            state.classes.entry(size).or_default().push((
                Region::new(size).unwrap(),
                start + Duration::from_secs(i as u64 * 5),
            ));
        }
        assert!(
            state
                .trim(start + IDLE - Duration::from_millis(1), IDLE)
                .is_empty()
        );
        let expired = state.trim(start + IDLE + Duration::from_secs(1), IDLE);
        assert_eq!(expired.len(), 1);
        assert_eq!(state.idle_bytes, 3 * len);
        assert_eq!(state.take(len).map(|r| r.size), Some(len));
        let expired = state.trim(start + IDLE * 3, IDLE);
        assert_eq!(expired.iter().map(|r| r.size).sum::<usize>(), 2 * len);
        assert_eq!(state.idle_bytes, 0);
        assert!(state.classes.is_empty());
    }

    #[test]
    fn a_thread_frees_idle_memory() {
        let len = 1 << 20;
        let pool = BodyPool::with_idle(8 * len, Duration::from_millis(200));
        drop(pool.copy(&body(len, 0)));
        assert_eq!(pool.stats().idle_regions, 1);
        assert!(pool.shared.trimming.load(Ordering::Acquire));
        let deadline = Instant::now() + Duration::from_secs(30);
        while pool.stats().idle_regions > 0 {
            assert!(Instant::now() < deadline, "idle memory was never freed");
            thread::sleep(Duration::from_millis(100));
        }
        // The thread ends once the pool is empty.
        while pool.shared.trimming.load(Ordering::Acquire) {
            assert!(Instant::now() < deadline, "the trimming thread never ended");
            thread::sleep(Duration::from_millis(100));
        }
    }
}

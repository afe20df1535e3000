//! A pool of pre-allocated, aligned block buffers: the currency of the I/O
//! pipeline. Every buffer is allocated (and optionally locked in RAM and
//! placed on a NUMA node) at construction; `get` and the return on drop
//! only move an owned buffer in and out of a free list whose capacity was
//! reserved up front, so the data path never allocates.

use std::io;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lightpath_sys::mem::{self, AlignedBuf, Region};

/// How to build a [`BufferPool`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolOptions {
    /// Number of buffers.
    pub count: usize,
    /// Bytes per buffer.
    pub size: usize,
    /// Alignment of each buffer (a power of two; the page size suits any
    /// direct I/O).
    pub align: usize,
    /// Lock the buffers in RAM (`mlock`); refusal is noted, not fatal.
    pub lock: bool,
    /// Bind the buffers to this NUMA node; failure is noted, not fatal.
    pub node: Option<usize>,
}

impl Default for PoolOptions {
    /// 64 buffers of 1 MiB, page-aligned, not locked, no node.
    fn default() -> Self {
        PoolOptions { count: 64, size: 1 << 20, align: 4096, lock: false, node: None }
    }
}

/// Counters of a pool, for tests and verbose output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// Buffers in the pool.
    pub count: usize,
    /// Buffers handed out now.
    pub in_use: usize,
    /// Most buffers handed out at once.
    pub high_water: usize,
    /// Times `get` found the pool empty and had to wait.
    pub waits: usize,
    /// Times [`BufferPool::block`] found no buffer fit and used the heap.
    pub overflows: usize,
}

struct Inner {
    free: Mutex<Vec<AlignedBuf>>,
    cond: Condvar,
    size: usize,
    align: usize,
    count: usize,
    in_use: AtomicUsize,
    high_water: AtomicUsize,
    waits: AtomicUsize,
    overflows: AtomicUsize,
    notes: Vec<String>,
}

impl Inner {
    fn lock_free(&self) -> MutexGuard<'_, Vec<AlignedBuf>> {
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn hand_out(self: &Arc<Self>, buf: AlignedBuf) -> PoolBuf {
        let n = self.in_use.fetch_add(1, Ordering::Relaxed) + 1;
        self.high_water.fetch_max(n, Ordering::Relaxed);
        let len = buf.capacity();
        PoolBuf { buf: Some(buf), len, pool: Arc::clone(self) }
    }
}

/// A fixed set of aligned buffers shared by threads (cheap to clone).
#[derive(Clone)]
pub struct BufferPool {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool")
            .field("size", &self.inner.size)
            .field("align", &self.inner.align)
            .field("stats", &self.stats())
            .field("notes", &self.inner.notes)
            .finish()
    }
}

impl BufferPool {
    /// Allocate every buffer now. A zero count or size, or a bad alignment,
    /// is `InvalidInput`; running out of memory is `OutOfMemory`. What could
    /// not be done of `lock`/`node` is in [`BufferPool::notes`].
    pub fn new(opts: &PoolOptions) -> io::Result<BufferPool> {
        if opts.count == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "buffer pool of zero buffers"));
        }
        let mut notes = Vec::new();
        let free = prepare_all(opts, &mut notes)?;
        let inner = Inner {
            free: Mutex::new(free),
            cond: Condvar::new(),
            size: opts.size,
            align: opts.align,
            count: opts.count,
            in_use: AtomicUsize::new(0),
            high_water: AtomicUsize::new(0),
            waits: AtomicUsize::new(0),
            overflows: AtomicUsize::new(0),
            notes,
        };
        Ok(BufferPool { inner: Arc::new(inner) })
    }

    /// A buffer, waiting until one is free. Its length starts at the full
    /// buffer size.
    pub fn get(&self) -> PoolBuf {
        let mut free = self.inner.lock_free();
        if free.is_empty() {
            self.inner.waits.fetch_add(1, Ordering::Relaxed);
        }
        loop {
            if let Some(b) = free.pop() {
                return self.inner.hand_out(b);
            }
            free = self.inner.cond.wait(free).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A buffer, waiting at most `timeout`; `None` if none came free.
    pub fn get_timeout(&self, timeout: Duration) -> Option<PoolBuf> {
        let deadline = Instant::now() + timeout;
        let mut free = self.inner.lock_free();
        if free.is_empty() {
            self.inner.waits.fetch_add(1, Ordering::Relaxed);
        }
        loop {
            if let Some(b) = free.pop() {
                return Some(self.inner.hand_out(b));
            }
            let left = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())?;
            free = self.inner.cond.wait_timeout(free, left).map(|r| r.0).unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// A buffer if one is free now.
    pub fn try_get(&self) -> Option<PoolBuf> {
        let mut free = self.inner.lock_free();
        let b = free.pop()?;
        Some(self.inner.hand_out(b))
    }

    /// A buffer holding `len` bytes that never waits: a pool buffer when
    /// one is free and large enough, else (counted in
    /// [`PoolStats::overflows`]) memory from the heap. The pool bounds the
    /// memory that is pre-allocated and locked, not the transfers: their
    /// own per-job limits bound what they hold.
    pub fn block(&self, len: usize) -> BlockBuf {
        if len <= self.inner.size {
            if let Some(mut b) = self.try_get() {
                b.set_len(len);
                return BlockBuf::Pooled(b);
            }
        }
        self.inner.overflows.fetch_add(1, Ordering::Relaxed);
        BlockBuf::Heap(vec![0; len])
    }

    /// Bytes per buffer.
    pub fn buf_size(&self) -> usize {
        self.inner.size
    }

    /// Alignment of every buffer.
    pub fn align(&self) -> usize {
        self.inner.align
    }

    /// Counters now.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            count: self.inner.count,
            in_use: self.inner.in_use.load(Ordering::Relaxed),
            high_water: self.inner.high_water.load(Ordering::Relaxed),
            waits: self.inner.waits.load(Ordering::Relaxed),
            overflows: self.inner.overflows.load(Ordering::Relaxed),
        }
    }

    /// Bytes of the pool on transparent huge pages now (`None`: not known).
    pub fn huge_page_bytes(&self) -> Option<u64> {
        let free = self.inner.lock_free();
        free.first().and_then(mem::huge_page_bytes)
    }

    /// What was asked but could not be done ("mlock: Operation not
    /// permitted"...), one line per kind of failure, for `--verbose`.
    pub fn notes(&self) -> &[String] {
        &self.inner.notes
    }
}

/// Allocate every buffer in one region on transparent huge pages, place
/// and lock the region. Its pages come in (zeroed by the kernel, then
/// locked) when a buffer is first used, not here: a client that copies one
/// file uses a fraction of the pool, and faulting all 32 MiB in up front
/// was 9 % of its CPU for a 1 GiB download (6 interleaved hand runs: 0.335
/// against 0.313 s). What could not be done is noted once each.
fn prepare_all(opts: &PoolOptions, notes: &mut Vec<String>) -> io::Result<Vec<AlignedBuf>> {
    let region = Region::new(opts.count, opts.size, opts.align)?;
    if let Err(e) = region.huge_pages() {
        note_once(notes, format!("transparent huge pages: {e}"));
    }
    if let Some(node) = opts.node {
        if let Err(e) = region.bind_to_node(node) {
            note_once(notes, format!("NUMA node {node}: {e}"));
        }
    }
    if opts.lock {
        if let Err(e) = region.lock() {
            note_once(notes, format!("mlock: {e}"));
        }
    }
    Ok(region.into_buffers())
}

fn note_once(notes: &mut Vec<String>, note: String) {
    if !notes.contains(&note) {
        notes.push(note);
    }
}

/// A buffer taken from a [`BufferPool`]; goes back to the pool on drop.
/// Derefs to its first `len` bytes (see [`PoolBuf::set_len`]).
pub struct PoolBuf {
    buf: Option<AlignedBuf>,
    len: usize,
    pool: Arc<Inner>,
}

impl PoolBuf {
    /// Bytes per buffer (the most `set_len` accepts).
    pub fn capacity(&self) -> usize {
        self.pool.size
    }

    /// Set how many bytes the buffer holds (what `Deref` shows). Panics if
    /// `len` exceeds the capacity (a programming error).
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.capacity(), "PoolBuf::set_len({len}) beyond capacity {}", self.capacity());
        self.len = len;
    }

    /// The whole buffer regardless of the length, to fill it.
    pub fn full_mut(&mut self) -> &mut [u8] {
        self.buf.as_deref_mut().unwrap_or_default()
    }
}

impl Deref for PoolBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf.as_deref().map(|b| &b[..self.len]).unwrap_or_default()
    }
}

impl DerefMut for PoolBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        self.buf.as_deref_mut().map(|b| &mut b[..len]).unwrap_or_default()
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            let mut free = self.pool.lock_free();
            // never reallocates: the free list was reserved for `count`
            free.push(b);
            self.pool.in_use.fetch_sub(1, Ordering::Relaxed);
            drop(free);
            self.pool.cond.notify_one();
        }
    }
}

impl std::fmt::Debug for PoolBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolBuf").field("len", &self.len).field("capacity", &self.capacity()).finish()
    }
}

/// A block's bytes: a pool buffer, or heap memory when the pool had none
/// (see [`BufferPool::block`]), or bytes made elsewhere (manifest chunks).
#[derive(Debug)]
pub enum BlockBuf {
    /// From the pool; goes back on drop.
    Pooled(PoolBuf),
    /// From the heap.
    Heap(Vec<u8>),
}

impl Deref for BlockBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            BlockBuf::Pooled(b) => b,
            BlockBuf::Heap(v) => v,
        }
    }
}

impl DerefMut for BlockBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            BlockBuf::Pooled(b) => b,
            BlockBuf::Heap(v) => v,
        }
    }
}

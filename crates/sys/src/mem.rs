//! Aligned heap buffers for direct I/O, and the engine's buffer pool as one
//! region on transparent huge pages ([`Region`]) with optional locking in
//! RAM (`mlock`) and NUMA placement (`mbind`).

use std::alloc::{self, Layout};
use std::io;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Arc;

/// A zeroed buffer of fixed capacity whose start is aligned to a power of
/// two (e.g. the direct-I/O memory alignment or the page size).
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
    /// The region the buffer is a piece of; `None`: its own heap allocation.
    region: Option<Arc<Mapping>>,
}

// SAFETY: AlignedBuf owns its allocation (or its piece of a region)
// exclusively, like Box<[u8]>; the raw pointer is never shared, and a
// region's mapping is Send + Sync, so moving it to another thread is sound.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only give `&[u8]` (Deref); mutation needs
// `&mut AlignedBuf`, so the usual borrow rules keep access data-race free.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocate `capacity` zeroed bytes aligned to `align` (a power of two).
    /// A zero capacity or a bad alignment is `InvalidInput`; a failed
    /// allocation is `OutOfMemory`.
    pub fn new(capacity: usize, align: usize) -> io::Result<AlignedBuf> {
        if capacity == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "aligned buffer of zero bytes"));
        }
        let layout = Layout::from_size_align(capacity, align)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("aligned buffer: {e}")))?;
        // SAFETY: the layout has a non-zero size (checked above).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| {
            io::Error::new(io::ErrorKind::OutOfMemory, format!("cannot allocate {capacity} aligned bytes"))
        })?;
        Ok(AlignedBuf { ptr, layout, region: None })
    }

    /// Size in bytes.
    pub fn capacity(&self) -> usize {
        self.layout.size()
    }

    /// The alignment asked for at allocation.
    pub fn align(&self) -> usize {
        self.layout.align()
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr points to `size` initialised (zeroed) bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.region.is_some() {
            return; // the mapping goes with its last buffer
        }
        // SAFETY: ptr was returned by alloc_zeroed with exactly this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// Transparent huge page size on x86-64 (and arm64 with 4 KiB pages).
pub const HUGE_PAGE: usize = 2 << 20;

/// An anonymous mapping, unmapped when the last buffer cut from it goes.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is only unmapped in Drop, once no buffer refers to it;
// access to its bytes goes through the AlignedBufs cut from it, each owning
// a disjoint range.
unsafe impl Send for Mapping {}
// SAFETY: as above; the Mapping itself exposes no bytes.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned, and no buffer of
        // the mapping is alive any more (each holds an Arc to it).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Memory for `count` buffers of one size in a single anonymous mapping,
/// aligned to [`HUGE_PAGE`] and advised to use transparent huge pages
/// (`MADV_HUGEPAGE`): the pool's buffers then sit on a few 2 MiB pages
/// instead of thousands of 4 KiB ones, so copies in and out of them miss
/// the TLB less and a direct read or write pins them page by huge page.
/// Bind and lock the region as a whole (a policy on part of it would split
/// it), then cut it into buffers with [`Region::into_buffers`].
pub struct Region {
    map: Arc<Mapping>,
    /// Offset of the first buffer in the mapping (aligned to a huge page).
    base: usize,
    stride: usize,
    count: usize,
    capacity: usize,
    align: usize,
    huge: io::Result<bool>,
}

impl Region {
    /// Map room for `count` buffers of `capacity` bytes, each aligned to
    /// `align` (a power of two). Zero sizes or a bad alignment are
    /// `InvalidInput`; a failed mapping is the kernel's error.
    pub fn new(count: usize, capacity: usize, align: usize) -> io::Result<Region> {
        let invalid = |m: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("buffer region: {m}"));
        if count == 0 || capacity == 0 {
            return Err(invalid("zero buffers or zero bytes"));
        }
        if !align.is_power_of_two() {
            return Err(invalid("alignment is not a power of two"));
        }
        let stride = capacity.checked_next_multiple_of(align).ok_or_else(|| invalid("too large"))?;
        let used = stride.checked_mul(count).ok_or_else(|| invalid("too large"))?;
        let lead = align.max(HUGE_PAGE);
        let len = used
            .div_ceil(HUGE_PAGE)
            .checked_mul(HUGE_PAGE)
            .and_then(|n| n.checked_add(lead))
            .ok_or_else(|| invalid("too large"))?;
        // SAFETY: a fresh private anonymous mapping, no address hint; it
        // overlaps nothing of ours and is zero-filled by the kernel.
        let raw = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE,
            )
        }?;
        let ptr = NonNull::new(raw.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave a null mapping"))?;
        let map = Arc::new(Mapping { ptr, len });
        // Offset of the first aligned byte (pointers keep the mapping's provenance).
        let base = (ptr.as_ptr() as usize).next_multiple_of(lead) - ptr.as_ptr() as usize;
        let huge = if used >= HUGE_PAGE { advise_huge(ptr.as_ptr().wrapping_add(base), used) } else { Ok(false) };
        Ok(Region { map, base, stride, count, capacity, align, huge })
    }

    /// Whether the region was advised to use huge pages: `Ok(false)` for
    /// one smaller than a huge page (a whole one would be faulted in for
    /// it), an error where the kernel has no transparent huge pages. With
    /// them set to `never` the advice is taken but has no effect.
    pub fn huge_pages(&self) -> &io::Result<bool> {
        &self.huge
    }

    /// The bytes the buffers occupy, as one span.
    fn span(&self) -> (*mut libc::c_void, usize) {
        (self.at(0).cast(), self.stride * self.count)
    }

    /// The start of buffer `i`.
    fn at(&self, i: usize) -> *mut u8 {
        self.map.ptr.as_ptr().wrapping_add(self.base + i * self.stride)
    }

    /// Lock the region in RAM as its pages are first touched
    /// (`mlock2(MLOCK_ONFAULT)`): a page, once in, is never paged out, but
    /// pages no buffer ever used are never faulted in, zeroed and pinned.
    /// Without `CAP_IPC_LOCK` the `RLIMIT_MEMLOCK` limit applies:
    /// `EPERM`/`ENOMEM` come back as errors for the caller to note, not to
    /// fail on. The lock ends when the region is unmapped.
    pub fn lock(&self) -> io::Result<()> {
        let (ptr, len) = self.span();
        // SAFETY: the span is inside our live mapping (huge-page aligned, so
        // whole pages, as mlock requires); mlock2 does not touch the bytes.
        unsafe { rustix::mm::mlock_with(ptr, len, rustix::mm::MlockFlags::ONFAULT) }.map_err(io::Error::from)
    }

    /// Bind the region's pages to NUMA node `node` (`mbind(MPOL_BIND)`,
    /// moving pages already present). Errors (no such node, kernel without
    /// NUMA: `ENOSYS`, `EINVAL`) are returned for the caller to note; the
    /// buffers stay usable wherever they are.
    pub fn bind_to_node(&self, node: usize) -> io::Result<()> {
        let (ptr, len) = self.span();
        mbind(ptr, len, node)
    }

    /// Cut the region into its buffers; it is unmapped when the last goes.
    pub fn into_buffers(self) -> Vec<AlignedBuf> {
        let layout = Layout::from_size_align(self.capacity, self.align).expect("checked in Region::new");
        (0..self.count)
            .map(|i| {
                // Inside the mapping, which is never at address 0.
                let ptr = NonNull::new(self.at(i)).expect("inside a live mapping");
                AlignedBuf { ptr, layout, region: Some(self.map.clone()) }
            })
            .collect()
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf").field("capacity", &self.capacity()).field("align", &self.align()).finish()
    }
}

/// `MADV_HUGEPAGE` for the whole huge pages covering `base..base+used`
/// (`base` is huge-page aligned, inside a mapping of ours that reaches
/// at least to the end of the last of those pages).
fn advise_huge(base: *mut u8, used: usize) -> io::Result<bool> {
    let span = used.div_ceil(HUGE_PAGE) * HUGE_PAGE;
    // SAFETY: the span lies inside our mapping (Region::new maps the used
    // bytes rounded up to huge pages, plus the alignment slack before
    // base); advice changes no contents.
    unsafe { rustix::mm::madvise(base.cast(), span, rustix::mm::Advice::LinuxHugepage) }?;
    Ok(true)
}

/// Bytes of the mapping holding `buf` that sit on transparent huge pages
/// now (`AnonHugePages` in /proc/self/smaps); `None` where smaps does not
/// say. For a region's buffer that is the whole region's count.
pub fn huge_page_bytes(buf: &AlignedBuf) -> Option<u64> {
    let addr = buf.ptr.as_ptr() as usize;
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ').filter(|(r, _)| r.contains('-') && !r.ends_with(':')) {
            let (lo, hi) = range.split_once('-')?;
            let (lo, hi) = (usize::from_str_radix(lo, 16).ok()?, usize::from_str_radix(hi, 16).ok()?);
            inside = (lo..hi).contains(&addr);
        } else if let Some(kb) = line.strip_prefix("AnonHugePages:").filter(|_| inside) {
            return kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok().map(|k| k << 10);
        }
    }
    None
}

/// The system page size.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// `mbind(MPOL_BIND, MPOL_MF_MOVE)` of the whole pages at `ptr..ptr+len`,
/// which must lie in memory of ours and start on a page boundary.
fn mbind(ptr: *mut libc::c_void, len: usize, node: usize) -> io::Result<()> {
    const MPOL_BIND: libc::c_long = 2;
    const MPOL_MF_MOVE: libc::c_ulong = 1 << 1;
    const BITS: usize = libc::c_ulong::BITS as usize;
    if node >= 4096 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("NUMA node {node} out of range")));
    }
    let mut mask = [0 as libc::c_ulong; 4096 / BITS];
    mask[node / BITS] |= 1 << (node % BITS);
    let words = node / BITS + 1;
    // SAFETY: mbind only changes the memory policy of whole pages in our
    // own live mapping (the caller's contract); the mask pointer is valid for `words`
    // longs, and maxnode (bits + 1, the kernel decrements it) matches.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            ptr,
            len as libc::c_ulong,
            MPOL_BIND,
            mask.as_ptr(),
            (words * BITS + 1) as libc::c_ulong,
            MPOL_MF_MOVE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The NUMA node holding the page at the start of `buf` (`get_mempolicy`
/// with `MPOL_F_NODE | MPOL_F_ADDR`), for tests and verbose output.
pub fn node_of(buf: &AlignedBuf) -> io::Result<usize> {
    const MPOL_F_NODE: libc::c_ulong = 1;
    const MPOL_F_ADDR: libc::c_ulong = 1 << 1;
    let mut node: libc::c_int = -1;
    // SAFETY: get_mempolicy writes one int to `node`; no nodemask is passed
    // (NULL, maxnode 0); the address is inside our live allocation.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut libc::c_int,
            std::ptr::null_mut::<libc::c_ulong>(),
            0 as libc::c_ulong,
            buf.ptr.as_ptr(),
            MPOL_F_NODE | MPOL_F_ADDR,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    usize::try_from(node).map_err(|_| io::Error::other("get_mempolicy gave no node"))
}

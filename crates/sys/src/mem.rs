//! Aligned heap buffers for direct I/O and the engine's buffer pool, with
//! optional locking in RAM (`mlock`) and NUMA placement (`mbind`).

use std::alloc::{self, Layout};
use std::io;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// A zeroed heap buffer of fixed capacity whose start is aligned to a power
/// of two (e.g. the direct-I/O memory alignment or the page size).
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively (like Box<[u8]>); the
// raw pointer is never shared, so moving it to another thread is sound.
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
        Ok(AlignedBuf { ptr, layout })
    }

    /// Size in bytes.
    pub fn capacity(&self) -> usize {
        self.layout.size()
    }

    /// The alignment asked for at allocation.
    pub fn align(&self) -> usize {
        self.layout.align()
    }

    /// Write one byte per page so the pages exist now (on the node the
    /// memory policy chooses) rather than on first use in the data path.
    pub fn prefault(&mut self) {
        let page = page_size();
        for i in (0..self.capacity()).step_by(page) {
            self[i] = 0;
        }
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
        // SAFETY: ptr was returned by alloc_zeroed with exactly this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf").field("capacity", &self.capacity()).field("align", &self.align()).finish()
    }
}

/// The system page size.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// The pages covering `buf`, rounded outwards to page boundaries.
fn page_span(buf: &AlignedBuf) -> (*mut libc::c_void, usize) {
    let page = page_size();
    let start = buf.ptr.as_ptr() as usize;
    let first = start & !(page - 1);
    let end = (start + buf.capacity()).div_ceil(page) * page;
    (first as *mut libc::c_void, end - first)
}

/// Lock `buf` in RAM (`mlock`), which also faults its pages in. Without
/// `CAP_IPC_LOCK` the `RLIMIT_MEMLOCK` limit applies: `EPERM`/`ENOMEM` come
/// back as errors for the caller to note, not to fail on. The lock ends
/// when the buffer is freed.
pub fn lock(buf: &AlignedBuf) -> io::Result<()> {
    let (ptr, len) = page_span(buf);
    // SAFETY: the range covers pages of our live allocation (rounded to page
    // boundaries, which mlock requires anyway); mlock does not touch the bytes.
    unsafe { rustix::mm::mlock(ptr, len) }.map_err(io::Error::from)
}

/// Bind the pages of `buf` to NUMA node `node` (`mbind(MPOL_BIND)`, moving
/// pages already present). Errors (no such node, kernel without NUMA:
/// `ENOSYS`, `EINVAL`) are returned for the caller to note; the buffer
/// stays usable wherever it is. Rounded out to whole pages, so a buffer
/// that is not page-aligned also binds the rest of its first/last page.
pub fn bind_to_node(buf: &AlignedBuf, node: usize) -> io::Result<()> {
    const MPOL_BIND: libc::c_long = 2;
    const MPOL_MF_MOVE: libc::c_ulong = 1 << 1;
    const BITS: usize = libc::c_ulong::BITS as usize;
    if node >= 4096 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("NUMA node {node} out of range")));
    }
    let mut mask = [0 as libc::c_ulong; 4096 / BITS];
    mask[node / BITS] |= 1 << (node % BITS);
    let words = node / BITS + 1;
    let (ptr, len) = page_span(buf);
    // SAFETY: mbind only changes the memory policy of pages in our own live
    // allocation (rounded to pages); the mask pointer is valid for `words`
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

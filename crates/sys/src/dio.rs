//! Direct I/O (`O_DIRECT`): the alignment a file system asks for, and a
//! second descriptor on an open file that bypasses the page cache while the
//! original stays buffered (for unaligned heads and tails).

use std::fs::File;
use std::io;
use std::os::fd::AsFd;

/// Alignment direct I/O needs on a file (`statx` `STATX_DIOALIGN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DioAlign {
    /// Alignment of user memory buffers, in bytes.
    pub mem: usize,
    /// Alignment of file offsets and lengths, in bytes.
    pub offset: usize,
}

/// Why a direct descriptor could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DirectError {
    /// The file system does not do direct I/O on this file (tmpfs before
    /// Linux 6.6, FUSE, /proc missing...): use buffered I/O.
    #[error("direct I/O not supported: {0}")]
    Unsupported(String),
    /// Any other failure to open the second descriptor.
    #[error("opening a direct descriptor: {0}")]
    Io(#[from] io::Error),
}

impl From<DirectError> for io::Error {
    fn from(e: DirectError) -> io::Error {
        match e {
            DirectError::Unsupported(s) => io::Error::new(io::ErrorKind::Unsupported, s),
            DirectError::Io(e) => e,
        }
    }
}

/// The direct-I/O alignment of `file`, or `None` when the kernel or the
/// file system says direct I/O is not supported (alignment 0) or does not
/// answer (`statx` without `STATX_DIOALIGN`, before Linux 6.1).
pub fn dio_alignment(file: &File) -> Option<DioAlign> {
    use rustix::fs::{statx, AtFlags, StatxFlags};
    let st = statx(file.as_fd(), "", AtFlags::EMPTY_PATH, StatxFlags::DIOALIGN).ok()?;
    if st.stx_mask & StatxFlags::DIOALIGN.bits() == 0 {
        return None;
    }
    let mem = st.stx_dio_mem_align as usize;
    let offset = st.stx_dio_offset_align as usize;
    (mem.is_power_of_two() && offset.is_power_of_two()).then_some(DioAlign { mem, offset })
}

/// Open `file` again with `O_DIRECT` through `/proc/self/fd/N` (same inode,
/// no path lookup, so confinement is kept), read-only or write-only. The
/// original descriptor stays buffered. File systems that refuse are
/// [`DirectError::Unsupported`]: the caller falls back to buffered I/O.
pub fn reopen_direct(file: &File, write: bool) -> Result<File, DirectError> {
    use rustix::fs::{Mode, OFlags};
    use std::os::fd::AsRawFd;
    let align = dio_alignment(file);
    if align.is_none() {
        return Err(DirectError::Unsupported("the file system reports no direct-I/O alignment".into()));
    }
    let access = if write { OFlags::WRONLY } else { OFlags::RDONLY };
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    match rustix::fs::open(path.as_str(), access | OFlags::DIRECT | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => Ok(File::from(fd)),
        Err(e @ (rustix::io::Errno::INVAL | rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOENT)) => {
            Err(DirectError::Unsupported(format!("open with O_DIRECT: {}", io::Error::from(e))))
        }
        Err(e) => Err(DirectError::Io(e.into())),
    }
}

/// Whether an error from a direct read or write means "this file system
/// (or this range) will not do direct I/O": `EINVAL`, `EOPNOTSUPP`.
pub fn is_refusal(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::EOPNOTSUPP))
}

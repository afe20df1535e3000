//! Changing a directory through its `O_PATH` descriptor: the descriptor
//! leads to that directory alone (no path is looked up again, so no
//! symlink swapped in is followed), but takes no `fchmod`; its
//! `/proc/self/fd` link does, and where there is no `/proc` the directory
//! is opened again from the descriptor.

use super::*;

/// Make the directory `name` of `dir` (never a symlink) `u+rwx` if this
/// process owns it and it is not: through an `O_PATH` descriptor and its
/// `/proc/self/fd` link, which lead to that directory alone.
pub(super) fn let_owner_in(dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, name, flags, Mode::empty())?;
    let_owner_at(&fd).map(drop)
}

/// Make the directory `fd` `u+rwx` if this process owns it and it is
/// not; whether it changed the mode. Through its `/proc/self/fd` link:
/// an `O_PATH` descriptor takes no `fchmod`.
pub(super) fn let_owner_at(fd: &OwnedFd) -> io::Result<bool> {
    let st = rustix::fs::fstat(fd)?;
    if st.st_uid != rustix::process::geteuid().as_raw() || st.st_mode & 0o700 == 0o700 {
        return Ok(false);
    }
    let mode = Mode::from_raw_mode((st.st_mode & 0o7777) | 0o700);
    dir_meta_at(fd, mode, None)?;
    Ok(true)
}

/// The `/proc/self/fd` link of `fd`, which leads to its file alone (an
/// `O_PATH` descriptor's too): what changes a file by descriptor where
/// no call takes one.
/// Give the directory `fd` (an `O_PATH` descriptor, which takes no
/// `fchmod`) `mode`, and `times` where given: through its `/proc/self/fd`
/// link, which leads to it alone, or, without `/proc`, through the
/// directory opened again from that descriptor (for reading: the owner's
/// tree directories are, while written). Without `/proc` every tree with
/// a subdirectory failed, "setting the metadata of sub: No such file or
/// directory" (a defect hunt's find).
pub(super) fn dir_meta_at(fd: &OwnedFd, mode: Mode, times: Option<&rustix::fs::Timestamps>) -> io::Result<()> {
    let link = fd_link(fd);
    match rustix::fs::chmodat(rustix::fs::CWD, link.as_str(), mode, AtFlags::empty()) {
        Err(rustix::io::Errno::NOENT) => {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            let dir = rustix::fs::openat(fd, ".", flags, Mode::empty())?;
            rustix::fs::fchmod(&dir, mode)?;
            times.map_or(Ok(()), |t| Ok(rustix::fs::futimens(&dir, t)?))
        }
        r => {
            r?;
            times.map_or(Ok(()), |t| Ok(rustix::fs::utimensat(rustix::fs::CWD, link.as_str(), t, AtFlags::empty())?))
        }
    }
}

pub(super) fn fd_link(fd: &OwnedFd) -> String {
    use std::os::fd::AsRawFd;
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

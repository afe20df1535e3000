//! Confinement to a served root directory.
//!
//! Every path from the network is opened relative to a directory fd with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, so neither `..` nor a
//! symlink (planted before or during a session) can reach outside the root:
//! the kernel checks every component, which a lexical check cannot do
//! without races. Operations on a name (mkdir, unlink, rename) first open
//! its parent the same way and then act with the `*at` calls on the last
//! component only.

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Write as _};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

pub use rustix::fs::{FileType, Stat};

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

/// The error of an access this process was refused (`EACCES`), for
/// saying why something it was told it may not read was left out.
pub fn denied() -> io::Error {
    rustix::io::Errno::ACCESS.into()
}

/// A directory that paths may not leave.
#[derive(Debug)]
pub struct Root {
    dir: OwnedFd,
    path: PathBuf,
    /// Set by [`Root::subdir_fenced`]: listings hide symlinks leaving an outer root.
    fence: Option<fence::Fence>,
}

/// How to open a file for writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Open an existing file or create it, without truncating (ESTO, REST).
    InPlace,
    /// Append (APPE).
    Append,
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Root {
    /// Open `path` as the root.
    pub fn open(path: &Path) -> io::Result<Root> {
        let dir = rustix::fs::open(path, OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
        Ok(Root { dir, path: path.to_path_buf(), fence: None })
    }

    /// The root's path on the local file system (for logs).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn rel(rel: &[u8]) -> &OsStr {
        if rel.is_empty() {
            OsStr::new(".")
        } else {
            OsStr::from_bytes(rel)
        }
    }

    fn open_at(&self, rel: &[u8], flags: OFlags, mode: u32) -> io::Result<OwnedFd> {
        let fd = rustix::fs::openat2(
            &self.dir,
            Self::rel(rel),
            flags | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
            RESOLVE,
        )?;
        Ok(fd)
    }

    /// Open a regular file for reading; anything else is refused before it
    /// is opened ([`Root::peek`]). Opened without blocking all the same, so
    /// that a FIFO swapped in meanwhile cannot hold the caller forever.
    pub fn open_read(&self, rel: &[u8]) -> io::Result<File> {
        Self::regular_stat(&self.stat(rel)?)?;
        self.open_read_listed(rel)
    }

    /// [`Root::open_read`] of a path a walk has just listed as a regular
    /// file, whose caller compares device and inode with the listing's:
    /// no peek first (one walk of the path less for each file of a tree).
    /// A node swapped in since the listing is refused, though opened, as
    /// one swapped in after a peek would be.
    pub fn open_read_listed(&self, rel: &[u8]) -> io::Result<File> {
        let f = File::from(self.open_at(rel, OFlags::RDONLY | OFlags::NONBLOCK, 0)?);
        Self::regular_only(&f)?;
        rustix::fs::fcntl_setfl(&f, OFlags::empty())?;
        Ok(f)
    }

    /// The status of what `rel` resolves to, from an `O_PATH` fd, which
    /// opens nothing. An `open` of a device node acts on the device (a
    /// watchdog arms, a tape rewinds on close, a modem line rises), so a
    /// served tree that holds one (a root of `/`) must not have it opened
    /// just to learn it is not a file. The open that follows a peek checks
    /// the type again: a node swapped in between is still refused, though
    /// opened (making one takes `CAP_MKNOD`).
    fn peek(&self, rel: &[u8], how: ResolveFlags) -> io::Result<Stat> {
        let fd = rustix::fs::openat2(&self.dir, Self::rel(rel), OFlags::PATH | OFlags::CLOEXEC, Mode::empty(), how)?;
        Ok(rustix::fs::fstat(&fd)?)
    }

    /// Refuse directories and special files (FIFOs, devices, sockets).
    fn regular_only(f: &File) -> io::Result<()> {
        Self::regular_stat(&rustix::fs::fstat(f)?)
    }

    /// [`Root::regular_only`] of a status.
    fn regular_stat(st: &Stat) -> io::Result<()> {
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => Ok(()),
            FileType::Directory => Err(io::Error::new(io::ErrorKind::IsADirectory, "is a directory")),
            _ => Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file")),
        }
    }

    /// [`Root::peek`] of a path about to be opened for writing: `Ok` when
    /// nothing is there yet (it will be created) or a regular file is.
    fn peek_writable(&self, rel: &[u8], how: ResolveFlags) -> io::Result<()> {
        match self.peek(rel, how) {
            Ok(st) => Self::regular_stat(&st),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Open a file for writing in place or appending (created if missing).
    pub fn open_write(&self, rel: &[u8], how: WriteMode) -> io::Result<File> {
        let extra = if how == WriteMode::Append { OFlags::APPEND } else { OFlags::empty() };
        self.peek_writable(rel, RESOLVE)?;
        let f = File::from(self.open_at(rel, OFlags::WRONLY | OFlags::CREATE | OFlags::NONBLOCK | extra, 0o644)?);
        let st = rustix::fs::fstat(&f)?;
        Self::regular_stat(&st)?;
        Self::drop_set_ids(&f, st.st_mode)?;
        rustix::fs::fcntl_setfl(&f, extra)?;
        Ok(f)
    }

    /// A file written in place loses its setuid and setgid bits before
    /// the first byte, as the kernel does for a writer without
    /// CAP_FSETID: a server running as root kept them, so a client chose
    /// the contents of a setuid-root program (a security hunt's find).
    fn drop_set_ids(f: &File, mode: u32) -> io::Result<()> {
        let ids = rustix::fs::Mode::SUID.bits() | rustix::fs::Mode::SGID.bits();
        if mode & ids == 0 {
            return Ok(());
        }
        match rustix::fs::fchmod(f, rustix::fs::Mode::from_raw_mode(mode & 0o1777)) {
            // Not the owner, so without CAP_FSETID: the kernel clears the
            // bits at the first write itself (a review's find: the EPERM
            // refused APPE to a group-writable setgid file).
            Err(rustix::io::Errno::PERM) => Ok(()),
            r => Ok(r?),
        }
    }

    /// A new root at the directory `rel` beneath this one (for serving a
    /// subtree: paths stay confined to it).
    pub fn subdir(&self, rel: &[u8]) -> io::Result<Root> {
        let dir = self.open_at(rel, OFlags::RDONLY | OFlags::DIRECTORY, 0)?;
        let fence = self.fence.as_ref().map(|f| f.child(rel));
        Ok(Root { dir, path: self.path.join(OsStr::from_bytes(rel)), fence })
    }

    /// Open a directory (for listing).
    pub fn open_dir(&self, rel: &[u8]) -> io::Result<OwnedFd> {
        self.open_at(rel, OFlags::RDONLY | OFlags::DIRECTORY, 0)
    }

    /// Status of a path, following symlinks that stay beneath the root.
    pub fn stat(&self, rel: &[u8]) -> io::Result<Stat> {
        self.peek(rel, RESOLVE)
    }

    /// Split `rel` into an open parent directory and the last component.
    fn parent<'a>(&self, rel: &'a [u8]) -> io::Result<(OwnedFd, &'a OsStr)> {
        let (dir, name) = match rel.iter().rposition(|&b| b == b'/') {
            Some(i) => (&rel[..i], &rel[i + 1..]),
            None => (&b""[..], rel),
        };
        if name.is_empty() || name == b"." || name == b".." {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a file name"));
        }
        Ok((self.open_at(dir, OFlags::PATH | OFlags::DIRECTORY, 0)?, OsStr::from_bytes(name)))
    }

    /// Create a directory.
    pub fn mkdir(&self, rel: &[u8]) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        Ok(rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755))?)
    }

    /// Remove a file (or a symlink itself).
    pub fn unlink(&self, rel: &[u8]) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        Ok(rustix::fs::unlinkat(&dir, name, AtFlags::empty())?)
    }

    /// Remove an empty directory.
    pub fn rmdir(&self, rel: &[u8]) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        Ok(rustix::fs::unlinkat(&dir, name, AtFlags::REMOVEDIR)?)
    }

    /// Rename within the root.
    pub fn rename(&self, from: &[u8], to: &[u8]) -> io::Result<()> {
        let (fdir, fname) = self.parent(from)?;
        let (tdir, tname) = self.parent(to)?;
        Ok(rustix::fs::renameat(&fdir, fname, &tdir, tname)?)
    }

    /// Change permission bits (of the regular file or directory a path
    /// resolves to beneath the root, never the root itself). Opened without blocking (a FIFO
    /// would wait for a writer), and special files are refused.
    pub fn chmod(&self, rel: &[u8], mode: u32) -> io::Result<()> {
        if let Err(e) = Self::regular_stat(&self.stat(rel)?) {
            if e.kind() != io::ErrorKind::IsADirectory {
                return Err(e);
            }
        }
        // An O_PATH descriptor: the owner may change the mode of a file it
        // cannot read (mode 000), and an open for reading needed the read
        // bit, so a mode without it could never be undone, and a
        // directory set so could not be emptied or removed (a defect
        // hunt's find).
        let fd = self.open_at(rel, OFlags::PATH, 0)?;
        let (st, top) = (rustix::fs::fstat(&fd)?, rustix::fs::fstat(&self.dir)?);
        if (st.st_dev, st.st_ino) == (top.st_dev, top.st_ino) {
            // Mode 000 there would lock every session out, for good.
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, "the served root's mode cannot be changed"));
        }
        // A directory keeps its own setgid bit, as in `set_dir_meta_strict`.
        let setgid = match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => st.st_mode & 0o2000,
            _ => Self::regular_stat(&st).map(|()| 0)?,
        };
        let mode = Mode::from_raw_mode(mode | setgid);
        match rustix::fs::chmodat(rustix::fs::CWD, fd_link(&fd).as_str(), mode, AtFlags::empty()) {
            // No /proc: through a descriptor open for reading, as before.
            Err(rustix::io::Errno::NOENT) => {
                let f = File::from(self.open_at(rel, OFlags::RDONLY | OFlags::NONBLOCK, 0)?);
                Self::regular_or_dir(&f)?;
                Ok(rustix::fs::fchmod(&f, mode)?)
            }
            r => Ok(r?),
        }
    }

    /// Make the directory `rel` `u+rwx` if this process owns it and it is
    /// not (never the served root): a tree written into a directory whose
    /// source mode lacks the owner's write bit (0555) could be copied once
    /// and never again, nor resumed. Returns whether it changed the mode.
    pub fn let_owner_into(&self, rel: &[u8]) -> io::Result<bool> {
        let fd = self.open_at(rel, OFlags::PATH | OFlags::DIRECTORY, 0)?;
        let (st, top) = (rustix::fs::fstat(&fd)?, rustix::fs::fstat(&self.dir)?);
        if (st.st_dev, st.st_ino) == (top.st_dev, top.st_ino) {
            return Ok(false);
        }
        let_owner_at(&fd)
    }

    /// [`Root::let_owner_into`] for this root's own directory: a client's
    /// destination directory, never a served root (no session may change
    /// that one's mode). A tree downloaded into a directory its last copy
    /// made 0555 failed there, "creating a: Permission denied", on every
    /// run (a defect hunt's find).
    pub fn let_owner_into_self(&self) -> io::Result<bool> {
        let_owner_at(&self.dir)
    }

    /// The file opened again (without /proc) is still a regular file or
    /// a directory.
    fn regular_or_dir(f: &File) -> io::Result<()> {
        match Self::regular_only(f) {
            Err(e) if e.kind() == io::ErrorKind::IsADirectory => Ok(()),
            r => r,
        }
    }

    /// Entries of a directory with their `lstat`, sorted by name.
    pub fn read_dir(&self, rel: &[u8]) -> io::Result<Vec<(Vec<u8>, Stat)>> {
        let list = self.read_dir_with(rel, |_, _, _| ())?;
        Ok(list.into_iter().map(|(name, st, ())| (name, st)).collect())
    }

    /// [`Root::read_dir`] with what this process may do with each entry
    /// itself (a symlink is not followed: its [`Allowed`] says nothing).
    pub fn read_dir_allowed(&self, rel: &[u8]) -> io::Result<Vec<(Vec<u8>, Stat, Allowed)>> {
        self.read_dir_with(rel, |fd, name, st| {
            let dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
            Allowed::at(fd.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW, dir)
        })
    }

    /// [`Root::read_dir`] with whether this process may read each entry,
    /// as `faccessat(2)` with its effective ids answers (ACLs and
    /// capabilities count): a file, read it; a directory, list it (read
    /// and search). Other kinds: `true` (nothing to read). One call an
    /// entry.
    pub fn read_dir_readable(&self, rel: &[u8]) -> io::Result<Vec<(Vec<u8>, Stat, bool)>> {
        use rustix::fs::Access;
        self.read_dir_with(rel, |fd, name, st| {
            let need = match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => Access::READ_OK | Access::EXEC_OK,
                FileType::RegularFile => Access::READ_OK,
                _ => return true,
            };
            rustix::fs::accessat(fd, name, need, AtFlags::SYMLINK_NOFOLLOW | AtFlags::EACCESS).is_ok()
        })
    }

    fn read_dir_with<T>(
        &self,
        rel: &[u8],
        mut more: impl FnMut(&OwnedFd, &std::ffi::CStr, &Stat) -> T,
    ) -> io::Result<Vec<(Vec<u8>, Stat, T)>> {
        let fd = self.open_dir(rel)?;
        let mut out = Vec::new();
        for entry in rustix::fs::Dir::read_from(&fd)? {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            match rustix::fs::statat(&fd, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if !self.fenced_out(rel, name, &st) => {
                    let t = more(&fd, entry.file_name(), &st);
                    out.push((name.to_vec(), st, t));
                }
                // A directory readable but not searchable: its names, but
                // none of its files. It cannot be listed.
                Err(rustix::io::Errno::ACCESS) => return Err(denied()),
                _ => {} // gone since it was read, or fenced out
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// [`Root::stat`] with what this process may do with the file or
    /// directory `rel` resolves to, and with the directory holding the
    /// name (`None` for the root itself, which has none beneath the root).
    pub fn stat_allowed(&self, rel: &[u8]) -> io::Result<(Stat, Allowed, Option<Allowed>)> {
        let fd = self.open_at(rel, OFlags::PATH, 0)?;
        let st = rustix::fs::fstat(&fd)?;
        let own = Allowed::of(&fd, FileType::from_raw_mode(st.st_mode) == FileType::Directory);
        let parent = match rel {
            b"" | b"." => None,
            _ => Some(Allowed::of(&self.parent(rel)?.0, true)),
        };
        Ok((st, own, parent))
    }

    /// Create a hidden temporary file next to `rel`; it becomes `rel` with
    /// [`TempFile::commit`] and disappears when dropped uncommitted.
    pub fn create_temp(&self, rel: &[u8]) -> io::Result<TempFile> {
        let (dir, name) = self.parent(rel)?;
        TempFile::create(Arc::new(dir), name, 0o644)
    }
}

/// What this process may do with a file, as `faccessat(2)` with its
/// effective ids answers: ACLs, read-only mounts and capabilities count,
/// which permission bits alone do not show.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Allowed {
    /// Read it (list a directory).
    pub read: bool,
    /// Write it (make and remove entries in a directory).
    pub write: bool,
    /// Search a directory (always `false` for a file: not asked).
    pub search: bool,
}

impl Allowed {
    /// The entry `name` of `dir`; `search` is asked only for a directory.
    /// One call when everything is allowed (the usual case), else one a right.
    fn at<P: rustix::path::Arg + Copy>(dir: BorrowedFd<'_>, name: P, flags: AtFlags, is_dir: bool) -> Allowed {
        use rustix::fs::Access;
        let ok = |a| rustix::fs::accessat(dir, name, a, flags | AtFlags::EACCESS).is_ok();
        let all = Access::READ_OK | Access::WRITE_OK | if is_dir { Access::EXEC_OK } else { Access::empty() };
        if ok(all) {
            return Allowed { read: true, write: true, search: is_dir };
        }
        Allowed { read: ok(Access::READ_OK), write: ok(Access::WRITE_OK), search: is_dir && ok(Access::EXEC_OK) }
    }

    /// The file `fd` (`O_PATH` will do) names: through its `/proc/self/fd`
    /// link, which leads to that very file and nowhere else. Nothing is
    /// allowed when `/proc` is not there.
    fn of(fd: &OwnedFd, is_dir: bool) -> Allowed {
        Allowed::at(rustix::fs::CWD, fd_link(fd).as_str(), AtFlags::empty(), is_dir)
    }
}

// ---------------------------------------------------------------------------
// Replacing a file with an upload. A [`TempFile`] renamed over a name needs
// only write permission on the directory; writing the old file in place
// (what a STOR means) needs write permission on the file itself.

impl Root {
    /// Before replacing `rel` with a [`TempFile`]: the permission bits
    /// (`& 0o777`) of the regular file there, once this process has shown
    /// that it could open that file for writing itself (without
    /// truncating it); `None` when nothing is there (or a special file,
    /// left to the rename). Errors: `PermissionDenied` (or the open's
    /// other error) when the file could not be written in place,
    /// `IsADirectory`, and those of resolving `rel` beneath the root.
    pub fn replaceable_mode(&self, rel: &[u8]) -> io::Result<Option<u32>> {
        let st = match self.stat(rel) {
            Ok(st) => st,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => {}
            FileType::Directory => return Err(io::Error::new(io::ErrorKind::IsADirectory, "is a directory")),
            _ => return Ok(None),
        }
        self.may_write(rel, st.st_mode)?;
        Ok(Some(st.st_mode & 0o777))
    }

    /// Whether this process could open the regular file `rel` (of `mode`)
    /// for writing, as [`beneath::may_write`] asks (not opening it unless
    /// it must: overlayfs copies a file up on an open for writing).
    fn may_write(&self, rel: &[u8], mode: u32) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        Ok(beneath::may_write(&dir, name, mode)?)
    }

    /// [`Root::create_temp`] to replace `rel`: refused as
    /// [`Root::replaceable_mode`] says, and with the old file's permission
    /// bits (which writing in place would have kept); a file made new has
    /// `new_mode` where given (exactly: the umask does not apply), else
    /// 0644 less the umask.
    pub fn create_temp_replacing(&self, rel: &[u8], new_mode: Option<u32>) -> io::Result<TempFile> {
        let mode = self.replaceable_mode(rel)?.or(new_mode);
        let (dir, name) = self.parent(rel)?;
        // Made with those bits: where they cannot be set exactly
        // ([`beneath::set_mode_kept`]), it has no more than them.
        let t = TempFile::create(Arc::new(dir), name, mode.unwrap_or(0o644))?;
        if let Some(m) = mode {
            beneath::set_mode_kept(&t, m)?;
        }
        Ok(t)
    }
}

// ---------------------------------------------------------------------------
// Rebuilding a received tree (virtual-file unpack, issue 5) and walking one
// (pack). Added as a block; the methods above are unchanged.
//
// The `*_strict` methods resolve with RESOLVE_NO_SYMLINKS as well: no
// component of the path may be a symlink, not even one that stays beneath
// the root, so a symlink planted in the destination (or created by the same
// transfer) can never redirect a create, a write or a metadata change.

const STRICT: ResolveFlags = RESOLVE.union(ResolveFlags::NO_SYMLINKS);

impl Root {
    /// Split `rel` into its parent, opened without following any symlink,
    /// and the last component.
    fn parent_strict<'a>(&self, rel: &'a [u8]) -> io::Result<(OwnedFd, &'a OsStr)> {
        let (dir, name) = match rel.iter().rposition(|&b| b == b'/') {
            Some(i) => (&rel[..i], &rel[i + 1..]),
            None => (&b""[..], rel),
        };
        if name.is_empty() || name == b"." || name == b".." {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a file name"));
        }
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat2(&self.dir, Self::rel(dir), flags, Mode::empty(), STRICT);
        Ok((fd.map_err(|e| beneath::symlink_refused(e.into()))?, OsStr::from_bytes(name)))
    }

    /// Status of the path itself (a symlink is not followed).
    pub fn lstat(&self, rel: &[u8]) -> io::Result<Stat> {
        if rel.is_empty() {
            return Ok(rustix::fs::fstat(&self.dir)?);
        }
        let (dir, name) = self.parent(rel)?;
        Ok(rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)?)
    }

    /// The contents of a symlink.
    pub fn read_link(&self, rel: &[u8]) -> io::Result<Vec<u8>> {
        let (dir, name) = self.parent(rel)?;
        Ok(rustix::fs::readlinkat(&dir, name, Vec::new())?.into_bytes())
    }

    /// Create a directory, or accept an existing one that really is a
    /// directory (not a symlink to one). Returns whether it was created.
    pub fn mkdir_strict(&self, rel: &[u8], mode: u32) -> io::Result<bool> {
        let (dir, name) = self.parent_strict(rel)?;
        mkdir_in(&dir, name, mode)
    }

    /// Remove an empty directory, without following symlinks in any
    /// component.
    pub fn rmdir_strict(&self, rel: &[u8]) -> io::Result<()> {
        let (dir, name) = self.parent_strict(rel)?;
        Ok(rustix::fs::unlinkat(&dir, name, AtFlags::REMOVEDIR)?)
    }

    /// Open a directory without following symlinks in any component.
    pub fn open_dir_strict(&self, rel: &[u8]) -> io::Result<File> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat2(&self.dir, Self::rel(rel), flags, Mode::empty(), STRICT)?;
        Ok(File::from(fd))
    }

    /// Give the directory `rel` (never a symlink, strict parents) `mode`
    /// and the mtime `sec`.`nsec`. It need not be readable (a tree may
    /// give its directories mode 0): it is opened `O_PATH` and changed
    /// through its `/proc/self/fd` link, which leads to it alone.
    pub fn set_dir_meta_strict(&self, rel: &[u8], mode: u32, (sec, nsec): (i64, u32)) -> io::Result<()> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat2(&self.dir, Self::rel(rel), flags, Mode::empty(), STRICT)?;
        // Its own setgid bit stays, as GNU chmod keeps a directory's: a
        // shared group directory (2775) the tree went into lost it, and
        // files made in it afterwards the group.
        let setgid = rustix::fs::fstat(&fd)?.st_mode & 0o2000;
        let omit = rustix::fs::Timespec { tv_sec: 0, tv_nsec: rustix::fs::UTIME_OMIT };
        let mtime = rustix::fs::Timespec { tv_sec: sec, tv_nsec: nsec.into() };
        let times = rustix::fs::Timestamps { last_access: omit, last_modification: mtime };
        dir_meta_at(&fd, Mode::from_raw_mode(mode | setgid), Some(&times))
    }

    /// Like [`Root::create_temp`] (mode 0600), with a strict parent.
    pub fn create_temp_strict(&self, rel: &[u8]) -> io::Result<TempFile> {
        let (dir, name) = self.parent_strict(rel)?;
        TempFile::create(Arc::new(dir), name, 0o600)
    }

    /// Create (or atomically replace) `rel` as a symlink to `target`. The
    /// target is stored as is; nothing here follows it.
    pub fn symlink_strict(&self, target: &[u8], rel: &[u8]) -> io::Result<()> {
        let (dir, name) = self.parent_strict(rel)?;
        let tmp = temp_name(name);
        rustix::fs::symlinkat(OsStr::from_bytes(target), &dir, OsStr::from_bytes(&tmp))?;
        Self::rename_into_place(&dir, &tmp, name)
    }

    /// Create (or atomically replace) `rel` as a hard link to `existing`.
    pub fn hard_link_strict(&self, existing: &[u8], rel: &[u8]) -> io::Result<()> {
        let (edir, ename) = self.parent_strict(existing)?;
        let (dir, name) = self.parent_strict(rel)?;
        let tmp = temp_name(name);
        rustix::fs::linkat(&edir, ename, &dir, OsStr::from_bytes(&tmp), AtFlags::empty())?;
        Self::rename_into_place(&dir, &tmp, name)
    }

    /// Rename `tmp` to `name` in `dir`; never leave `tmp` behind (renaming
    /// onto another link of the same inode succeeds without doing anything).
    fn rename_into_place(dir: &OwnedFd, tmp: &[u8], name: &OsStr) -> io::Result<()> {
        let r = rustix::fs::renameat(dir, OsStr::from_bytes(tmp), dir, name);
        let _ = rustix::fs::unlinkat(dir, OsStr::from_bytes(tmp), AtFlags::empty());
        Ok(r?)
    }

    /// Set the modification time of the path itself (a symlink is not
    /// followed); the access time is left alone.
    pub fn set_mtime_strict(&self, rel: &[u8], sec: i64, nsec: u32) -> io::Result<()> {
        let (dir, name) = self.parent_strict(rel)?;
        let omit = rustix::fs::Timespec { tv_sec: 0, tv_nsec: rustix::fs::UTIME_OMIT };
        let mtime = rustix::fs::Timespec { tv_sec: sec, tv_nsec: nsec.into() };
        let times = rustix::fs::Timestamps { last_access: omit, last_modification: mtime };
        Ok(rustix::fs::utimensat(&dir, name, &times, AtFlags::SYMLINK_NOFOLLOW)?)
    }
}

/// `mkdirat`, accepting an existing directory (not a symlink to one).
fn mkdir_in(dir: &OwnedFd, name: &OsStr, mode: u32) -> io::Result<bool> {
    match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(mode)) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::EXIST) => {
            let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                Ok(false)
            } else {
                Err(io::Error::new(io::ErrorKind::AlreadyExists, "exists and is not a directory"))
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// One path component: not empty, `.`, `..`, and without `/`.
fn component(name: &[u8]) -> io::Result<&OsStr> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a file name"));
    }
    Ok(OsStr::from_bytes(name))
}

/// The process's umask, read once from `/proc/self/status` (Linux 4.7+;
/// lightpath never changes it); `None` when it cannot be read.
fn umask() -> Option<u32> {
    static UMASK: OnceLock<Option<u32>> = OnceLock::new();
    *UMASK.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let v = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
        u32::from_str_radix(v.trim(), 8).ok()
    })
}

/// Whether new entries in `dir` could get permissions other than
/// `mode & !umask` (a default ACL, or we cannot tell).
fn may_have_default_acl(dir: &OwnedFd) -> bool {
    let r = rustix::fs::fgetxattr_query(dir, "system.posix_acl_default");
    !matches!(r, Err(rustix::io::Errno::NODATA | rustix::io::Errno::NOTSUP))
}

/// A directory beneath a [`Root`], resolved once (no symlink in any
/// component) for making many entries in it, where
/// [`Root::create_temp_strict`] and [`Root::mkdir_strict`] resolve the
/// parent on every call. Like the parent a [`TempFile`] holds, the
/// descriptor keeps naming the directory it was opened on even if a path
/// component is replaced afterwards; names given to it are single
/// components, so nothing is resolved through it.
#[derive(Debug)]
pub struct StrictDir {
    fd: Arc<OwnedFd>,
    /// The umask when a file created here gets exactly `mode & !umask`
    /// (no default ACL); `None` when its mode must be set afterwards.
    umask: Option<u32>,
}

impl Root {
    /// Open the directory `rel` (`""`: the root) for [`StrictDir`]'s calls,
    /// without following a symlink in any component.
    pub fn strict_dir(&self, rel: &[u8]) -> io::Result<StrictDir> {
        let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let open = |f| rustix::fs::openat2(&self.dir, Self::rel(rel), flags | f, Mode::empty(), STRICT);
        match open(OFlags::RDONLY) {
            Ok(fd) => {
                let umask = umask().filter(|_| !may_have_default_acl(&fd));
                Ok(StrictDir { fd: Arc::new(fd), umask })
            }
            // Not readable (only writable and searchable): no ACL check.
            Err(rustix::io::Errno::ACCESS) => Ok(StrictDir { fd: Arc::new(open(OFlags::PATH)?), umask: None }),
            Err(e) => Err(beneath::symlink_refused(e.into())),
        }
    }
}

impl StrictDir {
    /// Whether this directory was removed since it was opened (no link
    /// left): what is made in it then fails for that, not for one entry.
    pub fn is_removed(&self) -> bool {
        rustix::fs::fstat(&*self.fd).is_ok_and(|st| st.st_nlink == 0)
    }

    /// Like [`Root::mkdir_strict`] for the entry `name` of this directory.
    /// An existing directory this process owns but may not write or
    /// search in (an earlier copy of a tree gave it its source's mode 0,
    /// say) is made `u+rwx`, as one made here is while a tree is written:
    /// the caller gives it its mode once the tree is complete.
    pub fn mkdir(&self, name: &[u8], mode: u32) -> io::Result<bool> {
        let name = component(name)?;
        let made = mkdir_in(&self.fd, name, mode)?;
        if !made {
            let_owner_in(&self.fd, name)?;
        }
        Ok(made)
    }

    /// A temporary file for the entry `name` of this directory (see
    /// [`Root::create_temp`]) with exactly the permission bits `mode`
    /// (`& 0o7777`; a caller that wants no setuid/setgid drops them). The
    /// mode is given at creation when the umask and the directory allow it
    /// (no extra call), else set at once with `fchmod`. A file already at
    /// `name` is replaced only if this process could write it in place, as
    /// [`Root::create_temp_replacing`] rules for a single file (a tree
    /// does not get round a read-only file that `STOR` may not replace),
    /// or owns it: a tree's read-only files (0444, as git's objects are)
    /// were given that mode by the tree's last copy, which could then be
    /// made once and never again, nor resumed (a defect hunt's find).
    pub fn create_temp(&self, name: &[u8], mode: u32) -> io::Result<TempFile> {
        let mode = mode & 0o7777;
        let name = component(name)?;
        beneath::replaceable_mode_in(&self.fd, name, true)?;
        let t = TempFile::create(self.fd.clone(), name, mode)?;
        let exact = self.umask.is_some_and(|u| mode & !0o777 == 0 && mode & u == 0);
        if !exact {
            beneath::set_mode_kept(&t, mode)?;
        }
        Ok(t)
    }
}

mod beneath;
mod fence;
mod named;
mod procfd;
mod temp;
pub use beneath::{access_denied, is_entry_refused, mode_refused, refused_by_file_system, EntryRefused};
pub use fence::OnHidden;
pub use named::{remove_temp_files, remove_temp_files_within};
use procfd::{dir_meta_at, fd_link, let_owner_at, let_owner_in};
use temp::temp_name;
pub use temp::{char_cut, is_temp_name, RunFiles, TempFile};

#[cfg(test)]
mod strict_tests {
    use super::*;

    #[test]
    fn strict_ops_never_follow_symlinks() {
        let p = std::env::temp_dir().join(format!("lp-root-strict-{}", std::process::id()));
        std::fs::create_dir_all(p.join("root/real")).unwrap();
        std::fs::create_dir_all(p.join("out")).unwrap();
        std::os::unix::fs::symlink(p.join("out"), p.join("root/up")).unwrap();
        std::os::unix::fs::symlink("real", p.join("root/in")).unwrap();
        let r = Root::open(&p.join("root")).unwrap();
        assert!(r.mkdir_strict(b"up", 0o700).is_err(), "existing symlink is not a directory");
        assert!(r.mkdir_strict(b"in/x", 0o700).is_err(), "no symlink in the parent, even inside");
        assert!(r.create_temp_strict(b"in/f").is_err());
        assert!(!r.mkdir_strict(b"real", 0o700).unwrap(), "a real directory is accepted");
        r.symlink_strict(b"../out", b"in").unwrap();
        assert_eq!(r.read_link(b"in").unwrap(), b"../out", "symlink replaced");
        std::fs::write(p.join("root/real/f"), b"x").unwrap();
        r.hard_link_strict(b"real/f", b"g").unwrap();
        r.hard_link_strict(b"real/f", b"g").unwrap();
        r.set_mtime_strict(b"in", 1, 2).unwrap();
        assert_eq!(r.lstat(b"in").unwrap().st_mtime, 1);
        let names: Vec<_> = r.read_dir(b"").unwrap().into_iter().map(|e| e.0).collect();
        assert_eq!(names, [&b"g"[..], b"in", b"real", b"up"], "no temporary names left");
        assert_eq!(std::fs::read_dir(p.join("out")).unwrap().count(), 0);
        std::fs::remove_dir_all(&p).unwrap();
    }
}

#[cfg(test)]
mod strict_dir_tests {
    use super::*;
    use std::os::unix::fs::{FileExt, PermissionsExt};

    #[test]
    fn strict_dir_creates_with_exact_modes_and_refuses_paths() {
        let p = std::env::temp_dir().join(format!("lp-root-sdir-{}", std::process::id()));
        std::fs::create_dir_all(p.join("root/real")).unwrap();
        std::os::unix::fs::symlink("real", p.join("root/in")).unwrap();
        let r = Root::open(&p.join("root")).unwrap();
        assert!(r.strict_dir(b"in").is_err(), "a symlinked directory is refused");
        let d = r.strict_dir(b"real").unwrap();
        for (name, mode) in [(&b"a"[..], 0o644), (b"b", 0o666), (b"c", 0o1750), (b"d", 0o400)] {
            let t = d.create_temp(name, mode).unwrap();
            t.file().write_all_at(b"x", 0).unwrap();
            assert_eq!(t.file().metadata().unwrap().permissions().mode() & 0o7777, mode);
            t.commit().unwrap();
        }
        for bad in [&b""[..], b".", b"..", b"x/y", b"../x"] {
            assert!(d.create_temp(bad, 0o644).is_err(), "{bad:?}");
            assert!(d.mkdir(bad, 0o700).is_err(), "{bad:?}");
        }
        assert!(d.mkdir(b"sub", 0o700).unwrap() && !d.mkdir(b"sub", 0o700).unwrap());
        std::os::unix::fs::symlink(".", p.join("root/real/ln")).unwrap();
        assert!(d.mkdir(b"ln", 0o700).is_err(), "an existing symlink is not a directory");
        let names: Vec<_> = r.read_dir(b"real").unwrap().into_iter().map(|e| e.0).collect();
        assert_eq!(names, [&b"a"[..], b"b", b"c", b"d", b"ln", b"sub"], "no temporary names left");
        std::fs::remove_dir_all(&p).unwrap();
    }

    #[test]
    fn a_directorys_own_setgid_bit_outlives_its_new_mode() {
        let p = std::env::temp_dir().join(format!("lp-root-sgid-{}", std::process::id()));
        std::fs::create_dir_all(p.join("root/shared")).unwrap();
        std::fs::create_dir_all(p.join("root/plain")).unwrap();
        std::fs::set_permissions(p.join("root/shared"), std::fs::Permissions::from_mode(0o2775)).unwrap();
        let r = Root::open(&p.join("root")).unwrap();
        for (dir, want) in [(&b"shared"[..], 0o2750), (b"plain", 0o750)] {
            r.set_dir_meta_strict(dir, 0o750, (1_000_000_000, 0)).unwrap();
            let m = std::fs::metadata(p.join("root").join(OsStr::from_bytes(dir))).unwrap();
            assert_eq!(m.permissions().mode() & 0o7777, want, "{dir:?}");
            r.chmod(dir, 0o755).unwrap();
            let m = std::fs::metadata(p.join("root").join(OsStr::from_bytes(dir))).unwrap();
            assert_eq!(m.permissions().mode() & 0o7777, want & 0o2000 | 0o755, "{dir:?} (SITE CHMOD)");
        }
        std::fs::remove_dir_all(&p).unwrap();
    }
}

#[cfg(test)]
mod tests;

//! A download written file by file into a local directory (the client):
//! the destination directory is the root, and nothing beneath it is
//! followed as a symlink, as the virtual-file unpacker does.

use super::*;

/// The error for a path refused because a symlink is on the way (`ELOOP`
/// from `RESOLVE_NO_SYMLINKS` or `O_NOFOLLOW`); others are kept.
pub(super) fn symlink_refused(e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
        return EntryRefused::error("a symlink is in the way (not followed)");
    }
    e
}

/// An error that concerns one entry of a tree alone, in its own words: a
/// symlink in its way, or a file there that this process may not
/// replace. `cp -r` leaves such an entry out and goes on.
#[derive(Debug)]
pub struct EntryRefused(pub &'static str);

impl std::fmt::Display for EntryRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for EntryRefused {}

impl EntryRefused {
    /// The error (`InvalidInput`) that carries this refusal of one entry.
    pub fn error(why: &'static str) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, EntryRefused(why))
    }
}

/// Whether `e` is what a file system answers when it refuses one name or
/// kind of entry (exFAT or FAT: `a:b`, `what?`, a symlink, a hard link; a
/// name it holds for another), not a fault of the whole destination.
pub fn refused_by_file_system(e: &io::Error) -> bool {
    use rustix::io::Errno;
    const REFUSALS: [Errno; 9] = [
        Errno::INVAL,
        Errno::ILSEQ,
        Errno::NAMETOOLONG,
        Errno::EXIST,
        Errno::PERM,
        Errno::OPNOTSUPP,
        Errno::NOSYS,
        Errno::MLINK,
        Errno::XDEV,
    ];
    e.raw_os_error().is_some_and(|n| REFUSALS.contains(&Errno::from_raw_os_error(n)))
}

/// Whether `e`, from a `chmod` of a file or directory this process
/// made, says the file system keeps no such permission bits (FAT and
/// exFAT through FUSE, bindfs `--chmod-deny`: `EPERM`; some FUSE file
/// systems: `EOPNOTSUPP`, `ENOSYS`), rather than that something failed.
pub fn mode_refused(e: &io::Error) -> bool {
    use rustix::io::Errno;
    const REFUSALS: [Errno; 3] = [Errno::PERM, Errno::OPNOTSUPP, Errno::NOSYS];
    e.raw_os_error().is_some_and(|n| REFUSALS.contains(&Errno::from_raw_os_error(n)))
}

/// Whether `e` is `EACCES`: permission bits (or an ACL) forbid it, not
/// the file system (`EPERM`, which Rust calls by the same kind).
pub fn access_denied(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::ACCESS.raw_os_error())
}

/// Give the file being received `t` the permission bits `m`, as it was
/// created with them (less the umask). Where the file system refuses
/// ([`mode_refused`]) it keeps its creation bits, never more than `m`:
/// not a failure. Every upload to a server on such a file system failed
/// with a bare `EPERM` where globus-url-copy's went, and a tree left out
/// each file whose mode was not exact (0664) (a defect hunt's find).
pub(super) fn set_mode_kept(t: &TempFile, m: u32) -> io::Result<()> {
    match rustix::fs::fchmod(t.file(), Mode::from_raw_mode(m)) {
        Err(e) if mode_refused(&e.into()) => Ok(()),
        r => Ok(r?),
    }
}

/// Whether `e` is an [`EntryRefused`].
pub fn is_entry_refused(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<EntryRefused>())
}

/// The permission bits of the regular file `name` in `dir`, once this
/// process has shown it could open it for writing ([`may_write`]: not
/// following a symlink, not opening it unless it is a program), or, with `owned`, that it owns
/// it (and so could make it writable); `None` when nothing or a symlink
/// or special file is there (the rename replaces it without following it).
pub(super) fn replaceable_mode_in(dir: &OwnedFd, name: &OsStr, owned: bool) -> io::Result<Option<u32>> {
    let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => {}
        FileType::Directory => return Err(io::Error::new(io::ErrorKind::IsADirectory, "is a directory")),
        _ => return Ok(None),
    }
    match may_write(dir, name, st.st_mode) {
        Ok(()) => Ok(Some(st.st_mode & 0o777)),
        // Only its mode stops us: its owner could change that. (A running
        // program, ETXTBSY, stays refused.)
        Err(rustix::io::Errno::ACCESS) if owned && st.st_uid == rustix::process::geteuid().as_raw() => {
            Ok(Some(st.st_mode & 0o777))
        }
        // A tree's (`owned`) entry alone: left out, the rest written.
        Err(rustix::io::Errno::ACCESS) if owned => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            EntryRefused("a file this user may not write is in its place (Permission denied)"),
        )),
        Err(e) => Err(symlink_refused(e.into())),
    }
}

/// Whether this process could open the regular file `name` (of `mode`)
/// for writing: `faccessat` with its effective ids, which opens nothing.
/// An open for writing made overlayfs copy the whole file up from a lower
/// layer (0.65 s for 300 MB; ENOSPC where the upper layer was small), only
/// to be replaced (a defect hunt's find). A program's file is opened all
/// the same, as only an open says that it runs (`ETXTBSY`), except on
/// overlayfs; so is any file where `faccessat2` is refused (`ENOSYS`, or
/// `EPERM` from an old container's seccomp filter, which an open then
/// confirms or not).
pub(super) fn may_write(dir: &OwnedFd, name: &OsStr, mode: u32) -> rustix::io::Result<()> {
    if mode & 0o111 == 0 || on_overlay(dir) {
        let flags = AtFlags::EACCESS | AtFlags::SYMLINK_NOFOLLOW;
        match rustix::fs::accessat(dir, name, rustix::fs::Access::WRITE_OK, flags) {
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {}
            r => return r,
        }
    }
    let flags = OFlags::WRONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(dir, name, flags, Mode::empty()).map(drop)
}

/// Whether `dir` is on overlayfs (`OVERLAYFS_SUPER_MAGIC`).
fn on_overlay(dir: &OwnedFd) -> bool {
    rustix::fs::fstatfs(dir).is_ok_and(|s| s.f_type as u64 == 0x794c_7630)
}

impl Root {
    /// A new root at the directory `rel` beneath this one, resolved without
    /// following a symlink in any component.
    pub fn subdir_strict(&self, rel: &[u8]) -> io::Result<Root> {
        // Not O_NOFOLLOW: with O_DIRECTORY it says ENOTDIR of a symlink,
        // where RESOLVE_NO_SYMLINKS says ELOOP.
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let dir = rustix::fs::openat2(&self.dir, Self::rel(rel), flags, Mode::empty(), STRICT);
        let dir = dir.map_err(io::Error::from).map_err(symlink_refused)?;
        let fence = self.fence.as_ref().map(|f| f.child(rel));
        Ok(Root { dir, path: self.path.join(Self::rel(rel)), fence })
    }

    /// Create the directory `rel` and its missing parents (`mkdir -p`),
    /// accepting existing real directories; a symlink in the way (one to a
    /// directory too) is refused. `""` is the root itself.
    pub fn mkdir_all_strict(&self, rel: &[u8], mode: u32) -> io::Result<()> {
        if rel.is_empty() {
            return Ok(());
        }
        let ends = rel.iter().enumerate().filter(|&(_, &b)| b == b'/').map(|(i, _)| i);
        for end in ends.chain([rel.len()]) {
            self.mkdir_strict(&rel[..end], mode).map_err(symlink_refused)?;
        }
        Ok(())
    }

    /// [`Root::create_temp_replacing`] with a strict parent: a temporary
    /// file (`mode` less the umask) to become `rel`, refused when a
    /// directory is there or a symlink is on the way; an old regular file's
    /// permission bits are kept, once shown writable (an old symlink is not
    /// followed: the commit replaces the link itself).
    pub fn create_temp_replacing_strict(&self, rel: &[u8], mode: u32) -> io::Result<TempFile> {
        let (dir, name) = self.parent_strict(rel).map_err(symlink_refused)?;
        let old = replaceable_mode_in(&dir, name, false)?;
        // Made with the old file's bits: where they cannot be set exactly,
        // the new file shows no more than the old one did.
        let t = TempFile::create(Arc::new(dir), name, old.unwrap_or(mode))?;
        if let Some(m) = old {
            set_mode_kept(&t, m)?;
        }
        Ok(t)
    }

    /// [`Root::open_read`] with no symlink followed in any component, the
    /// last included: for reading back what was written beneath a
    /// destination, where a symlink may be the peer's (`--verify`).
    pub fn open_read_strict(&self, rel: &[u8]) -> io::Result<File> {
        Self::regular_stat(&self.peek(rel, STRICT).map_err(symlink_refused)?)?;
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat2(&self.dir, Self::rel(rel), flags, Mode::empty(), STRICT);
        let f = File::from(fd.map_err(io::Error::from).map_err(symlink_refused)?);
        Self::regular_only(&f)?;
        rustix::fs::fcntl_setfl(&f, OFlags::empty())?;
        Ok(f)
    }

    /// Remove `rel` if it is a regular file (true), with no symlink
    /// followed on the way; anything else is left alone (false).
    pub fn remove_file_strict(&self, rel: &[u8]) -> io::Result<bool> {
        let (dir, name) = self.parent_strict(rel).map_err(symlink_refused)?;
        let st = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Ok(false);
        }
        rustix::fs::unlinkat(&dir, name, AtFlags::empty())?;
        Ok(true)
    }

    /// [`Root::open_write`] in place (created if missing, `mode` less the
    /// umask), with no symlink followed in any component, the last included.
    pub fn open_write_strict(&self, rel: &[u8], mode: u32) -> io::Result<File> {
        self.peek_writable(rel, STRICT).map_err(symlink_refused)?;
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat2(&self.dir, Self::rel(rel), flags, Mode::from_raw_mode(mode), STRICT);
        let f = File::from(fd.map_err(io::Error::from).map_err(symlink_refused)?);
        Self::regular_only(&f)?;
        rustix::fs::fcntl_setfl(&f, OFlags::empty())?;
        Ok(f)
    }
}

#[cfg(test)]
mod beneath_tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(tag: &str) -> (PathBuf, Root) {
        let p = std::env::temp_dir().join(format!("lp-root-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(p.join("root/real")).unwrap();
        std::fs::create_dir_all(p.join("out")).unwrap();
        std::os::unix::fs::symlink(p.join("out"), p.join("root/up")).unwrap();
        (p.clone(), Root::open(&p.join("root")).unwrap())
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<_> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    }

    #[test]
    fn directories_are_made_beneath_without_following_symlinks() {
        let (p, r) = scratch("mkdir-all");
        r.mkdir_all_strict(b"a/b/c", 0o777).unwrap();
        r.mkdir_all_strict(b"a/b/c", 0o777).unwrap();
        r.mkdir_all_strict(b"", 0o777).unwrap();
        assert!(p.join("root/a/b/c").is_dir());
        let e = r.mkdir_all_strict(b"up", 0o777).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        let e = r.mkdir_all_strict(b"up/x/y", 0o777).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        let e = r.subdir_strict(b"up").unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        assert_eq!(r.subdir_strict(b"a/b").unwrap().path(), p.join("root/a/b"));
        assert!(names(&p.join("out")).is_empty(), "nothing made outside");
        std::fs::remove_dir_all(&p).unwrap();
    }

    #[test]
    fn files_are_written_beneath_without_following_symlinks() {
        let (p, r) = scratch("write-beneath");
        let e = r.create_temp_replacing_strict(b"up/x", 0o666).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        assert!(r.open_write_strict(b"up/x", 0o666).unwrap_err().to_string().contains("symlink"));
        std::fs::write(p.join("out/victim"), b"outside").unwrap();
        assert!(r.open_read_strict(b"up/victim").unwrap_err().to_string().contains("symlink"));
        assert!(r.remove_file_strict(b"up/victim").unwrap_err().to_string().contains("symlink"));
        assert_eq!(std::fs::read(p.join("out/victim")).unwrap(), b"outside");
        std::fs::write(p.join("root/real/f"), b"in").unwrap();
        assert_eq!(std::io::read_to_string(r.open_read_strict(b"real/f").unwrap()).unwrap(), "in");
        assert!(!r.remove_file_strict(b"real").unwrap(), "a directory is left alone");
        assert!(r.remove_file_strict(b"real/f").unwrap());
        std::fs::write(p.join("out/victim"), b"keep").unwrap();
        std::os::unix::fs::symlink(p.join("out/victim"), p.join("root/real/link")).unwrap();
        assert!(r.open_write_strict(b"real/link", 0o666).unwrap_err().to_string().contains("symlink"));
        let e = r.create_temp_replacing_strict(b"real", 0o666).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::IsADirectory);
        let t = r.create_temp_replacing_strict(b"real/link", 0o666).unwrap();
        t.file().set_len(3).unwrap();
        t.commit().unwrap();
        assert!(p.join("root/real/link").symlink_metadata().unwrap().is_file(), "the link itself is replaced");
        std::fs::set_permissions(p.join("root/real/link"), std::fs::Permissions::from_mode(0o640)).unwrap();
        let t = r.create_temp_replacing_strict(b"real/link", 0o666).unwrap();
        assert_eq!(t.file().metadata().unwrap().permissions().mode() & 0o777, 0o640);
        drop(t);
        assert_eq!(names(&p.join("root/real")), ["link"], "no temporary file left");
        assert_eq!(std::fs::read(p.join("out/victim")).unwrap(), b"keep");
        assert_eq!(names(&p.join("out")), ["victim"]);
        std::fs::remove_dir_all(&p).unwrap();
    }
}

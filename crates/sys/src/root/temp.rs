//! Files received under a temporary name and given their final name only
//! when complete ([`TempFile`]).
//!
//! Where the file system allows it, a file is received as an unnamed
//! file (`O_TMPFILE`) and gets a name only when it is committed: a
//! server or client that is killed (SIGKILL, power loss, OOM) mid-transfer
//! leaves nothing behind, where a named `.NAME.lpPID-TOKEN-N.part` would stay,
//! hidden and holding its space, for ever. The name is given by `linkat`
//! of `/proc/self/fd/N` to a temporary name, then `renameat` over the
//! final one (atomic, replacing an old file); `AT_EMPTY_PATH` would need
//! CAP_DAC_READ_SEARCH. Without `/proc`, or on a file system without
//! `O_TMPFILE` (NFS, some FUSE), the file is named from the start.

use super::*;
use std::os::fd::AsRawFd;

/// `.name.lpPID-TOKEN-N.part`, unique in this process (the pid is read
/// once: lightpath never forks without exec). TOKEN is random, drawn once
/// per process: a tree's manifest could otherwise name a file exactly as
/// another file's temporary name, and its commit (a rename) would replace
/// that half-written file, which then took the other's name (a review
/// finding; only where files are named from the start, see above).
pub(super) fn temp_name(name: &OsStr) -> Vec<u8> {
    static ID: OnceLock<(u32, u64)> = OnceLock::new();
    let (pid, token) = *ID.get_or_init(|| {
        use std::hash::BuildHasher;
        // std's hasher keys come from the OS's random source.
        (std::process::id(), std::collections::hash_map::RandomState::new().hash_one(0u8))
    });
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let stem = &name.as_bytes()[..char_cut(name.as_bytes(), 180)];
    let mut tmp = Vec::with_capacity(stem.len() + 40);
    tmp.push(b'.');
    tmp.extend_from_slice(stem);
    // Writing to a Vec cannot fail.
    let _ = write!(tmp, ".lp{pid}-{token:016x}-{n}.part");
    tmp
}

/// How much of `name` a name made from it keeps: at most `max` bytes,
/// cut before a UTF-8 character, not inside it. A cut character made the
/// name invalid where the file system needs UTF-8 (exFAT, NTFS: `EILSEQ`),
/// and a file with a long non-ASCII name could not be received there at
/// all (a defect hunt's find).
pub fn char_cut(name: &[u8], max: usize) -> usize {
    let cut = name.len().min(max);
    // At most 3 bytes back (a UTF-8 character has 4): bytes that are not
    // UTF-8 are cut where they are.
    let back = (0..=3.min(cut)).find(|&b| cut == name.len() || name[cut - b] & 0xC0 != 0x80);
    cut - back.unwrap_or(0)
}

/// Whether `name` is one [`temp_name`] makes (`.NAME.lpPID-TOKEN-N.part`,
/// TOKEN 16 hex digits): a file being received, named from the start
/// where the file system has no `O_TMPFILE` (NFS). A server hides such
/// names from its listings and refuses commands on them: another session
/// could list, download, rename (publish) or delete an unfinished upload
/// (a defect hunt's find).
pub fn is_temp_name(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(b".").and_then(|r| r.strip_suffix(b".part")) else { return false };
    let Some(at) = rest.windows(3).rposition(|w| w == b".lp") else { return false };
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    let fields: Vec<&[u8]> = rest[at + 3..].split(|&b| b == b'-').collect();
    match fields[..] {
        [pid, token, n] => {
            at > 0 && digits(pid) && digits(n) && token.len() == 16 && token.iter().all(u8::is_ascii_hexdigit)
        }
        _ => false,
    }
}

/// Whether unnamed files can be given a name later: `/proc/self/fd` is
/// there (checked once).
fn proc_fd_links() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| Path::new("/proc/self/fd").is_dir())
}

/// A file being received under a temporary name (or none yet).
#[derive(Debug)]
pub struct TempFile {
    dir: Arc<OwnedFd>,
    /// The temporary name while the file has one (empty once committed,
    /// and while an unnamed file has none).
    tmp: Vec<u8>,
    name: Vec<u8>,
    file: Option<File>,
    /// Taken up with a kept file's note ([`TempFile::adopt`]): the note
    /// goes when it is committed, complete.
    noted: bool,
}

impl TempFile {
    /// Create the file that becomes `name` in `dir`: unnamed where the file
    /// system allows it, else under a hidden temporary name (exclusively).
    /// Open for reading too: a download kept for resuming is compared with
    /// the server's file before its next try (the creator of a new file
    /// may read it whatever its `mode`).
    pub(super) fn create(dir: Arc<OwnedFd>, name: &OsStr, mode: u32) -> io::Result<TempFile> {
        if proc_fd_links() {
            let flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC;
            match rustix::fs::openat(&*dir, ".", flags, Mode::from_raw_mode(mode)) {
                Ok(fd) => {
                    return Ok(TempFile {
                        dir,
                        tmp: Vec::new(),
                        name: name.as_bytes().to_vec(),
                        file: Some(fd.into()),
                        noted: false,
                    })
                }
                // Not supported by this file system (or kernel): named.
                Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::ISDIR | rustix::io::Errno::INVAL) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Self::create_named(dir, name, mode)
    }

    /// [`TempFile::create`] for the entry `name` of the directory `dir`, a
    /// path as a user gave it (symlinks in it are followed), with the
    /// permission bits `mode` less the umask.
    pub fn in_dir(dir: &Path, name: &OsStr, mode: u32) -> io::Result<TempFile> {
        let fd = rustix::fs::open(dir, OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
        Self::create(Arc::new(fd), name, mode)
    }

    /// Create the file under a hidden temporary name for `name` in `dir`
    /// (exclusively): where the file system has no unnamed files.
    pub(super) fn create_named(dir: Arc<OwnedFd>, name: &OsStr, mode: u32) -> io::Result<TempFile> {
        let tmp = temp_name(name);
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC;
        let create = || Ok(rustix::fs::openat(&*dir, OsStr::from_bytes(&tmp), flags, Mode::from_raw_mode(mode))?);
        let fd = named::make_named(&dir, &tmp, create)?;
        Ok(TempFile { dir, tmp, name: name.as_bytes().to_vec(), file: Some(File::from(fd)), noted: false })
    }

    /// The open file.
    pub fn file(&self) -> &File {
        self.file.as_ref().expect("file present until commit")
    }

    /// The temporary name no longer names the file (renamed, or removed).
    fn clear_tmp(&mut self) {
        named::forget(&self.tmp);
        self.tmp.clear();
    }

    /// Whether the file has no name yet (`O_TMPFILE`): if this process
    /// dies, nothing of it is left.
    pub fn is_unnamed(&self) -> bool {
        self.tmp.is_empty() && self.file.is_some()
    }

    /// The file system the file is on (`st_dev`) and the bytes available
    /// there to this process (`statvfs`'s `f_bavail`).
    pub fn space(&self) -> io::Result<(u64, u64)> {
        let st = rustix::fs::fstat(self.file())?;
        let vfs = rustix::fs::fstatvfs(self.file())?;
        Ok((st.st_dev, vfs.f_bavail.saturating_mul(vfs.f_frsize)))
    }

    /// Give the file its final name (atomically replacing an old one).
    /// A write error that shows only at `close` (NFS, FUSE and CIFS report
    /// delayed write errors there, and ENOSPC or EDQUOT) fails the commit:
    /// the file gets no name, and its temporary one is removed.
    pub fn commit(self) -> io::Result<()> {
        self.commit_with(None)
    }

    /// [`TempFile::commit`] for the file `key` (its path in the copy, as
    /// asked for) of the copy `run`: refused (an [`EntryRefused`]) where
    /// its name is taken by a file `run` named for another key. A key, not
    /// the final name: `D/x` and `d/x` end in the same name, and where
    /// names ignore case the second replaced the first (a review's find).
    pub fn commit_in(self, run: &RunFiles, key: &[u8]) -> io::Result<()> {
        let id = FileId::of(self.file(), "", AtFlags::EMPTY_PATH)?;
        // Known before it is named: a file of the run that takes the same
        // name at the same time then finds it.
        let file = RunFile::new(&self.dir, &self.name, key)?;
        run.lock().insert(id, file.clone());
        let r = self.commit_with(Some((run, &file)));
        if r.is_err() {
            // Gone: its inode may be a later file's, not the run's.
            run.lock().remove(&id);
        }
        r
    }

    fn commit_with(mut self, run: Option<(&RunFiles, &RunFile)>) -> io::Result<()> {
        if let (true, Some(f)) = (self.noted, &self.file) {
            // A complete file carries no note of a partial one.
            match rustix::fs::fremovexattr(f, NOTE_XATTR) {
                Ok(()) | Err(rustix::io::Errno::NODATA) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if self.lost_name() {
            return Err(self.name_lost());
        }
        if self.is_unnamed() && self.link_as_final()? {
            return Ok(());
        }
        if self.is_unnamed() {
            self.link_temp_name()?;
        }
        // An adopted file's lock (its open file description's `flock`)
        // stays until its name is settled: released at the close, another
        // run could keep its own file under the kept name before the
        // rename published that name (a review's find).
        let lock = match (&self.file, self.noted) {
            (Some(f), true) => Some(f.try_clone()?),
            _ => None,
        };
        if let Some(f) = self.file.take() {
            close_checked(f)?;
        }
        // Replacing a file: not another of the run's, held so until renamed
        // (not while closing: on NFS a close flushes the file).
        let mut held = run.map(|(r, file)| r.not_taken(&self.dir, file)).transpose()?;
        let r = rustix::fs::renameat(&self.dir, OsStr::from_bytes(&self.tmp), &self.dir, OsStr::from_bytes(&self.name));
        if r.is_ok() || lock.is_some() {
            if r.is_err() {
                // Still ours (locked): removed now, not after the lock goes.
                let _ = rustix::fs::unlinkat(&*self.dir, OsStr::from_bytes(&self.tmp), AtFlags::empty());
            }
            self.clear_tmp();
        }
        drop(lock);
        r?;
        if let (Some(held), Some((_, file))) = (held.as_mut(), run) {
            // A file system without inodes (exFAT through FUSE) may number
            // the file anew once renamed.
            let id = FileId::of(&*self.dir, OsStr::from_bytes(&self.name), AtFlags::SYMLINK_NOFOLLOW)?;
            held.insert(id, file.clone());
        }
        Ok(())
    }

    /// Whether this adopted file's kept name ([`TempFile::adopt`]) went to
    /// another file since: a run that could not adopt it kept its own
    /// partial file there. Committed by that name, it published the
    /// other's half-written file (a defect hunt's find, exit 0); dropped,
    /// it removed it. This file, its last name gone, cannot be linked
    /// again (`linkat` refuses a file with no name that was not created
    /// unnamed), so it can only fail.
    fn lost_name(&self) -> bool {
        let Some(f) = &self.file else { return false };
        self.noted && !self.tmp.is_empty() && !names_file(&self.dir, OsStr::from_bytes(&self.tmp), f)
    }

    /// [`TempFile::lost_name`]'s error, the name forgotten.
    fn name_lost(&mut self) -> io::Error {
        self.clear_tmp();
        io::Error::other("another run replaced the kept file this one resumed from")
    }

    /// Give the unnamed file its final name at once when nothing has it
    /// (`linkat` does not replace): no temporary name exists at any time.
    /// With one (name, then rename), a process killed between the two
    /// left the named temporary file for ever, and trees of small files
    /// spend much of their time there (an audit found such files after
    /// SIGKILL). A close error then takes the name away again. Returns
    /// false when the name is taken (the file is then replaced by rename).
    fn link_as_final(&mut self) -> io::Result<bool> {
        let to = OsStr::from_bytes(&self.name);
        match self.link_as(to) {
            Ok(()) => {}
            Err(rustix::io::Errno::EXIST) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        if let Some(f) = self.file.take() {
            if let Err(e) = close_checked(f) {
                let _ = rustix::fs::unlinkat(&*self.dir, to, AtFlags::empty());
                return Err(e);
            }
        }
        Ok(true)
    }

    /// Give the unnamed file a temporary name, which [`TempFile::commit`]
    /// renames at once (and `Drop` removes if that fails).
    fn link_temp_name(&mut self) -> io::Result<()> {
        let tmp = temp_name(OsStr::from_bytes(&self.name));
        named::make_named(&self.dir, &tmp, || Ok(self.link_as(OsStr::from_bytes(&tmp))?))?;
        self.tmp = tmp;
        Ok(())
    }

    /// Link the open (unnamed) file as `name` in its directory, through
    /// `/proc/self/fd` (`AT_EMPTY_PATH` would need CAP_DAC_READ_SEARCH);
    /// fails with `EEXIST` where `name` is taken.
    fn link_as(&self, name: &OsStr) -> rustix::io::Result<()> {
        let link = format!("/proc/self/fd/{}", self.file().as_raw_fd());
        rustix::fs::linkat(rustix::fs::CWD, link.as_str(), &*self.dir, name, AtFlags::SYMLINK_FOLLOW)
    }
}

/// The files one copy (a tree, or a client's whole run) has given their
/// final names, by device and inode, with those names. A later file of
/// the copy whose name (another name: the same is a file going again)
/// the file system takes for one of theirs (`A` and `a` where names
/// ignore case: exFAT, CIFS, ext4's casefold) is refused, not renamed
/// over it: each replaced the other, and every file was counted as
/// copied (a defect hunt's find: data lost, exit 0). Not seen where a
/// file system numbers each spelling of a name apart: exFAT through
/// exfat-fuse (no `use_ino`) gave `y` and `Y` two inode numbers for one
/// file, and the second replaced the first as before (a review's find;
/// the kernel's exfat, CIFS and ntfs-3g's `ignore_case` number a file
/// once, and are covered).
#[derive(Debug, Default)]
pub struct RunFiles(std::sync::Mutex<RunFilesSet>);

use std::sync::MutexGuard;

impl RunFiles {
    fn lock(&self) -> MutexGuard<'_, RunFilesSet> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Refused if `name` in `dir` is a file of this run for another key;
    /// else the lock, held while the caller replaces it.
    fn not_taken(&self, dir: &OwnedFd, file: &RunFile) -> io::Result<MutexGuard<'_, RunFilesSet>> {
        let mut held = self.lock();
        if let Ok(id) = FileId::of(dir, OsStr::from_bytes(&file.name), AtFlags::SYMLINK_NOFOLLOW) {
            match held.get(&id) {
                Some(f) if f.key != file.key && f.still_names(dir, file.dir, id) => {
                    let why = "another file of this copy took its name (the file system holds the two names for one)";
                    return Err(EntryRefused::error(why));
                }
                // The same file going again (a retry): the one it replaces
                // is gone, and its number may be another's. Or a file of
                // the run that is gone, its number and birth time given to
                // another file (ext4 takes birth times from a clock tick).
                Some(_) => drop(held.remove(&id)),
                None => {}
            }
        }
        Ok(held)
    }
}

/// Each file's identity, and the file the run gave that name.
type RunFilesSet = std::collections::HashMap<FileId, RunFile>;

/// A file a run named: its key ([`TempFile::commit_in`]), and the
/// directory and name it was given.
#[derive(Debug, Clone)]
struct RunFile {
    key: Vec<u8>,
    dir: (u64, u64),
    name: Vec<u8>,
}

impl RunFile {
    fn new(dir: &OwnedFd, name: &[u8], key: &[u8]) -> io::Result<Self> {
        let st = rustix::fs::fstat(dir)?;
        Ok(Self { key: key.to_vec(), dir: (st.st_dev, st.st_ino), name: name.to_vec() })
    }

    /// Whether its name in `dir` still holds the file `id`: another
    /// file's name for it (`A` for `a` where names ignore case), not a
    /// removed file's inode number given to a new file. The identity
    /// alone does not tell them apart: ext4 takes a new file's birth time
    /// from the clock's tick, and a file removed and one created within
    /// the tick shared number and birth time (a defect hunt's find).
    /// (`dir_id`: `dir`'s device and inode.)
    fn still_names(&self, dir: &OwnedFd, dir_id: (u64, u64), id: FileId) -> bool {
        dir_id == self.dir
            && FileId::of(dir, OsStr::from_bytes(&self.name), AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|f| f == id)
    }
}

/// A file's device and inode, and its birth time where the file system
/// records one (ext4, XFS, Btrfs, tmpfs): an inode number is given again
/// once its file is removed, and a later file that only shares the
/// number is another file. Without the birth time, a test process whose
/// earlier tests' files were removed refused a file of its own as taken
/// (a CI run's failure), and so would a `cp` whose copied file someone
/// removed while it ran. Birth times are a clock tick's, not unique:
/// [`RunFile::still_names`] settles a match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FileId {
    dev: u64,
    ino: u64,
    born: Option<(i64, u32)>,
}

impl FileId {
    /// Without `statx` (before Linux 4.11, or refused by a container's
    /// seccomp filter: ENOSYS, EPERM) the birth time is not known, and
    /// every commit failed (a review's find).
    fn of<Fd: AsFd, P: rustix::path::Arg + Copy>(dir: Fd, path: P, flags: AtFlags) -> io::Result<Self> {
        use rustix::fs::StatxFlags;
        let st = match rustix::fs::statx(&dir, path, flags, StatxFlags::INO | StatxFlags::BTIME) {
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
                let st = rustix::fs::statat(&dir, path, flags)?;
                return Ok(Self { dev: st.st_dev, ino: st.st_ino, born: None });
            }
            r => r?,
        };
        let born = StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::BTIME);
        Ok(Self {
            dev: rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
            born: born.then_some((st.stx_btime.tv_sec, st.stx_btime.tv_nsec)),
        })
    }
}

/// The extended attribute holding a kept file's note ([`TempFile::keep_as`]).
const NOTE_XATTR: &str = "user.lightpath.partial";
/// The longest note kept or read back.
pub const MAX_NOTE: usize = 4096;

impl TempFile {
    /// Stop being temporary: the file takes the lasting name `kept` in its
    /// directory (replacing an older file there), with `note` in an
    /// extended attribute, to be taken up again by [`TempFile::adopt`]
    /// (`cp --partial`). On a file system without user extended
    /// attributes it fails, and the file is dropped as usual.
    pub fn keep_as(mut self, kept: &OsStr, note: &[u8]) -> io::Result<()> {
        if note.len() > MAX_NOTE {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "note too long"));
        }
        if self.lost_name() {
            return Err(self.name_lost());
        }
        let own = self.file.as_ref().is_some_and(|f| names_file(&self.dir, kept, f));
        if !own && kept_in_use(&self.dir, kept) {
            return Err(io::Error::other("another run is resuming from the file kept there"));
        }
        rustix::fs::fsetxattr(self.file(), NOTE_XATTR, note, rustix::fs::XattrFlags::empty())?;
        if self.is_unnamed() {
            self.link_temp_name()?;
        }
        self.file.take();
        rustix::fs::renameat(&self.dir, OsStr::from_bytes(&self.tmp), &self.dir, kept)?;
        self.clear_tmp();
        Ok(())
    }

    /// Take up the file kept as `kept` in `dir` ([`TempFile::keep_as`]) to
    /// become `name` there when committed, with its note. `None` when
    /// there is none. Refused: a `kept` that is not a regular file (a
    /// symlink is not followed), and one another process holds (an
    /// exclusive `flock`, held while the file is open here), one owned by
    /// another user, and one with other names.
    pub fn adopt(dir: &Path, kept: &OsStr, name: &OsStr) -> io::Result<Option<(TempFile, Vec<u8>)>> {
        let dfd = rustix::fs::open(dir, OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
        let flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = match rustix::fs::openat(&dfd, kept, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(rustix::io::Errno::LOOP) => return Err(io::Error::other("a symlink, not a kept file")),
            Err(e) => return Err(e.into()),
        };
        let st = rustix::fs::fstat(&fd)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(io::Error::other("not a regular file"));
        }
        // Another user's file (planted in a shared directory) would stay
        // theirs under the final name.
        if st.st_uid != rustix::process::geteuid().as_raw() {
            return Err(io::Error::other("owned by another user"));
        }
        // A file with other names would change under those too.
        if st.st_nlink != 1 {
            return Err(io::Error::other("it has other names (hard links)"));
        }
        rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive)
            .map_err(|_| io::Error::other("in use by another process"))?;
        // Replaced between the open and the lock (another run kept its own).
        if !names_file(&dfd, kept, &fd) {
            return Err(io::Error::other("in use by another process"));
        }
        let mut note = vec![0; MAX_NOTE];
        let n = rustix::fs::fgetxattr(&fd, NOTE_XATTR, &mut note)?;
        note.truncate(n);
        let file = File::from(fd);
        let t = TempFile {
            dir: Arc::new(dfd),
            tmp: kept.as_bytes().to_vec(),
            name: name.as_bytes().to_vec(),
            file: Some(file),
            noted: true,
        };
        Ok(Some((t, note)))
    }
}

/// Whether `name` in `dir` is the open file `f` (the same device and
/// inode; a symlink is not followed).
fn names_file(dir: &OwnedFd, name: &OsStr, f: impl AsFd) -> bool {
    let at = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW);
    match (at, rustix::fs::fstat(f)) {
        (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
        _ => false,
    }
}

/// Whether the file kept as `kept` in `dir` is held by a process that took
/// it up ([`TempFile::adopt`]'s `flock`): replaced, that run's file would
/// lose its name under it.
fn kept_in_use(dir: &OwnedFd, kept: &OsStr) -> bool {
    // Opened for writing as `adopt` opens it (NFS emulates `flock` with
    // `fcntl` locks, which need it); only "would block" says it is held.
    let flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let Ok(fd) = rustix::fs::openat(dir, kept, flags, Mode::empty()) else { return false };
    let r = rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive);
    r == Err(rustix::io::Errno::WOULDBLOCK)
}

/// Close `f`, returning the error `close` gives (`File`'s drop ignores
/// it). The descriptor is released either way, so it is never closed
/// twice.
fn close_checked(f: File) -> io::Result<()> {
    use std::os::fd::IntoRawFd;
    let fd = f.into_raw_fd();
    // SAFETY: `fd` was just taken out of its `File`, which owned it and
    // so closes it nowhere else; it is not used after this call.
    if unsafe { libc::close(fd) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.lost_name() {
            return;
        }
        if !self.tmp.is_empty() {
            let _ = rustix::fs::unlinkat(self.dir.as_fd(), OsStr::from_bytes(&self.tmp), AtFlags::empty());
            named::forget(&self.tmp);
        }
    }
}

#[cfg(test)]
mod temp_tests {
    use super::*;

    fn scratch() -> (tempfile::TempDir, Arc<OwnedFd>) {
        let d = tempfile::tempdir().unwrap();
        let fd = rustix::fs::open(d.path(), OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty());
        (d, Arc::new(fd.unwrap()))
    }

    fn names(d: &tempfile::TempDir) -> Vec<std::ffi::OsString> {
        let mut v: Vec<_> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        v.sort();
        v
    }

    /// A file whose `close` fails (an NFS server's delayed write error;
    /// here a descriptor already gone, EBADF) is not given its name, and
    /// its temporary name is removed: the error was ignored before.
    #[test]
    fn a_failed_close_gives_no_name() {
        use std::os::fd::FromRawFd;
        let (d, dir) = scratch();
        let mut t = TempFile::create_named(dir, OsStr::new("f"), 0o640).unwrap();
        std::io::Write::write_all(&mut t.file(), b"data").unwrap();
        drop(t.file.take());
        // SAFETY: a descriptor number this test process never opened; the
        // File only reaches `close_checked`, which gets EBADF.
        t.file = Some(unsafe { File::from_raw_fd(1 << 20) });
        let e = t.commit().expect_err("a failed close commits nothing");
        assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{e}");
        assert!(names(&d).is_empty(), "{:?}", names(&d));
    }

    /// A file of the run whose number (and birth time: one clock tick's on
    /// ext4) a new file took once it was removed does not make that file
    /// the run's: replacing it is no collision. Set here as the run would
    /// find it, since the kernel decides whether two birth times match.
    /// While the run's name still holds the file, it is a collision.
    #[test]
    fn a_run_file_whose_name_is_gone_is_not_a_collision() {
        let (d, dir) = scratch();
        let run = RunFiles::default();
        std::fs::write(d.path().join("y"), b"another's").unwrap();
        let id = FileId::of(&*dir, "y", AtFlags::SYMLINK_NOFOLLOW).unwrap();
        run.lock().insert(id, RunFile::new(&dir, b"x", b"x").unwrap());
        TempFile::create(dir.clone(), OsStr::new("y"), 0o644).unwrap().commit_in(&run, b"y").expect("not the run's");
        assert_eq!(std::fs::read(d.path().join("y")).unwrap(), b"");
        let run = RunFiles::default();
        std::fs::hard_link(d.path().join("y"), d.path().join("x")).unwrap();
        let id = FileId::of(&*dir, "y", AtFlags::SYMLINK_NOFOLLOW).unwrap();
        run.lock().insert(id, RunFile::new(&dir, b"x", b"x").unwrap());
        let e = TempFile::create(dir, OsStr::new("y"), 0o644).unwrap().commit_in(&run, b"y").unwrap_err();
        assert!(e.to_string().contains("another file of this copy took its name"), "{e}");
    }

    /// An unnamed file shows in its directory only once committed, under
    /// its final name, replacing an old file; dropped, it leaves nothing.
    #[test]
    fn an_unnamed_file_appears_only_when_committed() {
        let (d, dir) = scratch();
        std::fs::write(d.path().join("f"), b"old").unwrap();
        let t = TempFile::create(dir.clone(), OsStr::new("f"), 0o640).unwrap();
        assert!(t.is_unnamed(), "this test's file system (/tmp) takes O_TMPFILE");
        std::io::Write::write_all(&mut t.file(), b"new data").unwrap();
        assert_eq!(names(&d), ["f"], "nothing named while it is received");
        t.commit().unwrap();
        assert_eq!(names(&d), ["f"]);
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"new data");
        let t = TempFile::create(dir.clone(), OsStr::new("g"), 0o640).unwrap();
        std::io::Write::write_all(&mut t.file(), b"lost").unwrap();
        drop(t);
        assert_eq!(names(&d), ["f"]);
        // A new name is linked at once (no temporary name at any time); a
        // symlink in its place is replaced, not followed.
        let t = TempFile::create(dir.clone(), OsStr::new("h"), 0o640).unwrap();
        std::io::Write::write_all(&mut t.file(), b"h").unwrap();
        t.commit().unwrap();
        std::os::unix::fs::symlink(d.path().join("f"), d.path().join("l")).unwrap();
        let t = TempFile::create(dir, OsStr::new("l"), 0o640).unwrap();
        std::io::Write::write_all(&mut t.file(), b"l").unwrap();
        t.commit().unwrap();
        assert_eq!(names(&d), ["f", "h", "l"]);
        assert!(std::fs::symlink_metadata(d.path().join("l")).unwrap().is_file());
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"new data", "the link's target untouched");
        assert_eq!(std::fs::read(d.path().join("h")).unwrap(), b"h");
    }

    /// A named temporary file is there while it is received, and gone once
    /// committed or dropped.
    #[test]
    fn a_named_file_is_renamed_or_removed() {
        let (d, dir) = scratch();
        let t = TempFile::create_named(dir.clone(), OsStr::new("f"), 0o640).unwrap();
        assert!(!t.is_unnamed());
        let tmp = names(&d);
        assert!(tmp.len() == 1 && tmp[0].as_bytes().starts_with(b".f.lp"), "{tmp:?}");
        t.commit().unwrap();
        assert_eq!(names(&d), ["f"]);
        drop(TempFile::create_named(dir, OsStr::new("g"), 0o640).unwrap());
        assert_eq!(names(&d), ["f"]);
    }

    /// A file kept under a lasting name keeps its note, is taken up again
    /// (once: a second taker is refused while the first holds it), and
    /// becomes its final name when committed.
    #[test]
    fn a_kept_file_is_adopted_with_its_note_and_committed() {
        let (d, dir) = scratch();
        let t = TempFile::create(dir, OsStr::new("f"), 0o640).unwrap();
        std::io::Write::write_all(&mut t.file(), b"half").unwrap();
        t.keep_as(OsStr::new(".f.kept"), b"note 1").unwrap();
        assert_eq!(names(&d), [".f.kept"]);
        let (k, f) = (OsStr::new(".f.kept"), OsStr::new("f"));
        let (t, note) = TempFile::adopt(d.path(), k, f).unwrap().expect("kept");
        assert_eq!(note, b"note 1");
        let busy = TempFile::adopt(d.path(), k, f).unwrap_err();
        assert!(busy.to_string().contains("in use"), "{busy}");
        t.commit().unwrap();
        assert_eq!(names(&d), ["f"]);
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"half");
        let mut buf = [0u8; 64];
        let note = rustix::fs::getxattr(d.path().join("f").as_path(), NOTE_XATTR, &mut buf[..]);
        assert_eq!(note, Err(rustix::io::Errno::NODATA), "the complete file carries no note");
        assert!(TempFile::adopt(d.path(), k, f).unwrap().is_none(), "gone once committed");
    }

    /// Two runs on one destination: while one resumes from the kept file,
    /// the other (which could not take it up) may not keep its own there;
    /// and should the kept name go to another file all the same, the first
    /// fails to commit (its file lost its last name), publishing nothing,
    /// and leaves that one kept.
    #[test]
    fn a_kept_file_taken_up_stays_the_takers_own() {
        let (d, dir) = scratch();
        let (k, f) = (OsStr::new(".f.kept"), OsStr::new("f"));
        let keep = |data: &[u8]| {
            let t = TempFile::create(dir.clone(), f, 0o640).unwrap();
            std::io::Write::write_all(&mut t.file(), data).unwrap();
            t.keep_as(k, b"note")
        };
        keep(b"first").unwrap();
        let (mine, _) = TempFile::adopt(d.path(), k, f).unwrap().expect("kept");
        let e = keep(b"other").expect_err("a kept file in use is not replaced");
        assert!(e.to_string().contains("resuming"), "{e}");
        assert_eq!(names(&d), [".f.kept"]);
        // The other run's rename comes between this one's open and flock.
        std::fs::write(d.path().join(".other"), b"other's half").unwrap();
        std::fs::rename(d.path().join(".other"), d.path().join(".f.kept")).unwrap();
        let e = mine.commit().expect_err("its own file has no name left");
        assert!(e.to_string().contains("replaced"), "{e}");
        assert_eq!(names(&d), [".f.kept"], "nothing published");
        assert_eq!(std::fs::read(d.path().join(".f.kept")).unwrap(), b"other's half");
        keep(b"second").expect("a kept file no run holds is replaced");
        let (t, _) = TempFile::adopt(d.path(), k, f).unwrap().expect("kept");
        std::fs::write(d.path().join(".other"), b"third").unwrap();
        std::fs::rename(d.path().join(".other"), d.path().join(".f.kept")).unwrap();
        drop(t);
        assert_eq!(std::fs::read(d.path().join(".f.kept")).unwrap(), b"third", "not removed by another's drop");
    }

    /// Neither a symlink nor a directory under the kept name is taken up.
    #[test]
    fn only_a_regular_kept_file_is_adopted() {
        let (d, _dir) = scratch();
        std::fs::write(d.path().join("target"), b"x").unwrap();
        std::os::unix::fs::symlink(d.path().join("target"), d.path().join(".l")).unwrap();
        std::fs::create_dir(d.path().join(".d")).unwrap();
        assert!(TempFile::adopt(d.path(), OsStr::new(".l"), OsStr::new("l")).is_err());
        assert!(TempFile::adopt(d.path(), OsStr::new(".d"), OsStr::new("d")).is_err());
        std::fs::write(d.path().join(".plain"), b"x").unwrap();
        assert!(TempFile::adopt(d.path(), OsStr::new(".plain"), OsStr::new("p")).is_err(), "no note");
        let t = TempFile::create(
            Arc::new(rustix::fs::open(d.path(), OFlags::DIRECTORY, Mode::empty()).unwrap()),
            OsStr::new("o"),
            0o644,
        );
        t.unwrap().keep_as(OsStr::new(".o"), b"n").unwrap();
        rustix::fs::chown(d.path().join(".o"), Some(rustix::process::Uid::from_raw(65534)), None).unwrap();
        let e = TempFile::adopt(d.path(), OsStr::new(".o"), OsStr::new("o")).unwrap_err();
        assert!(e.to_string().contains("another user"), "{e}");
        rustix::fs::chown(d.path().join(".o"), Some(rustix::process::geteuid()), None).unwrap();
        std::fs::hard_link(d.path().join(".o"), d.path().join("elsewhere")).unwrap();
        let e = TempFile::adopt(d.path(), OsStr::new(".o"), OsStr::new("o")).unwrap_err();
        assert!(e.to_string().contains("hard links"), "{e}");
        std::fs::remove_file(d.path().join("elsewhere")).unwrap();
        assert!(TempFile::adopt(d.path(), OsStr::new(".o"), OsStr::new("o")).unwrap().is_some());
    }

    /// A commit that cannot rename (a directory has the name) leaves no
    /// temporary name behind.
    #[test]
    fn a_failed_commit_leaves_no_name() {
        let (d, dir) = scratch();
        std::fs::create_dir(d.path().join("x")).unwrap();
        std::fs::write(d.path().join("x/in"), b"keep").unwrap();
        let t = TempFile::create(dir, OsStr::new("x"), 0o640).unwrap();
        assert!(t.commit().is_err());
        assert_eq!(names(&d), ["x"]);
    }
}

//! The local side of a copy: files written under a temporary name and
//! renamed into place only when complete; `/dev/null` and `/dev/zero` for
//! memory-to-memory runs.

use crate::resume::Resume;
use crate::ClientError;
use lightpath_engine::dio::file_sink;
use lightpath_engine::{DataPath, NullSink, Sink};
use lightpath_proto::ranges::RangeSet;
use lightpath_sys::root::{Root, TempFile};

use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

mod source;
pub use source::LocalSource;

/// Where a download goes.
#[derive(Debug, Clone)]
pub enum LocalTarget {
    /// Discard (`/dev/null`).
    Null,
    /// A file; `in_place` writes into it at offsets (partial transfers).
    File {
        /// Final path.
        path: PathBuf,
        /// Write into the existing file instead of a temporary one.
        in_place: bool,
        /// Flush to disk before the rename (durable across power loss).
        fsync: bool,
        /// Expected size (0: unknown): reserved up front (`fallocate`), so
        /// a full disk fails before data moves.
        size: u64,
        /// Write with direct I/O where the file system allows it.
        direct: bool,
        /// The destination directory `path` lies beneath (see
        /// [`LocalTarget::beneath`]).
        root: Option<PathBuf>,
        /// The only bytes it may receive, `(offset, len)` (see
        /// [`LocalTarget::window`]).
        window: Option<(u64, u64)>,
        /// Where a failed try keeps its partial file for the next one
        /// (see [`LocalTarget::resumable`]).
        resume: Option<Arc<Resume>>,
        /// Permission bits a new file is created with, less the umask
        /// (see [`LocalTarget::created_with`]).
        mode: u32,
        /// What the file gets when complete ([`LocalTarget::like_source`]).
        finish: FinishMeta,
    },
}

impl LocalTarget {
    /// The target for a local path.
    pub fn for_path(path: &Path, in_place: bool, fsync: bool, size: u64) -> LocalTarget {
        if path == Path::new("/dev/null") {
            LocalTarget::Null
        } else {
            let path = path.to_path_buf();
            let (root, window, resume) = (None, None, None);
            let (mode, finish) = (0o666, FinishMeta::default());
            LocalTarget::File { path, in_place, fsync, size, direct: false, root, window, resume, mode, finish }
        }
    }

    /// The same target confined to the destination directory `root` of a
    /// copy (`None`: not confined). Beneath `root`, no path component is
    /// followed if it is a symlink (`openat2` with `RESOLVE_NO_SYMLINKS`):
    /// a symlink in the destination, planted by an earlier copy from the
    /// same server or already there, cannot lead a tree's file outside it
    /// (`cp -r` refuses such a directory too). A symlink under the file's
    /// own name is replaced, never written through. `root` itself, as the
    /// user named it, is followed; a `path` that is `root` is not confined.
    pub fn beneath(mut self, root: Option<&Path>) -> LocalTarget {
        if let LocalTarget::File { root: r, .. } = &mut self {
            *r = root.map(Path::to_path_buf);
        }
        self
    }

    /// The same target accepting only the bytes `[offset, offset + len)`
    /// of the file (`part`, a partial copy: `--off`, `--len`; `None`: any).
    /// A block outside fails the transfer before it is written, and
    /// [`OpenTarget::finish`] fails unless the whole window arrived.
    pub fn window(mut self, part: Option<(u64, u64)>) -> LocalTarget {
        if let LocalTarget::File { window, .. } = &mut self {
            *window = part;
        }
        self
    }

    /// The same target keeping its partial file in `slot` when a try
    /// fails midway, and resuming from what `slot` holds ([`crate::resume`]).
    pub fn resumable(mut self, slot: Option<Arc<Resume>>) -> LocalTarget {
        if let LocalTarget::File { resume, .. } = &mut self {
            *resume = slot;
        }
        self
    }

    /// Its resume slot, if it has one.
    pub fn resume_slot(&self) -> Option<Arc<Resume>> {
        match self {
            LocalTarget::File { resume, .. } => resume.clone(),
            LocalTarget::Null => None,
        }
    }

    /// The ranges an earlier try left in its resume slot.
    pub fn kept(&self) -> Option<RangeSet> {
        self.resume_slot().and_then(|r| r.have())
    }

    /// Open it, resuming the partial file its slot kept, if any; also
    /// gives the ranges that file holds already.
    pub fn open_resuming(self) -> Result<(OpenTarget, RangeSet), ClientError> {
        match (self.resume_slot().and_then(|r| r.take()), &self) {
            // The I/O chosen for this try (a file taken up from an earlier
            // process has the defaults until now).
            (Some(mut k), LocalTarget::File { fsync, direct, finish, .. }) => {
                (k.target.fsync, k.target.direct, k.target.meta) = (*fsync, *direct, *finish);
                Ok((k.target, k.have))
            }
            (Some(k), LocalTarget::Null) => Ok((k.target, k.have)),
            (None, _) => Ok((self.open()?, RangeSet::new())),
        }
    }

    /// The expected size (0: unknown or not a file).
    pub fn size(&self) -> u64 {
        match self {
            LocalTarget::File { size, .. } => *size,
            LocalTarget::Null => 0,
        }
    }

    /// Whether it must reach the disk before it is published (`--fsync`).
    pub fn fsync(&self) -> bool {
        matches!(self, LocalTarget::File { fsync: true, .. })
    }

    /// The same target, written directly (`on`) or through the page cache.
    pub fn direct(mut self, on: bool) -> LocalTarget {
        if let LocalTarget::File { direct, .. } = &mut self {
            *direct = on;
        }
        self
    }

    /// A new file gets the source's permission bits `mode` (where known;
    /// less the umask, never setuid, setgid or sticky), as `cp` makes a
    /// copy: a private (0600) file downloaded was readable to all. A file
    /// it replaces keeps its own.
    pub fn created_with(mut self, source: Option<u32>) -> LocalTarget {
        if let (LocalTarget::File { mode, .. }, Some(m)) = (&mut self, source) {
            *mode = m & 0o777;
        }
        self
    }

    /// When complete, the file gets its source's mtime (`mtime`, where its
    /// listing gave it), as an upload's file does; a tree's (`tree`) its
    /// source's mode exactly too, the umask left out and a replaced file's
    /// mode too, as a tree copied as one virtual file gets them. A tree
    /// copied file by file got the time of the copy and the umask.
    pub fn like_source(mut self, tree: bool, source: Option<u32>, mtime: Option<i64>) -> LocalTarget {
        if let LocalTarget::File { finish, .. } = &mut self {
            // Only a mode the source's listing gave: a tree from a server
            // that gives none was made 0666 exactly (a review's find).
            *finish = FinishMeta { mode: source.filter(|_| tree).map(|m| m & 0o777), mtime };
        }
        self
    }

    /// Open it for writing, afresh (a partial file its slot kept is dropped).
    pub fn open(self) -> Result<OpenTarget, ClientError> {
        if let Some(r) = self.resume_slot() {
            r.clear();
        }
        let LocalTarget::File { path, in_place, fsync, size, direct, root, window, mode, finish, .. } = self else {
            let (out, meta) = (Output::Null, FinishMeta::default());
            return Ok(OpenTarget { out, path: PathBuf::new(), fsync: false, direct: false, window: None, meta });
        };
        // A part (`--off`/`--len`) goes into the file at its offsets; with
        // no file there yet, into a new one linked under the name only if
        // the whole window came (one that failed stays unnamed).
        let in_place = in_place && std::fs::symlink_metadata(&path).is_ok();
        let beneath = root.as_deref().and_then(|r| Some((r, rel_beneath(r, &path)?)));
        let out = match beneath {
            Some((r, rel)) => open_beneath(r, &rel?, &path, (in_place, mode))?,
            None => open_path(&path, (in_place, mode))?,
        };
        let window = window.map(|(off, len)| Window::new(off, len));
        let t = OpenTarget { out, path, fsync, direct, window, meta: finish };
        // On failure `t` is dropped, which removes a temporary file.
        if let (Output::Temp(_), Some(file), None) = (&t.out, t.out.file(), &t.window) {
            // Full size at once: `finish` sets the length it received.
            lightpath_sys::file::preallocate_sized(file, size)
                .map_err(|e| ClientError::Local(format!("{}: reserving {size} bytes: {e}", t.path.display())))?;
        }
        Ok(t)
    }
}

fn local_err(path: &Path) -> impl Fn(std::io::Error) -> ClientError + '_ {
    move |e| ClientError::Local(format!("{}: {e}", path.display()))
}

/// Open `path` as named (following symlinks, as for any path the user gives).
fn open_path(path: &Path, (in_place, new_mode): (bool, u32)) -> Result<Output, ClientError> {
    use std::os::unix::fs::OpenOptionsExt;
    let err = local_err(path);
    if in_place {
        let mut o = OpenOptions::new();
        let f = o.write(true).create(true).truncate(false).mode(new_mode).open(path).map_err(&err)?;
        return Ok(Output::InPlace(f));
    }
    let mode = replaceable_mode(path).map_err(&err)?;
    let name = path.file_name().ok_or_else(|| ClientError::Local(format!("{}: not a file name", path.display())))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // Unnamed until complete where the file system allows it: a killed
    // client leaves nothing. From here on, a failure drops it.
    // Made with the old file's bits where one is replaced: a file system
    // that keeps none (FAT through FUSE, bindfs --chmod-deny) refuses the
    // chmod, and the new file then shows no more than the old one did
    // (the refusal failed the download: a review's find).
    let tmp = TempFile::in_dir(dir, name, mode.unwrap_or(new_mode)).map_err(&err)?;
    if let Some(m) = mode {
        set_mode_kept(tmp.file(), m).map_err(&err)?;
    }
    Ok(Output::Temp(tmp))
}

/// Open `rel` beneath the directory `root` without following a symlink
/// beneath it (`path` is the same file, for messages).
fn open_beneath(root: &Path, rel: &[u8], path: &Path, (in_place, mode): (bool, u32)) -> Result<Output, ClientError> {
    let r = Root::open(root).map_err(local_err(root))?;
    let err = |e: std::io::Error| ClientError::Local(format!("{}: {e} beneath {}", path.display(), root.display()));
    if in_place {
        return Ok(Output::InPlace(r.open_write_strict(rel, mode).map_err(err)?));
    }
    Ok(Output::Temp(r.create_temp_replacing_strict(rel, mode).map_err(err)?))
}

/// `path` relative to `root` as `a/b` when it lies strictly beneath it;
/// `None` when it does not (or is `root`); an error for a `..` on the way.
pub(crate) fn rel_beneath(root: &Path, path: &Path) -> Option<Result<Vec<u8>, ClientError>> {
    let rest = path.strip_prefix(root).ok()?;
    let mut rel = Vec::new();
    for c in rest.components() {
        let Component::Normal(name) = c else {
            return Some(Err(ClientError::Local(format!("{}: not beneath {}", path.display(), root.display()))));
        };
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(name.as_bytes());
    }
    (!rel.is_empty()).then_some(Ok(rel))
}

/// Create the directory `dir` of a copy into the destination directory
/// `root`: `root` and its parents as named (symlinks followed, as for any
/// path the user gives), and beneath it real directories only, never
/// through a symlink ([`LocalTarget::beneath`]): an existing symlink, even
/// to a directory, is refused as "not a directory", as `cp -r` does.
pub fn make_dir_beneath(root: &Path, dir: &Path) -> Result<(), ClientError> {
    std::fs::create_dir_all(root).map_err(local_err(root))?;
    let Some(rel) = rel_beneath(root, dir) else {
        return std::fs::create_dir_all(dir).map_err(local_err(dir));
    };
    let r = Root::open(root).map_err(local_err(root))?;
    r.mkdir_all_strict(&rel?, 0o777).map_err(|e| ClientError::Local(format!("{}: {e}", dir.display())))
}

/// The directory `dir` of a tree copied into the destination directory
/// `root`, created as [`make_dir_beneath`] does and opened as a
/// [`Root`] without following a symlink beneath `root`: where a virtual
/// file (VRET) is unpacked.
pub fn tree_root(root: &Path, dir: &Path) -> Result<Root, ClientError> {
    make_dir_beneath(root, dir)?;
    let r = match rel_beneath(root, dir).transpose()? {
        Some(rel) => Root::open(root).and_then(|r| r.subdir_strict(&rel)).map_err(local_err(dir))?,
        None => Root::open(dir).map_err(local_err(dir))?,
    };
    // Written into as its subdirectories are; the tree gives it its mode.
    r.let_owner_into_self().map_err(local_err(dir))?;
    Ok(r)
}

/// Before replacing `path` with a temporary file renamed over it (which
/// needs only the directory's write permission): the permission bits
/// (`& 0o777`) of the regular file there, once we have shown that we could
/// open it for writing ourselves, as cp(1) would (without truncating it);
/// `None` when nothing is there (or a special file, left to the rename).
fn replaceable_mode(path: &Path) -> std::io::Result<Option<u32>> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if meta.is_dir() {
        return Err(std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory"));
    }
    if !meta.is_file() {
        return Ok(None);
    }
    let f = OpenOptions::new().write(true).open(path)?;
    Ok(Some(f.metadata()?.permissions().mode() & 0o777))
}

/// What an open target writes to.
#[derive(Debug)]
enum Output {
    /// Nothing (`/dev/null`).
    Null,
    /// The file itself, at offsets.
    InPlace(File),
    /// A temporary file next to the target (unnamed where the file system
    /// allows it), given the target's name by `finish`; beneath a
    /// destination root, opened without following a symlink there.
    Temp(TempFile),
}

impl Output {
    fn file(&self) -> Option<&File> {
        match self {
            Output::InPlace(f) => Some(f),
            Output::Temp(t) => Some(t.file()),
            Output::Null => None,
        }
    }
}

/// An open download target.
#[derive(Debug)]
pub struct OpenTarget {
    out: Output,
    /// The final path (for messages; empty for `/dev/null`).
    path: PathBuf,
    fsync: bool,
    direct: bool,
    window: Option<Window>,
    meta: FinishMeta,
}

/// What a downloaded file gets when complete, before its name.
/// `f`'s permission bits set to `m`; where the file system keeps none
/// ([`lightpath_sys::root::mode_refused`]) it keeps those it has.
fn set_mode_kept(f: &File, m: u32) -> std::io::Result<()> {
    match f.set_permissions(std::fs::Permissions::from_mode(m)) {
        Err(e) if lightpath_sys::root::mode_refused(&e) => Ok(()),
        r => r,
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub struct FinishMeta {
    /// Permission bits (`& 0o777`), exactly: the umask left out.
    mode: Option<u32>,
    /// The mtime, in whole seconds.
    mtime: Option<i64>,
}

impl FinishMeta {
    fn apply(&self, f: &File) -> std::io::Result<()> {
        if let Some(m) = self.mode {
            set_mode_kept(f, m)?;
        }
        if let Some(t) = self.mtime {
            let secs = std::time::Duration::from_secs(t.unsigned_abs());
            let at =
                if t < 0 { std::time::UNIX_EPOCH.checked_sub(secs) } else { std::time::UNIX_EPOCH.checked_add(secs) };
            if let Some(at) = at {
                f.set_times(std::fs::FileTimes::new().set_modified(at))?;
            }
        }
        Ok(())
    }
}

impl OpenTarget {
    /// Where blocks are written.
    pub fn sink(&self) -> Box<dyn Sink + '_> {
        let inner: Box<dyn Sink + '_> = match self.out.file() {
            Some(f) => file_sink(f, self.direct, "download"),
            None => Box::new(NullSink),
        };
        match &self.window {
            Some(window) => Box::new(WindowSink { inner, window }),
            None => inner,
        }
    }

    /// The file it writes (`None`: `/dev/null`).
    pub(crate) fn file(&self) -> Option<&File> {
        self.out.file()
    }

    /// Whether a later try may write into it: a whole file received
    /// under a temporary name (not a part written in place).
    pub(crate) fn can_resume(&self) -> bool {
        matches!(self.out, Output::Temp(_)) && self.window.is_none()
    }

    /// Keep the partial file under the lasting name [`kept_name`] next
    /// to its final path, with `note` ([`crate::partial`]); returns that
    /// name. Only a whole file's temporary file can be kept.
    pub(crate) fn keep_as(self, note: &[u8]) -> Result<PathBuf, ClientError> {
        let kept = kept_name(&self.path)?;
        let Output::Temp(temp) = self.out else {
            return Err(ClientError::Local(format!("{}: written in place, nothing to keep", self.path.display())));
        };
        let name = kept.file_name().unwrap_or_default();
        temp.keep_as(name, note).map_err(|e| ClientError::Local(format!("{}: {e}", kept.display())))?;
        Ok(kept)
    }

    /// The file kept for `path` by [`OpenTarget::keep_as`], taken up again
    /// to become `path` when complete, with its note (`None`: none kept).
    pub(crate) fn adopt(path: &Path) -> Result<Option<(OpenTarget, Vec<u8>)>, ClientError> {
        let kept = kept_name(path)?;
        let dir = kept.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let (k, name) = (kept.file_name().unwrap_or_default(), path.file_name().unwrap_or_default());
        let found =
            TempFile::adopt(dir, k, name).map_err(|e| ClientError::Local(format!("{}: {e}", kept.display())))?;
        Ok(found.map(|(temp, note)| {
            let t = OpenTarget {
                out: Output::Temp(temp),
                path: path.to_path_buf(),
                fsync: false,
                direct: false,
                window: None,
                meta: FinishMeta::default(),
            };
            (t, note)
        }))
    }

    /// Complete: check that a window arrived whole, fix the length,
    /// optionally flush to disk, rename into place. A temporary file that
    /// cannot be renamed into place is removed.
    pub fn finish(self, len: Option<u64>) -> Result<(), ClientError> {
        if let Some(w) = &self.window {
            w.complete().map_err(|e| ClientError::Local(format!("{}: {e}", self.path.display())))?;
        }
        let err = local_err(&self.path);
        if let Some(f) = self.out.file() {
            if let Some(l) = len {
                f.set_len(l).map_err(&err)?;
            }
            if matches!(self.out, Output::Temp(_)) {
                self.meta.apply(f).map_err(&err)?;
            }
            if self.fsync {
                f.sync_data().map_err(&err)?;
            }
        }
        // Either removes the temporary file when the rename fails.
        match self.out {
            Output::Temp(temp) => temp.commit_in(&RUN_FILES, self.path.as_os_str().as_bytes()).map_err(err),
            Output::Null | Output::InPlace(_) => Ok(()),
        }
    }
}

/// The files this run (one `cp`) has given their names: one whose name
/// the file system takes for another's is refused, not renamed over it.
static RUN_FILES: std::sync::LazyLock<lightpath_sys::root::RunFiles> = std::sync::LazyLock::new(Default::default);

/// Where a download of `path` that failed is kept for `cp --partial`:
/// `.NAME.lightpath-partial` in the same directory (hidden, and never
/// taken for the complete file). A name over 200 bytes (255 is the most a
/// name may have) is cut to 190 (between characters) and told apart from others that begin
/// alike by the CRC-32C of the whole name (`~1a2b3c4d`).
pub fn kept_name(path: &Path) -> Result<PathBuf, ClientError> {
    let name = path.file_name().ok_or_else(|| ClientError::Local(format!("{}: not a file name", path.display())))?;
    let name = name.as_bytes();
    let mut kept = b".".to_vec();
    if name.len() <= 200 {
        kept.extend_from_slice(name);
    } else {
        kept.extend_from_slice(&name[..lightpath_sys::root::char_cut(name, 190)]);
        kept.extend_from_slice(format!("~{:08x}", crc32c::crc32c(name)).as_bytes());
    }
    kept.extend_from_slice(b".lightpath-partial");
    Ok(path.with_file_name(std::ffi::OsStr::from_bytes(&kept)))
}

/// The bytes a partial download may write, and those it wrote.
#[derive(Debug)]
struct Window {
    start: u64,
    end: u64,
    got: Mutex<RangeSet>,
}

impl Window {
    fn new(off: u64, len: u64) -> Window {
        Window { start: off, end: off.saturating_add(len), got: Mutex::new(RangeSet::new()) }
    }

    fn got(&self) -> std::sync::MutexGuard<'_, RangeSet> {
        self.got.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Refuse `len` bytes at `offset` unless they lie in the window.
    fn admit(&self, offset: u64, len: u64) -> std::io::Result<()> {
        let end = offset.checked_add(len);
        if offset >= self.start && end.is_some_and(|e| e <= self.end) {
            return Ok(());
        }
        let (s, e) = (self.start, self.end);
        let why = format!("the server sent bytes {offset}-{} outside the requested {s}-{e}", end.unwrap_or(u64::MAX));
        Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why))
    }

    /// Whether every byte of the window was written.
    fn complete(&self) -> Result<(), String> {
        let got = self.got();
        if got.contains_range(self.start, self.end) {
            return Ok(());
        }
        let (n, want) = (got.covered(), self.end - self.start);
        Err(format!("got {n} of the {want} bytes requested at offset {}; the copy is incomplete", self.start))
    }
}

/// A sink writing only inside a [`Window`], which keeps count. It has no
/// file to splice into: spliced bytes would pass the check by.
struct WindowSink<'a> {
    inner: Box<dyn Sink + 'a>,
    window: &'a Window,
}

impl WindowSink<'_> {
    /// `write` the `len` bytes at `offset` if they lie in the window, and count them.
    fn checked(&self, offset: u64, len: u64, write: impl FnOnce() -> std::io::Result<()>) -> std::io::Result<()> {
        self.window.admit(offset, len)?;
        write()?;
        self.window.got().insert(offset, offset + len);
        Ok(())
    }
}

impl Sink for WindowSink<'_> {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.checked(offset, buf.len() as u64, || self.inner.write_all_at(buf, offset))
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> std::io::Result<()> {
        let len = bufs.iter().map(|b| b.len() as u64).sum();
        self.checked(offset, len, || self.inner.write_vectored_at(bufs, offset))
    }

    fn device(&self) -> Option<u64> {
        self.inner.device()
    }

    fn serial_writes(&self) -> bool {
        self.inner.serial_writes()
    }

    fn data_path(&self) -> DataPath {
        self.inner.data_path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_files(dir: &Path) -> Vec<PathBuf> {
        let all = std::fs::read_dir(dir).expect("read_dir").map(|e| e.expect("entry").path());
        all.filter(|p| p.to_string_lossy().ends_with(".part")).collect()
    }

    /// Two long names that begin alike are kept apart; a short name is
    /// kept as it was (a file kept by an earlier version is still found).
    #[test]
    fn kept_names_of_long_names_that_begin_alike_differ() {
        let long = |end: &str| PathBuf::from(format!("/d/{}{end}", "x".repeat(230)));
        let (a, b) = (kept_name(&long("a")).expect("a"), kept_name(&long("b")).expect("b"));
        assert_ne!(a, b);
        for k in [&a, &b] {
            assert!(k.file_name().expect("name").len() <= 255, "{}", k.display());
        }
        assert_eq!(kept_name(Path::new("/d/f")).expect("f"), Path::new("/d/.f.lightpath-partial"));
        let wide = PathBuf::from(format!("/d/a{}", "ü".repeat(110)));
        let kept = kept_name(&wide).expect("wide");
        assert!(kept.to_str().is_some(), "cut between characters: {}", kept.display());
    }

    #[test]
    fn a_temporary_target_is_reserved_at_full_size_and_finished_at_the_received_length() {
        let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let path = dir.path().join("f");
        let w = LocalTarget::for_path(&path, false, false, 4 << 20).open().expect("open");
        let received = w.out.file().expect("a file").metadata().expect("metadata");
        assert_eq!(received.len(), 4 << 20);
        let named = std::fs::read_dir(dir.path()).expect("read_dir").count();
        assert_eq!(named, 0, "nothing named before finish (unnamed: O_TMPFILE)");
        w.sink().write_all_at(b"shorter than announced", 0).expect("write");
        w.finish(Some(22)).expect("finish");
        assert_eq!(std::fs::read(&path).expect("final"), b"shorter than announced");
        assert!(temp_files(dir.path()).is_empty());
    }

    #[test]
    fn a_replaced_file_keeps_its_permission_bits() {
        let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"old").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o2640)).expect("chmod");
        let w = LocalTarget::for_path(&path, false, false, 3).open().expect("open");
        w.sink().write_all_at(b"new", 0).expect("write");
        w.finish(Some(3)).expect("finish");
        assert_eq!(std::fs::read(&path).expect("final"), b"new");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o7777, 0o640, "setgid is not carried over");
        let e = LocalTarget::for_path(dir.path(), false, false, 0).open().expect_err("a directory");
        assert!(e.to_string().contains("is a directory"), "{e}");
        assert!(temp_files(dir.path()).is_empty());
    }

    /// A file we could not write in place is not replaced. As root (CI)
    /// permission bits do not stop us, but a running program does (ETXTBSY).
    #[test]
    fn a_file_that_cannot_be_written_in_place_is_not_replaced() {
        let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let prog = dir.path().join("prog");
        std::fs::copy("/bin/sleep", &prog).expect("copy");
        let mut child = spawn_retrying(&prog);
        let e = LocalTarget::for_path(&prog, false, false, 0).open().expect_err("busy");
        let _ = child.kill();
        let _ = child.wait();
        assert!(e.to_string().contains("Text file busy"), "{e}");
        assert!(temp_files(dir.path()).is_empty());
        assert_eq!(std::fs::read(&prog).expect("prog"), std::fs::read("/bin/sleep").expect("sleep"));
    }

    /// Run `prog 30`; another test thread's fork may briefly hold the copy
    /// open for writing (ETXTBSY on exec).
    fn spawn_retrying(prog: &Path) -> std::process::Child {
        for _ in 0..50 {
            match std::process::Command::new(prog).arg("30").spawn() {
                Ok(c) => return c,
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                Err(e) => panic!("{}: {e}", prog.display()),
            }
        }
        panic!("{}: still busy", prog.display())
    }

    #[test]
    fn a_dropped_temporary_target_leaves_nothing() {
        let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let path = dir.path().join("f");
        let w = LocalTarget::for_path(&path, false, false, 1 << 20).open().expect("open");
        w.sink().write_all_at(b"partial", 0).expect("write");
        drop(w);
        assert!(!path.exists());
        assert!(temp_files(dir.path()).is_empty());
    }

    /// A target whose rename fails (a directory appeared under its name
    /// meanwhile) leaves no temporary file, and the error names the file.
    #[test]
    fn a_failed_rename_leaves_no_temporary_file() {
        let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let out = dir.path().join("out");
        std::fs::create_dir(&out).expect("mkdir");
        for root in [None, Some(dir.path())] {
            let path = dir.path().join("f");
            let w = LocalTarget::for_path(&path, false, false, 5).beneath(root).open().expect("open");
            w.sink().write_all_at(b"hello", 0).expect("write");
            std::fs::create_dir(&path).expect("a directory in the way");
            let e = w.finish(Some(5)).expect_err("cannot rename over a directory");
            assert!(e.to_string().starts_with(&format!("{}: ", path.display())), "{e}");
            assert!(temp_files(dir.path()).is_empty(), "{:?}", temp_files(dir.path()));
            std::fs::remove_dir(&path).expect("rmdir");
        }
    }

    /// Beneath a destination root nothing follows a symlink: not a file's
    /// directory, not a directory made for a tree, not a tree's root.
    #[test]
    fn beneath_a_destination_no_symlink_is_followed() {
        let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let (dst, out) = (dir.path().join("dst"), dir.path().join("out"));
        std::fs::create_dir_all(&out).expect("mkdir");
        std::fs::create_dir_all(&dst).expect("mkdir");
        std::os::unix::fs::symlink(&out, dst.join("sub")).expect("symlink");
        let sub = dst.join("sub");
        for in_place in [false, true] {
            let t = LocalTarget::for_path(&sub.join("x"), in_place, false, 4).beneath(Some(&dst));
            let e = t.open().expect_err("through a symlink");
            assert!(e.to_string().contains("symlink"), "{e}");
        }
        let e = make_dir_beneath(&dst, &sub.join("deeper")).expect_err("through a symlink");
        assert!(e.to_string().contains("not a directory"), "{e}");
        assert!(tree_root(&dst, &sub).is_err());
        assert_eq!(std::fs::read_dir(&out).expect("out").count(), 0, "nothing written outside");
        // Not confined, the same target follows the link (the old behaviour).
        let w = LocalTarget::for_path(&sub.join("x"), false, false, 4).open().expect("open");
        drop(w);
    }

    /// The destination root, as the user named it, may be a symlink; real
    /// directories beneath it are made and written.
    #[test]
    fn a_destination_named_through_a_symlink_is_written_beneath() {
        let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let (real, link) = (dir.path().join("real"), dir.path().join("link"));
        std::fs::create_dir(&real).expect("mkdir");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        make_dir_beneath(&link, &link.join("a/b")).expect("mkdir beneath");
        let path = link.join("a/b/f");
        let w = LocalTarget::for_path(&path, false, false, 2).beneath(Some(&link)).open().expect("open");
        w.sink().write_all_at(b"ok", 0).expect("write");
        w.finish(Some(2)).expect("finish");
        assert_eq!(std::fs::read(real.join("a/b/f")).expect("read"), b"ok");
        let root = tree_root(&link, &link.join("a")).expect("tree root");
        assert!(root.lstat(b"b/f").is_ok());
        let w = LocalTarget::for_path(&link, false, false, 0).beneath(Some(&link)).open();
        assert!(w.is_err(), "the root itself is a directory, not confined");
    }

    /// A partial download writes only inside its window and fails unless
    /// the whole window arrived.
    #[test]
    fn a_window_refuses_bytes_outside_it_and_must_arrive_whole() {
        let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, vec![b'S'; 1000]).expect("write");
        let open = || LocalTarget::for_path(&path, true, false, 50).window(Some((100, 50))).open().expect("open");
        let w = open();
        let e = w.sink().write_all_at(&[b'X'; 1000], 100).expect_err("too long");
        assert!(e.to_string().contains("outside the requested 100-150"), "{e}");
        assert!(w.sink().write_all_at(&[b'Y'; 10], 5000).is_err(), "far away");
        assert!(w.sink().write_all_at(&[b'Y'; 10], 90).is_err(), "before");
        w.sink().write_all_at(&[b'Z'; 10], 100).expect("inside");
        let e = w.finish(None).expect_err("10 of 50 bytes");
        assert!(e.to_string().contains("got 10 of the 50 bytes"), "{e}");
        let w = open();
        w.sink().write_vectored_at(&[&[b'A'; 20], &[b'B'; 30]], 100).expect("the whole window");
        w.finish(None).expect("complete");
        let got = std::fs::read(&path).expect("read");
        assert_eq!(got.len(), 1000, "not grown");
        assert_eq!(&got[100..150], [[b'A'; 20].as_slice(), &[b'B'; 30]].concat());
        assert!(got[..100].iter().chain(&got[150..]).all(|&b| b == b'S'), "untouched outside the window");
    }

    /// A file renamed over the source with the same size and mtime (as
    /// `cp -p` leaves it), or rewritten with its mtime set back, is
    /// another file: its upload must not be resumed.
    #[test]
    fn a_same_size_same_mtime_replacement_changes_the_stamp() {
        let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let (f, g) = (dir.path().join("f"), dir.path().join("g"));
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
        for (p, b) in [(&f, b'a'), (&g, b'b')] {
            std::fs::write(p, [b; 4096]).unwrap();
            std::fs::File::options().write(true).open(p).unwrap().set_modified(t).unwrap();
        }
        let stamp = || LocalSource::File(f.clone()).stamp().expect("stamp");
        let before = stamp();
        assert_eq!(stamp(), before, "unchanged");
        std::fs::rename(&g, &f).unwrap();
        assert_ne!(stamp(), before, "renamed over");
        let renamed = stamp();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&f, [b'c'; 4096]).unwrap();
        std::fs::File::options().write(true).open(&f).unwrap().set_modified(t).unwrap();
        assert_ne!(stamp(), renamed, "rewritten, mtime set back");
    }
}

//! The local side of a copy: files written under a temporary name and
//! renamed into place only when complete; `/dev/null` and `/dev/zero` for
//! memory-to-memory runs.

use crate::ClientError;
use lightpath_engine::dio::file_sink;
use lightpath_engine::{EngineError, FileSource, NullSink, Sink, Source, ZeroSource};

use std::fs::{File, OpenOptions};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

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
    },
}

impl LocalTarget {
    /// The target for a local path.
    pub fn for_path(path: &Path, in_place: bool, fsync: bool, size: u64) -> LocalTarget {
        if path == Path::new("/dev/null") {
            LocalTarget::Null
        } else {
            LocalTarget::File { path: path.to_path_buf(), in_place, fsync, size, direct: false }
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

    /// Open it for writing.
    pub fn open(self) -> Result<OpenTarget, ClientError> {
        let (path, in_place, fsync, size, direct) = match self {
            LocalTarget::Null => return Ok(OpenTarget { file: None, temp: None, fsync: false, direct: false }),
            LocalTarget::File { path, in_place, fsync, size, direct } => (path, in_place, fsync, size, direct),
        };
        let err = |e: std::io::Error| ClientError::Local(format!("{}: {e}", path.display()));
        if in_place {
            let f = OpenOptions::new().write(true).create(true).truncate(false).open(&path).map_err(err)?;
            return Ok(OpenTarget { file: Some(f), temp: None, fsync, direct });
        }
        let mode = replaceable_mode(&path).map_err(err)?;
        let tmp = temp_name(&path);
        let f = OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(err)?;
        let t = OpenTarget { file: Some(f), temp: Some((tmp, path.clone())), fsync, direct };
        // On failure `t` is dropped, which removes the temporary file.
        if let Some(f) = &t.file {
            if let Some(m) = mode {
                f.set_permissions(std::fs::Permissions::from_mode(m)).map_err(err)?;
            }
            // Full size at once: `finish` sets the length it received.
            lightpath_sys::file::preallocate_sized(f, size)
                .map_err(|e| ClientError::Local(format!("{}: reserving {size} bytes: {e}", path.display())))?;
        }
        Ok(t)
    }
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

fn temp_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.as_encoded_bytes().iter().take(180).copied().collect::<Vec<u8>>())
        .unwrap_or_default();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut t = b".".to_vec();
    t.extend_from_slice(&name);
    t.extend_from_slice(format!(".lp{}-{n}.part", std::process::id()).as_bytes());
    path.with_file_name(os_string(t))
}

fn os_string(b: Vec<u8>) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    std::ffi::OsString::from_vec(b)
}

/// An open download target.
#[derive(Debug)]
pub struct OpenTarget {
    file: Option<File>,
    temp: Option<(PathBuf, PathBuf)>,
    fsync: bool,
    direct: bool,
}

impl OpenTarget {
    /// Where blocks are written.
    pub fn sink(&self) -> Box<dyn Sink + '_> {
        match &self.file {
            Some(f) => file_sink(f, self.direct, "download"),
            None => Box::new(NullSink),
        }
    }

    /// Complete: fix the length, optionally flush to disk, rename into place.
    pub fn finish(mut self, len: Option<u64>) -> Result<(), ClientError> {
        let Some(f) = self.file.take() else { return Ok(()) };
        let err = |e: std::io::Error| ClientError::Local(e.to_string());
        if let Some(l) = len {
            f.set_len(l).map_err(err)?;
        }
        if self.fsync {
            f.sync_data().map_err(err)?;
        }
        if let Some((tmp, path)) = self.temp.take() {
            std::fs::rename(&tmp, &path).map_err(|e| ClientError::Local(format!("{}: {e}", path.display())))?;
        }
        Ok(())
    }
}

impl Drop for OpenTarget {
    fn drop(&mut self) {
        if let Some((tmp, _)) = &self.temp {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// Where an upload comes from.
#[derive(Debug, Clone)]
pub enum LocalSource {
    /// Zeros (`/dev/zero` with `--len`).
    Zero(u64),
    /// A file.
    File(PathBuf),
}

impl LocalSource {
    /// Its length.
    pub fn len(&self) -> Result<u64, ClientError> {
        match self {
            LocalSource::Zero(n) => Ok(*n),
            LocalSource::File(p) => {
                std::fs::metadata(p).map(|m| m.len()).map_err(|e| ClientError::Local(format!("{}: {e}", p.display())))
            }
        }
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> Result<bool, ClientError> {
        self.len().map(|l| l == 0)
    }

    /// The error of a send from this source. The engine does not know
    /// file names: a read that failed gets the file's ("F: reading
    /// source: file shrank while being read"); others stay as they are.
    pub fn send_error(&self, e: EngineError) -> ClientError {
        match (self, &e) {
            (LocalSource::File(p), EngineError::Io { context, .. }) if context.starts_with("reading") => {
                ClientError::Local(format!("{}: {e}", p.display()))
            }
            _ => e.into(),
        }
    }

    /// Open for reading.
    pub fn open(self) -> Result<Box<dyn Source>, ClientError> {
        match self {
            LocalSource::Zero(n) => Ok(Box::new(ZeroSource::new(n))),
            LocalSource::File(p) => {
                let err = |e: std::io::Error| ClientError::Local(format!("{}: {e}", p.display()));
                let f = File::open(&p).map_err(err)?;
                Ok(Box::new(FileSource::new(f, true).map_err(err)?))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_files(dir: &Path) -> Vec<PathBuf> {
        let all = std::fs::read_dir(dir).expect("read_dir").map(|e| e.expect("entry").path());
        all.filter(|p| p.to_string_lossy().ends_with(".part")).collect()
    }

    #[test]
    fn a_temporary_target_is_reserved_at_full_size_and_finished_at_the_received_length() {
        let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let path = dir.path().join("f");
        let w = LocalTarget::for_path(&path, false, false, 4 << 20).open().expect("open");
        let tmp = temp_files(dir.path());
        assert_eq!(tmp.len(), 1, "{tmp:?}");
        assert_eq!(std::fs::metadata(&tmp[0]).expect("temp").len(), 4 << 20);
        assert!(!path.exists(), "nothing under the final name before finish");
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
}

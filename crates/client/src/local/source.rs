//! Where an upload comes from: a local file, or zeros.

use crate::ClientError;
use lightpath_engine::{EngineError, FileSource, Source, ZeroSource};
use std::fs::File;
use std::path::PathBuf;

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

    /// A file's size and what tells it from another file of that size, to
    /// tell whether it changed between tries of its upload (`None`: zeros,
    /// or a file that cannot be read): its mtime, device, inode and ctime
    /// (nanoseconds), in fixed-width digits. Size and mtime alone let a
    /// file renamed over it with its mtime kept (`cp -p`, `rsync -t`), or
    /// rewritten within the mtime's grain, be resumed: two versions joined
    /// under the final name, exit 0 (a defect hunt). A rename gives another
    /// inode; any write, and setting the mtime, a new ctime.
    pub(crate) fn stamp(&self) -> Option<crate::resume::Stamp> {
        use std::os::unix::fs::MetadataExt;
        let LocalSource::File(p) = self else { return None };
        let m = std::fs::metadata(p).ok()?;
        let ns = |s: i64, n: i64| (i128::from(s) * 1_000_000_000 + i128::from(n)).max(0) as u128;
        let (mtime, ctime) = (ns(m.mtime(), m.mtime_nsec()), ns(m.ctime(), m.ctime_nsec()));
        Some((m.len(), Some(format!("{mtime:020}{:020}{:020}{ctime:020}", m.dev(), m.ino()))))
    }

    /// The file's permission bits and mtime (nanoseconds), for a lightpath
    /// server's `OPTS STOR`; `None` for `/dev/zero` or a file gone.
    pub(crate) fn meta(&self) -> Option<lightpath_proto::held::TreeRoot> {
        use std::os::unix::fs::MetadataExt;
        let LocalSource::File(p) = self else { return None };
        let m = std::fs::metadata(p).ok()?;
        let ns = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
        Some(lightpath_proto::held::TreeRoot { mode: m.mode() & 0o7777, mtime_ns: i64::try_from(ns).ok() })
    }

    /// A source opened at `len` bytes whose send was planned (and
    /// announced with ALLO) at `planned`: it changed in between, and
    /// sending the planned bytes would publish a short or mixed copy.
    pub fn as_planned(&self, len: u64, planned: u64) -> Result<(), ClientError> {
        if len == planned {
            return Ok(());
        }
        let name = match self {
            LocalSource::File(p) => p.display().to_string(),
            LocalSource::Zero(_) => "/dev/zero".into(),
        };
        let how = if len < planned { "shrank" } else { "grew" };
        Err(ClientError::Local(format!("{name}: reading source: file {how} ({planned} bytes planned, {len} now)")))
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

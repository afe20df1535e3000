//! The virtual file for lots of small files (issue 5).
//!
//! A tree travels as one virtual file plus a manifest
//! ([`lightpath_proto::manifest`], format in `docs/manifest.md`). The
//! virtual file's bytes are the regular files' contents, back to back in
//! manifest order, and go over the parallel MODE E streams like any file;
//! the manifest says which bytes belong to which path.
//!
//! - [`pack`] walks a tree in a background thread and publishes manifest
//!   chunks and the data they cover as it goes, so the first blocks leave
//!   before the walk ends. [`Pack::next_item`] hands out manifest chunks
//!   and blocks (each byte once, a chunk before the data it covers);
//!   [`PackReader`] is the [`crate::Source`] that reads them, small
//!   files whole (cached), large ones by range.
//! - [`Unpacker`] rebuilds the tree beneath a [`Root`]: manifest bytes and
//!   data blocks arrive in any order and from any thread; data that runs
//!   ahead of its entries is parked (bounded). Each file is written under a
//!   temporary name by a small worker pool and renamed when its last byte
//!   arrived; symlinks and hard links are made at the end, then directory
//!   modes and times, deepest first.
//!
//! [`Root`]: lightpath_sys::root::Root

mod check;
mod chunk;
mod pack;
mod reader;
mod unpack;
mod writer;

pub use check::{held_check, source_check, HeldCheck};
pub use pack::{pack, walk_order, Pack, PackItem, PackOptions, PackStats, SKIPPED};
pub use reader::PackReader;
pub use unpack::{Held, UnpackOptions, UnpackStats, Unpacker, PARK_LIMIT_ALL};
pub use writer::AT_DESTINATION;

use crate::error::EngineError;
use lightpath_proto::manifest::{show, ManifestError};
use std::io;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Why packing or unpacking a virtual file failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum VfileError {
    /// A file system operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What we were doing ("creating", "reading").
        op: &'static str,
        /// The path, escaped.
        path: String,
        /// The OS error.
        #[source]
        source: Arc<io::Error>,
    },
    /// The manifest is malformed or hostile (or a tree cannot be described).
    #[error("manifest: {0}")]
    Manifest(#[from] ManifestError),
    /// A block overlaps data already received.
    #[error("block at offset {offset} ({len} bytes) overlaps data already received")]
    Overlap {
        /// Block offset.
        offset: u64,
        /// Block length.
        len: u64,
    },
    /// A block lies (partly) past the end of the virtual file.
    #[error("block at offset {offset} ({len} bytes) is past the end of the virtual file ({total} bytes)")]
    OutOfBounds {
        /// Block offset.
        offset: u64,
        /// Block length.
        len: u64,
        /// Virtual file length from the manifest.
        total: u64,
    },
    /// The sender scattered its bytes over more files at once than the
    /// receiver keeps open ([`writer::MAX_PARTLY_WRITTEN`]).
    #[error("more than {0} files partly written at once; the sender scatters its data")]
    TooScattered(usize),
    /// Every tree of this process together holds as many files partly
    /// written as it may ([`writer::MAX_PARTLY_WRITTEN_ALL`]): a later try
    /// may pass.
    #[error("more than {0} files partly written by all trees at once: busy, try again later")]
    Busy(usize),
    /// Too much data arrived ahead of the manifest entries it belongs to.
    #[error("more than {0} bytes of data arrived ahead of their manifest entries")]
    ParkLimit(u64),
    /// The transfer ended before every entry was complete.
    #[error("{count} files incomplete, e.g. {path} ({got} of {size} bytes)")]
    Incomplete {
        /// How many files are incomplete.
        count: usize,
        /// One of them, escaped.
        path: String,
        /// Bytes it received.
        got: u64,
        /// Bytes it should have.
        size: u64,
    },
    /// A file changed (was written to, replaced or removed) between the
    /// walk and the read: its manifest path.
    #[error("{} changed while being read", show(.0))]
    Changed(Vec<u8>),
    /// A resume across runs whose held files differ between the ends
    /// ([`PackOptions::check`]): the tree changed up to this path.
    #[error("the tree changed since the transfer this resumes (in the files up to {0})")]
    HeldChanged(String),
    /// Cancelled, or stopped after another error.
    #[error("virtual file transfer aborted")]
    Aborted,
}

impl VfileError {
    fn io(op: &'static str, path: &[u8], source: io::Error) -> Self {
        VfileError::Io { op, path: show(path), source: Arc::new(source) }
    }
}

impl From<VfileError> for EngineError {
    fn from(e: VfileError) -> Self {
        match e {
            VfileError::Io { op, path, source } => {
                EngineError::io(format!("{op} {path}"), io::Error::new(source.kind(), source.to_string()))
            }
            VfileError::Aborted => EngineError::Aborted,
            e @ VfileError::Changed(_) => EngineError::io("reading source", io::Error::other(e.to_string())),
            e @ VfileError::Busy(_) => EngineError::io("writing data", io::Error::from(e)),
            e => EngineError::Protocol(e.to_string()),
        }
    }
}

impl From<VfileError> for io::Error {
    fn from(e: VfileError) -> Self {
        match &e {
            VfileError::Io { source, .. } => io::Error::new(source.kind(), e.to_string()),
            VfileError::Aborted => io::Error::new(io::ErrorKind::Interrupted, e.to_string()),
            // Data ran ahead of a manifest chunk because the stream that
            // carries the chunk stalled (seen once in five copies of the
            // Linux tree over the 95 ms path): a network failure, which
            // a retry gets past (`EngineError::is_transient`), resuming
            // after the files complete.
            VfileError::ParkLimit(_) => io::Error::new(io::ErrorKind::TimedOut, e.to_string()),
            VfileError::Busy(_) => io::Error::new(io::ErrorKind::ResourceBusy, e.to_string()),
            _ => io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
        }
    }
}

/// `sec` and `nsec` of a `stat` time as nanoseconds since the epoch.
fn stat_ns(sec: i64, nsec: i64) -> i64 {
    sec.saturating_mul(1_000_000_000).saturating_add(nsec)
}

/// Nanoseconds since the epoch as (seconds, nanoseconds in 0..1e9).
pub fn split_ns(ns: i64) -> (i64, u32) {
    (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000) as u32)
}

/// Nanoseconds since the epoch, before it too, as a `SystemTime`.
pub fn system_time(ns: i64) -> SystemTime {
    let d = Duration::from_nanos(ns.unsigned_abs());
    if ns >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH - d
    }
}

/// `a/b` (or `b` when `a` is empty).
fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    if a.is_empty() {
        return b.to_vec();
    }
    let mut p = Vec::with_capacity(a.len() + 1 + b.len());
    p.extend_from_slice(a);
    p.push(b'/');
    p.extend_from_slice(b);
    p
}

/// `(parent, last component)` of a manifest path; the parent of a top-level
/// name is `""` (the root).
fn split(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[], path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A time before 1970 is kept (a tree's own mtime was clamped to the
    /// epoch by a copy of this conversion in the client).
    #[test]
    fn times_before_the_epoch_are_kept() {
        assert_eq!(system_time(-1_500_000_000), UNIX_EPOCH - Duration::from_millis(1500));
        assert_eq!(system_time(978_307_200_500_000_000), UNIX_EPOCH + Duration::from_millis(978_307_200_500));
        assert_eq!(split_ns(-1_500_000_000), (-2, 500_000_000));
    }
}

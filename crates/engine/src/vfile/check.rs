//! The check of what a tree's receiver holds, for a resume across runs
//! (`OPTS VRET|VSTO After=<hex>;Check=<16 hex>;`, docs/manifest.md): a
//! digest of each held regular file's manifest path, size, mtime and
//! permission bits in walk order, the quick check rsync makes (and the
//! mode, which a resume would not carry), over the run of files a resume
//! leaves out. The receiver computes it over its own files
//! ([`held_check`]), the sender over its walk ([`super::PackOptions::check`]);
//! when they differ the tree changed between the runs, on either side, and
//! the resume is refused ([`super::VfileError::HeldChanged`]).

use super::pack::{is_denied, meta, refused, walk_order};
use super::{join, VfileError};
use lightpath_sys::root::{FileType, Root, Stat};
use sha2::{Digest, Sha256};
use std::cmp::Ordering;
use std::collections::HashSet;

/// A running [`held_check`]: the files added so far.
#[derive(Debug, Clone, Default)]
pub struct HeldCheck(Sha256);

impl HeldCheck {
    /// Add one held file (in walk order): its permission bits count as a
    /// receiver applies them (setuid and setgid left out), so that a
    /// `chmod` on either side, which leaves the mtime alone, is a change
    /// too.
    pub fn add(&mut self, path: &[u8], size: u64, mtime_ns: i64, mode: u32) {
        let n = u32::try_from(path.len()).unwrap_or(u32::MAX);
        self.0.update(n.to_be_bytes());
        self.0.update(path);
        self.0.update(size.to_be_bytes());
        self.0.update(mtime_ns.to_be_bytes());
        self.0.update((mode & super::writer::APPLY_MODE).to_be_bytes());
    }

    /// The check: the digest's first 8 bytes.
    pub fn value(&self) -> u64 {
        let d = self.0.clone().finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&d[..8]);
        u64::from_be_bytes(first)
    }
}

/// The check of the files `root` holds up to `after`, as a sender walking
/// the same tree computes it: every regular file whose manifest path comes
/// at or before `after` in the walk's order, a file with several names
/// under its first only (the sender's manifest names it as a file there,
/// its other names as links; a receiver whose try broke may not have made
/// those links yet). What a directory this process may not list holds is
/// not counted: a sender leaves it out too.
pub fn held_check(root: &Root, after: &[u8]) -> Result<u64, VfileError> {
    check_walk(root, after, false)
}

/// [`held_check`] of a tree's source, as its sender's walk sees it: the
/// files this process may not read are left out too, as the walk leaves
/// them out of the manifest (`PackStats::unreadable`).
pub fn source_check(root: &Root, after: &[u8]) -> Result<u64, VfileError> {
    check_walk(root, after, true)
}

/// [`held_check`]; a `source`'s leaves out the files it may not read.
fn check_walk(root: &Root, after: &[u8], source: bool) -> Result<u64, VfileError> {
    let mut check = HeldCheck::default();
    let mut seen = HashSet::new();
    let mut stack = Vec::new();
    push_children(root, &mut stack, b"")?;
    while let Some((name, st, readable)) = stack.pop() {
        if walk_order(&name, after) == Ordering::Greater {
            break;
        }
        let m = meta(&st);
        match m.ft {
            FileType::Directory if readable => push_children(root, &mut stack, &name)?,
            FileType::RegularFile if source && refused(root, &name, readable).is_some() => {}
            FileType::RegularFile if m.nlink <= 1 || seen.insert((m.dev, m.ino)) => {
                check.add(&name, m.size, m.mtime_ns, m.mode)
            }
            _ => {}
        }
    }
    Ok(check.value())
}

/// Queue the entries of directory `dir` so that they pop in name order,
/// each with whether this process may read (list) it. A directory beneath
/// the root that may not be listed holds nothing.
fn push_children(root: &Root, stack: &mut Vec<(Vec<u8>, Stat, bool)>, dir: &[u8]) -> Result<(), VfileError> {
    let list = match root.read_dir_readable(dir) {
        Ok(list) => list,
        Err(e) if !dir.is_empty() && is_denied(&e) => return Ok(()),
        Err(e) => return Err(VfileError::io("listing", dir, e)),
    };
    stack.extend(list.into_iter().rev().map(|(child, st, ok)| (join(dir, &child), st, ok)));
    Ok(())
}

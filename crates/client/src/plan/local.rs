//! Local trees walked file by file: which entries are copied (files,
//! directories, symlinks to files in the tree), which are skipped with a
//! warning, and which fail the copy.

use super::{join, Item, Plan};
use crate::{ClientError, Location};
use std::collections::VecDeque;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Whether the local directory `dir` can be listed (read, and its
/// entries reached): else why not.
pub(crate) fn listable(dir: &std::path::Path) -> Result<(), ClientError> {
    let first = std::fs::read_dir(dir).map(|mut l| l.next().and_then(Result::ok));
    let probe = first.and_then(|f| reachable(f.as_ref()));
    probe.map_err(|e| ClientError::Local(format!("{}: cannot list: {e}", dir.display())))
}

/// Whether `first`, an entry of a directory just read, can be reached: a
/// directory readable but not searchable lists names whose files cannot
/// be, and it cannot be listed either. Its entry gone since it was read
/// (or none) is fine.
fn reachable(first: Option<&std::fs::DirEntry>) -> std::io::Result<()> {
    match first.map(|e| std::fs::symlink_metadata(e.path())) {
        Some(Err(e)) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(e),
        _ => Ok(()),
    }
}

/// A local directory's permission bits and mtime (seconds).
pub(super) fn local_meta(p: &std::path::Path) -> Option<(u32, Option<i64>)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| (m.mode() & 0o7777, Some(m.mtime())))
}

pub(super) fn walk_local(root: &std::path::Path, target: &Location, plan: &mut Plan) -> Result<(), ClientError> {
    let top = std::fs::canonicalize(root).map_err(|e| ClientError::Local(format!("{}: {e}", root.display())))?;
    let mut queue: VecDeque<(PathBuf, Location)> = VecDeque::from([(root.to_path_buf(), target.clone())]);
    while let Some((dir, t)) = queue.pop_front() {
        let denied = |e: &std::io::Error| dir != root && e.kind() == std::io::ErrorKind::PermissionDenied;
        let listed = std::fs::read_dir(&dir).and_then(|l| {
            let entries: Vec<_> = l.filter_map(Result::ok).collect();
            reachable(entries.first()).map(|()| entries)
        });
        let mut entries = match listed {
            Err(e) if denied(&e) => {
                plan.leave_out(Location::Local(dir), t, format!("cannot list: {e}"));
                continue;
            }
            r => r.map_err(|e| ClientError::Local(format!("{}: {e}", dir.display())))?,
        };
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let (path, dst) = (e.path(), join(&t, e.file_name().as_bytes()));
            match local_kind(&path, &top) {
                Ok(Some(LocalKind::Dir)) => {
                    plan.add_dir(dst.clone(), local_meta(&path));
                    queue.push_back((path, dst));
                }
                Ok(Some(LocalKind::File(size))) => plan.files.push(Item {
                    src: Location::Local(path),
                    dst,
                    size,
                    mode: None,
                    mtime: None,
                    unique: None,
                }),
                Ok(None) => {}
                Err(why) => plan.leave_out(Location::Local(path), dst, why),
            }
        }
    }
    Ok(())
}

enum LocalKind {
    Dir,
    File(u64),
}

/// What a tree (at `top`, resolved) walked file by file copies of
/// `path`: directories (not through a symlink, which could loop or lead
/// out of the tree) and regular files (a symlink to one in the tree is
/// copied as the file; to one outside it, not: a link to
/// `../../etc/passwd` sent that file). Everything else is skipped with a
/// warning. An entry that cannot be looked at (a path past `PATH_MAX`)
/// is an error, for the copy to fail: it was skipped, and the copy of a
/// tree without the subtree under it exited 0 (a defect hunt).
fn local_kind(path: &std::path::Path, top: &std::path::Path) -> Result<Option<LocalKind>, String> {
    let skip = |why: String| {
        tracing::warn!("skipping {}: {why}", path.display());
        Ok(None)
    };
    let md = match std::fs::symlink_metadata(path) {
        Ok(md) if md.file_type().is_symlink() => match std::fs::metadata(path) {
            Ok(t) if t.is_dir() => return skip("a symlink to a directory".into()),
            Ok(_) if !std::fs::canonicalize(path).is_ok_and(|real| real.starts_with(top)) => {
                return skip("a symlink to a file outside the tree".into())
            }
            Ok(t) => t,
            Err(e) => return skip(format!("a symlink that cannot be followed ({e})")),
        },
        Ok(md) => md,
        Err(e) => return Err(format!("cannot look at it: {e}")),
    };
    if md.is_dir() {
        Ok(Some(LocalKind::Dir))
    } else if md.is_file() {
        Ok(Some(LocalKind::File(md.len())))
    } else {
        skip("a special file".into())
    }
}

//! The destination's directories, made before a tree's files go (a tree
//! copied file by file: to or from a server without lightpath's virtual
//! file, or with several sources).

use super::{offers, open_first};
use crate::plan::Plan;
use crate::session::{Session, SessionOpts, Speculation};
use crate::{ClientError, Location};

/// Create the destination directories; returns the session used for a
/// remote destination (opened for `verify` alone too, to check its CKSM
/// algorithms before anything is copied).
pub(super) async fn make_dirs(
    plan: &Plan,
    dst: &Location,
    sopts: &SessionOpts,
    verify: Option<&str>,
    retries: u32,
) -> Result<Option<Session>, ClientError> {
    if plan.dirs.is_empty() && (verify.is_none() || matches!(dst, Location::Local(_))) {
        return Ok(None);
    }
    match dst {
        Location::Local(root) => {
            for d in &plan.dirs {
                if let Location::Local(p) = d {
                    crate::local::make_dir_beneath(root, p)?;
                }
            }
            Ok(None)
        }
        Location::Remote(r) => {
            let mut s = offers(open_first(r, sopts, (&[], Speculation::None), retries).await?, verify)?;
            let (all, parents) = with_parents(plan.dirs.iter().filter_map(remote_dir).collect());
            s.mkdirs(&all, parents).await?;
            Ok(Some(s))
        }
    }
}

/// A remote directory's path without its trailing `/`, as MKD, SITE
/// CHMOD and MFMT name it.
fn remote_dir(d: &Location) -> Option<Vec<u8>> {
    match d {
        Location::Remote(dr) => Some(dr.path.strip_suffix(b"/").unwrap_or(&dr.path).to_vec()),
        Location::Local(_) => None,
    }
}

/// `dirs` (parents before children) after the missing parents of each,
/// shallowest first, as `mkdir -p` makes them: README's promise for a
/// tree's destination, which a copy file by file (to GCT's server; two
/// sources) broke, "MKD /in/B/tree refused: No such file or directory"
/// (a defect hunt's find). And how many parents come first: their MKDs
/// may be refused (they are there; we may not write there).
fn with_parents(dirs: Vec<Vec<u8>>) -> (Vec<Vec<u8>>, usize) {
    let planned: std::collections::HashSet<&[u8]> = dirs.iter().map(Vec::as_slice).collect();
    let mut parents = std::collections::BTreeSet::new();
    for d in &dirs {
        let mut at = d.as_slice();
        while let Some(cut) = at.iter().rposition(|&b| b == b'/').filter(|&c| c > 0) {
            at = &at[..cut];
            if planned.contains(at) || !parents.insert(at.to_vec()) {
                break;
            }
        }
    }
    let depth = |p: &Vec<u8>| p.iter().filter(|&&b| b == b'/').count();
    let mut out: Vec<Vec<u8>> = parents.into_iter().collect();
    out.sort_by_key(depth);
    let n = out.len();
    out.extend(dirs);
    (out, n)
}

/// Give the directories of a tree copied file by file their sources'
/// modes and mtimes, deepest first, once their files are in (a file
/// written moves its directory's mtime): each was made 0755 (less the
/// umask) and of the time of the copy, so a private (0700) directory
/// became listable by all on GCT's server and ours, where a tree copied
/// as one virtual file keeps them (a defect hunt's find). What fails is
/// warned of, once: the files are there.
pub(super) async fn set_dir_metas(
    mut metas: Vec<(Location, u32, Option<i64>)>,
    dst: &Location,
    sopts: &SessionOpts,
    retries: u32,
) {
    metas.sort_by_cached_key(|(d, ..)| std::cmp::Reverse(crate::plan::describe(d).matches('/').count()));
    let refused = match dst {
        Location::Local(root) => metas.iter().filter(|(d, mode, mtime)| !set_local(root, d, *mode, *mtime)).count(),
        Location::Remote(r) if !metas.is_empty() => {
            // Never the served root's (refused: it would lock sessions out).
            let paths = metas.iter().filter_map(|(d, mode, mtime)| Some((remote_dir(d)?, *mode, *mtime)));
            let paths: Vec<_> = paths.filter(|(p, ..)| p.iter().any(|&b| b != b'/')).collect();
            match open_first(r, sopts, (&[], Speculation::None), retries).await {
                Ok(mut s) => {
                    let n = s.set_meta_many(&paths).await;
                    s.quit().await;
                    n
                }
                Err(e) => {
                    tracing::warn!("the directories' modes and mtimes not set: {e}");
                    return;
                }
            }
        }
        Location::Remote(_) => 0,
    };
    if refused > 0 {
        tracing::warn!("{refused} of {} directories kept the mode or mtime they were made with", metas.len());
    }
}

/// The local directory `dir` beneath `root` (no symlink followed) gets
/// `mode` (no setuid or setgid) and `mtime`; whether it did.
fn set_local(root: &std::path::Path, dir: &Location, mode: u32, mtime: Option<i64>) -> bool {
    let Location::Local(p) = dir else { return false };
    // The destination directory itself (`cp -r src/ dst/`) is the tree's own.
    let rel = match crate::local::rel_beneath(root, p) {
        Some(Ok(rel)) => rel,
        None if p == root => Vec::new(),
        _ => return false,
    };
    let mode = mode & lightpath_proto::manifest::APPLY_MODE;
    let r = lightpath_sys::root::Root::open(root).and_then(|r| match mtime {
        Some(t) => r.set_dir_meta_strict(&rel, mode, (t, 0)),
        None => r.chmod(&rel, mode),
    });
    r.inspect_err(|e| tracing::debug!("{}: mode and mtime not set: {e}", p.display())).is_ok()
}

#[cfg(test)]
mod tests {
    use super::with_parents;

    #[test]
    fn missing_parents_come_first_shallowest_first() {
        let v = |l: &[&str]| l.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
        let got = with_parents(v(&["/in/B/tree", "/in/B/tree/sub", "/in/B/other"]));
        assert_eq!(got, (v(&["/in", "/in/B", "/in/B/tree", "/in/B/tree/sub", "/in/B/other"]), 2));
        assert_eq!(with_parents(v(&["/t"])), (v(&["/t"]), 0));
        assert_eq!(with_parents(Vec::new()), (Vec::<Vec<u8>>::new(), 0));
    }
}

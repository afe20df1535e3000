//! `--verify` of a tree copied as one virtual file: each file's digest
//! on both sides, and a copy that differs removed.

use crate::job::{
    compare_digests, discard_copy, discard_local_by, kept_unverified, local_digest, mismatch, FileResult,
};
use crate::plan::{describe, join};
use crate::session::Session;
use crate::{ClientError, Location};
use lightpath_engine::checksum::checksum;
use lightpath_engine::FileSource;
use lightpath_proto::unreadable::Unreadables;
use lightpath_sys::root::Root;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a tree's local files are read: by path as named (a source tree
/// here: the user's own), or beneath the destination directory without
/// following a symlink. The tree's sender made those links: a hostile
/// one's `sub -> /home/u` would have had the check read, and on a
/// mismatch delete, a file outside the destination.
#[derive(Clone)]
pub(super) enum Reader {
    AsNamed,
    Beneath(Arc<Root>, PathBuf),
}

impl Reader {
    /// The reader of `target`'s files.
    fn of(target: &Location) -> Result<Reader, ClientError> {
        let Location::Local(dir) = target else { return Ok(Reader::AsNamed) };
        let root = Root::open(dir).map_err(|e| ClientError::Local(format!("{}: {e}", dir.display())))?;
        Ok(Reader::Beneath(Arc::new(root), dir.clone()))
    }

    /// `p` beneath the destination, as a path relative to it.
    fn rel<'a>(base: &Path, p: &'a Path) -> Result<&'a [u8], ClientError> {
        let rel = p.strip_prefix(base).map_err(|_| ClientError::Local(format!("{}: not in the tree", p.display())))?;
        Ok(rel.as_os_str().as_bytes())
    }

    fn digest(&self, alg: &str, p: &Path) -> Result<String, ClientError> {
        let Reader::Beneath(root, base) = self else { return local_digest(alg, p) };
        let err = |e: std::io::Error| ClientError::Local(format!("{}: {e}", p.display()));
        let f = root.open_read_strict(Self::rel(base, p)?).map_err(err)?;
        checksum(&FileSource::new(f, true).map_err(err)?, alg, 0, None).map_err(err)
    }

    /// A copy whose digest differs (`e`), removed; other errors leave it.
    async fn discard(&self, e: ClientError, dst: &Location, d: Option<&mut Session>) -> ClientError {
        let (Reader::Beneath(root, base), Location::Local(p), ClientError::Checksum { .. }) = (self, dst, &e) else {
            return discard_copy(e, dst, d).await;
        };
        let rel = match Self::rel(base, p) {
            Ok(r) => r.to_vec(),
            Err(err) => return mismatch(e, format!("the copy {} could not be removed: {err}", p.display())),
        };
        let root = root.clone();
        discard_local_by(e, p, move || root.remove_file_strict(&rel)).await
    }
}

/// `--verify` of a tree copied as one virtual file: the source tree is
/// walked (here, or by MLSD on the source server `s`) and each regular
/// file's `alg` digest compared on both sides: CKSM pipelined on each
/// server's control connection, a local side's files read on a blocking
/// thread meanwhile. `s` and `d` are the sessions of the remote ends.
/// Returns a failed result for each file that differs or could not be
/// checked, and how many files the walk found (checked or failed; the
/// names of one file counted once).
pub(crate) async fn verify_tree(
    src: &Location,
    target: &Location,
    alg: &str,
    (mut s, mut d): (Option<&mut Session>, Option<&mut Session>),
    unreadable: &Unreadables,
) -> Result<(Vec<FileResult>, u64), ClientError> {
    let left_out = !unreadable.is_empty();
    // Named as left out (read, but changed on every try): reported once.
    let named: std::collections::HashSet<String> =
        unreadable.named.iter().map(|u| describe(&join(src, &u.path))).collect();
    let (items, unlisted) = crate::plan::tree_files(src, target, s.as_deref_mut()).await?;
    let here = Reader::of(target)?;
    tracing::info!(files = items.len(), alg, "verifying the tree's files");
    let srcs: Vec<&Location> = items.iter().map(|i| &i.src).collect();
    let dsts: Vec<&Location> = items.iter().map(|i| &i.dst).collect();
    let (a, b) =
        tokio::join!(digests(alg, &srcs, s, Reader::AsNamed), digests(alg, &dsts, d.as_deref_mut(), here.clone()));
    let mut failed = Vec::new();
    // Beneath an entry left out (a directory the destination refused):
    // never written, and counted among those left out, not "kept".
    let beneath = |src: &str| named.iter().any(|n| src.strip_prefix(n.as_str()).is_some_and(|r| r.starts_with('/')));
    for (i, (a, b)) in items.iter().zip(a.into_iter().zip(b)) {
        let src = describe(&i.src);
        if left_out && ((a.is_err() && b.is_err()) || named.contains(&src) || beneath(&src)) {
            // One the tree's sender left out (not readable at the source
            // and not here, or named so), reported as such (not all by
            // name).
            continue;
        }
        let Err(e) = compare_digests(alg, a, b) else { continue };
        let e = kept_unverified(alg, here.discard(e, &i.dst, d.as_deref_mut()).await, &i.dst);
        failed.push(FileResult { src: describe(&i.src), dst: describe(&i.dst), result: Err(e), files: Some(1) });
    }
    // Directories the walk could not list: the tree's sender, listing
    // them as this walk did, left them out and reported them (not all by
    // name); else they are told here.
    // Names a server left out of a listing are counted apart (the copy
    // has more files than this walk saw: `job::tree::unchecked`).
    let unlisted = if left_out { Vec::new() } else { unlisted.into_iter().filter(|u| !u.partly).collect() };
    let not_checked = |why| ClientError::Local(format!("--verify could not check what it holds: {why}"));
    failed.extend(unlisted.into_iter().map(|u| u.failed(not_checked)));
    Ok((failed, distinct_files(&items)))
}

/// How many files `items` name, the names of one file (hard links)
/// counted once, as the tree's copy counts files: counted per name, each
/// extra link hid a file the walk could not see from the check for ones
/// not checked (a helper's defect hunt). A local source's identity is its
/// device and inode, a remote one's its listing's `Unique`; a name
/// without one counts alone.
fn distinct_files(items: &[crate::plan::Item]) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let identity = |i: &crate::plan::Item| match &i.src {
        Location::Local(p) => std::fs::symlink_metadata(p).ok().map(|m| format!("{:x}-{:x}", m.dev(), m.ino())),
        Location::Remote(_) => i.unique.clone(),
    };
    items.iter().filter(|i| identity(i).is_none_or(|k| seen.insert(k))).count() as u64
}

/// The `alg` digests of `locs`: by CKSM on `s` for remote ones, else read here.
async fn digests(
    alg: &str,
    locs: &[&Location],
    s: Option<&mut Session>,
    reader: Reader,
) -> Vec<Result<String, ClientError>> {
    let remote = |l: &&Location| match l {
        Location::Remote(r) => Some(r.path.clone()),
        Location::Local(_) => None,
    };
    if let Some(s) = s {
        return s.checksums(alg, &locs.iter().filter_map(remote).collect::<Vec<_>>()).await;
    }
    let paths: Vec<PathBuf> =
        locs.iter().filter_map(|l| if let Location::Local(p) = l { Some(p.clone()) } else { None }).collect();
    let a = alg.to_string();
    let job = tokio::task::spawn_blocking(move || local_digests(&a, &paths, &reader));
    job.await.unwrap_or_else(|e| locs.iter().map(|_| Err(ClientError::Local(e.to_string()))).collect())
}

/// The `alg` digests of the local files `paths`, in order, read and hashed
/// on one thread per CPU (at most 4): a tree's files are independent, and
/// one thread left a core idle while the other end computed its CKSMs.
pub(super) fn local_digests(alg: &str, paths: &[PathBuf], reader: &Reader) -> Vec<Result<String, ClientError>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4);
    let next = AtomicUsize::new(0);
    let worker = || {
        let mut mine = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(p) = paths.get(i) else { return mine };
            mine.push((i, reader.digest(alg, p)));
        }
    };
    let mut out: Vec<Option<Result<String, ClientError>>> = paths.iter().map(|_| None).collect();
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads).map(|_| sc.spawn(worker)).collect();
        for (i, r) in hs.into_iter().flat_map(|h| h.join().unwrap_or_default()) {
            out[i] = Some(r);
        }
    });
    // A file whose thread panicked has no digest: it fails, in its place.
    let lost = |p: &PathBuf| ClientError::Local(format!("{}: its checksum was not computed", p.display()));
    out.into_iter().zip(paths).map(|(r, p)| r.unwrap_or_else(|| Err(lost(p)))).collect()
}

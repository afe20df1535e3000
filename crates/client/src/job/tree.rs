//! A directory copied as one virtual file (`VRET`/`VSTO`, lightpath's
//! `LPVF`) when every remote end offers it: the ends of the copy, its
//! tries (a retry resumes after the files the receiver holds), and where
//! the tree lands.

use super::{offers, open_first, tree_upload, CopyOptions, FileResult, Progress};
use crate::plan::{describe, join};
use crate::retry;
use crate::session::{Session, SessionOpts, Speculation};
use crate::{ClientError, Location};
use lightpath_proto::unreadable::Unreadables;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// A directory copy as one virtual file (VRET/VSTO) when every remote end
/// offers `LPVF`. `None`: not applicable, copy file by file. With
/// `verify`, every file is checked once the tree is there.
pub(super) async fn try_tree(
    src: &Location,
    dst: &Location,
    lister: &mut Option<Session>,
    sopts: &SessionOpts,
    progress: &Progress,
    verify: Option<&str>,
    retries: u32,
) -> Result<Option<Vec<FileResult>>, ClientError> {
    if !is_tree(src, lister).await? {
        return Ok(None);
    }
    let target = tree_target(src, dst, sopts.keep_interrupted);
    let mut dst_s = match &target {
        Location::Remote(r) => {
            // A resumed upload's check goes before its VSTO.
            let noted = sopts.keep_interrupted && crate::partial::tree::noted(src, &target);
            let spec = tree_upload(src, r, verify.is_none() && !noted);
            Some(offers(open_first(r, sopts, (&[], spec), retries).await?, verify)?)
        }
        Location::Local(_) => None,
    };
    if !all_offer_lpvf(lister, &dst_s, sopts.quiet) {
        if let Some(d) = dst_s {
            d.quit().await;
        }
        return Ok(None);
    }
    let files = Arc::new(AtomicU64::new(UNCOUNTED));
    let root = crate::vfile::source_root(src, lister.as_ref());
    let ends = TreeEnds { src, dst, target: &target, sopts, retries, verify, root };
    let Some((r, unreadable)) = ends.run(lister, &mut dst_s, files.clone()).await else {
        return Ok(None);
    };
    let mut out = vec![FileResult { src: describe(src), dst: describe(&target), result: r, files: None }];
    let left_out = left_out(src, &target, &unreadable);
    let files = Some(files.load(std::sync::atomic::Ordering::Relaxed)).filter(|&n| n != UNCOUNTED);
    if let (Ok(_), Some(alg)) = (&out[0].result, verify) {
        let ends = (lister.as_mut(), dst_s.as_mut());
        verify_into(&mut out, (src, &target), alg, ends, (&unreadable, files)).await;
    }
    if out[0].result.is_ok() {
        let failed: u64 = out[1..].iter().map(|r| r.files.unwrap_or(1)).sum();
        out[0].files = files.map(|n| n.saturating_sub(failed));
    }
    out.extend(left_out);
    progress.files.store(files.unwrap_or(0), std::sync::atomic::Ordering::Relaxed);
    for s in [lister.take(), dst_s].into_iter().flatten() {
        s.quit().await;
    }
    Ok(Some(out))
}

/// Whether `src` is a directory (a remote one asked through `lister`).
/// A local tree that cannot be listed fails here, before any server is
/// asked to take it (an upload waited for its reply, and retried).
async fn is_tree(src: &Location, lister: &mut Option<Session>) -> Result<bool, ClientError> {
    let is_dir = match (src, lister.as_mut()) {
        (Location::Local(p), _) => p.is_dir(),
        (Location::Remote(r), Some(s)) => crate::plan::remote_stat(r, Some(s), true).await?.0,
        (Location::Remote(_), None) => false,
    };
    if let (true, Location::Local(p)) = (is_dir, src) {
        crate::plan::listable(p)?;
    }
    Ok(is_dir)
}

/// Whether every remote end offers LPVF; if not, say which do not and
/// that the tree goes file by file.
fn all_offer_lpvf(lister: &Option<Session>, dst: &Option<Session>, quiet: bool) -> bool {
    let lacking: Vec<String> =
        lister.iter().chain(dst.iter()).filter(|s| s.feat.lpvf.is_none()).map(|s| s.ctl.name.clone()).collect();
    if !lacking.is_empty() && !quiet {
        say!("lightpath: {} does not offer LPVF (virtual file): copying file by file with pipelined commands over reused MODE E channels", lacking.join(", "));
    }
    lacking.is_empty()
}

/// `--verify` of a copied tree: the files that failed, and a result for
/// those its walk did not see (`files`: how many were copied), are added
/// to `out`; a verify that could not run fails the tree's result.
async fn verify_into(
    out: &mut Vec<FileResult>,
    (src, target): (&Location, &Location),
    alg: &str,
    ends: (Option<&mut Session>, Option<&mut Session>),
    (unreadable, files): (&Unreadables, Option<u64>),
) {
    match crate::vfile::verify_tree(src, target, alg, ends, unreadable).await {
        Ok((failed, checked)) => {
            out.extend(failed);
            // (Files left out as unreadable are told apart: `left_out`.)
            if unreadable.is_empty() {
                out.extend(unchecked(src, target, files.map(|n| n.saturating_sub(checked))));
            }
        }
        Err(e) => out[0].result = Err(e),
    }
}

/// A failed result standing for the `n` files of a tree copied (and
/// kept) that `--verify` could not check: its walk of the source did not
/// see them (a server leaves names with line breaks out of listings).
/// Counted as copied and verified, they were neither checked nor said.
fn unchecked(src: &Location, target: &Location, n: Option<u64>) -> Option<FileResult> {
    let n = n.filter(|&n| n > 0)?;
    let why = format!("--verify could not check {n} file(s) of the tree, copied and kept: the walk of its source did not see them (names with line breaks are left out of listings)");
    Some(FileResult { src: describe(src), dst: describe(target), result: Err(ClientError::Local(why)), files: Some(n) })
}

/// A failed result for each file or directory of the tree that its
/// sender could not read and left out (as the sender's reply or walk named
/// them), and one standing for those it counted but did not name.
fn left_out(src: &Location, target: &Location, u: &Unreadables) -> Vec<FileResult> {
    let remote = matches!(src, Location::Remote(_));
    let why = |w: &str| match w {
        // Not unreadable: written to all the time ([`crate::vfile::TreeHeld`]).
        lightpath_engine::vfile::SKIPPED => format!("it {w}"),
        w if w.ends_with(lightpath_engine::vfile::AT_DESTINATION) => w.to_string(),
        w if remote => format!("the source server could not read it ({w})"),
        w => w.to_string(),
    };
    let failed = |src, dst, why, n| FileResult { src, dst, result: Err(ClientError::LeftOut(why)), files: Some(n) };
    let mut out: Vec<FileResult> = (u.named.iter())
        .map(|x| failed(describe(&join(src, &x.path)), describe(&join(target, &x.path)), why(&x.why), 1))
        .collect();
    let more = u.count.saturating_sub(u.named.len() as u64);
    if more > 0 {
        out.push(failed(describe(src), describe(target), more_left_out(u, more, remote), more));
    }
    out
}

/// Why `more` entries of a tree that no line names were left out: the
/// sender could not read them, or, where the destination refused a
/// directory, they were beneath it (they were all said to be unreadable).
fn more_left_out(u: &Unreadables, more: u64, remote: bool) -> String {
    let whose = if remote { "the source server's log names" } else { "the warnings above name" };
    let unread = format!("{more} more file(s) or directories in it could not be read ({whose} each)");
    match u.named.iter().any(|x| x.why.ends_with(lightpath_engine::vfile::AT_DESTINATION)) {
        false => unread,
        true => format!("{more} more file(s) or directories in it were left out: beneath a directory not copied (named above), or unreadable"),
    }
}

/// A tree's file count before (or unless) it is known: a third-party
/// tree's comes from the servers' final replies, which an older server's
/// lack.
const UNCOUNTED: u64 = u64::MAX;

/// The ends of a tree copied as one virtual file.
struct TreeEnds<'a> {
    src: &'a Location,
    dst: &'a Location,
    target: &'a Location,
    sopts: &'a SessionOpts,
    retries: u32,
    verify: Option<&'a str>,
    /// The mode and mtime of the tree's own directory at the source, for
    /// its copy ([`crate::vfile::source_root`]).
    root: Option<lightpath_proto::held::TreeRoot>,
}

impl TreeEnds<'_> {
    /// [`run_tree`], tried again on new sessions after a transient
    /// failure, up to `retries` times (after the pause a file's retry
    /// would take: none after a first data-stream failure). The next try
    /// leaves out the files the failed ones left complete, up to the first
    /// gap ([`crate::vfile::TreeHeld`]): what a download holds itself, or
    /// what the receiving server's failure reply says it holds (an upload,
    /// a third-party tree; none when it went away: the tree goes whole).
    async fn run(
        &self,
        s: &mut Option<Session>,
        d: &mut Option<Session>,
        files: Arc<AtomicU64>,
    ) -> Option<(Result<u64, ClientError>, Unreadables)> {
        let (mut tries, mut first) = (0, true);
        let mut held = self.take_up().await;
        loop {
            // A retry starts on new sessions (those of a failed try may be gone).
            let opened = if first { Ok(()) } else { self.reopen(s, d, &mut held).await };
            first = false;
            let r = match opened {
                Ok(()) => {
                    let ends = (s.as_mut(), d.as_mut());
                    let tree = (self.src, self.dst, self.target, self.root);
                    run_tree(tree, ends, files.clone(), &mut held).await?
                }
                Err(e) => Err(e),
            };
            let Err(e) = &r else {
                if !self.sopts.quiet {
                    held.say_kept();
                }
                crate::partial::tree::end(self.src, self.target, &held, false, false);
                return Some((r, std::mem::take(&mut held.unreadable)));
            };
            if held.noted && held.check.is_some() && matches!(e, ClientError::Refused { code: 554, .. }) {
                // The tree changed since what is held was said (an earlier
                // run's note, a marker of a server that went away): no
                // failure of this run's. It goes whole, at once, not counted.
                tracing::warn!("{}: {e}; copying the whole tree now", describe(self.src));
                held.start_over();
                continue;
            }
            let cancelled = self.sopts.cancel.load(std::sync::atomic::Ordering::Relaxed);
            // A file that changed as it was read costs no retry (at most
            // two each, [`crate::vfile::TreeHeld::changed`]); `--retries 0` still stops.
            let free = held.take_fresh_change() && self.retries > 0;
            if !e.is_transient() || (tries >= self.retries && !free) || cancelled {
                crate::partial::tree::end(self.src, self.target, &held, true, self.sopts.keep_interrupted);
                return Some((r, Unreadables::default()));
            }
            tries += u32::from(!free);
            let wait = self.wait_to_retry((tries, free), e, &held);
            retry::pause(wait, &self.sopts.cancel).await;
        }
    }

    /// With `cp -r --partial`, what an earlier run's download or upload of
    /// this tree left ([`crate::partial::tree::take_up`]).
    async fn take_up(&self) -> crate::vfile::TreeHeld {
        if !self.sopts.keep_interrupted {
            return crate::vfile::TreeHeld::default();
        }
        let root = match self.dst {
            Location::Local(root) => Some(root.as_path()),
            Location::Remote(_) => None,
        };
        let mut held = crate::partial::tree::take_up(self.src, self.target, root).await;
        let mut keeper = crate::partial::tree::Keeper::new(self.src, self.target);
        if let Some(k) = &mut keeper {
            k.begin();
        }
        held.keeper = keeper.map(|k| Arc::new(std::sync::Mutex::new(k)));
        held
    }

    /// The pause before retry `tries` after `e`, said with what is held.
    /// A file that changed (`free`) is read again after [`retry::wait_after`]`(1)`:
    /// one being saved may be whole by then.
    fn wait_to_retry(&self, (tries, free): (u32, bool), e: &ClientError, held: &crate::vfile::TreeHeld) -> Duration {
        let wait = match (free, retry::at_once(tries, e)) {
            (true, _) => retry::wait_after(1),
            (false, true) => Duration::ZERO,
            (false, false) => retry::wait_after(tries),
        };
        let (what, n, when) = (describe(self.src), self.retries, retry::when(wait));
        let from = match held.files {
            0 => "from the start".to_string(),
            k => format!("leaving out the {k} files held"),
        };
        let count = if free { "not counted as a retry".to_string() } else { format!("retry {tries} of {n}") };
        tracing::warn!("{what}: {e}; trying the tree again {when}, {from} ({count})");
        wait
    }

    /// New sessions for the remote ends; a tree resumed from an earlier
    /// run's note checks again the files held, which the failed try added to.
    async fn reopen(
        &self,
        s: &mut Option<Session>,
        d: &mut Option<Session>,
        held: &mut crate::vfile::TreeHeld,
    ) -> Result<(), ClientError> {
        if let (Location::Local(root), Some(after), true) = (self.dst, &held.after, held.noted) {
            let checked = crate::partial::tree::check_held(self.target, root, after).await;
            held.check = Some(checked.map_err(ClientError::Local)?);
        }
        if let (Location::Local(dir), Some(after), true) = (self.src, &held.after, held.unchecked) {
            let checked = crate::partial::tree::check_source(dir, after).await;
            (held.check, held.noted, held.unchecked) = (Some(checked.map_err(ClientError::Local)?), true, false);
        }
        if let Location::Remote(r) = self.src {
            *s = Some(Session::open_speculating(r, self.sopts.clone(), &[], Speculation::None).await?);
        }
        if let Location::Remote(r) = self.target {
            // An upload still to send its check (its first try failed
            // before the server took the VSTO) sends no VSTO with the login.
            let checking = held.noted && held.check.is_some();
            let spec = tree_upload(self.src, r, self.verify.is_none() && !checking);
            *d = Some(Session::open_speculating(r, self.sopts.clone(), &[], spec).await?);
        }
        Ok(())
    }
}

/// Whether a tree copy with `cp -r --partial` takes up a note of an
/// earlier run: its VRET then waits for the check of the files held.
pub(super) fn tree_noted(opts: &CopyOptions, src: &Location, dst: &Location) -> bool {
    opts.partial && crate::partial::tree::noted(src, &tree_target(src, dst, true))
}

/// Where the tree `src` copied to `dst` lands ([`crate::vfile::tree_target`]),
/// but with `--partial` (`partial`), into `dst` itself when an earlier
/// run noted `dst` as the tree it left: that run made the directory, and
/// the same command resumes it rather than copying the tree beneath it.
fn tree_target(src: &Location, dst: &Location, partial: bool) -> Location {
    if partial && crate::partial::tree::noted(src, dst) {
        return dst.clone();
    }
    crate::vfile::tree_target(src, dst)
}

/// The tree copy itself, by the direction of the copy (`None`: local to
/// local): `src` to `target` (in the destination `dst`), the source's own
/// directory described by `root`.
async fn run_tree(
    (src, dst, target, root): (&Location, &Location, &Location, Option<lightpath_proto::held::TreeRoot>),
    (s, d): (Option<&mut Session>, Option<&mut Session>),
    files: Arc<AtomicU64>,
    held: &mut crate::vfile::TreeHeld,
) -> Option<Result<u64, ClientError>> {
    Some(match (src, dst, target, s, d) {
        (Location::Remote(sr), Location::Local(dir), Location::Local(p), Some(s), None) => {
            crate::vfile::get_tree(s, &sr.path, (dir.clone(), p.clone(), root), files, held).await
        }
        (Location::Local(p), _, Location::Remote(dr), None, Some(d)) => {
            crate::vfile::put_tree(d, (p.clone(), root), &dr.path, files, held).await
        }
        (Location::Remote(sr), _, Location::Remote(dr), Some(s), Some(d)) => {
            crate::vfile::tpt_tree((s, d), (&sr.path, root), &dr.path, files, held).await
        }
        _ => return None,
    })
}

//! VRET / VSTO: a whole tree as one large virtual file over the MODE E
//! channel (lightpath extension `LPVF`, see docs/manifest.md). No per-file
//! round trip: the manifest and the data share the parallel streams.

use crate::fsops::io_reply;
use crate::transfer::{data_reply, fail_early, Ready};
use lightpath_engine::vfile::{held_check, pack, PackOptions, PackStats, UnpackOptions, Unpacker, VfileError};
use lightpath_engine::vfile_chan::{pack_outcome, recv_opts, send_pack, PackFailure, VfileSink};
use lightpath_engine::{Control, DataChannel, EngineError, DEFAULT_BLOCK};
use lightpath_proto::manifest::show;
use lightpath_proto::{Mode, Reply, Transfer, VPath};
use lightpath_sys::root::{FileType, OnHidden, Root};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn need_mode_e(t: &Transfer) -> Result<(), Reply> {
    if t.settings.mode == Mode::Extended {
        Ok(())
    } else {
        Err(Reply::new(501, "VRET/VSTO need MODE E."))
    }
}

/// The root to pack and the items in it: a directory's contents, or one
/// file (unless `dir_only`: the path was written `dir/`). Symlinks leaving
/// the served root are left out of its listings, as LIST and MLSD leave
/// them out, and reported to `hidden`.
fn pack_root(root: &Root, p: &VPath, dir_only: bool, hidden: OnHidden) -> Result<(Root, Vec<Vec<u8>>), Reply> {
    let st = root.stat(p.relative()).map_err(|e| io_reply(p, &e))?;
    if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
        let sub = root.subdir_fenced(p.relative(), hidden);
        return sub.map(|r| (r, vec![Vec::new()])).map_err(|e| io_reply(p, &e));
    }
    if dir_only {
        return Err(Reply::new(550, format!("{}: Not a directory.", p.display())));
    }
    let parent = p.parent();
    let sub = root.subdir_fenced(parent.relative(), hidden).map_err(|e| io_reply(p, &e))?;
    Ok((sub, vec![p.file_name().to_vec()]))
}

/// Counts (and logs) the symlinks a VRET of `tree` leaves out because they
/// leave the served root; they are reported with the special files skipped.
fn hidden_links(tree: &VPath) -> (OnHidden, Arc<AtomicU64>) {
    let n = Arc::new(AtomicU64::new(0));
    let (count, tree) = (n.clone(), tree.display());
    let on_hidden: OnHidden = Arc::new(move |link: &[u8]| {
        count.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(tree = %tree, link = %show(link), "skipping a symlink that leaves the served root");
    });
    (on_hidden, n)
}

/// VRET: walk, pack and send. The files sent and the special files the
/// walk left out go to `ctl`, for the final reply ([`Reply::tree_complete`]).
pub fn send(root: &Root, dc: &mut DataChannel, t: &Transfer, ctl: &Control, ready: Ready) -> Result<u64, Reply> {
    let (on_hidden, hidden) = hidden_links(&t.path);
    let packed = need_mode_e(t).and_then(|_| pack_root(root, &t.path, t.dir_only, on_hidden));
    // A resumed tree leaves out what the receiver holds (one tree only:
    // the walk order is that of its names).
    // A check (a resume across runs) is compared by the walk ([`outcome`]).
    let resume = |items: &[Vec<u8>]| t.settings.vret_after.clone().filter(|_| items.len() == 1);
    let prepared = packed.and_then(|(sub, items)| {
        let (after, check) = resume(&items).map_or((None, None), |r| (Some(r.after), r.check));
        let skip = t.settings.vret_skip.clone();
        let opts = PackOptions { after, check, skip, ..PackOptions::default() };
        pack(Arc::new(sub), items, opts).map_err(|e| Reply::new(451, format!("{}: {e}", t.path.display())))
    });
    let pk = match prepared {
        Ok(p) => p,
        Err(r) => return fail_early(ready, r),
    };
    match dc.prepare_send(t.settings.parallelism) {
        Ok(reused) => drop(ready.send(Ok(reused))),
        Err(e) => return fail_early(ready, Reply::new(425, format!("Can't open data connection: {e}"))),
    }
    let sent = send_pack(dc, &pk, DEFAULT_BLOCK, t.settings.vret_copies, ctl);
    let (bytes, stats) = outcome(sent, pk.wait(), &t.path)?;
    let skipped = stats.skipped + hidden.load(Ordering::Relaxed);
    // The reply counts the tree's regular files, those the receiver held too.
    ctl.set_tree(stats.files + stats.held, stats.bytes);
    ctl.set_skipped(skipped);
    let unreadable = stats.unreadable.count;
    ctl.set_unreadable(stats.unreadable);
    tracing::info!(
        files = stats.files,
        held = stats.held,
        dirs = stats.dirs,
        skipped,
        unreadable,
        "VRET {}",
        t.path.display()
    );
    Ok(bytes)
}

/// What a VRET sent and the walk found, or the reply naming the cause
/// ([`pack_outcome`] says which). A resume whose held files differ gets
/// 554, as a `REST` the server cannot honour does: the client then asks
/// for the whole tree.
fn outcome(
    sent: Result<u64, EngineError>,
    walk: Result<PackStats, VfileError>,
    path: &VPath,
) -> Result<(u64, PackStats), Reply> {
    pack_outcome(sent, walk).map_err(|f| match f {
        PackFailure::Send(e) => data_reply(e),
        PackFailure::Pack(e @ VfileError::HeldChanged(_)) => Reply::new(554, format!("{}: {e}", path.display())),
        // A file written to as the tree went may read whole on the next
        // try: 450 (file busy), which a client tries again, resuming after
        // the files it holds; 451 would end the copy.
        PackFailure::Pack(ref e @ VfileError::Changed(ref name)) => {
            Reply::new(450, format!("{}: {e}", path.display())).with_changed(name)
        }
        PackFailure::Pack(e) => Reply::new(451, format!("{}: {e}", path.display())),
    })
}

/// Create `p` and its parents inside the root; those this call created
/// are added to `made`, outermost first.
fn mkdir_all(root: &Root, p: &VPath, made: &mut Vec<VPath>) -> Result<(), Reply> {
    let mut cur = VPath::root();
    for c in p.components() {
        cur = cur.join(c).map_err(|e| Reply::new(553, e.to_string()))?;
        match root.mkdir(cur.relative()) {
            Ok(()) => made.push(cur.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_reply(&cur, &e)),
        }
    }
    Ok(())
}

/// After a failed VSTO: remove the directories it created that are still
/// empty, innermost first (`rmdir` removes only an empty one; a directory
/// holding something keeps its parents too).
fn remove_made(root: &Root, made: &[VPath]) {
    for d in made.iter().rev() {
        match root.rmdir(d.relative()) {
            Ok(()) => tracing::info!("VSTO failed: removed the empty directory {} it created", d.display()),
            Err(e) => {
                tracing::debug!("VSTO failed: keeping {}: {e}", d.display());
                return;
            }
        }
    }
}

/// Trees being written by VSTO, so that no two overlap: one run giving up
/// removes the directories it made that look empty and the files it left
/// partly written, which would break another run writing the same tree
/// (or one inside it). The second is refused (450, transient) until the
/// first ends.
#[derive(Debug, Default)]
pub struct TreeClaims(std::sync::Mutex<Vec<VPath>>);

/// A tree claimed for one VSTO, released when dropped.
#[derive(Debug)]
pub struct TreeClaim<'a>(&'a TreeClaims, VPath);

impl TreeClaims {
    /// Claim `tree` unless a tree around it, inside it or itself is
    /// being written.
    pub fn claim(&self, tree: &VPath) -> Result<TreeClaim<'_>, Reply> {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(other) = held.iter().find(|h| nested(h, tree) || nested(tree, h)) {
            let why =
                format!("{}: a tree upload into {} is under way; try again later", tree.display(), other.display());
            return Err(Reply::new(450, why));
        }
        held.push(tree.clone());
        Ok(TreeClaim(self, tree.clone()))
    }
}

impl Drop for TreeClaim<'_> {
    fn drop(&mut self) {
        let mut held = self.0 .0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = held.iter().position(|h| *h == self.1) {
            held.swap_remove(i);
        }
    }
}

/// Whether `inner` is `outer` or beneath it.
fn nested(outer: &VPath, inner: &VPath) -> bool {
    let mut i = inner.components();
    outer.components().all(|c| i.next() == Some(c))
}

/// VSTO: receive and rebuild the tree under the target directory. The
/// directories it created are removed again, before the reply, if it
/// fails before putting anything in them.
pub fn receive(
    ctx: &crate::ServerCtx,
    dc: &mut DataChannel,
    t: &Transfer,
    ctl: &Control,
    ready: Ready,
    mut path: crate::transfer::ClientPath,
) -> Result<u64, Reply> {
    let (root, cfg) = (&ctx.root, &ctx.cfg);
    let _claim = match ctx.trees.claim(&t.path) {
        Ok(c) => c,
        Err(r) => return fail_early(ready, r),
    };
    let mut made = Vec::new();
    let prepared = check_resume(root, t).and_then(|_| unpack_sink(root, t, ctl, &mut made)).and_then(|sink| {
        let reused = dc.prepare_recv().map_err(|e| Reply::new(425, format!("Can't open data connection: {e}")))?;
        Ok((sink, reused))
    });
    let sink = match prepared {
        Ok((sink, reused)) => {
            drop(ready.send(Ok(reused)));
            crate::transfer::learn_path(dc, cfg, &mut path);
            sink
        }
        Err(r) => {
            remove_made(root, &made);
            return fail_early(ready, r);
        }
    };
    let r = receive_tree(dc, sink, t, ctl);
    match (&r, t.settings.vsto_root) {
        (Err(_), meta) => {
            remove_made(root, &made);
            // Kept for what it holds complete: not left private (0700,
            // as it was made for the writing), out of its owner's reach
            // but for the server's user; one there before, maybe made
            // writable for the tree ([`unpack_sink`]), gets its mode too.
            if let (Some(meta), true) = (meta, root.subdir(t.path.relative()).is_ok()) {
                set_root_meta(root, &t.path, meta);
            }
        }
        (Ok(_), Some(meta)) => set_root_meta(root, &t.path, meta),
        (Ok(_), None) => {}
    }
    r
}

/// A VSTO that resumes a tree an earlier run left (`OPTS VSTO
/// After=;Check=`): the client leaves out its files up to `after`, so
/// those the target holds must be the same (path, size, mtime and mode of each,
/// [`held_check`]). A tree changed on either side since, or gone, gets
/// 554 before anything is written: the client then sends it whole.
fn check_resume(root: &Root, t: &Transfer) -> Result<(), Reply> {
    let Some(r) = &t.settings.vsto_after else { return Ok(()) };
    let changed = |why: String| Reply::new(554, format!("{}: {why}", t.path.display()));
    let sub = root.subdir(t.path.relative()).map_err(|e| changed(format!("the tree to resume: {e}")))?;
    let ours = held_check(&sub, &r.after).map_err(|e| changed(e.to_string()))?;
    if Some(ours) != r.check {
        return Err(changed(VfileError::HeldChanged(show(&r.after)).to_string()));
    }
    tracing::info!("VSTO {}: resuming, the files up to {} held unchanged", t.path.display(), show(&r.after));
    Ok(())
}

/// Give the tree's own directory the mode and mtime the client sent
/// (`OPTS VSTO`), once what it holds is complete. A failure (the served
/// root itself, whose mode is never changed) is logged: the tree is there.
fn set_root_meta(root: &Root, tree: &VPath, meta: lightpath_proto::held::TreeRoot) {
    let rel = tree.relative();
    let mut r = root.chmod(rel, meta.applied_mode());
    if let (Ok(()), Some(ns)) = (&r, meta.mtime_ns) {
        let (sec, nsec) = lightpath_engine::vfile::split_ns(ns);
        r = root.set_mtime_strict(rel, sec, nsec);
    }
    if let Err(e) = r {
        tracing::warn!("VSTO {}: the tree's own mode and mtime not set: {e}", tree.display());
    }
}

/// The sink rebuilding the tree under the target directory, made with its
/// parents as needed (those made are added to `made`). What it holds
/// complete so far goes to `ctl`, for the perf markers.
fn unpack_sink(root: &Root, t: &Transfer, ctl: &Control, made: &mut Vec<VPath>) -> Result<VfileSink, Reply> {
    need_mode_e(t)?;
    mkdir_all(root, &t.path, made)?;
    if t.settings.vsto_root.is_some() && made.last() == Some(&t.path) {
        // Private while the tree is written, as its subdirectories are;
        // its own mode comes once it is complete ([`set_root_meta`]).
        // A file system that keeps no modes leaves it as made.
        match root.chmod(t.path.relative(), 0o700) {
            Err(e) if !lightpath_sys::root::mode_refused(&e) => return Err(io_reply(&t.path, &e)),
            _ => {}
        }
    } else if t.settings.vsto_root.is_some() {
        // One there (an earlier copy's, given a mode such as 0555) is
        // writable to us while the tree is written, as its existing
        // subdirectories are; its mode comes back at the end, whatever
        // the end ([`receive`]). An error here is the unpacker's to meet.
        let _ = root.let_owner_into(t.path.relative());
    }
    let sub = root.subdir(t.path.relative()).map_err(|e| io_reply(&t.path, &e))?;
    let opts = UnpackOptions { report: Some(ctl.held_so_far()), ..UnpackOptions::default() };
    let u = Unpacker::new(Arc::new(sub), opts).map_err(|e| Reply::new(451, e.to_string()))?;
    Ok(VfileSink::new(u))
}

/// Receive into `sink`. A transfer that breaks says in its reply which
/// files arrived complete ([`Reply::with_held`]): the client's next try
/// leaves them out.
fn receive_tree(dc: &mut DataChannel, sink: VfileSink, t: &Transfer, ctl: &Control) -> Result<u64, Reply> {
    let got = match dc.recv_e(&sink, &recv_opts(dc.idle), ctl) {
        Ok(got) => got,
        Err(e) => {
            let reply = data_reply(e);
            let Some(held) = sink.give_up() else { return Err(reply) };
            tracing::info!(files = held.files, bytes = held.bytes, "VSTO {} broke", t.path.display());
            return Err(reply.with_held(&held));
        }
    };
    let stats = sink.finish().map_err(|e| Reply::new(451, format!("Tree incomplete: {e}")))?;
    ctl.set_tree(stats.files, stats.bytes);
    tracing::info!(?stats, "VSTO {}", t.path.display());
    // Entries this end could not put in place: the 226 names them, and
    // the client reports each as failed.
    ctl.set_unreadable(stats.refused);
    Ok(got.covered())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    fn path() -> VPath {
        VPath::root().join(b"tree").unwrap()
    }

    fn vpath(p: &str) -> VPath {
        p.split('/').fold(VPath::root(), |v, c| v.join(c.as_bytes()).unwrap())
    }

    /// Two runs into one tree, or into a tree and one inside it, never at
    /// once; side by side they may, and a claim ends with its run.
    #[test]
    fn overlapping_tree_uploads_wait_for_each_other() {
        let claims = TreeClaims::default();
        let a = claims.claim(&vpath("d/a")).unwrap();
        for busy in ["d/a", "d/a/sub/x", "d"] {
            let r = claims.claim(&vpath(busy)).expect_err(busy);
            assert_eq!(r.code, 450, "{busy}: {}", r.full_text());
            assert!(r.full_text().contains("/d/a"), "{}", r.full_text());
        }
        let ab = claims.claim(&vpath("d/ab")).expect("a sibling whose name starts alike");
        drop(a);
        let again = claims.claim(&vpath("d/a/sub")).expect("claimed again once the first run ended");
        drop((ab, again));
        assert!(claims.0.lock().unwrap().is_empty());
    }

    fn fail(sent: Result<u64, EngineError>, walk: Result<PackStats, VfileError>) -> Reply {
        outcome(sent, walk, &path()).expect_err("the VRET failed")
    }

    /// A file that shrank while being sent: the send failed reading it and
    /// cancelled the walk; the reply names the file, not "aborted".
    #[test]
    fn the_file_that_changed_is_named_not_the_walks_abort() {
        let why = || VfileError::Changed("sub/f".into());
        let sent = Err(EngineError::io("reading source", io::Error::from(why())));
        let mut r = fail(sent, Err(why()));
        // 450: the client tries again, and leaves out a file that changes
        // on two tries (it reads the name from the reply's own line).
        assert_eq!(r.code, 450);
        assert!(r.text().contains("sub/f changed while being read"), "{}", r.text());
        assert_eq!(r.take_changed().as_deref(), Some(&b"sub/f"[..]));
        // Had only the send known it, its error (which names the file) wins.
        let sent = Err(EngineError::io("reading source", io::Error::from(why())));
        let r = fail(sent, Err(VfileError::Aborted));
        assert_eq!(r.code, 451);
        assert!(r.text().contains("sub/f changed while being read"), "{}", r.text());
    }

    /// The data connection broke: the walk stopped with `Aborted`, and the
    /// reply is the connection's error.
    #[test]
    fn a_broken_connection_is_reported_not_the_walks_abort() {
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        let r = fail(Err(EngineError::io("data connection 1", reset)), Err(VfileError::Aborted));
        assert_eq!(r.code, 426);
        assert!(r.text().contains("data connection 1"), "{}", r.text());
        assert!(!r.text().contains("aborted"), "{}", r.text());
    }

    /// A walk error (a directory that cannot be listed) wins over the
    /// send's error, which only repeats it.
    #[test]
    fn a_walk_error_names_the_tree() {
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        let walk = VfileError::Io { op: "listing", path: "d".into(), source: Arc::new(denied) };
        let sent = Err(EngineError::io("reading source", io::Error::from(walk.clone())));
        let r = fail(sent, Err(walk));
        assert_eq!(r.code, 451);
        assert!(r.text().starts_with("/tree: listing d"), "{}", r.text());
    }
}

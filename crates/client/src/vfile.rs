//! Whole trees as one large virtual file (VRET/VSTO) when the peer offers
//! `LPVF`: one command per tree instead of one per file, manifest and data
//! over the same parallel MODE E streams. The local side is confined with
//! `openat2` too, so a hostile server's manifest cannot write outside the
//! destination.

use crate::plan::{base_name, dst_is_dir, join};
use crate::session::Session;
use crate::{ClientError, Location};
use lightpath_engine::vfile::{pack, Held, PackOptions, PackStats, UnpackOptions, Unpacker, VfileError};
use lightpath_engine::vfile_chan::{pack_outcome, recv_opts, send_pack, PackFailure, VfileSink};
use lightpath_engine::{Control, DataChannel, EngineError};
use lightpath_proto::command::{opts_vret, opts_vret_copies, opts_vret_skip, opts_vsto_resume, MAX_VRET_AFTER};
use lightpath_proto::held::TreeRoot;
use lightpath_proto::manifest::MAX_COPIES;
use lightpath_proto::server_pi::MAX_VRET_SKIP;
use lightpath_proto::unreadable::Unreadables;
use lightpath_proto::Reply;
use lightpath_sys::root::Root;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

fn verb(v: &str, p: &[u8]) -> Vec<u8> {
    let mut c = format!("{v} ").into_bytes();
    c.extend_from_slice(p.strip_suffix(b"/").filter(|p| !p.is_empty()).unwrap_or(p));
    c
}

/// Where a tree copied from `src` lands under `dst` (the `cp -r` rules).
pub fn tree_target(src: &Location, dst: &Location) -> Location {
    if dst_is_dir(dst, false) && !src.is_dir_syntax() {
        join(dst, &base_name(src))
    } else {
        dst.clone()
    }
}

/// Download the tree at `rpath` into `dir`, in the copy's destination
/// directory `root` (`dir` or a directory beneath it, where no symlink is
/// followed: [`crate::local::tree_root`]).
/// `files` receives the number of regular files of the tree. `held` says
/// what earlier tries left complete ([`TreeHeld`]), and this one adds to it
/// when it fails.
pub async fn get_tree(
    s: &mut Session,
    rpath: &[u8],
    (root, dir, meta): (PathBuf, PathBuf, Option<TreeRoot>),
    files: Arc<AtomicU64>,
    held: &mut TreeHeld,
) -> Result<u64, ClientError> {
    let dirs = (root.clone(), dir.clone());
    ask_tree(s, rpath, held).await?;
    let first = s.ctl.reply().await?;
    if !first.is_preliminary() {
        return Err(s.ctl.unexpected("VRET", &first));
    }
    let ctl = s.opts.control();
    let mut dc = s.take_dc();
    let (c2, f2, now) = (ctl.clone(), files.clone(), Arc::new(Mutex::new(None)));
    let now2 = now.clone();
    let job = tokio::task::spawn_blocking(move || {
        let r = receive_tree(&mut dc, dirs, &c2, &f2, &now2);
        (dc, r)
    });
    let keeping = held.keep_from(ctl.clone());
    let note = |r: &mut Reply| held.note_reply(r);
    let r = s.finish_job_noting_failure(job, &ctl, "VRET", note).await;
    if let Some(k) = keeping {
        k.abort();
        let _ = k.await; // a note being written is, before the run's end
    }
    held.note(now.lock().unwrap_or_else(|p| p.into_inner()).take());
    let (bytes, fin) = r?;
    // The server counts the files the earlier tries left here too, and
    // those this end could not put in place (then: those put in place,
    // and those held).
    match (fin.files_completed(), ctl.unreadable().is_empty()) {
        (Some(n), true) => files.store(n, Ordering::Relaxed),
        (_, false) => drop(files.fetch_add(held.files, Ordering::Relaxed)),
        (None, true) => {}
    }
    warn_skipped(fin.special_files_skipped(), " on the server", true);
    held.unreadable = fin.unreadable();
    held.unreadable.merge(ctl.unreadable());
    if let Some(m) = meta {
        set_local_root(&root, &dir, m);
    }
    Ok(bytes)
}

/// The mode and mtime of the tree's own directory at the source: a local
/// one's (`src` a local path), or what the source server's MLST said of
/// it (`lister`, which asked: [`Session::stat_meta`]). The manifest
/// describes what the directory holds, not the directory itself.
pub(crate) fn source_root(src: &Location, lister: Option<&Session>) -> Option<TreeRoot> {
    match src {
        Location::Local(p) => {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(p).ok()?;
            let ns = m.mtime().checked_mul(1_000_000_000).and_then(|t| t.checked_add(m.mtime_nsec()));
            Some(TreeRoot { mode: m.mode() & 0o7777, mtime_ns: ns })
        }
        Location::Remote(r) => lister?.stat_meta(&r.path),
    }
}

/// Give the downloaded tree's own directory (`dir` beneath `root`) the
/// source's mode and mtime, once what it holds is complete. A failure is
/// a warning: the tree is there.
fn set_local_root(root: &Path, dir: &Path, m: TreeRoot) {
    use std::os::unix::fs::PermissionsExt;
    let set = || -> Result<(), String> {
        let d = crate::local::tree_root(root, dir).map_err(|e| e.to_string())?;
        let f = d.open_dir_strict(b"").map_err(|e| e.to_string())?;
        f.set_permissions(std::fs::Permissions::from_mode(m.applied_mode())).map_err(|e| e.to_string())?;
        if let Some(ns) = m.mtime_ns {
            f.set_times(std::fs::FileTimes::new().set_modified(lightpath_engine::vfile::system_time(ns)))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    if let Err(e) = set() {
        tracing::warn!("{}: the tree's own mode and mtime not set: {e}", dir.display());
    }
}

/// The `VRET` of `rpath` (unless it went with the login), after `OPTS
/// VRET After=` when earlier tries left files (`held`); its replies but
/// the VRET's read. A server that refuses the option sends the whole tree.
async fn ask_tree(s: &mut Session, rpath: &[u8], held: &TreeHeld) -> Result<(), ClientError> {
    if !s.take_speculation(rpath) {
        held.ask_to_leave_out(s).await?;
        s.send_vret(rpath, false).await?;
    }
    s.settle().await?;
    TreeHeld::say_if_refused(s);
    Ok(())
}

/// Receive the tree into `dir` beneath `root` (blocking): the bytes, with
/// the tree's file count in `files`. A try that breaks leaves what it
/// holds in `held` ([`VfileSink::give_up`]).
fn receive_tree(
    dc: &mut DataChannel,
    (root, dir): (PathBuf, PathBuf),
    ctl: &Control,
    files: &AtomicU64,
    held: &Mutex<Option<Held>>,
) -> Result<u64, ClientError> {
    let root = crate::local::tree_root(&root, &dir)?;
    let opts = UnpackOptions { report: Some(ctl.held_so_far()), ..UnpackOptions::default() };
    let unpacker = Unpacker::new(Arc::new(root), opts);
    let sink = VfileSink::new(unpacker.map_err(|e| ClientError::Local(e.to_string()))?);
    let got = match dc.recv_e(&sink, &recv_opts(dc.idle), ctl) {
        Ok(got) => got,
        Err(e) => {
            *held.lock().unwrap_or_else(|p| p.into_inner()) = sink.give_up();
            return Err(e.into());
        }
    };
    tracing::debug!(bytes = got.covered(), "tree data received; finishing");
    let stats = sink.finish()?;
    tracing::info!(?stats, "tree rebuilt");
    files.store(stats.files, Ordering::Relaxed);
    ctl.set_unreadable(stats.refused); // what could not be put in place here
                                       // The files' bytes: the copy's summary counts those, not the
                                       // manifest that went with them.
    Ok(stats.bytes)
}

/// How often a tree download with `--partial` notes what it holds so far
/// (when that grew; the server's marker interval does the same for an
/// upload).
const NOTE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// What the failed tries of a tree download left complete: every regular
/// file up to `after` in the sender's walk order, `files` of them in all,
/// of `bytes`. The next try asks the server to leave them out (`OPTS VRET
/// After=`). What an earlier run left ([`crate::partial::tree`]) goes
/// with the check of those files here.
#[derive(Debug, Default)]
pub struct TreeHeld {
    /// The manifest path of the last file held.
    pub after: Option<Vec<u8>>,
    /// Files held.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// The check of the files held ([`lightpath_engine::vfile::held_check`]),
    /// for a resume across runs.
    pub check: Option<u64>,
    /// Whether `after` is checked by the server before files are left out
    /// (`Check=`): it is what an earlier run noted, or what the perf
    /// marker of a server that went away said. A 554 to that check means
    /// the tree changed: it goes whole.
    pub noted: bool,
    /// What is held came from the last perf marker of a receiving server
    /// that went away (no failure reply said it): the next try has it
    /// checked first ([`TreeHeld::noted`]), since that server's files may
    /// not be what it said (a crash, another node, a cleanup).
    pub(crate) unchecked: bool,
    /// With `--partial`, the note kept current while the tree goes: from
    /// an upload's perf markers, a download's own unpacker
    /// ([`crate::partial::tree::Keeper`]).
    pub(crate) keeper: Option<Arc<Mutex<crate::partial::tree::Keeper>>>,
    /// What the sender of the try that completed the tree could not read
    /// and left out ([`Reply::unreadable`]): each is reported as failed.
    pub(crate) unreadable: Unreadables,
    /// Files that changed while being read (a file written to as the tree
    /// went), by manifest path, with the tries they failed. The next try
    /// reads such a file anew; after a second change it is left out, and
    /// reported as not copied, so that a file written to all the time (a
    /// log) does not fail the whole tree.
    pub(crate) changed: std::collections::BTreeMap<Vec<u8>, u32>,
    /// The last try failed on such a file, read at most twice and with
    /// room left to leave it out: the retry does not count against
    /// `--retries` (each file costs at most two tries, so a directory of
    /// logs goes through as one log does).
    pub(crate) fresh_change: bool,
}

impl TreeHeld {
    /// Nothing held: the tree goes whole (the note keeper stays).
    pub(crate) fn start_over(&mut self) {
        let changed = std::mem::take(&mut self.changed);
        *self = TreeHeld { keeper: self.keeper.take(), changed, ..TreeHeld::default() };
    }

    /// The file at manifest path `path` changed while being read. Free
    /// tries are for at most [`MAX_VRET_SKIP`] files (two each): a server
    /// naming a new file every time (or a directory always being written)
    /// had the tree tried again for ever, without counting a retry.
    fn note_changed(&mut self, path: Vec<u8>) {
        let room = self.to_skip().len() < MAX_VRET_SKIP
            && (self.changed.len() < MAX_VRET_SKIP || self.changed.contains_key(&path));
        let n = self.changed.entry(path).or_default();
        *n += 1;
        self.fresh_change = *n <= 2 && room;
    }

    /// Whether the try that just failed failed on a file that changed,
    /// one to be read again or left out next ([`TreeHeld::changed`]).
    pub(crate) fn take_fresh_change(&mut self) -> bool {
        std::mem::take(&mut self.fresh_change)
    }

    /// The files the next try leaves out: those that changed on two tries.
    fn to_skip(&self) -> Vec<Vec<u8>> {
        self.changed.iter().filter(|(_, &n)| n >= 2).map(|(p, _)| p.clone()).take(MAX_VRET_SKIP).collect()
    }

    /// With `--partial`, a download's task that notes what this try holds
    /// so far, as its unpacker records it in `ctl`, every
    /// [`NOTE_EVERY`] (to be aborted when the try ends): a client killed
    /// mid-tree leaves a note for the next run.
    fn keep_from(&self, ctl: Arc<Control>) -> Option<tokio::task::JoinHandle<()>> {
        let mut hook = self.marker_hook()?;
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(NOTE_EVERY);
            loop {
                tick.tick().await;
                if let Some(h) = ctl.held() {
                    (hook.0)(&h);
                }
            }
        }))
    }

    /// The hook that notes, as the perf markers of this try come, what
    /// earlier tries held and the server holds of this one so far.
    fn marker_hook(&self) -> Option<crate::control::HeldHook> {
        let keeper = self.keeper.clone()?;
        let (after, files, bytes) = (self.after.clone(), self.files, self.bytes);
        Some(crate::control::HeldHook(Box::new(move |h: &Held| {
            let mut now = TreeHeld { after: after.clone(), files, bytes, ..TreeHeld::default() };
            now.note(Some(h.clone()));
            keeper.lock().unwrap_or_else(|e| e.into_inner()).keep(&now);
        })))
    }

    /// Tell the user, once the tree is complete, what earlier tries kept.
    pub(crate) fn say_kept(&self) {
        if self.files > 0 {
            let (f, b) = (self.files, self.bytes);
            say!("lightpath: {f} files of the tree ({b} bytes) were kept from earlier tries");
        }
    }

    /// Queue `OPTS VRET After=` on `s` (the source of the next `VRET`)
    /// when earlier tries left files. A path too long for the command is
    /// not sent: the tree goes whole.
    async fn ask_to_leave_out(&self, s: &mut Session) -> Result<(), ClientError> {
        if let Some(after) = self.after.as_deref().filter(|a| a.len() <= MAX_VRET_AFTER) {
            s.ctl.queue_optional(opts_vret(after, self.check)).await?;
        }
        for path in self.to_skip().iter().filter(|p| p.len() <= MAX_VRET_AFTER) {
            s.ctl.queue_optional(opts_vret_skip(path)).await?;
        }
        Ok(())
    }

    /// An upload resumed from an earlier run's note: `OPTS VSTO After=;Check=`
    /// with the check of the source's files up to `after`, its reply read
    /// before the `VSTO`. A server that refuses it (an older lightpath)
    /// gets the whole tree.
    async fn ask_to_resume_upload(&mut self, s: &mut Session) -> Result<(), ClientError> {
        let (Some(after), Some(check)) = (self.after.as_deref(), self.check.filter(|_| self.noted)) else {
            return Ok(());
        };
        let refused = if after.len() <= MAX_VRET_AFTER {
            s.ctl.queue_optional(opts_vsto_resume(after, check)).await?;
            s.settle().await?;
            s.ctl.take_refused_optional("OPTS VSTO")
        } else {
            Some("the path it ends at is too long for the command".into())
        };
        if let Some(why) = refused {
            tracing::warn!("{}: resuming the tree refused ({why}); it goes whole", s.ctl.name);
            self.start_over();
        }
        Ok(())
    }

    /// Once `s`'s replies are read: warn if it refused the `OPTS VRET
    /// After=` (an older server), which sends the whole tree, or an `OPTS
    /// VRET Skip=` (a server older still), which reads the file again.
    fn say_if_refused(s: &mut Session) {
        if let Some(why) = s.ctl.take_refused_optional("OPTS VRET After") {
            tracing::warn!("{}: resuming the tree refused ({why}); it goes whole", s.ctl.name);
        }
        while let Some(why) = s.ctl.take_refused_optional("OPTS VRET Skip") {
            tracing::warn!("{}: leaving out a file that changes as it is read refused ({why})", s.ctl.name);
        }
        if let Some(why) = s.ctl.take_refused_optional("OPTS VRET Copies") {
            tracing::debug!("{}: manifest copies refused ({why}): each chunk comes once", s.ctl.name);
        }
    }

    /// Add what a receiving server's failure reply says it holds, and the
    /// file a sending server's says changed while being read, taking those
    /// lines out of the reply ([`Reply::take_held`], [`Reply::take_changed`]).
    fn note_reply(&mut self, r: &mut Reply) {
        self.note(r.take_held());
        if let Some(path) = r.take_changed() {
            self.note_changed(path);
        }
    }

    /// Add what a failed try left (`None`: nothing new). A try that left
    /// files out sends first those of them with several names (their
    /// later names need them); one that broke before it passed `after`
    /// held nothing new, and its run, ending before `after`, is not taken.
    fn note(&mut self, got: Option<Held>) {
        let behind = |h: &Held, a: &[u8]| lightpath_engine::vfile::walk_order(&h.after, a).is_le();
        if let Some(h) = got.filter(|h| !self.after.as_deref().is_some_and(|a| behind(h, a))) {
            self.after = Some(h.after);
            self.files += h.files;
            self.bytes += h.bytes;
        }
    }
}

/// Tell the user (whatever the log level) that `n` special files were not
/// copied; `place` says where they were. A server's count holds the
/// symlinks it leaves out for leaving its served root too (its log names
/// each).
fn warn_skipped(n: u64, place: &str, server: bool) {
    if n == 0 {
        return;
    }
    let what = if server {
        "FIFOs, devices, sockets, and symlinks leaving the served root are not copied; the server's log names each"
    } else {
        "FIFOs, devices, sockets are not copied"
    };
    say!("lightpath: warning: {n} special file(s) skipped{place} ({what})");
}

/// Queue `OPTS VSTO` with the mode and mtime of the tree's own directory
/// before a `VSTO` on `s`; the receiving server gives them to the tree's
/// directory once the tree is complete. A server that refuses it (an
/// older lightpath) leaves its directory as it makes it.
async fn send_root(s: &mut Session, root: Option<TreeRoot>) -> Result<(), ClientError> {
    match root {
        Some(r) => s.ctl.queue_optional(r.opts()).await,
        None => Ok(()),
    }
}

/// `VSTO tree`, sent with the login after the connections opened ahead
/// ([`crate::session::Speculation::UploadTree`]): [`put_tree`] takes it over.
pub(crate) async fn speculate_vsto(s: &mut Session, tree: &[u8], root: Option<TreeRoot>) -> Result<(), ClientError> {
    let vsto = verb("VSTO", tree);
    if s.ctl.check(&vsto).is_ok() {
        send_root(s, root).await?;
        s.ctl.send(&vsto).await?;
        s.spec_vsto = Some(tree.to_vec());
    }
    Ok(())
}

/// Whether a `VSTO` of `rpath` sent with the login stands, its 1xx still
/// to read. One that cannot (the server refused the connections opened
/// ahead, so it had none: 425; or it named another tree) is read here,
/// and aborted if the server took it.
async fn vsto_sent(s: &mut Session, rpath: &[u8]) -> Result<bool, ClientError> {
    let Some(sent) = s.spec_vsto.take() else { return Ok(false) };
    if sent == rpath && s.cached_send() > 0 {
        return Ok(true);
    }
    let r = s.ctl.reply().await?;
    tracing::debug!(tree = %String::from_utf8_lossy(&sent), code = r.code, "VSTO sent with the login not taken");
    if r.is_preliminary() {
        return Err(s.abort_taken("VSTO", &r).await);
    }
    Ok(false)
}

/// The files of a tree whose receiving server left some out (`fin` names
/// them): those it put in place in this run (its 226 counts them) and
/// those `held` from earlier tries. The sender counted the ones left out
/// as copied.
fn placed(files: &AtomicU64, fin: &Reply, held: &TreeHeld) {
    if let (false, Some(n)) = (fin.unreadable().is_empty(), fin.files_completed()) {
        files.store(n + held.files, Ordering::Relaxed);
    }
}

/// Upload the tree in `dir` to `rpath`.
/// `files` receives the number of regular files of the tree. `held` says
/// what the server kept of earlier tries, which this one leaves out, and
/// the server's reply to a failed one adds to it ([`Reply::take_held`]).
pub async fn put_tree(
    s: &mut Session,
    (dir, root): (PathBuf, Option<TreeRoot>),
    rpath: &[u8],
    files: Arc<AtomicU64>,
    held: &mut TreeHeld,
) -> Result<u64, ClientError> {
    let pasv = start_vsto(s, root, rpath, held).await?;
    let (streams, block) = (s.streams(), s.opts.block);
    // A server that says it takes them gets each manifest chunk twice.
    let copies = s.feat.lpvf_copies.min(MAX_COPIES);
    let mut dc = s.take_dc();
    if let Some(addr) = pasv {
        dc.connect_to(vec![addr]);
    }
    let (go_tx, go_rx) = std::sync::mpsc::channel::<bool>();
    let ctl = s.opts.control();
    let opts = PackOptions { after: held.after.clone(), skip: held.to_skip(), ..PackOptions::default() };
    let (c2, changed, counted) = (ctl.clone(), ChangedFile::default(), files.clone());
    let changed2 = changed.clone();
    let job = tokio::task::spawn_blocking(move || {
        let r = send_tree(&mut dc, (&dir, opts), streams, (block, copies), (&c2, &changed2), go_rx);
        (
            dc,
            r.map(|(bytes, n)| {
                files.store(n, Ordering::Relaxed);
                bytes
            }),
        )
    });
    let first = match s.settle().await {
        Ok(()) => s.ctl.reply().await,
        Err(e) => Err(e),
    };
    let go = matches!(&first, Ok(r) if r.is_preliminary());
    let _ = go_tx.send(go);
    if go {
        // The server checked what it holds; a retry of this run trusts
        // its failure reply, as any retry does.
        held.check = None;
    }
    if !go {
        ctl.cancel();
        let (dc, _) = job.await.map_err(|e| ClientError::Local(e.to_string()))?;
        s.put_dc(dc);
        return Err(s.ctl.unexpected("VSTO", &first?));
    }
    let _ = s.ctl.take_marked_held(); // an earlier transfer's
    s.ctl.watch_held(held.marker_hook());
    let note = |r: &mut Reply| held.note_reply(r);
    let r = s.finish_job_noting_failure(job, &ctl, "VSTO", note).await;
    s.ctl.watch_held(None);
    if r.is_err() {
        // No reply said what it holds (the control connection went): what
        // its last perf marker said (behind the reply's, if one did), to be
        // checked by the next try.
        let before = held.after.clone();
        held.note(s.ctl.take_marked_held());
        held.unchecked |= held.after != before;
    }
    held.unreadable = ctl.unreadable();
    if let Ok((_, fin)) = &r {
        held.unreadable.merge(fin.unreadable()); // what the server could not put in place
        placed(&counted, fin, held);
    }
    let changed = changed.lock().unwrap_or_else(|p| p.into_inner()).take();
    tree_result(r.map(|(bytes, _)| bytes), changed, held)
}

/// Send what a VSTO needs before it (MODE E, PASV unless a cached
/// connection serves, the resume and root options) and the VSTO itself
/// unless it went with the login; the address PASV gave.
async fn start_vsto(
    s: &mut Session,
    root: Option<TreeRoot>,
    rpath: &[u8],
    held: &mut TreeHeld,
) -> Result<Option<std::net::SocketAddr>, ClientError> {
    s.set_mode(true).await?;
    s.settle().await?; // a refused DCON drops the connections opened ahead
    let sent = vsto_sent(s, rpath).await?;
    let pasv = if s.cached_send() == 0 { Some(s.pasv().await?) } else { None };
    if !sent {
        held.ask_to_resume_upload(s).await?;
        send_root(s, root).await?;
        s.ctl.send(&verb("VSTO", rpath)).await?;
    }
    Ok(pasv)
}

/// A tree upload's result: a failure while a file here changed under its
/// read is that file's ([`ClientError::SourceChanged`]), whatever the
/// server said of it, and the tree goes again.
fn tree_result(
    r: Result<u64, ClientError>,
    changed: Option<(Vec<u8>, String)>,
    held: &mut TreeHeld,
) -> Result<u64, ClientError> {
    match changed {
        Some((path, why)) if r.is_err() => {
            held.note_changed(path);
            Err(ClientError::SourceChanged(why))
        }
        _ => r,
    }
}

/// Where a tree's send puts the file that failed it by changing while
/// being read ([`VfileError::Changed`]): its manifest path and the message.
type ChangedFile = Arc<Mutex<Option<(Vec<u8>, String)>>>;

/// Pack the tree in `dir` (leaving out what `opts` says: the files up to
/// `after` in walk order, which the server holds, and those to `skip`)
/// and send it once the server took the VSTO (`go`).
fn send_tree(
    dc: &mut DataChannel,
    (dir, opts): (&Path, PackOptions),
    streams: u32,
    (block, copies): (u64, u8),
    ends: (&Control, &ChangedFile),
    go: std::sync::mpsc::Receiver<bool>,
) -> Result<(u64, u64), ClientError> {
    let root = Root::open(dir).map_err(|e| ClientError::Local(format!("{}: {e}", dir.display())))?;
    let pk = pack(Arc::new(root), vec![Vec::new()], opts).map_err(|e| ClientError::Local(e.to_string()))?;
    dc.prepare_send(streams)?;
    if !go.recv().unwrap_or(false) {
        pk.cancel();
        return Err(ClientError::Local("server refused the tree".into()));
    }
    let sent = send_pack(dc, &pk, block, copies, ends.0);
    outcome(sent, pk.wait(), dir, ends)
}

/// Bytes and files sent, or the cause of the failure ([`pack_outcome`]
/// says which). Special files the walk left out are named one by one in
/// the walk's warnings; this adds the count. What it could not read goes
/// to `ctl` ([`Control::set_unreadable`]), a file that changed while being
/// read to `changed`.
fn outcome(
    sent: Result<u64, EngineError>,
    walk: Result<PackStats, VfileError>,
    dir: &Path,
    (ctl, changed): (&Control, &ChangedFile),
) -> Result<(u64, u64), ClientError> {
    match pack_outcome(sent, walk) {
        Ok((bytes, stats)) => {
            warn_skipped(stats.skipped, &format!(" in {}", dir.display()), false);
            ctl.set_unreadable(stats.unreadable);
            tracing::info!(files = stats.files, held = stats.held, bytes, "tree sent");
            // The files' bytes (the summary counts those, not the manifest
            // sent with them), and the tree's files: those the server held
            // from earlier tries too.
            Ok((stats.bytes, stats.files + stats.held))
        }
        Err(PackFailure::Send(e)) => Err(e.into()),
        Err(PackFailure::Pack(e)) => {
            if let VfileError::Changed(path) = &e {
                // The tree's name goes before the message where it is shown.
                *changed.lock().unwrap_or_else(|p| p.into_inner()) = Some((path.clone(), e.to_string()));
            }
            Err(ClientError::Local(format!("{}: {e}", dir.display())))
        }
    }
}

/// Third party: `d` rebuilds the tree that `s` sends, server to server.
/// `files` receives the tree's file count. `held` says what `d` kept of
/// earlier tries, which `s` is asked to leave out (`OPTS VRET After=`), and
/// `d`'s reply to a failed one adds to it.
pub async fn tpt_tree(
    (s, d): (&mut Session, &mut Session),
    (spath, root): (&[u8], Option<TreeRoot>),
    dpath: &[u8],
    files: Arc<AtomicU64>,
    held: &mut TreeHeld,
) -> Result<u64, ClientError> {
    s.set_mode(true).await?;
    d.set_mode(true).await?;
    let n = s.streams();
    s.set_parallelism(n, false).await?;
    let addr = d.pasv().await?;
    let port = lightpath_proto::hostport::format_port(addr).map(|h| format!("PORT {h}"));
    let port = port.unwrap_or_else(|| format!("EPRT {}", lightpath_proto::hostport::format_eprt(addr)));
    s.ctl.queue(&port).await?;
    held.ask_to_leave_out(s).await?;
    if d.feat.lpvf_copies >= MAX_COPIES {
        s.ctl.queue_optional(opts_vret_copies(MAX_COPIES)).await?;
    }
    send_root(d, root).await?;
    d.ctl.send(&verb("VSTO", dpath)).await?;
    s.ctl.send(&verb("VRET", spath)).await?;
    s.settle().await?;
    d.settle().await?;
    TreeHeld::say_if_refused(s);
    // Not the destination's perf markers, should it go away: nothing here
    // could check its files before the source leaves them out.
    let note = |r: &mut Reply| held.note_reply(r);
    let (bytes, sent, fin) = crate::thirdparty::watch(s, d, ("VRET", "VSTO"), note).await?;
    // The source counts the files the destination held from earlier tries too.
    if let Some(n) = sent.files_completed().or(fin.files_completed()) {
        files.store(n, Ordering::Relaxed);
    }
    warn_skipped(sent.special_files_skipped(), &format!(" on the source server {}", s.ctl.name), true);
    held.unreadable = sent.unreadable();
    held.unreadable.merge(fin.unreadable()); // what the destination could not put in place
    placed(&files, &fin, held);
    // The files' bytes, as the servers counted them (the markers counted
    // the manifest too).
    Ok(sent.data_bytes().or(fin.data_bytes()).unwrap_or(bytes))
}

mod verify;
pub(crate) use verify::verify_tree;

#[cfg(test)]
mod tests;

//! Running a copy: `--cc` workers with their own control sessions pull files
//! from a shared queue; each worker pipelines commands over a reused MODE E
//! channel; third-party copies link a source and a destination session.

use crate::local::{LocalSource, LocalTarget};
use crate::plan::{describe, make_plan, Item, Plan};
use crate::retry::{self, Task};
use crate::session::{FileOp, Session, SessionOpts, Speculation};
use crate::{ClientError, Location, Remote};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

mod crew;
mod dirs;
mod publish;
mod start;
mod tree;
mod verify;

use crew::{next_batch, BatchOut, Crew};
use dirs::make_dirs;
use start::{refuse_misuse, session_opts, speculation};
use tree::try_tree;
pub(crate) use verify::{compare_digests, discard_copy, discard_local_by, kept_unverified, local_digest, mismatch};
use verify::{verify_batch, Side};

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// Parallel MODE E streams per transfer (0: automatic).
    pub streams: u32,
    /// Rate the automatic stream count aims for (bits/s).
    pub target_bps: u64,
    /// Concurrent control sessions (files in flight; 0: automatic,
    /// [`lightpath_plan::sessions_for`]).
    pub cc: usize,
    /// Copy directories recursively.
    pub recursive: bool,
    /// Commands in flight per session.
    pub pipeline: usize,
    /// MODE E block size.
    pub block: u64,
    /// Partial copy: offset and length ([`TO_END`]: to the end of the
    /// one file copied).
    pub part: Option<(u64, u64)>,
    /// Verify each file with this CKSM algorithm afterwards.
    pub verify: Option<String>,
    /// Flush received local files to disk before renaming them into place.
    pub fsync: bool,
    /// When downloads bypass the page cache.
    pub direct_io: lightpath_plan::DirectIo,
    /// Open data connections ahead to lightpath servers met before (see
    /// [`crate::peers`]).
    pub connect_ahead: bool,
    /// TCP Fast Open to lightpath servers met before.
    pub fastopen: bool,
    /// TCP congestion control of our data connections (`None`: BBR where
    /// the kernel allows it; `kernel`: the system's).
    pub congestion: Option<String>,
    /// Data connections to our listeners are taken from any host, not
    /// only from the server's control address (`cp --data-from-any`: a
    /// server whose data leaves from another interface or host).
    pub data_from_any: bool,
    /// Times a file that failed for a transient reason is tried again
    /// ([`crate::retry`]); a download resumes from what it received.
    pub retries: u32,
    /// Keep a download that failed for good, or was interrupted, for the
    /// next run, and take up one kept by an earlier run; so for what a
    /// server kept of an upload ([`crate::partial`]).
    pub partial: bool,
    /// List a remote tree with one `MLSR` where the server offers it.
    pub mlsr: bool,
    /// Say nothing of how a copy that succeeds went (`cp -q`): no word of
    /// a server without LPVF, nor of a tree's files kept from earlier
    /// tries. Warnings and failures are still told.
    pub quiet: bool,
}

/// Outcome for one file.
#[derive(Debug)]
pub struct FileResult {
    /// Source, for messages.
    pub src: String,
    /// Destination, for messages.
    pub dst: String,
    /// Bytes, or why it failed.
    pub result: Result<u64, ClientError>,
    /// Regular files this result stands for: 1 for a file, the count for a
    /// tree moved as one virtual file (for a third-party tree, the count the
    /// servers gave in their 226); `None` when neither gave one.
    pub files: Option<u64>,
}

/// Progress counters the caller may watch while the copy runs.
#[derive(Debug, Default)]
pub struct Progress {
    /// Bytes moved so far.
    pub bytes: Arc<AtomicU64>,
    /// Bytes planned (known after planning).
    pub planned: AtomicU64,
    /// Files planned.
    pub files: AtomicU64,
    /// Set to stop the job (Ctrl-C): running transfers fail and clean up,
    /// and no further file is started.
    pub cancel: Arc<AtomicBool>,
}

type Queue = Arc<Mutex<VecDeque<Item>>>;

/// A [`CopyOptions::part`] length: from the offset to the end of the file
/// (`cp --off` without `--len`, as globus-url-copy's `-off`).
pub const TO_END: u64 = u64::MAX;

/// A tree copied on one server into itself (`cp -r ftp://h/d
/// ftp://h/d/sub/`) is refused, as `cp -r d d/sub` is: its sender walked
/// what its receiver was writing, and left a spurious `sub/d/sub/d`. The
/// paths are compared as written (a symlink can still lead inside); the
/// hosts by their addresses too (`localhost` is `127.0.0.1`).
async fn not_into_itself(src: &Location, dst: &Location) -> Result<(), ClientError> {
    let (Location::Remote(s), Location::Remote(d)) = (src, dst) else { return Ok(()) };
    if !same_host(s, d).await {
        return Ok(());
    }
    let parts = |p: &[u8]| -> Vec<Vec<u8>> {
        p.split(|&b| b == b'/').filter(|c| !c.is_empty() && *c != b".").map(<[u8]>::to_vec).collect()
    };
    let (sp, dp) = (parts(&s.path), parts(&d.path));
    if !dp.starts_with(&sp) {
        return Ok(());
    }
    Err(ClientError::Usage(format!(
        "cannot copy {} into itself ({}); nothing copied",
        crate::plan::describe(src),
        crate::plan::describe(dst)
    )))
}

/// Whether `a` and `b` name one server: the same host and port as
/// written, or a port and an address in common once resolved. A name
/// that does not resolve is left to the copy to report.
async fn same_host(a: &Remote, b: &Remote) -> bool {
    if (&a.host, a.port) == (&b.host, b.port) {
        return true;
    }
    let addrs = |r: &Remote| tokio::net::lookup_host((r.host.clone(), r.port));
    match (addrs(a).await, addrs(b).await) {
        (Ok(x), Ok(y)) => {
            let x: Vec<_> = x.collect();
            y.into_iter().any(|at| x.contains(&at))
        }
        _ => false,
    }
}

/// The server all remote sources are on, if they are remote. Sources on
/// several servers (or one server as several users) are refused: the
/// sessions that plan and copy are the first source's, which would read
/// another server's path there. So are a mix of local and remote sources,
/// and local to local, before anything is made.
fn one_source_server(srcs: &[Location], dst: &Location) -> Result<Option<Remote>, ClientError> {
    let remotes: Vec<&Remote> =
        srcs.iter().filter_map(|s| if let Location::Remote(r) = s { Some(r) } else { None }).collect();
    let Some(first) = remotes.first() else {
        return match dst {
            Location::Local(_) => Err(ClientError::Usage("local to local: use cp".into())),
            Location::Remote(_) => Ok(None),
        };
    };
    if remotes.len() < srcs.len() {
        return Err(ClientError::Usage("sources must be all local or all remote".into()));
    }
    if let Some(other) = remotes.iter().find(|r| r.server_key() != first.server_key()) {
        let who = |r: &Remote| format!("{}@{}", r.user, crate::location::host_port(&r.host, r.port));
        return Err(ClientError::Usage(format!(
            "sources on more than one server ({} and {}): copy from one server at a time; nothing copied",
            who(first),
            who(other)
        )));
    }
    Ok(Some((*first).clone()))
}

/// Copy `srcs` to `dst`.
pub async fn copy(
    srcs: Vec<Location>,
    dst: Location,
    mut opts: CopyOptions,
    progress: Arc<Progress>,
) -> Result<Vec<FileResult>, ClientError> {
    let sopts = session_opts(&opts, &progress);
    refuse_misuse(&srcs, &opts)?;
    let remote_src = one_source_server(&srcs, &dst)?;
    if opts.recursive {
        for s in &srcs {
            not_into_itself(s, &dst).await?;
        }
    }
    // The sources on the planning server are asked about in the login's round trip.
    let same_server =
        |r: &Remote| remote_src.as_ref().is_some_and(|f| (&f.host, f.port, &f.user) == (&r.host, r.port, &r.user));
    let paths: Vec<Vec<u8>> = srcs
        .iter()
        .filter_map(|s| if let Location::Remote(r) = s { same_server(r).then(|| r.path.clone()) } else { None })
        .collect();
    let verify = opts.verify.as_deref();
    verify::checkable(verify, &srcs, &dst)?;
    let tree = opts.recursive && srcs.len() == 1 && opts.part.is_none();
    let one_file = !opts.recursive && srcs.len() == 1 && opts.part.is_none();
    let spec = match &remote_src {
        Some(r) if same_server(r) => speculation(r, &srcs[0], &dst, &opts, (tree, one_file)),
        _ => Speculation::None,
    };
    let mut lister = match &remote_src {
        Some(r) => Some(offers(open_first(r, &sopts, (&paths, spec), opts.retries).await?, verify)?),
        None => None,
    };
    if tree {
        if let Some(r) = try_tree(&srcs[0], &dst, &mut lister, &sopts, &progress, verify, opts.retries).await? {
            return Ok(r);
        }
    }
    if let Some(s) = lister.as_mut() {
        s.drop_speculation().await?;
    }
    let listers = if opts.cc == 0 { lightpath_plan::MANY_FILES_CC } else { opts.cc };
    let mut plan = make_plan(&srcs, &dst, opts.recursive, lister.as_mut(), listers - 1).await?;
    if let Some(part) = opts.part {
        let part = to_the_end(&plan, part)?;
        opts.part = Some(part);
        plan.files.iter().try_for_each(|f| part_fits(f, part))?;
        plan.files.iter_mut().for_each(|f| f.size = part.1);
    }
    progress.planned.store(plan.bytes(), std::sync::atomic::Ordering::Relaxed);
    progress.files.store(plan.files.len() as u64, std::sync::atomic::Ordering::Relaxed);
    let dst_session = make_dirs(&plan, &dst, &sopts, verify, opts.retries).await?;
    // The planning sessions become the first worker's sessions: no second login.
    // A local destination directory confines what is written beneath it.
    let root = match &dst {
        Location::Local(p) => Some(p.clone()),
        Location::Remote(_) => None,
    };
    let unlisted = std::mem::take(&mut plan.unlisted);
    let dir_metas = std::mem::take(&mut plan.dir_metas);
    let (retries, later) = (opts.retries, sopts.clone());
    let mut out = run_workers(plan, opts, sopts, (lister, dst_session), root).await?;
    // After Ctrl-C, nothing more goes to a server.
    if !later.cancel.load(std::sync::atomic::Ordering::Relaxed) {
        dirs::set_dir_metas(dir_metas, &dst, &later, retries).await;
    }
    out.extend(unlisted.into_iter().map(|u| u.failed(ClientError::LeftOut)));
    Ok(out)
}

/// A copy's first session to `r` ([`Session::open_speculating`]). A
/// server that turns it away for want of room (a `421` greeting, which
/// `--retries` counts as transient) is asked again after a retry's pauses,
/// up to `retries` times; past the first sessions the copy goes on with
/// those a server took ([`crew`]).
pub(super) async fn open_first(
    r: &Remote,
    sopts: &SessionOpts,
    (paths, spec): (&[Vec<u8>], Speculation<'_>),
    retries: u32,
) -> Result<Session, ClientError> {
    let mut n = 0;
    loop {
        match Session::open_speculating(r, sopts.clone(), paths, spec).await {
            // A server not reached yet, or busy (421), as a file's retries:
            // a DTN restarting under a scripted run is waited for.
            Err(e)
                if (e.is_busy() || e.is_transient())
                    && n < retries
                    && !sopts.cancel.load(std::sync::atomic::Ordering::Relaxed) =>
            {
                n += 1;
                let wait = retry::wait_after(n);
                tracing::warn!("{e}; trying again {} (retry {n} of {retries})", retry::when(wait));
                retry::pause(wait, &sopts.cancel).await;
            }
            r => return r,
        }
    }
}

/// `s`, unless `--verify alg` cannot be honoured by it: a server whose
/// FEAT lists the CKSM algorithms it computes, without `alg`, is refused
/// before anything is copied.
fn offers(s: Session, verify: Option<&str>) -> Result<Session, ClientError> {
    match verify {
        Some(alg) => s.computes("--verify", alg).map(|_| s),
        None => Ok(s),
    }
}

type Pair = (Option<Session>, Option<Session>);

async fn run_workers(
    plan: Plan,
    opts: CopyOptions,
    mut sopts: SessionOpts,
    mut first: Pair,
    root: Option<std::path::PathBuf>,
) -> Result<Vec<FileResult>, ClientError> {
    let stores = plan.files.first().is_some_and(|f| matches!(f.dst, Location::Remote(_)));
    let n = crate::plan::sessions_within_files(lightpath_plan::sessions_for(opts.cc, plan.files.len(), stores));
    // The sessions share the job's rate and streams (those open already too).
    sopts.sessions = n as u32;
    first.0.iter_mut().chain(first.1.iter_mut()).for_each(|s| s.opts.sessions = n as u32);
    let queue: Queue = Arc::new(Mutex::new(plan.files.into()));
    let mut tasks = Vec::new();
    let crew = Arc::new(Crew::new(usize::from(first.0.is_some() || first.1.is_some())));
    let mut first = Some(first);
    for _ in 0..n {
        let (q, o, s, pre, r) = (queue.clone(), opts.clone(), sopts.clone(), first.take(), root.clone());
        let crew = crew.clone();
        tasks.push(tokio::spawn(async move { worker(q, o, s, (pre, &crew), r).await }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.extend(t.await.map_err(|e| ClientError::Local(e.to_string()))?);
    }
    Ok(out)
}

fn result(item: &Item, r: Result<u64, ClientError>) -> FileResult {
    FileResult { src: describe(&item.src), dst: describe(&item.dst), result: r, files: Some(1) }
}

/// One worker: batches of files from `q` over its own sessions (the
/// first worker's are `pre`, the planning sessions, counted in `crew`).
async fn worker(
    q: Queue,
    opts: CopyOptions,
    sopts: SessionOpts,
    (mut pre, crew): (Option<Pair>, &Crew),
    root: Option<std::path::PathBuf>,
) -> Vec<FileResult> {
    let mut out = Vec::new();
    let mut counted = pre.as_ref().is_some_and(|p| p.0.is_some() || p.1.is_some());
    let mut sessions: Option<Pair> = None;
    let (mut linked, mut turned_away) = (false, 0);
    // Files that failed for a transient reason and go again first, out
    // (in `crew`) until they are settled.
    let (mut again, mut again_out): (Vec<Task>, Option<BatchOut>) = (Vec::new(), None);
    let keeping = crate::partial::Keeping { root: root.as_deref(), on: opts.partial };
    // Stopped (Ctrl-C): files waiting to go again are reported below.
    while !sopts.cancel.load(std::sync::atomic::Ordering::Relaxed) {
        let (batch, out_now) = next_batch(&q, (&mut again, again_out.take()), opts.pipeline.max(1), crew);
        let Some(out_now) = out_now else {
            if sessions.is_some() && crew.wait_for_more().await {
                continue;
            }
            break;
        };
        batch.iter().filter(|t| t.tries == 0).for_each(|t| crate::partial::take_up(t, keeping));
        let (failed, untried) = start_batch(&mut sessions, &batch, (&sopts, &opts), &mut pre, crew).await;
        crew.holds(sessions.is_some(), &mut counted);
        if failed.as_ref().is_some_and(|e| crew.turned_away(e, &batch)) {
            crew::give_back(&q, batch);
            drop(out_now);
            turned_away += 1;
            crew::wait_turned_away(&q, turned_away, &sopts.cancel).await;
            continue;
        }
        let results = match (sessions.as_mut(), failed) {
            (Some(pair), _) => run_batch(pair, &batch, &opts, root.as_deref(), &mut linked).await,
            (None, e) => {
                let e = e.unwrap_or_else(|| ClientError::Local("no session".into()));
                batch.iter().map(|_| Err(e.clone())).collect()
            }
        };
        if results.iter().any(|r| matches!(r, Err(ClientError::Control(..)))) {
            sessions = None;
            linked = false;
            crew.holds(false, &mut counted);
        }
        let retries = match sopts.cancel.load(std::sync::atomic::Ordering::Relaxed) {
            true => None,
            false if untried => Some(0),
            false => Some(opts.retries),
        };
        let wait = settle_batch(batch, results, (retries, keeping), &mut out, &mut again);
        // Files going again stay out through their pause, so workers
        // holding sessions wait for them: refused while no session was
        // held yet, they are turned away again and handed to those.
        again_out = (!again.is_empty()).then_some(out_now);
        if let Some(d) = wait.filter(|d| !d.is_zero()) {
            retry::pause(d, &sopts.cancel).await;
        }
    }
    crew.holds(false, &mut counted);
    wind_down(again, sessions, keeping, &mut out).await;
    out
}

/// Open a worker's sessions for `batch` if it has none: the error that
/// stops the batch, if any, and whether its files are not even tried (the
/// server found unreachable on an earlier batch's last try:
/// [`Crew::give_up_on`], which this batch's last try may call too).
async fn start_batch(
    sessions: &mut Option<Pair>,
    batch: &[Task],
    (sopts, opts): (&SessionOpts, &CopyOptions),
    pre: &mut Option<Pair>,
    crew: &Crew,
) -> (Option<ClientError>, bool) {
    if let Some(e) = crew.unreachable().filter(|_| sessions.is_none()) {
        return (Some(e), true);
    }
    let failed = open_if_needed(sessions, &batch[0], (sopts, opts), pre).await;
    match &failed {
        Some(e @ ClientError::Connect(..)) if batch.iter().all(|t| t.tries >= opts.retries) => crew.give_up_on(e),
        Some(e @ ClientError::NotThere(..)) => crew.give_up_on(e),
        _ => {}
    }
    (failed, false)
}

/// Open a worker's sessions for `task` if it has none (the first
/// worker's are `pre`, taken over); the error if they could not be.
async fn open_if_needed(
    sessions: &mut Option<Pair>,
    task: &Task,
    (sopts, opts): (&SessionOpts, &CopyOptions),
    pre: &mut Option<Pair>,
) -> Option<ClientError> {
    if sessions.is_some() {
        return None;
    }
    match open_sessions(task, sopts, pre.take().unwrap_or_default(), opts).await {
        Ok(s) => {
            *sessions = Some(s);
            None
        }
        Err(e) => Some(e),
    }
}

/// A worker's end: the files left to go again when the job was stopped
/// fail as interrupted (keeping what they hold for `--partial`), and its
/// sessions quit.
async fn wind_down(
    again: Vec<Task>,
    sessions: Option<Pair>,
    keeping: crate::partial::Keeping<'_>,
    out: &mut Vec<FileResult>,
) {
    let stopped = ClientError::Local("interrupted".into());
    for t in &again {
        crate::partial::end(t, true, keeping);
        out.push(result(&t.item, Err(stopped.clone())));
    }
    if let Some((a, b)) = sessions {
        for s in [a, b].into_iter().flatten() {
            s.quit().await;
        }
    }
}

/// Sort a batch's results: a file that goes again ([`retry::again`]) joins
/// `again`, any other gives its result to `out`. Returns the longest pause
/// the files going again ask for (`None`: none goes again). A file done
/// for good drops what it kept, or keeps it for a later run ([`crate::partial::end`]).
/// Once the copy is stopped (Ctrl-C: `retries` is `None`), a failed file
/// joins `again` as it is, to be reported with the files not yet tried:
/// each said it was "trying again".
fn settle_batch(
    batch: Vec<Task>,
    results: Vec<Result<u64, ClientError>>,
    (retries, keeping): (Option<u32>, crate::partial::Keeping<'_>),
    out: &mut Vec<FileResult>,
    again: &mut Vec<Task>,
) -> Option<std::time::Duration> {
    let mut wait = None;
    for (mut task, r) in batch.into_iter().zip(results) {
        match (r, retries) {
            (Err(_), None) => again.push(task),
            (Err(e), Some(retries)) if retry::again(&mut task, &e, retries) => {
                wait = wait.max(Some(task.wait()));
                again.push(task);
            }
            (r, _) => {
                crate::partial::end(&task, r.is_err(), keeping);
                out.push(result(&task.item, r));
            }
        }
    }
    wait
}

/// Copy `batch` with the sessions of `pair`, one result per file.
async fn run_batch(
    pair: &mut Pair,
    batch: &[Task],
    opts: &CopyOptions,
    root: Option<&std::path::Path>,
    linked: &mut bool,
) -> Vec<Result<u64, ClientError>> {
    let items: Vec<Item> = batch.iter().map(|t| t.item.clone()).collect();
    match (pair.0.as_mut(), pair.1.as_mut()) {
        (Some(s), None) => get_batch(s, batch, opts, root).await,
        (None, Some(d)) if publish::wanted(d, opts.part) => {
            let temps = publish::temp_tasks(batch);
            let mut r = put_batch(d, &temps, opts).await;
            publish::publish(d, (&temps, batch), &mut r, opts.recursive).await;
            r
        }
        (Some(s), Some(d)) if publish::wanted(d, opts.part) => {
            let temps = publish::temp_tasks(batch);
            let mut r = tpt_batch(s, d, &temps, opts, linked).await;
            publish::publish(d, (&temps, batch), &mut r, opts.recursive).await;
            r
        }
        (None, Some(d)) => put_batch(d, batch, opts).await,
        (Some(s), Some(d)) => tpt_batch(s, d, batch, opts, linked).await,
        (None, None) => items.iter().map(|_| Err(ClientError::Usage("local to local: use cp".into()))).collect(),
    }
}

/// Sessions for `task`'s remote ends, reusing `pre` where it points at
/// the same server. An upload that resumes sends nothing with the login:
/// its STOR goes after a REST.
async fn open_sessions(task: &Task, sopts: &SessionOpts, pre: Pair, opts: &CopyOptions) -> Result<Pair, ClientError> {
    let item = &task.item;
    let src = reuse_or_open(&item.src, sopts, pre.0, Speculation::None).await?;
    let spec = match upload_of(item, opts) {
        Speculation::Upload(Some(_)) if task.resume.kept_bytes() > 0 => Speculation::Upload(None),
        s => s,
    };
    Ok((src, reuse_or_open(&item.dst, sopts, pre.1, spec).await?))
}

/// The session of a tree copy from `src` to `target`: an upload's opens
/// its data connections ahead where it can, and sends its VSTO with them
/// (`with_vsto`: not with `--verify`, whose algorithm is checked first,
/// nor for an upload resumed from an earlier run's note).
fn tree_upload<'a>(src: &Location, target: &'a Remote, with_vsto: bool) -> Speculation<'a> {
    match src {
        Location::Local(_) if with_vsto => Speculation::UploadTree(&target.path, crate::vfile::source_root(src, None)),
        Location::Local(_) => Speculation::Upload(None),
        Location::Remote(_) => Speculation::None,
    }
}

/// The destination session of `item`'s copy: an upload's opens its data
/// connections ahead where it can, and sends the whole file's STOR with
/// them (not a part, nor with `--verify`, whose algorithm is checked
/// first, nor when the file cannot be read: that is reported before any
/// STOR).
fn upload_of<'a>(item: &'a Item, opts: &CopyOptions) -> Speculation<'a> {
    let Location::Local(p) = &item.src else { return Speculation::None };
    let Location::Remote(dst) = &item.dst else { return Speculation::None };
    let whole = opts.part.is_none() && opts.verify.is_none() && p != std::path::Path::new("/dev/zero");
    let src = LocalSource::File(p.clone());
    let size = whole.then(|| src.clone().open().map(|s| s.len()).ok()).flatten();
    Speculation::Upload(size.map(|n| (dst.path.as_slice(), n, src.meta())))
}

async fn reuse_or_open(
    l: &Location,
    sopts: &SessionOpts,
    pre: Option<Session>,
    spec: Speculation<'_>,
) -> Result<Option<Session>, ClientError> {
    let Location::Remote(r) = l else { return Ok(None) };
    match pre {
        Some(s) if s.remote.server_key() == r.server_key() => Ok(Some(s)),
        _ => Session::open_speculating(r, sopts.clone(), &[], spec).await.map(Some),
    }
}

fn remote(l: &Location) -> &Remote {
    match l {
        Location::Remote(r) => r,
        Location::Local(_) => unreachable!("checked by open_sessions"),
    }
}

fn local(l: &Location) -> &std::path::Path {
    match l {
        Location::Local(p) => p,
        Location::Remote(_) => unreachable!("checked by open_sessions"),
    }
}

/// Download `batch` into files beneath the destination directory `root`,
/// each resuming what an earlier try of it kept.
async fn get_batch(
    s: &mut Session,
    batch: &[Task],
    opts: &CopyOptions,
    root: Option<&std::path::Path>,
) -> Vec<Result<u64, ClientError>> {
    for t in batch {
        if let Err(e) = retry::check_kept(s, t, &remote(&t.item.src).path).await {
            return batch.iter().map(|_| Err(e.clone())).collect();
        }
    }
    let ops = batch
        .iter()
        .map(|t| {
            let i = &t.item;
            (
                FileOp { remote: remote(&i.src).path.clone(), part: opts.part, resume: None },
                LocalTarget::for_path(local(&i.dst), opts.part.is_some(), opts.fsync, i.size)
                    .created_with(i.mode)
                    .like_source(opts.recursive, i.mode, i.mtime)
                    .beneath(root)
                    .window(opts.part)
                    .resumable(Some(t.resume.clone())),
            )
        })
        .collect();
    let mut results = s.get_many(ops).await;
    let pairs = batch.iter().map(|t| (&t.item.src, &t.item.dst));
    verify_batch(s, opts, pairs, Side::Local, &mut results).await;
    results
}

/// `part` with a [`TO_END`] length made the length from its offset to the
/// end of the one file of `plan` (its size as listed, or as it is here).
fn to_the_end(plan: &crate::plan::Plan, (off, len): (u64, u64)) -> Result<(u64, u64), ClientError> {
    if len != TO_END {
        return Ok((off, len));
    }
    let [f] = plan.files.as_slice() else {
        return Err(ClientError::Usage("--off without --len copies one file (give --len for several)".into()));
    };
    let size = source_size(f).unwrap_or(f.size);
    if off > size {
        let src = describe(&f.src);
        return Err(ClientError::Usage(format!("{src}: --off {off} is past the end of the file ({size} bytes)")));
    }
    Ok((off, size - off))
}

/// The size of `f`'s source where it is known: a local regular file's as
/// it is now, a remote file's as its server gave it (0 counts as
/// unknown). `None` for the rest (a local file that cannot be read: the
/// copy says why; `/dev/zero`).
fn source_size(f: &crate::plan::Item) -> Option<u64> {
    match &f.src {
        Location::Local(p) => std::fs::metadata(p).ok().filter(|m| m.is_file()).map(|m| m.len()),
        Location::Remote(_) => (f.size > 0).then_some(f.size),
    }
}

/// Whether the range `--off`/`--len` asks for lies within `f`'s source:
/// a local file, or a remote one whose size the server gave (0 counts as
/// unknown). A range past the end is refused before anything moves, the
/// same way in every direction (a download found out only at its end, and
/// a third-party copy stored the bytes there were). `/dev/zero` has no end.
fn part_fits(f: &crate::plan::Item, (off, len): (u64, u64)) -> Result<(), ClientError> {
    let Some(has) = source_size(f) else { return Ok(()) };
    let end = off.saturating_add(len);
    if has < end {
        return Err(ClientError::Usage(format!(
            "{}: --off {off} --len {len} ends at byte {end}, past the end of the file ({has} bytes)",
            describe(&f.src)
        )));
    }
    Ok(())
}

/// Upload `batch`, each resuming what the server kept of an earlier try.
async fn put_batch(d: &mut Session, batch: &[Task], opts: &CopyOptions) -> Vec<Result<u64, ClientError>> {
    let ops = batch
        .iter()
        .map(|t| {
            let i = &t.item;
            let p = local(&i.src);
            let src = if p == std::path::Path::new("/dev/zero") {
                LocalSource::Zero(opts.part.map(|x| x.0 + x.1).unwrap_or(0))
            } else {
                LocalSource::File(p.to_path_buf())
            };
            let resume = Some(t.resume.clone());
            (src, FileOp { remote: remote(&i.dst).path.clone(), part: opts.part, resume })
        })
        .collect();
    let mut results = d.put_many(ops).await;
    let pairs = batch.iter().map(|t| (&t.item.dst, &t.item.src));
    verify_batch(d, opts, pairs, Side::Remote, &mut results).await;
    results
}

/// Copy `batch` server to server, each resuming what the destination
/// kept of an earlier try ([`crate::thirdparty`]).
async fn tpt_batch(
    s: &mut Session,
    d: &mut Session,
    batch: &[Task],
    opts: &CopyOptions,
    linked: &mut bool,
) -> Vec<Result<u64, ClientError>> {
    let mut out = Vec::new();
    let stopped = d.opts.cancel.clone();
    for t in batch {
        let i = &t.item;
        // After Ctrl-C no file of the batch starts: each started and was
        // aborted at once, a round trip or more each on every worker, and
        // the cleanup of what they left did not fit in the grace period
        // (temporary files stayed on GCT's server: a defect hunt's find).
        if stopped.load(std::sync::atomic::Ordering::Relaxed) {
            out.push(Err(ClientError::Local("interrupted".into())));
            continue;
        }
        // A server whose transfer was given up because the other failed.
        let reopened = match s.reopen_if_out_of_step().await {
            Ok(()) => d.reopen_if_out_of_step().await,
            e => e,
        };
        let mut r = match reopened {
            Ok(()) => {
                let ends = (remote(&i.src), remote(&i.dst));
                let meta = i.mode.map(|mode| lightpath_proto::held::TreeRoot {
                    mode,
                    mtime_ns: i.mtime.map(|t| t.saturating_mul(1_000_000_000)),
                });
                crate::thirdparty::transfer(s, d, ends, (i.size, meta), opts, linked, &t.resume).await
            }
            Err(e) => Err(e),
        };
        if r.is_err() {
            *linked = false;
        }
        if let (Ok(_), Some(alg)) = (&r, &opts.verify) {
            let a = s.checksum(alg, &remote(&i.src).path).await;
            let b = d.checksum(alg, &remote(&i.dst).path).await;
            r = match compare_digests(alg, a, b) {
                Ok(()) => r,
                Err(e) if opts.part.is_none() => Err(discard_copy(e, &i.dst, Some(d)).await),
                Err(e) => Err(e),
            };
        }
        let fatal = matches!(r, Err(ClientError::Control(..)));
        out.push(r);
        if fatal {
            break;
        }
    }
    while out.len() < batch.len() {
        out.push(Err(ClientError::Control("session".into(), "control connection lost".into())));
    }
    out
}

//! Turning `cp SRC... DST` into a list of files and directories: local
//! walks and remote MLSR or MLSD walks, destination naming as `cp` and
//! `globus-url-copy` do it.

mod local;
mod mlsr;

use crate::session::Session;
use crate::{ClientError, Location, Remote};
pub(crate) use local::listable;
use local::{local_meta, walk_local};
use std::collections::VecDeque;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// One file to copy.
#[derive(Debug, Clone)]
pub struct Item {
    /// Source.
    pub src: Location,
    /// Destination.
    pub dst: Location,
    /// Size (from the listing or stat).
    pub size: u64,
    /// A remote source's permission bits, where its server gave them: a
    /// download is created with them (less the umask), as `cp` creates a
    /// copy, not readable to all where its source was private.
    pub mode: Option<u32>,
    /// A remote source's mtime (whole seconds), where its server gave it
    /// with the mode: a third-party copy to a server without lightpath's
    /// extensions gives it the file there (`MFMT`), with the mode.
    pub mtime: Option<i64>,
    /// A remote source's identity (MLSD's `Unique`), where its listing
    /// gave it: hard links share it (`--verify` of a tree counts files).
    pub unique: Option<String>,
}

impl Item {
    /// A remote file `src` as its listing's entry `e` gave it, bound for `dst`.
    pub(crate) fn listed(src: Remote, dst: Location, e: &crate::session::Entry) -> Item {
        let (size, mode, mtime, unique) = (e.size, e.mode, e.mtime, e.unique.clone());
        Item { src: Location::Remote(src), dst, size, mode, mtime, unique }
    }
}

/// All the work of one copy.
#[derive(Debug, Default)]
pub struct Plan {
    /// Destination directories to create first, parents before children.
    pub dirs: Vec<Location>,
    /// Files.
    pub files: Vec<Item>,
    /// Directories beneath a source tree that could not be listed: left
    /// out (and reported as failed), as `cp -r` goes on past them.
    pub unlisted: Vec<Unlisted>,
    /// Each destination directory's source mode and mtime (seconds),
    /// where known: given to it once its files are in (`job::dirs`).
    pub dir_metas: Vec<(Location, u32, Option<i64>)>,
}

/// A directory of a source tree that could not be listed (permission
/// denied here, a refusal from a server): what it holds is not copied.
#[derive(Debug, Clone)]
pub struct Unlisted {
    /// The directory.
    pub src: Location,
    /// Where it would have gone.
    pub dst: Location,
    /// Why it could not be listed.
    pub why: String,
    /// It was listed, but the server left names out of its listing (a
    /// line break in them): `--verify` of a tree counts those files apart.
    pub partly: bool,
}

impl Unlisted {
    /// A failed result for it, with the error `e` makes of why.
    pub(crate) fn failed(self, e: impl FnOnce(String) -> ClientError) -> crate::job::FileResult {
        let (src, dst) = (describe(&self.src), describe(&self.dst));
        crate::job::FileResult { src, dst, result: Err(e(self.why)), files: Some(1) }
    }
}

impl Plan {
    /// Leave out the directory `src` (bound for `dst`), which could not be
    /// listed for `why`, with a warning.
    /// A destination directory, with its source's mode and mtime if known.
    fn add_dir(&mut self, dst: Location, meta: Option<(u32, Option<i64>)>) {
        if let Some((mode, mtime)) = meta {
            self.dir_metas.push((dst.clone(), mode, mtime));
        }
        self.dirs.push(dst);
    }

    /// `other`'s directories, files and the rest after these.
    fn extend(&mut self, other: Plan) {
        self.dirs.extend(other.dirs);
        self.files.extend(other.files);
        self.unlisted.extend(other.unlisted);
        self.dir_metas.extend(other.dir_metas);
    }

    fn leave_out(&mut self, src: Location, dst: Location, why: String) {
        tracing::warn!("{}: {why}; left out", describe(&src));
        self.unlisted.push(Unlisted { src, dst, why, partly: false });
    }

    /// Total bytes.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|i| i.size).sum()
    }
}

/// `loc`/`name`. The path is allocated at its exact length: a tree's plan
/// holds two for each of its entries, and growing a copy of the parent's
/// left up to twice the bytes in each.
pub(crate) fn join(loc: &Location, name: &[u8]) -> Location {
    // A name that would lead elsewhere (`dst/..`) is never joined: a
    // source ending so goes into `loc` ([`Location::is_dir_syntax`]).
    if matches!(name, b"." | b"..") {
        return loc.clone();
    }
    match loc {
        Location::Local(p) => {
            let mut out = PathBuf::with_capacity(p.as_os_str().len() + 1 + name.len());
            out.push(p);
            out.push(std::ffi::OsStr::from_bytes(name));
            Location::Local(out)
        }
        Location::Remote(r) => {
            let mut p = Vec::with_capacity(r.path.len() + 1 + name.len());
            p.extend_from_slice(&r.path);
            if !p.ends_with(b"/") {
                p.push(b'/');
            }
            p.extend_from_slice(name);
            Location::Remote(r.with_path(p))
        }
    }
}

pub(crate) fn base_name(loc: &Location) -> Vec<u8> {
    let raw: Vec<u8> = match loc {
        Location::Local(p) => p.as_os_str().as_bytes().to_vec(),
        Location::Remote(r) => r.path.clone(),
    };
    let trimmed: &[u8] = raw.strip_suffix(b"/").unwrap_or(&raw);
    trimmed.rsplit(|&b| b == b'/').next().unwrap_or(b"").to_vec()
}

/// Whether `dst` is a directory the sources go into.
pub(crate) fn dst_is_dir(dst: &Location, many: bool) -> bool {
    many || dst.is_dir_syntax() || matches!(dst, Location::Local(p) if p.is_dir())
}

/// Expand sources into a plan. `lister` lists remote sources; a remote tree
/// with several directories is listed by up to `extra` more sessions too.
pub async fn make_plan(
    srcs: &[Location],
    dst: &Location,
    recursive: bool,
    lister: Option<&mut Session>,
    extra: usize,
) -> Result<Plan, ClientError> {
    let mut plan = Plan::default();
    let into_dir = dst_is_dir(dst, srcs.len() > 1);
    let resolved = if into_dir { None } else { written_through(dst)? };
    let dst = resolved.as_ref().unwrap_or(dst);
    let mut lister = lister;
    for src in srcs {
        let (is_dir, size) = match src {
            Location::Local(p) => {
                not_a_stream(p, "/dev/zero")?;
                (p.is_dir(), std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
            }
            Location::Remote(r) => remote_stat(r, lister.as_deref_mut(), recursive).await?,
        };
        let target =
            if into_dir && !(is_dir && src.is_dir_syntax()) { join(dst, &base_name(src)) } else { dst.clone() };
        if !is_dir {
            let target = if into_dir { join(dst, &base_name(src)) } else { dst.clone() };
            let meta = match src {
                Location::Remote(r) => lister.as_deref().and_then(|s| s.stat_meta(&r.path)),
                Location::Local(_) => None,
            };
            let (mode, mtime) = (meta.map(|m| m.mode), meta.and_then(|m| m.mtime_secs()));
            plan.files.push(Item { src: src.clone(), dst: target, size, mode, mtime, unique: None });
            continue;
        }
        if !recursive {
            return Err(ClientError::Usage(format!("{}: is a directory (use -r)", describe(src))));
        }
        let meta = match src {
            Location::Remote(r) => {
                lister.as_deref().and_then(|s| s.stat_meta(&r.path)).map(|m| (m.mode, m.mtime_secs()))
            }
            Location::Local(p) => local_meta(p),
        };
        plan.add_dir(target.clone(), meta);
        match src {
            Location::Local(p) => walk_local(p, &target, &mut plan)?,
            Location::Remote(r) => walk_remote((r, true), &target, lister.as_deref_mut(), extra, &mut plan).await?,
        }
    }
    for f in &plan.files {
        if let Location::Local(p) = &f.dst {
            not_a_stream(p, "/dev/null")?;
        }
    }
    no_shared_targets(&plan.files)?;
    Ok(plan)
}

/// Two sources bound for one destination file would overwrite each other:
/// the second published over the first and both counted as copied, exit 0
/// (a review's find; an upload's kept partial could even be resumed from
/// the other file's bytes). Refused before anything moves, as `cp(1)`
/// refuses ("will not overwrite just-created").
fn no_shared_targets(files: &[Item]) -> Result<(), ClientError> {
    let mut seen = std::collections::HashMap::with_capacity(files.len());
    for f in files {
        let key: &[u8] = match &f.dst {
            Location::Local(p) => p.as_os_str().as_bytes(),
            Location::Remote(r) => &r.path,
        };
        if let Some(first) = seen.insert(key, &f.src) {
            let (a, b, to) = (describe(first), describe(&f.src), describe(&f.dst));
            return Err(ClientError::Usage(format!("{a} and {b} would both be copied to {to}; nothing copied")));
        }
    }
    Ok(())
}

/// A local destination file named on the command line that is a symlink
/// is written through, as `cp` does: the file it leads to (a symlink
/// that leads nowhere is refused). It was replaced by the copy: as root,
/// `cp URL /dev/stdout > out` replaced the system's `/dev/stdout` link
/// (an audit). `None`: not a symlink.
fn written_through(dst: &Location) -> Result<Option<Location>, ClientError> {
    let Location::Local(p) = dst else { return Ok(None) };
    if !std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()) {
        return Ok(None);
    }
    match std::fs::canonicalize(p) {
        Ok(real) => Ok(Some(Location::Local(real))),
        Err(e) => Err(ClientError::Usage(format!(
            "{}: a symlink that cannot be followed ({e}): not written through",
            p.display()
        ))),
    }
}

/// A local file named on the command line must be a regular file (or a
/// directory, or `special`, which the copy knows): files are read and
/// written by offset, in parallel. A pipe or a device (`/dev/stdin`,
/// `/dev/stdout`) gave an empty upload, and a download replaced
/// `/dev/stdout` with a file, both reported as copied.
fn not_a_stream(p: &std::path::Path, special: &str) -> Result<(), ClientError> {
    let Ok(m) = std::fs::metadata(p) else { return Ok(()) }; // absent: the copy says why, or makes it
    if m.is_file() || m.is_dir() || p == std::path::Path::new(special) {
        return Ok(());
    }
    Err(ClientError::Usage(format!(
        "{}: not a regular file (a pipe, a device or a socket): lightpath reads and writes files by offset, over parallel streams; copy through a regular file",
        p.display()
    )))
}

/// For messages.
pub fn describe(l: &Location) -> String {
    match l {
        Location::Local(p) => p.display().to_string(),
        Location::Remote(r) => r.display(),
    }
}

/// Whether a remote source is a directory, and its size (see [`Session::stat`]).
/// What MLST said decides. A trailing slash counts only where MLST said
/// nothing and a tree is asked for (`recursive`): the tree's listing then
/// says why it cannot be read. Without `-r`, `f/` naming a file, or a
/// missing `d/`, is fetched as a file, whose RETR the server refuses for
/// its reason ("Not a directory", "No such file"), as `cp f/ x` fails; it
/// was called a directory ("use -r").
pub(crate) async fn remote_stat(
    r: &Remote,
    lister: Option<&mut Session>,
    recursive: bool,
) -> Result<(bool, u64), ClientError> {
    let slash = r.path.ends_with(b"/");
    let Some(s) = lister else { return Ok((slash, 0)) };
    let (is_dir, size) = s.stat(&r.path).await?;
    Ok((is_dir || (slash && recursive && !s.listed(&r.path)), size))
}

/// The regular files of the tree at `src`, each with where a copy of the
/// tree to `target` puts it: what `--verify` checks of a tree copied as
/// one virtual file. Symlinks are left out (that copy makes them links
/// again); a remote tree is listed with MLSD by `lister`.
pub(crate) async fn tree_files(
    src: &Location,
    target: &Location,
    lister: Option<&mut Session>,
) -> Result<(Vec<Item>, Vec<Unlisted>), ClientError> {
    let mut plan = Plan::default();
    match src {
        Location::Local(p) => {
            walk_local(p, target, &mut plan)?;
            let regular = |p: &std::path::Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file());
            plan.files.retain(|i| matches!(&i.src, Location::Local(p) if regular(p)));
        }
        Location::Remote(r) => walk_remote((r, false), target, lister, 0, &mut plan).await?,
    }
    Ok((plan.files, plan.unlisted))
}

/// Most bytes one MLSD listing may hold (the data of one directory,
/// buffered whole before it is parsed): room for a directory of a million
/// files with the facts GCT sends (about 150 bytes a line).
pub const MAX_LISTING: u64 = 256 << 20;

/// Most bytes a path in a remote tree may have below the tree's root:
/// Linux's `PATH_MAX`, the longest path a local file can be opened by (and
/// the virtual file's limit, [`lightpath_proto::manifest::check_path`]).
/// It bounds the depth too: each level takes at least two bytes (`a/`), so
/// at most 2048 directories deep. Without it a server whose every
/// directory holds another was listed without end, each path longer than
/// the last (memory growing as the square of the depth).
pub const MAX_TREE_PATH: usize = 4096;

/// Most memory the plan of a remote tree walked file by file may take
/// ([`entry_cost`] of each file and directory). An entry holds two full
/// paths and its own copy of the server's host, user and password: about
/// 350 bytes with short names and 1 KB with 250-byte ones, so this is some
/// 2 to 6 million entries. 400 000 entries of long names in each of 8
/// directories took 3.2 GB before there was a bound; a larger tree is
/// better copied in parts (or from a lightpath server, as one virtual file).
pub const MAX_PLAN_BYTES: usize = 2 << 30;

/// A remote tree's walk, shared by the sessions listing it.
#[derive(Default)]
struct Walk {
    queue: VecDeque<(Remote, Location)>,
    /// Directories being listed now.
    busy: usize,
    plan: Plan,
    error: Option<ClientError>,
    /// The root's URL (for messages) and the length of its path (what
    /// the tree's paths have above it).
    root_name: String,
    root_len: usize,
    /// Entries planned, and their [`entry_cost`] in all.
    entries: usize,
    cost: usize,
    /// Most `cost` allowed ([`MAX_PLAN_BYTES`]).
    budget: usize,
    /// A symlink to a file is planned as the file (a copy file by file);
    /// otherwise it is left out (`--verify` of a virtual-file copy, which
    /// made it a link again).
    links_as_files: bool,
}

impl Walk {
    fn new(root: &Remote, target: &Location, links_as_files: bool) -> Walk {
        let root_len = root.path.strip_suffix(b"/").unwrap_or(&root.path).len();
        let queue = VecDeque::from([(root.clone(), target.clone())]);
        let budget = MAX_PLAN_BYTES;
        Walk { queue, root_name: root.display(), root_len, budget, links_as_files, ..Default::default() }
    }

    /// Whether `dir` is a directory beneath the tree's root (not the root).
    fn beneath_root(&self, dir: &Remote) -> bool {
        dir.path.strip_suffix(b"/").unwrap_or(&dir.path).len() > self.root_len
    }

    /// One directory waits to be listed, and nothing has failed.
    fn alone(&self) -> bool {
        self.queue.len() == 1 && self.error.is_none()
    }

    /// Count an entry at `src` (copied to `dst`) against the bounds.
    fn admit(&mut self, src: &Remote, dst: &Location) -> Result<(), ClientError> {
        let below = src.path.len().saturating_sub(self.root_len);
        self.entries += 1;
        self.cost += entry_cost(src, dst);
        let what = if below > MAX_TREE_PATH {
            let depth = src.path[self.root_len..].split(|&b| b == b'/').filter(|c| !c.is_empty()).count();
            format!(
                "a path in this tree is {below} bytes ({depth} levels) below it, more than {MAX_TREE_PATH} \
                 (the longest local path); refusing to copy this tree"
            )
        } else if self.cost > self.budget {
            format!(
                "this tree's listing passed {} entries and {} MiB of memory to plan file by file; \
                 refusing it (copy it in parts)",
                self.entries,
                self.budget >> 20
            )
        } else {
            return Ok(());
        };
        Err(ClientError::Limit { server: self.root_name.clone(), what })
    }
}

/// Memory a planned file or directory takes: the entry, with `src` and
/// `dst`, and their heap blocks (paths, host, user, password; 16 bytes of
/// allocator overhead each).
fn entry_cost(src: &Remote, dst: &Location) -> usize {
    const BLOCK: usize = 16;
    let remote = |r: &Remote| r.path.len() + r.host.len() + r.user.len() + r.pass.len() + 4 * BLOCK;
    let dst = match dst {
        Location::Local(p) => p.as_os_str().len() + BLOCK,
        Location::Remote(r) => remote(r),
    };
    std::mem::size_of::<Item>() + remote(src) + dst
}

type Shared = std::sync::Arc<(std::sync::Mutex<Walk>, tokio::sync::Notify)>;

fn walk_lock(sh: &Shared) -> std::sync::MutexGuard<'_, Walk> {
    sh.0.lock().unwrap_or_else(|e| e.into_inner())
}

/// List `root` in one MLSR where the server offers it ([`mlsr`]), else
/// with MLSD, directory by directory. One MLSD per directory is all plain
/// FTP offers (each needs its own data connection), so once several
/// directories wait to be listed, up to `extra` more control sessions list
/// them at the same time.
async fn walk_remote(
    (root, links_as_files): (&Remote, bool),
    target: &Location,
    lister: Option<&mut Session>,
    extra: usize,
    plan: &mut Plan,
) -> Result<(), ClientError> {
    let s = lister.ok_or_else(|| ClientError::Usage("no session to list the source".into()))?;
    if s.feat.mlsr && s.opts.mlsr {
        if let Some(got) = mlsr::walk(s, (root, links_as_files), target, extra).await? {
            plan.extend(got);
            return Ok(());
        }
    }
    let walk = Walk::new(root, target, links_as_files);
    let shared: Shared = std::sync::Arc::new((std::sync::Mutex::new(walk), Default::default()));
    // Alone down a chain of single directories; then as many sessions as
    // there are directories waiting, up to `1 + extra`.
    while walk_lock(&shared).alone() {
        list_one(s, &shared).await;
    }
    let helpers = extra.min(walk_lock(&shared).queue.len().saturating_sub(1));
    if helpers > 0 {
        tracing::info!(sessions = helpers + 1, "listing the remote tree over several control sessions");
    }
    let tasks: Vec<_> = (0..helpers)
        .map(|_| {
            let (sh, remote, opts) = (shared.clone(), s.remote.clone(), s.opts.clone());
            tokio::spawn(async move {
                match Session::open(&remote, opts).await {
                    Ok(mut h) => {
                        list_all(&mut h, &sh).await;
                        h.quit().await;
                    }
                    Err(e) => tracing::debug!("no extra listing session: {e}"),
                }
            })
        })
        .collect();
    list_all(s, &shared).await;
    for t in tasks {
        let _ = t.await;
    }
    let mut w = walk_lock(&shared);
    if let Some(e) = w.error.take() {
        return Err(e);
    }
    let got = std::mem::take(&mut w.plan);
    plan.extend(got);
    Ok(())
}

/// The listing of `path`, asked again (up to 3 times, a second apart)
/// when its data channel could not be set up: GCT refuses PASV with 500
/// while it has no port free (a wide tree over loopback, thousands of
/// listings' connections waiting out TIME_WAIT), and 2,652 directories of
/// one were left out as "cannot list" (a defect hunt's find). The
/// server's refusal of the listing itself is not asked again.
async fn list_again(s: &mut Session, path: &[u8]) -> Result<Vec<crate::session::Entry>, ClientError> {
    for _ in 0..3 {
        match s.list(path).await {
            Err(ClientError::Refused { cmd, .. })
                if (cmd.starts_with("PASV") || cmd.starts_with("EPSV"))
                    && !s.opts.cancel.load(std::sync::atomic::Ordering::Relaxed) =>
            {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            r => return r,
        }
    }
    s.list(path).await
}

/// Why a directory beneath a remote tree's root is left out when its
/// listing failed with `e` (`None`: the walk fails): the server refused
/// to list it (permission denied), or its name cannot be sent to this
/// server (GCT drops the bytes outside printable ASCII:
/// `ControlConn::check`).
fn unlistable(e: &ClientError) -> Option<String> {
    match e {
        ClientError::Usage(why) => Some(why.clone()),
        ClientError::Refused { code: 500.., reply, .. } => {
            // GCT's refusal spans lines (GridFTP-Errno, ...): one, here.
            let reply: Vec<&str> = reply.lines().map(str::trim).filter(|l| !l.is_empty() && *l != "End.").collect();
            Some(format!("cannot list: {}", reply.join(" ")))
        }
        _ => None,
    }
}

/// Take directories from the walk until it is done (or failed).
async fn list_all(s: &mut Session, sh: &Shared) {
    loop {
        let notified = sh.1.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let (more, done) = {
            let w = walk_lock(sh);
            (!w.queue.is_empty(), w.error.is_some() || (w.queue.is_empty() && w.busy == 0))
        };
        if done {
            return;
        }
        if more {
            list_one(s, sh).await;
        } else {
            notified.await;
        }
    }
}

/// List the next queued directory (if any) into the walk.
async fn list_one(s: &mut Session, sh: &Shared) {
    let next = {
        let mut w = walk_lock(sh);
        let n = w.queue.pop_front();
        w.busy += usize::from(n.is_some());
        n
    };
    let Some((dir, t)) = next else { return };
    let listed = list_again(s, &dir.path).await;
    let left_out = s.names_left_out;
    for (name, kind) in s.others.drain(..) {
        let shown = String::from_utf8_lossy(&name);
        tracing::warn!("skipping {}/{shown}: not a file, directory or symlink ({kind})", dir.display());
    }
    let mut w = walk_lock(sh);
    w.busy -= 1;
    match listed {
        Ok(entries) => {
            add_entries(&mut w, &dir, &t, entries);
            if left_out > 0 {
                // Copied without them, the tree would pass for whole.
                let why = format!("{left_out} name(s) with a line break left out of the server's listing, not copied");
                tracing::warn!("{}: {why}", dir.display());
                w.plan.unlisted.push(Unlisted { src: Location::Remote(dir), dst: t, why, partly: true });
            }
        }
        Err(e) => match unlistable(&e).filter(|_| w.beneath_root(&dir)) {
            Some(why) => w.plan.leave_out(Location::Remote(dir), t, why),
            None => {
                w.error.get_or_insert(e);
            }
        },
    }
    drop(w);
    sh.1.notify_waiters();
}

fn add_entries(w: &mut Walk, dir: &Remote, t: &Location, entries: Vec<crate::session::Entry>) {
    for e in entries {
        if let Err(err) = listed_name_ok(dir, &e.name) {
            w.error.get_or_insert(err);
            return;
        }
        let Location::Remote(sr) = join(&Location::Remote(dir.clone()), &e.name) else { continue };
        let dst = join(t, &e.name);
        if let Err(err) = w.admit(&sr, &dst) {
            w.error.get_or_insert(err);
            return;
        }
        if e.is_dir && e.link {
            // As a local walk does (`local_kind`): it could loop or lead
            // out of the tree.
            tracing::warn!("skipping {}: a symlink to a directory", sr.display());
        } else if e.link && !w.links_as_files {
            continue;
        } else if e.is_dir {
            w.plan.add_dir(dst.clone(), e.mode.map(|m| (m, e.mtime)));
            w.queue.push_back((sr, dst));
        } else {
            w.plan.files.push(Item::listed(sr, dst, &e));
        }
    }
}

/// A name from a server's listing is one component: with a `/` (or as `.`
/// or `..`) it would place the copy outside the directory being copied
/// into (`../../x`, `/etc/x`), so a listing with one is refused whole,
/// before anything is written. The rules are the virtual file's for a
/// path ([`lightpath_proto::manifest::check_path`]), with one component.
fn listed_name_ok(dir: &Remote, name: &[u8]) -> Result<(), ClientError> {
    use lightpath_proto::manifest;
    let why = if name.contains(&b'/') {
        Some("it has a /".to_string())
    } else {
        manifest::check_path(name).err().map(|p| p.to_string())
    };
    match why {
        None => Ok(()),
        Some(why) => Err(ClientError::Local(format!(
            "{}: the server listed the unsafe name \"{}\" ({why}); refusing to copy this tree",
            dir.display(),
            manifest::show(name)
        ))),
    }
}

/// `n` sessions, or as many as the open files limit lets hold a data
/// connection each (said).
pub(crate) fn sessions_within_files(n: usize) -> usize {
    let limit = lightpath_sys::privs::open_files_limit();
    let fit = lightpath_plan::sessions_within_files(n, limit);
    if fit < n {
        let l = limit.unwrap_or_default();
        tracing::warn!("{fit} sessions at once, not {n}: the limit of {l} open files allows no more (ulimit -n)");
    }
    fit
}

/// Streams for transfers at `rtt_us` whose data connections this process
/// holds: [`wanted_streams`], held to the session's share of the open
/// files it may hold ([`lightpath_plan::streams_within_files`]; said once).
pub(crate) fn stream_count(opts: &crate::SessionOpts, rtt_us: u64) -> u32 {
    static SAID: std::sync::Once = std::sync::Once::new();
    let n = wanted_streams(opts, rtt_us);
    let limit = lightpath_sys::privs::open_files_limit();
    let fit = lightpath_plan::streams_within_files(n, opts.sessions, limit);
    if fit < n {
        SAID.call_once(|| {
            tracing::warn!(
                "{fit} streams a session, not {n}: the limit of {} open files allows no more (ulimit -n)",
                limit.unwrap_or_default()
            );
        });
    }
    fit
}

/// Streams for transfers at `rtt_us`: as asked, or enough for the
/// session's share of the target rate with the kernel's largest window,
/// held to its share of the job's streams ([`lightpath_plan::session_share`]).
pub(crate) fn wanted_streams(opts: &crate::SessionOpts, rtt_us: u64) -> u32 {
    if opts.streams > 0 {
        return opts.streams;
    }
    let (rmem, wmem) = lightpath_sys::file::tcp_window_limits();
    let window = rmem.unwrap_or(4 << 20).min(wmem.unwrap_or(4 << 20));
    let min = lightpath_plan::min_streams_for_rtt(rtt_us);
    let n = lightpath_plan::auto_streams(rtt_us, window, opts.target_share(), min, lightpath_plan::MAX_AUTO_STREAMS);
    let n = lightpath_plan::session_share(n, opts.sessions);
    tracing::debug!(rtt_us, window, n, sessions = opts.sessions, "stream count");
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_local_walk_copies_file_symlinks_and_skips_directory_symlinks_and_dangling_ones() {
        let d = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let root = d.path().join("t");
        std::fs::create_dir_all(root.join("sub")).expect("mkdir");
        std::fs::write(root.join("sub/f"), b"12345").expect("write");
        symlink("sub/f", root.join("link-to-file")).expect("symlink");
        symlink("..", root.join("sub/loop")).expect("symlink");
        symlink("/", root.join("out")).expect("symlink");
        symlink("nowhere", root.join("dangling")).expect("symlink");
        let mut plan = Plan::default();
        walk_local(&root, &Location::Local("/dst".into()), &mut plan).expect("walk");
        let dst = |l: &Location| describe(l);
        assert_eq!(plan.dirs.iter().map(dst).collect::<Vec<_>>(), vec!["/dst/sub"]);
        let files: Vec<(String, u64)> = plan.files.iter().map(|i| (dst(&i.dst), i.size)).collect();
        assert_eq!(files, vec![("/dst/link-to-file".into(), 5), ("/dst/sub/f".into(), 5)]);
    }

    #[test]
    fn listed_names_with_a_slash_or_dots_are_refused() {
        let Ok(Location::Remote(dir)) = Location::parse("ftp://h/d/") else { panic!("url") };
        for bad in [&b"../x"[..], b"/etc/x", b"a/b", b"..", b".", b"", b"a\0b"] {
            assert!(listed_name_ok(&dir, bad).is_err(), "{bad:?}");
        }
        for good in [&b"a b"[..], b"..x", b"\xff\xfe", b"a\nb"] {
            assert!(listed_name_ok(&dir, good).is_ok(), "{good:?}");
        }
    }

    fn entries(n: usize) -> Vec<crate::session::Entry> {
        let entry = |i: usize| crate::session::Entry {
            name: format!("f{i}").into_bytes(),
            is_dir: false,
            size: 1,
            link: false,
            unresolved: false,
            mode: None,
            mtime: None,
            unique: None,
        };
        (0..n).map(entry).collect()
    }

    /// A tree whose plan would pass the memory budget is refused with the
    /// tree named, and an entry's cost counts its paths.
    #[test]
    fn a_remote_walk_stops_at_its_memory_budget() {
        let Ok(Location::Remote(root)) = Location::parse("ftp://h/d/") else { panic!("url") };
        let target = Location::Local("/dst".into());
        let mut w = Walk::new(&root, &target, true);
        add_entries(&mut w, &root, &target, entries(1000));
        assert!(w.error.is_none() && w.plan.files.len() == 1000);
        assert!(w.cost > 1000 * std::mem::size_of::<Item>(), "{}", w.cost);
        let mut w = Walk::new(&root, &target, true);
        w.budget = 100 * entry_cost(&root, &target);
        add_entries(&mut w, &root, &target, entries(1000));
        let err = w.error.expect("refused").to_string();
        assert!(err.starts_with("ftp://h:2811/d/: ") && err.contains("entries"), "{err}");
        assert!(w.plan.files.len() < 100, "{}", w.plan.files.len());
    }

    /// A path longer than [`MAX_TREE_PATH`] below the root is refused.
    #[test]
    fn a_remote_walk_stops_at_the_longest_path() {
        let Ok(Location::Remote(root)) = Location::parse("ftp://h/d") else { panic!("url") };
        let target = Location::Local("/dst".into());
        let deep = root.with_path([&b"/d"[..], &b"/aaaa".repeat(MAX_TREE_PATH / 5 - 1)].concat());
        let mut w = Walk::new(&root, &target, true);
        add_entries(&mut w, &deep, &target, entries(1));
        assert!(w.error.is_none(), "{:?}", w.error);
        let deeper = deep.with_path([&deep.path[..], b"/aaaa"].concat());
        add_entries(&mut w, &deeper, &target, entries(1));
        let err = w.error.expect("refused").to_string();
        assert!(err.contains("levels) below it") && err.contains("820 levels"), "{err}");
    }
}

//! The sender: walk a tree in a background thread, publish manifest chunks
//! and the data they cover as the walk proceeds, hand out blocks.

use super::reader::{PackReader, ReadCache};
use super::{join, stat_ns, HeldCheck, VfileError};
use lightpath_proto::manifest::{show, Encoder, Entry, Kind, Limits, MODE_MASK};
use lightpath_proto::unreadable::Unreadables;
use lightpath_sys::root::{FileType, Root, Stat};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::Poll;
use std::thread::JoinHandle;
use std::time::Duration;

/// How to pack.
#[derive(Debug, Clone)]
pub struct PackOptions {
    /// Files up to this size are read whole (and cached until fully sent);
    /// blocks are cut so that they do not split such a file when possible.
    pub small_file: u64,
    /// Publish a manifest chunk once it holds this many bytes...
    pub chunk_bytes: usize,
    /// ...or once the data it covers reaches this many bytes, or at once
    /// when a sender is waiting for data.
    pub chunk_data: u64,
    /// The walk pauses while this many manifest bytes wait to be taken.
    pub max_queued: usize,
    /// Memory for cached small files.
    pub cache_bytes: usize,
    /// Open large files kept for ranged reads.
    pub open_files: usize,
    /// Limits of the manifest (the receiver's must be at least as large).
    pub limits: Limits,
    /// A resumed tree (`OPTS VRET After=`): the receiver holds every
    /// regular file up to this manifest path in the walk's order, so those
    /// are left out (a file with hard links still goes: its other names
    /// need it in the manifest). Directories and symlinks go anyway.
    pub after: Option<Vec<u8>>,
    /// With `after`, a resume across runs: the receiver's check of the
    /// files it holds ([`super::held_check`]). The walk computes its own
    /// over its files up to `after` and fails with
    /// [`VfileError::HeldChanged`] when they differ, before any file's
    /// data goes.
    pub check: Option<u64>,
    /// Regular files left out by manifest path, as unreadable ones are
    /// (named in [`PackStats::unreadable`]): files that changed while
    /// being read on earlier tries (`OPTS VRET Skip=`).
    pub skip: Vec<Vec<u8>>,
}

impl Default for PackOptions {
    fn default() -> Self {
        PackOptions {
            small_file: 256 << 10,
            chunk_bytes: 64 << 10,
            chunk_data: 8 << 20,
            max_queued: 16 << 20,
            cache_bytes: 32 << 20,
            open_files: 64,
            limits: Limits::default(),
            after: None,
            check: None,
            skip: Vec::new(),
        }
    }
}

/// What a walk found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackStats {
    /// Regular files (hard links not counted).
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Symlinks.
    pub symlinks: u64,
    /// Extra names of files already packed.
    pub hardlinks: u64,
    /// FIFOs, sockets and devices left out (each with a warning).
    pub skipped: u64,
    /// Regular files left out as the receiver holds them ([`PackOptions::after`]).
    pub held: u64,
    /// Length of the virtual file.
    pub bytes: u64,
    /// Files this process may not open and directories it may not list
    /// (permission denied), left out: each with a warning, and named in
    /// the tree's final reply. A directory's own entry goes (it arrives
    /// empty).
    pub unreadable: Unreadables,
}

/// How manifest paths `a` and `b` follow each other in the walk: depth
/// first, each directory's entries in byte order (a directory before what
/// it holds), so component by component.
pub fn walk_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    a.split(|&c| c == b'/').cmp(b.split(|&c| c == b'/'))
}

/// A published run of the virtual file: one regular file.
#[derive(Debug, Clone)]
pub(crate) struct Extent {
    pub start: u64,
    pub size: u64,
    /// Path beneath the packing root (not the manifest name).
    pub src: Arc<[u8]>,
    /// The manifest name.
    pub name: Arc<[u8]>,
    pub dev: u64,
    pub ino: u64,
    /// The mtime the walk saw: the file read must still have it.
    pub mtime_ns: i64,
}

impl Extent {
    pub fn end(&self) -> u64 {
        self.start + self.size
    }

    /// The error saying this file changed since the walk.
    pub fn changed(&self) -> VfileError {
        VfileError::Changed(self.name.to_vec())
    }
}

#[derive(Debug, Default)]
pub(crate) struct State {
    /// Published extents, in offset order.
    pub extents: Vec<Extent>,
    /// End of the published data.
    pub published: u64,
    /// End of the data covered by the manifest chunks taken so far: only
    /// data below it is handed out (see [`Pack::next_item`]).
    released: u64,
    /// Offset of the next manifest chunk in the manifest stream.
    manifest_at: u64,
    cursor: u64,
    /// Published chunks, each with the end of the data it covers.
    chunks: VecDeque<(Vec<u8>, u64)>,
    queued: usize,
    done: bool,
    error: Option<VfileError>,
    stats: PackStats,
}

impl State {
    /// The next block from the cursor, at most `max` bytes, cut before a
    /// small file rather than through it.
    fn cut(&mut self, max: u64, small: u64) -> (u64, u64) {
        let start = self.cursor;
        let mut end = start.saturating_add(max.max(1)).min(self.released);
        if end < self.released {
            let i = self.extents.partition_point(|e| e.end() <= end);
            if let Some(x) = self.extents.get(i).filter(|x| x.start > start && x.start < end && x.size <= small) {
                end = x.start;
            }
        }
        self.cursor = end;
        (start, end - start)
    }

    /// Take the next manifest chunk: its offset in the manifest stream and
    /// bytes; the data it covers is released.
    fn pop_chunk(&mut self) -> Option<(u64, Vec<u8>)> {
        let (c, end) = self.chunks.pop_front()?;
        let at = self.manifest_at;
        self.queued -= c.len();
        self.manifest_at += c.len() as u64;
        self.released = end;
        Some((at, c))
    }

    /// Whether a taker has something: a failure, a manifest chunk, data
    /// released by a chunk taken, or the end ([`Pack::try_next_item`]'s
    /// answers other than `Pending`, cancellation aside).
    fn has_news(&self) -> bool {
        self.error.is_some() || !self.chunks.is_empty() || self.cursor < self.released || self.done
    }

    /// Record why the pack failed: the first error stays, except that a
    /// specific one (a file that changed or could not be read) replaces
    /// [`VfileError::Aborted`], which only says that the walk was stopped.
    fn fail(&mut self, e: VfileError) {
        if matches!(self.error, None | Some(VfileError::Aborted)) {
            self.error = Some(e);
        }
    }
}

/// One thing for a sender to put on its stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackItem {
    /// A manifest chunk at offset `at` of the manifest stream.
    Manifest {
        /// Offset in the manifest stream.
        at: u64,
        /// The chunk.
        bytes: Vec<u8>,
    },
    /// A block of the virtual file.
    Data {
        /// Offset in the virtual file.
        offset: u64,
        /// Length.
        len: u64,
    },
}

pub(crate) struct Shared {
    pub root: Arc<Root>,
    pub opts: PackOptions,
    st: Mutex<State>,
    cv: Condvar,
    hungry: AtomicBool,
    cancelled: AtomicBool,
    pub cache: ReadCache,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn wait<'a>(&self, g: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.cv.wait(g).unwrap_or_else(|e| e.into_inner())
    }

    /// Fail the pack with `e` (see [`State::fail`]) and stop the walk.
    pub fn fail(&self, e: VfileError) {
        self.cancelled.store(true, Ordering::Relaxed);
        self.lock().fail(e);
        self.cv.notify_all();
    }
}

/// A tree being packed. Dropping it stops the walk.
pub struct Pack {
    sh: Arc<Shared>,
    walker: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Pack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pack").field("root", &self.sh.root.path()).finish_non_exhaustive()
    }
}

/// Start packing `items` (paths beneath `root`) in a background thread.
/// Each item appears under its last component (`a/b` as `b`, a directory
/// with everything beneath it); the empty path packs the root's contents.
/// FIFOs, sockets and devices are skipped with a warning; symlinks are
/// packed as links, never followed; extra names of a file (same device and
/// inode) become hard links.
pub fn pack(root: Arc<Root>, items: Vec<Vec<u8>>, opts: PackOptions) -> Result<Pack, VfileError> {
    let cache = ReadCache::new(opts.cache_bytes, opts.open_files);
    let sh = Arc::new(Shared {
        root,
        opts,
        st: Mutex::new(State::default()),
        cv: Condvar::new(),
        hungry: AtomicBool::new(false),
        cancelled: AtomicBool::new(false),
        cache,
    });
    let w = sh.clone();
    let walker = std::thread::Builder::new()
        .name("lp-pack-walk".into())
        .spawn(move || {
            let r = Walker::new(&w).run(items);
            let mut st = w.lock();
            match r {
                Ok(stats) => (st.done, st.stats) = (true, stats),
                Err(e) => st.fail(e),
            }
            w.cv.notify_all();
        })
        .map_err(|e| VfileError::io("starting the walk of", sh.root.path().as_os_str().as_encoded_bytes(), e))?;
    Ok(Pack { sh, walker: Some(walker) })
}

impl Pack {
    /// The next thing to send, waiting for the walk; `None` when all of the
    /// manifest and the data were handed out. Thread-safe.
    ///
    /// A manifest chunk always comes before the data it covers, and data is
    /// handed out only once its chunk was taken. A sender that writes each
    /// item before taking the next therefore never puts a chunk behind data
    /// that needs it on the same stream, and receivers that wait for
    /// missing entries cannot wait on each other (see `vfile_chan`).
    pub fn next_item(&self, max: u64) -> Result<Option<PackItem>, VfileError> {
        loop {
            if let Poll::Ready(item) = self.try_next_item(max)? {
                return Ok(item);
            }
            self.wait_ready(Duration::from_secs(1));
        }
    }

    /// [`Pack::next_item`] without the wait: `Pending` while the walk has
    /// published nothing more (it is told to publish what it has at once).
    /// The engine's shared disk threads call this: none of them may sit
    /// waiting on one tree's walk while other sessions' work queues.
    pub fn try_next_item(&self, max: u64) -> Result<Poll<Option<PackItem>>, VfileError> {
        let mut st = self.sh.lock();
        self.check(&st)?;
        if let Some((at, bytes)) = st.pop_chunk() {
            self.sh.cv.notify_all();
            return Ok(Poll::Ready(Some(PackItem::Manifest { at, bytes })));
        }
        if st.cursor < st.released {
            let (offset, len) = st.cut(max, self.sh.opts.small_file);
            return Ok(Poll::Ready(Some(PackItem::Data { offset, len })));
        }
        if st.done {
            return Ok(Poll::Ready(None));
        }
        self.sh.hungry.store(true, Ordering::Relaxed);
        Ok(Poll::Pending)
    }

    /// Wait, at most `timeout`, until [`Pack::try_next_item`] may have
    /// something: a chunk or data published, the end, or a failure.
    pub fn wait_ready(&self, timeout: Duration) {
        let sh = &self.sh;
        let waiting = |st: &mut State| !st.has_news() && !sh.cancelled.load(Ordering::Relaxed);
        let mut g = sh.lock();
        if waiting(&mut g) {
            sh.hungry.store(true, Ordering::Relaxed);
            let _ = sh.cv.wait_timeout_while(g, timeout, waiting).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn check(&self, st: &State) -> Result<(), VfileError> {
        if let Some(e) = &st.error {
            return Err(e.clone());
        }
        if self.sh.cancelled.load(Ordering::Relaxed) {
            return Err(VfileError::Aborted);
        }
        Ok(())
    }

    /// A reader of the virtual file (any thread, any published range).
    pub fn reader(&self) -> PackReader {
        PackReader::new(self.sh.clone())
    }

    /// Length of the virtual file once the walk has finished.
    pub fn total(&self) -> Option<u64> {
        let st = self.sh.lock();
        st.done.then_some(st.published)
    }

    /// Stop the walk; waiting calls return [`VfileError::Aborted`], or the
    /// error that failed the pack before (a read of a file that changed).
    pub fn cancel(&self) {
        self.sh.cancelled.store(true, Ordering::Relaxed);
        let mut st = self.sh.lock();
        if !st.done {
            st.fail(VfileError::Aborted);
        }
        self.sh.cv.notify_all();
    }

    /// Wait for the walk to end; what it found, or why the pack failed
    /// (the walk's error, or the first failed read of a [`PackReader`]).
    pub fn wait(mut self) -> Result<PackStats, VfileError> {
        if let Some(h) = self.walker.take() {
            let _ = h.join();
        }
        let st = self.sh.lock();
        match &st.error {
            Some(e) => Err(e.clone()),
            None => Ok(st.stats.clone()),
        }
    }
}

impl Drop for Pack {
    fn drop(&mut self) {
        if let Some(h) = self.walker.take() {
            self.cancel();
            let _ = h.join();
        }
    }
}

/// The fields of a `stat` we use (their types differ between architectures).
#[derive(Debug, Clone, Copy)]
pub(super) struct Meta {
    pub ft: FileType,
    pub mode: u32,
    pub mtime_ns: i64,
    pub size: u64,
    pub dev: u64,
    pub ino: u64,
    pub nlink: u64,
}

#[allow(clippy::unnecessary_cast)]
pub(super) fn meta(st: &Stat) -> Meta {
    Meta {
        ft: FileType::from_raw_mode(st.st_mode as _),
        mode: st.st_mode as u32 & MODE_MASK,
        mtime_ns: stat_ns(st.st_mtime as i64, st.st_mtime_nsec as i64),
        size: st.st_size as u64,
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
        nlink: st.st_nlink as u64,
    }
}

/// A path to visit: where it is beneath the root, and its manifest name.
struct Node {
    src: Vec<u8>,
    name: Vec<u8>,
    meta: Meta,
    /// Whether this process may read it (list it, a directory).
    readable: bool,
}

struct Walker<'a> {
    sh: &'a Shared,
    enc: Encoder,
    chunk: Vec<u8>,
    pending: Vec<Extent>,
    pending_data: u64,
    links: HashMap<(u64, u64), Vec<u8>>,
    /// Files with several names left out by one of them ([`Walker::skipped`]).
    skipped_links: std::collections::HashSet<(u64, u64)>,
    stats: PackStats,
    /// The files left out so far, while [`PackOptions::check`] is to be
    /// compared (`None` once it was).
    held_check: Option<HeldCheck>,
}

impl<'a> Walker<'a> {
    fn new(sh: &'a Shared) -> Self {
        Walker {
            sh,
            enc: Encoder::new(sh.opts.limits),
            chunk: Vec::new(),
            pending: Vec::new(),
            pending_data: 0,
            links: HashMap::new(),
            skipped_links: Default::default(),
            stats: PackStats::default(),
            held_check: sh.opts.check.and(sh.opts.after.as_ref()).map(|_| HeldCheck::default()),
        }
    }

    fn run(mut self, items: Vec<Vec<u8>>) -> Result<PackStats, VfileError> {
        for item in items {
            self.walk_item(item)?;
        }
        self.compare_held()?;
        self.enc.finish(&mut self.chunk)?;
        self.publish()?;
        self.stats.bytes = self.enc.next_offset();
        Ok(self.stats)
    }

    fn walk_item(&mut self, mut src: Vec<u8>) -> Result<(), VfileError> {
        while src.len() > 1 && src.ends_with(b"/") {
            src.pop();
        }
        let mut stack = Vec::new();
        if src.is_empty() {
            // The root's own contents: one that may not be listed fails.
            let list = self.sh.root.read_dir_readable(b"").map_err(|e| VfileError::io("listing", b".", e))?;
            push_list(&mut stack, b"", b"", list);
        } else {
            let st = self.sh.root.lstat(&src).map_err(|e| VfileError::io("reading", &src, e))?;
            let name = src.rsplit(|&b| b == b'/').next().unwrap_or_default().to_vec();
            // An item named by the client: one that may not be read fails.
            stack.push(Node { src, name, meta: meta(&st), readable: true });
        }
        while let Some(n) = stack.pop() {
            if self.sh.cancelled.load(Ordering::Relaxed) {
                return Err(VfileError::Aborted);
            }
            if self.visit(&n)? {
                self.push_listable(&mut stack, &n)?;
            }
        }
        Ok(())
    }

    /// Queue what the directory `n` holds (its entry went): one this
    /// process may not list (read and search) is left empty, with a
    /// warning.
    fn push_listable(&mut self, stack: &mut Vec<Node>, n: &Node) -> Result<(), VfileError> {
        if !n.readable {
            self.left_out(n, &format!("cannot list: {}", lightpath_sys::root::denied()));
            return Ok(());
        }
        match self.sh.root.read_dir_readable(&n.src) {
            Ok(list) => push_list(stack, &n.src, &n.name, list),
            Err(e) if is_denied(&e) => self.left_out(n, &format!("cannot list: {e}")),
            Err(e) => return Err(VfileError::io("listing", &n.src, e)),
        }
        Ok(())
    }

    /// Whether the regular file `n` is one this process may not read (as
    /// its listing found: [`Root::read_dir_readable`]): it is left out,
    /// with a warning saying why opening it fails. Should a file found
    /// readable fail to open later, the transfer fails.
    fn unreadable(&mut self, n: &Node) -> bool {
        match refused(&self.sh.root, &n.src, n.readable) {
            Some(e) => {
                self.left_out(n, &format!("cannot open: {e}"));
                true
            }
            None if n.meta.size == 0 && self.pseudo(n) => {
                self.left_out(n, crate::io::PSEUDO_FILE);
                true
            }
            None => false,
        }
    }

    /// Whether the empty-looking file `n` holds data ([`crate::io::pseudo_file`]).
    fn pseudo(&self, n: &Node) -> bool {
        let opened = self.sh.root.open_read(&n.src);
        opened.and_then(|f| crate::io::pseudo_file(&f, 0)).unwrap_or(false)
    }

    fn left_out(&mut self, n: &Node, why: &str) {
        tracing::warn!(path = %show(&n.src), "{why}; left out of the tree");
        self.stats.unreadable.add(&n.name, why);
    }

    /// Emit the entry for `n`; whether it is a directory to descend into.
    /// One whose path is longer than a manifest holds is left out, with
    /// what is beneath it (one such path failed the whole tree, nothing
    /// copied: a defect hunt's find).
    fn visit(&mut self, n: &Node) -> Result<bool, VfileError> {
        if n.name.len() > lightpath_proto::manifest::MAX_PATH {
            let max = lightpath_proto::manifest::MAX_PATH;
            self.left_out(n, &format!("its path is longer than {max} bytes, the most a tree's manifest holds"));
            return Ok(false);
        }
        if self.held_check.is_some() && !self.held(&n.name) {
            self.compare_held()?;
        }
        let kind = match n.meta.ft {
            FileType::Directory => {
                self.stats.dirs += 1;
                Kind::Dir
            }
            FileType::RegularFile => return self.file(n).map(|()| false),
            FileType::Symlink => {
                // Left out as an unreadable file is (SSHFS refuses `../`
                // links): it failed the whole tree (a defect hunt's find).
                let target = match self.sh.root.read_link(&n.src) {
                    Ok(t) => t,
                    Err(e) => {
                        self.left_out(n, &format!("cannot read the link: {e}"));
                        return Ok(false);
                    }
                };
                self.stats.symlinks += 1;
                Kind::Symlink { target }
            }
            other => {
                tracing::warn!(path = %show(&n.src), kind = ?other, "skipping special file");
                self.stats.skipped += 1;
                return Ok(false);
            }
        };
        let dir = kind == Kind::Dir;
        self.emit(Entry { path: n.name.clone(), kind, mode: n.meta.mode, mtime_ns: n.meta.mtime_ns }, None)?;
        Ok(dir)
    }

    fn file(&mut self, n: &Node) -> Result<(), VfileError> {
        if self.skipped(n) {
            self.left_out(n, SKIPPED);
            return Ok(());
        }
        if self.unreadable(n) {
            return Ok(());
        }
        let m = n.meta;
        let (mode, mtime_ns) = (m.mode, m.mtime_ns);
        if m.nlink > 1 {
            if let Some(first) = self.links.get(&(m.dev, m.ino)) {
                self.stats.hardlinks += 1;
                let kind = Kind::HardLink { target: first.clone() };
                return self.emit(Entry { path: n.name.clone(), kind, mode, mtime_ns }, None);
            }
            self.links.insert((m.dev, m.ino), n.name.clone());
        }
        if self.held(&n.name) {
            if let Some(c) = self.held_check.as_mut() {
                c.add(&n.name, m.size, m.mtime_ns, m.mode);
            }
            if m.nlink <= 1 {
                self.stats.held += 1;
                return Ok(());
            }
        }
        self.stats.files += 1;
        let offset = self.enc.next_offset();
        let (src, name) = (n.src.as_slice().into(), n.name.as_slice().into());
        let x = Extent { start: offset, size: m.size, src, name, dev: m.dev, ino: m.ino, mtime_ns: m.mtime_ns };
        let kind = Kind::File { size: m.size, offset };
        self.emit(Entry { path: n.name.clone(), kind, mode, mtime_ns }, Some(x))
    }

    /// Whether the file `n` is left out ([`PackOptions::skip`]): it is
    /// named there, or it is another name of a file named there (which
    /// changes with it; a file's first name in the walk is the one a
    /// change is reported under).
    fn skipped(&mut self, n: &Node) -> bool {
        let inode = (n.meta.dev, n.meta.ino);
        if self.sh.opts.skip.contains(&n.name) {
            if n.meta.nlink > 1 {
                self.skipped_links.insert(inode);
            }
            return true;
        }
        n.meta.nlink > 1 && self.skipped_links.contains(&inode)
    }

    /// Whether the receiver holds the file `name` from an earlier try.
    fn held(&self, name: &[u8]) -> bool {
        self.sh.opts.after.as_deref().is_some_and(|a| walk_order(name, a) != std::cmp::Ordering::Greater)
    }

    /// Once the walk passed the files left out: compare their check with
    /// the receiver's ([`PackOptions::check`]), if it is still to be done.
    fn compare_held(&mut self) -> Result<(), VfileError> {
        let Some(c) = self.held_check.take() else { return Ok(()) };
        let after = self.sh.opts.after.as_deref().unwrap_or_default();
        if Some(c.value()) != self.sh.opts.check {
            return Err(VfileError::HeldChanged(show(after)));
        }
        tracing::debug!(held = self.stats.held, "the receiver holds the files up to {} unchanged", show(after));
        Ok(())
    }

    fn emit(&mut self, e: Entry, x: Option<Extent>) -> Result<(), VfileError> {
        self.enc.entry(&e, &mut self.chunk)?;
        if let Some(x) = x {
            self.pending_data += x.size;
            self.pending.push(x);
        }
        let o = &self.sh.opts;
        if self.chunk.len() >= o.chunk_bytes
            || self.pending_data >= o.chunk_data
            || self.sh.hungry.load(Ordering::Relaxed)
        {
            self.publish()?;
        }
        Ok(())
    }

    /// Hand the current chunk and the data it covers to the senders.
    fn publish(&mut self) -> Result<(), VfileError> {
        let sh = self.sh;
        let mut st = sh.lock();
        while st.queued >= sh.opts.max_queued && !sh.cancelled.load(Ordering::Relaxed) {
            st = sh.wait(st);
        }
        if sh.cancelled.load(Ordering::Relaxed) {
            return Err(VfileError::Aborted);
        }
        st.extents.append(&mut self.pending);
        st.published = self.enc.next_offset();
        if !self.chunk.is_empty() {
            st.queued += self.chunk.len();
            let covers = st.published;
            st.chunks.push_back((std::mem::take(&mut self.chunk), covers));
        }
        self.pending_data = 0;
        sh.hungry.store(false, Ordering::Relaxed);
        sh.cv.notify_all();
        Ok(())
    }
}

/// Queue the entries `list` of the directory `src` (manifest name `name`)
/// so that they pop in name order.
/// A receiver's temporary file (`.NAME.lpPID-TOKEN-N.part`, named where
/// the file system has no `O_TMPFILE`) is an upload in progress, or what
/// a killed one left: never part of a tree. Each is skipped with a
/// warning (they went silently, and a file so named was lost unsaid).
fn push_list(stack: &mut Vec<Node>, src: &[u8], name: &[u8], list: Vec<(Vec<u8>, Stat, bool)>) {
    for (child, st, readable) in list.into_iter().rev() {
        let src = join(src, &child);
        if lightpath_sys::root::is_temp_name(&child) {
            tracing::warn!(path = %show(&src), "skipping a temporary file of lightpath's (.NAME.lpPID-TOKEN-N.part)");
            continue;
        }
        stack.push(Node { src, name: join(name, &child), meta: meta(&st), readable });
    }
}

/// Why a file of [`PackOptions::skip`] is left out.
pub const SKIPPED: &str = "changed while being read, on two tries";

/// Whether `e` says this process may not do what it tried.
pub(super) fn is_denied(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::PermissionDenied
}

/// Why the regular file `src` is left out of a tree, if it is: its
/// listing found it not `readable` ([`Root::read_dir_readable`]) and
/// opening it fails too. The walk and a source's resume check
/// ([`super::source_check`]) both judge by this, so they agree.
pub(super) fn refused(root: &Root, src: &[u8], readable: bool) -> Option<std::io::Error> {
    if readable {
        return None;
    }
    root.open_read(src).err()
}

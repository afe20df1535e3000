//! The receiver: manifest bytes and data blocks in any order, from any
//! thread; the tree rebuilt beneath a [`Root`].

use super::chunk::{Chunk, Spares};
use super::writer::{self, FileSlot, Piece, Pool, WorkCtx, APPLY_MODE};
use super::{split, split_ns, VfileError};
use crate::io::Sink;
use crate::progress::HeldSoFar;
use lightpath_proto::manifest::{show, Decoder, Entry, Kind, Limits};
use lightpath_proto::RangeSet;
use lightpath_sys::root::Root;
use std::collections::BTreeMap;
use std::fs::Permissions;
use std::io;
use std::ops::Range;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Data parked by every tree of this process at once (see
/// [`UnpackOptions::park_limit`]): a peer can send a tree's data before its
/// manifest, and twenty sessions doing so would otherwise hold twenty
/// times one tree's limit.
pub const PARK_LIMIT_ALL: u64 = 1 << 30;

/// Bytes parked now, by all trees.
static PARKED_ALL: AtomicU64 = AtomicU64::new(0);

/// What holding one parked block costs beyond its bytes (its buffer's
/// header, an `Arc`, a map entry: about 160 bytes), charged against the
/// park limits with them: a peer that sent 1-byte blocks would otherwise
/// hold 160 bytes of memory for each byte the limit counted (80 GiB
/// under the 512 MiB limit; a review finding).
const PARKED_BLOCK_COST: u64 = 256;

/// The bytes one tree holds parked, counted in [`PARKED_ALL`] too for as
/// long as it holds them.
#[derive(Debug, Default)]
struct Parked(u64);

impl Parked {
    fn add(&mut self, n: u64) {
        self.0 += n;
        PARKED_ALL.fetch_add(n, Ordering::Relaxed);
    }

    fn sub(&mut self, n: u64) {
        self.0 -= n;
        PARKED_ALL.fetch_sub(n, Ordering::Relaxed);
    }
}

impl Drop for Parked {
    /// What is still parked leaves the process-wide count with the tree.
    fn drop(&mut self) {
        PARKED_ALL.fetch_sub(self.0, Ordering::Relaxed);
    }
}

/// Pieces this large or larger are written by the thread that received
/// them, from its buffer, when their entries are known: copying them for
/// the writer threads (into fresh heap pages) cost as much CPU as the
/// write itself on loopback. Smaller pieces go to the writers, which
/// create many small files in parallel.
const HERE_MIN: usize = 64 << 10;

/// A file's part of a block: the file, the offset in it, the range of the block.
type Span = (Arc<FileSlot>, u64, Range<usize>);

/// Where a received block goes.
enum Placed {
    /// To the writer threads (copied; the unknown part parked).
    Queue(Vec<Piece>),
    /// Written at once from the caller's buffer.
    Here(Vec<Span>),
}

/// What a broken try of a tree left complete ([`Unpacker::give_up`]).
pub use lightpath_proto::held::Held;

/// How to unpack.
#[derive(Debug, Clone)]
pub struct UnpackOptions {
    /// Writer threads (creates, writes, renames): one set per process
    /// (`lp-unpack-N`), shared by every unpacker; the first unpacker of
    /// the process fixes their number and later values are ignored.
    pub workers: usize,
    /// This unpacker's jobs queued or being written before the threads
    /// feeding it wait (so one tree cannot fill the shared queue).
    pub queue: usize,
    /// Most pieces (parts of files) in one job.
    pub job_pieces: usize,
    /// Most data bytes in one job (a job may exceed it by one piece).
    pub job_bytes: usize,
    /// Most bytes held for ranges whose manifest entries have not arrived;
    /// a block that would go over it fails the transfer at once. Nothing
    /// waits for entries: blocks arrive on the engine's shared disk
    /// threads, which write large pieces themselves and queue small ones
    /// for the writer threads (shared by every tree, see
    /// [`UnpackOptions::workers`]). A thread waiting there for a manifest
    /// chunk could hold the very thread (or the read of the very stream)
    /// that would deliver it, and stall the other trees.
    pub park_limit: u64,
    /// Limits of the manifest decoder.
    pub limits: Limits,
    /// Where to record what is held complete so far, as the tree arrives
    /// (what [`Unpacker::give_up`] would say, without waiting for the
    /// writers): updated as blocks come in.
    pub report: Option<Arc<HeldSoFar>>,
}

impl Default for UnpackOptions {
    fn default() -> Self {
        UnpackOptions {
            workers: 8,
            queue: 64,
            job_pieces: 32,
            job_bytes: 256 << 10,
            park_limit: 512 << 20,
            limits: Limits::default(),
            report: None,
        }
    }
}

/// What was rebuilt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnpackStats {
    /// Regular files.
    pub files: u64,
    /// Entries left out: what stood at their names at the destination
    /// cannot be replaced by them (a directory where a file comes, a file
    /// where a directory does), and why.
    pub refused: lightpath_proto::unreadable::Unreadables,
    /// Directories.
    pub dirs: u64,
    /// Symlinks.
    pub symlinks: u64,
    /// Hard links.
    pub hardlinks: u64,
    /// Data bytes (length of the virtual file).
    pub bytes: u64,
    /// Most data that was held at once ahead of its manifest entries.
    pub parked_peak: u64,
    /// Manifest bytes that came more than once (copies sent on a second
    /// stream, see `vfile_chan`), dropped; set by the channel's sink.
    pub manifest_repeated: u64,
}

#[derive(Debug, Default)]
struct State {
    decoder: Decoder,
    /// Regular files in offset order.
    files: Vec<Arc<FileSlot>>,
    /// End of the data described by the entries so far.
    known_end: u64,
    /// Length of the virtual file, once the end record is in.
    total: Option<u64>,
    claimed: RangeSet,
    /// Data ahead of its entries: virtual offset -> bytes.
    parked: BTreeMap<u64, (Arc<Chunk>, Range<usize>)>,
    parked_bytes: Parked,
    /// Directories of the tree, as their entries came (parents first).
    dirs: Vec<DirMade>,
    /// Symlinks and hard links, made at the end.
    links: Vec<Entry>,
    stats: UnpackStats,
    /// The first manifest or data error; everything fails after it.
    error: Option<VfileError>,
    /// Files and bytes of the longest run of complete files from the
    /// first, as last seen ([`UnpackOptions::report`]).
    run: (usize, u64),
}

/// Rebuilds a tree from a manifest and the blocks of its virtual file.
///
/// Call [`Unpacker::manifest_bytes`] with the manifest stream in order and
/// [`Unpacker::write_block`] with data blocks in any order, from any
/// threads; then [`Unpacker::finish`]. Dropping an unpacker without
/// finishing removes its temporary files: no partial file ever appears
/// under its final name.
#[derive(Debug)]
pub struct Unpacker {
    opts: UnpackOptions,
    st: Mutex<State>,
    pool: Pool,
    /// Buffers for the copies of blocks that go to the writers.
    spares: Arc<Spares>,
}

impl Unpacker {
    /// An unpacker writing beneath `root` (which should exist; existing
    /// directories are merged, existing files and links replaced).
    pub fn new(root: Arc<Root>, opts: UnpackOptions) -> Result<Self, VfileError> {
        let pool = Pool::new(Arc::new(WorkCtx::new(root)), opts.workers, opts.queue)?;
        let st = State { decoder: Decoder::new(opts.limits), ..State::default() };
        Ok(Unpacker { opts, st: Mutex::new(st), pool, spares: Arc::default() })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn root(&self) -> &Root {
        &self.pool.ctx.root
    }

    /// Length of the virtual file, once the manifest's end record is in.
    pub fn total(&self) -> Option<u64> {
        self.lock().total
    }

    /// Feed the next bytes of the manifest stream.
    pub fn manifest_bytes(&self, bytes: &[u8]) -> Result<(), VfileError> {
        let pieces = {
            let mut st = self.lock();
            Self::check(&st)?;
            let r = self.take_entries(&mut st, bytes);
            self.poison(&mut st, r)?
        };
        self.submit(pieces)
    }

    /// Feed one data block at its virtual-file offset. Never waits for
    /// entries: data ahead of them is parked (see
    /// [`UnpackOptions::park_limit`]); the sender puts a manifest chunk on
    /// the wire before any data it covers, so parked data is what other
    /// streams carried while the chunk's own stream was slower.
    pub fn write_block(&self, offset: u64, data: &[u8]) -> Result<(), VfileError> {
        if data.is_empty() {
            return Ok(());
        }
        let placed = {
            let mut st = self.lock();
            Self::check(&st)?;
            let r = self.take_block(&mut st, offset, data).and_then(|p| self.check_park(&st).map(|()| p));
            let placed = self.poison(&mut st, r)?;
            if self.opts.report.is_some() {
                self.report_held(&mut st);
            }
            placed
        };
        match placed {
            Placed::Queue(pieces) => self.submit(pieces),
            Placed::Here(spans) => self.write_here(spans, data),
        }
    }

    /// What is held complete so far: the longest run of complete regular
    /// files from the manifest's first, as the writers have left it now
    /// (also recorded in [`UnpackOptions::report`]). `None`: the first is
    /// not complete yet.
    pub fn held_so_far(&self) -> Option<Held> {
        let mut st = self.lock();
        self.report_held(&mut st);
        let n = st.run.0;
        Some(Held { after: st.files[..n].last()?.path.clone(), files: n as u64, bytes: st.run.1 })
    }

    /// Record a run of complete files longer than the last one seen
    /// ([`UnpackOptions::report`]).
    fn report_held(&self, st: &mut State) {
        let (mut n, mut bytes) = st.run;
        while let Some(f) = st.files.get(n).filter(|f| f.is_done()) {
            (n, bytes) = (n + 1, bytes + f.size);
        }
        if n > st.run.0 {
            st.run = (n, bytes);
            if let Some(report) = &self.opts.report {
                report.set(Held { after: st.files[n - 1].path.clone(), files: n as u64, bytes });
            }
        }
    }

    /// Write large pieces from the caller's buffer, on the caller's thread.
    fn write_here(&self, spans: Vec<Span>, data: &[u8]) -> Result<(), VfileError> {
        let ctx = &self.pool.ctx;
        if let Some(e) = ctx.error() {
            return Err(e);
        }
        for (slot, at, r) in spans {
            if let Err(e) = writer::write_at(ctx, &slot, at, &data[r]) {
                ctx.fail(e.clone());
                return Err(e);
            }
        }
        Ok(())
    }

    fn check(st: &State) -> Result<(), VfileError> {
        st.error.as_ref().map_or(Ok(()), |e| Err(e.clone()))
    }

    /// Remember the first error.
    fn poison<T>(&self, st: &mut State, r: Result<T, VfileError>) -> Result<T, VfileError> {
        if let Err(e) = &r {
            st.error.get_or_insert_with(|| e.clone());
            self.pool.ctx.fail(e.clone());
        }
        r
    }

    fn check_park(&self, st: &State) -> Result<(), VfileError> {
        if st.parked_bytes.0 > self.opts.park_limit {
            return Err(VfileError::ParkLimit(self.opts.park_limit));
        }
        if st.parked_bytes.0 > 0 && PARKED_ALL.load(Ordering::Relaxed) > PARK_LIMIT_ALL {
            return Err(VfileError::ParkLimit(PARK_LIMIT_ALL));
        }
        Ok(())
    }

    fn take_entries(&self, st: &mut State, bytes: &[u8]) -> Result<Vec<Piece>, VfileError> {
        let mut pieces = Vec::new();
        st.decoder.handle_bytes(bytes);
        let before = st.known_end;
        while let Some(e) = st.decoder.poll_entry()? {
            self.entry(st, e, &mut pieces)?;
        }
        if st.known_end > before {
            Self::unpark(st, &mut pieces);
        }
        if st.decoder.is_finished() && st.total.is_none() {
            st.total = Some(st.known_end);
            if let Some((&offset, (_, r))) = st.parked.first_key_value() {
                return Err(VfileError::OutOfBounds { offset, len: r.len() as u64, total: st.known_end });
            }
        }
        Ok(pieces)
    }

    fn entry(&self, st: &mut State, e: Entry, pieces: &mut Vec<Piece>) -> Result<(), VfileError> {
        let counted = matches!(e.kind, Kind::File { .. });
        let beneath_refused = self.pool.ctx.beneath_refused(&e.path, counted);
        match e.kind {
            Kind::Dir if beneath_refused => {}
            Kind::Dir => {
                let (parent, name) = split(&e.path);
                let ctx = &self.pool.ctx;
                let made = match ctx
                    .dir(parent)
                    .and_then(|d| d.mkdir(name, 0o700))
                    .map_err(|x| writer::denied_in(parent, x))
                {
                    Ok(made) => made,
                    // A file or a symlink there (or above): left out, and
                    // so is what is beneath it ([`writer::conflict`]); a
                    // symlink is never followed.
                    Err(x) => match self.taken_in_place(&e.path, x) {
                        x if writer::conflict(&x) => {
                            ctx.refuse_dir(&e.path, &x);
                            return Ok(());
                        }
                        x => return Err(VfileError::io("creating directory", &e.path, x)),
                    },
                };
                st.stats.dirs += 1;
                st.dirs.push(DirMade { path: e.path, mode: e.mode, mtime_ns: e.mtime_ns, made });
            }
            Kind::File { size, offset } => {
                let slot = Arc::new(FileSlot::new(e.path, offset, size, e.mode, e.mtime_ns));
                if beneath_refused {
                    slot.leave_out();
                }
                if size == 0 {
                    pieces.push(Piece { slot: slot.clone(), at: 0, data: Arc::new(Chunk::empty()), range: 0..0 });
                }
                st.files.push(slot);
                st.known_end = offset + size;
                st.stats.files += 1;
                st.stats.bytes += size;
            }
            Kind::Symlink { .. } => {
                st.stats.symlinks += 1;
                st.links.push(e);
            }
            Kind::HardLink { .. } => {
                st.stats.hardlinks += 1;
                st.links.push(e);
            }
        }
        Ok(())
    }

    /// `x`, from making the directory `path`, or, where it says a regular
    /// file or a symlink is there, an error of that entry alone
    /// ([`writer::conflict`]). A symlink there (planted, perhaps, to lead
    /// the tree's writes elsewhere) failed the whole tree, where `cp -a`
    /// leaves that entry out; nothing is written through it either way.
    fn taken_in_place(&self, path: &[u8], x: io::Error) -> io::Error {
        use lightpath_sys::root::{EntryRefused, FileType};
        if x.kind() != io::ErrorKind::AlreadyExists {
            return x;
        }
        let what = match self.root().lstat(path).map(|st| FileType::from_raw_mode(st.st_mode)) {
            Ok(FileType::RegularFile) => "a file is in its place",
            Ok(FileType::Symlink) => "a symlink is in its place (not followed)",
            Ok(FileType::Directory) | Err(_) => return x,
            Ok(_) => "a special file (FIFO, socket or device) is in its place",
        };
        io::Error::new(io::ErrorKind::AlreadyExists, EntryRefused(what))
    }

    fn take_block(&self, st: &mut State, offset: u64, data: &[u8]) -> Result<Placed, VfileError> {
        let len = data.len() as u64;
        let end = offset.checked_add(len).ok_or(VfileError::OutOfBounds { offset, len, total: u64::MAX })?;
        if let Some(total) = st.total.filter(|&t| end > t) {
            return Err(VfileError::OutOfBounds { offset, len, total });
        }
        if st.claimed.overlaps(offset, end) {
            return Err(VfileError::Overlap { offset, len });
        }
        st.claimed.insert(offset, end);
        if end <= st.known_end {
            let spans = Self::spans(st, offset, end);
            if spans.iter().all(|s| s.2.len() >= HERE_MIN) {
                return Ok(Placed::Here(spans));
            }
        }
        let mut pieces = Vec::new();
        Self::place(st, offset, Arc::new(self.spares.copy(data)), 0..data.len(), &mut pieces);
        Ok(Placed::Queue(pieces))
    }

    /// The files' parts of `[start, end)`, all of whose entries are known;
    /// ranges are relative to `start`.
    fn spans(st: &State, start: u64, end: u64) -> Vec<Span> {
        let files = &st.files;
        let mut i = files.partition_point(|f| f.end() <= start);
        let mut out = Vec::new();
        while let Some(f) = files.get(i).filter(|f| f.offset < end) {
            let (s, e) = (start.max(f.offset), end.min(f.end()));
            if s < e {
                out.push((f.clone(), s - f.offset, (s - start) as usize..(e - start) as usize));
            }
            i += 1;
        }
        out
    }

    /// Turn `data[range]` (at virtual `start`) into pieces for the files
    /// known so far; park the rest.
    fn place(st: &mut State, start: u64, data: Arc<Chunk>, range: Range<usize>, pieces: &mut Vec<Piece>) {
        let end = start + range.len() as u64;
        let cut = end.min(st.known_end).max(start);
        for (slot, at, r) in Self::spans(st, start, cut) {
            let range = range.start + r.start..range.start + r.end;
            pieces.push(Piece { slot, at, data: data.clone(), range });
        }
        if end > cut {
            let rest = range.start + (cut - start) as usize..range.end;
            st.parked.insert(cut, (data, rest));
            st.parked_bytes.add(end - cut + PARKED_BLOCK_COST);
            st.stats.parked_peak = st.stats.parked_peak.max(st.parked_bytes.0);
        }
    }

    /// Place parked data that the entries now cover.
    fn unpark(st: &mut State, pieces: &mut Vec<Piece>) {
        while let Some((&start, _)) = st.parked.first_key_value() {
            if start >= st.known_end {
                break;
            }
            let Some((_, (data, range))) = st.parked.pop_first() else { break };
            st.parked_bytes.sub(range.len() as u64 + PARKED_BLOCK_COST);
            Self::place(st, start, data, range, pieces);
        }
    }

    /// Hand pieces to the writers in jobs of bounded size.
    fn submit(&self, pieces: Vec<Piece>) -> Result<(), VfileError> {
        let mut job = Vec::new();
        let mut bytes = 0;
        for p in pieces {
            bytes += p.range.len();
            job.push(p);
            if job.len() >= self.opts.job_pieces || bytes >= self.opts.job_bytes {
                self.pool.submit(std::mem::take(&mut job))?;
                bytes = 0;
            }
        }
        self.pool.submit(job)
    }

    /// Wait for the writers; check that every entry is complete; make the
    /// links; set directory modes and mtimes, deepest first.
    pub fn finish(mut self) -> Result<UnpackStats, VfileError> {
        let written = self.pool.join();
        let mut st = std::mem::take(&mut *self.lock());
        tracing::debug!(peak = self.pool.ctx.partly_written.peak(), "files partly written at once, at most");
        let done = Self::check(&st)
            .and(written)
            .and_then(|()| st.decoder.finish().map(drop).map_err(VfileError::from))
            .and_then(|()| Self::check_complete(&st.files))
            .and_then(|()| self.make_links(&st.links));
        if let Err(e) = done {
            // Their temporary files first: where they have names (no
            // O_TMPFILE) they kept the directories from being empty.
            drop(st.files);
            self.release_dirs(&st.dirs);
            return Err(e);
        }
        self.set_dir_meta(&st.dirs)?;
        st.stats.refused = self.pool.ctx.take_refused();
        // The files copied: not those left out.
        for f in st.files.iter().filter(|f| f.is_refused()) {
            st.stats.files -= 1;
            st.stats.bytes -= f.size;
        }
        Ok(st.stats)
    }

    /// A tree that did not complete: the directories this unpack made
    /// that are still empty are removed, deepest first (a tree whose
    /// sender failed on a path too long left a chain of 65 empty ones; a
    /// later try makes them again); the others get their modes (they were
    /// made 0700 so that nobody could plant entries while the tree was
    /// written), best effort. Its complete files stay, in directories
    /// that look as the sender's do; mtimes are not set, as the contents
    /// are not the sender's.
    fn release_dirs(&self, dirs: &[DirMade]) {
        for d in dirs.iter().rev() {
            if d.made && self.root().rmdir_strict(&d.path).is_ok() {
                continue;
            }
            if let Ok(f) = self.root().open_dir_strict(&d.path) {
                let _ = f.set_permissions(Permissions::from_mode(d.mode & APPLY_MODE));
            }
        }
    }

    /// Give up a tree whose transfer broke: let the writers finish what
    /// was queued, then say what a resumed try may leave out (`OPTS VRET
    /// After=`): the longest run of complete regular files from the
    /// manifest's first. `None`: the first is not complete. (A file
    /// completed beyond a gap is fetched again; the gap is a few files,
    /// those in flight when the try broke.) Dropped then, as without
    /// `finish`.
    pub fn give_up(mut self) -> Option<Held> {
        let _ = self.pool.join();
        self.held_so_far()
    }

    fn check_complete(files: &[Arc<FileSlot>]) -> Result<(), VfileError> {
        let mut missing = files.iter().filter(|f| !f.is_done() && !f.is_refused());
        let Some(first) = missing.next() else { return Ok(()) };
        Err(VfileError::Incomplete {
            count: 1 + missing.count(),
            path: show(&first.path),
            got: first.written(),
            size: first.size,
        })
    }

    fn make_links(&self, links: &[Entry]) -> Result<(), VfileError> {
        for e in links.iter().filter(|e| !self.pool.ctx.beneath_refused(&e.path, true)) {
            let made = match &e.kind {
                // Not linked to whatever holds the name of a file left out.
                Kind::HardLink { target } if self.pool.ctx.was_refused(target) => Err(linked_to_refused()),
                Kind::HardLink { target } => self.root().hard_link_strict(target, &e.path),
                Kind::Symlink { target } => self.root().symlink_strict(target, &e.path).map(|()| {
                    let (sec, nsec) = split_ns(e.mtime_ns);
                    if let Err(x) = self.root().set_mtime_strict(&e.path, sec, nsec) {
                        writer::meta_not_set(&e.path, &x);
                    }
                }),
                _ => Ok(()),
            };
            let made = made.map_err(|x| writer::denied_in(split(&e.path).0, x));
            match made.map_err(|x| target_left_out(&e.kind, x)) {
                Err(x) if writer::conflict(&x) => self.pool.ctx.refuse(&e.path, &x),
                r => r.map_err(|x| VfileError::io("linking", &e.path, x))?,
            }
        }
        Ok(())
    }

    fn set_dir_meta(&self, dirs: &[DirMade]) -> Result<(), VfileError> {
        for DirMade { path, mode, mtime_ns, .. } in dirs.iter().rev() {
            let io = |e| VfileError::io("setting the metadata of", path, e);
            let set = || self.root().set_dir_meta_strict(path, mode & APPLY_MODE, split_ns(*mtime_ns));
            match set() {
                // Removed as empty meanwhile by another try of this tree
                // into the same place that gave up (a killed client's
                // session ending after its next run began): made again,
                // as the manifest lists it.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.root().mkdir_all_strict(path, 0o700).map_err(io)?;
                    set().map_err(io)?
                }
                Err(e) if lightpath_sys::root::refused_by_file_system(&e) => writer::meta_not_set(path, &e),
                r => r.map_err(io)?,
            }
        }
        Ok(())
    }
}

/// A directory entry of the tree: its mode and mtime (set at the end),
/// and whether this unpack made it (else it was there already).
#[derive(Debug)]
struct DirMade {
    path: Vec<u8>,
    mode: u32,
    mtime_ns: i64,
    made: bool,
}

impl Drop for Unpacker {
    /// Dropped without [`Unpacker::finish`] (the transfer failed or was
    /// interrupted): stop the writers, then release the directories.
    fn drop(&mut self) {
        let dirs = std::mem::take(&mut self.lock().dirs);
        if !dirs.is_empty() {
            self.pool.abort();
            self.release_dirs(&dirs);
        }
    }
}

impl Sink for Unpacker {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        Ok(self.write_block(offset, buf)?)
    }
}

/// A hard link to a file left out (refused at the destination) finds
/// nothing to link to: left out too, and said so.
fn target_left_out(kind: &Kind, x: io::Error) -> io::Error {
    match (kind, x.kind()) {
        (Kind::HardLink { .. }, io::ErrorKind::NotFound) => linked_to_refused(),
        _ => x,
    }
}

/// Why a hard link to a file left out is left out too (it linked to the
/// old file still under that name, not reported: a review's find).
fn linked_to_refused() -> io::Error {
    let why = "the file it links to was left out";
    lightpath_sys::root::EntryRefused::error(why)
}

//! The receiver's worker pool: files are created under temporary names
//! with their final mode (in directories kept open, see [`WorkCtx::dir`]),
//! written at their offsets, given their mtime, and renamed to their final
//! names when their last byte is in.

use super::{split, system_time, VfileError};
use lightpath_sys::root::{Root, StrictDir, TempFile};
use std::collections::VecDeque;
use std::fs::FileTimes;
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Mode bits applied to received files and directories: setuid and setgid
/// are dropped (ownership is not transferred).
pub(crate) const APPLY_MODE: u32 = 0o1777;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One regular file of the manifest, as it is being received.
#[derive(Debug)]
pub(crate) struct FileSlot {
    pub path: Vec<u8>,
    pub offset: u64,
    pub size: u64,
    mode: u32,
    mtime_ns: i64,
    temp: Mutex<Option<Arc<TempFile>>>,
    written: AtomicU64,
    done: AtomicBool,
}

impl FileSlot {
    pub fn new(path: Vec<u8>, offset: u64, size: u64, mode: u32, mtime_ns: i64) -> Self {
        let (temp, written, done) = (Mutex::new(None), AtomicU64::new(0), AtomicBool::new(false));
        FileSlot { path, offset, size, mode, mtime_ns, temp, written, done }
    }

    /// End of its data in the virtual file.
    pub fn end(&self) -> u64 {
        self.offset + self.size
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// Whether it is complete under its final name.
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// The temporary file, created (with its final mode) by whichever
    /// worker comes first.
    fn temp(&self, ctx: &WorkCtx) -> Result<Arc<TempFile>, VfileError> {
        let mut g = lock(&self.temp);
        if let Some(t) = &*g {
            return Ok(t.clone());
        }
        let (dir, name) = split(&self.path);
        let t = ctx.dir(dir).and_then(|d| d.create_temp(name, self.mode & APPLY_MODE));
        let t = Arc::new(t.map_err(|e| VfileError::io("creating", &self.path, e))?);
        *g = Some(t.clone());
        Ok(t)
    }

    /// The mtime (the mode was given at creation), then the final name.
    /// Called once, by the worker that wrote the last byte (every other
    /// writer has dropped its handle).
    fn commit(&self) -> Result<(), VfileError> {
        let io = |op, e| VfileError::io(op, &self.path, e);
        let t = lock(&self.temp).take().ok_or(VfileError::Aborted)?;
        let t = Arc::try_unwrap(t).map_err(|_| VfileError::Aborted)?;
        t.file()
            .set_times(FileTimes::new().set_modified(system_time(self.mtime_ns)))
            .map_err(|e| io("setting the mtime of", e))?;
        t.commit().map_err(|e| io("renaming into place", e))?;
        self.done.store(true, Ordering::Release);
        Ok(())
    }
}

/// Bytes for one file: `data[range]` goes at file offset `at`. An empty
/// range for an empty file creates it.
#[derive(Debug)]
pub(crate) struct Piece {
    pub slot: Arc<FileSlot>,
    pub at: u64,
    pub data: Arc<super::chunk::Chunk>,
    pub range: Range<usize>,
}

fn write_piece(ctx: &WorkCtx, p: &Piece) -> Result<(), VfileError> {
    write_at(ctx, &p.slot, p.at, &p.data[p.range.clone()])
}

/// Write `bytes` at `at` of `slot`'s file (created by whoever comes
/// first) and commit the file when its last byte is in. Any thread.
pub(crate) fn write_at(ctx: &WorkCtx, slot: &FileSlot, at: u64, bytes: &[u8]) -> Result<(), VfileError> {
    let t = slot.temp(ctx)?;
    t.file().write_all_at(bytes, at).map_err(|e| VfileError::io("writing", &slot.path, e))?;
    drop(t);
    let n = bytes.len() as u64;
    let before = slot.written.fetch_add(n, Ordering::AcqRel);
    if before + n == slot.size {
        slot.commit()?;
    }
    Ok(())
}

/// Directories kept open, newest first. Entries come directory by
/// directory, so nearly every create and mkdir finds its parent here and
/// resolves no path (one `openat2` per directory instead of per file).
const DIR_CACHE: usize = 32;

/// What the workers share: the root, its directories lately used, and the
/// first error.
#[derive(Debug)]
pub(crate) struct WorkCtx {
    pub root: Arc<Root>,
    dirs: Mutex<VecDeque<(Vec<u8>, Arc<StrictDir>)>>,
    error: Mutex<Option<VfileError>>,
    failed: AtomicBool,
}

impl WorkCtx {
    pub fn new(root: Arc<Root>) -> Self {
        let dirs = Mutex::new(VecDeque::with_capacity(DIR_CACHE + 1));
        WorkCtx { root, dirs, error: Mutex::new(None), failed: AtomicBool::new(false) }
    }

    /// The directory `rel` beneath the root (no symlink in any component),
    /// opened once while it is among the last [`DIR_CACHE`] used.
    pub fn dir(&self, rel: &[u8]) -> io::Result<Arc<StrictDir>> {
        if let Some((_, d)) = lock(&self.dirs).iter().find(|(p, _)| p == rel) {
            return Ok(d.clone());
        }
        let d = Arc::new(self.root.strict_dir(rel)?);
        let mut dirs = lock(&self.dirs);
        dirs.push_front((rel.to_vec(), d.clone()));
        dirs.truncate(DIR_CACHE);
        Ok(d)
    }

    /// Record an error (the first one wins).
    pub fn fail(&self, e: VfileError) {
        let mut g = lock(&self.error);
        if g.is_none() {
            *g = Some(e);
        }
        self.failed.store(true, Ordering::Release);
    }

    /// The first error, if any.
    pub fn error(&self) -> Option<VfileError> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.error).clone()
    }
}

/// A fixed set of writer threads behind a bounded queue (the queue bound
/// is the back pressure on the network threads).
#[derive(Debug)]
pub(crate) struct Pool {
    tx: Option<SyncSender<Vec<Piece>>>,
    handles: Vec<JoinHandle<()>>,
    pub ctx: Arc<WorkCtx>,
}

impl Pool {
    pub fn new(ctx: Arc<WorkCtx>, workers: usize, depth: usize) -> Result<Pool, VfileError> {
        let (tx, rx) = sync_channel::<Vec<Piece>>(depth.max(1));
        let rx = Arc::new(Mutex::new(rx));
        let mut pool = Pool { tx: Some(tx), handles: Vec::new(), ctx };
        for i in 0..workers.max(1) {
            let (rx, ctx) = (rx.clone(), pool.ctx.clone());
            let h = std::thread::Builder::new().name(format!("lp-unpack-{i}")).spawn(move || work(&rx, &ctx)).map_err(
                |e| VfileError::io("starting writer for", pool.ctx.root.path().as_os_str().as_encoded_bytes(), e),
            )?;
            pool.handles.push(h);
        }
        Ok(pool)
    }

    /// Queue pieces (waits while the queue is full).
    pub fn submit(&self, job: Vec<Piece>) -> Result<(), VfileError> {
        if let Some(e) = self.ctx.error() {
            return Err(e);
        }
        if job.is_empty() {
            return Ok(());
        }
        let tx = self.tx.as_ref().ok_or(VfileError::Aborted)?;
        tx.send(job).map_err(|_| VfileError::Aborted)
    }

    /// Let the queue drain and the workers end; the first error.
    pub fn join(&mut self) -> Result<(), VfileError> {
        self.tx.take();
        for h in self.handles.drain(..) {
            if h.join().is_err() {
                self.ctx.fail(VfileError::Aborted);
            }
        }
        self.ctx.error().map_or(Ok(()), Err)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.ctx.fail(VfileError::Aborted);
        let _ = self.join();
    }
}

fn work(rx: &Mutex<Receiver<Vec<Piece>>>, ctx: &WorkCtx) {
    loop {
        let job = lock(rx).recv();
        let Ok(job) = job else { return };
        if ctx.failed.load(Ordering::Acquire) {
            continue;
        }
        for p in &job {
            if let Err(e) = write_piece(ctx, p) {
                ctx.fail(e);
                break;
            }
        }
    }
}

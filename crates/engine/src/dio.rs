//! Direct I/O sources and sinks: bulk ranges bypass the page cache
//! (`O_DIRECT`, alignment from `statx`), unaligned heads and tails go
//! through the buffered descriptor, and file systems that refuse direct
//! I/O (tmpfs) get plain buffered I/O. [`DirectFileSink::mode`] /
//! [`DirectFileSource::mode`] say which path is in use.
//!
//! Ranges are split on a grain of `max(offset alignment, page size)`, so no
//! page is ever written both through the page cache and directly: a page
//! fully inside one block goes direct, a page shared by two blocks goes
//! buffered (blocks never overlap), and the two paths stay coherent.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use lightpath_sys::dio::{self, DioAlign};

use crate::io::{DataPath, FileSink, Sink, Source};
use crate::pool::{BufferPool, PoolOptions};

/// Which I/O path a direct source or sink uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoMode {
    /// Aligned ranges with `O_DIRECT`; heads and tails buffered.
    Direct(DioAlign),
    /// Everything through the page cache, and why.
    Buffered(String),
}

impl IoMode {
    /// The [`DataPath`] this mode gives a copying source or sink.
    pub fn data_path(&self) -> DataPath {
        match self {
            IoMode::Direct(_) => DataPath::Direct,
            IoMode::Buffered(_) => DataPath::Buffered,
        }
    }
}

impl fmt::Display for IoMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoMode::Direct(a) => write!(f, "direct (memory align {}, offset align {})", a.mem, a.offset),
            IoMode::Buffered(why) => write!(f, "buffered ({why})"),
        }
    }
}

/// Bytes moved by each path so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DirectStats {
    /// Bytes read or written with `O_DIRECT`.
    pub direct: u64,
    /// Bytes read or written through the page cache.
    pub buffered: u64,
    /// Direct bytes that went through a pool buffer because the caller's
    /// memory was not aligned (a copy).
    pub copied: u64,
}

/// Size of the private bounce buffers when no pool is given.
const BOUNCE: usize = 1 << 20;
/// Number of private bounce buffers (concurrent unaligned writers).
const BOUNCE_COUNT: usize = 4;

struct Direct {
    fd: File,
    align: DioAlign,
    grain: usize,
}

/// The shared machinery of [`DirectFileSink`] and [`DirectFileSource`].
struct DirectIo {
    file: File,
    direct: Option<Direct>,
    why_buffered: String,
    refused: OnceLock<String>,
    pool: Option<BufferPool>,
    bounce: Mutex<Option<BufferPool>>,
    direct_bytes: AtomicU64,
    buffered_bytes: AtomicU64,
    copied_bytes: AtomicU64,
}

/// How a range splits: buffered head, direct body, buffered tail.
fn split(offset: u64, len: usize, grain: usize) -> (usize, usize) {
    let g = grain as u64;
    let end = offset + len as u64;
    let body_start = offset.div_ceil(g) * g;
    let body_end = end / g * g;
    if body_end <= body_start {
        return (len, 0);
    }
    ((body_start - offset) as usize, (body_end - body_start) as usize)
}

impl DirectIo {
    fn open(file: File, write: bool, enable: bool) -> DirectIo {
        let (direct, why) = match enable.then(|| dio::reopen_direct(&file, write)) {
            None => (None, "direct I/O not asked for".to_string()),
            Some(Err(e)) => (None, e.to_string()),
            Some(Ok(fd)) => match dio::dio_alignment(&fd) {
                Some(align) => {
                    let grain = align.offset.max(lightpath_sys::mem::page_size());
                    (Some(Direct { fd, align, grain }), String::new())
                }
                None => (None, "no direct-I/O alignment reported".to_string()),
            },
        };
        DirectIo {
            file,
            direct,
            why_buffered: why,
            refused: OnceLock::new(),
            pool: None,
            bounce: Mutex::new(None),
            direct_bytes: AtomicU64::new(0),
            buffered_bytes: AtomicU64::new(0),
            copied_bytes: AtomicU64::new(0),
        }
    }

    fn active(&self) -> Option<&Direct> {
        self.direct.as_ref().filter(|_| self.refused.get().is_none())
    }

    fn mode(&self) -> IoMode {
        match (&self.direct, self.refused.get()) {
            (Some(_), Some(why)) => IoMode::Buffered(format!("direct I/O refused mid-way: {why}")),
            (Some(d), None) => IoMode::Direct(d.align),
            (None, _) => IoMode::Buffered(self.why_buffered.clone()),
        }
    }

    fn stats(&self) -> DirectStats {
        DirectStats {
            direct: self.direct_bytes.load(Ordering::Relaxed),
            buffered: self.buffered_bytes.load(Ordering::Relaxed),
            copied: self.copied_bytes.load(Ordering::Relaxed),
        }
    }

    /// A pool whose buffers suit `d`: the given one if it does, else a small
    /// private one made on first need (an error if that cannot be allocated).
    fn bounce_pool(&self, d: &Direct) -> io::Result<BufferPool> {
        if let Some(p) = &self.pool {
            if p.align() % d.align.mem == 0 && p.buf_size() >= d.grain {
                return Ok(p.clone());
            }
        }
        let mut slot = self.bounce.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = &*slot {
            return Ok(p.clone());
        }
        let opts = PoolOptions {
            count: BOUNCE_COUNT,
            size: BOUNCE.max(d.grain),
            align: d.align.mem.max(4096),
            ..Default::default()
        };
        let p = BufferPool::new(&opts)?;
        *slot = Some(p.clone());
        Ok(p)
    }

    fn note_refusal(&self, e: &io::Error) {
        let _ = self.refused.set(e.to_string());
        tracing::info!("direct I/O refused ({e}); falling back to buffered I/O");
    }

    fn buffered_write(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)?;
        self.buffered_bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn buffered_read(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset).map_err(shrank)?;
        self.buffered_bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let Some(d) = self.active() else {
            return self.buffered_write(buf, offset);
        };
        let (head, body) = split(offset, buf.len(), d.grain);
        if head > 0 {
            self.buffered_write(&buf[..head], offset)?;
        }
        if body > 0 {
            self.write_body(d, &buf[head..head + body], offset + head as u64)?;
        }
        let tail = head + body;
        if tail < buf.len() {
            self.buffered_write(&buf[tail..], offset + tail as u64)?;
        }
        Ok(())
    }

    /// Write `bufs` back to back from `offset`: the leading pieces that
    /// suit direct I/O as one request (`pwritev`; the disk sees one large
    /// write rather than several of 256 KiB), the rest piece by piece.
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let (mut done, mut at) = (0, offset);
        if let Some(d) = self.active() {
            let (k, len) = direct_run(d, bufs, offset);
            if k >= 2 {
                self.direct_writev(d, &bufs[..k], offset)?;
                (done, at) = (k, offset + len);
            }
        }
        for b in &bufs[done..] {
            self.write_at(b, at)?;
            at += b.len() as u64;
        }
        Ok(())
    }

    /// One direct request for `bufs`; a refusal writes them buffered and
    /// turns direct I/O off for good (rewriting bytes that went direct
    /// before the refusal is harmless).
    fn direct_writev(&self, d: &Direct, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        match lightpath_sys::file::write_all_vectored_at(&d.fd, bufs, offset) {
            Ok(()) => {
                let n: usize = bufs.iter().map(|b| b.len()).sum();
                self.direct_bytes.fetch_add(n as u64, Ordering::Relaxed);
                Ok(())
            }
            Err(e) if dio::is_refusal(&e) => {
                self.note_refusal(&e);
                let mut at = offset;
                for b in bufs {
                    self.buffered_write(b, at)?;
                    at += b.len() as u64;
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Write a grain-aligned range directly: from the caller's memory if it
    /// is aligned, else through pool buffers.
    fn write_body(&self, d: &Direct, body: &[u8], offset: u64) -> io::Result<()> {
        if is_aligned(body.as_ptr(), d.align.mem) {
            return self.direct_write(d, body, offset);
        }
        let pool = self.bounce_pool(d)?;
        let chunk = pool.buf_size() / d.grain * d.grain;
        for (i, piece) in body.chunks(chunk).enumerate() {
            let mut pb = pool.get();
            pb.set_len(piece.len());
            pb.copy_from_slice(piece);
            self.direct_write(d, &pb, offset + (i * chunk) as u64)?;
            self.copied_bytes.fetch_add(piece.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    /// `pwrite` with `O_DIRECT` until done; a refusal finishes the range
    /// buffered and turns direct I/O off for good.
    fn direct_write(&self, d: &Direct, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            if self.refused.get().is_some() {
                return self.buffered_write(&buf[done..], offset + done as u64);
            }
            match d.fd.write_at(&buf[done..], offset + done as u64) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    done += n;
                    self.direct_bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if dio::is_refusal(&e) => self.note_refusal(&e),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let Some(d) = self.active() else {
            return self.buffered_read(buf, offset);
        };
        let (head, body) = split(offset, buf.len(), d.grain);
        if body == 0 {
            return self.buffered_read(buf, offset);
        }
        if head > 0 {
            self.buffered_read(&mut buf[..head], offset)?;
        }
        self.read_body(d, &mut buf[head..head + body], offset + head as u64)?;
        let tail = head + body;
        if tail < buf.len() {
            self.buffered_read(&mut buf[tail..], offset + tail as u64)?;
        }
        Ok(())
    }

    fn read_body(&self, d: &Direct, body: &mut [u8], offset: u64) -> io::Result<()> {
        if is_aligned(body.as_ptr(), d.align.mem) {
            return self.direct_read(d, body, offset);
        }
        let pool = self.bounce_pool(d)?;
        let chunk = pool.buf_size() / d.grain * d.grain;
        for (i, piece) in body.chunks_mut(chunk).enumerate() {
            let mut pb = pool.get();
            pb.set_len(piece.len());
            self.direct_read(d, &mut pb, offset + (i * chunk) as u64)?;
            piece.copy_from_slice(&pb);
            self.copied_bytes.fetch_add(piece.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    /// `pread` with `O_DIRECT`; a short read (the file ended or shrank) or a
    /// refusal finishes the range buffered, which reports a real end of file.
    fn direct_read(&self, d: &Direct, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            if self.refused.get().is_some() || done % d.grain != 0 {
                return self.buffered_read(&mut buf[done..], offset + done as u64);
            }
            match d.fd.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => return Err(shrank(io::ErrorKind::UnexpectedEof.into())),
                Ok(n) => {
                    done += n;
                    self.direct_bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if dio::is_refusal(&e) => self.note_refusal(&e),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// How many pieces from the first can go down directly as one request,
/// and their bytes: at a grain-aligned offset, each a whole number of
/// grains in memory aligned for direct I/O.
fn direct_run(d: &Direct, bufs: &[&[u8]], offset: u64) -> (usize, u64) {
    if !offset.is_multiple_of(d.grain as u64) {
        return (0, 0);
    }
    let fits = |b: &&&[u8]| b.len().is_multiple_of(d.grain) && is_aligned(b.as_ptr(), d.align.mem);
    let k = bufs.iter().take_while(fits).count();
    (k, bufs[..k].iter().map(|b| b.len() as u64).sum())
}

/// Whether `p` is a multiple of `align` (a power of two).
fn is_aligned(p: *const u8, align: usize) -> bool {
    (p as usize) & (align - 1) == 0
}

fn shrank(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while being read")
    } else {
        e
    }
}

/// The sink for a received `file`: direct I/O when `direct` and the file
/// system allows it, else the page cache. `what` ("download", "upload")
/// names it in the info line that says which path the writes take.
pub fn file_sink<'a>(file: &'a File, direct: bool, what: &str) -> Box<dyn Sink + 'a> {
    if direct {
        match file.try_clone().and_then(|c| DirectFileSink::new(c, None)) {
            Ok(d) => {
                tracing::info!(mode = %d.mode(), "{what} sink");
                return Box::new(d);
            }
            Err(e) => tracing::info!("{what} sink: no direct I/O ({e}); buffered"),
        }
    }
    Box::new(FileSink(file))
}

/// Writes blocks into a file with direct I/O where it can (see the module
/// docs), buffered where it cannot.
pub struct DirectFileSink {
    io: DirectIo,
}

impl DirectFileSink {
    /// Use direct I/O on `file` if its file system allows it. With `size`
    /// known, the file is preallocated first (`fallocate`, keeping size 0),
    /// so a full disk fails before data moves.
    pub fn new(file: File, size: Option<u64>) -> io::Result<Self> {
        Self::build(file, size, true)
    }

    /// The same sink with direct I/O turned off (the buffered path chosen,
    /// e.g. because it measured faster); preallocation as in `new`.
    pub fn buffered(file: File, size: Option<u64>) -> io::Result<Self> {
        Self::build(file, size, false)
    }

    fn build(file: File, size: Option<u64>, direct: bool) -> io::Result<Self> {
        if let Some(n) = size {
            lightpath_sys::file::preallocate(&file, n)?;
        }
        Ok(DirectFileSink { io: DirectIo::open(file, true, direct) })
    }

    /// Take bounce buffers (for callers whose memory is not aligned) from
    /// `pool` instead of a private one; ignored if its buffers do not suit.
    pub fn with_pool(mut self, pool: BufferPool) -> Self {
        self.io.pool = Some(pool);
        self
    }

    /// Which path writes take now.
    pub fn mode(&self) -> IoMode {
        self.io.mode()
    }

    /// Bytes written by each path so far.
    pub fn stats(&self) -> DirectStats {
        self.io.stats()
    }

    /// The (buffered) file, e.g. to fsync or set times.
    pub fn file(&self) -> &File {
        &self.io.file
    }
}

impl fmt::Debug for DirectFileSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectFileSink").field("mode", &self.mode()).field("stats", &self.stats()).finish()
    }
}

impl Sink for DirectFileSink {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.io.write_at(buf, offset)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.io.write_vectored_at(bufs, offset)
    }
    fn serial_writes(&self) -> bool {
        matches!(self.mode(), IoMode::Buffered(_))
    }
    fn data_path(&self) -> DataPath {
        self.mode().data_path()
    }
}

/// Reads blocks from a file with direct I/O where it can, buffered where it
/// cannot. Like [`crate::FileSource`], the length is taken once.
pub struct DirectFileSource {
    io: DirectIo,
    len: u64,
    opened: crate::io::Opened,
    zero_copy: bool,
}

impl DirectFileSource {
    /// Use direct I/O on `file` if its file system allows it; `zero_copy`
    /// lets the sender use `sendfile` on the file instead of reading.
    pub fn new(file: File, zero_copy: bool) -> io::Result<Self> {
        Self::build(file, zero_copy, true)
    }

    /// The same source with direct I/O turned off.
    pub fn buffered(file: File, zero_copy: bool) -> io::Result<Self> {
        Self::build(file, zero_copy, false)
    }

    fn build(file: File, zero_copy: bool, direct: bool) -> io::Result<Self> {
        let m = file.metadata()?;
        let opened = crate::io::Opened::of(&m);
        Ok(DirectFileSource { io: DirectIo::open(file, false, direct), len: m.len(), opened, zero_copy })
    }

    /// Take bounce buffers from `pool` (see [`DirectFileSink::with_pool`]).
    pub fn with_pool(mut self, pool: BufferPool) -> Self {
        self.io.pool = Some(pool);
        self
    }

    /// Which path reads take now.
    pub fn mode(&self) -> IoMode {
        self.io.mode()
    }

    /// Bytes read by each path so far.
    pub fn stats(&self) -> DirectStats {
        self.io.stats()
    }
}

impl fmt::Debug for DirectFileSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectFileSource").field("len", &self.len).field("mode", &self.mode()).finish()
    }
}

impl Source for DirectFileSource {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.io.read_at(buf, offset)
    }
    fn file(&self) -> Option<&File> {
        self.zero_copy.then_some(&self.io.file)
    }
    fn unchanged(&self) -> io::Result<()> {
        self.opened.check(&self.io.file)
    }
    fn data_path(&self) -> DataPath {
        if self.zero_copy {
            DataPath::Sendfile
        } else {
            self.mode().data_path()
        }
    }
}

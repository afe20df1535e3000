//! Where bytes come from and go to: files, memory, listings.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::Mutex;

/// How a transfer's bytes move between its file and the sockets. Shown in
/// verbose output and, as the `Data Path:` fact, in 112 perf markers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataPath {
    /// `sendfile` from the page cache (zero copy).
    Sendfile,
    /// `splice` socket -> pipe -> file (zero copy).
    Splice,
    /// Copied through the engine's buffers, with `O_DIRECT` on the file.
    Direct,
    /// Copied through the engine's buffers and the page cache.
    Buffered,
    /// Copied from or into memory (listings, packed trees, `/dev/zero`).
    Memory,
    /// Read from the socket and dropped (`/dev/null`).
    Discard,
    /// A tree packed into a virtual file, or rebuilt from one.
    Tree,
}

impl DataPath {
    /// The marker's value: short, and without `:` (GCT's and jglobus's
    /// marker parsers split facts at it).
    pub fn as_str(self) -> &'static str {
        match self {
            DataPath::Sendfile => "sendfile",
            DataPath::Splice => "splice",
            DataPath::Direct => "direct I/O",
            DataPath::Buffered => "page cache",
            DataPath::Memory => "memory",
            DataPath::Discard => "discard",
            DataPath::Tree => "virtual file",
        }
    }
}

impl std::fmt::Display for DataPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Something the sender reads blocks from.
pub trait Source: Sync {
    /// Total length (for REST/missing-range computation).
    fn len(&self) -> u64;
    /// Whether the source is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Fill `buf` from `offset`; a short source is an error.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// The file behind the source, for zero-copy `sendfile`.
    fn file(&self) -> Option<&File> {
        None
    }
    /// The device (`st_dev`) it is read from, which picks the disk threads.
    fn device(&self) -> Option<u64> {
        None
    }
    /// Whether it is still as it was when opened (a file: its length and
    /// modification time); an error says how it changed. Senders ask
    /// once every byte is written, before the end of the data.
    fn unchanged(&self) -> io::Result<()> {
        Ok(())
    }
    /// How the sender moves its bytes: `sendfile` when it has a file.
    fn data_path(&self) -> DataPath {
        if self.file().is_some() {
            DataPath::Sendfile
        } else {
            DataPath::Memory
        }
    }
}

/// Something the receiver writes blocks to.
pub trait Sink: Sync {
    /// Write all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Write `bufs` back to back from `offset`. Files take them in one
    /// request (`pwritev`): received pieces that are contiguous in the
    /// file become one larger write.
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let mut at = offset;
        for b in bufs {
            self.write_all_at(b, at)?;
            at += b.len() as u64;
        }
        Ok(())
    }
    /// The file behind the sink, when bytes may go straight from the
    /// socket into it (`splice`, no copy through user space).
    fn file(&self) -> Option<&File> {
        None
    }
    /// The device (`st_dev`) it is written to, which picks the disk threads.
    fn device(&self) -> Option<u64> {
        None
    }
    /// Whether one write at a time is all it can take. Buffered writes
    /// into one file hold the inode's lock exclusively (ext4, xfs), so a
    /// second writer only spins on it: perf on a 3 GiB loopback download
    /// put 12 % of the client's CPU in `rwsem_spin_on_owner` under
    /// `ext4_buffered_write_iter`. Direct writes inside the file's size
    /// share the lock, and a tree's files each have their own.
    fn serial_writes(&self) -> bool {
        false
    }
    /// Whether it keeps nothing (`/dev/null`): the receiver then reads each
    /// piece into one small buffer per network thread, reused while it is
    /// still in cache, and writes nothing.
    fn discards(&self) -> bool {
        false
    }
    /// How written bytes reach it when the receiver does not splice.
    fn data_path(&self) -> DataPath {
        if self.discards() {
            DataPath::Discard
        } else {
            DataPath::Memory
        }
    }
}

/// A file's length and modification time when a source opened it, for
/// [`Source::unchanged`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Opened {
    len: u64,
    modified: Option<std::time::SystemTime>,
}

impl Opened {
    pub(crate) fn of(m: &std::fs::Metadata) -> Opened {
        Opened { len: m.len(), modified: m.modified().ok() }
    }

    /// Whether `file` still has the length and modification time it had.
    pub(crate) fn check(&self, file: &File) -> io::Result<()> {
        let m = file.metadata()?;
        let (was, now) = (self.len, m.len());
        if now != was {
            return Err(changed(format!("{was} bytes when opened, {now} now")));
        }
        if m.modified().ok() != self.modified {
            return Err(changed(format!(
                "{was} bytes as when opened, but its modification time moved: written to meanwhile"
            )));
        }
        Ok(())
    }
}

fn changed(how: String) -> io::Error {
    io::Error::other(SourceChanged(how))
}

/// A source file written to while it was read, at the same or another
/// size ([`Opened::check`]); [`crate::EngineError::source_changed`] tells
/// it (and a file that shrank) from other local errors: reading the file
/// again may give a whole copy.
#[derive(Debug, thiserror::Error)]
#[error("file changed while being read ({0})")]
pub struct SourceChanged(pub(crate) String);

/// Why a file whose size reads 0 but which holds data is not sent.
pub const PSEUDO_FILE: &str = "its size reads 0 but it holds data (a file of /proc or /sys?): its length \
     cannot be known before it is read; copy it into a regular file first";

/// Whether a regular `file` of `len` bytes is a pseudo-file: its size
/// reads 0 but a read finds data (`/proc/cpuinfo`). Sent by its size, it
/// arrived empty and passed for copied (a defect hunt).
pub fn pseudo_file(file: &File, len: u64) -> io::Result<bool> {
    let mut one = [0u8; 1];
    Ok(len == 0 && file.read_at(&mut one, 0)? > 0)
}

/// A regular file. The length is taken once; a file that shrinks while
/// being read makes the read fail instead of sending short data, and one
/// written to meanwhile fails [`Source::unchanged`].
#[derive(Debug)]
pub struct FileSource {
    file: File,
    len: u64,
    dev: u64,
    opened: Opened,
    zero_copy: bool,
}

impl FileSource {
    /// Wrap an open file; `zero_copy` allows `sendfile`.
    pub fn new(file: File, zero_copy: bool) -> io::Result<Self> {
        let m = file.metadata()?;
        if m.is_file() && pseudo_file(&file, m.len())? {
            return Err(io::Error::new(io::ErrorKind::InvalidData, PSEUDO_FILE));
        }
        Ok(FileSource { file, len: m.len(), dev: m.dev(), opened: Opened::of(&m), zero_copy })
    }
}

impl Source for FileSource {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while being read")
            } else {
                e
            }
        })
    }
    fn file(&self) -> Option<&File> {
        self.zero_copy.then_some(&self.file)
    }
    fn device(&self) -> Option<u64> {
        Some(self.dev)
    }
    fn unchanged(&self) -> io::Result<()> {
        self.opened.check(&self.file)
    }
    fn data_path(&self) -> DataPath {
        if self.zero_copy {
            DataPath::Sendfile
        } else {
            DataPath::Buffered
        }
    }
}

/// `len` zero bytes (`/dev/zero` for memory-to-memory runs). [`ZeroSource::new`]
/// sends them with `sendfile` from a sparse memfd (`lightpath_sys::file::zeros`):
/// no copy, as for a file in the page cache. Without it (or
/// [`ZeroSource::in_memory`]) each block is zeroed in a pool buffer.
#[derive(Debug)]
pub struct ZeroSource {
    len: u64,
    file: Option<File>,
}

impl ZeroSource {
    /// Zeros sent from a sparse memfd where one can be made.
    pub fn new(len: u64) -> Self {
        let file = lightpath_sys::file::zeros(len)
            .inspect_err(|e| tracing::debug!("no memfd for /dev/zero ({e}); sending from memory"))
            .ok();
        ZeroSource { len, file }
    }
    /// Zeros sent from memory (checksums, tests of that path).
    pub fn in_memory(len: u64) -> Self {
        ZeroSource { len, file: None }
    }
}

impl Source for ZeroSource {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_exact_at(&self, buf: &mut [u8], _offset: u64) -> io::Result<()> {
        buf.fill(0);
        Ok(())
    }
    fn file(&self) -> Option<&File> {
        self.file.as_ref()
    }
}

/// Bytes in memory (listings).
#[derive(Debug, Clone)]
pub struct BytesSource(pub Vec<u8>);

impl Source for BytesSource {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let start = offset as usize;
        let src = self.0.get(start..start + buf.len()).ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// Writes into a file at block offsets.
#[derive(Debug)]
pub struct FileSink<'a>(pub &'a File);

impl Sink for FileSink<'_> {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        lightpath_sys::file::write_all_vectored_at(self.0, bufs, offset)
    }
    fn file(&self) -> Option<&File> {
        Some(self.0)
    }
    fn device(&self) -> Option<u64> {
        self.0.metadata().ok().map(|m| m.dev())
    }
    fn serial_writes(&self) -> bool {
        true
    }
    fn data_path(&self) -> DataPath {
        DataPath::Buffered
    }
}

/// Discards everything (`/dev/null`).
#[derive(Debug, Default)]
pub struct NullSink;

impl Sink for NullSink {
    fn write_all_at(&self, _buf: &[u8], _offset: u64) -> io::Result<()> {
        Ok(())
    }
    fn discards(&self) -> bool {
        true
    }
}

/// Collects bytes in memory (listings), bounded.
#[derive(Debug)]
pub struct MemorySink {
    data: Mutex<Vec<u8>>,
    limit: u64,
}

impl MemorySink {
    /// A sink that refuses to grow past `limit` bytes.
    pub fn new(limit: u64) -> Self {
        MemorySink { data: Mutex::new(Vec::new()), limit }
    }
    /// The bytes received.
    pub fn into_inner(self) -> Vec<u8> {
        self.data.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

impl Sink for MemorySink {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let end = offset.checked_add(buf.len() as u64).filter(|&e| e <= self.limit);
        let end = end.ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "listing too large"))? as usize;
        let mut d = self.data.lock().unwrap_or_else(|e| e.into_inner());
        if d.len() < end {
            d.resize(end, 0);
        }
        d[offset as usize..end].copy_from_slice(buf);
        Ok(())
    }
}

//! Reading the virtual file: small files whole (and cached while a block
//! boundary splits them), large files by range through kept-open handles.

use super::pack::{Extent, Shared};
use super::VfileError;
use crate::io::Source;
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::{Arc, Mutex, MutexGuard};

/// A bounded first-in first-out map.
#[derive(Debug)]
struct Fifo<T> {
    map: HashMap<u64, (T, usize)>,
    order: VecDeque<u64>,
    weight: usize,
    cap: usize,
}

impl<T: Clone> Fifo<T> {
    fn new(cap: usize) -> Self {
        Fifo { map: HashMap::new(), order: VecDeque::new(), weight: 0, cap }
    }
    fn get(&self, k: u64) -> Option<T> {
        self.map.get(&k).map(|v| v.0.clone())
    }
    fn remove(&mut self, k: u64) {
        if let Some((_, w)) = self.map.remove(&k) {
            self.weight -= w;
        }
    }
    fn insert(&mut self, k: u64, v: T, w: usize) {
        if w > self.cap {
            return;
        }
        while self.weight + w > self.cap {
            let Some(old) = self.order.pop_front() else { break };
            self.remove(old);
        }
        self.remove(k);
        self.map.insert(k, (v, w));
        self.order.push_back(k);
        self.weight += w;
    }
}

/// Small files read whole and open large files, keyed by virtual offset.
#[derive(Debug)]
pub(crate) struct ReadCache {
    small: Mutex<Fifo<Arc<Vec<u8>>>>,
    open: Mutex<Fifo<Arc<File>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ReadCache {
    pub fn new(bytes: usize, files: usize) -> Self {
        ReadCache { small: Mutex::new(Fifo::new(bytes)), open: Mutex::new(Fifo::new(files)) }
    }
}

/// The virtual file as a [`Source`]. Its length grows while the walk
/// publishes data; reading past what is published is an error.
///
/// A failed read fails the whole pack: the walk stops, and
/// [`Pack::next_item`](super::Pack::next_item) and
/// [`Pack::wait`](super::Pack::wait) return the read's error (which names
/// the file, e.g. [`VfileError::Changed`]) rather than
/// [`VfileError::Aborted`] when the sender then cancels.
#[derive(Clone)]
pub struct PackReader {
    sh: Arc<Shared>,
}

impl std::fmt::Debug for PackReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackReader").field("root", &self.sh.root.path()).finish_non_exhaustive()
    }
}

impl PackReader {
    pub(crate) fn new(sh: Arc<Shared>) -> Self {
        PackReader { sh }
    }

    /// Fill `buf` from virtual offset `offset`; an error also fails the pack.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), VfileError> {
        self.try_read_at(buf, offset).inspect_err(|e| self.sh.fail(e.clone()))
    }

    fn try_read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), VfileError> {
        let Some(end) = offset.checked_add(buf.len() as u64) else {
            let e = io::Error::new(io::ErrorKind::InvalidInput, "offset overflows");
            return Err(VfileError::io("reading", b"the virtual file", e));
        };
        let xs = self.extents(offset, end);
        let mut covered = 0;
        for x in &xs {
            let (s, e) = (offset.max(x.start), end.min(x.end()));
            let out = &mut buf[(s - offset) as usize..(e - offset) as usize];
            self.read_extent(x, s - x.start, out)?;
            covered += e - s;
        }
        if covered != end - offset {
            let e = io::Error::new(io::ErrorKind::UnexpectedEof, "past the published part of the virtual file");
            return Err(VfileError::io("reading", format!("virtual offset {offset}").as_bytes(), e));
        }
        Ok(())
    }

    /// The non-empty extents overlapping `[start, end)`.
    fn extents(&self, start: u64, end: u64) -> Vec<Extent> {
        let st = self.sh.lock();
        let i = st.extents.partition_point(|x| x.end() <= start);
        st.extents[i..].iter().take_while(|x| x.start < end).filter(|x| x.size > 0).cloned().collect()
    }

    fn read_extent(&self, x: &Extent, within: u64, out: &mut [u8]) -> Result<(), VfileError> {
        let last = within + out.len() as u64 == x.size;
        if x.size <= self.sh.opts.small_file {
            let whole = self.small(x, within == 0 && last)?;
            out.copy_from_slice(&whole[within as usize..within as usize + out.len()]);
            if last {
                lock(&self.sh.cache.small).remove(x.start);
            }
            return Ok(());
        }
        let f = self.open(x)?;
        f.read_exact_at(out, within).map_err(|e| shrank(x, e))?;
        if last {
            lock(&self.sh.cache.open).remove(x.start);
        }
        // After every read, not only the last: another thread's read of an
        // earlier block may come after the last one's check, and a file
        // rewritten in between would mix old and new bytes.
        unchanged(&f, x)
    }

    /// The whole of a small file, cached unless this read uses all of it.
    fn small(&self, x: &Extent, once: bool) -> Result<Arc<Vec<u8>>, VfileError> {
        if let Some(v) = lock(&self.sh.cache.small).get(x.start) {
            return Ok(v);
        }
        let f = self.open_checked(x)?;
        let mut v = Vec::with_capacity(x.size as usize);
        (&f).take(x.size).read_to_end(&mut v).map_err(|e| VfileError::io("reading", &x.src, e))?;
        if v.len() as u64 != x.size {
            return Err(x.changed());
        }
        unchanged(&f, x)?;
        let v = Arc::new(v);
        if !once {
            lock(&self.sh.cache.small).insert(x.start, v.clone(), x.size as usize);
        }
        Ok(v)
    }

    fn open(&self, x: &Extent) -> Result<Arc<File>, VfileError> {
        if let Some(f) = lock(&self.sh.cache.open).get(x.start) {
            return Ok(f);
        }
        let f = Arc::new(self.open_checked(x)?);
        lock(&self.sh.cache.open).insert(x.start, f.clone(), 1);
        Ok(f)
    }

    /// Open the file of an extent; it must still be the file the walk saw.
    fn open_checked(&self, x: &Extent) -> Result<File, VfileError> {
        let f = self.sh.root.open_read_listed(&x.src).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => x.changed(), // removed since the walk
            _ => VfileError::io("opening", &x.src, e),
        })?;
        let m = f.metadata().map_err(|e| VfileError::io("reading", &x.src, e))?;
        if m.dev() != x.dev || m.ino() != x.ino || !as_walked(&m, x) {
            return Err(x.changed());
        }
        Ok(f)
    }
}

/// The open file of `x` still has the size and mtime the walk saw
/// ([`as_walked`]): checked when it is opened and once its last bytes were
/// read. A file written to
/// meanwhile (grown, or rewritten in place) would otherwise arrive as the
/// walk's length of other bytes, under its name and old mtime, as if whole.
fn unchanged(f: &File, x: &Extent) -> Result<(), VfileError> {
    let m = f.metadata().map_err(|e| VfileError::io("reading", &x.src, e))?;
    if !as_walked(&m, x) {
        return Err(x.changed());
    }
    Ok(())
}

/// Whether `m` has the size and mtime the walk saw for `x`.
fn as_walked(m: &std::fs::Metadata, x: &Extent) -> bool {
    m.len() == x.size && super::stat_ns(m.mtime(), m.mtime_nsec()) == x.mtime_ns
}

fn shrank(x: &Extent, e: io::Error) -> VfileError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        x.changed()
    } else {
        VfileError::io("reading", &x.src, e)
    }
}

impl Source for PackReader {
    /// What the walk has published so far (the final length once it ended).
    fn len(&self) -> u64 {
        self.sh.lock().published
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        Ok(self.read_at(buf, offset)?)
    }
}

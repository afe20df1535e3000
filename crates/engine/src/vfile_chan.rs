//! The large virtual file on a MODE E channel (lightpath extension `LPVF`).
//!
//! The file data of the virtual file travels at its own offsets
//! `[0, total)`; the manifest travels on the same parallel streams at
//! offsets from [`MANIFEST_BASE`] on. The sender hands out manifest chunks
//! first whenever one is waiting, so entries usually arrive before their
//! data; the receiver reassembles the manifest in order and parks data
//! that comes early (the unpacker bounds that memory).
//!
//! A receiver that said so takes a second copy of each manifest chunk, at
//! [`MANIFEST_COPY_BASE`] on, which the sender puts on another stream, one
//! whose unsent bytes leave soon (`iothreads::send::take_ready`). Over the
//! 95 ms lab a chunk's bytes waited up to 2.3 s while 31 other streams went
//! on: in the sender's socket behind megabytes paced at a few Mbit/s after
//! losses, or in the receiver's behind tens of megabytes it had not read
//! yet (the receiving client, sharing two cores with the emulator, fell up
//! to 280 MB behind). The data of those entries waited parked: in eight
//! Linux-tree downloads up to 317 MB, and once over the 512 MiB limit,
//! which failed that try; with copies, 48-129 MB.

use crate::error::{EngineError, Result};
use crate::io::Sink;
use crate::modee::{Apart, OutBlock, Payload, RecvOpts, Supply};
use crate::progress::Control;
use crate::vfile::{Pack, PackItem, PackReader, PackStats, UnpackStats, Unpacker, VfileError};
use crate::DataChannel;
use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::task::Poll;
use std::time::Duration;

/// Wire offset of the first manifest byte (2^62: far above any data offset).
pub const MANIFEST_BASE: u64 = 1 << 62;

/// Wire offset of the first byte of the manifest's copy (2^62 + 2^61):
/// the MODE E layer refuses blocks that overlap, so a copy has its own
/// offsets. A manifest is shorter than 2^61 bytes.
pub const MANIFEST_COPY_BASE: u64 = MANIFEST_BASE + (1 << 61);

/// Send `pack` on the prepared MODE E connections of `dc`, each manifest
/// chunk `copies` times (at most [`lightpath_proto::manifest::MAX_COPIES`],
/// on different connections; once on fewer than three).
///
/// Each stream thread takes one item ([`Pack::next_item`]) and writes it
/// before taking the next. A manifest chunk is made ready before any data
/// it covers; a stream with much unsent data passes it over for up to
/// 50 ms and may take such data meanwhile, which the receiver parks.
pub fn send_pack(dc: &mut DataChannel, pack: &Pack, block: u64, copies: u8, ctl: &Control) -> Result<u64> {
    let reader = pack.reader();
    ctl.set_data_path(crate::DataPath::Tree);
    // Not on two streams: copies that only the other may take would fill
    // the job's slots and tie the fast stream to the slow one.
    let copy = copies >= 2 && dc.cached_count() >= 3;
    let supply = PackSupply { pack, reader: &reader, block, copy, pending: Mutex::new(None) };
    let r = dc.send_blocks_e(&supply, ctl);
    if r.is_err() {
        pack.cancel();
    }
    r
}

/// A pack's items as MODE E blocks. While the walk is behind it says
/// `WouldBlock` rather than wait on a shared disk thread: a tree on a slow
/// disk would otherwise hold every thread of its pool, and stall every
/// other session on that pool, until its walk caught up.
struct PackSupply<'a> {
    pack: &'a Pack,
    reader: &'a PackReader,
    block: u64,
    /// Whether each manifest chunk goes twice.
    copy: bool,
    /// The copy of the chunk just handed out, handed out next.
    pending: Mutex<Option<(u64, Vec<u8>)>>,
}

impl<'a> Supply<'a> for PackSupply<'a> {
    fn next(&self) -> io::Result<Option<OutBlock<'a>>> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, bytes)) = pending.take() {
            return Ok(Some(manifest_block(MANIFEST_COPY_BASE, at, bytes, 2)));
        }
        let Poll::Ready(item) = self.pack.try_next_item(self.block)? else {
            return Err(io::ErrorKind::WouldBlock.into());
        };
        Ok(item.map(|item| match item {
            PackItem::Manifest { at, bytes } => {
                if self.copy {
                    *pending = Some((at, bytes.clone()));
                }
                manifest_block(MANIFEST_BASE, at, bytes, 1 + u8::from(self.copy))
            }
            PackItem::Data { offset, len } => {
                OutBlock { wire_offset: offset, len, payload: Payload::Read(self.reader, offset), apart: None }
            }
        }))
    }
    fn wait(&self, timeout: Duration) {
        self.pack.wait_ready(timeout);
    }
}

/// The manifest chunk at `at`, at wire offsets from `base`, one of
/// `copies`; they share a key ([`Apart`]), the chunk's offset.
fn manifest_block<'a>(base: u64, at: u64, bytes: Vec<u8>, copies: u8) -> OutBlock<'a> {
    let apart = Some(Apart { key: at, copies });
    OutBlock { wire_offset: base + at, len: bytes.len() as u64, payload: Payload::Bytes(bytes), apart }
}

/// Why a pack's transfer failed.
#[derive(Debug)]
pub enum PackFailure {
    /// The data channel's error (the walk was at most stopped because of it).
    Send(EngineError),
    /// The pack's own: the walk's, or a file that changed or could not be
    /// read while being sent (these name the file).
    Pack(VfileError),
}

/// What [`send_pack`] and [`Pack::wait`] add up to. The pack's error wins
/// unless it is only [`VfileError::Aborted`] (the walk stopped because the
/// send failed); then the send's error says why.
pub fn pack_outcome(
    sent: Result<u64>,
    walk: std::result::Result<PackStats, VfileError>,
) -> std::result::Result<(u64, PackStats), PackFailure> {
    match (sent, walk) {
        (Ok(bytes), Ok(stats)) => Ok((bytes, stats)),
        (Err(e), Ok(_) | Err(VfileError::Aborted)) => Err(PackFailure::Send(e)),
        (_, Err(e)) => Err(PackFailure::Pack(e)),
    }
}

/// Receives a virtual file: manifest bytes reassembled in order, data
/// handed to the unpacker at its offsets.
pub struct VfileSink {
    unpacker: Unpacker,
    manifest: Mutex<Reassembly>,
}

struct Reassembly {
    /// Bytes that came more than once, dropped.
    repeated: u64,
    next: u64,
    early: BTreeMap<u64, Vec<u8>>,
    early_bytes: usize,
    /// Where every tree's `early_bytes` add up ([`EARLY_ALL`]).
    all: &'static AtomicUsize,
}

impl Default for Reassembly {
    fn default() -> Self {
        Reassembly::counted_in(&EARLY_ALL)
    }
}

impl Drop for Reassembly {
    fn drop(&mut self) {
        self.all.fetch_sub(self.early_bytes, Ordering::Relaxed);
    }
}

impl Reassembly {
    fn counted_in(all: &'static AtomicUsize) -> Self {
        Reassembly { repeated: 0, next: 0, early: BTreeMap::new(), early_bytes: 0, all }
    }

    fn charge(&mut self, n: usize) -> usize {
        self.early_bytes += n;
        self.all.fetch_add(n, Ordering::Relaxed) + n
    }

    fn release(&mut self, n: usize) {
        self.early_bytes -= n;
        self.all.fetch_sub(n, Ordering::Relaxed);
    }

    /// Manifest bytes at `off`, to wait until the bytes before them came.
    /// Bytes already handed on are dropped unread. A chunk at the offset
    /// of one still waiting (its copy) must agree with it where they
    /// overlap, or the manifest is refused: both come from the same
    /// sender, so a difference is its fault, and which one arrived first
    /// must not decide the tree. The longer of the two is kept.
    fn add(&mut self, off: u64, buf: &[u8]) -> io::Result<()> {
        let skip = self.next.saturating_sub(off).min(buf.len() as u64);
        let (off, buf) = (off + skip, &buf[skip as usize..]);
        self.repeated += skip;
        let waiting = self.early.get(&off).map_or(&[][..], Vec::as_slice);
        let common = waiting.len().min(buf.len());
        if waiting[..common] != buf[..common] {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "manifest chunk and its copy differ"));
        }
        let waiting = waiting.len();
        if buf.len() <= waiting {
            self.repeated += buf.len() as u64;
            return Ok(());
        }
        self.repeated += waiting as u64;
        let all = self.charge(held(buf.len()));
        if let Some(replaced) = self.early.insert(off, buf.to_vec()) {
            self.release(held(replaced.len()));
        }
        if self.early_bytes > MAX_EARLY_MANIFEST {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "manifest gap too large"));
        }
        if all > MAX_EARLY_MANIFEST_ALL {
            let mib = MAX_EARLY_MANIFEST_ALL >> 20;
            let why = format!("the manifests of the trees being received hold over {mib} MiB waiting for gaps");
            return Err(io::Error::new(io::ErrorKind::ResourceBusy, why));
        }
        Ok(())
    }

    /// The next bytes in order, if they came: a waiting chunk that starts
    /// at or before `next`, less what was taken of it.
    fn pop_next(&mut self) -> Option<Vec<u8>> {
        loop {
            let (&at, _) = self.early.first_key_value().filter(|(&at, _)| at <= self.next)?;
            let mut chunk = self.early.remove(&at)?;
            self.release(held(chunk.len()));
            let end = at + chunk.len() as u64;
            self.repeated += self.next.min(end) - at;
            if end > self.next {
                chunk.drain(..(self.next - at) as usize);
                self.next = end;
                return Some(chunk);
            }
        }
    }
}

/// Manifest bytes that may wait for a gap to fill (a hostile sender could
/// otherwise make us buffer without bound), each waiting chunk charged
/// [`held`].
const MAX_EARLY_MANIFEST: usize = 64 << 20;

/// What all trees received at once may hold of [`MAX_EARLY_MANIFEST`]:
/// each tree's own limit let a writer hold 64 MiB per session, 1.5 GB
/// with 24 sessions (a security hunt's find). Past it a tree fails as a
/// busy server's (450), to be tried again.
const MAX_EARLY_MANIFEST_ALL: usize = 256 << 20;

/// Manifest bytes every tree being received holds waiting, charged
/// [`held`].
static EARLY_ALL: AtomicUsize = AtomicUsize::new(0);

/// What holding one waiting chunk costs beyond its bytes (a map entry and
/// a vector: about 100 bytes), charged against [`MAX_EARLY_MANIFEST`] so
/// that 1-byte chunks cannot hold a hundred times the limit (a review
/// finding).
const EARLY_CHUNK_COST: usize = 256;

/// What a waiting chunk of `len` bytes is charged.
fn held(len: usize) -> usize {
    len + EARLY_CHUNK_COST
}

impl VfileSink {
    /// Wrap an unpacker.
    pub fn new(unpacker: Unpacker) -> Self {
        VfileSink { unpacker, manifest: Mutex::new(Reassembly::default()) }
    }

    /// Manifest bytes at `off`, passed on in order.
    fn manifest_at(&self, off: u64, buf: &[u8]) -> io::Result<()> {
        let mut m = self.manifest.lock().unwrap_or_else(|e| e.into_inner());
        m.add(off, buf)?;
        while let Some(chunk) = m.pop_next() {
            self.unpacker.manifest_bytes(&chunk)?;
        }
        Ok(())
    }

    /// Give up a tree whose transfer broke: what the receiver holds for a
    /// resumed try ([`Unpacker::give_up`]).
    pub fn give_up(self) -> Option<crate::vfile::Held> {
        self.unpacker.give_up()
    }

    /// Everything arrived: complete the tree (or say what is missing).
    pub fn finish(self) -> Result<UnpackStats> {
        let m = self.manifest.into_inner().unwrap_or_else(|e| e.into_inner());
        if !m.early.is_empty() {
            return Err(EngineError::Protocol("manifest has a gap".into()));
        }
        let stats = self.unpacker.finish().map_err(EngineError::from)?;
        Ok(UnpackStats { manifest_repeated: m.repeated, ..stats })
    }
}

impl Sink for VfileSink {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if offset >= MANIFEST_COPY_BASE {
            self.manifest_at(offset - MANIFEST_COPY_BASE, buf)
        } else if offset >= MANIFEST_BASE {
            self.manifest_at(offset - MANIFEST_BASE, buf)
        } else {
            self.unpacker.write_block(offset, buf).map_err(io::Error::from)
        }
    }
    fn data_path(&self) -> crate::DataPath {
        crate::DataPath::Tree
    }
}

/// Receive options for a virtual file (its offsets go up to the manifest space).
pub fn recv_opts(idle: std::time::Duration) -> RecvOpts {
    RecvOpts { base: 0, max_offset: u64::MAX >> 1, idle }
}

#[cfg(test)]
mod tests {
    use super::{Reassembly, EARLY_CHUNK_COST};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Feed `(offset, bytes)` pieces; what comes out in order.
    fn reassemble(pieces: &[(u64, &[u8])]) -> Vec<u8> {
        let mut m = Reassembly::default();
        let mut out = Vec::new();
        for &(off, buf) in pieces {
            m.add(off, buf).unwrap();
            while let Some(chunk) = m.pop_next() {
                out.extend_from_slice(&chunk);
            }
        }
        let waiting: usize = m.early.values().map(Vec::len).sum();
        assert_eq!(
            m.early_bytes,
            waiting + EARLY_CHUNK_COST * m.early.len(),
            "early bytes counted, with what each costs"
        );
        let sent: usize = pieces.iter().map(|(_, b)| b.len()).sum();
        assert_eq!(m.repeated as usize + out.len() + waiting, sent, "every byte counted once");
        out
    }

    #[test]
    fn tiny_chunks_behind_a_gap_are_charged_what_they_hold() {
        let mut m = Reassembly::default();
        // 64 MiB / 257 per 1-byte chunk: refused after about 261 thousand, not 64 Mi.
        let refused = (1..1_000_000u64).find_map(|off| m.add(off, b"x").err());
        assert!(refused.is_some_and(|e| e.to_string().contains("manifest gap too large")));
        assert!(m.early.len() < 262_000, "{}", m.early.len());
    }

    /// Trees held together are limited too, as a busy server's error;
    /// what a tree held is given back when it ends.
    #[test]
    fn trees_together_may_hold_only_so_much_waiting() {
        static ALL: AtomicUsize = AtomicUsize::new(0);
        let chunk = vec![7u8; 1 << 20];
        let fill = |m: &mut Reassembly| (1..=60u64).find_map(|i| m.add(i << 20, &chunk).err());
        let mut trees: Vec<Reassembly> = (0..4).map(|_| Reassembly::counted_in(&ALL)).collect();
        assert!(trees.iter_mut().all(|m| fill(m).is_none()), "4 x 60 MiB fit");
        let mut fifth = Reassembly::counted_in(&ALL);
        let e = fill(&mut fifth).expect("a fifth tree is refused");
        assert_eq!(e.kind(), std::io::ErrorKind::ResourceBusy, "{e}");
        drop((trees, fifth));
        assert_eq!(ALL.load(Ordering::Relaxed), 0, "all given back");
        assert!(fill(&mut Reassembly::counted_in(&ALL)).is_none());
    }

    #[test]
    fn copies_and_overlaps_come_out_once_in_order() {
        let want = b"abcdefghij".to_vec();
        // Each chunk twice, in order; the copy first; copies only.
        assert_eq!(reassemble(&[(0, b"abc"), (0, b"abc"), (3, b"defghij"), (3, b"defghij")]), want);
        assert_eq!(reassemble(&[(3, b"defghij"), (0, b"abc"), (3, b"defghij"), (0, b"abc")]), want);
        // A copy waiting behind a gap, the gap filled by a longer chunk.
        assert_eq!(reassemble(&[(5, b"fg"), (5, b"fg"), (0, b"abcdefgh"), (8, b"ij")]), want);
        // Overlapping chunks: what was taken stands, the rest goes on.
        assert_eq!(reassemble(&[(0, b"abcd"), (2, b"cdefg"), (6, b"ghij")]), want);
        assert_eq!(reassemble(&[(4, b"efghij"), (4, b"ef"), (0, b"abcde")]), want);
        // A shorter copy at a waiting chunk's offset drops; a longer one replaces it.
        assert_eq!(reassemble(&[(2, b"cd"), (2, b"cdefghij"), (0, b"ab")]), want);
        assert_eq!(reassemble(&[(2, b"cdefghij"), (2, b"cd"), (0, b"ab")]), want);
        // Nothing before the first byte: nothing out.
        assert!(reassemble(&[(1, b"bc"), (1, b"bc")]).is_empty());
    }

    #[test]
    fn a_copy_that_disagrees_with_the_waiting_chunk_is_refused() {
        for (first, second) in [(&b"cd"[..], &b"cX"[..]), (b"cd", b"cXefgh"), (b"cdefgh", b"Xd")] {
            let mut m = Reassembly::default();
            m.add(2, first).unwrap();
            let e = m.add(2, second).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
            assert!(e.to_string().contains("differ"), "{e}");
        }
    }
}

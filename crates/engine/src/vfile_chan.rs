//! The large virtual file on a MODE E channel (lightpath extension `LPVF`).
//!
//! The file data of the virtual file travels at its own offsets
//! `[0, total)`; the manifest travels on the same parallel streams at
//! offsets from [`MANIFEST_BASE`] on. The sender hands out manifest chunks
//! first whenever one is waiting, so entries usually arrive before their
//! data; the receiver reassembles the manifest in order and parks data
//! that comes early (the unpacker bounds that memory).

use crate::error::{EngineError, Result};
use crate::io::Sink;
use crate::modee::{OutBlock, Payload, RecvOpts, Supply};
use crate::progress::Control;
use crate::vfile::{Pack, PackItem, PackReader, PackStats, UnpackStats, Unpacker, VfileError};
use crate::DataChannel;
use std::collections::BTreeMap;
use std::io;
use std::sync::Mutex;
use std::task::Poll;
use std::time::Duration;

/// Wire offset of the first manifest byte (2^62: far above any data offset).
pub const MANIFEST_BASE: u64 = 1 << 62;

/// Send `pack` on the prepared MODE E connections of `dc`.
///
/// Each stream thread takes one item ([`Pack::next_item`]) and writes it
/// before taking the next, so a manifest chunk is on the wire before any
/// data it covers is taken, and never behind such data on its own stream.
pub fn send_pack(dc: &mut DataChannel, pack: &Pack, block: u64, ctl: &Control) -> Result<u64> {
    let reader = pack.reader();
    ctl.set_data_path(crate::DataPath::Tree);
    let r = dc.send_blocks_e(&PackSupply { pack, reader: &reader, block }, ctl);
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
}

impl<'a> Supply<'a> for PackSupply<'a> {
    fn next(&self) -> io::Result<Option<OutBlock<'a>>> {
        let Poll::Ready(item) = self.pack.try_next_item(self.block)? else {
            return Err(io::ErrorKind::WouldBlock.into());
        };
        Ok(item.map(|item| match item {
            PackItem::Manifest { at, bytes } => {
                OutBlock { wire_offset: MANIFEST_BASE + at, len: bytes.len() as u64, payload: Payload::Bytes(bytes) }
            }
            PackItem::Data { offset, len } => {
                OutBlock { wire_offset: offset, len, payload: Payload::Read(self.reader, offset) }
            }
        }))
    }
    fn wait(&self, timeout: Duration) {
        self.pack.wait_ready(timeout);
    }
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

#[derive(Default)]
struct Reassembly {
    next: u64,
    early: BTreeMap<u64, Vec<u8>>,
    early_bytes: usize,
}

/// Manifest bytes that may wait for a gap to fill (a hostile sender could
/// otherwise make us buffer without bound).
const MAX_EARLY_MANIFEST: usize = 64 << 20;

impl VfileSink {
    /// Wrap an unpacker.
    pub fn new(unpacker: Unpacker) -> Self {
        VfileSink { unpacker, manifest: Mutex::new(Reassembly::default()) }
    }

    fn manifest_at(&self, off: u64, buf: &[u8]) -> io::Result<()> {
        let mut m = self.manifest.lock().unwrap_or_else(|e| e.into_inner());
        if off < m.next || m.early.contains_key(&off) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "manifest bytes sent twice"));
        }
        m.early_bytes += buf.len();
        if m.early_bytes > MAX_EARLY_MANIFEST {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "manifest gap too large"));
        }
        m.early.insert(off, buf.to_vec());
        loop {
            let next = m.next;
            let Some(chunk) = m.early.remove(&next) else { break };
            m.early_bytes -= chunk.len();
            m.next += chunk.len() as u64;
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
        self.unpacker.finish().map_err(EngineError::from)
    }
}

impl Sink for VfileSink {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if offset >= MANIFEST_BASE {
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

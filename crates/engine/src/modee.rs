//! MODE E over N parallel TCP connections (GFD.20 extended block mode).
//!
//! Sender: every connection takes the next block from a shared supplier,
//! so any stream carries any block and a single file is parallel. Each
//! stream ends with EOD; stream 0 carries EOF|EOD with the stream count.
//! Receiver: header + payload of each block are written at the block's
//! offset; blocks may come in any order but never overlap. The transfer is
//! complete when EOF arrived and as many EODs as it announced. Connections
//! stay open afterwards for reuse unless the peer set CLOSE.
//!
//! The bytes move on the fixed I/O threads of [`crate::iothreads`]
//! (network threads per NIC, disk threads per device), shared by every
//! transfer of the process; the calling thread only manages its transfer.

use crate::error::{EngineError, Result};
use crate::io::{Sink, Source};
use crate::progress::Control;
use lightpath_proto::RangeSet;
use lightpath_sys::net::SockOpts;
use std::net::{TcpListener, TcpStream};
use std::sync::Mutex;
use std::time::Duration;

use lightpath_plan::BlockCursor;
pub use lightpath_plan::{Growth, SendPlan};

fn next_block(plan: &SendPlan, cur: &Mutex<BlockCursor>) -> Option<(u64, u64)> {
    let b = cur.lock().unwrap_or_else(|e| e.into_inner()).next_block(plan)?;
    Some((b.offset, b.len))
}

/// The payload of one outgoing block.
pub enum Payload<'a> {
    /// Bytes in memory (manifest chunks, packed small files).
    Bytes(Vec<u8>),
    /// A range of a file, sent with `sendfile` (zero copy).
    File(std::sync::Arc<std::fs::File>, u64),
    /// Read from a source at this offset (by a disk thread, into a pooled buffer).
    Read(&'a dyn Source, u64),
}

/// One outgoing block: its offset on the wire, length and payload.
pub struct OutBlock<'a> {
    /// Offset written in the block header.
    pub wire_offset: u64,
    /// Payload length.
    pub len: u64,
    /// Where the payload comes from.
    pub payload: Payload<'a>,
    /// A block to keep off slow streams, and apart from its copies: see
    /// [`Apart`].
    pub apart: Option<Apart>,
}

/// A block that must not wait behind much unsent data (a manifest chunk):
/// a connection whose unsent bytes need long to leave passes it over for a
/// while. Blocks that share `key` are `copies` copies of one another: no
/// connection sends two of them, so that one stalled stream does not hold
/// them all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Apart {
    /// Shared by a block's copies (a manifest chunk's offset).
    pub key: u64,
    /// How many blocks share the key (1: no copies).
    pub copies: u8,
}

/// Where the sender threads get their blocks.
///
/// The disk threads that call [`Supply::next`] are shared by every session
/// of the process, so a supply must not sit waiting on its source there: one
/// that has nothing *yet* (a tree whose walk is behind) returns an error of
/// kind [`std::io::ErrorKind::WouldBlock`], and the job's own management
/// thread waits in [`Supply::wait`] before asking again.
pub trait Supply<'a>: Sync {
    /// The next block; `None` ends the transfer.
    fn next(&self) -> std::io::Result<Option<OutBlock<'a>>>;
    /// Wait, at most `timeout`, until [`Supply::next`] may have a block
    /// after a `WouldBlock`.
    fn wait(&self, timeout: Duration) {
        std::thread::sleep(timeout);
    }
    /// Called once every block is written, before the streams' EOD and
    /// EOF: an error fails the send instead, so the receiver never takes
    /// the data for whole (a source that changed meanwhile).
    fn finish(&self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A supply of blocks from `src` whose [`Supply::finish`] asks whether
/// `src` changed ([`Source::unchanged`]).
struct FromSource<'a, F> {
    next: F,
    src: &'a dyn Source,
}

impl<'a, F: Fn() -> std::io::Result<Option<OutBlock<'a>>> + Sync> Supply<'a> for FromSource<'a, F> {
    fn next(&self) -> std::io::Result<Option<OutBlock<'a>>> {
        (self.next)()
    }
    fn finish(&self) -> std::io::Result<()> {
        self.src.unchanged()
    }
}

/// A closure is a supply that never says `WouldBlock`.
impl<'a, F: Fn() -> std::io::Result<Option<OutBlock<'a>>> + Sync> Supply<'a> for F {
    fn next(&self) -> std::io::Result<Option<OutBlock<'a>>> {
        self()
    }
}

/// What the sender threads take blocks from.
pub type Supplier<'a> = dyn Supply<'a> + 'a;

/// Send `plan` from `src` over `conns`. Returns bytes sent.
pub fn send(conns: &mut [TcpStream], src: &dyn Source, plan: &SendPlan, ctl: &Control) -> Result<u64> {
    let cursor = Mutex::new(BlockCursor::new());
    let zero_copy = src
        .file()
        .map(|f| f.try_clone())
        .transpose()
        .map_err(|e| EngineError::io("source", e))?
        .map(std::sync::Arc::new);
    // Blocks read into pool buffers are at most a buffer long: only
    // sendfile's grow.
    let read_plan;
    let plan = if zero_copy.is_some() || plan.grow.is_none() {
        plan
    } else {
        read_plan = SendPlan { grow: None, ..plan.clone() };
        &read_plan
    };
    let supplier = move || -> std::io::Result<Option<OutBlock>> {
        let Some((off, len)) = next_block(plan, &cursor) else { return Ok(None) };
        let payload = match &zero_copy {
            Some(f) => Payload::File(f.clone(), off),
            None => Payload::Read(src, off),
        };
        Ok(Some(OutBlock { wire_offset: off - plan.wire_base, len, payload, apart: None }))
    };
    crate::iothreads::send_blocks(conns, &FromSource { next: supplier, src }, src.device(), ctl)
}

/// Send the blocks `supplier` hands out over `conns`, any block on any
/// stream, then EOD on every stream and EOF on stream 0. The work runs on
/// the process's I/O threads ([`crate::iothreads`]); this thread manages it.
pub fn send_blocks(conns: &mut [TcpStream], supplier: &Supplier, ctl: &Control) -> Result<u64> {
    crate::iothreads::send_blocks(conns, supplier, None, ctl)
}

/// Receiver limits.
#[derive(Debug, Clone)]
pub struct RecvOpts {
    /// Added to every block offset before writing (ESTO A).
    pub base: u64,
    /// Blocks ending past this offset are refused.
    pub max_offset: u64,
    /// Fail when no byte moved for this long.
    pub idle: Duration,
}

/// Receive one MODE E transfer on `conns` (cached connections) plus any
/// that arrive on `listener`, each tuned with its [`SockOpts`] as accepted
/// (connections that completed their handshake before the listener got the
/// options did not inherit them). Reusable connections are left in `conns`.
/// Returns the ranges written (relative to the wire offsets).
pub fn recv(
    conns: &mut Vec<TcpStream>,
    listener: Option<(&TcpListener, &SockOpts)>,
    sink: &dyn Sink,
    opts: &RecvOpts,
    ctl: &Control,
) -> Result<RangeSet> {
    crate::iothreads::recv(conns, listener, sink, opts, ctl)
}

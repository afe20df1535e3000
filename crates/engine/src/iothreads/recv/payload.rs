//! Reading a block's payload into pieces for the disk.
//!
//! A connection reads up to [`READ_AT_ONCE`] of a block at a time: it
//! waits (`SO_RCVLOWAT`) until that much is queued, takes a pool buffer
//! per piece, reads them all with one `readv`, and queues them together,
//! so a disk task finds them back to back and writes them as one. One
//! piece per wake-up, read and write cost a client 0.31 s of CPU for 1 GiB
//! over the 95 ms lab at 8 streams; four at once 0.22 s (6 interleaved
//! hand runs each, 1 MiB blocks from the server, the same TTC). Buffers
//! stay [`crate::WRITE_CHUNK`] long: pool buffers of 1 MiB that held
//! 256 KiB pieces made the process fault in (and zero) four times the
//! memory. Spliced pieces (loopback) still go one pipe at a time.

use super::{io_step, piece_len, Data, Fill, Phase, Piece, RecvConn, Result, Step, Turn};
use crate::EngineError;
use std::io::{ErrorKind, IoSliceMut, Read};
use std::time::Instant;

/// Most payload bytes a connection reads in one go (four pieces).
pub(super) const READ_AT_ONCE: usize = 4 * crate::WRITE_CHUNK;

impl RecvConn {
    /// Bytes the next read of a payload with `left` bytes to go asks for.
    pub(super) fn read_len(&self, left: u64) -> usize {
        if self.job.splice {
            piece_len(left)
        } else {
            left.min(READ_AT_ONCE as u64) as usize
        }
    }

    pub(super) fn read_payload(&mut self) -> Result<Step> {
        if self.job.discard {
            return self.discard_payload();
        }
        let Phase::Payload { left, .. } = self.phase else { return Ok(Step::Again) };
        if self.fills.is_empty() {
            if let Some(stop) = self.take_room(left) {
                return Ok(stop);
            }
        }
        let k = match self.fill_some() {
            Ok(0) => return Err(EngineError::PeerClosed),
            Ok(k) => k,
            // The socket ran dry or the pipe is full: queue what the pipe
            // holds, then try again with a fresh one (which tells which).
            Err(e) if e.kind() == ErrorKind::WouldBlock && self.partial_pipe() => {
                self.queue_front()?;
                return Ok(Step::Again);
            }
            Err(e) => return io_step(e),
        };
        self.job.lock().last_activity = Instant::now();
        while self.fills.first().is_some_and(|f| f.got == f.want) {
            self.queue_front()?;
        }
        Ok(Step::Moved(k))
    }

    /// Take buffers (or a pipe) for the next read, once its bytes are
    /// queued; `Some` when the connection must stop instead.
    ///
    /// Buffers are taken only once the read can be done whole: a stream's
    /// piece takes ~70 ms to arrive at 1 Gbit/s over 32 streams, and
    /// buffers held that long by every stream used up the job's (a wake-up
    /// of the management thread, a disk task and a network poke per piece).
    /// Setting the mark again (`lowat` 0) makes the kernel re-check
    /// readiness, so bytes already queued, a closed or squeezed socket
    /// still wake it.
    fn take_room(&mut self, left: u64) -> Option<Step> {
        let want = self.read_len(left);
        if !self.armed && lightpath_sys::net::recv_queued(&self.stream).is_ok_and(|n| n < want) {
            self.armed = true;
            self.lowat = 0;
            return Some(Step::Stop(Turn::Blocked));
        }
        self.armed = false;
        let mut rest = want;
        // As many pieces as the job has room for (at least one, or wait).
        while rest > 0 {
            let len = rest.min(crate::WRITE_CHUNK);
            let Some(data) = self.job.slot(len) else { break };
            let pipe = matches!(data, Data::Pipe(_));
            self.fills.push(Fill { data, got: 0, want: len });
            rest -= len;
            if pipe {
                break;
            }
        }
        self.fills.is_empty().then_some(Step::Stop(Turn::Paused))
    }

    /// One read into the pieces being filled: a splice into the pipe, or a
    /// `readv` into every buffer's rest. Returns the bytes read.
    fn fill_some(&mut self) -> std::io::Result<usize> {
        if let [Fill { data: Data::Pipe(pipe), got, want }] = self.fills.as_mut_slice() {
            let k = pipe.fill_from(&self.stream, *want - *got)?;
            *got += k;
            return Ok(k);
        }
        let mut rests = self.fills.iter_mut().filter_map(|f| match &mut f.data {
            Data::Buf(b) => Some(IoSliceMut::new(&mut b[f.got..f.want])),
            Data::Pipe(_) => None,
        });
        let mut iov: [IoSliceMut; READ_AT_ONCE / crate::WRITE_CHUNK] =
            std::array::from_fn(|_| rests.next().unwrap_or_else(|| IoSliceMut::new(&mut [])));
        let k = self.stream.read_vectored(&mut iov)?;
        let mut n = k;
        for f in &mut self.fills {
            let take = n.min(f.want - f.got);
            f.got += take;
            n -= take;
        }
        Ok(k)
    }

    /// A pipe holds some of its piece.
    fn partial_pipe(&self) -> bool {
        matches!(self.fills.as_slice(), [Fill { data: Data::Pipe(_), got, .. }] if *got > 0)
    }

    /// Hand the first piece being filled (its `got` bytes) to the disk;
    /// end the block if it was its last.
    fn queue_front(&mut self) -> Result<()> {
        let Phase::Payload { h, at, wire, left } = &mut self.phase else { return Ok(()) };
        if self.fills.is_empty() {
            return Ok(());
        }
        let Fill { data, got, .. } = self.fills.remove(0);
        let n = got as u64;
        self.job.queue(Piece { data, len: got, at: *at, wire: *wire });
        (*at, *wire, *left) = (*at + n, *wire + n, *left - n);
        let (h, end) = (*h, *left == 0);
        if end {
            self.block_done(&h)?;
        }
        Ok(())
    }
}

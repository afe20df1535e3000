//! Receiving for a sink that keeps nothing (`/dev/null`, memory-to-memory
//! runs).
//!
//! A piece for such a sink used to go the whole way: a pool buffer, the
//! job's queue, a disk task that wrote nothing, the buffer back to the
//! pool. The buffers in turn (a few MiB) do not stay in the core's cache,
//! so the kernel's copy out of the socket wrote to cold memory. Here a
//! connection reads its payload into one scratch buffer per network thread
//! and only records the range; the management thread reports the ranges to
//! the transfer's `Control` at its next check.

use super::{io_step, piece_len, Phase, RecvConn, Result, Step};
use crate::EngineError;
use std::cell::RefCell;
use std::io::Read;
use std::time::Instant;

thread_local! {
    /// Where the payload for a discarding sink lands: one piece's size.
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0; crate::WRITE_CHUNK]);
}

impl RecvConn {
    /// Read some of the current block's payload and drop it (see the
    /// module notes); the low-water mark still asks for a piece at a time.
    pub(super) fn discard_payload(&mut self) -> Result<Step> {
        let RecvConn { phase, stream, job, .. } = self;
        let Phase::Payload { h, at, wire, left, .. } = phase else { return Ok(Step::Again) };
        let want = piece_len(*left);
        let r = SCRATCH.with_borrow_mut(|s| stream.read(&mut s[..want]));
        let k = match r {
            Ok(0) => return Err(EngineError::PeerClosed),
            Ok(k) => k,
            Err(e) => return io_step(e),
        };
        let n = k as u64;
        let mut st = job.lock();
        st.last_activity = Instant::now();
        st.discarded.insert(*wire, *wire + n);
        st.read += n;
        drop(st);
        (*at, *wire, *left) = (*at + n, *wire + n, *left - n);
        if *left == 0 {
            let h = *h;
            self.block_done(&h)?;
        }
        Ok(Step::Moved(k))
    }
}

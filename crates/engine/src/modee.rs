//! MODE E over N parallel TCP connections (GFD.20 extended block mode).
//!
//! Sender: one thread per connection takes the next block from a shared
//! cursor, so any stream carries any block and a single file is parallel.
//! Each stream ends with EOD; stream 0 carries EOF|EOD with the stream count.
//! Receiver: one thread per connection reads header + payload and writes at
//! the block's offset; blocks may come in any order but never overlap.
//! The transfer is complete when EOF arrived and as many EODs as it
//! announced. Connections stay open afterwards for reuse unless the peer
//! set CLOSE.

use crate::error::{EngineError, Result};
use crate::io::{Sink, Source};
use crate::progress::Control;
use lightpath_proto::modee::HEADER_LEN;
use lightpath_proto::{BlockHeader, RangeSet};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use lightpath_plan::BlockCursor;
pub use lightpath_plan::SendPlan;

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
    /// Read from a source at this offset into the stream's reused buffer.
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
}

/// Where the sender threads get their blocks: `None` ends the transfer.
pub type Supplier<'a> = dyn Fn() -> std::io::Result<Option<OutBlock<'a>>> + Sync + 'a;

/// Send `plan` from `src` over `conns`. Returns bytes sent.
pub fn send(conns: &mut [TcpStream], src: &dyn Source, plan: &SendPlan, ctl: &Control) -> Result<u64> {
    let cursor = Mutex::new(BlockCursor::new());
    let zero_copy = src
        .file()
        .map(|f| f.try_clone())
        .transpose()
        .map_err(|e| EngineError::io("source", e))?
        .map(std::sync::Arc::new);
    let supplier = move || -> std::io::Result<Option<OutBlock>> {
        let Some((off, len)) = next_block(plan, &cursor) else { return Ok(None) };
        let payload = match &zero_copy {
            Some(f) => Payload::File(f.clone(), off),
            None => Payload::Read(src, off),
        };
        Ok(Some(OutBlock { wire_offset: off - plan.wire_base, len, payload }))
    };
    send_blocks(conns, &supplier, ctl)
}

/// Send the blocks `supplier` hands out over `conns`, any block on any
/// stream, then EOD on every stream and EOF on stream 0.
pub fn send_blocks(conns: &mut [TcpStream], supplier: &Supplier, ctl: &Control) -> Result<u64> {
    if conns.is_empty() {
        return Err(EngineError::Setup("no data connection".into()));
    }
    let n = conns.len() as u64;
    let results: Vec<Result<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> =
            conns.iter_mut().enumerate().map(|(i, c)| s.spawn(move || send_stream(i, n, c, supplier, ctl))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(EngineError::Protocol("sender panicked".into()))))
            .collect()
    });
    let mut total = 0;
    for r in results {
        total += r?;
    }
    Ok(total)
}

fn send_stream(i: usize, n: u64, conn: &mut TcpStream, supplier: &Supplier, ctl: &Control) -> Result<u64> {
    let ctx = || format!("data connection {i}");
    let mut sent = 0;
    let mut buf = Vec::new();
    loop {
        if ctl.is_cancelled() {
            return Err(EngineError::Aborted);
        }
        let Some(b) = supplier().map_err(|e| EngineError::io("reading source", e))? else { break };
        let hdr = BlockHeader::data(b.wire_offset, b.len).encode();
        match &b.payload {
            Payload::File(f, off) => {
                conn.write_all(&hdr).map_err(|e| EngineError::io(ctx(), e))?;
                lightpath_sys::net::sendfile_all(conn, f, *off, b.len).map_err(|e| EngineError::io(ctx(), e))?
            }
            Payload::Bytes(v) => write_both(conn, &hdr, &v[..b.len as usize]).map_err(|e| EngineError::io(ctx(), e))?,
            Payload::Read(src, off) => {
                buf.resize(b.len as usize, 0);
                src.read_exact_at(&mut buf, *off).map_err(|e| EngineError::io("reading source", e))?;
                write_both(conn, &hdr, &buf).map_err(|e| EngineError::io(ctx(), e))?;
            }
        }
        ctl.add(b.len);
        sent += b.len;
    }
    let last = if i == 0 { BlockHeader::eof_eod(n) } else { BlockHeader::eod() };
    conn.write_all(&last.encode()).map_err(|e| EngineError::io(ctx(), e))?;
    conn.flush().map_err(|e| EngineError::io(ctx(), e))?;
    Ok(sent)
}

/// Header and payload in one `writev` where the socket takes it all.
fn write_both(conn: &mut TcpStream, hdr: &[u8], payload: &[u8]) -> std::io::Result<()> {
    let mut bufs = [std::io::IoSlice::new(hdr), std::io::IoSlice::new(payload)];
    let mut slices = &mut bufs[..];
    while !slices.is_empty() {
        match conn.write_vectored(slices) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => std::io::IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
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

#[derive(Default)]
struct RecvState {
    claimed: RangeSet,
    eof_expected: Option<u64>,
    eods: u64,
    done: bool,
    error: Option<EngineError>,
}

struct Shared<'a> {
    st: Mutex<RecvState>,
    cv: Condvar,
    sink: &'a dyn Sink,
    opts: &'a RecvOpts,
    ctl: &'a Control,
    waker: lightpath_sys::net::Waker,
}

impl Shared<'_> {
    fn lock(&self) -> std::sync::MutexGuard<'_, RecvState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn fail(&self, e: EngineError) {
        let mut st = self.lock();
        if st.error.is_none() {
            st.error = Some(e);
        }
        self.cv.notify_all();
        self.waker.wake();
    }
    fn finished(&self) -> bool {
        let st = self.lock();
        st.done || st.error.is_some() || self.ctl.is_cancelled()
    }
}

/// Receive one MODE E transfer on `conns` (cached connections) plus any
/// that arrive on `listener`. Reusable connections are left in `conns`.
/// Returns the ranges written (relative to the wire offsets).
pub fn recv(
    conns: &mut Vec<TcpStream>,
    listener: Option<&TcpListener>,
    sink: &dyn Sink,
    opts: &RecvOpts,
    ctl: &Control,
) -> Result<RangeSet> {
    let waker = lightpath_sys::net::Waker::new().map_err(|e| EngineError::io("creating waker", e))?;
    let shared = Shared { st: Mutex::new(RecvState::default()), cv: Condvar::new(), sink, opts, ctl, waker };
    let kept = std::thread::scope(|s| {
        let sh = &shared;
        let mut handles: Vec<_> = conns.drain(..).map(|c| s.spawn(move || recv_stream(c, sh))).collect();
        match listener {
            Some(l) => accept_loop(l, sh, |c| handles.push(s.spawn(move || recv_stream(c, sh)))),
            None => wait_done(sh),
        }
        handles.into_iter().filter_map(|h| h.join().ok().flatten()).collect::<Vec<_>>()
    });
    conns.extend(kept);
    let st = shared.st.into_inner().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = st.error {
        return Err(e);
    }
    if ctl.is_cancelled() {
        return Err(EngineError::Aborted);
    }
    Ok(st.claimed)
}

fn wait_done(sh: &Shared) {
    let mut st = sh.lock();
    while !(st.done || st.error.is_some() || sh.ctl.is_cancelled()) {
        st = sh.cv.wait_timeout(st, Duration::from_millis(100)).map(|r| r.0).unwrap_or_else(|e| e.into_inner().0);
    }
}

fn accept_loop(l: &TcpListener, sh: &Shared, mut spawn: impl FnMut(TcpStream)) {
    let started = Instant::now();
    let mut accepted = 0u64;
    while !sh.finished() {
        match sh.waker.wait(l, Duration::from_millis(50)) {
            Ok(true) => match l.accept() {
                Ok((c, _)) => {
                    accepted += 1;
                    if accepted > lightpath_proto::modee::MAX_STREAMS {
                        return sh.fail(EngineError::Protocol("too many data connections".into()));
                    }
                    spawn(c)
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return sh.fail(EngineError::io("accepting data connection", e)),
            },
            Ok(false) => {
                if accepted == 0 && sh.lock().eods == 0 && started.elapsed() > sh.opts.idle {
                    return sh.fail(EngineError::Idle(sh.opts.idle));
                }
            }
            Err(e) => return sh.fail(EngineError::io("waiting for data connections", e)),
        }
    }
}

/// Outcome of waiting for bytes at a block boundary.
#[derive(Debug, PartialEq, Eq)]
enum Got {
    /// The buffer was filled.
    Full,
    /// The transfer finished while this stream was idle (keep it).
    Finished,
    /// The transfer finished and the peer closed this stream (drop it).
    Closed,
}

/// Read exactly `buf.len()` bytes, unless the transfer finishes while we wait
/// at a block boundary (`at_boundary` and nothing read yet).
fn read_full(c: &mut TcpStream, buf: &mut [u8], sh: &Shared, at_boundary: bool) -> Result<Got> {
    let mut got = 0;
    let mut last = Instant::now();
    while got < buf.len() {
        if sh.ctl.is_cancelled() || sh.lock().error.is_some() {
            return Err(EngineError::Aborted);
        }
        match c.read(&mut buf[got..]) {
            Ok(0) if got == 0 && at_boundary && sh.finished() => return Ok(Got::Closed),
            Ok(0) => return Err(EngineError::Protocol("peer closed a data connection before EOD".into())),
            Ok(k) => {
                got += k;
                last = Instant::now();
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                if got == 0 && at_boundary && sh.finished() {
                    return Ok(Got::Finished);
                }
                if last.elapsed() > sh.opts.idle {
                    return Err(EngineError::Idle(sh.opts.idle));
                }
            }
            Err(e) => return Err(EngineError::io("data connection", e)),
        }
    }
    Ok(Got::Full)
}

/// Read blocks from one connection until its EOD. Returns the connection if
/// it may be reused.
fn recv_stream(mut c: TcpStream, sh: &Shared) -> Option<TcpStream> {
    if let Err(e) = c.set_read_timeout(Some(Duration::from_millis(100))) {
        sh.fail(EngineError::io("data connection", e));
        return None;
    }
    let mut buf = vec![0u8; crate::WRITE_CHUNK];
    loop {
        let mut raw = [0u8; HEADER_LEN];
        match read_full(&mut c, &mut raw, sh, true) {
            Ok(Got::Full) => {}
            Ok(Got::Finished) => return Some(c),
            Ok(Got::Closed) => return None,
            Err(e) => {
                sh.fail(e);
                return None;
            }
        }
        match handle_block(&mut c, &raw, &mut buf, sh) {
            Ok(None) => continue,
            Ok(Some(keep)) => return keep.then_some(c),
            Err(e) => {
                sh.fail(e);
                return None;
            }
        }
    }
}

/// Process one block. `Some(keep)` when the stream reached EOD.
fn handle_block(c: &mut TcpStream, raw: &[u8; HEADER_LEN], buf: &mut [u8], sh: &Shared) -> Result<Option<bool>> {
    let h = BlockHeader::parse(raw).map_err(|e| EngineError::Protocol(e.to_string()))?;
    let len = h.payload_len();
    if len > 0 {
        let start = claim(&h, sh)?;
        let mut done = 0;
        while done < len {
            let k = (len - done).min(buf.len() as u64) as usize;
            read_full(c, &mut buf[..k], sh, false)?;
            sh.sink.write_all_at(&buf[..k], start + done).map_err(|e| EngineError::io("writing data", e))?;
            done += k as u64;
        }
        sh.ctl.add_written(h.offset, h.offset + len);
    }
    if h.is_eof() {
        note_eof(h.offset, sh)?;
    }
    if !h.is_eod() {
        return Ok(None);
    }
    let mut st = sh.lock();
    st.eods += 1;
    check_done(&mut st);
    sh.cv.notify_all();
    sh.waker.wake();
    Ok(Some(!h.is_close()))
}

/// Reserve the block's range; returns where it is written.
fn claim(h: &BlockHeader, sh: &Shared) -> Result<u64> {
    let end = h.offset + h.count;
    let start = sh.opts.base.checked_add(h.offset).filter(|&s| s.checked_add(h.count).is_some());
    let start = start.ok_or_else(|| EngineError::Protocol("block offset overflows".into()))?;
    if start + h.count > sh.opts.max_offset {
        return Err(EngineError::Protocol(format!("block {}-{} beyond the allowed size", h.offset, end)));
    }
    let mut st = sh.lock();
    if st.claimed.overlaps(h.offset, end) {
        return Err(EngineError::Protocol(format!("overlapping block {}-{}", h.offset, end)));
    }
    st.claimed.insert(h.offset, end);
    Ok(start)
}

fn note_eof(count: u64, sh: &Shared) -> Result<()> {
    let mut st = sh.lock();
    match st.eof_expected {
        Some(n) if n != count => return Err(EngineError::Protocol(format!("second EOF with count {count} != {n}"))),
        _ => st.eof_expected = Some(count),
    }
    check_done(&mut st);
    sh.cv.notify_all();
    sh.waker.wake();
    Ok(())
}

fn check_done(st: &mut RecvState) {
    if let Some(n) = st.eof_expected {
        if st.eods >= n {
            st.done = true;
        }
    }
}

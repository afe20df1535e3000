//! Receiving a MODE E transfer on the I/O threads.
//!
//! Network threads parse each connection's block headers incrementally,
//! check them (bounds, overlap, EOF count) and take payload pieces of at
//! most [`crate::WRITE_CHUNK`] bytes, up to four at a time with one
//! `readv` (`payload`), queued to the job; the management
//! thread hands the queue to disk tasks that write the sink (a task goes on
//! with what was queued meanwhile, a few batches at most).
//!
//! A piece is read into a pool buffer (then `pwrite`, or one `pwritev` for
//! the pieces of a disk task that are back to back), or, when the sink
//! is a file and the bytes come over loopback (or the path is forced with
//! [`super::set_recv_splice`] or `LIGHTPATH_RECV_SPLICE=1`/`0`), spliced
//! from the socket into a pipe that the disk task splices into the file,
//! so the payload never crosses user space. Which path a transfer takes is
//! logged at info level (`-v`). A sink that keeps nothing (`/dev/null`)
//! takes neither: its payload is read into a scratch buffer and dropped
//! (`discard`).
//!
//! Unless forced, the path follows the measurements. Over the emulated
//! 95 ms path (1 GiB, 16 streams, MTU 9000) the receiving client used
//! 1.16-1.33 s of system time copying and 1.44-1.97 s splicing, at the
//! same wall time (4 runs each, interleaved): segments that arrive in
//! linear socket buffers (veth, TUN) are copied into fresh pages by the
//! socket splice, then copied again into the page cache. So the copy path
//! is the default there. Over loopback the sender's pages arrive by
//! reference, and once a file took one write at a time
//! ([`crate::Sink::serial_writes`]) splicing halved the client's CPU: 3 GiB
//! with -p 4, 4 interleaved pairs, 2.35-3.03 s and 1.6-2.4 s of client CPU
//! against 3.54-3.99 s and 3.7-4.0 s copying. So loopback splices. (An
//! earlier measurement found the two tied there; probably four writers
//! spinning on the inode lock hid the difference, which was not checked.)
//! The transfer is complete when EOF arrived, as many EODs as it announced,
//! and every piece is written. A connection stops being read after its EOD
//! (it is kept for reuse unless the peer set CLOSE).

use super::net::{Conn, Turn};
use super::{
    dup_nonblocking, engine, restore_blocking, stop_with, Registration, DISK_TASKS_PER_JOB, RECV_BUFFERS_PER_JOB,
};
use crate::error::{EngineError, Result};
use crate::io::Sink;
use crate::modee::RecvOpts;
use crate::pool::{BlockBuf, BufferPool};
use crate::progress::Control;
use lightpath_proto::modee::{HEADER_LEN, MAX_STREAMS};
use lightpath_proto::{BlockHeader, RangeSet};
use lightpath_sys::net::{SockOpts, Waker};
use lightpath_sys::scoped::Scope;
use lightpath_sys::splice::Pipe;
use std::collections::VecDeque;
use std::io::{ErrorKind, Read};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod discard;
mod payload;

/// Most separate ranges the blocks received so far may form. A sender's
/// holes are the blocks still in flight on its streams: hundreds, a few
/// thousand with many streams and small blocks. A peer that sends tiny
/// blocks apart from each other would otherwise grow the receiver's range
/// sets (here and in [`Control`]'s progress) by tens of bytes for every
/// 18 it sends.
const MAX_CLAIMED_RANGES: usize = 1 << 16;

/// Most pieces one disk task writes (fewer tasks when the queue builds
/// up). Pieces back to back in the sink go down as one `pwritev`: up to
/// 2 MiB per direct write instead of 256 KiB. 3 GiB over loopback with
/// `--fsync` (direct writes), 5 interleaved hand runs each, with batches of
/// 4: 4.61 s against 6.29 s with one write per piece (fio's copy 2.93 s).
const WRITE_BATCH: usize = 8;

/// Pieces queued before an idle job's management thread is woken to start
/// a disk task. Waking it for each piece cost a wake-up of the management
/// thread and one of a disk thread per 256 KiB.
const WAKE_BATCH: usize = 4;

/// Batches a disk task takes from its job before it gives its thread back
/// (the pool serves every job's tasks in turn).
const WRITE_ROUNDS: usize = 4;

/// Where a piece's bytes wait for the disk.
enum Data {
    /// Read into a pool buffer; written with `pwrite`.
    Buf(BlockBuf),
    /// Spliced from the socket into a pipe; moved into the file by `splice`.
    Pipe(Pipe),
}

/// A payload piece waiting for the disk.
struct Piece {
    data: Data,
    len: usize,
    /// Where it goes in the sink.
    at: u64,
    /// Its offset on the wire (for range markers).
    wire: u64,
}

/// A piece being filled from its connection.
struct Fill {
    data: Data,
    got: usize,
    want: usize,
}

/// Whether receives into files splice when nothing forces a path.
/// Where the bytes come over loopback, yes: the sender's pages arrive by
/// reference, so the socket -> pipe splice copies nothing. Elsewhere, no:
/// segments from veth and TUN (the emulated WAN) arrive in linear buffers
/// that the socket splice copies into fresh pages (see the module notes).
fn splice_by_default(conns: &[TcpStream], listener: Option<&TcpListener>) -> bool {
    let peer = conns.first().and_then(|c| c.peer_addr().ok());
    let ip = peer.or_else(|| listener.and_then(|l| l.local_addr().ok())).map(|a| a.ip());
    ip.is_some_and(|ip| ip.is_loopback())
}

/// Whether receives into files splice: forced by [`super::set_recv_splice`],
/// else by `LIGHTPATH_RECV_SPLICE` (1 splice, 0 copy), else
/// [`splice_by_default`].
fn splice_forced() -> Option<bool> {
    use std::sync::atomic::Ordering;
    match super::RECV_SPLICE.load(Ordering::Relaxed) {
        1 => Some(false),
        2 => Some(true),
        3 => None,
        _ => {
            let forced = match std::env::var("LIGHTPATH_RECV_SPLICE").as_deref() {
                Ok("1") => Some(true),
                Ok("0") => Some(false),
                _ => None,
            };
            let v = forced.map_or(3, |on| 1 + u8::from(on));
            let _ = super::RECV_SPLICE.compare_exchange(0, v, Ordering::Relaxed, Ordering::Relaxed);
            forced
        }
    }
}

struct State {
    claimed: RangeSet,
    eof_expected: Option<u64>,
    eods: u64,
    queue: VecDeque<Piece>,
    outstanding: usize,
    buffers: usize,
    pipes: Vec<Pipe>,
    error: Option<EngineError>,
    stopped: bool,
    last_activity: Instant,
    /// A connection found no free buffer: poke the network threads when one frees.
    net_waiting: bool,
    /// Ranges read for a sink that keeps nothing, not yet reported to the
    /// transfer's [`Control`] (see `discard`).
    discarded: RangeSet,
    /// Payload bytes read off the connections (queued or discarded): at
    /// the end, all that the claimed blocks cover.
    read: u64,
}

impl State {
    fn finished(&self) -> bool {
        self.eof_expected.is_some_and(|n| self.eods >= n)
    }
}

/// What the network threads and disk tasks share about one receive.
struct Job {
    st: Mutex<State>,
    notify: Waker,
    base: u64,
    max_offset: u64,
    /// Pieces go through pipes (the sink is a file).
    splice: bool,
    /// The sink keeps nothing: payload is read into scratch (see `discard`).
    discard: bool,
    pool: BufferPool,
}

impl Job {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fail(&self, e: EngineError) {
        let mut g = self.lock();
        let st = &mut *g;
        stop_with(&mut st.error, &mut st.stopped, e);
        drop(g);
        self.notify.wake();
    }

    /// Reserve the block's range; returns where it is written.
    fn claim(&self, h: &BlockHeader) -> Result<u64> {
        let overflow = || EngineError::Protocol("block offset overflows".into());
        let end = h.offset.checked_add(h.count).ok_or_else(overflow)?;
        let start = self.base.checked_add(h.offset).filter(|&s| s.checked_add(h.count).is_some());
        let start = start.ok_or_else(overflow)?;
        if start + h.count > self.max_offset {
            return Err(EngineError::Protocol(format!("block {}-{} beyond the allowed size", h.offset, end)));
        }
        let mut st = self.lock();
        if st.claimed.overlaps(h.offset, end) {
            return Err(EngineError::Protocol(format!("overlapping block {}-{}", h.offset, end)));
        }
        st.claimed.insert(h.offset, end);
        if st.claimed.len() > MAX_CLAIMED_RANGES {
            return Err(EngineError::Protocol(format!(
                "the sender's blocks left over {MAX_CLAIMED_RANGES} separate ranges (tiny or far out of order)"
            )));
        }
        Ok(start)
    }

    /// EOF and EOD bookkeeping after a block's payload was read.
    fn ends(&self, h: &BlockHeader) -> Result<()> {
        let mut st = self.lock();
        if h.is_eof() {
            match st.eof_expected {
                Some(n) if n != h.offset => {
                    return Err(EngineError::Protocol(format!("second EOF with count {} != {n}", h.offset)))
                }
                _ => st.eof_expected = Some(h.offset),
            }
        }
        if h.is_eod() {
            st.eods += 1;
        }
        drop(st);
        // Only EOF and EOD can finish the job; waking the management
        // thread for every block cost a wake-up per 256 KiB.
        if h.is_eof() || h.is_eod() {
            self.notify.wake();
        }
        Ok(())
    }

    /// Room for the next piece (a pipe when splicing, else a buffer of
    /// `len` bytes), unless the job has enough in use.
    fn slot(&self, len: usize) -> Option<Data> {
        let mut st = self.lock();
        if st.buffers >= RECV_BUFFERS_PER_JOB {
            st.net_waiting = true;
            // Queued pieces hold buffers: write them now (see `queue`).
            let idle_disk = st.outstanding == 0 && !st.queue.is_empty();
            drop(st);
            if idle_disk {
                self.notify.wake();
            }
            return None;
        }
        st.buffers += 1;
        let reused = if self.splice { st.pipes.pop() } else { None };
        drop(st);
        if self.splice {
            // A new pipe (outside the job's lock) costs two descriptors;
            // without one this piece is copied.
            match reused.map_or_else(Pipe::new, Ok) {
                Ok(p) => return Some(Data::Pipe(p)),
                Err(e) => tracing::debug!("no pipe for splicing ({e}); copying this piece"),
            }
        }
        Some(Data::Buf(self.pool.block(len)))
    }

    fn queue(&self, p: Piece) {
        let mut st = self.lock();
        st.read += p.len as u64;
        st.queue.push_back(p);
        // A running disk task takes it, or wakes the management thread as
        // it ends (the check and its end share this lock). With none
        // running, the management thread starts one once [`WAKE_BATCH`]
        // pieces wait, or when the job's buffers run out (`slot`), or the
        // job ends (`ends`); else its next timed check (at most 100 ms)
        // finds them.
        let start_task = st.outstanding == 0 && st.queue.len() >= WAKE_BATCH;
        drop(st);
        if start_task {
            self.notify.wake();
        }
    }
}

/// Receive one transfer on `conns` plus any connections arriving on
/// `listener`. Reusable connections are left in `conns`.
pub(crate) fn recv(
    conns: &mut Vec<TcpStream>,
    listener: Option<(&TcpListener, &SockOpts)>,
    sink: &dyn Sink,
    opts: &RecvOpts,
    ctl: &Control,
) -> Result<RangeSet> {
    let eng = engine()?;
    let notify = Waker::new().map_err(|e| EngineError::io("creating waker", e))?;
    let st = State {
        claimed: RangeSet::default(),
        eof_expected: None,
        eods: 0,
        queue: VecDeque::new(),
        outstanding: 0,
        buffers: 0,
        pipes: Vec::new(),
        error: None,
        stopped: false,
        last_activity: Instant::now(),
        net_waiting: false,
        discarded: RangeSet::default(),
        read: 0,
    };
    let splice =
        sink.file().is_some() && splice_forced().unwrap_or_else(|| splice_by_default(conns, listener.map(|(l, _)| l)));
    tracing::info!(path = if splice { "splice socket->pipe->file" } else { "read+pwrite" }, "receive data path");
    ctl.set_data_path(if splice { crate::DataPath::Splice } else { sink.data_path() });
    let job = Arc::new(Job {
        st: Mutex::new(st),
        notify,
        base: opts.base,
        max_offset: opts.max_offset,
        splice,
        discard: sink.discards(),
        pool: eng.pool().clone(),
    });
    let reg = Registration::new(eng);
    let mut all: Vec<TcpStream> = std::mem::take(conns);
    let r = all.iter().enumerate().try_for_each(|(i, c)| add_conn(&job, &reg, c, i)).and_then(|()| {
        let writers = if sink.serial_writes() { 1 } else { DISK_TASKS_PER_JOB };
        let mut d = Driver { job: &job, reg: &reg, sink, ctl, idle: opts.idle, accepted: 0, writers };
        eng.disk(eng.disk_of(sink.device())).in_place_scope(|s| d.run(s, listener, &mut all))
    });
    if r.is_err() {
        job.fail(EngineError::Aborted);
    }
    let ends = reg.remove();
    restore_blocking(&all);
    let keep: Vec<bool> = (0..all.len()).map(|i| r.is_ok() && ends.iter().any(|&(j, k)| j == i && k)).collect();
    conns.extend(all.into_iter().zip(keep).filter_map(|(c, k)| k.then_some(c)));
    r
}

fn add_conn(job: &Arc<Job>, reg: &Registration, c: &TcpStream, index: usize) -> Result<()> {
    let stream = dup_nonblocking(c).map_err(|e| EngineError::io("data connection", e))?;
    let phase = Phase::Header { raw: [0; HEADER_LEN], got: 0 };
    let fills = Vec::with_capacity(payload::READ_AT_ONCE / crate::WRITE_CHUNK);
    reg.add(Box::new(RecvConn { job: job.clone(), index, stream, phase, lowat: 1, armed: false, fills }));
    Ok(())
}

/// The management side of one receive.
struct Driver<'a> {
    job: &'a Arc<Job>,
    reg: &'a Registration,
    sink: &'a dyn Sink,
    ctl: &'a Control,
    idle: Duration,
    accepted: u64,
    /// Disk tasks it may have at once ([`Sink::serial_writes`]).
    writers: usize,
}

impl<'a> Driver<'a> {
    fn run<'s, 'e>(
        &mut self,
        s: &'s Scope<'s, 'e>,
        l: Option<(&TcpListener, &SockOpts)>,
        all: &mut Vec<TcpStream>,
    ) -> Result<RangeSet>
    where
        'a: 's,
    {
        loop {
            if let Some(r) = self.step(s)? {
                // Every connection has ended: nothing is read after this.
                self.report_discarded();
                return Ok(r);
            }
            let waited = match l {
                Some((l, _)) => self.job.notify.wait(l, Duration::from_millis(50)).inspect(|_| self.job.notify.drain()),
                None => self.job.notify.park(Duration::from_millis(100)).map(|()| false),
            };
            if waited.map_err(|e| EngineError::io("waiting for data connections", e))? {
                if let Some((l, sock)) = l {
                    self.accept(l, sock, all)?;
                }
            }
        }
    }

    /// Check the job, start disk writes; `Some` when complete.
    fn step<'s, 'e>(&self, s: &'s Scope<'s, 'e>) -> Result<Option<RangeSet>>
    where
        'a: 's,
    {
        self.report_discarded();
        let mut st = self.job.lock();
        if let Some(e) = st.error.take() {
            return Err(e);
        }
        if self.ctl.is_cancelled() {
            return Err(EngineError::Aborted);
        }
        if st.finished() && st.queue.is_empty() && st.outstanding == 0 {
            // A sender that announced fewer streams than it used could end
            // with a block still coming on one: its claimed range must not
            // pass for received.
            let short = st.claimed.covered().saturating_sub(st.read);
            if short > 0 {
                return Err(EngineError::Protocol(format!(
                    "the sender ended the transfer {short} bytes short of its blocks"
                )));
            }
            return Ok(Some(std::mem::take(&mut st.claimed)));
        }
        if st.last_activity.elapsed() > self.idle {
            return Err(EngineError::Idle(self.idle));
        }
        while st.outstanding < self.writers && !st.queue.is_empty() {
            let k = st.queue.len().min(WRITE_BATCH);
            let pieces: Vec<Piece> = st.queue.drain(..k).collect();
            st.outstanding += 1;
            let (job, reg, sink, ctl) = (self.job, self.reg, self.sink, self.ctl);
            s.spawn(move || write(job, reg, sink, ctl, pieces));
        }
        Ok(None)
    }

    /// Report what connections read and dropped for a sink that keeps
    /// nothing since the last check (progress and range markers).
    fn report_discarded(&self) {
        if !self.job.discard {
            return;
        }
        let moved = std::mem::take(&mut self.job.lock().discarded);
        for (start, end) in moved.iter() {
            self.ctl.add_written(start, end);
        }
    }

    fn accept(&mut self, l: &TcpListener, sock: &SockOpts, all: &mut Vec<TcpStream>) -> Result<()> {
        match l.accept() {
            Ok((_, peer)) if !crate::datachan::admitted(sock, peer) => Ok(()),
            Ok((c, _)) => {
                crate::datachan::tune_logged(&c, sock, "data socket");
                self.accepted += 1;
                if self.accepted > MAX_STREAMS {
                    return Err(EngineError::Protocol("too many data connections".into()));
                }
                self.job.lock().last_activity = Instant::now();
                add_conn(self.job, self.reg, &c, all.len())?;
                all.push(c);
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(EngineError::io("accepting data connection", e)),
        }
    }
}

/// A disk task: write some pieces, give their buffers and pipes back, and
/// go on with what the job queued meanwhile, for up to [`WRITE_ROUNDS`]
/// batches. Buffers that are back to back in the sink go down as one write.
fn write(job: &Job, reg: &Registration, sink: &dyn Sink, ctl: &Control, mut pieces: Vec<Piece>) {
    for round in 1..=WRITE_ROUNDS {
        let (r, written) = write_pieces(job, sink, ctl, &mut pieces);
        let mut st = job.lock();
        give_back(&mut st, &mut pieces, written);
        let poke = std::mem::take(&mut st.net_waiting);
        let more = r.is_ok() && round < WRITE_ROUNDS && !st.stopped && !st.queue.is_empty();
        if more {
            let k = st.queue.len().min(WRITE_BATCH);
            pieces.extend(st.queue.drain(..k));
        } else {
            st.outstanding -= 1;
        }
        // The management thread only needs this task's end when it may
        // have something to do: the job is finished or stopped, or pieces
        // wait for a new task. Waking it after every batch of a running
        // transfer cost a wake-up per 256 KiB piece.
        let wake = !more && (st.finished() || st.stopped || !st.queue.is_empty());
        drop(st);
        if poke {
            reg.poke();
        }
        if let Err(e) = r {
            return job.fail(EngineError::io("writing data", e));
        }
        if wake {
            job.notify.wake();
        }
        if !more {
            return;
        }
    }
}

/// Account for a disk task's pieces once written (the first `written` of
/// them) or given up. Buffers go back to the pool on drop; a pipe still
/// holding bytes (not written, or failed) is dropped too.
fn give_back(st: &mut State, pieces: &mut Vec<Piece>, written: usize) {
    st.buffers -= pieces.len();
    st.last_activity = Instant::now();
    for (i, p) in pieces.drain(..).enumerate() {
        if let Data::Pipe(pipe) = p.data {
            if i < written {
                st.pipes.push(pipe);
            }
        }
    }
}

/// Write `pieces` (sorted here) until one fails or the job stops; returns
/// the outcome and how many were written.
fn write_pieces(job: &Job, sink: &dyn Sink, ctl: &Control, pieces: &mut [Piece]) -> (std::io::Result<()>, usize) {
    pieces.sort_unstable_by_key(|p| p.at);
    let mut r = Ok(());
    let mut written = 0;
    while written < pieces.len() {
        if r.is_err() || job.lock().stopped {
            break;
        }
        let run = &pieces[written..written + run_len(&pieces[written..])];
        r = write_run(sink, run);
        if r.is_ok() {
            run.iter().for_each(|p| ctl.add_written(p.wire, p.wire + p.len as u64));
            written += run.len();
        }
    }
    (r, written)
}

/// How many pieces from the first are buffers back to back in the sink.
fn run_len(pieces: &[Piece]) -> usize {
    let joins = |w: &[Piece]| {
        matches!((&w[0].data, &w[1].data), (Data::Buf(_), Data::Buf(_))) && w[0].at + w[0].len as u64 == w[1].at
    };
    1 + pieces.windows(2).take_while(|w| joins(w)).count()
}

/// Write a run of pieces (see [`run_len`]).
fn write_run(sink: &dyn Sink, run: &[Piece]) -> std::io::Result<()> {
    if let [p] = run {
        return write_piece(sink, p);
    }
    let bufs: Vec<&[u8]> =
        run.iter().filter_map(|p| if let Data::Buf(b) = &p.data { Some(&b[..]) } else { None }).collect();
    sink.write_vectored_at(&bufs, run[0].at)
}

fn write_piece(sink: &dyn Sink, p: &Piece) -> std::io::Result<()> {
    match (&p.data, sink.file()) {
        (Data::Buf(b), _) => sink.write_all_at(b, p.at),
        (Data::Pipe(pipe), Some(f)) => pipe.drain_to_file(f, p.at, p.len),
        (Data::Pipe(_), None) => Err(std::io::Error::other("spliced piece for a sink without a file")),
    }
}

/// Where a connection is in its block stream.
enum Phase {
    /// Reading a header (`got` bytes so far).
    Header { raw: [u8; HEADER_LEN], got: usize },
    /// Reading payload: `left` bytes of the block not queued yet (the
    /// pieces being filled, [`RecvConn::fills`], among them), starting at
    /// `at` in the sink and `wire` on the wire.
    Payload { h: BlockHeader, at: u64, wire: u64, left: u64 },
    /// Past its EOD; `keep` unless the peer set CLOSE.
    Ended { keep: bool },
    /// Closed or failed.
    Dead,
}

struct RecvConn {
    job: Arc<Job>,
    index: usize,
    stream: mio::net::TcpStream,
    phase: Phase,
    /// The socket's `SO_RCVLOWAT` ([`RecvConn::mark_need`]); 0 until it is
    /// set again at the next wait (which makes the kernel re-check
    /// readiness: see `read_payload`).
    lowat: usize,
    /// It waited once for the next read's bytes (see `read_payload`).
    armed: bool,
    /// The pieces of the current block being read, in order (at most
    /// [`payload::READ_AT_ONCE`] bytes; one pipe when splicing).
    fills: Vec<Fill>,
}

/// The most a connection waits to have queued before it is woken.
const LOWAT_MAX: usize = payload::READ_AT_ONCE;

/// What one read step did.
enum Step {
    Moved(usize),
    Again,
    Stop(Turn),
}

impl RecvConn {
    fn step(&mut self) -> Result<Step> {
        match &mut self.phase {
            Phase::Header { raw, got } => {
                if *got == 0 && self.job.lock().finished() {
                    return Ok(Step::Stop(Turn::Paused));
                }
                let (raw, got) = (*raw, *got);
                self.read_header(raw, got)
            }
            Phase::Payload { .. } => self.read_payload(),
            Phase::Ended { .. } | Phase::Dead => Ok(Step::Stop(Turn::Done)),
        }
    }

    fn read_header(&mut self, mut raw: [u8; HEADER_LEN], got: usize) -> Result<Step> {
        let k = match self.stream.read(&mut raw[got..]) {
            Ok(0) if got == 0 && self.job.lock().finished() => {
                self.phase = Phase::Dead;
                return Ok(Step::Stop(Turn::Done));
            }
            Ok(0) => return Err(EngineError::PeerClosed),
            Ok(k) => k,
            Err(e) => return io_step(e),
        };
        self.job.lock().last_activity = Instant::now();
        if got + k < HEADER_LEN {
            self.phase = Phase::Header { raw, got: got + k };
            return Ok(Step::Moved(k));
        }
        let h = BlockHeader::parse(&raw).map_err(|e| EngineError::Protocol(e.to_string()))?;
        let len = h.payload_len();
        if len == 0 {
            self.block_done(&h)?;
        } else {
            let at = self.job.claim(&h)?;
            self.phase = Phase::Payload { h, at, wire: h.offset, left: len };
        }
        Ok(Step::Moved(k))
    }

    /// The block's payload is read: count EOF/EOD, go on or end.
    fn block_done(&mut self, h: &BlockHeader) -> Result<()> {
        self.job.ends(h)?;
        self.phase = if h.is_eod() {
            Phase::Ended { keep: !h.is_close() }
        } else {
            Phase::Header { raw: [0; HEADER_LEN], got: 0 }
        };
        Ok(())
    }

    /// Bytes the connection needs before its next step can finish: the
    /// rest of a header, or of the pieces being filled (new ones: the
    /// block's rest, up to a read's worth, [`RecvConn::read_len`]).
    fn need(&self) -> usize {
        match &self.phase {
            Phase::Header { got, .. } => HEADER_LEN - got,
            Phase::Payload { left, .. } if self.fills.is_empty() => self.read_len(*left),
            Phase::Payload { .. } => self.fills.iter().map(|f| f.want - f.got).sum(),
            Phase::Ended { .. } | Phase::Dead => 1,
        }
    }

    /// Before waiting for the socket, set its low-water mark to what the
    /// next step needs (at most [`LOWAT_MAX`]), so that epoll wakes the
    /// network thread once a read's pieces can be read whole instead of
    /// for every few segments: with 64 streams sharing 1 Gbit/s, each
    /// stream's 256 KiB piece took about ten wake-ups and reads. The mark
    /// never exceeds what must arrive (the rest of a header or of the
    /// block), so a sender that pauses between blocks never strands bytes
    /// below it.
    fn mark_need(&mut self) -> Result<()> {
        let n = self.need().clamp(1, LOWAT_MAX);
        if n != self.lowat {
            lightpath_sys::net::set_recv_lowat(&self.stream, n)
                .map_err(|e| EngineError::io("setting the data socket's low-water mark", e))?;
            self.lowat = n;
        }
        Ok(())
    }

    /// Whether an idle connection's peer closed it (then it is not reused).
    fn peer_closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.stream.peek(&mut b), Ok(0))
    }
}

/// The next piece of a block with `left` payload bytes to read.
fn piece_len(left: u64) -> usize {
    left.min(crate::WRITE_CHUNK as u64) as usize
}

fn io_step(e: std::io::Error) -> Result<Step> {
    match e.kind() {
        ErrorKind::WouldBlock => Ok(Step::Stop(Turn::Blocked)),
        ErrorKind::Interrupted => Ok(Step::Again),
        _ => Err(EngineError::io("data connection", e)),
    }
}

impl Conn for RecvConn {
    fn stream(&mut self) -> &mut mio::net::TcpStream {
        &mut self.stream
    }

    fn interest(&self) -> mio::Interest {
        mio::Interest::READABLE
    }

    fn turn(&mut self, budget: usize) -> Turn {
        let mut spent = 0;
        loop {
            if self.job.lock().stopped {
                return Turn::Done;
            }
            let step = match self.step() {
                Ok(Step::Stop(Turn::Blocked)) => self.mark_need().map(|()| Step::Stop(Turn::Blocked)),
                r => r,
            };
            match step {
                Ok(Step::Moved(k)) => spent += k,
                Ok(Step::Again) => {}
                Ok(Step::Stop(t)) => return t,
                Err(e) => {
                    self.phase = Phase::Dead;
                    self.fail(e);
                    return Turn::Done;
                }
            }
            if spent >= budget {
                return Turn::More;
            }
        }
    }

    fn fail(&self, e: EngineError) {
        self.job.fail(e);
    }

    fn end(&mut self) -> (usize, bool) {
        let mut keep = match self.phase {
            Phase::Ended { keep } => keep,
            Phase::Header { got: 0, .. } => !self.peer_closed(),
            _ => false,
        };
        // A connection kept for the next transfer must wake its next reader
        // for any byte again.
        if keep && self.lowat != 1 {
            keep = lightpath_sys::net::set_recv_lowat(&self.stream, 1).is_ok();
        }
        (self.index, keep)
    }
}

#[cfg(test)]
mod tests;

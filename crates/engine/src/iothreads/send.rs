//! Sending a MODE E transfer on the I/O threads.
//!
//! Disk tasks call the supplier and read `Payload::Read` blocks into
//! owned buffers; ready blocks wait in the job's queue; each connection's
//! network thread takes the next one when its socket is writable, so any
//! stream carries any block. When the supplier is exhausted and the queue
//! is empty, every stream ends with EOD and stream 0 with EOF|EOD.

use super::net::{Conn, Turn};
use super::{dup_nonblocking, engine, restore_blocking, stop_with, Registration, DISK_TASKS_PER_JOB};
use crate::error::{EngineError, Result};
use crate::modee::{Apart, OutBlock, Payload, Supplier};
use crate::pool::{BlockBuf, BufferPool};
use crate::progress::Control;
use lightpath_proto::modee::HEADER_LEN;
use lightpath_proto::BlockHeader;
use lightpath_sys::net::Waker;
use lightpath_sys::scoped::Scope;
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{ErrorKind, IoSlice, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A block ready to go: header and payload.
struct Ready {
    hdr: [u8; HEADER_LEN],
    len: u64,
    body: Body,
    /// [`OutBlock::apart`], and when the block was made ready.
    apart: Option<(Apart, Instant)>,
}

enum Body {
    /// Bytes in memory (pool buffers go back to the pool when dropped).
    Mem(BlockBuf),
    /// A file range, sent with `sendfile`.
    File(Arc<File>, u64),
}

struct State {
    ready: VecDeque<Ready>,
    outstanding: usize,
    supplier_done: bool,
    sent: u64,
    conns_done: usize,
    error: Option<EngineError>,
    stopped: bool,
    last_progress: Instant,
    /// A connection found no block: poke the network threads on the next.
    net_waiting: bool,
    /// The supplier said `WouldBlock`: no disk task until it may have more.
    supplier_pending: bool,
    /// The connections that took copies of an [`Apart`] key, until all
    /// its copies are taken.
    apart_takers: HashMap<u64, Vec<usize>>,
    /// Data blocks taken by a connection and not yet all written.
    writing: usize,
    /// Every block is written and the supplier's [`Supply::finish`] found
    /// nothing wrong: the trailers (EOD, EOF) may go.
    finished: bool,
}

/// What the network threads and disk tasks share about one send.
struct Job {
    st: Mutex<State>,
    notify: Waker,
    pool: BufferPool,
    /// Most blocks ready or being fetched: two per connection.
    slots: usize,
}

impl Job {
    /// Whether a disk task could fetch a whole batch ([`FETCH_BATCH`],
    /// fewer with few connections) into the free slots. The management
    /// thread is woken to start one only then: waking it for every block
    /// taken cost a wake-up per block, and another as each task ended.
    ///
    /// Blocks with an [`Apart`] (manifest chunks, small) that wait for a
    /// connection that may take them count for nothing, up to half the
    /// slots: a fast connection that took the originals keeps sending data
    /// while their copies wait for a slow one.
    fn room_for_batch(&self, st: &State) -> bool {
        let batch = FETCH_BATCH.min(self.slots / 2).max(1);
        !st.supplier_done && self.held(st) + batch <= self.slots
    }

    /// The slots in use: blocks being fetched or ready, less the waiting
    /// [`Apart`] blocks that count for nothing.
    fn held(&self, st: &State) -> usize {
        let apart = st.ready.iter().filter(|b| b.apart.is_some()).count().min(self.slots / 2);
        st.outstanding + st.ready.len() - apart
    }

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

    /// Turn a supplied block into a ready one (reading it if needed).
    fn make_ready(&self, b: OutBlock) -> Result<Ready> {
        let hdr = BlockHeader::data(b.wire_offset, b.len).encode();
        let body = match b.payload {
            Payload::Bytes(mut v) => {
                if (v.len() as u64) < b.len {
                    return Err(EngineError::Setup("block shorter than its length".into()));
                }
                v.truncate(b.len as usize);
                Body::Mem(BlockBuf::Heap(v))
            }
            Payload::File(f, off) => Body::File(f, off),
            Payload::Read(src, off) => {
                let mut buf = self.pool.block(b.len as usize);
                src.read_exact_at(&mut buf, off).map_err(|e| EngineError::io("reading source", e))?;
                Body::Mem(buf)
            }
        };
        Ok(Ready { hdr, len: b.len, body, apart: b.apart.map(|k| (k, Instant::now())) })
    }
}

/// Send the blocks `supplier` hands out over `conns` on the I/O threads.
/// `device` (an `st_dev`) picks the disk threads that run the supplier.
pub(crate) fn send_blocks(
    conns: &mut [TcpStream],
    supplier: &Supplier,
    device: Option<u64>,
    ctl: &Control,
) -> Result<u64> {
    if conns.is_empty() {
        return Err(EngineError::Setup("no data connection".into()));
    }
    let eng = engine()?;
    let idle = conns[0].write_timeout().ok().flatten();
    let notify = Waker::new().map_err(|e| EngineError::io("creating waker", e))?;
    let st = State {
        ready: VecDeque::new(),
        outstanding: 0,
        supplier_done: false,
        sent: 0,
        conns_done: 0,
        error: None,
        stopped: false,
        last_progress: Instant::now(),
        net_waiting: false,
        supplier_pending: false,
        apart_takers: HashMap::new(),
        writing: 0,
        finished: false,
    };
    let job = Arc::new(Job { st: Mutex::new(st), notify, pool: eng.pool().clone(), slots: 2 * conns.len() });
    let reg = Registration::new(eng);
    let r = register(conns, &job, &reg).and_then(|()| {
        eng.disk(eng.disk_of(device)).in_place_scope(|s| drive(s, &job, &reg, supplier, ctl, idle, conns))
    });
    if r.is_err() {
        job.fail(EngineError::Aborted);
    }
    drop(reg);
    restore_blocking(conns);
    r
}

fn register(conns: &[TcpStream], job: &Arc<Job>, reg: &Registration) -> Result<()> {
    let n = conns.len() as u64;
    for (i, c) in conns.iter().enumerate() {
        let stream = dup_nonblocking(c).map_err(|e| EngineError::io(format!("data connection {i}"), e))?;
        reg.add(Box::new(SendConn {
            job: job.clone(),
            index: i,
            streams: n,
            stream,
            cur: None,
            done: false,
            lowat: Lowat::default(),
        }));
    }
    Ok(())
}

/// The management loop: keep blocks ready, report progress, watch for
/// errors, cancellation and idleness, until every stream sent its EOD.
fn drive<'s, 'e, 'b: 's>(
    s: &'s Scope<'s, 'e>,
    job: &'s Arc<Job>,
    reg: &'s Registration,
    supplier: &'s Supplier<'b>,
    ctl: &Control,
    idle: Option<Duration>,
    conns: &[TcpStream],
) -> Result<u64> {
    let (n, mut reported, mut endgame) = (conns.len(), 0, Endgame::new(conns.len()));
    loop {
        let mut st = job.lock();
        ctl.add(st.sent - reported);
        reported = st.sent;
        if let Some(e) = st.error.take() {
            return Err(e);
        }
        if st.conns_done == n {
            return Ok(st.sent);
        }
        if ctl.is_cancelled() {
            return Err(EngineError::Aborted);
        }
        // Idle only counts while the network has bytes to move (a slow
        // supplier is not an idle peer).
        let waiting = !st.ready.is_empty() || st.supplier_done;
        if let Some(idle) = idle.filter(|&i| waiting && st.last_progress.elapsed() > i) {
            return Err(EngineError::Idle(idle));
        }
        while st.outstanding < DISK_TASKS_PER_JOB && job.room_for_batch(&st) && !st.supplier_pending {
            st.outstanding += 1;
            s.spawn(move || fetch(job, reg, supplier));
        }
        let pending = st.supplier_pending && job.room_for_batch(&st);
        // Blocks the connections passed over (`take_ready`) go to any of
        // them once they waited: give the waiting ones another turn then.
        // So do connections that waited while only such blocks were left,
        // once the last is gone: nothing else would wake them for their
        // trailers.
        let ended = st.supplier_done && st.outstanding == 0;
        let passed_over = (!st.ready.is_empty() || ended) && std::mem::take(&mut st.net_waiting);
        let last_blocks_out = ended && st.ready.is_empty();
        let to_finish = last_blocks_out && st.writing == 0 && !st.finished;
        drop(st);
        if to_finish {
            finish_supply(job, reg, supplier)?;
            continue;
        }
        if last_blocks_out {
            endgame.look(conns);
        }
        if passed_over {
            reg.poke();
        }
        if pending {
            // This thread waits for the source, not a shared disk thread.
            supplier.wait(PARK);
            job.lock().supplier_pending = false;
            continue;
        }
        let wait = if passed_over { APART_DRAIN } else { PARK };
        job.notify.park(wait).map_err(|e| EngineError::io("waiting for the I/O threads", e))?;
    }
}

/// Every block is written: the trailers may go once the supply says its
/// source is as it was ([`Supply::finish`]); else the send fails.
fn finish_supply(job: &Job, reg: &Registration, supplier: &Supplier) -> Result<()> {
    supplier.finish().map_err(|e| EngineError::io("reading source", e))?;
    job.lock().finished = true;
    reg.poke();
    Ok(())
}

/// The endgame of a send: every block is on some stream, and a stream
/// whose BBR estimate collapsed may hold many of them
/// ([`lightpath_plan::restart_in_endgame`]). Such a stream's congestion
/// control is started afresh; when each stream was last restarted.
struct Endgame {
    restarted: Vec<Option<Instant>>,
}

impl Endgame {
    fn new(n: usize) -> Self {
        Endgame { restarted: vec![None; n] }
    }

    /// Restart the congestion control of the BBR streams far behind. A
    /// window-based one (cubic, reno) keeps its window through a restart:
    /// nothing to gain there.
    fn look(&mut self, conns: &[TcpStream]) {
        use lightpath_sys::net::{restart_congestion, tcp_congestion, tcp_unsent_time};
        for (i, c) in conns.iter().enumerate() {
            let Ok(Some(unsent)) = tcp_unsent_time(c) else { continue };
            if !lightpath_plan::restart_in_endgame(unsent, self.restarted[i].map(|t| t.elapsed())) {
                continue;
            }
            self.restarted[i] = Some(Instant::now());
            if tcp_congestion(c).is_ok_and(|cc| cc == "bbr") {
                // Debug, not info: on a slow path, 30 streams a second
                // (a defect hunt's `serve -v` logged 5856 such lines).
                match restart_congestion(c) {
                    Ok(()) => tracing::debug!(
                        "data connection {i}: {unsent:.2?} of unsent bytes at its pacing rate, nothing left \
                         to hand out; its congestion control (BBR) started afresh"
                    ),
                    Err(e) => tracing::debug!("data connection {i}: congestion control not restarted: {e}"),
                }
            }
        }
    }
}

/// Longest wait of the management loop between looks at its job.
const PARK: Duration = Duration::from_millis(100);

/// Most blocks one disk task fetches in a row while there is room.
const FETCH_BATCH: usize = 4;

/// A disk task: take blocks from the supplier and make them ready, one
/// after the other while the job has room (at most [`FETCH_BATCH`]).
fn fetch(job: &Job, reg: &Registration, supplier: &Supplier) {
    for i in 0.. {
        let r = if job.lock().stopped { Ok(None) } else { supplier.next() };
        if matches!(&r, Err(e) if e.kind() == ErrorKind::WouldBlock) {
            let mut st = job.lock();
            (st.outstanding, st.supplier_pending) = (st.outstanding - 1, true);
            drop(st);
            job.notify.wake();
            return;
        }
        let r =
            r.map_err(|e| EngineError::io("reading source", e)).and_then(|b| b.map(|b| job.make_ready(b)).transpose());
        let mut st = job.lock();
        let go_on = fetched(&mut st, reg, r);
        if !go_on || i + 1 >= FETCH_BATCH || st.supplier_done || st.stopped || job.held(&st) >= job.slots {
            // The management thread starts the next task, if there is room
            // for one (else a connection wakes it when there is), or
            // finishes the supply once its blocks are written.
            let wake = st.stopped || st.supplier_done || job.room_for_batch(&st);
            drop(st);
            if wake {
                job.notify.wake();
            }
            return;
        }
        st.outstanding += 1;
    }
}

/// Account for one fetched block; whether to go on.
fn fetched(st: &mut State, reg: &Registration, r: Result<Option<Ready>>) -> bool {
    st.outstanding -= 1;
    let go_on = match r {
        Ok(None) => {
            if !st.supplier_done {
                st.last_progress = Instant::now();
            }
            st.supplier_done = true;
            false
        }
        Ok(Some(b)) => {
            if st.ready.is_empty() {
                st.last_progress = Instant::now();
            }
            st.ready.push_back(b);
            true
        }
        Err(e) => {
            stop_with(&mut st.error, &mut st.stopped, e);
            st.net_waiting = true;
            false
        }
    };
    if std::mem::take(&mut st.net_waiting) {
        reg.poke();
    }
    go_on
}

/// The first ready block connection `me` may take: any without an
/// [`Apart`]; one with an `Apart` if it took no copy of it (`takers`,
/// updated) and either its unsent bytes leave within [`APART_DRAIN`]
/// (`drains`, asked at most once) or the block waited [`APART_DRAIN`]
/// already. A
/// manifest chunk behind megabytes of data on a stream paced at a few
/// Mbit/s (the 95 ms lab's slowest streams held 3-4 MB at 3-10 Mbit/s
/// after their losses) would hold the tree's entries back for seconds.
/// With more copies than `streams`, each connection takes one of the
/// first `streams` and the rest start a new round: a key is remembered
/// for at most `streams` takers, so no copy waits for a connection that
/// does not exist. A lone connection takes such blocks at once: no other
/// could send them sooner.
fn take_ready(
    ready: &mut VecDeque<Ready>,
    takers: &mut HashMap<u64, Vec<usize>>,
    (me, streams): (usize, usize),
    mut drains: impl FnMut() -> bool,
) -> Option<Ready> {
    let mut fast = None;
    let mut may = |b: &Ready| match b.apart {
        None => true,
        Some((a, _)) if takers.get(&a.key).is_some_and(|t| t.contains(&me)) => false,
        Some((_, since)) if streams < 2 || since.elapsed() >= APART_DRAIN => true,
        Some(_) => *fast.get_or_insert_with(&mut drains),
    };
    let i = ready.iter().position(&mut may)?;
    let b = ready.remove(i)?;
    if let Some((a, _)) = b.apart.filter(|(a, _)| a.copies > 1) {
        let t = takers.entry(a.key).or_default();
        t.push(me);
        if t.len() >= usize::from(a.copies).min(streams) {
            takers.remove(&a.key);
        }
    }
    Some(b)
}

/// How soon a connection's unsent bytes must leave for it to take a block
/// with an [`OutBlock::apart`] key, and how long such a block waits for one
/// that does before any connection may take it.
const APART_DRAIN: Duration = Duration::from_millis(50);

/// Whether `stream`'s unsent bytes leave within [`APART_DRAIN`] (yes when
/// the kernel cannot tell).
fn drains_soon(stream: &mio::net::TcpStream) -> bool {
    lightpath_sys::net::tcp_unsent_time(stream).ok().flatten().is_none_or(|t| t <= APART_DRAIN)
}

/// One connection's block in progress: `pos` bytes of header + payload written.
struct Cur {
    ready: Ready,
    pos: u64,
    trailer: bool,
}

struct SendConn {
    job: Arc<Job>,
    index: usize,
    streams: u64,
    stream: mio::net::TcpStream,
    cur: Option<Cur>,
    done: bool,
    lowat: Lowat,
}

/// A sending connection's unsent bound ([`lightpath_plan::notsent_bound`]),
/// fitted to its pacing rate at most every [`LOWAT_EVERY`].
#[derive(Default)]
struct Lowat {
    next_at: Option<Instant>,
    bytes: u32,
}

/// How often a connection re-reads its pacing rate (when it takes a block).
const LOWAT_EVERY: Duration = Duration::from_millis(50);

/// What a connection takes from its job next.
enum Next {
    Block(Ready),
    Trailer,
    Wait,
    Stop,
}

impl SendConn {
    /// Fit the unsent bound to the pacing rate (see [`Lowat`]).
    fn fit_lowat(&mut self) {
        let now = Instant::now();
        if !crate::datachan::notsent_fitted() || self.lowat.next_at.is_some_and(|t| now < t) {
            return;
        }
        self.lowat.next_at = Some(now + LOWAT_EVERY);
        let Ok(Some(rate)) = lightpath_sys::net::tcp_pacing_rate(&self.stream) else { return };
        if let Some(b) = lightpath_plan::notsent_bound(rate, self.lowat.bytes) {
            if lightpath_sys::net::set_notsent_lowat(&self.stream, b).is_ok() {
                self.lowat.bytes = b;
            }
        }
    }

    fn next(&mut self) -> Next {
        let mut g = self.job.lock();
        if g.stopped {
            return Next::Stop;
        }
        let st = &mut *g;
        if let Some(b) = take_ready(&mut st.ready, &mut st.apart_takers, (self.index, self.streams as usize), || {
            drains_soon(&self.stream)
        }) {
            // Room for a batch: the management thread may start a task (a
            // running one wakes it as it ends). The last block gone, it
            // sends any connection still waiting to its trailer.
            st.writing += 1;
            let last = st.ready.is_empty() && st.supplier_done && st.net_waiting;
            if last || (st.outstanding == 0 && self.job.room_for_batch(st)) {
                drop(g);
                self.job.notify.wake();
            }
            return Next::Block(b);
        }
        if st.finished {
            return Next::Trailer;
        }
        st.net_waiting = true;
        Next::Wait
    }

    fn trailer(&self) -> Ready {
        let h = if self.index == 0 { BlockHeader::eof_eod(self.streams) } else { BlockHeader::eod() };
        Ready { hdr: h.encode(), len: 0, body: Body::Mem(BlockBuf::Heap(Vec::new())), apart: None }
    }

    /// Write some of the current block (header, then payload); a write of
    /// nothing is an error.
    fn write_some(&mut self, budget: usize) -> std::io::Result<usize> {
        let Some(cur) = &self.cur else { return Ok(0) };
        let hl = HEADER_LEN as u64;
        let pos = cur.pos;
        let n = match &cur.ready.body {
            Body::Mem(buf) => write_mem(&mut self.stream, &cur.ready.hdr, buf, pos, budget)?,
            // MSG_MORE: the payload follows at once (an empty one would
            // leave the header held back, so that goes as it is).
            Body::File(..) if pos < hl && cur.ready.len > 0 => {
                lightpath_sys::net::send_more(&self.stream, &cur.ready.hdr[pos as usize..])?
            }
            Body::File(..) if pos < hl => self.stream.write(&cur.ready.hdr[pos as usize..])?,
            Body::File(f, off) => {
                let left = (cur.ready.len - (pos - hl)).min(budget as u64) as usize;
                let n = lightpath_sys::net::sendfile_some(&self.stream, f, off + pos - hl, left)?;
                if n == 0 {
                    return Err(std::io::Error::new(ErrorKind::UnexpectedEof, "file shrank while being sent"));
                }
                n
            }
        };
        if n == 0 {
            return Err(ErrorKind::WriteZero.into());
        }
        Ok(n)
    }

    /// A turn wrote `spent` bytes: the job is not idle, even while a large
    /// block on a slow path takes longer than the idle limit to finish
    /// (only finished blocks counted, so a moving send could fail as idle).
    fn moved(&self, spent: usize) {
        if spent > 0 {
            self.job.lock().last_progress = Instant::now();
        }
    }

    /// The current block is on the wire.
    fn completed(&mut self) -> bool {
        let Some(cur) = self.cur.take() else { return false };
        let trailer = cur.trailer;
        let mut st = self.job.lock();
        st.sent += cur.ready.len;
        st.last_progress = Instant::now();
        if trailer {
            st.conns_done += 1;
        } else {
            st.writing -= 1;
        }
        // The last block written: the management thread finishes the
        // supply; a trailer: it counts the connections done.
        if trailer || (st.writing == 0 && st.supplier_done && st.ready.is_empty()) {
            drop(st);
            self.job.notify.wake();
        }
        trailer
    }
}

/// Write some of a block held in memory: the rest of its header (`pos`
/// bytes of header + payload are out), then at most `budget` payload bytes.
fn write_mem(
    stream: &mut mio::net::TcpStream,
    hdr: &[u8; HEADER_LEN],
    buf: &[u8],
    pos: u64,
    budget: usize,
) -> std::io::Result<usize> {
    let hl = HEADER_LEN as u64;
    let body = &buf[(pos.saturating_sub(hl) as usize).min(buf.len())..];
    let body = &body[..body.len().min(budget)];
    let hdr = &hdr[(pos.min(hl) as usize)..];
    stream.write_vectored(&[IoSlice::new(hdr), IoSlice::new(body)])
}

impl Conn for SendConn {
    fn stream(&mut self) -> &mut mio::net::TcpStream {
        &mut self.stream
    }

    fn interest(&self) -> mio::Interest {
        mio::Interest::WRITABLE
    }

    fn turn(&mut self, budget: usize) -> Turn {
        let mut spent = 0;
        while !self.done {
            if self.cur.is_none() {
                let (ready, trailer) = match self.next() {
                    Next::Block(b) => {
                        self.fit_lowat();
                        (b, false)
                    }
                    Next::Trailer => (self.trailer(), true),
                    Next::Wait => return Turn::Paused,
                    Next::Stop => return Turn::Done,
                };
                self.cur = Some(Cur { ready, pos: 0, trailer });
            }
            match self.write_some(budget - spent) {
                Ok(n) => {
                    spent += n;
                    if let Some(c) = &mut self.cur {
                        c.pos += n as u64;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.moved(spent);
                    return Turn::Blocked;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.fail(EngineError::sending(format!("data connection {}", self.index), e));
                    self.done = true;
                    return Turn::Done;
                }
            }
            if self.cur.as_ref().is_some_and(|c| c.pos == HEADER_LEN as u64 + c.ready.len) {
                self.done = self.completed();
            }
            if spent >= budget {
                self.moved(spent);
                return Turn::More;
            }
        }
        Turn::Done
    }

    fn fail(&self, e: EngineError) {
        self.job.fail(e);
    }

    fn end(&mut self) -> (usize, bool) {
        (self.index, self.done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(apart: Option<(u64, Instant)>) -> Ready {
        let apart = apart.map(|(key, t)| (Apart { key, copies: 2 }, t));
        Ready { hdr: [0; HEADER_LEN], len: 0, body: Body::Mem(BlockBuf::Heap(Vec::new())), apart }
    }

    fn keys(q: &VecDeque<Ready>) -> Vec<Option<u64>> {
        q.iter().map(|b| b.apart.map(|(a, _)| a.key)).collect()
    }

    fn key(r: Option<Ready>) -> Option<u64> {
        r.and_then(|r| r.apart.map(|(a, _)| a.key))
    }

    #[test]
    fn a_connection_leaves_copies_of_what_it_took_to_the_others() {
        let now = Instant::now();
        let mut q: VecDeque<Ready> = [Some((7, now)), Some((7, now)), None, Some((9, now))].map(ready).into();
        // Many keys taken in between do not make it forget.
        q.extend((100..120).map(|k| ready(Some((k, now)))));
        let mut takers = HashMap::new();
        assert_eq!(key(take_ready(&mut q, &mut takers, (0, 2), || true)), Some(7));
        assert!(
            take_ready(&mut q, &mut takers, (0, 2), || true).is_some_and(|r| r.apart.is_none()),
            "data, not 7's copy"
        );
        for k in [9, 100, 101, 102, 103, 104, 105] {
            assert_eq!(key(take_ready(&mut q, &mut takers, (0, 2), || true)), Some(k));
        }
        while take_ready(&mut q, &mut takers, (0, 2), || true).is_some() {}
        assert_eq!(keys(&q), [Some(7)], "only 7's copy is left");
        assert_eq!(key(take_ready(&mut q, &mut takers, (1, 2), || true)), Some(7), "another connection takes it");
        assert!(!takers.contains_key(&7), "forgotten once both copies went");
        let mut one: VecDeque<Ready> = [None].map(ready).into();
        one[0].apart = Some((Apart { key: 5, copies: 1 }, now));
        assert!(take_ready(&mut one, &mut takers, (0, 2), || true).is_some());
        assert!(!takers.contains_key(&5), "a block without copies is not remembered");
    }

    #[test]
    fn copies_beyond_the_connections_start_a_new_round() {
        let now = Instant::now();
        let mut q: VecDeque<Ready> = [Some((4, now)); 3].map(ready).into();
        q.iter_mut().for_each(|b| b.apart = Some((Apart { key: 4, copies: 3 }, now)));
        let mut takers = HashMap::new();
        assert_eq!(key(take_ready(&mut q, &mut takers, (0, 2), || true)), Some(4));
        assert!(take_ready(&mut q, &mut takers, (0, 2), || true).is_none(), "not two of one round");
        assert_eq!(key(take_ready(&mut q, &mut takers, (1, 2), || true)), Some(4));
        assert_eq!(key(take_ready(&mut q, &mut takers, (0, 2), || true)), Some(4), "the third is not stuck");
        assert!(q.is_empty());
    }

    #[test]
    fn a_lone_slow_connection_takes_such_blocks_at_once() {
        let mut q: VecDeque<Ready> = [Some((8, Instant::now()))].map(ready).into();
        let mut takers = HashMap::new();
        assert_eq!(key(take_ready(&mut q, &mut takers, (0, 1), || false)), Some(8));
        let mut q: VecDeque<Ready> = [Some((9, Instant::now()))].map(ready).into();
        assert!(take_ready(&mut q, &mut takers, (0, 2), || false).is_none(), "with two it waits");
    }

    #[test]
    fn a_slow_connection_takes_such_blocks_only_once_they_waited() {
        let (now, old) = (Instant::now(), Instant::now() - APART_DRAIN);
        let mut q: VecDeque<Ready> = [Some((1, now)), Some((3, now)), None, Some((2, old))].map(ready).into();
        let mut asked = 0;
        let mut slow = || {
            asked += 1;
            false
        };
        let mut takers = HashMap::new();
        let first = take_ready(&mut q, &mut takers, (0, 2), &mut slow).unwrap();
        assert!(first.apart.is_none(), "passes the fresh ones over for data");
        assert_eq!(key(take_ready(&mut q, &mut takers, (0, 2), &mut slow)), Some(2), "one that waited goes to anyone");
        assert!(take_ready(&mut q, &mut takers, (0, 2), &mut slow).is_none());
        assert_eq!(asked, 3, "asked once per look");
        assert_eq!(keys(&q), [Some(1), Some(3)]);
        assert!(take_ready(&mut q, &mut takers, (1, 2), || true).is_some(), "a connection that drains soon takes them");
        assert!(take_ready(&mut q, &mut takers, (1, 2), || true).is_some());
        assert!(q.is_empty());
    }
}

//! A network thread: an epoll loop (mio, edge triggered) over the
//! non-blocking data connections of every job, served round robin.

use super::TURN_BYTES;
use crate::error::{EngineError, Result};
use mio::{Events, Interest, Poll, Token};
use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::sync::{mpsc, Arc, Mutex};

const WAKE: Token = Token(usize::MAX);

/// What a connection's turn ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// The turn's byte budget is spent; more to do.
    More,
    /// The socket would block: wait for its readiness event.
    Blocked,
    /// The job has nothing for it now: wait for a poke.
    Paused,
    /// Finished (or failed): nothing more until the job removes it.
    Done,
}

/// One connection of one job, driven by a network thread.
pub(crate) trait Conn: Send {
    /// The socket.
    fn stream(&mut self) -> &mut mio::net::TcpStream;
    /// Readable for receivers, writable for senders.
    fn interest(&self) -> Interest;
    /// Move at most `budget` bytes.
    fn turn(&mut self, budget: usize) -> Turn;
    /// Report a failure to the job.
    fn fail(&self, e: EngineError);
    /// `(index, keep)` when the job removes it.
    fn end(&mut self) -> (usize, bool);
}

/// Commands from management threads to a network thread.
pub(crate) enum Cmd {
    /// Serve this connection of job `.0`.
    Add(u64, Box<dyn Conn>),
    /// Job `.0` changed: give its connections a turn.
    Resume(u64),
    /// Deregister and drop job `.0`'s connections; reply with their ends.
    Remove(u64, mpsc::Sender<Vec<(usize, bool)>>),
}

/// How management threads reach a network thread.
pub(crate) struct NetHandle {
    cmds: Arc<Mutex<Vec<Cmd>>>,
    waker: mio::Waker,
}

impl NetHandle {
    /// Start network thread `i`.
    pub(crate) fn spawn(i: usize) -> Result<NetHandle> {
        let setup = |e| EngineError::io("starting network thread", e);
        let poll = Poll::new().map_err(setup)?;
        let waker = mio::Waker::new(poll.registry(), WAKE).map_err(setup)?;
        let cmds = Arc::new(Mutex::new(Vec::new()));
        let mut t = NetThread {
            poll,
            cmds: cmds.clone(),
            slots: HashMap::new(),
            jobs: HashMap::new(),
            runnable: VecDeque::new(),
            next: 0,
            pauses: 0,
        };
        let run = move || {
            super::pin("lp-net", i, |p| &p.net);
            t.run()
        };
        std::thread::Builder::new().name(format!("lp-net-{i}")).spawn(run).map_err(setup)?;
        Ok(NetHandle { cmds, waker })
    }

    /// Queue `cmd` and wake the thread. Commands already queued mean a wake
    /// is already on its way (the thread takes the whole queue at once), so
    /// only the first command of a batch wakes it, and a [`Cmd::Resume`] for
    /// a job that is still waiting for one is dropped: every freed buffer
    /// pokes the job, thousands of times a second.
    pub(crate) fn send(&self, cmd: Cmd) {
        let mut cmds = self.cmds.lock().unwrap_or_else(|e| e.into_inner());
        let pending = !cmds.is_empty();
        if let Cmd::Resume(job) = cmd {
            if cmds.iter().any(|c| matches!(c, Cmd::Resume(j) if *j == job)) {
                return;
            }
        }
        cmds.push(cmd);
        drop(cmds);
        if pending {
            return;
        }
        if let Err(e) = self.waker.wake() {
            tracing::warn!("waking network thread: {e}");
        }
    }
}

struct Slot {
    job: u64,
    conn: Box<dyn Conn>,
    queued: bool,
    /// When its last turn ended [`Turn::Paused`] (a count of pauses).
    paused: Option<u64>,
}

struct NetThread {
    poll: Poll,
    cmds: Arc<Mutex<Vec<Cmd>>>,
    slots: HashMap<usize, Slot>,
    jobs: HashMap<u64, Vec<usize>>,
    runnable: VecDeque<usize>,
    next: usize,
    /// Pauses so far: orders paused connections for [`Cmd::Resume`].
    pauses: u64,
}

impl NetThread {
    fn run(&mut self) {
        let mut events = Events::with_capacity(256);
        loop {
            let timeout = (!self.runnable.is_empty()).then_some(std::time::Duration::ZERO);
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != ErrorKind::Interrupted {
                    tracing::error!("network thread poll: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                continue;
            }
            for ev in events.iter() {
                match ev.token() {
                    WAKE => self.commands(),
                    Token(t) => self.enqueue(t),
                }
            }
            self.round();
        }
    }

    /// One round robin pass over the connections that were runnable.
    fn round(&mut self) {
        for _ in 0..self.runnable.len() {
            let Some(t) = self.runnable.pop_front() else { break };
            let Some(slot) = self.slots.get_mut(&t) else { continue };
            slot.queued = false;
            slot.paused = None;
            match slot.conn.turn(TURN_BYTES) {
                Turn::More => {
                    slot.queued = true;
                    self.runnable.push_back(t);
                }
                Turn::Paused => {
                    slot.paused = Some(self.pauses);
                    self.pauses += 1;
                }
                Turn::Blocked | Turn::Done => {}
            }
        }
    }

    fn enqueue(&mut self, t: usize) {
        if let Some(slot) = self.slots.get_mut(&t) {
            if !slot.queued {
                slot.queued = true;
                self.runnable.push_back(t);
            }
        }
    }

    fn commands(&mut self) {
        let cmds = std::mem::take(&mut *self.cmds.lock().unwrap_or_else(|e| e.into_inner()));
        for cmd in cmds {
            match cmd {
                Cmd::Add(job, conn) => self.add(job, conn),
                Cmd::Resume(job) => self.resume(job),
                Cmd::Remove(job, reply) => {
                    let _ = reply.send(self.remove(job));
                }
            }
        }
    }

    /// Give job `job`'s paused connections a turn, those paused longest
    /// first: a freed buffer (or a new block) goes to the connection that
    /// has waited for it longest. In a fixed order, the last connections of
    /// a job starved while the first took every freed buffer; their receive
    /// windows stayed closed for seconds, and their senders finished late.
    /// Connections that stopped at a socket that would block wait for its
    /// readiness event instead: a turn now would cost a system call that
    /// finds nothing (with 64 streams, 64 of them per freed buffer).
    fn resume(&mut self, job: u64) {
        let Some(ts) = self.jobs.get(&job) else { return };
        let mut paused: Vec<(u64, usize)> = ts.iter().filter_map(|t| Some((self.slots.get(t)?.paused?, *t))).collect();
        paused.sort_unstable();
        for (_, t) in paused {
            self.enqueue(t);
        }
    }

    fn add(&mut self, job: u64, mut conn: Box<dyn Conn>) {
        let t = self.next;
        self.next = (self.next + 1) % (usize::MAX - 1);
        let interest = conn.interest();
        if let Err(e) = self.poll.registry().register(conn.stream(), Token(t), interest) {
            conn.fail(EngineError::io("registering data connection", e));
        }
        self.slots.insert(t, Slot { job, conn, queued: false, paused: None });
        self.jobs.entry(job).or_default().push(t);
        self.enqueue(t);
    }

    fn remove(&mut self, job: u64) -> Vec<(usize, bool)> {
        let mut ends = Vec::new();
        for t in self.jobs.remove(&job).unwrap_or_default() {
            let Some(mut slot) = self.slots.remove(&t) else { continue };
            debug_assert_eq!(slot.job, job);
            // The original socket stays open, so its epoll registration
            // would outlive this dup unless removed explicitly.
            let _ = self.poll.registry().deregister(slot.conn.stream());
            ends.push(slot.conn.end());
        }
        self.runnable.retain(|t| self.slots.contains_key(t));
        ends
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection whose every turn ends the same way: `Paused` (its job
    /// never has room for it) or `Blocked` (its socket never has data).
    struct Fixed(mio::net::TcpStream, Turn);

    impl Conn for Fixed {
        fn stream(&mut self) -> &mut mio::net::TcpStream {
            &mut self.0
        }
        fn interest(&self) -> Interest {
            Interest::READABLE
        }
        fn turn(&mut self, _budget: usize) -> Turn {
            self.1
        }
        fn fail(&self, _e: EngineError) {}
        fn end(&mut self) -> (usize, bool) {
            (0, false)
        }
    }

    fn thread() -> NetThread {
        let poll = Poll::new().unwrap();
        let (cmds, slots, jobs, runnable) = (Arc::default(), HashMap::new(), HashMap::new(), VecDeque::new());
        NetThread { poll, cmds, slots, jobs, runnable, next: 0, pauses: 0 }
    }

    fn conn_ending(l: &std::net::TcpListener, turn: Turn) -> Box<dyn Conn> {
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        c.set_nonblocking(true).unwrap();
        Box::new(Fixed(mio::net::TcpStream::from_std(c), turn))
    }

    fn conn(l: &std::net::TcpListener) -> Box<dyn Conn> {
        conn_ending(l, Turn::Paused)
    }

    #[test]
    fn a_resumed_job_leaves_connections_waiting_for_their_sockets() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut t = thread();
        t.add(7, conn(&l));
        t.add(7, conn_ending(&l, Turn::Blocked));
        t.add(7, conn(&l));
        t.add(8, conn(&l));
        t.round();
        assert!(t.runnable.is_empty());
        t.resume(7);
        assert_eq!(t.runnable, [0, 2]);
    }

    #[test]
    fn a_resume_already_queued_for_a_job_is_not_queued_again() {
        let h =
            NetHandle { cmds: Arc::default(), waker: mio::Waker::new(Poll::new().unwrap().registry(), WAKE).unwrap() };
        for job in [1, 2, 1, 1, 2, 3] {
            h.send(Cmd::Resume(job));
        }
        let jobs: Vec<u64> =
            h.cmds.lock().unwrap().iter().map(|c| if let Cmd::Resume(j) = c { *j } else { 0 }).collect();
        assert_eq!(jobs, [1, 2, 3]);
    }

    #[test]
    fn a_resumed_job_serves_the_connection_paused_longest_first() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut t = thread();
        for _ in 0..3 {
            t.add(7, conn(&l));
        }
        t.round();
        assert!(t.runnable.is_empty());
        // The first connection had a turn of its own (data arrived) and
        // paused again: it is now the one that waited least.
        t.enqueue(0);
        t.round();
        t.resume(7);
        assert_eq!(t.runnable, [1, 2, 0]);
    }
}

//! The I/O engine: a fixed set of network and disk threads shared by every
//! MODE E transfer of the process.
//!
//! - **Network threads** (`lp-net-N`, [`IoConfig::net_threads`]) each run
//!   an epoll loop (through `mio`) over non-blocking data connections.
//!   A sender connection takes the next ready block of its job (any stream
//!   carries any block) and writes header + payload (`writev`, or
//!   `sendfile` for file ranges); a receiver connection parses the 17-byte
//!   MODE E headers incrementally and reads payload pieces of at most
//!   [`crate::WRITE_CHUNK`] bytes into buffers queued to its job.
//! - **Disk threads** (`lp-disk-N`, [`IoConfig::disk_threads`]) form one
//!   pool per storage device ([`DiskId`]; one pool today). They call the
//!   job's supplier and read the source (sending), or write queued pieces
//!   to the sink (receiving).
//! - **Management** stays on the thread that called `modee::send` or
//!   `modee::recv`: it registers the connections, accepts new ones, keeps
//!   the job's disk work going, reports progress, notices cancellation
//!   (ABOR) and idleness, and removes every connection before it returns.
//!
//! The thread counts are fixed for the process: [`configure`] them once at
//! startup, or the first transfer starts the defaults. Fifty sessions share
//! the same threads.
//!
//! # Fairness
//! - A network thread serves its ready connections round robin; a turn
//!   moves at most [`TURN_BYTES`] before the next connection's turn.
//! - The disk pools are FIFO across jobs (one queue per pool), and a job has
//!   at most [`DISK_TASKS_PER_JOB`] disk tasks outstanding: a big transfer
//!   cannot fill the queue ahead of a small one.
//! - A sending job keeps at most two blocks per stream ready; a receiving
//!   job stops reading its connections while [`RECV_BUFFERS_PER_JOB`]
//!   pieces wait for the disk.
//!
//! A supplier or sink that blocks holds a disk thread while it waits. A
//! sink must never wait for something only more network reading brings
//! (the virtual file's unpacker parks early data instead of waiting for
//! its manifest entries); a supplier may wait for its source (the virtual
//! file's walk), at most [`DISK_TASKS_PER_JOB`] threads at a time.

mod net;
mod recv;
mod send;

use crate::error::{EngineError, Result};
use lightpath_sys::scoped::FixedPool;
use net::{Cmd, NetHandle};
use std::sync::{mpsc, Mutex, OnceLock};

pub(crate) use recv::recv;
pub(crate) use send::send_blocks;

/// Most bytes one connection moves per turn of its network thread.
pub const TURN_BYTES: usize = 256 << 10;
/// Most disk tasks one job has queued or running at once.
pub const DISK_TASKS_PER_JOB: usize = 4;
/// Most receive buffers (read, queued or being written) per job.
pub const RECV_BUFFERS_PER_JOB: usize = 16;

/// How many I/O threads the process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoConfig {
    /// Network threads (`lp-net-N`).
    pub net_threads: usize,
    /// Disk threads per storage device (`lp-disk-N`).
    pub disk_threads: usize,
}

impl Default for IoConfig {
    /// Two network threads and four disk threads (until the topology
    /// tells how many each device and NIC wants; two disk threads measured
    /// slower on this 2-CPU VM).
    fn default() -> Self {
        IoConfig { net_threads: 2, disk_threads: 4 }
    }
}

/// CPU sets the I/O threads pin themselves to (from the hardware
/// placement); thread `i` of a kind takes entry `i`, none means unpinned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pins {
    /// Per network thread.
    pub net: Vec<Vec<u32>>,
    /// Per disk thread.
    pub disk: Vec<Vec<u32>>,
}

static PINS: OnceLock<Pins> = OnceLock::new();

/// Give the I/O threads their CPU sets; call before [`configure`]. A pin
/// the kernel refuses is a warning, not an error.
pub fn set_pins(pins: Pins) {
    let _ = PINS.set(pins);
}

/// Pin the calling I/O thread to entry `i` of `sets`, if there is one.
fn pin(what: &str, i: usize, sets: impl Fn(&Pins) -> &Vec<Vec<u32>>) {
    let Some(cpus) = PINS.get().and_then(|p| sets(p).get(i)) else { return };
    match lightpath_sys::topo::pin_current_thread(cpus) {
        Ok(()) => tracing::debug!(thread = %format!("{what}-{i}"), ?cpus, "pinned"),
        Err(e) => tracing::warn!(thread = %format!("{what}-{i}"), "not pinned: {e}"),
    }
}

/// A storage device's disk pool. One pool today ([`DiskId::DEFAULT`]);
/// placement by device comes with the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DiskId(pub usize);

impl DiskId {
    /// The pool used when the device is unknown.
    pub const DEFAULT: DiskId = DiskId(0);
}

/// The process-wide I/O threads.
pub struct IoEngine {
    cfg: IoConfig,
    net: Vec<NetHandle>,
    disks: Vec<FixedPool>,
}

static ENGINE: OnceLock<IoEngine> = OnceLock::new();
static INIT: Mutex<()> = Mutex::new(());

/// Start the I/O threads with `cfg`. Call once at startup, before the first
/// transfer; fails if they already run with a different configuration.
pub fn configure(cfg: IoConfig) -> Result<()> {
    let e = start(cfg)?;
    if e.cfg != cfg {
        return Err(EngineError::Setup(format!("I/O threads already started with {:?}", e.cfg)));
    }
    Ok(())
}

/// The configuration of the running I/O threads, if started.
pub fn running() -> Option<IoConfig> {
    ENGINE.get().map(|e| e.cfg)
}

/// The engine, started with the defaults if nobody configured it.
pub(crate) fn engine() -> Result<&'static IoEngine> {
    match ENGINE.get() {
        Some(e) => Ok(e),
        None => start(IoConfig::default()),
    }
}

fn start(cfg: IoConfig) -> Result<&'static IoEngine> {
    let _g = INIT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = ENGINE.get() {
        return Ok(e);
    }
    if cfg.net_threads == 0 || cfg.disk_threads == 0 {
        return Err(EngineError::Setup("I/O thread counts must be at least 1".into()));
    }
    let net = (0..cfg.net_threads).map(NetHandle::spawn).collect::<Result<Vec<_>>>()?;
    let disk = FixedPool::new(cfg.disk_threads, |i| format!("lp-disk-{i}"), |i| pin("lp-disk", i, |p| &p.disk))
        .map_err(|e| EngineError::io("starting disk threads", e))?;
    Ok(ENGINE.get_or_init(|| IoEngine { cfg, net, disks: vec![disk] }))
}

impl IoEngine {
    /// The disk pool of `disk` (the default pool for an unknown device).
    pub(crate) fn disk(&self, disk: DiskId) -> &FixedPool {
        self.disks.get(disk.0).unwrap_or(&self.disks[0])
    }
}

/// Stop a job with `e` as its error, unless it had already stopped (the
/// first error wins; a job stopped by completion or cancel keeps its end).
pub(crate) fn stop_with(error: &mut Option<EngineError>, stopped: &mut bool, e: EngineError) {
    if error.is_none() && !*stopped {
        *error = Some(e);
    }
    *stopped = true;
}

/// One job's connections on the network threads. Dropping it removes
/// them (and waits until no network thread touches them any more).
pub(crate) struct Registration {
    engine: &'static IoEngine,
    job: u64,
    added: std::sync::atomic::AtomicUsize,
    removed: bool,
}

impl Registration {
    pub(crate) fn new(engine: &'static IoEngine) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let job = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Registration { engine, job, added: Default::default(), removed: false }
    }

    /// Hand a connection to a network thread (spread over them in turn).
    pub(crate) fn add(&self, conn: Box<dyn net::Conn>) {
        let k = self.added.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let i = (self.job as usize + k) % self.engine.net.len();
        self.engine.net[i].send(Cmd::Add(self.job, conn));
    }

    /// Tell the network threads the job's state changed (blocks ready,
    /// buffers free, transfer ending).
    pub(crate) fn poke(&self) {
        for n in &self.engine.net {
            n.send(Cmd::Resume(self.job));
        }
    }

    /// Remove every connection of the job; returns `(index, keep)` per
    /// connection (keep: fit for reuse).
    pub(crate) fn remove(mut self) -> Vec<(usize, bool)> {
        self.remove_all()
    }

    fn remove_all(&mut self) -> Vec<(usize, bool)> {
        self.removed = true;
        let (tx, rx) = mpsc::channel();
        for n in &self.engine.net {
            n.send(Cmd::Remove(self.job, tx.clone()));
        }
        drop(tx);
        rx.iter().flatten().collect()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if !self.removed {
            self.remove_all();
        }
    }
}

/// Dup `c` for a network thread: non-blocking (which the original shares
/// until [`restore_blocking`]).
pub(crate) fn dup_nonblocking(c: &std::net::TcpStream) -> std::io::Result<mio::net::TcpStream> {
    let d = c.try_clone()?;
    d.set_nonblocking(true)?;
    Ok(mio::net::TcpStream::from_std(d))
}

/// Blocking mode again for connections that blocking code reuses.
pub(crate) fn restore_blocking(conns: &[std::net::TcpStream]) {
    for c in conns {
        let _ = c.set_nonblocking(false);
    }
}

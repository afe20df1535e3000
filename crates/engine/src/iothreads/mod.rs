//! The I/O engine: a fixed set of network and disk threads shared by every
//! MODE E transfer of the process.
//!
//! - **Network threads** (`lp-net-N`, [`IoConfig::net_threads`]) each run
//!   an epoll loop (through `mio`) over non-blocking data connections.
//!   A sender connection takes the next ready block of its job (any stream
//!   carries any block) and writes header + payload (`writev`, or
//!   `sendfile` for file ranges); a receiver connection parses the 17-byte
//!   MODE E headers incrementally and reads payload pieces of at most
//!   [`crate::WRITE_CHUNK`] bytes, queued to its job (spliced into pipes
//!   when the sink is a file over loopback, else read into pool buffers).
//!   It takes a piece's buffer or pipe only once the piece's bytes are
//!   queued on its socket (`SO_RCVLOWAT` tells when), so buffers are held
//!   for the copy and the write, not while the bytes cross the path.
//! - **Disk threads** (`lp-disk-N`) form one pool per storage device
//!   declared with [`set_devices`] (the server declares the disks under
//!   its root, with the thread count their capacity calls for), or a single
//!   pool of [`IoConfig::disk_threads`]. A transfer runs its disk work on
//!   the pool of the device holding its file (the `st_dev` of the source or
//!   sink, resolved to a whole disk through sysfs once per device and
//!   cached); anything else (memory, an undeclared device, a tree of many
//!   files) uses the first pool. They call the job's supplier and read the
//!   source (sending), or write queued pieces to the sink (receiving).
//! - **Buffers** come from one [`BufferPool`] per process, allocated,
//!   page-aligned and (where allowed) locked in RAM when the threads
//!   start, their pages faulted in on first use: [`POOL_BUFFERS`] of
//!   [`crate::WRITE_CHUNK`] bytes. Blocks
//!   read for sending and pieces received for a sink that is not a file sit
//!   in them; receives into files over loopback bypass them (`splice`). When every pool
//!   buffer is out, a block takes heap memory rather than wait (counted).
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
//!   cannot fill the queue ahead of a small one. A task goes on with its
//!   job's next blocks or pieces only for a few batches.
//! - A sending job keeps at most two blocks per stream ready; a receiving
//!   job stops reading its connections while [`RECV_BUFFERS_PER_JOB`]
//!   pieces wait for the disk.
//!
//! A supplier or sink that blocks holds a disk thread while it waits. A
//! sink must never wait for something only more network reading brings
//! (the virtual file's unpacker parks early data instead of waiting for
//! its manifest entries). A supplier whose source has nothing yet (the
//! virtual file's walk) says `WouldBlock` instead of waiting: the job then
//! starts no disk task until its management thread, waiting in
//! [`crate::modee::Supply::wait`], hears that there is more. (When the
//! walk's wait ran on the disk threads, one tree on a slow disk held all
//! four of its pool's threads and stalled every other session on them.)

mod net;
mod recv;
mod send;

use crate::error::{EngineError, Result};
use crate::pool::{BufferPool, PoolOptions};
use lightpath_sys::scoped::FixedPool;
use net::{Cmd, NetHandle};
use std::sync::{mpsc, Mutex, OnceLock};

pub(crate) use recv::recv;
pub(crate) use send::send_blocks;

/// Most bytes one connection moves per turn of its network thread.
pub const TURN_BYTES: usize = 256 << 10;
/// Most disk tasks one job has queued or running at once.
pub const DISK_TASKS_PER_JOB: usize = 4;
/// Most receive buffers (read, queued or being written) per job: 8 MiB,
/// so the disk gets several writes of a whole write batch at once while
/// the network goes on filling. 3 GiB over loopback with `--fsync`, three
/// sets of 4-5 interleaved hand runs, medians: 5.26, 6.41 and 4.52 s
/// against 7.90, 6.67 and 7.99 s with 16 buffers and batches of 4.
pub const RECV_BUFFERS_PER_JOB: usize = 32;
/// Buffers in the process's pool: four receiving jobs' worth (32 MiB).
pub const POOL_BUFFERS: usize = 4 * RECV_BUFFERS_PER_JOB;

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

static IO_NICE: OnceLock<i32> = OnceLock::new();
static BUFFER_NODE: OnceLock<usize> = OnceLock::new();

/// Run the I/O threads at nice value `nice` (the placement raises them
/// where the process may: CAP_SYS_NICE); call before [`configure`]. A
/// refusal is a warning, not an error.
pub fn set_io_nice(nice: i32) {
    let _ = IO_NICE.set(nice);
}

/// Allocate the buffer pool on NUMA node `node` (the placement's node of
/// the NIC); call before [`configure`]. A refusal is noted at info level.
pub fn set_buffer_node(node: usize) {
    let _ = BUFFER_NODE.set(node);
}

/// Place the calling I/O thread: pin it to entry `i` of `sets`, if there
/// is one, and give it the I/O threads' nice value, if one was set.
fn pin(what: &str, i: usize, sets: impl Fn(&Pins) -> &Vec<Vec<u32>>) {
    if let Some(&nice) = IO_NICE.get() {
        match lightpath_sys::topo::set_current_thread_nice(nice) {
            Ok(()) => tracing::debug!(thread = %format!("{what}-{i}"), nice, "priority raised"),
            Err(e) => tracing::warn!(thread = %format!("{what}-{i}"), "priority not raised: {e}"),
        }
    }
    let Some(cpus) = PINS.get().and_then(|p| sets(p).get(i)) else { return };
    match lightpath_sys::topo::pin_current_thread(cpus) {
        Ok(()) => tracing::debug!(thread = %format!("{what}-{i}"), ?cpus, "pinned"),
        Err(e) => tracing::warn!(thread = %format!("{what}-{i}"), "not pinned: {e}"),
    }
}

/// A storage device's disk pool: an index into the declared devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DiskId(pub usize);

impl DiskId {
    /// The pool used when the device is unknown.
    pub const DEFAULT: DiskId = DiskId(0);
}

/// A storage device with its own disk threads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskDevice {
    /// Kernel name of the whole disk (`vda`, `nvme0n1`, `sdb`).
    pub name: String,
    /// Its disk threads.
    pub threads: usize,
}

static DEVICES: OnceLock<Vec<DiskDevice>> = OnceLock::new();

/// Declare the storage devices, each getting its own pool of disk threads
/// (then [`IoConfig::disk_threads`] is not used); call before
/// [`configure`]. Without it there is one pool.
pub fn set_devices(devices: Vec<DiskDevice>) {
    let _ = DEVICES.set(devices);
}

/// The process-wide I/O threads.
pub struct IoEngine {
    cfg: IoConfig,
    net: Vec<NetHandle>,
    disks: Vec<FixedPool>,
    /// Declared device names, by pool.
    names: Vec<String>,
    /// `st_dev` -> pool, filled as devices are met.
    by_dev: Mutex<std::collections::HashMap<u64, DiskId>>,
    pool: BufferPool,
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

/// The disk pool of the device `dev` (`st_dev`), as transfers use it, and
/// the names of its threads; `None` if the I/O threads do not run.
pub fn disk_pool_of(dev: Option<u64>) -> Option<(DiskId, String)> {
    let e = ENGINE.get()?;
    let id = e.disk_of(dev);
    Some((id, e.names.get(id.0).cloned().unwrap_or_default()))
}

/// 0: not decided yet (the environment decides), 1: copy, 2: splice,
/// 3: per transfer (splice over loopback).
static RECV_SPLICE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Receive into files by splicing socket -> pipe -> file (`true`) or by
/// reading into pool buffers and writing them (`false`), whatever the path.
/// Without it (or `LIGHTPATH_RECV_SPLICE`), transfers over loopback splice
/// and others copy (see `recv.rs` for the measurements). Process-wide, for
/// the transfers that start afterwards.
pub fn set_recv_splice(on: bool) {
    RECV_SPLICE.store(1 + u8::from(on), std::sync::atomic::Ordering::Relaxed);
}

/// The buffer pool's counters, if the I/O threads run.
pub fn pool_stats() -> Option<crate::pool::PoolStats> {
    ENGINE.get().map(|e| e.pool.stats())
}

/// What the buffer pool could not do of locking and NUMA placement (empty:
/// all done), if the I/O threads run.
pub fn pool_notes() -> Option<Vec<String>> {
    ENGINE.get().map(|e| e.pool.notes().to_vec())
}

/// The engine, started with the defaults if nobody configured it.
pub(crate) fn engine() -> Result<&'static IoEngine> {
    match ENGINE.get() {
        Some(e) => Ok(e),
        None => start(IoConfig::default()),
    }
}

/// Start the I/O threads and the buffer pool on a helper thread, if nobody
/// configured them yet: a client calls this before it connects, so the
/// ~20 ms of thread starts and pool locking overlap the login instead of
/// delaying the first block (measured: the pool was ready 19 ms after the
/// `150` reply over the emulated 95 ms path). A failure shows up again,
/// and is reported, at the first transfer.
pub fn start_in_background() {
    if ENGINE.get().is_some() {
        return;
    }
    let spawned = std::thread::Builder::new().name("lp-engine-start".into()).spawn(|| {
        if let Err(e) = engine() {
            tracing::debug!("starting the I/O engine early: {e}");
        }
    });
    if let Err(e) = spawned {
        tracing::debug!("starting the I/O engine early: {e}");
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
    let devices = match DEVICES.get() {
        Some(d) if !d.is_empty() => d.clone(),
        _ => vec![DiskDevice { name: String::new(), threads: cfg.disk_threads }],
    };
    if devices.iter().any(|d| d.threads == 0) {
        return Err(EngineError::Setup("every storage device needs at least one disk thread".into()));
    }
    let net = (0..cfg.net_threads).map(NetHandle::spawn).collect::<Result<Vec<_>>>()?;
    let disks = disk_pools(&devices)?;
    let names = devices.into_iter().map(|d| d.name).collect();
    let pool = make_pool()?;
    let by_dev = Mutex::new(Default::default());
    Ok(ENGINE.get_or_init(|| IoEngine { cfg, net, disks, names, by_dev, pool }))
}

/// One pool per device; threads are numbered across pools (`lp-disk-N`)
/// and take their CPU sets in that order.
fn disk_pools(devices: &[DiskDevice]) -> Result<Vec<FixedPool>> {
    let mut first = 0;
    let mut pools = Vec::new();
    for d in devices {
        let base = first;
        let pool = FixedPool::new(
            d.threads,
            |i| format!("lp-disk-{}", base + i),
            move |i| pin("lp-disk", base + i, |p| &p.disk),
        );
        pools.push(pool.map_err(|e| EngineError::io("starting disk threads", e))?);
        first += d.threads;
    }
    Ok(pools)
}

/// The process's block buffers, locked in RAM where the kernel allows it
/// (root, CAP_IPC_LOCK or a high enough RLIMIT_MEMLOCK); what it refused is
/// said at info level.
fn make_pool() -> Result<BufferPool> {
    let node = BUFFER_NODE.get().copied();
    let opts = PoolOptions { count: POOL_BUFFERS, size: crate::WRITE_CHUNK, align: 4096, lock: true, node };
    let pool = BufferPool::new(&opts).map_err(|e| EngineError::io("allocating the buffer pool", e))?;
    let refused = |what: &str| pool.notes().iter().any(|n| n.starts_with(what));
    let locked = if refused("mlock") { "not locked" } else { "locked in RAM" };
    let placed = match node {
        Some(n) if !refused("NUMA") => format!(", on NUMA node {n}"),
        _ => String::new(),
    };
    // Pages come in on first use: the pool has none on huge pages yet.
    let huge = if refused("transparent huge pages") { "" } else { ", huge pages advised" };
    tracing::info!("buffer pool: {} x {} KiB, {locked}{placed}{huge}", opts.count, opts.size >> 10);
    pool.notes().iter().for_each(|n| tracing::info!("buffer pool: {n}"));
    Ok(pool)
}

impl IoEngine {
    /// The disk pool of `disk` (the default pool for an unknown device).
    pub(crate) fn disk(&self, disk: DiskId) -> &FixedPool {
        self.disks.get(disk.0).unwrap_or(&self.disks[0])
    }

    /// The block buffers.
    pub(crate) fn pool(&self) -> &BufferPool {
        &self.pool
    }

    /// The pool of the device with `st_dev` `dev` (the default pool for
    /// none or an undeclared one).
    pub(crate) fn disk_of(&self, dev: Option<u64>) -> DiskId {
        let Some(dev) = dev.filter(|_| self.names.len() > 1) else { return DiskId::DEFAULT };
        let mut map = self.by_dev.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry(dev).or_insert_with(|| {
            let holder = lightpath_sys::topo::Sysfs::system().block_device_of_st_dev(dev).ok().flatten();
            let disks = holder.map(|h| h.disks).unwrap_or_default();
            let found = self.names.iter().position(|n| disks.contains(n));
            tracing::debug!(dev, ?disks, pool = ?found, "disk pool for device");
            DiskId(found.unwrap_or(0))
        })
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

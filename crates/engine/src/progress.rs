//! Progress and cancellation shared between the data mover and its driver
//! (perf markers, restart markers, progress bars, ABOR).

use crate::io::DataPath;
use lightpath_proto::held::Held;
use lightpath_proto::unreadable::Unreadables;
use lightpath_proto::RangeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Counters a running transfer updates and its driver reads.
#[derive(Debug, Default)]
pub struct Control {
    bytes: AtomicU64,
    cancel: AtomicBool,
    lost: AtomicBool,
    /// Ranges written: since the last [`Control::take_written`], and all.
    written: Mutex<(RangeSet, RangeSet)>,
    parent: Option<Arc<AtomicU64>>,
    job_cancel: Option<Arc<AtomicBool>>,
    /// A tree's regular files and the bytes of their data.
    tree: Mutex<Option<(u64, u64)>>,
    skipped: AtomicU64,
    unreadable: Mutex<Unreadables>,
    data_path: Mutex<Option<DataPath>>,
    held: Arc<HeldSoFar>,
    /// The driver's connection (a server's control connection), whose
    /// close says the driver went away ([`Control::peer_closed_within`]).
    peer: std::sync::OnceLock<std::os::fd::OwnedFd>,
}

/// What the receiver of a tree holds complete so far: the longest run of
/// regular files from the manifest's first, as [`crate::vfile::Unpacker`]
/// sees it while the tree arrives (a receiving server tells it in its
/// perf markers, so that a sender killed before the failure reply still
/// knows where to resume).
#[derive(Debug, Default)]
pub struct HeldSoFar(Mutex<Option<Held>>);

impl HeldSoFar {
    /// Record a longer run.
    pub fn set(&self, h: Held) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
    }
    /// The last run recorded, if any.
    pub fn get(&self) -> Option<Held> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Control {
    /// A fresh control block.
    pub fn new() -> Self {
        Self::default()
    }
    /// Bytes moved so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
    /// A control block of a job: every byte is added to `total`, and
    /// setting `cancel` stops this transfer as [`Control::cancel`] would
    /// (a client's Ctrl-C stops every transfer of its job).
    pub fn for_job(total: Arc<AtomicU64>, cancel: Arc<AtomicBool>) -> Self {
        Control { parent: Some(total), job_cancel: Some(cancel), ..Self::default() }
    }
    /// Ask the transfer to stop.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
    /// Stop the transfer because its driver is gone (a server's control
    /// connection closed), not because it was asked to stop.
    pub fn lose(&self) {
        self.lost.store(true, Ordering::Relaxed);
        self.cancel();
    }
    /// Whether [`Control::lose`] stopped it.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }
    /// Watch `conn`, the driver's connection (a copy of its descriptor).
    pub fn watch_peer(&self, conn: std::os::fd::OwnedFd) {
        let _ = self.peer.set(conn);
    }
    /// Whether the driver went away: [`Control::lose`] said so, or the
    /// connection [`Control::watch_peer`] watches is closed by its peer
    /// within `wait` (none watched: `lose` within `wait`).
    pub fn peer_closed_within(&self, wait: std::time::Duration) -> bool {
        if self.is_lost() {
            return true;
        }
        if let Some(conn) = self.peer.get() {
            return lightpath_sys::net::peer_closed_within(conn, wait) || self.is_lost();
        }
        let end = std::time::Instant::now() + wait;
        while !self.is_lost() && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        self.is_lost()
    }
    /// Whether cancel was asked.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed) || self.job_cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed))
    }
    /// Record `len` bytes moved (sender side).
    pub fn add(&self, len: u64) {
        self.bytes.fetch_add(len, Ordering::Relaxed);
        if let Some(p) = &self.parent {
            p.fetch_add(len, Ordering::Relaxed);
        }
    }
    /// Record a range written to its destination (receiver side).
    pub fn add_written(&self, start: u64, end: u64) {
        self.add(end - start);
        let mut w = self.written.lock().unwrap_or_else(|e| e.into_inner());
        w.0.insert(start, end);
        w.1.insert(start, end);
    }
    /// Record how many regular files the transfer moved (a virtual file's
    /// tree; the server says it in its 226 reply).
    /// `data` is the bytes of their data this transfer moved (the wire
    /// carried the manifest too).
    pub fn set_tree(&self, files: u64, data: u64) {
        *self.tree.lock().unwrap_or_else(|p| p.into_inner()) = Some((files, data));
    }
    /// Regular files moved, as set by [`Control::set_tree`] (`None`: not
    /// a tree; `Some(0)`: an empty one).
    pub fn files(&self) -> Option<u64> {
        self.tree.lock().unwrap_or_else(|p| p.into_inner()).map(|t| t.0)
    }
    /// The bytes of a tree's file data, as set by [`Control::set_tree`].
    pub fn data_bytes(&self) -> Option<u64> {
        self.tree.lock().unwrap_or_else(|p| p.into_inner()).map(|t| t.1)
    }
    /// Record how many special files (FIFOs, devices, sockets) a tree's
    /// walk left out (the server says it in its 226 reply).
    pub fn set_skipped(&self, n: u64) {
        self.skipped.store(n, Ordering::Relaxed);
    }
    /// Special files left out, as set by [`Control::set_skipped`].
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }
    /// Record what a tree's walk could not read (the server says it in
    /// its 226 reply).
    pub fn set_unreadable(&self, u: Unreadables) {
        *self.unreadable.lock().unwrap_or_else(|e| e.into_inner()) = u;
    }
    /// What [`Control::set_unreadable`] recorded.
    pub fn unreadable(&self) -> Unreadables {
        self.unreadable.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    /// Record how the bytes move (`sendfile`, `splice`, direct I/O...),
    /// once the engine has chosen; the last choice stands.
    pub fn set_data_path(&self, p: DataPath) {
        *self.data_path.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
    }
    /// The choice recorded by [`Control::set_data_path`], if made yet.
    pub fn data_path(&self) -> Option<DataPath> {
        *self.data_path.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Where a tree's receiver records what it holds so far (give it to
    /// the unpacker: [`crate::vfile::UnpackOptions::report`]).
    pub fn held_so_far(&self) -> Arc<HeldSoFar> {
        self.held.clone()
    }
    /// What [`Control::held_so_far`] last recorded.
    pub fn held(&self) -> Option<Held> {
        self.held.get()
    }
    /// Ranges written since the last call (for `111 Range Marker`).
    pub fn take_written(&self) -> RangeSet {
        std::mem::take(&mut self.written.lock().unwrap_or_else(|e| e.into_inner()).0)
    }
    /// Every range written so far (what a failed upload kept).
    pub fn written(&self) -> RangeSet {
        self.written.lock().unwrap_or_else(|e| e.into_inner()).1.clone()
    }
}

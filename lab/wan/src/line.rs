//! The delay line: one thread per direction reads packets from one TUN
//! device, runs them through the [`LinkModel`] and the impairments, keeps
//! them in a [`PacketRing`] until they are due and writes them into the
//! other TUN device.
//!
//! The loop never blocks on a full pipe: reads are non-blocking, and when
//! nothing is readable the thread sleeps in `ppoll` until the next packet is
//! due or the input becomes readable, whichever comes first.
use std::io;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lightpath_sys::tun::Tun;
use rustix::event::{PollFd, PollFlags, Timespec};

use crate::counters::{bump, LiveCounters};
use crate::gso::{self, Wire};
use crate::impair::Impair;
use crate::link::{LinkModel, Verdict};
use crate::ring::{Meta, PacketRing};

/// When the thread wakes for a due packet, packets due within this much
/// after it leave in the same pass instead of after another sleep each: a
/// wake-up costs several microseconds of CPU, and at 200 Mbit/s a packet is
/// due every 60 us. Like interrupt coalescing on a NIC, it bounds wake-ups
/// to about 10,000 per second per direction; packets leave at most this
/// much early, never reordered.
const EARLY_NS: u64 = 100_000;
/// Timed sleeps end this much before the due time: waking up takes the
/// kernel and the VM about this long here (mean lateness of isolated packets
/// was 25-80 us without it), and the packet may leave a little early anyway
/// (see `EARLY_NS`).
const WAKE_ADVANCE_NS: u64 = 30_000;
/// Longest sleep, so that a stop request is seen promptly.
const MAX_SLEEP_NS: u64 = 50_000_000;
/// Reads per pass before checking for due packets again.
const READ_BATCH: usize = 32;

/// State shared by the lab and both directions.
#[derive(Debug)]
pub(crate) struct Shared {
    pub epoch: Instant,
    pub stop: AtomicBool,
    pub outage_start: AtomicU64,
    pub outage_end: AtomicU64,
}

impl Shared {
    pub fn new() -> Shared {
        Shared {
            epoch: Instant::now(),
            stop: AtomicBool::new(false),
            outage_start: AtomicU64::new(0),
            outage_end: AtomicU64::new(0),
        }
    }

    /// Nanoseconds since the lab started.
    pub fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Is virtual time `t` inside the current outage window?
    fn link_down(&self, t: u64) -> bool {
        let end = self.outage_end.load(Relaxed);
        end != 0 && t < end && t >= self.outage_start.load(Relaxed)
    }

    /// Takes the link down from now for `dur`.
    pub fn outage(&self, dur: Duration) {
        let start = self.now();
        self.outage_end.store(0, Relaxed);
        self.outage_start.store(start, Relaxed);
        self.outage_end.store(start + dur.as_nanos() as u64 + 1, Relaxed);
    }
}

/// Real-time priority of the delay-line threads: above ordinary processes
/// (the TCP endpoints, builds running beside a test), below the kernel's own
/// threaded interrupt handlers (50).
const RT_PRIORITY: i32 = 10;

/// Keeps the emulated wire from being starved: `SCHED_FIFO` if allowed,
/// else the highest nice priority.
fn raise_priority() {
    if lightpath_sys::tun::set_current_thread_fifo(RT_PRIORITY).is_err() {
        let _ = lightpath_sys::topo::set_current_thread_nice(-20);
    }
}

/// A packet held back to be delivered after the next one (reordering).
#[derive(Debug)]
struct Held {
    bytes: Vec<u8>,
    tx_start: u64,
    deliver_at: u64,
}

/// What the packet `raw` is on the wire: with `offload`, what its virtio
/// header says ([`gso::wire`]); else itself.
fn wire_of(offload: bool, raw: &[u8]) -> Wire {
    if offload {
        gso::wire(raw)
    } else {
        Wire { bytes: raw.len(), packets: 1 }
    }
}

/// One direction of the emulated link.
pub(crate) struct Line {
    pub input: Arc<Tun>,
    pub output: Arc<Tun>,
    pub model: LinkModel,
    pub impair: Impair,
    pub ring: PacketRing,
    pub counters: Arc<LiveCounters>,
    pub shared: Arc<Shared>,
    held: Option<Held>,
    scratch: Vec<u8>,
    /// The TUN devices carry offloaded segments ([`Line::with_offload`]).
    offload: bool,
}

impl Line {
    pub fn new(
        input: Arc<Tun>,
        output: Arc<Tun>,
        model: LinkModel,
        impair: Impair,
        ring: PacketRing,
        shared: Arc<Shared>,
        max_pkt: usize,
    ) -> Line {
        Line {
            input,
            output,
            model,
            impair,
            ring,
            counters: Arc::new(LiveCounters::default()),
            shared,
            held: None,
            scratch: vec![0; max_pkt],
            offload: false,
        }
    }

    /// Packets carry a virtio header and may be TCP segments standing for
    /// many packets of the MTU ([`gso::wire`]): the link model and the
    /// counters see those packets.
    pub fn with_offload(mut self, offload: bool) -> Line {
        self.offload = offload;
        self
    }

    /// Runs until `shared.stop` is set.
    pub fn run(mut self) {
        // Wake up within a microsecond of the deadline, not the default 50 us.
        let _ = rustix::thread::set_current_timer_slack(NonZeroU64::new(1_000));
        raise_priority();
        while !self.shared.stop.load(Relaxed) {
            self.release(self.shared.now());
            let mut read = 0;
            while read < READ_BATCH && self.ingest() {
                read += 1;
            }
            if read == 0 {
                self.wait();
            }
        }
    }

    /// Writes every packet due by `now` (+ `EARLY_NS`) to the far side.
    fn release(&mut self, now: u64) {
        self.flush_held(now);
        while let Some(m) = self.ring.front() {
            if m.deliver_at > now + EARLY_NS {
                break;
            }
            if self.shared.link_down(m.tx_start) {
                bump(&self.counters.dropped_outage, 1);
            } else {
                self.forward(m, now.saturating_sub(m.deliver_at));
            }
            self.ring.pop();
        }
    }

    fn forward(&self, m: Meta, late: u64) {
        let raw = self.ring.bytes_of(&m);
        match self.output.write(raw) {
            Ok(_) => {
                let c = &self.counters;
                let w = wire_of(self.offload, raw);
                bump(&c.forwarded_packets, w.packets as u64);
                bump(&c.forwarded_bytes, w.bytes as u64);
                bump(&c.late_sum_ns, late);
                if late > 1_000_000 {
                    bump(&c.late_over_1ms, 1);
                }
                if late > c.late_max_ns.load(Relaxed) {
                    c.late_max_ns.store(late, Relaxed);
                }
            }
            Err(_) => bump(&self.counters.io_errors, 1),
        }
    }

    /// A held (reordered) packet whose own due time has come goes out
    /// in order after all.
    fn flush_held(&mut self, now: u64) {
        if self.held.as_ref().is_some_and(|h| h.deliver_at <= now + EARLY_NS) {
            let h = self.held.take().expect("checked");
            if !self.ring.push(&h.bytes, h.tx_start, h.deliver_at) {
                bump(&self.counters.dropped_buffer, 1);
            }
        }
    }

    /// Reads one packet; false when nothing was readable.
    fn ingest(&mut self) -> bool {
        let res = match self.ring.slot() {
            Some(slot) => self.input.read(slot),
            None => self.input.read(&mut self.scratch).map(|_| 0),
        };
        match res {
            Ok(0) => {
                // Ring full (or an empty read): the packet is lost.
                bump(&self.counters.dropped_buffer, 1);
                true
            }
            Ok(n) => {
                self.admit(n);
                true
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
            Err(_) => {
                bump(&self.counters.io_errors, 1);
                std::thread::sleep(Duration::from_millis(1));
                false
            }
        }
    }

    /// Decides the fate of the packet of `len` bytes just read into the slot.
    fn admit(&mut self, len: usize) {
        let now = self.shared.now();
        let w = wire_of(self.offload, &self.ring.slot().expect("slot still reserved")[..len]);
        let c = &*self.counters;
        bump(&c.packets_in, w.packets as u64);
        bump(&c.bytes_in, w.bytes as u64);
        if self.shared.link_down(now) {
            return bump(&c.dropped_outage, 1);
        }
        if self.impair.lose() {
            return bump(&c.dropped_loss, 1);
        }
        let Verdict::Send { tx_start, deliver_at } = self.model.offer(now, w.bytes) else {
            return bump(&c.dropped_queue, w.packets as u64);
        };
        c.busy_ns.store(self.model.busy_ns(), Relaxed);
        c.queue_peak_bytes.store(self.model.peak_backlog(), Relaxed);
        self.store(len, tx_start, deliver_at);
    }

    /// Commits the slot as a packet, applying corruption and reordering.
    fn store(&mut self, len: usize, tx_start: u64, deliver_at: u64) {
        let slot = self.ring.slot().expect("slot still reserved");
        if self.impair.corrupt(&mut slot[..len]) {
            bump(&self.counters.corrupted, 1);
        }
        if self.held.is_none() && self.impair.reorder() {
            self.held = Some(Held { bytes: slot[..len].to_vec(), tx_start, deliver_at });
            bump(&self.counters.reordered, 1);
            return;
        }
        self.ring.commit(len, tx_start, deliver_at);
        if let Some(h) = self.held.take() {
            // Swap: the held packet leaves right after this one.
            if !self.ring.push(&h.bytes, h.tx_start, deliver_at) {
                bump(&self.counters.dropped_buffer, 1);
            }
        }
    }

    /// Sleeps until the input is readable or the next packet is due.
    fn wait(&mut self) {
        let now = self.shared.now();
        let next = [self.ring.front().map(|m| m.deliver_at), self.held.as_ref().map(|h| h.deliver_at)]
            .into_iter()
            .flatten()
            .min();
        let sleep = match next {
            Some(t) if t <= now + WAKE_ADVANCE_NS => return,
            Some(t) => (t - now - WAKE_ADVANCE_NS).min(MAX_SLEEP_NS),
            None => MAX_SLEEP_NS,
        };
        let ts = Timespec { tv_sec: (sleep / 1_000_000_000) as i64, tv_nsec: (sleep % 1_000_000_000) as i64 };
        let mut fds = [PollFd::new(&*self.input, PollFlags::IN)];
        if rustix::event::poll(&mut fds, Some(&ts)).is_err() {
            // EINTR: just loop again.
        }
    }
}

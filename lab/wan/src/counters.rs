//! What the delay line did, per direction: live atomics written by the
//! line's thread and plain snapshots for callers.
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters of one direction, as a plain snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirCounters {
    /// Packets read from the sending side's TUN device.
    pub packets_in: u64,
    /// Bytes of those packets.
    pub bytes_in: u64,
    /// Packets written to the receiving side (including corrupted ones).
    pub forwarded_packets: u64,
    /// Bytes of those packets.
    pub forwarded_bytes: u64,
    /// Dropped by the drop-tail queue (arrived while it was full).
    pub dropped_queue: u64,
    /// Dropped by random loss.
    pub dropped_loss: u64,
    /// Dropped because the link was down (outage).
    pub dropped_outage: u64,
    /// Dropped because the emulator's own buffer was full (should stay 0;
    /// non-zero means the buffer was sized too small: a bug).
    pub dropped_buffer: u64,
    /// Forwarded with one bit flipped.
    pub corrupted: u64,
    /// Delivered after the packet that followed them.
    pub reordered: u64,
    /// Read or write errors on the TUN devices.
    pub io_errors: u64,
    /// Dropped by the kernel before the emulator read them (TUN queue full,
    /// i.e. the emulator did not keep up). Filled in by `Lab::counters`.
    pub tun_dropped: u64,
    /// Largest delay between a packet's due time and its actual write (ns).
    pub late_max_ns: u64,
    /// Sum of those delays (ns), for the mean.
    pub late_sum_ns: u64,
    /// Packets written more than 1 ms after their due time.
    pub late_over_1ms: u64,
    /// Largest queue backlog seen (bytes).
    pub queue_peak_bytes: u64,
    /// Time the emulated link spent transmitting (ns).
    pub busy_ns: u64,
}

impl DirCounters {
    /// All drops of every kind.
    pub fn dropped(&self) -> u64 {
        self.dropped_queue + self.dropped_loss + self.dropped_outage + self.dropped_buffer + self.tun_dropped
    }

    /// Mean lateness of forwarded packets in ns.
    pub fn late_mean_ns(&self) -> u64 {
        self.late_sum_ns.checked_div(self.forwarded_packets).unwrap_or(0)
    }
}

/// Both directions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Side A to side B.
    pub a_to_b: DirCounters,
    /// Side B to side A.
    pub b_to_a: DirCounters,
}

/// The live counters of one direction (one cache line per writer).
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct LiveCounters {
    pub packets_in: AtomicU64,
    pub bytes_in: AtomicU64,
    pub forwarded_packets: AtomicU64,
    pub forwarded_bytes: AtomicU64,
    pub dropped_queue: AtomicU64,
    pub dropped_loss: AtomicU64,
    pub dropped_outage: AtomicU64,
    pub dropped_buffer: AtomicU64,
    pub corrupted: AtomicU64,
    pub reordered: AtomicU64,
    pub io_errors: AtomicU64,
    pub late_max_ns: AtomicU64,
    pub late_sum_ns: AtomicU64,
    pub late_over_1ms: AtomicU64,
    pub queue_peak_bytes: AtomicU64,
    pub busy_ns: AtomicU64,
}

/// Adds one (only the line's thread writes, so load+store is enough and
/// cheaper than an atomic read-modify-write).
pub(crate) fn bump(c: &AtomicU64, by: u64) {
    c.store(c.load(Relaxed) + by, Relaxed);
}

impl LiveCounters {
    pub fn snapshot(&self) -> DirCounters {
        DirCounters {
            packets_in: self.packets_in.load(Relaxed),
            bytes_in: self.bytes_in.load(Relaxed),
            forwarded_packets: self.forwarded_packets.load(Relaxed),
            forwarded_bytes: self.forwarded_bytes.load(Relaxed),
            dropped_queue: self.dropped_queue.load(Relaxed),
            dropped_loss: self.dropped_loss.load(Relaxed),
            dropped_outage: self.dropped_outage.load(Relaxed),
            dropped_buffer: self.dropped_buffer.load(Relaxed),
            corrupted: self.corrupted.load(Relaxed),
            reordered: self.reordered.load(Relaxed),
            io_errors: self.io_errors.load(Relaxed),
            tun_dropped: 0,
            late_max_ns: self.late_max_ns.load(Relaxed),
            late_sum_ns: self.late_sum_ns.load(Relaxed),
            late_over_1ms: self.late_over_1ms.load(Relaxed),
            queue_peak_bytes: self.queue_peak_bytes.load(Relaxed),
            busy_ns: self.busy_ns.load(Relaxed),
        }
    }
}

fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

impl fmt::Display for DirCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "in {} pkts ({}), fwd {} pkts ({}); dropped: queue {}, loss {}, outage {}, \
             buffer {}, tun {}; corrupted {}, reordered {}, io errors {}; \
             late mean {} us max {} us, {} over 1 ms; queue peak {}",
            self.packets_in,
            human_bytes(self.bytes_in),
            self.forwarded_packets,
            human_bytes(self.forwarded_bytes),
            self.dropped_queue,
            self.dropped_loss,
            self.dropped_outage,
            self.dropped_buffer,
            self.tun_dropped,
            self.corrupted,
            self.reordered,
            self.io_errors,
            self.late_mean_ns() / 1000,
            self.late_max_ns / 1000,
            self.late_over_1ms,
            human_bytes(self.queue_peak_bytes),
        )
    }
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "A->B: {}", self.a_to_b)?;
        write!(f, "B->A: {}", self.b_to_a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_totals() {
        let live = LiveCounters::default();
        bump(&live.packets_in, 10);
        bump(&live.dropped_loss, 2);
        bump(&live.dropped_queue, 1);
        bump(&live.forwarded_packets, 7);
        bump(&live.late_sum_ns, 7000);
        let d = live.snapshot();
        assert_eq!(d.dropped(), 3);
        assert_eq!(d.late_mean_ns(), 1000);
        let s = Counters { a_to_b: d, b_to_a: DirCounters::default() }.to_string();
        assert!(s.contains("A->B: in 10 pkts"), "{s}");
        assert!(s.contains("loss 2"), "{s}");
    }
}

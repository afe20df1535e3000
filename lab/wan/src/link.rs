//! The link model: a drop-tail byte queue in front of a fixed-rate
//! serializer, then a fixed propagation delay. Pure logic on virtual time
//! (nanoseconds), no clock and no I/O.
//!
//! A packet offered at `now` starts transmission when the link is free
//! (`tx_start = max(now, free_at)`), occupies the link for
//! `len * 8 / rate` and is delivered one propagation delay after its last
//! bit left. Departure times are therefore monotonic in arrival order, so the
//! delay line can be a plain FIFO.

/// Outcome of [`LinkModel::offer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted: starts transmission at `tx_start`, arrives at `deliver_at`.
    Send { tx_start: u64, deliver_at: u64 },
    /// Dropped because the queue holds too many bytes.
    Overflow,
}

/// Rate limiter, drop-tail queue and delay, in virtual nanoseconds.
#[derive(Debug, Clone)]
pub struct LinkModel {
    rate_bps: u64,
    delay_ns: u64,
    queue_bytes: u64,
    /// When the serializer finishes the last accepted packet.
    free_at: u64,
    /// Remainder of `bits * 1e9 / rate` not yet turned into whole ns, so
    /// that rounding never accumulates.
    carry: u128,
    busy_ns: u64,
    peak_backlog: u64,
}

impl LinkModel {
    /// `rate_bps` > 0; `queue_bytes` is the drop-tail limit on bytes waiting
    /// or in transmission (an idle link always accepts one packet).
    pub fn new(rate_bps: u64, delay_ns: u64, queue_bytes: u64) -> LinkModel {
        assert!(rate_bps > 0, "rate must be positive");
        LinkModel { rate_bps, delay_ns, queue_bytes, free_at: 0, carry: 0, busy_ns: 0, peak_backlog: 0 }
    }

    /// Bytes not yet serialized at `now` (queued plus the one on the wire).
    pub fn backlog_bytes(&self, now: u64) -> u64 {
        let left_ns = self.free_at.saturating_sub(now) as u128;
        (left_ns * self.rate_bps as u128 / 8_000_000_000) as u64
    }

    /// Offers a packet of `len` bytes arriving at `now` (non-decreasing).
    pub fn offer(&mut self, now: u64, len: usize) -> Verdict {
        let backlog = self.backlog_bytes(now);
        if backlog > 0 && backlog + len as u64 > self.queue_bytes {
            return Verdict::Overflow;
        }
        let tx_start = self.free_at.max(now);
        let ser = self.serialization_ns(len);
        self.free_at = tx_start + ser;
        self.busy_ns += ser;
        self.peak_backlog = self.peak_backlog.max(backlog + len as u64);
        Verdict::Send { tx_start, deliver_at: self.free_at + self.delay_ns }
    }

    fn serialization_ns(&mut self, len: usize) -> u64 {
        let num = len as u128 * 8_000_000_000 + self.carry;
        let rate = self.rate_bps as u128;
        self.carry = num % rate;
        (num / rate) as u64
    }

    /// Total time the serializer was busy (for utilization).
    pub fn busy_ns(&self) -> u64 {
        self.busy_ns
    }

    /// Largest backlog seen, in bytes.
    pub fn peak_backlog(&self) -> u64 {
        self.peak_backlog
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(v: Verdict) -> (u64, u64) {
        match v {
            Verdict::Send { tx_start, deliver_at } => (tx_start, deliver_at),
            Verdict::Overflow => panic!("unexpected overflow"),
        }
    }

    #[test]
    fn idle_link_adds_serialization_and_delay() {
        // 1 Gbit/s: 1500 bytes take 12 us; delay 10 ms.
        let mut l = LinkModel::new(1_000_000_000, 10_000_000, 1 << 20);
        let (tx, at) = send(l.offer(1_000, 1500));
        assert_eq!(tx, 1_000);
        assert_eq!(at, 1_000 + 12_000 + 10_000_000);
    }

    #[test]
    fn back_to_back_packets_are_spaced_at_line_rate() {
        let mut l = LinkModel::new(1_000_000_000, 0, 1 << 20);
        let mut last = 0;
        for i in 0..100 {
            let (_, at) = send(l.offer(0, 1500));
            assert_eq!(at, (i + 1) * 12_000);
            assert!(at > last);
            last = at;
        }
        assert_eq!(l.backlog_bytes(0), 150_000);
        assert_eq!(l.backlog_bytes(600_000), 75_000);
        assert_eq!(l.backlog_bytes(2_000_000), 0);
    }

    #[test]
    fn rounding_does_not_accumulate() {
        // 3 Gbit/s: 1000 bytes = 2666.67 ns; after 3000 packets exactly 8 ms.
        let mut l = LinkModel::new(3_000_000_000, 0, u64::MAX);
        let mut at = 0;
        for _ in 0..3000 {
            at = send(l.offer(0, 1000)).1;
        }
        assert_eq!(at, 8_000_000);
        assert_eq!(l.busy_ns(), 8_000_000);
    }

    #[test]
    fn drop_tail_when_queue_full() {
        // 10 packets of 1000 bytes fit a 10_000-byte queue, the 11th does not.
        let mut l = LinkModel::new(8_000_000, 0, 10_000); // 1 ms per 1000 bytes
        for _ in 0..10 {
            send(l.offer(0, 1000));
        }
        assert_eq!(l.offer(0, 1000), Verdict::Overflow);
        // After 1 ms one packet has left: room again.
        send(l.offer(1_000_000, 1000));
        assert_eq!(l.offer(1_000_000, 1000), Verdict::Overflow);
        assert_eq!(l.peak_backlog(), 10_000);
    }

    #[test]
    fn idle_link_accepts_packet_larger_than_queue() {
        let mut l = LinkModel::new(8_000_000, 0, 100);
        send(l.offer(0, 1500));
        assert_eq!(l.offer(0, 10), Verdict::Overflow);
    }

    #[test]
    fn sustained_rate_matches_set_rate() {
        // Offer 2x the line rate for 1 s of virtual time; what is accepted
        // must equal rate * time (+ the queue), the rest overflows.
        let rate = 100_000_000;
        let mut l = LinkModel::new(rate, 5_000_000, 50_000);
        let (mut sent, mut dropped, mut last_at) = (0u64, 0u64, 0u64);
        for i in 0..16_667u64 {
            match l.offer(i * 60_000, 1500) {
                Verdict::Send { deliver_at, .. } => {
                    assert!(deliver_at >= last_at);
                    last_at = deliver_at;
                    sent += 1500;
                }
                Verdict::Overflow => dropped += 1,
            }
        }
        let expect = rate / 8; // bytes in one second
        assert!(sent <= expect + 50_000 + 1500, "{sent}");
        assert!(sent >= expect - 1500, "{sent}");
        assert!(dropped > 8000);
    }
}

//! A FIFO of packets stored back to back in one preallocated byte ring.
//!
//! Packets are read from the TUN device straight into [`PacketRing::slot`]
//! and written out from [`PacketRing::front`]: no allocation and no copy per
//! packet. A packet never wraps around the end of the buffer; the slot is
//! always `max_pkt` bytes long so any packet fits.
use std::collections::VecDeque;

/// Where one stored packet lives and when it leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Offset in the ring buffer.
    pub off: usize,
    /// Packet length in bytes.
    pub len: usize,
    /// When the packet started transmission on the emulated link (ns).
    pub tx_start: u64,
    /// When it is to be written to the far side (ns).
    pub deliver_at: u64,
}

/// Byte ring plus a FIFO of [`Meta`].
#[derive(Debug)]
pub struct PacketRing {
    buf: Box<[u8]>,
    metas: VecDeque<Meta>,
    /// Next write position.
    tail: usize,
    /// Position of the slot handed out by `slot`, until `commit`.
    pending: Option<usize>,
    max_pkt: usize,
}

impl PacketRing {
    /// A ring of `capacity` bytes (rounded up to hold at least two packets of
    /// `max_pkt`). Pages are touched only when used.
    pub fn new(capacity: usize, max_pkt: usize) -> PacketRing {
        let cap = capacity.max(2 * max_pkt + 1);
        PacketRing {
            buf: vec![0u8; cap].into_boxed_slice(),
            metas: VecDeque::with_capacity((cap / 1500).clamp(64, 1 << 20)),
            tail: 0,
            pending: None,
            max_pkt,
        }
    }

    /// Packets stored.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.metas.len()
    }

    /// True when no packet is stored.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.metas.is_empty()
    }

    /// Finds room for one more packet of up to `max_pkt` bytes.
    fn free_pos(&self) -> Option<usize> {
        let Some(head) = self.metas.front().map(|m| m.off) else {
            return Some(0);
        };
        let need = self.max_pkt;
        if self.tail > head {
            if self.buf.len() - self.tail >= need {
                Some(self.tail)
            } else if head >= need {
                Some(0)
            } else {
                None
            }
        } else if head - self.tail >= need {
            Some(self.tail)
        } else {
            None
        }
    }

    /// A writable buffer of `max_pkt` bytes for the next packet, or `None`
    /// when the ring is full. Follow with [`commit`](Self::commit) to keep
    /// the packet, or just call `slot` again to discard it.
    pub fn slot(&mut self) -> Option<&mut [u8]> {
        let pos = self.free_pos()?;
        self.pending = Some(pos);
        Some(&mut self.buf[pos..pos + self.max_pkt])
    }

    /// Keeps the first `len` bytes of the last slot as a packet.
    pub fn commit(&mut self, len: usize, tx_start: u64, deliver_at: u64) {
        let off = self.pending.take().expect("commit without slot");
        assert!(len <= self.max_pkt);
        if let Some(last) = self.metas.back() {
            debug_assert!(deliver_at >= last.deliver_at, "FIFO order broken");
        }
        self.metas.push_back(Meta { off, len, tx_start, deliver_at });
        self.tail = off + len;
    }

    /// Copies `packet` in as a new entry; false when the ring is full.
    pub fn push(&mut self, packet: &[u8], tx_start: u64, deliver_at: u64) -> bool {
        match self.slot() {
            Some(slot) => {
                slot[..packet.len()].copy_from_slice(packet);
                self.commit(packet.len(), tx_start, deliver_at);
                true
            }
            None => false,
        }
    }

    /// The oldest packet's metadata.
    pub fn front(&self) -> Option<Meta> {
        self.metas.front().copied()
    }

    /// The bytes of packet `m` (as returned by `front`).
    pub fn bytes_of(&self, m: &Meta) -> &[u8] {
        &self.buf[m.off..m.off + m.len]
    }

    /// Removes the oldest packet.
    pub fn pop(&mut self) {
        self.metas.pop_front();
        if self.metas.is_empty() {
            self.tail = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(r: &mut PacketRing, byte: u8, len: usize, t: u64) -> bool {
        match r.slot() {
            Some(s) => {
                s[..len].fill(byte);
                r.commit(len, t, t);
                true
            }
            None => false,
        }
    }

    #[test]
    fn fifo_order_and_contents() {
        let mut r = PacketRing::new(10_000, 1500);
        for i in 0..5u8 {
            assert!(put(&mut r, i, 100 + i as usize, i as u64));
        }
        assert_eq!(r.len(), 5);
        for i in 0..5u8 {
            let m = r.front().unwrap();
            assert_eq!(m.len, 100 + i as usize);
            assert!(r.bytes_of(&m).iter().all(|&b| b == i));
            r.pop();
        }
        assert!(r.is_empty());
    }

    #[test]
    fn fills_up_then_wraps_around() {
        let mut r = PacketRing::new(10_000, 1500);
        let mut n = 0;
        while put(&mut r, n as u8, 1500, n) {
            n += 1;
        }
        assert_eq!(n, 6); // 6 * 1500 = 9000; no room for a 7th slot
        r.pop();
        r.pop(); // head at 3000: a slot fits at 0
        assert!(put(&mut r, 99, 1000, 7));
        assert!(put(&mut r, 98, 500, 8)); // slot 1000..2500 fits below head 3000
        assert!(put(&mut r, 97, 10, 9)); // slot 1500..3000 fits exactly
        assert!(!put(&mut r, 96, 10, 10)); // tail 1510: 1490 bytes left
        let metas: Vec<usize> = (0..r.len())
            .map(|_| {
                let m = r.front().unwrap();
                r.pop();
                m.off
            })
            .collect();
        assert_eq!(metas, [3000, 4500, 6000, 7500, 0, 1000, 1500]);
    }

    #[test]
    fn wrapped_ring_keeps_every_packet_intact() {
        // Random-ish sizes through a small ring for many rounds.
        let mut r = PacketRing::new(7_000, 1500);
        let (mut next_in, mut next_out) = (0u64, 0u64);
        for round in 0..10_000u64 {
            let len = 20 + (round * 7919 % 1481) as usize;
            if put(&mut r, (next_in % 251) as u8, len, next_in) {
                next_in += 1;
            }
            if round % 3 != 0 {
                if let Some(m) = r.front() {
                    assert_eq!(m.deliver_at, next_out);
                    let want = (next_out % 251) as u8;
                    assert!(r.bytes_of(&m).iter().all(|&b| b == want));
                    r.pop();
                    next_out += 1;
                }
            }
        }
        assert!(next_out > 5000);
    }

    #[test]
    fn push_copies() {
        let mut r = PacketRing::new(4_000, 1500);
        assert!(r.push(b"hello", 1, 2));
        let m = r.front().unwrap();
        assert_eq!(r.bytes_of(&m), b"hello");
        assert_eq!((m.tx_start, m.deliver_at), (1, 2));
    }
}

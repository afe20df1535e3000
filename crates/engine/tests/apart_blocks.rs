//! Blocks sent as copies ([`Apart`], a manifest chunk and its copy) over
//! real connections: every block arrives, and the transfer ends even when
//! the last ready block is a copy that only other connections may take
//! (the connection that took its original waited for it, and nothing woke
//! it for its trailer: the receiver then timed out waiting for its EOD).

mod common;
use common::pair;
use lightpath_engine::modee::{self, Apart, OutBlock, Payload, Supply};
use lightpath_engine::{Control, MemorySink, RecvOpts};
use std::io;
use std::sync::Mutex;
use std::time::Duration;

/// Data blocks of `DATA` bytes, and after every `EVERY`th one a pair of
/// copies of `SMALL` bytes (the last pair ends the supply).
struct Pairs {
    next: Mutex<u64>,
    pairs: u64,
}

const DATA: u64 = 32 << 10;
const SMALL: u64 = 100;
const EVERY: u64 = 3;

impl Pairs {
    fn len(&self) -> u64 {
        self.pairs * (EVERY * DATA + 2 * SMALL)
    }
    fn byte(at: u64) -> u8 {
        (at % 251) as u8
    }
}

impl Supply<'static> for Pairs {
    fn next(&self) -> io::Result<Option<OutBlock<'static>>> {
        let mut n = self.next.lock().unwrap();
        let (group, i) = (*n / (EVERY + 2), *n % (EVERY + 2));
        if group == self.pairs {
            return Ok(None);
        }
        *n += 1;
        let base = group * (EVERY * DATA + 2 * SMALL);
        let (off, len, apart) = match i {
            i if i < EVERY => (base + i * DATA, DATA, None),
            i => (base + EVERY * DATA + (i - EVERY) * SMALL, SMALL, Some(Apart { key: group, copies: 2 })),
        };
        let payload = Payload::Bytes((off..off + len).map(Pairs::byte).collect());
        Ok(Some(OutBlock { wire_offset: off, len, payload, apart }))
    }
}

#[test]
fn copies_arrive_and_the_transfer_ends_when_a_copy_is_last() {
    for round in 0..20 {
        let supply = Pairs { next: Mutex::new(0), pairs: 8 };
        let (mut s, mut r) = pair(3);
        // A sender that stalls then fails on its own idle limit instead of
        // leaving the test to hang.
        for c in &s {
            c.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        let sink = MemorySink::new(1 << 30);
        let opts = RecvOpts { base: 0, max_offset: 1 << 40, idle: Duration::from_secs(5) };
        std::thread::scope(|sc| {
            let sent = sc.spawn(|| modee::send_blocks(&mut s, &supply, &Control::new()));
            let got = modee::recv(&mut r, None, &sink, &opts, &Control::new());
            got.unwrap_or_else(|e| panic!("round {round}: {e}"));
            sent.join().unwrap().unwrap();
        });
        let want: Vec<u8> = (0..supply.len()).map(Pairs::byte).collect();
        assert!(sink.into_inner() == want, "round {round}: every block, once");
    }
}

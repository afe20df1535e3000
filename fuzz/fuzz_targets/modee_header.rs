//! MODE E framing from an untrusted sender.
//!
//! 1. The first 17 bytes as one header: decode/encode round trip and
//!    `parse` agreeing with `validate`.
//! 2. A receiver model fed the whole input as records
//!    `[stream u8][header 17 bytes]` (payload sizes are the headers'
//!    counts; payload bytes are not in the input, so huge blocks are cheap):
//!    EOF/EOD accounting across streams and the received ranges.
//! 3. The whole input as one real MODE E byte stream: header, then `count`
//!    payload bytes, until EOD or the input ends.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lightpath_proto::modee::{HEADER_LEN, MAX_STREAMS};
use lightpath_proto::{BlockHeader, RangeSet};

fuzz_target!(|data: &[u8]| {
    if let Some(first) = data.first_chunk::<HEADER_LEN>() {
        one_header(first);
    }
    let mut rx = Receiver::default();
    for rec in data.chunks_exact(HEADER_LEN + 1) {
        let stream = usize::from(rec[0] % 4);
        rx.block(stream, rec[1..].try_into().unwrap());
    }
    byte_stream(data);
});

fn one_header(b: &[u8; HEADER_LEN]) {
    let h = BlockHeader::decode(b);
    assert_eq!(&h.encode(), b);
    match BlockHeader::parse(b) {
        Ok(p) => {
            assert_eq!(p, h);
            assert!(h.validate().is_ok());
            assert!(b[0] & 0x90 == 0);
            if h.is_eof() {
                assert!((1..=MAX_STREAMS).contains(&h.offset));
                assert_eq!(h.payload_len(), 0);
            } else {
                assert!(h.offset.checked_add(h.count).is_some());
                assert_eq!(h.payload_len(), h.count);
            }
        }
        Err(_) => assert!(h.validate().is_err()),
    }
}

#[derive(Default)]
struct Receiver {
    eod: [bool; 4],
    closed: [bool; 4],
    eods: u64,
    eof: Option<u64>,
    got: RangeSet,
    payload: u128,
    failed: bool,
    done: bool,
}

impl Receiver {
    fn block(&mut self, s: usize, bytes: &[u8; HEADER_LEN]) {
        if self.failed || self.done || self.closed[s] {
            return;
        }
        let h = match BlockHeader::parse(bytes) {
            Ok(h) => h,
            Err(_) => {
                self.failed = true;
                return;
            }
        };
        if self.eod[s] && (h.payload_len() > 0 || h.is_eod()) {
            // Data or a second EOD after EOD on the same stream.
            self.failed = true;
            return;
        }
        if h.is_eof() {
            match self.eof {
                Some(n) if n != h.offset => {
                    self.failed = true;
                    return;
                }
                _ => self.eof = Some(h.offset),
            }
        } else if h.count > 0 {
            let end = h.offset.checked_add(h.count).expect("parse accepted an overflowing block");
            let before = self.got.covered();
            let was_there = self.got.contains_range(h.offset, end);
            self.got.insert(h.offset, end);
            self.payload += u128::from(h.count);
            let after = self.got.covered();
            assert!(self.got.contains_range(h.offset, end));
            assert!(self.got.overlaps(h.offset, end));
            assert!(after >= before && after - before <= h.count);
            assert_eq!(after == before, was_there);
        }
        if h.is_eod() {
            self.eod[s] = true;
            self.eods += 1;
        }
        if h.is_close() {
            self.closed[s] = true;
        }
        if let Some(n) = self.eof {
            if self.eods > n {
                self.failed = true;
                return;
            }
            self.done = self.eods == n;
        }
        self.check();
    }

    fn check(&self) {
        let r = self.got.ranges();
        assert!(r.iter().all(|&(a, b)| a < b));
        assert!(r.windows(2).all(|w| w[0].1 < w[1].0));
        assert!(u128::from(self.got.covered()) <= self.payload);
        if let Some(&(_, end)) = r.last() {
            let missing = self.got.missing(end);
            assert_eq!(u128::from(missing.covered()) + u128::from(self.got.covered()), u128::from(end));
            for (a, b) in missing.iter() {
                assert!(!self.got.overlaps(a, b));
            }
        }
    }
}

fn byte_stream(mut data: &[u8]) {
    let mut got = RangeSet::new();
    while let Some((hdr, rest)) = data.split_first_chunk::<HEADER_LEN>() {
        let Ok(h) = BlockHeader::parse(hdr) else { return };
        let Ok(len) = usize::try_from(h.payload_len()) else { return };
        if len > rest.len() {
            return; // connection ended inside a block
        }
        if len > 0 {
            got.insert(h.offset, h.offset + h.payload_len());
        }
        data = &rest[len..];
        if h.is_eod() {
            break;
        }
    }
    let covered: u64 = got.ranges().iter().map(|&(a, b)| b - a).sum();
    assert_eq!(covered, got.covered());
}

//! Range lists from the network (`REST a-b,...`, `111 Range Marker`) and the
//! set operations on them.
//!
//! Input: text up to the first `\n` goes to `RangeSet::parse` (and through
//! `Command::parse("REST ...")`); the rest is a list of 17-byte operations
//! `[op][a u64 BE][b u64 BE]` applied both to a set with the full 64-bit
//! values (invariants checked) and, reduced mod 256, to a set checked
//! against a 256-bit bitmap.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lightpath_proto::{Command, RangeSet, Restart};

const SMALL: u64 = 256;

fuzz_target!(|data: &[u8]| {
    let (text, ops) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let mut big = RangeSet::new();
    if let Ok(text) = std::str::from_utf8(text) {
        if let Ok(set) = RangeSet::parse(text) {
            invariants(&set);
            assert_eq!(RangeSet::parse(&set.to_string()).as_ref(), Ok(&set));
            if !text.contains(['\r', '\n', '\0']) && !text.trim().bytes().all(|b| b.is_ascii_digit()) {
                let cmd = Command::parse(format!("REST {text}").as_bytes());
                if !text.trim().eq_ignore_ascii_case("STREAM") {
                    assert_eq!(cmd, Ok(Command::Rest(Restart::Ranges(set.clone()))));
                }
            }
            big = set;
        }
    }

    let mut small = RangeSet::new();
    let mut bits = [false; SMALL as usize];
    for op in ops.chunks_exact(17) {
        let a = u64::from_be_bytes(op[1..9].try_into().unwrap());
        let b = u64::from_be_bytes(op[9..17].try_into().unwrap());
        let (sa, sb) = (a % (SMALL + 1), b % (SMALL + 1));
        match op[0] % 4 {
            0 => {
                big.insert(a, b);
                invariants(&big);
                if a < b {
                    assert!(big.contains_range(a, b));
                }
                small.insert(sa, sb);
                for x in sa..sb {
                    bits[x as usize] = true;
                }
            }
            1 => {
                let _ = big.overlaps(a, b);
                assert_eq!(small.overlaps(sa, sb), (sa..sb).any(|x| bits[x as usize]));
            }
            2 => {
                let _ = big.contains_range(a, b);
                assert_eq!(small.contains_range(sa, sb), (sa..sb).all(|x| bits[x as usize]));
            }
            _ => {
                let m = big.missing(a);
                invariants(&m);
                let below: u128 = big.ranges().iter().map(|&(s, e)| u128::from(e.min(a) - s.min(a))).sum();
                assert_eq!(u128::from(m.covered()) + below, u128::from(a));
                let m = small.missing(sa);
                for x in 0..SMALL {
                    let in_m = m.contains_range(x, x + 1);
                    assert_eq!(in_m, x < sa && !bits[x as usize]);
                }
            }
        }
        assert_eq!(small.covered(), bits.iter().filter(|&&x| x).count() as u64);
    }
});

fn invariants(s: &RangeSet) {
    let r = s.ranges();
    assert!(r.iter().all(|&(a, b)| a < b));
    assert!(r.windows(2).all(|w| w[0].1 < w[1].0));
}

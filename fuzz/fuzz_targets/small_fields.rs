//! The small fields a peer sends outside the control line's grammar:
//! `DCON`'s argument and the 20-byte hello on a connection opened ahead
//! (`proto::ahead`), and the times of MLST's `Modify` fact and `MFMT`
//! (`proto::ftptime`). Byte 0 picks the parser. Must never panic; what
//! parses re-encodes to what parses the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lightpath_proto::{ahead, ftptime};

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    match pick % 3 {
        0 => {
            if let Ok(a) = ahead::parse_dcon(&text) {
                assert!((1..=64).contains(&a.count));
            }
        }
        1 => {
            let mut h = [0u8; ahead::HELLO_LEN];
            let n = rest.len().min(h.len());
            h[..n].copy_from_slice(&rest[..n]);
            if let Some(t) = ahead::parse_hello(&h) {
                assert_eq!(ahead::hello(&t), h);
            }
        }
        _ => {
            if let Some(secs) = ftptime::parse(&text) {
                assert_eq!(ftptime::parse(&ftptime::format(secs)), Some(secs));
                let (s, nanos) = ftptime::parse_ns(&text).expect("parse_ns takes what parse takes");
                assert!(s == secs && nanos < 1_000_000_000);
            }
        }
    }
});

//! Virtual-file manifest: arbitrary bytes -> `manifest::Decoder`, fed in
//! chunks, polled after each.
//!
//! Input: byte 0 = config (bit 0: prepend a valid header so entries are
//! reached at once; bits 1.. chunk size), the rest = the manifest stream.
//! Checks: no panic; every accepted entry has a safe relative path, a parent
//! accepted earlier as a directory, contiguous data; hard links name earlier
//! files; the accepted entries re-encode (through the checking `Encoder`) and
//! decode to themselves; a finished manifest's totals match the entries.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lightpath_proto::manifest::{self, Decoder, Encoder, Entry, Kind, Limits};
use std::collections::HashMap;

fuzz_target!(|data: &[u8]| {
    let Some((&cfg, rest)) = data.split_first() else { return };
    let mut input = Vec::new();
    if cfg & 1 != 0 {
        manifest::encode_header(&mut input);
    }
    input.extend_from_slice(rest);
    let chunk = usize::from(cfg >> 1) + 1;
    let limits = Limits { max_entries: 4096, max_path_bytes: 1 << 20, max_total: 1 << 40 };

    let mut d = Decoder::new(limits);
    let mut accepted = Vec::new();
    'feed: for piece in input.chunks(chunk) {
        d.handle_bytes(piece);
        loop {
            match d.poll_entry() {
                Ok(Some(e)) => accepted.push(e),
                Ok(None) => break,
                Err(_) => {
                    assert!(d.poll_entry().is_err(), "errors are final");
                    break 'feed;
                }
            }
        }
    }
    check(&accepted);
    if let Ok(summary) = d.finish() {
        assert_eq!(summary.entries, accepted.len() as u64);
    }
    round_trip(&accepted, limits);
});

fn check(entries: &[Entry]) {
    let mut seen: HashMap<&[u8], &Kind> = HashMap::new();
    let mut offset = 0u64;
    for e in entries {
        assert!(manifest::check_path(&e.path).is_ok());
        assert!(e.mode <= manifest::MODE_MASK);
        if let Some(p) = manifest::parent(&e.path) {
            assert_eq!(seen.get(p), Some(&&Kind::Dir));
        }
        match &e.kind {
            Kind::File { size, offset: o } => {
                assert_eq!(*o, offset);
                offset += size;
            }
            Kind::HardLink { target } => assert!(matches!(seen.get(target.as_slice()), Some(Kind::File { .. }))),
            Kind::Symlink { target } => assert!(!target.is_empty() && !target.contains(&0)),
            Kind::Dir => {}
        }
        assert!(seen.insert(&e.path, &e.kind).is_none(), "duplicate accepted");
    }
}

fn round_trip(entries: &[Entry], limits: Limits) {
    let mut enc = Encoder::new(limits);
    let mut bytes = Vec::new();
    for e in entries {
        enc.entry(e, &mut bytes).expect("decoder accepted what the encoder refuses");
    }
    enc.finish(&mut bytes).unwrap();
    let mut d = Decoder::new(limits);
    d.handle_bytes(&bytes);
    let mut again = Vec::new();
    while let Some(e) = d.poll_entry().expect("re-encoded manifest refused") {
        again.push(e);
    }
    assert_eq!(again, entries);
    assert_eq!(d.finish().unwrap().entries, entries.len() as u64);
}

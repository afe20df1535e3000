//! Client side: arbitrary bytes from a server -> LineBuffer -> ReplyParser,
//! and every completed reply through the reply consumers (FEAT, markers,
//! PASV/EPSV, a tree's held files). Must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lightpath_proto::hostport::{parse_epsv_reply, parse_pasv_reply};
use lightpath_proto::{Features, Line, LineBuffer, PerfMarker, Reply, ReplyParser, RestartMarker};
use std::net::{IpAddr, Ipv4Addr};

fuzz_target!(|data: &[u8]| {
    let mut lb = LineBuffer::new();
    lb.handle_bytes(data);
    let mut p = ReplyParser::new();
    while let Some(line) = lb.poll_line() {
        let Line::Text(bytes) = line else { continue };
        let text = String::from_utf8_lossy(&bytes);
        match p.handle_line(&text) {
            Ok(Some(r)) => consume(&r),
            Ok(None) => {}
            Err(_) => p = ReplyParser::new(),
        }
    }
});

fn consume(r: &Reply) {
    assert!((100..=599).contains(&r.code));
    assert!(!r.lines.is_empty());
    let _ = (r.text(), r.full_text(), r.is_ok(), r.is_error(), r.is_preliminary(), r.is_intermediate());
    let _ = r.encode();
    let f = Features::from_reply(r);
    assert!(r.code == 211 || f == Features::default());
    if let Some(m) = RestartMarker::from_reply(r) {
        assert_eq!(RestartMarker::from_reply(&m.to_reply()), Some(m));
    }
    if let Some(m) = PerfMarker::from_reply(r) {
        let back = PerfMarker::from_reply(&m.to_reply()).expect("re-encoded perf marker parses");
        assert_eq!((back.stripe_index, back.bytes, back.total_stripes), (m.stripe_index, m.bytes, m.total_stripes));
    }
    if let Ok(a) = parse_pasv_reply(r.text()) {
        assert!(a.port() >= 1024);
    }
    let peer = IpAddr::V4(Ipv4Addr::LOCALHOST);
    if let Ok(a) = parse_epsv_reply(r.text(), peer) {
        assert!(a.port() >= 1024 && a.ip() == peer);
    }
    let mut taken = r.clone();
    if let Some(h) = taken.take_held() {
        assert!(!h.after.is_empty() && h.after.len() <= lightpath_proto::command::MAX_VRET_AFTER);
        assert!(taken.lines.len() < r.lines.len(), "the held line is taken out");
        let mut back = Reply::new(426, "x").with_held(&h);
        assert_eq!(back.take_held(), Some(h));
    }
}

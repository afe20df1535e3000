//! Round-trip properties of the wire codecs: MODE E block headers, replies
//! (through the client-side framing and `ReplyParser`), 111/112 markers,
//! host-port forms, and `Command::parse`.

use lightpath_proto::command::{CksumArgs, Opts};
use lightpath_proto::hostport::{
    format_eprt, format_port, parse_eprt, parse_epsv_reply, parse_pasv_reply, parse_port, AddrError,
};
use lightpath_proto::modee::{HeaderError, HEADER_LEN, MAX_STREAMS};
use lightpath_proto::{
    BlockHeader, Command, Descriptor, Line, LineBuffer, PerfMarker, RangeSet, Reply, ReplyParser, Restart,
    RestartMarker,
};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

// ---------------------------------------------------------------- helpers

/// Frame `wire` the way a client does (LineBuffer) and feed every line to a
/// `ReplyParser`. Returns the completed replies and the number of lines seen.
fn parse_wire(wire: &[u8]) -> (Vec<Reply>, usize) {
    let mut lb = LineBuffer::new();
    lb.handle_bytes(wire);
    assert_eq!(lb.pending(), 0, "encoded reply does not end with a line end");
    let mut p = ReplyParser::new();
    let mut out = Vec::new();
    let mut n = 0;
    while let Some(line) = lb.poll_line() {
        let Line::Text(bytes) = line else { panic!("reply line too long") };
        n += 1;
        let text = String::from_utf8(bytes).expect("encoded reply is UTF-8");
        if let Some(r) = p.handle_line(&text).unwrap() {
            out.push(r);
        }
    }
    (out, n)
}

/// Text with a high share of CR, LF, NUL, other C0/C1 controls and DEL.
fn nasty_text(max: usize) -> impl Strategy<Value = String> {
    let ch = prop_oneof![
        4 => any::<char>(),
        2 => Just('\r'),
        2 => Just('\n'),
        1 => (0u8..0x20).prop_map(char::from),
        1 => Just('\u{7f}'),
        1 => (0x80u32..0xa0).prop_map(|c| char::from_u32(c).unwrap()),
        2 => Just(' '),
        1 => Just('-'),
        2 => (b'0'..=b'9').prop_map(char::from),
    ];
    proptest::collection::vec(ch, 0..max).prop_map(String::from_iter)
}

/// What `Reply::new`/`Reply::multi` promise to do with the text: every
/// control character becomes `?`, nothing else changes.
fn cleaned(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// Body lines go out with exactly one leading space.
fn as_body(s: &str) -> String {
    format!(" {}", s.strip_prefix(' ').unwrap_or(s))
}

/// Lines that look like reply lines often enough to reach every parser state.
fn reply_like_line() -> impl Strategy<Value = String> {
    prop_oneof![
        nasty_text(12),
        (
            proptest::sample::select(&["211", "200", "500", "099", "21", "2111"][..]),
            proptest::sample::select(&["", " ", "-", "x", "\u{e9}"][..]),
            nasty_text(6),
        )
            .prop_map(|(c, s, t)| format!("{c}{s}{t}")),
    ]
}

fn reply_code() -> impl Strategy<Value = u16> {
    100u16..=599
}

// ------------------------------------------------------------ MODE E headers

/// Independent statement of which headers a receiver accepts.
fn header_model_ok(desc: u8, count: u64, offset: u64) -> bool {
    if desc & 0x80 != 0 || desc & 0x10 != 0 || desc & 0x20 != 0 {
        return false;
    }
    if desc & 0x40 != 0 {
        return (1..=1024).contains(&offset) && count == 0;
    }
    u128::from(offset) + u128::from(count) <= u128::from(u64::MAX)
}

fn interesting_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0u64..=2,
        0u64..=2048,
        (0u64..4096).prop_map(|d| u64::MAX - d),
        Just(MAX_STREAMS),
        Just(MAX_STREAMS + 1),
    ]
}

proptest! {
    #[test]
    fn header_encode_decode(desc in any::<u8>(), count in interesting_u64(), offset in interesting_u64()) {
        let h = BlockHeader { desc: Descriptor(desc), count, offset };
        let wire = h.encode();
        prop_assert_eq!(wire.len(), HEADER_LEN);
        prop_assert_eq!(wire[0], desc);
        prop_assert_eq!(&wire[1..9], &count.to_be_bytes()[..]);
        prop_assert_eq!(&wire[9..17], &offset.to_be_bytes()[..]);
        prop_assert_eq!(BlockHeader::decode(&wire), h);
        prop_assert_eq!(h.validate().is_ok(), header_model_ok(desc, count, offset));
    }

    #[test]
    fn header_bytes_decode_encode(bytes in proptest::array::uniform17(any::<u8>())) {
        let h = BlockHeader::decode(&bytes);
        prop_assert_eq!(h.encode(), bytes);
        match BlockHeader::parse(&bytes) {
            Ok(p) => {
                prop_assert_eq!(p, h);
                prop_assert!(header_model_ok(h.desc.0, h.count, h.offset));
                // Accepted data blocks never overflow the offset space.
                prop_assert!(h.offset.checked_add(h.payload_len()).is_some());
            }
            Err(e) => {
                prop_assert!(!header_model_ok(h.desc.0, h.count, h.offset));
                let expect_kind = if bytes[0] & 0x90 != 0 {
                    matches!(e, HeaderError::Unsupported(d) if d == bytes[0])
                } else if bytes[0] & 0x20 != 0 {
                    matches!(e, HeaderError::SuspectedErrors)
                } else if bytes[0] & 0x40 != 0 && !(1..=MAX_STREAMS).contains(&h.offset) {
                    matches!(e, HeaderError::BadEodCount(n) if n == h.offset)
                } else if bytes[0] & 0x40 != 0 {
                    matches!(e, HeaderError::EofPayload(n) if n == h.count)
                } else {
                    matches!(e, HeaderError::Overflow { offset, count } if offset == h.offset && count == h.count)
                };
                prop_assert!(expect_kind, "{:?} for {:?}", e, h);
            }
        }
        prop_assert_eq!(h.payload_len(), if bytes[0] & 0x40 != 0 { 0 } else { h.count });
        prop_assert_eq!(h.is_eod(), bytes[0] & 0x08 != 0);
        prop_assert_eq!(h.is_close(), bytes[0] & 0x04 != 0);
    }

    #[test]
    fn header_constructors_validate(offset in any::<u64>(), count in any::<u64>(), streams in prop_oneof![0u64..=2, (MAX_STREAMS - 1)..=(MAX_STREAMS + 1), 0u64..2000]) {
        let d = BlockHeader::data(offset, count);
        prop_assert_eq!(d.validate().is_ok(), offset.checked_add(count).is_some());
        prop_assert!(!d.is_eof() && !d.is_eod());
        let e = BlockHeader::eof_eod(streams);
        prop_assert!(e.is_eof() && e.is_eod() && e.payload_len() == 0);
        prop_assert_eq!(e.validate().is_ok(), (1..=MAX_STREAMS).contains(&streams));
        prop_assert_eq!(BlockHeader::parse(&e.encode()).is_ok(), (1..=MAX_STREAMS).contains(&streams));
        prop_assert!(BlockHeader::parse(&BlockHeader::eod().encode()).unwrap().is_eod());
    }
}

// ------------------------------------------------------------------ replies

proptest! {
    #[test]
    fn single_reply_roundtrip(code in reply_code(), text in nasty_text(80)) {
        let r = Reply::new(code, text.as_str());
        prop_assert_eq!(&r.lines, &vec![cleaned(&text)]);
        let wire = r.encode();
        prop_assert_eq!(wire.iter().filter(|&&b| b == b'\n').count(), 1);
        prop_assert_eq!(wire.iter().filter(|&&b| b == b'\r').count(), 1);
        let (got, lines) = parse_wire(&wire);
        prop_assert_eq!(lines, 1);
        prop_assert_eq!(got.len(), 1);
        prop_assert_eq!(&got[0], &r);
    }

    #[test]
    fn multi_reply_roundtrip(
        code in reply_code(),
        first in nasty_text(40),
        body in proptest::collection::vec(nasty_text(40), 0..8),
    ) {
        let r = Reply::multi(code, &first, body.clone());
        let wire = r.encode();
        // One wire line per reply line, whatever the text contained.
        prop_assert_eq!(wire.iter().filter(|&&b| b == b'\n').count(), body.len() + 2);
        let (got, lines) = parse_wire(&wire);
        prop_assert_eq!(lines, body.len() + 2);
        prop_assert_eq!(got.len(), 1, "wire: {:?}", String::from_utf8_lossy(&wire));
        let mut expect = vec![cleaned(&first)];
        expect.extend(body.iter().map(|b| as_body(&cleaned(b))));
        expect.push("End.".to_string());
        prop_assert_eq!(got[0].code, code);
        prop_assert_eq!(&got[0].lines, &expect);
    }

    /// Several replies back to back on one connection come out one by one,
    /// in order, and an injected "NNN " inside a text never ends one early.
    #[test]
    fn reply_stream_roundtrip(
        replies in proptest::collection::vec(
            (reply_code(), nasty_text(30), proptest::option::of(proptest::collection::vec(nasty_text(30), 0..4))),
            1..6,
        )
    ) {
        let mut wire = Vec::new();
        let mut expect = Vec::new();
        for (code, first, body) in &replies {
            let r = match body {
                None => Reply::new(*code, first.as_str()),
                Some(b) => Reply::multi(*code, first, b.clone()),
            };
            wire.extend(r.encode());
            let mut e = r.clone();
            let n = e.lines.len();
            if n > 1 {
                for l in &mut e.lines[1..n - 1] {
                    *l = as_body(l);
                }
            }
            expect.push(e);
        }
        let (got, _) = parse_wire(&wire);
        prop_assert_eq!(got, expect);
    }

    /// The client parser must survive anything a hostile server sends.
    #[test]
    fn reply_parser_never_panics(lines in proptest::collection::vec(reply_like_line(), 0..30)) {
        let mut p = ReplyParser::new();
        for l in &lines {
            if let Ok(Some(r)) = p.handle_line(l) {
                prop_assert!((100..=599).contains(&r.code));
                prop_assert!(!r.lines.is_empty());
            }
        }
    }
}

// ------------------------------------------------------------------ markers

fn range_set() -> impl Strategy<Value = RangeSet> {
    let bound = prop_oneof![0u64..1000, any::<u64>(), (0u64..16).prop_map(|d| u64::MAX - d)];
    proptest::collection::vec((bound.clone(), bound), 0..12).prop_map(|v| {
        let mut s = RangeSet::new();
        for (a, b) in v {
            s.insert(a.min(b), a.max(b));
        }
        s
    })
}

proptest! {
    #[test]
    fn restart_marker_roundtrip(set in range_set()) {
        let m = RestartMarker(set);
        let r = m.to_reply();
        prop_assert_eq!(r.code, 111);
        prop_assert_eq!(RestartMarker::from_reply(&r), Some(m.clone()));
        let (got, _) = parse_wire(&r.encode());
        prop_assert_eq!(got.len(), 1);
        prop_assert_eq!(RestartMarker::from_reply(&got[0]), Some(m));
        // A different code is not a restart marker.
        let other = Reply { code: 112, ..r };
        prop_assert_eq!(RestartMarker::from_reply(&other), None);
    }

    #[test]
    fn perf_marker_roundtrip(
        tenths in 0u64..(1u64 << 45),
        stripe_index in any::<u32>(),
        bytes in any::<u64>(),
        total_stripes in any::<u32>(),
        data_path in prop::option::of("[a-z]{1,8}( [a-zA-Z/]{1,4})?"),
    ) {
        // Timestamps go out with one decimal: any value with one decimal
        // comes back exactly.
        let m = PerfMarker { timestamp: tenths as f64 / 10.0, stripe_index, bytes, total_stripes, data_path };
        let r = m.to_reply();
        prop_assert_eq!(r.code, 112);
        prop_assert_eq!(PerfMarker::from_reply(&r), Some(m.clone()));
        let (got, lines) = parse_wire(&r.encode());
        prop_assert_eq!(lines, 6 + usize::from(m.data_path.is_some()));
        prop_assert_eq!(got.len(), 1);
        prop_assert_eq!(PerfMarker::from_reply(&got[0]), Some(m));
        prop_assert_eq!(RestartMarker::from_reply(&got[0]), None);
    }

    #[test]
    fn perf_marker_timestamp_rounding(t in -1e15f64..1e15) {
        let m = PerfMarker { timestamp: t, stripe_index: 0, bytes: 0, total_stripes: 1, data_path: None };
        let (got, _) = parse_wire(&m.to_reply().encode());
        let back = PerfMarker::from_reply(&got[0]).unwrap();
        prop_assert!((back.timestamp - t).abs() <= 0.05 + t.abs() * 1e-15, "{} -> {}", t, back.timestamp);
    }
}

// ---------------------------------------------------------------- host-port

fn v4() -> impl Strategy<Value = Ipv4Addr> {
    any::<[u8; 4]>().prop_map(Ipv4Addr::from)
}

fn v6() -> impl Strategy<Value = Ipv6Addr> {
    prop_oneof![
        any::<[u16; 8]>().prop_map(|s| Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])),
        // Runs of zeros (`::` compression) and v4-mapped forms.
        (any::<u16>(), any::<u16>()).prop_map(|(a, b)| Ipv6Addr::new(a, 0, 0, 0, 0, 0, 0, b)),
        v4().prop_map(|a| a.to_ipv6_mapped()),
    ]
}

/// RFC 2428 delimiters that cannot occur inside an address text.
fn eprt_delim() -> impl Strategy<Value = char> {
    proptest::sample::select(
        (33u8..=126).map(char::from).filter(|c| !c.is_ascii_alphanumeric() && !".:".contains(*c)).collect::<Vec<_>>(),
    )
}

proptest! {
    #[test]
    fn port_roundtrip(ip in v4(), port in any::<u16>()) {
        let addr = SocketAddr::new(IpAddr::V4(ip), port);
        let text = format_port(addr).unwrap();
        let o = ip.octets();
        prop_assert_eq!(&text, &format!("{},{},{},{},{},{}", o[0], o[1], o[2], o[3], port / 256, port % 256));
        let parsed = parse_port(&text);
        let cmd = Command::parse(format!("PORT {text}").as_bytes());
        if port < 1024 {
            prop_assert_eq!(parsed, Err(AddrError::BadPort(port)));
            prop_assert!(cmd.is_err());
        } else {
            prop_assert_eq!(parsed, Ok(addr));
            prop_assert_eq!(cmd.unwrap(), Command::Port(addr));
        }
    }

    #[test]
    fn eprt_roundtrip(ip in prop_oneof![v4().prop_map(IpAddr::V4), v6().prop_map(IpAddr::V6)], port in 1024u16..,
                      d in eprt_delim()) {
        let addr = SocketAddr::new(ip, port);
        let text = format_eprt(addr);
        prop_assert_eq!(parse_eprt(&text), Ok(addr));
        prop_assert_eq!(Command::parse(format!("EPRT {text}").as_bytes()).unwrap(), Command::Eprt(addr));
        let af = if ip.is_ipv4() { 1 } else { 2 };
        prop_assert_eq!(parse_eprt(&format!("{d}{af}{d}{ip}{d}{port}{d}")), Ok(addr));
        // The wrong family number is refused.
        let wrong = if ip.is_ipv4() { 2 } else { 1 };
        let refused = parse_eprt(&format!("|{wrong}|{ip}|{port}|"));
        prop_assert!(matches!(refused, Err(AddrError::Family(_))), "{:?}", refused);
        if ip.is_ipv6() {
            prop_assert_eq!(format_port(addr), None);
        }
    }

    #[test]
    fn low_eprt_ports_refused(ip in v4(), port in 0u16..1024) {
        prop_assert_eq!(parse_eprt(&format!("|1|{ip}|{port}|")), Err(AddrError::BadPort(port)));
    }

    #[test]
    fn pasv_reply_roundtrip(ip in v4(), port in 1024u16.., spaces in any::<bool>()) {
        let addr = SocketAddr::new(IpAddr::V4(ip), port);
        let mut hp = format_port(addr).unwrap();
        if spaces {
            hp = hp.replace(',', ", ");
        }
        let r = Reply::new(227, format!("Entering Passive Mode ({hp})"));
        let (got, _) = parse_wire(&r.encode());
        prop_assert_eq!(got[0].code, 227);
        prop_assert_eq!(parse_pasv_reply(got[0].text()), Ok(addr));
        // A SPAS body line carries the bare host-port after one space.
        prop_assert_eq!(parse_pasv_reply(&format!(" {hp}")), Ok(addr));
    }

    #[test]
    fn epsv_reply_roundtrip(peer in prop_oneof![v4().prop_map(IpAddr::V4), v6().prop_map(IpAddr::V6)], port in any::<u16>()) {
        let r = Reply::new(229, format!("Entering Extended Passive Mode (|||{port}|)"));
        let (got, _) = parse_wire(&r.encode());
        let parsed = parse_epsv_reply(got[0].text(), peer);
        if port < 1024 {
            prop_assert_eq!(parsed, Err(AddrError::BadPort(port)));
        } else {
            prop_assert_eq!(parsed, Ok(SocketAddr::new(peer, port)));
        }
    }

    #[test]
    fn hostport_parsers_never_panic(s in nasty_text(48), peer in v4()) {
        if let Ok(a) = parse_port(&s) {
            prop_assert!(a.port() >= 1024 && a.is_ipv4());
        }
        if let Ok(a) = parse_eprt(&s) {
            prop_assert!(a.port() >= 1024);
        }
        if let Ok(a) = parse_pasv_reply(&s) {
            prop_assert!(a.port() >= 1024);
        }
        if let Ok(a) = parse_epsv_reply(&s, IpAddr::V4(peer)) {
            prop_assert_eq!(a.ip(), IpAddr::V4(peer));
        }
    }
}

// ----------------------------------------------------------------- commands

const VERBS: &[&str] = &[
    "USER", "PASS", "SYST", "FEAT", "HELP", "OPTS", "TYPE", "MODE", "STRU", "PASV", "EPSV", "SPAS", "PORT", "EPRT",
    "SPOR", "RETR", "STOR", "APPE", "ERET", "ESTO", "REST", "SIZE", "MDTM", "MLST", "MLSD", "LIST", "NLST", "STAT",
    "CWD", "CDUP", "PWD", "MKD", "RMD", "DELE", "RNFR", "RNTO", "ALLO", "SBUF", "SITE", "CKSM", "DCAU", "PBSZ", "PROT",
    "LANG", "TREV", "ABOR", "NOOP", "QUIT",
];

/// Bytes of a path argument: anything but CR, LF and NUL, not starting with a space.
fn path_bytes() -> impl Strategy<Value = Vec<u8>> {
    (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..40)).prop_map(|(first, rest)| {
        let mut v = vec![first];
        v.extend(rest);
        for b in &mut v {
            if matches!(*b, b'\r' | b'\n' | 0) {
                *b = b'_';
            }
        }
        if v[0] == b' ' || v[0] == b'-' {
            v[0] = b'p';
        }
        v
    })
}

/// Verb-shaped lines: a known verb in random case, then random arguments.
fn command_line() -> impl Strategy<Value = Vec<u8>> {
    (proptest::sample::select(VERBS), any::<u64>(), proptest::collection::vec(any::<u8>(), 0..48)).prop_map(
        |(verb, case, arg)| {
            let mut line: Vec<u8> = verb
                .bytes()
                .enumerate()
                .map(|(i, b)| if case >> i & 1 == 1 { b.to_ascii_lowercase() } else { b })
                .collect();
            if !arg.is_empty() {
                line.push(b' ');
                line.extend(arg);
            }
            line
        },
    )
}

proptest! {
    #[test]
    fn command_parse_never_panics(line in prop_oneof![proptest::collection::vec(any::<u8>(), 0..64), command_line()]) {
        match Command::parse(&line) {
            Ok(cmd) => {
                // The verb the command reports is the one on the line.
                let verb_end = line.iter().position(|&b| b == b' ').unwrap_or(line.len());
                let verb = String::from_utf8(line[..verb_end].to_ascii_uppercase()).unwrap();
                prop_assert_eq!(cmd.verb(), verb.as_str());
                prop_assert!(!line.contains(&0));
            }
            Err(e) => prop_assert!(e.code() == 500 || e.code() == 501),
        }
    }

    #[test]
    fn path_commands_keep_path_bytes(verb in proptest::sample::select(&["RETR", "STOR", "APPE", "SIZE", "MDTM", "CWD", "MKD", "RMD", "DELE", "RNFR", "RNTO", "MLSD", "LIST", "NLST", "MLST", "STAT"][..]), p in path_bytes()) {
        let mut line = format!("{verb} ").into_bytes();
        line.extend(&p);
        let cmd = Command::parse(&line).unwrap();
        let got = match cmd {
            Command::Retr(x) | Command::Stor(x) | Command::Appe(x) | Command::Size(x) | Command::Mdtm(x)
            | Command::Cwd(x) | Command::Mkd(x) | Command::Rmd(x) | Command::Dele(x) | Command::Rnfr(x)
            | Command::Rnto(x) => x,
            Command::Mlsd(x) | Command::List(x) | Command::Nlst(x) | Command::Mlst(x) | Command::Stat(x) => x.unwrap(),
            other => panic!("{other:?}"),
        };
        prop_assert_eq!(got, p);
    }

    #[test]
    fn eret_esto_cksm_roundtrip(offset in any::<u64>(), len in any::<u64>(), p in path_bytes(),
                                alg in "[a-zA-Z0-9]{1,8}", to_end in any::<bool>()) {
        let mut line = format!("ERET P {offset} {len} ").into_bytes();
        line.extend(&p);
        prop_assert_eq!(Command::parse(&line).unwrap(), Command::Eret { offset, len, path: p.clone() });
        let mut line = format!("ESTO A {offset} ").into_bytes();
        line.extend(&p);
        prop_assert_eq!(Command::parse(&line).unwrap(), Command::Esto { offset, path: p.clone() });
        let len_text = if to_end { "-1".to_string() } else { len.to_string() };
        let mut line = format!("CKSM {alg} {offset} {len_text} ").into_bytes();
        line.extend(&p);
        let expect = CksumArgs { alg: alg.to_ascii_uppercase(), offset, len: (!to_end).then_some(len), path: p };
        prop_assert_eq!(Command::parse(&line).unwrap(), Command::Cksm(expect));
    }

    #[test]
    fn rest_roundtrip(n in any::<u64>(), set in range_set()) {
        prop_assert_eq!(Command::parse(format!("REST {n}").as_bytes()).unwrap(), Command::Rest(Restart::Offset(n)));
        // (An empty set formats as "", and "REST " parses as an empty range list.)
        let cmd = Command::parse(format!("REST {set}").as_bytes());
        prop_assert_eq!(cmd.unwrap(), Command::Rest(Restart::Ranges(set)));
    }

    #[test]
    fn opts_retr_parallelism(n in 0u32..3000, markers in proptest::option::of(0u32..100), semi in any::<bool>()) {
        let mut line = format!("OPTS RETR Parallelism={n},{n},{n}");
        if semi {
            line.push(';');
            if let Some(m) = markers {
                line.push_str(&format!("markers={m};"));
            }
        }
        let parsed = Command::parse(line.as_bytes());
        // Every option must end with ';' and 1 <= n <= MAX_STREAMS.
        if semi && n >= 1 && u64::from(n) <= MAX_STREAMS {
            prop_assert_eq!(parsed.unwrap(), Command::Opts(Opts::Retr { parallelism: Some(n), markers, block_size: None }));
        } else {
            prop_assert!(parsed.is_err(), "{line}");
        }
    }
}

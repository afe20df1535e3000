//! Control channel, server side: arbitrary bytes -> LineBuffer ->
//! Command::parse -> ServerPi::handle_line, with a driver that logs in and
//! changes directory so the logged-in commands are reached too.
//!
//! Input: byte 0 = config (bit 0 anonymous, bit 1 read-only, bits 2.. chunk
//! size), the rest = what the client sends.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lightpath_proto::line::MAX_LINE;
use lightpath_proto::{Action, Command, FsOp, Line, LineBuffer, Output, PiConfig, ServerPi, VPath};

fuzz_target!(|data: &[u8]| {
    let Some((&cfg, data)) = data.split_first() else { return };
    let read_only = cfg & 2 != 0;
    let mut pi = ServerPi::new(PiConfig {
        banner: "fuzz".into(),
        anonymous: cfg & 1 != 0,
        read_only,
        anonymous_writes: cfg & 0x80 != 0,
        version: "0.0.0".into(),
        cksum_algs: vec!["MD5".into(), "ADLER32".into()],
        dcon_port: Some(2912),
        data_peer: None,
        client: (cfg & 0x40 != 0).then_some(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
        host: vec![std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)],
        host_data_ports: vec![(32768, 60999)],
    });
    let greeting = drain(&mut pi, read_only);
    assert_eq!(greeting, 1);

    let mut lb = LineBuffer::telnet();
    let chunk = usize::from((cfg >> 2) & 0x1f) + 1;
    for piece in data.chunks(chunk) {
        lb.handle_bytes(piece);
        assert!(lb.pending() <= MAX_LINE);
        while let Some(line) = lb.poll_line() {
            if let Line::Text(t) = &line {
                // A bare LF is a byte of the line once one ended in CR LF
                // (LineBuffer::telnet); a CR LF never is.
                assert!(t.len() <= MAX_LINE && !t.windows(2).any(|w| w == b"\r\n"));
                if let Err(e) = Command::parse(t) {
                    assert!(e.code() == 500 || e.code() == 501);
                }
            }
            pi.handle_line(line);
            // Every line is answered (a reply, an action, or both).
            assert!(drain(&mut pi, read_only) >= 1);
        }
    }
});

/// Act as the driver; check every output. Returns how many there were.
fn drain(pi: &mut ServerPi, read_only: bool) -> usize {
    let mut n = 0;
    while let Some(out) = pi.poll_output() {
        n += 1;
        match out {
            Output::Reply(r) => {
                assert!((100..=599).contains(&r.code));
                // One CRLF per text line: no text can start a second reply line.
                let wire = r.encode();
                let lines = r.lines.len().max(1);
                assert_eq!(wire.iter().filter(|&&b| b == b'\n').count(), lines);
                assert_eq!(wire.iter().filter(|&&b| b == b'\r').count(), lines);
            }
            Output::Action(Action::Login { user, pass }) => {
                let ok = pi.is_anonymous_user(&user) || !pass.is_empty();
                pi.handle_login(&user, ok);
            }
            Output::Action(Action::Fs(op)) => {
                assert!(pi.user().is_some());
                if read_only {
                    assert!(!matches!(
                        op,
                        FsOp::Mkd(_) | FsOp::Rmd(_) | FsOp::Dele(_) | FsOp::Rename { .. } | FsOp::Chmod { .. }
                    ));
                }
                match op {
                    FsOp::Cwd(p) => {
                        check_path(&p);
                        pi.set_cwd(p);
                    }
                    FsOp::RenameFrom(p) => {
                        check_path(&p);
                        pi.set_rename_from(p);
                    }
                    _ => {}
                }
            }
            Output::Action(Action::Transfer(t)) => {
                assert!(pi.user().is_some());
                assert!(!(read_only && t.kind.is_upload()));
                check_path(&t.path);
            }
            Output::Action(_) | Output::Close => {}
        }
    }
    n
}

fn check_path(p: &VPath) {
    let b = p.as_bytes();
    assert!(b.starts_with(b"/"));
    assert!(!b.iter().any(|&c| c < 0x20 || c == 0x7f));
    assert!(p.components().all(|c| c != b"." && c != b".."));
    assert_eq!(VPath::root().join(b).as_ref(), Ok(p));
}

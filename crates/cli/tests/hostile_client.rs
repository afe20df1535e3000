//! A hostile client against the server's own resources: modes it must not
//! set, special files that would hold a session forever, and connections
//! and logins in numbers meant to exhaust the server.

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

/// An anonymous server, with `extra` arguments, over a new root holding
/// `files`: the scratch directory (kept until dropped), the root, the
/// server and its port.
fn served(files: &[(&str, &[u8])], extra: &[&str]) -> (tempfile::TempDir, std::path::PathBuf, Proc, u16) {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    for (name, data) in files {
        std::fs::write(root.join(name), data).unwrap();
    }
    let (s, port) = lp_server(&root, &[&["--anonymous-write"], extra].concat());
    (d, root, s, port)
}

#[test]
fn site_chmod_sets_permission_bits_and_the_sticky_bit_only_and_never_on_the_root() {
    let (_d, root, _s, port) = served(&[("evil.sh", b"#!/bin/sh\n")], &[]);
    let mut c = Raw::login(port);
    for bits in ["6755", "4755", "2755", "3777"] {
        let (code, text) = c.cmd(&format!("SITE CHMOD {bits} evil.sh"));
        assert_eq!(code, 550, "{bits}: {text}");
        assert!(text.contains("only permission bits"), "{text}");
    }
    assert_eq!(c.cmd("SITE CHMOD 750 evil.sh").0, 250);
    let mode = std::fs::metadata(root.join("evil.sh")).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o750);
    // A shared directory of a tree copied file by file keeps its sticky bit.
    std::fs::create_dir(root.join("shared")).unwrap();
    assert_eq!(c.cmd("SITE CHMOD 1777 shared").0, 250);
    assert_eq!(std::fs::metadata(root.join("shared")).unwrap().permissions().mode() & 0o7777, 0o1777);
    std::os::unix::fs::symlink(".", root.join("here")).unwrap();
    for root_path in ["/", ".", "/..", "here"] {
        let (code, text) = c.cmd(&format!("SITE CHMOD 000 {root_path}"));
        assert_eq!(code, 550, "{root_path}: {text}");
    }
    assert_eq!(std::fs::metadata(&root).unwrap().permissions().mode() & 0o777, 0o777, "root untouched");
}

#[test]
fn special_files_are_refused_at_once_and_listed_as_such() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    let fifo = root.join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let mut c = Raw::login(port);
    let t = Instant::now();
    for line in ["CKSM MD5 0 -1 fifo", "SITE CHMOD 644 fifo"] {
        let (code, text) = c.cmd(line);
        assert_eq!(code, 550, "{line}: {text}");
        assert!(text.contains("not a regular file"), "{line}: {text}");
    }
    let _data = std::net::TcpStream::connect(c.pasv()).unwrap();
    c.send(b"RETR fifo");
    let (code, text) = c.final_reply();
    assert_eq!(code, 550, "{text}");
    let (code, text) = c.cmd("STAT fifo");
    assert!(code == 213 && text.contains("prw"), "listed as a FIFO: {text}");
    assert!(t.elapsed() < Duration::from_secs(5), "answered without waiting for a writer");
    assert_eq!(c.cmd("NOOP").0, 200);
}

/// A control connection whose greeting is left for the test to read.
fn unchecked(port: u16) -> Option<Raw> {
    let s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    Some(Raw { r: std::io::BufReader::new(s.try_clone().unwrap()), w: s })
}

/// Descriptors `pid` has open.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

#[test]
fn running_out_of_descriptors_does_not_stop_the_server() {
    let (_d, _root, s, port) = served(&[], &[]);
    let pid = s.0.id();
    let limit = fds(pid) + 20;
    let set = std::process::Command::new("prlimit")
        .arg(format!("--nofile={limit}:{limit}"))
        .arg(format!("--pid={pid}"))
        .status()
        .unwrap();
    assert!(set.success());
    let flood: Vec<_> = (0..limit + 20).map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(500));
    drop(flood);
    let t = Instant::now();
    let mut c = loop {
        // The backlog's connections come first; each is a session again.
        std::thread::sleep(Duration::from_millis(200));
        if let Some(c) = unchecked(port) {
            break c;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "the server stopped listening");
    };
    assert_eq!(c.reply().0, 220, "still serving");
    assert_eq!(c.cmd("USER anonymous").0, 331);
    assert_eq!(c.cmd("PASS x@").0, 230);
}

#[test]
fn sessions_over_the_limits_get_421_and_places_come_back() {
    let (_d, _root, _s, port) = served(&[], &["--max-sessions-per-ip", "2"]);
    let (a, _b) = (Raw::connect(port), Raw::login(port));
    let mut third = unchecked(port).unwrap();
    let (code, text) = third.reply();
    assert_eq!(code, 421, "{text}");
    assert!(text.contains("from your address"), "{text}");
    drop(a);
    let t = Instant::now();
    while unchecked(port).unwrap().reply().0 != 220 {
        assert!(t.elapsed() < Duration::from_secs(5), "the place did not come back");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_connection_must_log_in_in_time_and_is_closed_after_three_failures() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    let mut passwd = std::process::Command::new(LP)
        .args(["passwd", "alice"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(passwd.stdin.as_mut().unwrap(), b"s3cret\n").unwrap();
    let hash = passwd.wait_with_output().unwrap();
    std::fs::write(d.path().join("users"), &hash.stdout).unwrap();
    let users = d.path().join("users");
    let args = ["--users", users.to_str().unwrap(), "--login-timeout", "2", "--reply-timeout", "60"];
    let (s, port) = lp_server(&root, &args);
    let base = fds(s.0.id());
    let mut idle = Raw::connect(port);
    let t = Instant::now();
    let (code, text) = idle.reply();
    assert_eq!(code, 421, "{text}");
    assert!(text.contains("Login timeout") && t.elapsed() < Duration::from_secs(5), "{text}");
    let t = Instant::now();
    while fds(s.0.id()) != base {
        assert!(t.elapsed() < Duration::from_secs(10), "the socket is open while the client keeps its end");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut c = Raw::connect(port);
    for _ in 0..3 {
        assert_eq!(c.cmd("USER alice").0, 331);
        assert_eq!(c.cmd("PASS wrong").0, 530);
    }
    let (code, text) = c.reply();
    assert_eq!(code, 421, "{text}");
    assert!(text.contains("Too many failed logins"), "{text}");
    drop(idle);
    // A client that sends command after command and reads no reply is
    // closed at the login's time too: it was kept for the whole reply
    // timeout (300 s by default, 60 here), holding megabytes of buffer.
    let mut deaf = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    deaf.set_write_timeout(Some(Duration::from_secs(45))).unwrap();
    let t = Instant::now();
    let feats = b"FEAT\r\n".repeat(10_000);
    let err = loop {
        if let Err(e) = std::io::Write::write_all(&mut deaf, &feats) {
            break e;
        }
    };
    assert!(t.elapsed() < Duration::from_secs(20), "{:?} before {err}", t.elapsed());
    assert_ne!(err.kind(), std::io::ErrorKind::WouldBlock, "the server kept it open: {err}");
}

/// A connection to `to` from the address `from`.
fn connect_from(from: &str, to: std::net::SocketAddr) -> std::net::TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&format!("{from}:0").parse::<std::net::SocketAddr>().unwrap().into()).unwrap();
    s.connect(&to.into()).unwrap();
    s.into()
}

#[test]
fn a_pasv_port_takes_data_connections_from_the_client_only() {
    use std::io::Read;
    let (_d, _root, _s, port) = served(&[("f", b"the victim's data")], &[]);
    let mut c = Raw::login(port);
    let at = c.pasv();
    let mut thief = connect_from("127.0.0.2", at);
    let mut victim = connect_from("127.0.0.1", at);
    c.send(b"RETR f");
    assert_eq!(c.final_reply().0, 226);
    let (mut got, mut stolen) = (Vec::new(), Vec::new());
    victim.read_to_end(&mut got).unwrap();
    thief.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = thief.read_to_end(&mut stolen);
    assert_eq!((got.as_slice(), stolen.len()), (&b"the victim's data"[..], 0));
}

#[test]
fn port_names_the_client_only_unless_the_server_allows_any_host() {
    let (_d, root, _s, port) = served(&[], &[]);
    let mut c = Raw::login(port);
    for line in ["PORT 127,0,0,2,19,137", "EPRT |1|127.0.0.3|5001|", "PORT 0,0,0,0,19,137", "PORT 224,0,0,1,19,137"] {
        let (code, text) = c.cmd(line);
        assert_eq!(code, 501, "{line}: {text}");
    }
    assert!(c.cmd("PORT 127,0,0,2,19,137").1.contains("--data-peers any"));
    assert_eq!(c.cmd("PORT 127,0,0,1,19,137").0, 200);
    let (_s, port) = lp_server(&root, &["--anonymous-write", "--data-peers", "any"]);
    let mut c = Raw::login(port);
    assert_eq!(c.cmd("PORT 127,0,0,2,19,137").0, 200);
    assert_eq!(c.cmd("PORT 255,255,255,255,19,137").0, 501, "never a broadcast address");
}

/// ABOR now: the transfer's failure reply, then ABOR's own 226, within 5 s.
fn abor_stops_it(c: &mut Raw) {
    let t = Instant::now();
    c.send(b"ABOR");
    let (code, text) = c.final_reply();
    assert!(code == 426 || code == 451, "{text}");
    assert!(t.elapsed() < Duration::from_secs(5), "ABOR waited {:?}", t.elapsed());
    assert_eq!(c.final_reply().0, 226, "ABOR's own reply");
}

#[test]
fn abor_stops_a_mode_s_transfer_waiting_for_its_connection() {
    let (_d, _root, _s, port) = served(&[("f", b"data")], &[]);
    let mut c = Raw::login(port);
    c.pasv();
    c.send(b"RETR f");
    assert_eq!(c.reply().0, 150);
    abor_stops_it(&mut c);
}

/// ABOR of a MODE S download whose client connected and stopped reading:
/// the server's send blocked for its whole write timeout (120 s), started
/// again by every trickle taken, so the ABOR went unanswered for minutes
/// and the session outlived its control connection (a defect hunt).
#[test]
fn abor_stops_a_mode_s_download_its_client_does_not_read() {
    let big = vec![7u8; 64 << 20];
    let (_d, _root, _s, port) = served(&[("big", &big[..])], &[]);
    let mut c = Raw::login(port);
    assert_eq!(c.cmd("TYPE I").0, 200);
    let addr = c.pasv();
    c.send(b"RETR big");
    let data = std::net::TcpStream::connect(addr).unwrap(); // never read
    assert_eq!(c.reply().0, 150);
    std::thread::sleep(Duration::from_millis(500));
    abor_stops_it(&mut c);
    assert_eq!(c.cmd("NOOP").0, 200, "the session goes on");
    drop(data);
}

/// The same with the ABOR sent right behind the RETR, before its 150: the
/// server reads both before the transfer starts. The ABOR was lost, and
/// the RETR waited 120 s for its data connection (a review's find).
#[test]
fn abor_pipelined_behind_its_transfer_stops_it() {
    let (_d, _root, _s, port) = served(&[("f", b"data")], &[]);
    let mut c = Raw::login(port);
    c.pasv();
    let t = Instant::now();
    std::io::Write::write_all(&mut c.w, b"RETR f\r\nABOR\r\n").unwrap(); // one write
    let (code, text) = c.final_reply();
    assert!(code == 426 || code == 451, "{code} {text}");
    assert!(t.elapsed() < Duration::from_secs(5), "ABOR waited {:?}", t.elapsed());
    assert_eq!(c.final_reply().0, 226, "ABOR's own reply");
    // The session goes on, and its next transfer is not cancelled.
    assert_eq!(c.cmd("NOOP").0, 200);
    let addr = c.pasv();
    c.send(b"RETR f");
    let mut data = std::net::TcpStream::connect(addr).unwrap();
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut data, &mut got).unwrap();
    assert_eq!(c.final_reply().0, 226);
    assert_eq!(got, b"data");
}

fn threads(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find_map(|l| l.strip_prefix("Threads:")).unwrap().trim().parse().unwrap()
}

/// A RETR in MODE E for 1024 streams, to a port whose backlog is full (its
/// SYNs are dropped, each connect waits): the server connects with a
/// bounded number of threads. It started one per stream, 1024 at a time,
/// for any anonymous reader (a review's find).
#[test]
fn many_streams_to_a_port_that_never_answers_take_few_threads() {
    let (_d, _root, s, port) = served(&[("f", b"data")], &[]);
    let pid = s.0.id();
    let l = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    l.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into()).unwrap();
    l.listen(0).unwrap();
    let at = l.local_addr().unwrap().as_socket().unwrap();
    let _fill: Vec<_> =
        (0..4).filter_map(|_| std::net::TcpStream::connect_timeout(&at, Duration::from_millis(200)).ok()).collect();
    let mut c = Raw::login(port);
    assert_eq!(c.cmd("MODE E").0, 200);
    assert_eq!(c.cmd("OPTS RETR Parallelism=1024,1024,1024;").0, 200);
    let p = at.port();
    assert_eq!(c.cmd(&format!("PORT 127,0,0,1,{},{}", p >> 8, p & 255)).0, 200);
    let before = threads(pid);
    c.send(b"RETR f");
    std::thread::sleep(Duration::from_millis(1500));
    let during = threads(pid);
    assert!(during < before + 100, "{before} threads before the RETR, {during} during it");
    // The first connect to time out (30 s) stops the rest: the RETR fails
    // then, not after 16 timeouts in a row on each thread (480 s).
    c.r.get_ref().set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let t = Instant::now();
    let (code, text) = c.final_reply();
    assert_eq!(code / 100, 4, "{text}");
    assert!(t.elapsed() < Duration::from_secs(45), "the RETR failed after {:?}", t.elapsed());
}

/// A client that sends commands and reads none of the replies fills its
/// socket; the server gives up on it after `--reply-timeout` instead of
/// holding the session (and a slot of `--max-sessions`) forever.
#[test]
fn a_client_that_reads_no_replies_is_dropped() {
    let (_d, _root, s, port) = served(&[], &["--reply-timeout", "2"]);
    let base = fds(s.0.id());
    let c = Raw::login(port);
    let mut w = c.w.try_clone().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let flood = b"FEAT\r\n".repeat(1000);
        let t = Instant::now();
        let e = loop {
            if let Err(e) = std::io::Write::write_all(&mut w, &flood) {
                break e;
            }
        };
        let _ = tx.send((e, t.elapsed()));
    });
    let (e, after) = rx.recv_timeout(Duration::from_secs(60)).expect("the server still holds the session");
    assert!(after >= Duration::from_secs(2), "closed after {after:?}: {e}");
    let t = Instant::now();
    while fds(s.0.id()) != base && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(fds(s.0.id()), base, "the session's socket is closed");
    drop(c);
}

/// A `CKSM` of a huge sparse file (a TiB reads for over an hour) stops at
/// an `ABOR`, and when its client goes: it could not be stopped and read
/// on at full speed after both, a core per command (a defect hunt's find).
#[test]
fn a_cksm_of_a_huge_file_stops_at_abor_and_when_the_client_goes() {
    let (_d, root, s, port) = served(&[], &[]);
    std::fs::File::create(root.join("huge")).unwrap().set_len(1 << 40).unwrap();
    let mut c = Raw::login(port);
    c.send(b"CKSM MD5 0 -1 huge");
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    c.send(b"ABOR");
    let (code, text) = c.final_reply();
    assert_eq!(code, 426, "{text}");
    assert!(t.elapsed() < Duration::from_secs(5), "ABOR waited {:?}", t.elapsed());
    assert_eq!(c.final_reply().0, 226, "ABOR's own reply");
    assert_eq!(c.cmd("NOOP").0, 200, "the session goes on");
    c.send(b"CKSM MD5 0 -1 huge");
    std::thread::sleep(Duration::from_millis(300));
    drop(c);
    std::thread::sleep(Duration::from_millis(500));
    let read = common::breaks::rchar(s.0.id());
    std::thread::sleep(Duration::from_secs(1));
    let more = common::breaks::rchar(s.0.id()) - read;
    assert!(more < 16 << 20, "the server read {more} bytes in the second after its client left");
}

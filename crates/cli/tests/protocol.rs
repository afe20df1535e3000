//! The server's command set, checked command by command with a raw client
//! (RFC 959/2389/2428/3659 and GFD.20 behaviour as GCT clients expect it).

mod common;
use common::*;
use lightpath_proto::{BlockHeader, RangeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

fn read_all(mut s: TcpStream) -> Vec<u8> {
    let mut v = Vec::new();
    s.read_to_end(&mut v).unwrap();
    v
}

fn setup() -> (tempfile::TempDir, std::path::PathBuf, Proc, u16, Vec<u8>) {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    write_random(&root.join("f"), 300_000, 11);
    let data = std::fs::read(root.join("f")).unwrap();
    let (p, port) = lp_server(&root, &["--anonymous-write"]);
    (d, root, p, port, data)
}

#[test]
fn stream_rest_epsv_eprt_and_listings() {
    let (_d, root, _p, port, data) = setup();
    let mut c = Raw::login(port);
    assert!(c.cmd("SYST").1.contains("UNIX"));
    let (code, feat) = c.cmd("FEAT");
    assert!(
        code == 211 && feat.contains(" PARALLEL\r\n") && feat.contains(" CKSM MD5") && feat.contains(" REST STREAM"),
        "{feat}"
    );
    assert_eq!(c.cmd("TYPE I").0, 200);
    assert_eq!(c.cmd("STRU F").0, 200);
    // REST offset + RETR over EPSV.
    let (code, text) = c.cmd("EPSV");
    assert_eq!(code, 229, "{text}");
    let port_d: u16 = text.split('|').nth(3).unwrap().parse().unwrap();
    assert_eq!(c.cmd("REST 299000").0, 350);
    c.send(b"RETR f");
    let got = read_all(TcpStream::connect(("127.0.0.1", port_d)).unwrap());
    assert_eq!(c.final_reply().0, 226);
    assert_eq!(got, &data[299_000..]);
    // STOR through EPRT (we listen, the server connects).
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    assert_eq!(c.cmd(&format!("EPRT |1|127.0.0.1|{}|", l.local_addr().unwrap().port())).0, 200);
    c.send(b"RETR f");
    let got = read_all(l.accept().unwrap().0);
    assert_eq!((c.final_reply().0, got.len()), (226, data.len()));
    // Listings.
    for (cmd, needle) in [("MLSD", "Type=file;Size=300000;"), ("LIST", " 300000 "), ("NLST", "f\r\n")] {
        let a = c.pasv();
        c.send(cmd.as_bytes());
        let text = String::from_utf8(read_all(TcpStream::connect(a).unwrap())).unwrap();
        assert_eq!(c.final_reply().0, 226);
        assert!(text.contains(needle), "{cmd}: {text}");
    }
    let (code, mlst) = c.cmd("MLST f");
    assert!(code == 250 && mlst.contains("Size=300000;") && mlst.contains(" /f\r\n"), "{mlst}");
    assert_eq!(c.cmd("MDTM f").0, 213);
    assert_eq!(c.cmd("STAT f").0, 213);
    assert_eq!(c.cmd("SIZE f").1, "213 300000\r\n");
    // Directory commands.
    assert_eq!(c.cmd("MKD sub").0, 257);
    assert_eq!(c.cmd("MKD sub").0, 553, "exists: guc -cd ignores 553");
    assert_eq!(c.cmd("CWD sub").0, 250);
    assert!(c.cmd("PWD").1.contains("\"/sub\""));
    assert_eq!(c.cmd("CDUP").0, 250);
    assert_eq!(c.cmd("RNFR f").0, 350);
    assert_eq!(c.cmd("RNTO sub/g").0, 250);
    assert_eq!(c.cmd("SITE CHMOD 600 sub/g").0, 250);
    assert_eq!(c.cmd("DELE sub/g").0, 250);
    assert_eq!(c.cmd("RMD sub").0, 250);
    assert!(std::fs::read_dir(&root).unwrap().next().is_none());
    assert_eq!(c.cmd("QUIT").0, 221);
}

#[test]
fn cksm_with_offset_and_length() {
    let (_d, _root, _p, port, data) = setup();
    let mut c = Raw::login(port);
    let part = &data[1000..51000];
    let src = lightpath_engine::BytesSource(part.to_vec());
    for alg in ["MD5", "ADLER32", "CRC32C", "SHA256"] {
        let want = lightpath_engine::checksum::checksum(&src, alg, 0, None).unwrap();
        let (code, text) = c.cmd(&format!("CKSM {alg} 1000 50000 f"));
        assert_eq!((code, text.trim().trim_start_matches("213 ")), (213, want.as_str()), "{alg}");
    }
    assert_eq!(c.cmd("CKSM MD5 0 400000 f").0, 501, "range beyond the end");
    // Known vector from outside our code: md5("") for a zero-length range.
    assert_eq!(c.cmd("CKSM md5 5 0 f").1, "213 d41d8cd98f00b204e9800998ecf8427e\r\n");
}

#[test]
fn mode_e_reuse_ranges_markers_and_abort() {
    let (_d, root, _p, port, data) = setup();
    let mut c = Raw::login(port);
    assert_eq!(c.cmd("MODE E").0, 200);
    assert_eq!(c.cmd("OPTS RETR Parallelism=3,3,3;").0, 200);
    assert_eq!(c.cmd("SBUF 262144").0, 200);
    assert_eq!(c.cmd("SITE BUFSIZE 262144").0, 200);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let hp = lightpath_proto::hostport::format_port(l.local_addr().unwrap()).unwrap();
    assert_eq!(c.cmd(&format!("SPOR {hp}")).0, 200);
    c.send(b"RETR f");
    assert_eq!(c.reply().0, 150, "first use opens connections");
    let mut conns: Vec<TcpStream> = (0..3).map(|_| l.accept().unwrap().0).collect();
    let blocks = read_mode_e(&mut conns);
    assert_eq!(c.final_reply().0, 226);
    assert_eq!(blocks.iter().flat_map(|b| b.1.clone()).collect::<Vec<_>>(), data);
    // Second RETR with restart ranges: same connections (125), only the missing bytes.
    assert_eq!(c.cmd("REST 0-1000,2000-300000").0, 350);
    c.send(b"RETR f");
    assert_eq!(c.reply().0, 125, "cached data channel reused");
    let blocks = read_mode_e(&mut conns);
    assert_eq!(c.final_reply().0, 226);
    assert_eq!(blocks, vec![(1000, data[1000..2000].to_vec())]);
    // ERET: offsets relative to the part.
    c.send(b"ERET P 100 50 f");
    assert_eq!(c.reply().0, 125);
    assert_eq!(read_mode_e(&mut conns), vec![(0, data[100..150].to_vec())]);
    assert_eq!(c.final_reply().0, 226);
    // Upload with SPAS: markers, then ABOR in the middle of a second upload.
    let (code, text) = c.cmd("SPAS");
    assert_eq!(code, 229, "{text}");
    let addr = lightpath_proto::hostport::parse_pasv_reply(text.lines().nth(1).unwrap()).unwrap();
    c.send(b"STOR up");
    let mut d = TcpStream::connect(addr).unwrap();
    d.write_all(&[&BlockHeader::data(0, 5).encode()[..], b"hello", &BlockHeader::eof_eod(1).encode()].concat())
        .unwrap();
    let (mut perf, mut ranges) = (0, RangeSet::new());
    loop {
        let (code, text) = c.reply();
        match code {
            112 => perf += 1,
            111 => ranges = RangeSet::parse(text.trim().trim_start_matches("111 Range Marker ")).unwrap(),
            150 => {}
            226 => break,
            other => panic!("unexpected {other} {text}"),
        }
    }
    assert!(perf >= 2, "a 112 at the start and one at the end");
    assert_eq!(ranges.to_string(), "0-5");
    assert_eq!(std::fs::read(root.join("up")).unwrap(), b"hello");
    c.send(b"STOR up2");
    assert_eq!(c.reply().0, 125);
    d.write_all(&[&BlockHeader::data(0, 3).encode()[..], b"abc"].concat()).unwrap();
    c.send(b"ABOR");
    assert_eq!(c.final_reply().0, 426, "the transfer is aborted");
    assert_eq!(c.final_reply().0, 226, "then ABOR is answered");
    assert!(!root.join("up2").exists());
    assert_eq!(c.cmd("NOOP").0, 200);
}

/// The replies after a transfer's 150/125, up to and with its final one.
fn replies_to_the_end(c: &mut Raw) -> Vec<(u16, String)> {
    let mut all = vec![c.reply()];
    while all.last().is_some_and(|(code, _)| *code < 200) {
        all.push(c.reply());
    }
    all
}

/// The `Data Path:` fact of the last 112 in `replies`.
fn last_data_path(replies: &[(u16, String)]) -> Option<String> {
    let text = &replies.iter().rfind(|(code, _)| *code == 112)?.1;
    text.lines().find_map(|l| l.trim().strip_prefix("Data Path:")).map(|p| p.trim().to_string())
}

#[test]
fn perf_markers_name_the_data_path_and_come_on_retr_only_when_asked() {
    let (_d, root, _p, port, data) = setup();
    let mut c = Raw::login(port);
    assert_eq!(c.cmd("MODE E").0, 200);
    let l = c.port();
    c.send(b"RETR f");
    let mut conns = vec![l.accept().unwrap().0];
    assert_eq!(read_mode_e(&mut conns).into_iter().flat_map(|b| b.1).collect::<Vec<_>>(), data);
    let replies = replies_to_the_end(&mut c);
    assert!(!replies.iter().any(|(code, _)| *code == 112), "no RETR markers unasked: {replies:?}");
    // GCT's `markers=N;`: a 112 at the start and one at the end, the last
    // naming how the file was sent (a fresh file is in the page cache).
    assert_eq!(c.cmd("OPTS RETR markers=1;").0, 200);
    c.send(b"RETR f");
    read_mode_e(&mut conns);
    let replies = replies_to_the_end(&mut c);
    assert!(replies.iter().filter(|(code, _)| *code == 112).count() >= 2, "{replies:?}");
    assert_eq!(last_data_path(&replies).as_deref(), Some("sendfile"), "{replies:?}");
    assert_eq!(replies.last().unwrap().0, 226);
    // An upload's markers name the receive path.
    let addr = c.pasv();
    c.send(b"STOR up");
    let mut d = TcpStream::connect(addr).unwrap();
    d.write_all(&[&BlockHeader::data(0, 5).encode()[..], b"hello", &BlockHeader::eof_eod(1).encode()].concat())
        .unwrap();
    let replies = replies_to_the_end(&mut c);
    let path = last_data_path(&replies).unwrap_or_default();
    assert!(["splice", "page cache", "direct I/O"].contains(&path.as_str()), "{replies:?}");
    assert_eq!(replies.last().unwrap().0, 226);
    assert_eq!(std::fs::read(root.join("up")).unwrap(), b"hello");
}

#[test]
fn server_drops_root_with_run_as() {
    assert_eq!(lightpath_sys::privs::euid(), 0, "this test starts the server as root (CI runs as root)");
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    let (p, port) = lp_server(&root, &["--anonymous-write", "--run-as", "gftp"]);
    // The port accepts (kernel backlog) as soon as it listens, a moment
    // before the server drops root: give it up to 10 s.
    let uid_line = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", p.0.id())).unwrap();
        status.lines().find(|l| l.starts_with("Uid:")).unwrap().to_string()
    };
    let dropped = |l: &str| l.split_whitespace().skip(1).all(|u| u != "0");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !dropped(&uid_line()) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let line = uid_line();
    assert!(dropped(&line), "still root: {line}");
    let mut c = Raw::login(port);
    assert_eq!(c.cmd("MKD made-by-gftp").0, 257);
}

/// `serve -v` says where its fixed I/O threads go (sysfs topology, the
/// NIC of the listen address, the disk under the root) and what it could
/// not do; a bad hand-written device file stops it with a clear error.
#[test]
fn serve_reports_its_placement_and_refuses_bad_device_files() {
    use std::io::BufRead;
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    let port = free_port();
    let mut child = std::process::Command::new(LP)
        .args(["-v", "serve", "--anonymous-write", "--listen", &format!("127.0.0.1:{port}"), "--root"])
        .arg(&root)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = Vec::new();
    for line in err.lines() {
        let line = line.unwrap();
        let done = line.contains("serving");
        seen.push(line);
        if done {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let all = seen.join("\n");
    assert!(all.contains("placement: I/O threads:"), "{all}");
    assert!(all.contains("net  lo#0"), "the loopback listener's NIC: {all}");
    assert!(all.contains("placement: management: cpus"), "{all}");
    assert!(all.contains("placement: disk pool "), "one disk pool per disk under the root: {all}");
    let bad = d.path().join("devices.toml");
    std::fs::write(&bad, "[[device]]\nname = \"eth0\"\nkind = \"nic\"\nthreads = 0\n").unwrap();
    let out = std::process::Command::new(LP)
        .args(["serve", "--anonymous-write", "--listen", &format!("127.0.0.1:{}", free_port()), "--devices"])
        .arg(&bad)
        .arg("--root")
        .arg(&root)
        .output()
        .unwrap();
    assert!(!out.status.success(), "a bad device file stops the server");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("devices.toml"), "the error names the file: {text}");
}

/// `serve --congestion` is checked at start-up: one the kernel lacks stops
/// the server with the reason and the kernel's list, instead of every data
/// connection quietly keeping the default; one it has is taken and said.
#[test]
fn serve_refuses_a_congestion_control_it_cannot_set() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    let serve = |cc: &str| {
        std::process::Command::new(LP)
            .args(["-v", "serve", "--anonymous-write", "--listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--congestion", cc, "--root"])
            .arg(&root)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut bad = serve("no-such-cc");
    let t = std::time::Instant::now();
    while bad.try_wait().unwrap().is_none() && t.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = bad.kill();
    let out = bad.wait_with_output().unwrap();
    assert!(!out.status.success(), "an unknown congestion control stops the server");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("--congestion no-such-cc: no-such-cc is not available in this kernel"), "{text}");
    assert!(text.contains("available: ") && text.contains("reno"), "the error gives the kernel's list: {text}");
    let mut child = serve("reno");
    let err = std::io::BufReader::new(child.stderr.take().unwrap());
    let seen: Vec<String> =
        std::io::BufRead::lines(err).map(Result::unwrap).take_while(|l| !l.contains("serving")).collect();
    let _ = child.kill();
    let _ = child.wait();
    let all = seen.join("\n");
    assert!(all.contains("data connections use congestion control reno"), "{all}");
}

/// `cp --congestion` is checked the same way before anything moves: one
/// the kernel lacks stops the copy with the reason (and no file appears);
/// one it has carries an upload and a download.
#[test]
fn cp_refuses_a_congestion_control_it_cannot_set() {
    let (d, root, local) = root_and_local();
    let (_srv, port) = lp_server(&root, &["--anonymous-write"]);
    let src = local.join("src.bin");
    write_random(&src, 3_000_000, 7);
    let url = |name: &str| format!("ftp://127.0.0.1:{port}/{name}");
    let out = std::process::Command::new(LP)
        .args(["cp", "-q", "--congestion", "no-such-cc"])
        .arg(&src)
        .arg(url("up.bin"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "an unknown congestion control stops the copy");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("--congestion no-such-cc: no-such-cc is not available in this kernel"), "{text}");
    assert!(!root.join("up.bin").exists(), "nothing was sent");
    assert!(lp_cp(&["--congestion", "reno", src.to_str().unwrap(), &url("up.bin")]));
    let back = d.path().join("back.bin");
    assert!(lp_cp(&["--congestion", "reno", &url("up.bin"), back.to_str().unwrap()]));
    assert_same_file(&src, &back);
}

/// Segments received on the client's end of the connection from local port
/// `port`, as `ss` reports them.
fn segs_in(port: u16) -> u32 {
    let out = std::process::Command::new("ss")
        .args(["-Htin", "state", "established", &format!("sport = :{port}")])
        .output()
        .expect("ss (iproute2: scripts/install-test-deps.sh)");
    let text = String::from_utf8_lossy(&out.stdout);
    let n = text.split_whitespace().find_map(|w| w.strip_prefix("segs_in:")).unwrap_or_else(|| panic!("{text}"));
    n.parse().unwrap()
}

/// A client's login flight (a dozen pipelined commands) is answered in a
/// few segments, not one per reply: a new connection's first window holds
/// ten segments, and the replies past it would wait a round trip.
#[test]
fn a_pipelined_flight_is_answered_in_a_few_segments() {
    let (_d, _root, _s, port, _data) = setup();
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
    let cmds = [
        "USER anonymous",
        "PASS x@",
        "FEAT",
        "TYPE I",
        "SITE CLIENTINFO appname=\"t\";",
        "MLST /f",
        "SIZE /f",
        "MODE E",
        "OPTS RETR Parallelism=2,2,2;",
        "NOOP",
        "NOOP",
        "NOOP",
    ];
    let flight: String = cmds.iter().map(|c| format!("{c}\r\n")).collect();
    c.write_all(flight.as_bytes()).unwrap();
    let mut got = String::new();
    let mut buf = [0u8; 4096];
    // 13 final replies: the greeting and one per command.
    while got.lines().filter(|l| l.len() > 3 && l.as_bytes()[3] == b' ').count() < cmds.len() + 1 {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "closed after: {got}");
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let local = c.local_addr().unwrap().port();
    let n = segs_in(local);
    // SYN-ACK, an ACK of the flight, the greeting and the replies in a few writes.
    assert!(n <= 8, "{n} segments for 13 replies:\n{got}");
}

/// guc `-tcp-bs 8192` sends `SITE RETRBUFSIZE` (a download) or `SITE
/// STORBUFSIZE` (an upload) before PASV, as the real guc shows below. The
/// listener must take the size before the client connects: the window
/// scale of the handshake comes from the buffer then, and a small buffer
/// set only after the accept left a window below one segment (10 MB took
/// 66 s).
#[test]
fn a_buffer_size_sent_before_pasv_sizes_the_handshake() {
    let (_d, root, local) = root_and_local();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let mut c = Raw::login(port);
    let conn = std::net::TcpStream::connect(c.pasv()).unwrap();
    let autotuned = lightpath_sys::net::tcp_peer_wscale(&conn).unwrap();
    assert!(autotuned >= 4, "a default listener offers room to grow: wscale {autotuned}");
    for verb in ["STORBUFSIZE", "RETRBUFSIZE"] {
        assert_eq!(c.cmd(&format!("SITE {verb} 8192")).0, 200);
        let conn = std::net::TcpStream::connect(c.pasv()).unwrap();
        let wscale = lightpath_sys::net::tcp_peer_wscale(&conn).unwrap();
        assert!(wscale <= 1, "{verb}: an 8 KiB buffer offers a window scale of 0 or 1, not {wscale}");
        assert_eq!(c.cmd("SITE STORBUFSIZE 0").0, 200, "back to autotuning");
    }
    // The real guc's order, both ways: the size, then PASV.
    write_random(&root.join("f"), 3_000_000, 5);
    let dl = local.join("f");
    let cases = [
        ("RETRBUFSIZE", format!("ftp://127.0.0.1:{port}/f"), format!("file://{}", dl.display())),
        ("STORBUFSIZE", format!("file://{}", dl.display()), format!("ftp://127.0.0.1:{port}/up")),
    ];
    for (verb, from, to) in cases {
        need("globus-url-copy");
        let out = std::process::Command::new("globus-url-copy").args(["-dbg", "-tcp-bs", "8192", &from, &to]).output();
        let out = out.unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{said}");
        let at = |l: &str| said.lines().position(|x| x.trim() == l).unwrap_or_else(|| panic!("no {l}: {said}"));
        assert!(at(&format!("SITE {verb} 8192")) < at("PASV"), "{said}");
    }
    assert_same_file(&root.join("f"), &dl);
    assert_same_file(&root.join("f"), &root.join("up"));
}

/// Names and replies are the peer's bytes: `ls` prints their control
/// characters escaped, so a name cannot retitle or clear the terminal.
#[test]
fn ls_escapes_control_characters_in_names() {
    use std::os::unix::ffi::OsStrExt;
    let (_d, root, _local) = root_and_local();
    std::fs::write(root.join(std::ffi::OsStr::from_bytes(b"a\x1b]0;PWNED\x07\x1b[2Jb")), b"x").unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let out = std::process::Command::new(LP).args(["ls", &format!("ftp://127.0.0.1:{port}/")]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!out.stdout.iter().any(|&b| b == 0x1b || b == 0x07), "raw control bytes printed: {:?}", out.stdout);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("a\\x1b]0;PWNED\\x07\\x1b[2Jb"), "{text}");
}

/// `ls` of a file lists that file, as against GCT's server: lightpath's
/// refuses an MLSD of a file (RFC 3659), and `ls` said "MLSD refused: Not
/// a directory", exit 1 (a defect hunt's find). A path that is not there
/// still fails with the server's reason.
#[test]
fn ls_of_a_file_lists_the_file() {
    let (_d, root, _local) = root_and_local();
    std::fs::create_dir(root.join("d")).unwrap();
    std::fs::write(root.join("d/f"), b"12345").unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let ls =
        |p: &str| std::process::Command::new(LP).args(["ls", &format!("ftp://127.0.0.1:{port}{p}")]).output().unwrap();
    let out = ls("/d/f");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("- {:>14} f\n", 5));
    let out = ls("/d/gone");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{:?} {:?}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("MLSD"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `lightpath ls URL | head -1`: the reader goes away after one line, and
/// `ls` ends quietly (it panicked on the broken pipe).
#[test]
fn ls_into_a_pipe_closed_early_ends_quietly() {
    use std::io::BufRead;
    let (_d, root, _local) = root_and_local();
    for i in 0..4000 {
        std::fs::write(root.join(format!("a-rather-long-file-name-to-fill-the-pipe-{i:05}")), b"").unwrap();
    }
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let mut ls = std::process::Command::new(LP)
        .args(["ls", &format!("ftp://127.0.0.1:{port}/")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(ls.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.contains("a-rather-long-file-name"), "{first}");
    let out = ls.wait_with_output().unwrap(); // the reader is gone
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !err.contains("panicked"), "{:?}: {err}", out.status);
}

#[test]
fn a_receiver_that_asks_gets_blocks_up_to_its_size_while_much_is_left() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    write_random(&root.join("g"), 12 << 20, 12);
    let data = std::fs::read(root.join("g")).unwrap();
    let (_p, port) = lp_server(&root, &["--anonymous-write"]);
    let mut c = Raw::login(port);
    assert_eq!(c.cmd("MODE E").0, 200);
    let l = c.port();
    // As GCT's clients (which never ask): 256 KiB blocks.
    c.send(b"RETR g");
    assert_eq!(c.reply().0, 150);
    let mut conns = vec![l.accept().unwrap().0];
    let blocks = read_mode_e(&mut conns);
    assert_eq!(c.final_reply().0, 226);
    assert!(
        blocks.iter().all(|b| b.1.len() == 256 << 10),
        "{:?}",
        blocks.iter().map(|b| b.1.len()).collect::<Vec<_>>()
    );
    // A receiver asking for 1 MiB gets it first, then 256 KiB again at the end.
    assert_eq!(c.cmd("OPTS RETR Parallelism=1,1,1;BlockSize=1048576;").0, 200);
    c.send(b"RETR g");
    assert_eq!(c.reply().0, 125);
    let blocks = read_mode_e(&mut conns);
    assert_eq!(c.final_reply().0, 226);
    let lens: Vec<usize> = blocks.iter().map(|b| b.1.len()).collect();
    assert_eq!(lens.first(), Some(&(1 << 20)), "{lens:?}");
    assert_eq!(lens.last(), Some(&(256 << 10)), "{lens:?}");
    assert!(lens.iter().all(|&n| n <= 1 << 20), "{lens:?}");
    assert_eq!(blocks.into_iter().flat_map(|b| b.1).collect::<Vec<_>>(), data);
    // Asked for 256 KiB again (the option stays until set again), it sends those.
    assert_eq!(c.cmd("OPTS RETR BlockSize=262144;").0, 200);
    c.send(b"RETR g");
    assert_eq!(c.reply().0, 125);
    let blocks = read_mode_e(&mut conns);
    assert_eq!(c.final_reply().0, 226);
    assert!(blocks.iter().all(|b| b.1.len() == 256 << 10));
    // Sizes outside 4 KiB..16 MiB are refused.
    for bad in ["BlockSize=0;", "BlockSize=4095;", "BlockSize=16777217;"] {
        assert_eq!(c.cmd(&format!("OPTS RETR {bad}")).0, 501, "{bad}");
    }
}

/// A server started with a lower priority (`nice -n 19`, as root) keeps
/// it for its I/O threads: they were raised to nice -5 all the same,
/// ahead of every normal process on a shared host (a defect hunt's find).
#[test]
fn a_server_started_nice_keeps_its_priority_for_the_io_threads() {
    assert_eq!(lightpath_sys::privs::euid(), 0, "this test starts the server as root (CI runs as root)");
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    let port = free_port();
    let mut child = std::process::Command::new("nice")
        .args(["-n", "19", LP, "serve", "--anonymous", "--listen", &format!("127.0.0.1:{port}"), "--root"])
        .arg(&root)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_port(&mut child, port);
    let srv = Proc(child);
    let io_threads = || -> Vec<(String, i64)> {
        let threads = std::fs::read_dir(format!("/proc/{}/task", srv.0.id())).unwrap();
        threads
            .filter_map(|t| {
                let stat = std::fs::read_to_string(t.ok()?.path().join("stat")).ok()?;
                let (name, rest) = stat.split_once(" (")?.1.split_once(") ")?;
                let nice = rest.split_whitespace().nth(16)?.parse().ok()?;
                name.starts_with("lp-").then(|| (name.to_string(), nice))
            })
            .collect()
    };
    // The port listens before the I/O threads start.
    let t = std::time::Instant::now();
    let mut io = io_threads();
    while io.is_empty() && t.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(50));
        io = io_threads();
    }
    assert!(!io.is_empty(), "no I/O threads found");
    assert!(io.iter().all(|(_, n)| *n == 19), "{io:?}");
}

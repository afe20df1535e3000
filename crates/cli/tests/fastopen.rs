//! TCP Fast Open between lightpath peers. Servers may only accept it where
//! `net.ipv4.tcp_fastopen` has bit 2, so these run server and client in a
//! network namespace of their own (loopback only) with the setting on.

mod common;
use common::*;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const SENT_IN_SYN: &str = "login flight sent with the SYN (TCP Fast Open)";

/// A fresh network namespace with `lo` up and servers allowed Fast Open.
struct Netns(String);

impl Netns {
    fn new() -> Netns {
        Netns::named("lp-tfo")
    }

    /// `new`, its name `prefix-PID` (tests running at once use others).
    fn named(prefix: &str) -> Netns {
        let name = format!("{prefix}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).status();
        let ok = |c: &mut Command| assert!(c.status().unwrap().success(), "{c:?}");
        ok(Command::new("ip").args(["netns", "add", &name]));
        let ns = Netns(name);
        ok(Command::new("ip").args(["-n", &ns.0, "link", "set", "lo", "up"]));
        ok(ns.cmd("sysctl").args(["-qw", "net.ipv4.tcp_fastopen=3"]));
        ns
    }

    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0, program]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn serve(ns: &Netns, root: &Path, port: u16) -> Proc {
    serve_on(ns, root, &format!("127.0.0.1:{port}"))
}

fn serve_on(ns: &Netns, root: &Path, listen: &str) -> Proc {
    let mut child = ns
        .cmd(LP)
        .args(["-v", "serve", "--anonymous-write", "--listen", listen, "--root"])
        .arg(root)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("lightpath: serving") {
        let mut line = String::new();
        assert!(std::io::BufRead::read_line(&mut err, &mut line).unwrap() > 0, "server ended: {said}");
        said += &line;
    }
    assert!(said.contains("TCP Fast Open offered"), "{said}");
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    Proc(child)
}

fn cp(ns: &Netns, book: &Path, args: &[&str]) -> Output {
    let out = ns.cmd(LP).env("LIGHTPATH_PEERS", book).args(["-v", "cp", "-q"]).args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out
}

/// The RTTs (microseconds) the automatic stream counts of `log` were
/// chosen from (`... automatic stream count ... rtt_us=N`).
fn stream_count_rtts(log: &str) -> Vec<u64> {
    let lines = log.lines().filter(|l| l.contains("automatic stream count"));
    lines.filter_map(|l| l.split("rtt_us=").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()).collect()
}

#[test]
fn a_server_met_before_gets_the_login_in_the_syn() {
    let (d, root, local) = root_and_local();
    write_random(&root.join("file"), 4_000_037, 11);
    let ns = Netns::new();
    let port = free_port();
    let _server = serve(&ns, &root, port);
    let book = d.path().join("peers");
    let url = format!("ftp://127.0.0.1:{port}/file");
    let fetch = |name: &str, extra: &[&str]| {
        let dst = local.join(name).display().to_string();
        let args: Vec<&str> = extra.iter().copied().chain([url.as_str(), dst.as_str()]).collect();
        let out = cp(&ns, &book, &args);
        assert_same_file(&root.join("file"), &local.join(name));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // First visit: no cookie yet, so a plain handshake, whose SYN asks the
    // server for one.
    let log = fetch("first", &[]);
    assert!(!log.contains(SENT_IN_SYN), "{log}");
    // Second: the book knows the server and the kernel holds its cookie:
    // the login flight, DCON and RETR travel in the SYN.
    let log = fetch("second", &[]);
    assert!(log.contains(SENT_IN_SYN), "{log}");
    assert!(log.contains("data connections opened ahead (DCON)"), "{log}");
    // Third: a book that forgot the server, a kernel that still holds the
    // cookie: the login travels in the SYN, and the stream count waits for
    // the RTT the greeting brings (not the zero of a handshake not timed).
    std::fs::remove_file(&book).unwrap();
    let log = fetch("third", &[]);
    assert!(log.contains(SENT_IN_SYN), "{log}");
    let rtts = stream_count_rtts(&log);
    assert!(!rtts.is_empty() && rtts.iter().all(|&r| r > 0), "{rtts:?}: {log}");
    let log = fetch("fourth", &["--no-fastopen"]);
    assert!(!log.contains(SENT_IN_SYN), "{log}");
}

/// A server whose host stops answering after it gave a Fast Open cookie:
/// the client's connect returns at once (the kernel defers the SYN, to
/// carry the login), and the wait for the greeting is bounded by the
/// connect timeout, not by the kernel's SYN retries (about two minutes).
#[test]
fn a_host_gone_silent_fails_within_the_connect_timeout() {
    let (d, root, local) = root_and_local();
    write_random(&root.join("file"), 100_000, 12);
    let (client, server) = (Netns::named("lp-tfoc"), Netns::named("lp-tfos"));
    let ok = |c: &mut Command| assert!(c.status().unwrap().success(), "{c:?}");
    ok(Command::new("ip")
        .args(["-n", &client.0, "link", "add", "vc", "type", "veth", "peer", "vs", "netns", &server.0]));
    // The client knows the server's link address for good, so that no
    // failed address resolution answers for the silent host below.
    let mac = "02:00:00:09:09:02";
    ok(Command::new("ip").args(["-n", &server.0, "link", "set", "vs", "address", mac]));
    for (ns, dev, addr) in [(&client, "vc", "10.9.9.1/24"), (&server, "vs", "10.9.9.2/24")] {
        ok(Command::new("ip").args(["-n", &ns.0, "addr", "add", addr, "dev", dev]));
        ok(Command::new("ip").args(["-n", &ns.0, "link", "set", dev, "up"]));
    }
    let neigh = ["-n", &client.0, "neigh", "replace", "10.9.9.2", "lladdr", mac, "dev", "vc", "nud", "permanent"];
    ok(Command::new("ip").args(neigh));
    let _server = serve_on(&server, &root, "10.9.9.2:2811");
    let book = d.path().join("peers");
    let url = "ftp://10.9.9.2:2811/file";
    let dst = local.join("got").display().to_string();
    // The first visit asks for the cookie; the second sends its login in the SYN.
    cp(&client, &book, &[url, &dst]);
    let log = String::from_utf8_lossy(&cp(&client, &book, &[url, &dst]).stderr).into_owned();
    assert!(log.contains(SENT_IN_SYN), "{log}");
    // The server's host loses its address: every packet to it is dropped
    // there, unanswered (it does not forward, nor say so).
    ok(Command::new("ip").args(["-n", &server.0, "addr", "del", "10.9.9.2/24", "dev", "vs"]));
    let started = std::time::Instant::now();
    let out = client
        .cmd(LP)
        .env("LIGHTPATH_PEERS", &book)
        .args(["cp", "-q", "--connect-timeout", "2", "--retries", "0", url, &dst])
        .output()
        .unwrap();
    let (took, err) = (started.elapsed(), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("no answer to the SYN (TCP Fast Open) within 2 s"), "{err}");
    assert!(took < std::time::Duration::from_secs(20), "{took:?}: {err}");
}

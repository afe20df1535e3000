//! Harness for end-to-end tests: the lightpath binary, the real Globus
//! tools from Debian (globus-gridftp-server, globus-url-copy), test data,
//! and a raw control-channel client for hostile-input tests.
//!
//! The Globus tools and the `gftp` user are installed by
//! `scripts/install-test-deps.sh`; a missing tool fails the test with that
//! hint instead of skipping it.
#![allow(dead_code)]

pub mod breaks;
pub mod scripted;

use rand::{Rng, RngCore, SeedableRng};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const LP: &str = env!("CARGO_BIN_EXE_lightpath");

/// A scratch directory readable by the unprivileged `gftp` user.
pub fn scratch() -> tempfile::TempDir {
    own_peer_book();
    let d = tempfile::Builder::new().prefix("lp-e2e-").tempdir_in("/tmp").expect("tempdir");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    d
}

/// A scratch directory holding `root` (what a server serves) and `local`
/// (the client's side), all three writable by `gftp`.
pub fn root_and_local() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = scratch();
    let (root, local) = (open_dir(&d.path().join("root")), open_dir(&d.path().join("local")));
    (d, root, local)
}

/// The files that any process has open beneath `dir`, named or not:
/// a receiver's file is unnamed (`O_TMPFILE`) until complete and shows in
/// `/proc/PID/fd` as `dir/#INODE (deleted)`. Each is given as its `/proc`
/// link, which `std::fs::metadata` follows to the file.
pub fn open_in(dir: &Path) -> Vec<PathBuf> {
    let fds = std::fs::read_dir("/proc").unwrap().flatten().filter_map(|p| std::fs::read_dir(p.path().join("fd")).ok());
    let in_dir = |fd: &PathBuf| std::fs::read_link(fd).is_ok_and(|l| l.starts_with(dir));
    let file = |fd: &PathBuf| std::fs::metadata(fd).is_ok_and(|m| m.is_file());
    fds.flat_map(|d| d.flatten().map(|e| e.path())).filter(|fd| in_dir(fd) && file(fd)).collect()
}

/// Bytes of the files [`open_in`] `dir` (downloads and uploads of a known
/// size reserve their whole size at once).
pub fn bytes_open_in(dir: &Path) -> u64 {
    open_in(dir).iter().filter_map(|fd| std::fs::metadata(fd).ok()).map(|m| m.len()).sum()
}

/// Names in `dir` (temporary files included), sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// SIGINT `cp`, then its exit code and stderr.
pub fn interrupt(mut cp: Child) -> (Option<i32>, String) {
    assert!(cp.try_wait().unwrap().is_none(), "cp ended before it was interrupted");
    let st = Command::new("kill").args(["-INT", &cp.id().to_string()]).status().unwrap();
    assert!(st.success());
    let out = cp.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A directory that `gftp` can write to.
pub fn open_dir(p: &Path) -> PathBuf {
    std::fs::create_dir_all(p).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    p.to_path_buf()
}

/// This test process's own book of lightpath peers (`LIGHTPATH_PEERS`,
/// inherited by every `lightpath` it runs), so that servers met by other
/// runs on the same ports do not steer data connections opened ahead.
/// Tests of the book itself set the variable per command.
pub fn own_peer_book() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("peers-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        std::env::set_var("LIGHTPATH_PEERS", p);
    });
}

/// A free port below the kernel's ephemeral range (32768-60999 by default).
///
/// Asking the kernel for port 0 and dropping the listener races: before the
/// server binds it, the same port can be handed out again as another test's
/// PASV listener or as the local end of an outgoing data connection, and the
/// test then talks to the wrong socket (CI once saw "connection reset" on a
/// greeting that way). Ports below the ephemeral range are never handed out by
/// the kernel, and the counter keeps this process's tests apart. The port
/// after the one returned is free too, and left alone: `lightpath serve`
/// takes it for data connections opened ahead.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = 20_000 + (std::process::id() % 500) * 20;
    loop {
        let port = (base + NEXT.fetch_add(2, Ordering::Relaxed) % 12_000) as u16;
        let port = if port >= 31_999 { port - 12_000 } else { port };
        if bindable(port) && bindable(port + 1) {
            return port;
        }
    }
}

/// Whether a listener with SO_REUSEADDR (as std's and the server's are)
/// can bind `port` on 127.0.0.1. The probe binds without listening: a
/// probe that listened would stay a listener, holding the port, in any
/// child that another test thread forks until that child execs, and the
/// server's bind then failed with "Address already in use" (CI saw it). A
/// bound socket with SO_REUSEADDR that does not listen blocks no one.
fn bindable(port: u16) -> bool {
    use socket2::{Domain, Socket, Type};
    let Ok(s) = Socket::new(Domain::IPV4, Type::STREAM, None) else { return false };
    s.set_reuse_address(true).is_ok() && s.bind(&SocketAddr::from(([127, 0, 0, 1], port)).into()).is_ok()
}

pub fn write_random(p: &Path, len: usize, seed: u64) {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut v = vec![0u8; len];
    rng.fill_bytes(&mut v);
    std::fs::write(p, v).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o666)).unwrap();
}

/// A tree with `n` files over nested directories, some empty files and an
/// empty directory. Returns the number of files.
pub fn make_tree(root: &Path, n: usize, seed: u64) -> usize {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    for i in 0..n {
        let d = root.join(format!("d{}/s{}", i % 7, i % 3));
        open_dir(&d);
        let len = if i % 25 == 0 { 0 } else { rng.random_range(1..40_000) };
        write_random(&d.join(format!("f{i}.dat")), len, seed + i as u64);
    }
    open_dir(&root.join("emptydir"));
    for entry in walk(root) {
        let _ = std::fs::set_permissions(
            &entry,
            std::fs::Permissions::from_mode(if entry.is_dir() { 0o777 } else { 0o666 }),
        );
    }
    n
}

fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if out[i].is_dir() {
            let mut kids: Vec<_> = std::fs::read_dir(&out[i]).unwrap().map(|e| e.unwrap().path()).collect();
            kids.sort();
            out.extend(kids);
        }
        i += 1;
    }
    out
}

/// Assert two trees hold the same paths and bytes.
pub fn assert_same_tree(a: &Path, b: &Path) {
    let rel = |root: &Path| -> Vec<PathBuf> {
        walk(root).iter().map(|p| p.strip_prefix(root).unwrap().to_path_buf()).collect()
    };
    let (ra, rb) = (rel(a), rel(b));
    assert_eq!(ra, rb, "trees {} and {} differ in names", a.display(), b.display());
    for r in ra {
        let (pa, pb) = (a.join(&r), b.join(&r));
        if pa.is_file() {
            assert_eq!(std::fs::read(&pa).unwrap(), std::fs::read(&pb).unwrap(), "{} differs", r.display());
        }
    }
}

pub fn assert_same_file(a: &Path, b: &Path) {
    let (x, y) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert!(x == y, "{} ({} B) and {} ({} B) differ", a.display(), x.len(), b.display(), y.len());
}

/// A process killed on drop.
pub struct Proc(pub Child);

impl Drop for Proc {
    /// Kill it, and its process group if it leads one (GCT's server, whose
    /// sessions are processes of their own: a test's interrupted
    /// third-party copy left them waiting for ten minutes and more).
    fn drop(&mut self) {
        let pid = self.0.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let pgrp = stat.rsplit_once(") ").and_then(|(_, rest)| rest.split_whitespace().nth(2)?.parse::<u32>().ok());
        if pgrp == Some(pid) {
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{pid}")]).status();
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn wait_port(child: &mut Child, port: u16) {
    let t = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t.elapsed() < Duration::from_secs(10), "server on port {port} did not start");
        if let Some(st) = child.try_wait().unwrap() {
            panic!("server for port {port} exited before listening: {st}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `lightpath serve` on a free port, anonymous read-write.
pub fn lp_server(root: &Path, extra: &[&str]) -> (Proc, u16) {
    let port = free_port();
    (lp_server_on(root, port, extra), port)
}

/// `lightpath serve` on `port` (e.g. one that a killed server had).
pub fn lp_server_on(root: &Path, port: u16, extra: &[&str]) -> Proc {
    lp_server_at(root, &format!("127.0.0.1:{port}"), port, extra)
}

/// `lightpath serve --listen listen` (on `port`), e.g. `[::1]:PORT`.
pub fn lp_server_at(root: &Path, listen: &str, port: u16, extra: &[&str]) -> Proc {
    own_peer_book();
    let mut child = Command::new(LP)
        .args(["serve", "--listen", listen, "--root"])
        .arg(root)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lightpath serve");
    wait_serving(&mut child, port);
    Proc(child)
}

/// `lightpath serve --anonymous-write` on `root` in a mount namespace of
/// its own without `/proc` (as in a chroot), its stderr in `log`: it
/// names files being received from the start (as on NFS) and changes
/// directories without `/proc/self/fd`. Its port.
pub fn lp_server_without_proc(root: &Path, log: &Path) -> (Proc, u16) {
    own_peer_book();
    let port = free_port();
    let hide_proc = r#"umount -l /proc && exec "$0" "$@""#;
    let mut srv = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c", hide_proc, LP, "serve", "--anonymous-write"])
        .args(["--listen", &format!("127.0.0.1:{port}"), "--root"])
        .arg(root)
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    wait_port(&mut srv, port);
    (Proc(srv), port)
}

/// A server at -v with `extra` arguments, logging to `log`; its port.
pub fn logged_server(root: &Path, log: &Path, extra: &[&str]) -> (Proc, u16) {
    let port = free_port();
    let mut child = Command::new(LP)
        .args(["-v", "serve", "--anonymous-write", "--listen", &format!("127.0.0.1:{port}")])
        .args(extra)
        .arg("--root")
        .arg(root)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    wait_port(&mut child, port);
    (Proc(child), port)
}

/// Waits until `lightpath serve` says it is serving, and keeps draining its
/// stderr afterwards. A TCP connect is not enough: the socket listens (and
/// the kernel completes handshakes) before the server has started its I/O
/// engine, and a server that fails then resets the connections it had
/// queued; CI once saw "connection reset" on a greeting. Panics with what
/// the server said if it exits first.
fn wait_serving(child: &mut Child, port: u16) {
    use std::sync::mpsc::RecvTimeoutError;
    let err = child.stderr.take().expect("stderr piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let (t, mut said) = (Instant::now(), Vec::new());
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(line) if line.starts_with("lightpath: serving") => return,
            Ok(line) => said.push(line),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(Duration::from_millis(50)),
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("server for port {port} exited before serving: {st}; it said: {said:#?}");
        }
        assert!(t.elapsed() < Duration::from_secs(10), "server on port {port} did not start; it said: {said:#?}");
    }
}

pub fn need(tool: &str) {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "{tool} is missing: run scripts/install-test-deps.sh (it installs the Globus tools from Debian)");
}

/// The real `globus-gridftp-server` (GCT, from Debian), anonymous, forking,
/// children running as the unprivileged `gftp` user. URL paths are absolute
/// file-system paths on this server.
pub fn gct_server(home: &Path) -> (Proc, u16) {
    gct_server_with(home, &[])
}

/// [`gct_server`] with more of its options.
pub fn gct_server_with(home: &Path, extra: &[&str]) -> (Proc, u16) {
    let port = free_port();
    (gct_server_on(home, port, extra), port)
}

/// [`gct_server_with`] on `port` (e.g. one that a killed server had).
pub fn gct_server_on(home: &Path, port: u16, extra: &[&str]) -> Proc {
    need("globus-gridftp-server");
    let mut child = Command::new("globus-gridftp-server")
        .process_group(0) // its sessions die with it ([`Proc`]'s drop)
        .args([
            "-aa",
            "-anonymous-user",
            "gftp",
            "-p",
            &port.to_string(),
            "-control-interface",
            "127.0.0.1",
            "-home-dir",
        ])
        .arg(home)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start globus-gridftp-server");
    wait_port(&mut child, port);
    Proc(child)
}

/// Run globus-url-copy; returns success.
pub fn guc(args: &[&str]) -> bool {
    need("globus-url-copy");
    run_timeout(Command::new("globus-url-copy").args(args), 120)
}

/// Run `lightpath -v cp -q ...`: whether it succeeded, and its verbose
/// output (stderr).
pub fn verbose_cp(args: &[&str]) -> (bool, String) {
    let out = Command::new(LP).args(["-v", "cp", "-q"]).args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Run `lightpath cp -q ...` to its end: its exit code and stderr.
pub fn cp(args: &[&str]) -> (i32, String) {
    own_peer_book();
    let out = Command::new(LP).args(["cp", "-q"]).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Run `lightpath cp -q ARGS` with `env`: its exit code (`None`: killed
/// after `secs`, a hang, or ended by a signal), its stderr (read as it
/// comes, so a chatty run never blocks on the pipe) and how long it ran.
pub fn cp_within(args: &[&str], env: &[(&str, &str)], secs: u64) -> (Option<i32>, String, Duration) {
    own_peer_book();
    let mut cmd = Command::new(LP);
    cmd.args(["cp", "-q"]).args(args).envs(env.iter().copied());
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn");
    let mut err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let t = Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if t.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (code, reader.join().unwrap_or_default(), t.elapsed())
}

/// Run `lightpath cp -q ...`; returns success.
pub fn lp_cp(args: &[&str]) -> bool {
    own_peer_book();
    run_timeout(Command::new(LP).arg("cp").arg("-q").args(args), 120)
}

fn run_timeout(cmd: &mut Command, secs: u64) -> bool {
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn");
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            if !st.success() {
                let mut err = String::new();
                let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
                eprintln!("{cmd:?} failed: {st}\n{err}");
            }
            return st.success();
        }
        if t.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            panic!("{cmd:?} hung for {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A raw control connection for protocol tests.
pub struct Raw {
    pub r: BufReader<TcpStream>,
    pub w: TcpStream,
}

impl Raw {
    pub fn connect(port: u16) -> Raw {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut raw = Raw { r: BufReader::new(s.try_clone().unwrap()), w: s };
        assert_eq!(raw.reply().0, 220);
        raw
    }

    pub fn login(port: u16) -> Raw {
        let mut r = Raw::connect(port);
        assert_eq!(r.cmd("USER anonymous").0, 331);
        assert_eq!(r.cmd("PASS x@").0, 230);
        r
    }

    /// Read one reply (multi-line aware): code and all text.
    pub fn reply(&mut self) -> (u16, String) {
        let mut all = String::new();
        let mut first: Option<String> = None;
        loop {
            let mut line = String::new();
            let n = self.r.read_line(&mut line).expect("reply");
            assert!(n > 0, "server closed the control connection");
            all.push_str(&line);
            let code = &line[..3.min(line.len())];
            match &first {
                None if line.as_bytes().get(3) == Some(&b'-') => first = Some(code.to_string()),
                None => return (code.parse().unwrap(), all),
                Some(c) if line.starts_with(&format!("{c} ")) => return (c.parse().unwrap(), all),
                Some(_) => {}
            }
        }
    }

    pub fn send(&mut self, line: &[u8]) {
        self.w.write_all(line).unwrap();
        self.w.write_all(b"\r\n").unwrap();
    }

    pub fn cmd(&mut self, line: &str) -> (u16, String) {
        self.send(line.as_bytes());
        self.reply()
    }

    /// Final reply, skipping 1xx and markers.
    pub fn final_reply(&mut self) -> (u16, String) {
        loop {
            let r = self.reply();
            if r.0 >= 200 {
                return r;
            }
        }
    }

    /// Listen on loopback and send PORT for it (the server connects).
    pub fn port(&mut self) -> std::net::TcpListener {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let hp = lightpath_proto::hostport::format_port(l.local_addr().unwrap()).unwrap();
        assert_eq!(self.cmd(&format!("PORT {hp}")).0, 200);
        l
    }

    pub fn pasv(&mut self) -> SocketAddr {
        let (code, text) = self.cmd("PASV");
        assert_eq!(code, 227, "{text}");
        lightpath_proto_addr(&text)
    }
}

/// Read one MODE E transfer from `conns`, each to its EOD: the
/// (offset, bytes) of its data blocks, sorted.
pub fn read_mode_e(conns: &mut [TcpStream]) -> Vec<(u64, Vec<u8>)> {
    let mut blocks = Vec::new();
    for c in conns.iter_mut() {
        loop {
            let mut h = [0u8; 17];
            c.read_exact(&mut h).unwrap();
            let h = lightpath_proto::BlockHeader::parse(&h).unwrap();
            let mut p = vec![0u8; h.payload_len() as usize];
            c.read_exact(&mut p).unwrap();
            if !p.is_empty() {
                blocks.push((h.offset, p));
            }
            if h.is_eod() {
                break;
            }
        }
    }
    blocks.sort();
    blocks
}

fn lightpath_proto_addr(text: &str) -> SocketAddr {
    let inner = &text[text.find('(').unwrap() + 1..text.find(')').unwrap()];
    let n: Vec<u16> = inner.split(',').map(|x| x.trim().parse().unwrap()).collect();
    SocketAddr::from(([n[0] as u8, n[1] as u8, n[2] as u8, n[3] as u8], n[4] << 8 | n[5]))
}

/// The `gftp` user's uid and gid.
pub fn gftp_ids() -> (u32, u32) {
    let id = |flag: &str| {
        let out = std::process::Command::new("id").args([flag, "gftp"]).output().unwrap();
        assert!(out.status.success(), "no gftp user: run scripts/install-test-deps.sh");
        String::from_utf8(out.stdout).unwrap().trim().parse().unwrap()
    };
    (id("-u"), id("-g"))
}

/// A server running as `gftp` (`--run-as`), once it has dropped root: a
/// session served as root would pass every permission check.
pub fn gftp_server(root: &Path) -> (Proc, u16) {
    let (p, port) = lp_server(root, &["--anonymous-write", "--run-as", "gftp"]);
    let uids = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", p.0.id())).unwrap();
        status.lines().find(|l| l.starts_with("Uid:")).unwrap().to_string()
    };
    let t = Instant::now();
    while uids().split_whitespace().skip(1).any(|u| u == "0") {
        assert!(t.elapsed() < Duration::from_secs(10), "still root: {}", uids());
        std::thread::sleep(Duration::from_millis(20));
    }
    (p, port)
}

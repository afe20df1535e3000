//! Many sessions, one fixed set of I/O threads: 20 concurrent `lightpath cp
//! -p 4` clients (downloads and uploads) and 6 tree copies (`cp -r`, as
//! virtual files) against one `lightpath serve`; every byte arrives, the
//! server's lp-net-*/lp-disk-* threads stay exactly the configured set
//! throughout, its tree writers (lp-unpack-*) one fixed set, and its thread
//! total within a fixed set plus a few per session.

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const NET: usize = 2;
const DISK: usize = 3;
/// The server's tree writer threads (`UnpackOptions::default().workers`).
const UNPACK: usize = 8;
const FILES: usize = 10;
const TREES_UP: usize = 4;
const TREES_DOWN: usize = 2;
/// Client sessions at once.
const SESSIONS: usize = 2 * FILES + TREES_UP + TREES_DOWN;

/// Threads of one process, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Threads {
    net: usize,
    disk: usize,
    unpack: usize,
    all: usize,
}

/// The threads of process `pid`.
fn threads(pid: u32) -> Threads {
    let mut n = Threads::default();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return n };
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        n.net += comm.starts_with("lp-net-") as usize;
        n.disk += comm.starts_with("lp-disk-") as usize;
        n.unpack += comm.starts_with("lp-unpack-") as usize;
        n.all += 1;
    }
    n
}

/// Most threads the server may have: its fixed sets, the tokio workers
/// and a few helpers, plus per session a blocking thread that manages its
/// transfer, one for a file system command, and a tree walker.
fn thread_bound() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    NET + DISK + UNPACK + cores + 8 + 3 * SESSIONS
}

fn make_files(root: &std::path::Path, local: &std::path::Path) {
    for i in 0..FILES {
        write_random(&root.join(format!("down{i}")), 3_000_000 + i * 77_777, 100 + i as u64);
        write_random(&local.join(format!("up{i}")), 2_500_000 + i * 55_555, 200 + i as u64);
    }
    for i in 0..TREES_UP {
        make_tree(&local.join(format!("tree{i}")), 80, 300 + i as u64);
    }
    for i in 0..TREES_DOWN {
        make_tree(&root.join(format!("tree{i}")), 80, 400 + i as u64);
    }
}

/// Every copy, each on its own thread: `cp` arguments.
fn copies(local: &std::path::Path, port: u16) -> Vec<Vec<String>> {
    let url = |name: String| format!("ftp://127.0.0.1:{port}/{name}");
    let at = |name: String| local.join(name).display().to_string();
    let mut out = Vec::new();
    for i in 0..FILES {
        out.push(vec!["-p".into(), "4".into(), url(format!("down{i}")), at(format!("got{i}"))]);
        out.push(vec!["-p".into(), "4".into(), at(format!("up{i}")), url(format!("put{i}"))]);
    }
    for i in 0..TREES_UP {
        out.push(vec!["-r".into(), format!("{}/", at(format!("tree{i}"))), url(format!("tput{i}/"))]);
    }
    for i in 0..TREES_DOWN {
        out.push(vec!["-r".into(), url(format!("tree{i}/")), format!("{}/", at(format!("tgot{i}")))]);
    }
    out
}

fn assert_all_arrived(root: &std::path::Path, local: &std::path::Path) {
    for i in 0..FILES {
        assert_same_file(&root.join(format!("down{i}")), &local.join(format!("got{i}")));
        assert_same_file(&local.join(format!("up{i}")), &root.join(format!("put{i}")));
    }
    for i in 0..TREES_UP {
        assert_same_tree(&local.join(format!("tree{i}")), &root.join(format!("tput{i}")));
    }
    for i in 0..TREES_DOWN {
        assert_same_tree(&root.join(format!("tree{i}")), &local.join(format!("tgot{i}")));
    }
}

#[test]
fn twenty_sessions_share_the_fixed_io_threads() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    let local = open_dir(&d.path().join("local"));
    make_files(&root, &local);
    let (srv, port) = lp_server(
        &root,
        &["--anonymous-write", "--net-threads", &NET.to_string(), "--disk-threads", &DISK.to_string()],
    );
    let pid = srv.0.id();
    let done = AtomicBool::new(false);
    let samples = Mutex::new(Vec::new());
    let ok = std::thread::scope(|sc| {
        sc.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                samples.lock().unwrap().push(threads(pid));
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let clients: Vec<_> = copies(&local, port)
            .into_iter()
            .map(|args| sc.spawn(move || lp_cp(&args.iter().map(String::as_str).collect::<Vec<_>>())))
            .collect();
        let ok: Vec<bool> = clients.into_iter().map(|c| c.join().unwrap()).collect();
        done.store(true, Ordering::Relaxed);
        ok
    });
    assert!(ok.iter().all(|&k| k), "clients failed: {ok:?}");
    assert_all_arrived(&root, &local);
    let mut samples = samples.into_inner().unwrap();
    assert!(samples.len() > 5, "too few samples: {}", samples.len());
    samples.push(threads(pid));
    check_threads(&samples);
}

fn check_threads(samples: &[Threads]) {
    let most = samples.iter().map(|s| s.all).max().unwrap_or(0);
    let bound = thread_bound();
    eprintln!("server threads: {} samples, at most {most} threads in all (bound {bound})", samples.len());
    let io: Vec<_> = samples.iter().map(|s| (s.net, s.disk)).filter(|&s| s != (NET, DISK)).collect();
    assert!(io.is_empty(), "server I/O threads (net, disk) left ({NET}, {DISK}): {io:?}");
    let unpack = samples.iter().map(|s| s.unpack).max().unwrap_or(0);
    assert!(unpack <= UNPACK, "{unpack} tree writer threads, more than the fixed {UNPACK}");
    assert_eq!(samples.last().map(|s| s.unpack), Some(UNPACK), "the tree writers started once and stay");
    assert!(most <= bound, "{most} server threads for {SESSIONS} sessions, more than {bound}");
}

/// The soft limit on open files of process `pid` (from /proc).
fn open_files_soft_limit(pid: u32) -> String {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).expect("a Max open files line");
    line.split_whitespace().nth(3).expect("soft limit").to_string()
}

#[test]
fn the_server_raises_its_open_files_limit_to_the_hard_one() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    let port = free_port();
    let mut child = std::process::Command::new("prlimit")
        .args(["--nofile=256:4096", LP, "serve", "--anonymous-write", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--root")
        .arg(&root)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("prlimit (util-linux)");
    wait_port(&mut child, port);
    let server = Proc(child);
    assert_eq!(open_files_soft_limit(server.0.id()), "4096");
}

/// At `-v` the server keeps a record of who logged in, who was refused,
/// and each transfer with its file, bytes and time (it kept none: a UX
/// audit).
#[test]
fn the_server_logs_logins_and_transfers() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    write_random(&root.join("f"), 100_000, 3);
    let log = d.path().join("log");
    let (_s, port) = logged_server(&root, &log, &[]);
    let (code, err) = cp(&[&format!("ftp://127.0.0.1:{port}/f"), d.path().join("got").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (code, _) = cp(&["--retries", "0", &format!("ftp://bob:x@127.0.0.1:{port}/f"), "/dev/null"]);
    assert_ne!(code, 0);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.lines().any(|l| l.contains(" login ") && l.contains("user=anonymous")), "{text}");
    assert!(text.lines().any(|l| l.contains("login refused") && l.contains("user=bob")), "{text}");
    let done =
        text.lines().find(|l| l.contains("transfer done") && l.contains("file=/f")).unwrap_or_else(|| panic!("{text}"));
    assert!(done.contains("bytes=100000") && done.contains("kind=Retr"), "{done}");
}

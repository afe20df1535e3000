//! Many sessions, one fixed set of I/O threads: 20 concurrent `lightpath cp
//! -p 4` clients (downloads and uploads) against one `lightpath serve`; every
//! byte arrives and the server's lp-net-*/lp-disk-* threads stay exactly
//! the configured set throughout.

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const NET: usize = 2;
const DISK: usize = 3;

/// `(lp-net-*, lp-disk-*, all)` threads of process `pid`.
fn threads(pid: u32) -> (usize, usize, usize) {
    let (mut net, mut disk, mut all) = (0, 0, 0);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return (0, 0, 0) };
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        net += comm.starts_with("lp-net-") as usize;
        disk += comm.starts_with("lp-disk-") as usize;
        all += 1;
    }
    (net, disk, all)
}

#[test]
fn twenty_sessions_share_the_fixed_io_threads() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    let local = open_dir(&d.path().join("local"));
    for i in 0..10 {
        write_random(&root.join(format!("down{i}")), 3_000_000 + i * 77_777, 100 + i as u64);
        write_random(&local.join(format!("up{i}")), 2_500_000 + i * 55_555, 200 + i as u64);
    }
    let (srv, port) =
        lp_server(&root, &["--anonymous", "--net-threads", &NET.to_string(), "--disk-threads", &DISK.to_string()]);
    let pid = srv.0.id();
    let url = |name: &str| format!("ftp://127.0.0.1:{port}/{name}");
    let done = AtomicBool::new(false);
    let samples = Mutex::new(Vec::new());
    let ok = std::thread::scope(|sc| {
        sc.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                samples.lock().unwrap().push(threads(pid));
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let clients: Vec<_> = (0..10)
            .flat_map(|i| {
                let (local, url) = (&local, &url);
                let down = sc.spawn(move || {
                    let dst = local.join(format!("got{i}"));
                    lp_cp(&["-p", "4", &url(&format!("down{i}")), dst.to_str().unwrap()])
                });
                let up = sc.spawn(move || {
                    let src = local.join(format!("up{i}"));
                    lp_cp(&["-p", "4", src.to_str().unwrap(), &url(&format!("put{i}"))])
                });
                [down, up]
            })
            .collect();
        let ok: Vec<bool> = clients.into_iter().map(|c| c.join().unwrap()).collect();
        done.store(true, Ordering::Relaxed);
        ok
    });
    assert!(ok.iter().all(|&k| k), "clients failed: {ok:?}");
    for i in 0..10 {
        assert_same_file(&root.join(format!("down{i}")), &local.join(format!("got{i}")));
        assert_same_file(&local.join(format!("up{i}")), &root.join(format!("put{i}")));
    }
    let samples = samples.into_inner().unwrap();
    assert!(samples.len() > 5, "too few samples: {}", samples.len());
    let most = samples.iter().map(|s| s.2).max().unwrap_or(0);
    eprintln!("server threads: {} samples, at most {most} threads in all", samples.len());
    assert!(
        samples.iter().all(|&(n, k, _)| (n, k) == (NET, DISK)),
        "server I/O threads (net, disk) left ({NET}, {DISK}): {:?}",
        samples.iter().map(|s| (s.0, s.1)).filter(|&s| s != (NET, DISK)).collect::<Vec<_>>()
    );
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
        .args(["--nofile=256:4096", LP, "serve", "--anonymous", "--listen", &format!("127.0.0.1:{port}")])
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

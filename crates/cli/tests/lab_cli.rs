//! `lightpath lab` as a user meets it: a lab killed outright leaves no
//! namespace behind (its watchdog removes them), and `lab down` of a lab
//! that is not there says so and fails. Needs root (CI runs as root).

mod common;
use common::LP;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn exists(ns: &str) -> bool {
    std::path::Path::new("/run/netns").join(ns).exists()
}

/// Wait up to `secs` for `cond`.
fn within(secs: u64, cond: impl Fn() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

#[test]
fn a_lab_killed_outright_leaves_no_namespace() {
    let mut up = Command::new(LP)
        .args(["lab", "up", "--prefix", "lpc-kill", "--rate", "10M", "--rtt", "2ms"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ready = within(15, || exists("lpc-kill-a") && exists("lpc-kill-b"));
    up.kill().unwrap(); // SIGKILL: no clean-up of its own
    up.wait().unwrap();
    assert!(ready, "the lab never came up");
    assert!(within(5, || !exists("lpc-kill-a") && !exists("lpc-kill-b")), "namespaces left behind");
}

#[test]
fn lab_down_of_no_lab_fails_saying_so() {
    let out = Command::new(LP).args(["lab", "down", "--prefix", "lpc-none"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no lab lpc-none"), "{err}");
}

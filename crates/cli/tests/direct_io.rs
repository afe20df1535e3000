//! `cp --direct-io`: downloads written with O_DIRECT arrive byte-exact,
//! including a tail that is not a multiple of the file system's block, and
//! the choice is visible at -v; the server's direct uploads and reads too.
//! `auto` keeps loopback (a short RTT) buffered unless a large file must
//! reach the disk (`--fsync`); the long-path side of `auto` is unit-tested
//! in `plan` and measured in the bench (`wan-clean-1g-file`).

mod common;
use common::*;
use std::path::Path;
use std::process::Command;

fn cp_v(mode: &str, src: &str, dst: &Path) -> (bool, String) {
    verbose_cp(&["-p", "4", "--direct-io", mode, src, &dst.display().to_string()])
}

#[test]
fn a_large_flushed_download_over_loopback_is_written_directly() {
    let (_d, root, local) = root_and_local();
    // The smallest file `auto` writes directly, plus an odd tail.
    write_random(&root.join("big"), (64 << 20) + 513, 3);
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let url = format!("ftp://127.0.0.1:{port}/big");
    let dst = local.join("big").display().to_string();
    let (ok, log) = verbose_cp(&["--fsync", &url, &dst]);
    assert!(ok, "{log}");
    assert_same_file(&root.join("big"), &local.join("big"));
    assert!(log.contains("download written with direct I/O"), "{log}");
    // The sink's own word that it opened the file for direct I/O (the line
    // above is the plan's, said before any write).
    assert!(log.contains("download sink mode=direct") && !log.contains("no direct I/O"), "{log}");
}

#[test]
fn direct_writes_arrive_exact_and_say_so() {
    let (_d, root, local) = root_and_local();
    // 9 MiB plus an odd tail: aligned bulk direct, head/tail buffered.
    write_random(&root.join("file"), 9 * (1 << 20) + 4097, 7);
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let url = format!("ftp://127.0.0.1:{port}/file");

    let (ok, log) = cp_v("always", &url, &local.join("direct"));
    assert!(ok, "{log}");
    assert_same_file(&root.join("file"), &local.join("direct"));
    assert!(log.contains("download written with direct I/O"), "{log}");
    // The scratch directory is on ext4, which takes O_DIRECT.
    assert!(log.contains("download sink mode=direct (memory align"), "{log}");

    let (ok, log) = cp_v("auto", &url, &local.join("auto"));
    assert!(ok, "{log}");
    assert_same_file(&root.join("file"), &local.join("auto"));
    assert!(!log.contains("direct I/O") && !log.contains("download sink"), "loopback stays buffered: {log}");

    // The old environment spelling still works.
    let out = Command::new(LP)
        .env("LIGHTPATH_DIRECT_IO", "1")
        .args(["-v", "cp", "-q", &url, &local.join("env").display().to_string()])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert_same_file(&root.join("file"), &local.join("env"));
    assert!(log.contains("download written with direct I/O"), "{log}");
}

#[test]
fn the_server_writes_uploads_directly_when_told() {
    let (d, root, local) = root_and_local();
    write_random(&local.join("file"), 5 * (1 << 20) + 511, 9);
    let log_path = d.path().join("server.log");
    let (_server, port) = logged_server(&root, &log_path, &["--direct-io", "always"]);
    let src = local.join("file").display().to_string();
    assert!(lp_cp(&["-p", "4", &src, &format!("ftp://127.0.0.1:{port}/up")]));
    assert_same_file(&local.join("file"), &root.join("up"));
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("upload written with direct I/O"), "{log}");
    assert!(log.contains("upload sink mode=direct (memory align"), "{log}");
}

/// Drop `p` from the page cache (written back first) and check that all
/// of it left, with util-linux's `fincore` (`mincore`: it starts no
/// readahead). Tried again a few times, the last ones dropping every
/// clean page (root's `drop_caches`): under load the cold CI once found
/// the file still cached right after one `dd iflag=nocache`. A one-byte
/// `RWF_NOWAIT` probe at one offset was the check before: the server then
/// found the whole file cached once (a warm run beside other work).
fn drop_from_cache(p: &Path) {
    std::fs::File::open(p).unwrap().sync_all().unwrap();
    let cached = || {
        let out = Command::new("fincore").args(["--bytes", "--noheadings", "--output", "RES"]).arg(p).output().unwrap();
        assert!(out.status.success(), "fincore: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().parse::<u64>().expect("fincore's RES")
    };
    for attempt in 0..10 {
        let st =
            Command::new("dd").arg(format!("if={}", p.display())).args(["iflag=nocache", "count=0"]).output().unwrap();
        assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
        if attempt >= 5 {
            let _ = std::fs::write("/proc/sys/vm/drop_caches", "1");
        }
        if cached() == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(cached(), 0, "{}: bytes still cached", p.display());
}

#[test]
fn the_server_reads_a_large_uncached_file_directly_for_a_client_on_this_host() {
    let (d, root, local) = root_and_local();
    let big = root.join("big");
    write_random(&big, (64 << 20) + 513, 5);
    drop_from_cache(&big);
    let log_path = d.path().join("server.log");
    let (_server, port) = logged_server(&root, &log_path, &[]);
    let url = format!("ftp://127.0.0.1:{port}/big");
    assert!(lp_cp(&["-p", "4", &url, &local.join("cold").display().to_string()]));
    assert_same_file(&big, &local.join("cold"));
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert_eq!(log.matches("download read directly").count(), 1, "{log}");
    // Once in the page cache, it is sent from there.
    std::fs::read(&big).unwrap();
    assert!(lp_cp(&["-p", "4", &url, &local.join("hot").display().to_string()]));
    assert_same_file(&big, &local.join("hot"));
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert_eq!(log.matches("download read directly").count(), 1, "the cached file went by sendfile: {log}");
}

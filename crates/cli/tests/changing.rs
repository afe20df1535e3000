//! A tree holding a file that is written to while the tree is copied (a
//! log, a file saved meanwhile), between lightpath peers (one virtual
//! file), in every direction: the copy tries the tree again, leaving out
//! the files it holds and reading that file anew. A file that changes on
//! two tries is left out of the next and reported as not copied (exit 1),
//! and the rest of the tree arrives. Such a file used to fail the whole
//! tree at once, and so did one removed after the walk.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Files of 1 MB before the live one in the walk's order: its read comes
/// tens of milliseconds after the walk saw it.
const BEFORE: usize = 60;
const LIVE: &str = "m-live.log";

/// `BEFORE` files `f00`.. and `m-live.log`, of `live` bytes.
fn tree(t: &Path, live: usize) {
    std::fs::create_dir_all(t).unwrap();
    for i in 0..BEFORE {
        write_random(&t.join(format!("f{i:02}")), 1_000_000, i as u64 + 1);
    }
    write_random(&t.join(LIVE), live, 99);
}

/// Appends a line to a file every millisecond until dropped. The live
/// file is large (read over many milliseconds), so that every read of it
/// sees it change, however the test machine schedules this thread.
struct Appender(Arc<AtomicBool>, Option<std::thread::JoinHandle<()>>);

fn appending(p: PathBuf) -> Appender {
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let h = std::thread::spawn(move || {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        while !s2.load(Ordering::Relaxed) {
            f.write_all(b"one more line\n").unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    Appender(stop, Some(h))
}

impl Drop for Appender {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        if let Some(h) = self.1.take() {
            let _ = h.join();
        }
    }
}

/// Do `change` to the source tree's live file once the server (`pid`)
/// has one of the files before it in `src` open: after the walk, before
/// the live file's read. `false` if the live file was open first, or
/// none in 30 s. (Once the first file stood complete at the destination,
/// as this waited for before, the server could have read on past the
/// live file into the sockets' buffers, up to 32 MiB a stream: CI failed.)
fn once_when_read(pid: u32, src: PathBuf, change: impl FnOnce() + Send + 'static) -> std::thread::JoinHandle<bool> {
    std::thread::spawn(move || {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(30) {
            let open = std::fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().flatten();
            let names: Vec<PathBuf> = open.filter_map(|fd| std::fs::read_link(fd.path()).ok()).collect();
            let named = |n: &str| names.iter().any(|l| l.parent() == Some(&src) && l.ends_with(n));
            if named(LIVE) {
                return false;
            }
            if (0..BEFORE).any(|i| named(&format!("f{i:02}"))) {
                change();
                return true;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        false
    })
}

/// Every other file arrived whole, the live one did not, nothing else is
/// there (no temporary file), and the live one was reported once.
fn assert_left_out(src: &Path, dst: &Path, (code, err): (i32, String)) {
    assert_eq!(code, 1, "the live file failed, the rest did not: {err}");
    for i in 0..BEFORE {
        let f = format!("f{i:02}");
        assert_same_file(&src.join(&f), &dst.join(&f));
    }
    assert_eq!(names(dst).len(), BEFORE, "only the other files: {:?}", names(dst));
    let failed: Vec<&str> = err.lines().filter(|l| l.starts_with("lightpath: FAILED")).collect();
    assert_eq!(failed.len(), 1, "{err}");
    assert!(failed[0].contains(&format!("/{LIVE} -> ")), "{err}");
    assert!(failed[0].contains("not copied: it changed while being read, on two tries"), "{err}");
    assert!(err.contains(&format!("{BEFORE} file(s) copied, 1 failed")), "{err}");
    let why = format!("{LIVE} changed while being read");
    assert!(err.contains(&why) && err.contains("trying the tree again"), "said why it tried again: {err}");
}

#[test]
fn a_file_written_to_all_the_time_is_left_out_of_a_tree_download() {
    let (_d, root, local) = root_and_local();
    tree(&root.join("t"), 64 << 20);
    let (_srv, port) = lp_server(&root, &["--anonymous"]);
    let _a = appending(root.join("t").join(LIVE));
    let r = cp(&["-r", &format!("ftp://127.0.0.1:{port}/t"), &format!("{}/", local.display())]);
    assert_left_out(&root.join("t"), &local.join("t"), r);
}

#[test]
fn a_file_written_to_all_the_time_is_left_out_of_a_tree_upload() {
    let (_d, root, local) = root_and_local();
    tree(&local.join("t"), 64 << 20);
    let (_srv, port) = lp_server(&root, &["--anonymous-write"]);
    let _a = appending(local.join("t").join(LIVE));
    let r = cp(&["-r", &local.join("t").display().to_string(), &format!("ftp://127.0.0.1:{port}/")]);
    assert_left_out(&local.join("t"), &root.join("t"), r);
}

#[test]
fn a_file_written_to_all_the_time_is_left_out_of_a_third_party_tree() {
    let (_d, root, local) = root_and_local();
    tree(&root.join("t"), 64 << 20);
    let (_src, sport) = lp_server(&root, &["--anonymous"]);
    let (_dst, dport) = lp_server(&local, &["--anonymous-write"]);
    let _a = appending(root.join("t").join(LIVE));
    let r = cp(&["-r", &format!("ftp://127.0.0.1:{sport}/t"), &format!("ftp://127.0.0.1:{dport}/")]);
    assert_left_out(&root.join("t"), &local.join("t"), r);
}

/// Two logs: each costs two tries, which do not count against
/// `--retries` (the default 3 would not cover four), and both are left
/// out; with `--retries 0` the first change ends the copy.
#[test]
fn every_file_written_to_all_the_time_is_left_out_without_spending_the_retries() {
    let (_d, root, local) = root_and_local();
    tree(&root.join("t"), 64 << 20);
    write_random(&root.join("t/n-live.log"), 64 << 20, 98);
    let (_srv, port) = lp_server(&root, &["--anonymous"]);
    let _a = (appending(root.join("t").join(LIVE)), appending(root.join("t/n-live.log")));
    let src = format!("ftp://127.0.0.1:{port}/t");
    let (code, err) = cp(&["-r", "--retries", "0", &src, &format!("{}/", local.display())]);
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains("trying the tree again"), "{err}");
    std::fs::remove_dir_all(local.join("t")).unwrap();
    let (code, err) = cp(&["-r", &src, &format!("{}/", local.display())]);
    assert_eq!(code, 1, "{err}");
    let failed: Vec<&str> = err.lines().filter(|l| l.starts_with("lightpath: FAILED")).collect();
    assert_eq!(failed.len(), 2, "{err}");
    for name in [LIVE, "n-live.log"] {
        let named =
            |l: &&str| l.contains(&format!("/{name} -> ")) && l.contains("changed while being read, on two tries");
        assert!(failed.iter().any(named), "{name}: {err}");
    }
    assert!(err.contains("not counted as a retry"), "{err}");
    assert_eq!(names(&local.join("t")).len(), BEFORE, "{:?}", names(&local.join("t")));
}

/// A live file with a second name (a hard link) changes under both: it
/// costs two tries, not four, and both names are reported.
#[test]
fn a_live_file_is_left_out_under_all_its_names_at_once() {
    let (_d, root, local) = root_and_local();
    tree(&root.join("t"), 64 << 20);
    std::fs::hard_link(root.join("t").join(LIVE), root.join("t/z-link")).unwrap();
    let (_srv, port) = lp_server(&root, &["--anonymous"]);
    let _a = appending(root.join("t").join(LIVE));
    let (code, err) = cp(&["-r", &format!("ftp://127.0.0.1:{port}/t"), &format!("{}/", local.display())]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(err.matches("trying the tree again").count(), 2, "{err}");
    let failed: Vec<&str> = err.lines().filter(|l| l.starts_with("lightpath: FAILED")).collect();
    assert_eq!(failed.len(), 2, "{err}");
    assert!(failed.iter().any(|l| l.contains("/z-link -> ")), "{err}");
    assert_eq!(names(&local.join("t")).len(), BEFORE, "{:?}", names(&local.join("t")));
}

/// Changed once after the walk (a file saved during the copy): the next
/// try reads it as it is now, and the tree is whole.
#[test]
fn a_file_changed_once_is_read_again_and_the_tree_completes() {
    let (_d, root, local) = root_and_local();
    tree(&root.join("t"), 300_000);
    let (srv, port) = lp_server(&root, &["--anonymous"]);
    let live = root.join("t").join(LIVE);
    let edit = once_when_read(srv.0.id(), root.join("t"), move || write_random(&live, 200_000, 7));
    let (code, err) = cp(&["-r", &format!("ftp://127.0.0.1:{port}/t"), &format!("{}/", local.display())]);
    assert!(edit.join().unwrap(), "no file before it was seen open: {err}");
    assert_eq!(code, 0, "{err}");
    let why = format!("{LIVE} changed while being read");
    assert!(err.contains(&why) && err.contains("trying the tree again"), "it changed after the walk: {err}");
    assert_same_tree(&root.join("t"), &local.join("t"));
}

/// Removed after the walk: the next try's walk no longer finds it, and
/// the tree is whole without it.
#[test]
fn a_file_removed_after_the_walk_does_not_fail_the_tree() {
    let (_d, root, local) = root_and_local();
    tree(&root.join("t"), 300_000);
    let (srv, port) = lp_server(&root, &["--anonymous"]);
    let live = root.join("t").join(LIVE);
    let rm = once_when_read(srv.0.id(), root.join("t"), move || std::fs::remove_file(&live).unwrap());
    let (code, err) = cp(&["-r", &format!("ftp://127.0.0.1:{port}/t"), &format!("{}/", local.display())]);
    assert!(rm.join().unwrap(), "no file before it was seen open: {err}");
    assert_eq!(code, 0, "{err}");
    let why = format!("{LIVE} changed while being read");
    assert!(err.contains(&why) && err.contains("trying the tree again"), "{err}");
    assert_same_tree(&root.join("t"), &local.join("t"));
}

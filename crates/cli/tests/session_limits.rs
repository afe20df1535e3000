//! A server that limits sessions turns the ones past its limit away with
//! a `421` greeting (GCT's `-connections-max`, our `--max-sessions`). A
//! copy file by file over more sessions than that goes on with the ones
//! it got, says so once, and copies every file. A copy's first session
//! turned away is asked again after a retry's pause; only a server that
//! takes no session at all fails the copy, once its retries are spent.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The warning a copy gives once when a server turned sessions away.
const GOING_ON: &str = "going on with the sessions it took";

/// Run `lightpath cp -q ARGS` ([`cp_within`]): its exit code and stderr.
/// Longer than `secs` is a hang, and the test fails.
fn cp_timed(args: &[&str], secs: u64) -> (Option<i32>, String) {
    let (code, err, _) = cp_within(args, &[], secs);
    assert!(code.is_some(), "cp {args:?} hung for {secs} s (or was killed): {err}");
    (code, err)
}

/// A flat directory of `n` small files.
fn flat(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        write_random(&dir.join(format!("f{i:03}")), 100 + i * 7, i as u64);
    }
}

/// Our server over `root/src` with `n` files, taking at most
/// `max_sessions` sessions, and an empty local directory.
struct Limited {
    _dir: tempfile::TempDir,
    _server: Proc,
    port: u16,
    root: PathBuf,
    local: PathBuf,
    /// The URLs of the files.
    urls: Vec<String>,
}

fn limited_server(n: usize, max_sessions: &str) -> Limited {
    let d = scratch();
    let (root, local) = (open_dir(&d.path().join("root")), open_dir(&d.path().join("local")));
    flat(&root.join("src"), n);
    let (server, port) = lp_server(&root, &["--anonymous-write", "--max-sessions", max_sessions]);
    let urls = (0..n).map(|i| format!("ftp://127.0.0.1:{port}/src/f{i:03}")).collect();
    Limited { _dir: d, _server: server, port, root, local, urls }
}

/// GCT with `-connections-max 3`: 16 sessions upload a tree file by
/// file and fetch it back. Before, the sessions turned away spent their
/// files' retries and 64 of 2000 files failed.
#[test]
fn a_copy_goes_on_with_the_sessions_a_gct_server_takes() {
    let d = scratch();
    let (home, local) = (open_dir(&d.path().join("home")), open_dir(&d.path().join("local")));
    flat(&local.join("src"), 300);
    let (_g, port) = gct_server_with(&home, &["-connections-max", "3"]);
    let up = format!("ftp://127.0.0.1:{port}{}/", home.display());
    let (code, log) = cp_timed(&["-r", "--cc", "16", &local.join("src").display().to_string(), &up], 120);
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(log.matches(GOING_ON).count(), 1, "one warning: {log}");
    assert_same_tree(&local.join("src"), &home.join("src"));
    let down = format!("ftp://127.0.0.1:{port}{}/src", home.display());
    let (code, log) = cp_timed(&["-r", "--cc", "16", &down, &format!("{}/", local.join("back").display())], 120);
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains(GOING_ON), "{log}");
    assert_same_tree(&local.join("src"), &local.join("back/src"));
}

/// Our server with `--max-sessions 2`: 40 files named one by one (no
/// virtual file) over 8 sessions all arrive.
#[test]
fn a_copy_goes_on_with_the_sessions_our_server_takes() {
    let t = limited_server(40, "2");
    let mut args: Vec<String> = vec!["--cc".into(), "8".into()];
    args.extend(t.urls.iter().cloned());
    args.push(format!("{}/", t.local.display()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, log) = cp_timed(&args, 120);
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains(GOING_ON) && log.contains("greeting refused"), "{log}");
    assert_same_tree(&t.root.join("src"), &t.local);
}

/// A server whose one session is taken by someone else: nothing to go on
/// with, so each file's tries are spent and the copy fails, naming the
/// refusal, in bounded time.
#[test]
fn a_server_that_takes_no_session_fails_the_copy() {
    let t = limited_server(3, "1");
    let _held = Raw::login(t.port);
    let (srcs, dst) = (&t.urls, format!("{}/", t.local.display()));
    let (code, log) = cp_timed(&["--retries", "1", "--cc", "2", &srcs[0], &srcs[1], &srcs[2], &dst], 60);
    assert_ne!(code, Some(0), "{log}");
    assert!(log.contains("greeting refused") && !log.contains(GOING_ON), "{log}");
    assert!(names(&t.local).is_empty(), "nothing copied: {:?}", names(&t.local));
}

/// A server full for a moment: the copy's first session, turned away, is
/// asked again after a retry's pause (a `421` counts as transient) and
/// the copy goes through. It failed at once before.
#[test]
fn a_first_session_turned_away_is_asked_again() {
    let d = scratch();
    let (root, local) = (open_dir(&d.path().join("root")), open_dir(&d.path().join("local")));
    write_random(&root.join("f"), 70_000, 9);
    let (_s, port) = lp_server(&root, &["--anonymous-write", "--max-sessions", "1"]);
    let held = Raw::login(port);
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(600));
        drop(held);
    });
    let (code, log) = cp_timed(&[&format!("ftp://127.0.0.1:{port}/f"), &local.join("f").display().to_string()], 60);
    release.join().unwrap();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("greeting refused") && log.contains("trying again"), "{log}");
    assert_same_file(&root.join("f"), &local.join("f"));
}

/// A copy whose first sessions are all turned away (another client holds
/// the server's one place for 0.6 s) goes on once it gets one: files
/// refused while no worker held a session, tried once, are handed back
/// when one does, not spent on refusals beside the copy going on (a
/// defect hunt's find: 16 of 4000 files failed).
#[test]
fn files_refused_before_any_session_was_held_go_on_with_the_one_taken() {
    const N: usize = 4000;
    let d = scratch();
    let (root, local) = (open_dir(&d.path().join("root")), open_dir(&d.path().join("local")));
    // Enough files that the copy outlasts a refused batch's retries
    // (1 + 2 + 4 s) on the one session it holds.
    flat(&local.join("src"), N);
    std::fs::create_dir(root.join("in")).unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous-write", "--max-sessions-per-ip", "1"]);
    // Held before the copy starts, so its first sessions are refused
    // (asserted below: the test proves nothing otherwise).
    let held = Raw::login(port);
    let holder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(600));
        drop(held);
    });
    let mut args = vec!["--cc".to_string(), "2".into(), "--no-connect-ahead".into()];
    args.extend((0..N).map(|i| local.join(format!("src/f{i:03}")).display().to_string()));
    args.push(format!("ftp://127.0.0.1:{port}/in/"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, log) = cp_timed(&args, 120);
    holder.join().unwrap();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("greeting refused"), "no session was turned away: {log}");
    assert_same_tree(&local.join("src"), &root.join("in"));
}

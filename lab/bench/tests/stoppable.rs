//! A long helper (the data set's `tar -x`) stops with the harness: a stop
//! request kills it at once instead of waiting for it to end, and leaves no
//! process behind. In its own test binary because the stop flag is
//! process-wide.
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use lightpath_bench::proc::{request_stop, reset_stop, run_stoppable};
use lightpath_bench::Interrupted;

/// One test: the stop flag is process-wide, and a helper run while another
/// test's stop request is pending would be stopped too.
#[test]
fn a_stop_request_kills_a_long_helper_and_its_children() {
    reset_stop();
    let err = run_stoppable(Command::new("sh").args(["-c", "echo no such tarball >&2; exit 2"])).expect_err("failed");
    let msg = format!("{err:#}");
    assert!(msg.contains("no such tarball") && msg.contains("Some(2)"), "fails with its stderr: {msg}");
    run_stoppable(&mut Command::new("true")).expect("a helper that succeeds");

    let stopper = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(300));
        request_stop();
    });
    let t = Instant::now();
    let err = run_stoppable(Command::new("sh").args(["-c", "sleep 317 & sleep 317; wait"])).expect_err("stopped");
    stopper.join().unwrap();
    reset_stop();
    assert!(err.is::<Interrupted>(), "{err:#}");
    assert!(t.elapsed() < Duration::from_secs(5), "took {:?} to stop", t.elapsed());
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(common::processes_mentioning("sleep 317"), Vec::<String>::new());

    // A data set being generated stops too, before its file is whole (it
    // ran to the end of a 3 GiB file first).
    let d = tempfile::tempdir().unwrap();
    request_stop();
    let err = lightpath_bench::gen::random_file(&d.path().join("big"), 1 << 30, 1).expect_err("stopped");
    reset_stop();
    assert!(err.is::<Interrupted>(), "{err:#}");
    assert!(std::fs::metadata(d.path().join("big")).unwrap().len() < 1 << 30);
}

//! Ctrl-C (here: the same stop request the signal handler makes) ends the
//! run promptly and leaves no process, namespace or cgroup behind. In its
//! own test binary because the stop flag is process-wide.
mod common;

use std::time::{Duration, Instant};

use lightpath_bench::plan::Plan;
use lightpath_bench::proc::{request_stop, reset_stop, Proc};
use lightpath_bench::{BenchArgs, Interrupted};

#[test]
fn interrupted_run_cleans_up() {
    common::need_tools();
    let slow = "repetitions = 3\ntimeout = \"120s\"\n[path]\nkind = \"loopback\"\n[dataset]\nkind = \"memory\"\nsize = \"400G\"\n\
                [[tool]]\ntool = \"globus-url-copy\"\nparallel = 1\n";
    let dir = common::scenarios(&[("slow.toml", slow)]);
    let cache = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let args = BenchArgs {
        scenarios: vec![dir.path().into()],
        out: Some(out.path().into()),
        cache: cache.path().into(),
        ..Default::default()
    };
    let plan = Plan::build(&args).unwrap();
    reset_stop();
    let stopper = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(1500));
        request_stop();
    });
    let t = Instant::now();
    let err = plan.execute().expect_err("the run was interrupted");
    stopper.join().unwrap();
    reset_stop();
    assert!(err.is::<Interrupted>(), "{err:#}");
    assert!(t.elapsed() < Duration::from_secs(10), "took {:?} to stop", t.elapsed());
    let res = lightpath_bench::record::Results::load(out.path()).expect("partial results are kept");
    assert_eq!(res.scenarios.len(), 1, "the interrupted scenario is in the results");
    assert!(res.scenarios[0].error.as_deref().unwrap_or("").contains("interrupted"), "{:?}", res.scenarios[0].error);
    assert_eq!(common::leftovers(), Vec::<String>::new());
    let cache_s = cache.path().to_string_lossy().into_owned();
    assert_eq!(common::processes_mentioning(&cache_s), Vec::<String>::new());
    assert_eq!(common::processes_mentioning("/dev/zero file:///dev/null"), Vec::<String>::new());
}

#[test]
fn dropping_a_proc_kills_its_whole_group() {
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "sleep 311 & sleep 311 & wait"]);
    let p = Proc::spawn("sleepers", cmd, None).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(common::processes_mentioning("sleep 311").len() >= 2, "the sleepers and their shell run");
    drop(p);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(common::processes_mentioning("sleep 311"), Vec::<String>::new());
}

//! One honest end-to-end run on loopback with iperf3 and globus-url-copy:
//! the harness must measure consistently (bytes, times, counters, copies).
//! Tool speed is never asserted.
mod common;

use lightpath_bench::plan::Plan;
use lightpath_bench::record::RunRecord;
use lightpath_bench::sampler::throughput;
use lightpath_bench::scenario::ToolKind;
use lightpath_bench::BenchArgs;

const MEMORY: &str = r#"
repetitions = 1
[path]
kind = "loopback"
[dataset]
kind = "memory"
size = "64M"
[[tool]]
tool = "iperf3"
parallel = 2
[[tool]]
tool = "globus-url-copy"
parallel = 2
"#;

const TREE_3PT: &str = r#"
repetitions = 1
mode = "third-party"
[path]
kind = "loopback"
[dataset]
kind = "git-like"
count = 60
size = "3MB"
[[tool]]
tool = "globus-url-copy"
concurrency = 2
pipeline = true
"#;

const FILE: &str = r#"
repetitions = 2
timeout = "60s"
[path]
kind = "loopback"
[dataset]
kind = "large-file"
size = "24M"
[[tool]]
tool = "iperf3"
parallel = 2
[[tool]]
tool = "globus-url-copy"
label = "guc broken"
extra_args = ["-no-such-flag"]
[[tool]]
tool = "globus-url-copy"
parallel = 2
"#;

fn check_run(r: &RunRecord) {
    let what = format!("{} {} run {}", r.scenario, r.label, r.repetition);
    assert!(r.ok, "{what}: {:?} {}", r.error, r.stderr_tail);
    let moved = r.goodput_bps * r.ttc_s / 8.0;
    assert!((moved - r.payload_bytes as f64).abs() < 1.0, "{what}: goodput*TTC = {moved}, payload {}", r.payload_bytes);
    let last = r.samples.last().unwrap();
    assert!(
        last.0 >= r.client_wall_s - 0.001 && last.0 < r.client_wall_s + 0.5,
        "{what}: last sample at {} s, client ran {} s",
        last.0,
        r.client_wall_s
    );
    for w in r.samples.windows(2) {
        assert!(w[1].0 - w[0].0 <= 0.5, "{what}: a sampling gap of {} s", w[1].0 - w[0].0);
        assert!(w[1].1 >= w[0].1, "{what}: counters went backwards");
    }
    let integral: f64 = {
        let tp = throughput(&r.samples);
        r.samples.windows(2).zip(tp).map(|(w, (_, bps))| bps * (w[1].0 - w[0].0) / 8.0).sum()
    };
    assert!(
        (integral - r.wire_bytes as f64).abs() < 16.0,
        "{what}: throughput integrates to {integral}, counters say {}",
        r.wire_bytes
    );
    // At least what arrived crossed the wire, at most what was sent plus overhead.
    let arrived = match r.tool {
        Some(ToolKind::Iperf3) => {
            assert!(r.ttc_s > 0.0, "{what}");
            r.tool_report.as_ref().unwrap()["received_bytes"].as_u64().unwrap()
        }
        _ => {
            assert_eq!(r.ttc_s, r.client_wall_s, "{what}");
            r.payload_bytes
        }
    };
    let (wire, low, high) = (r.wire_bytes as f64, arrived as f64, r.payload_bytes as f64 * 1.1 + 2e6);
    assert!(wire >= low && wire <= high, "{what}: {wire} bytes on the wire, expected {low}..{high}");
    for e in &r.ends {
        assert!(e.usage.cpu_s.is_some_and(|c| c > 0.0), "{what}: {} has no CPU time", e.role);
        if e.role != "client" {
            assert!(e.peak_rss_bytes > 0, "{what}: {} memory not sampled", e.role);
        }
    }
}

#[test]
fn loopback_quick_run_measures_consistently() {
    common::need_tools();
    let dir = common::scenarios(&[("a-memory.toml", MEMORY), ("b-tree-3pt.toml", TREE_3PT), ("z-file.toml", FILE)]);
    let cache = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let args = BenchArgs {
        scenarios: vec![dir.path().into()],
        out: Some(out.path().into()),
        cache: cache.path().into(),
        tools: vec!["iperf3".into(), "guc".into()],
        ..Default::default()
    };
    let res = Plan::build(&args).unwrap().execute().unwrap();
    assert_eq!(res.scenarios.len(), 3);
    let runs: Vec<&RunRecord> = res.scenarios.iter().flat_map(|s| &s.runs).collect();
    // Each tool's one warm-up run (the default `warmup = 1`), then its repetitions.
    assert_eq!(runs.len(), 2 * 2 + 2 + 3 * 3, "every run is recorded, warm-up and failed ones too");
    assert_eq!(runs.iter().filter(|r| r.warmup).count(), 2 + 1 + 3, "one warm-up run per tool");
    for r in &runs {
        if r.label == "guc broken" {
            assert!(!r.ok && r.error.as_deref().unwrap().contains("exited with code"), "{r:?}");
        } else {
            check_run(r);
        }
    }
    let copies = runs.iter().filter(|r| r.ok && r.tool == Some(ToolKind::GlobusUrlCopy) && r.scenario != "a-memory");
    for r in copies {
        assert_eq!(r.verified, "full", "{} {}", r.scenario, r.label);
    }
    // Every run of the tree wrote into a file system of its own, gone
    // afterwards; one file goes to the machine's disk.
    for r in &runs {
        let fresh = r.scenario == "b-tree-3pt";
        assert_eq!(r.dest_fs.starts_with("fresh ext4"), fresh, "{} {}: {}", r.scenario, r.label, r.dest_fs);
    }
    let scratch = cache.path().join("scratch");
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!mounts.contains(&*scratch.to_string_lossy()), "scratch still mounted");
    assert!(!cache.path().join("scratch.img").exists(), "scratch image left behind");
    let md = std::fs::read_to_string(out.path().join("summary.md")).unwrap();
    assert!(md.contains("| guc broken | 0/2 | FAILED |"), "{md}");
    for name in ["a-memory", "b-tree-3pt", "z-file"] {
        assert!(out.path().join(format!("plots/{name}.svg")).exists(), "{name} plot");
    }
    assert!(out.path().join("runs.csv").exists() && out.path().join("results.json").exists());
    assert_eq!(common::leftovers(), Vec::<String>::new(), "namespaces or cgroups left behind");
    let cache_s = cache.path().to_string_lossy().into_owned();
    assert_eq!(common::processes_mentioning(&cache_s), Vec::<String>::new(), "processes left behind");
}

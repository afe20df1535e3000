//! Statistics, the summary table and the plots, from synthetic records.
use lightpath_bench::record::{EndRecord, HostInfo, Results, RunRecord, Sample, ScenarioResult};
use lightpath_bench::scenario::{Scenario, ToolKind};
use lightpath_bench::stats::{index_of_median, median, summarize};
use lightpath_bench::{plot, report};

#[test]
fn medians_and_ranges() {
    assert_eq!(median(&[]), None);
    assert_eq!(median(&[3.0]), Some(3.0));
    assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
    assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    assert_eq!(median(&[f64::NAN, 1.0, 2.0]), Some(1.5), "non-finite values are ignored");
    let s = summarize(&[2.0, 9.0, 4.0, 1.0, 5.0]).unwrap();
    assert_eq!((s.n, s.median, s.min, s.max, s.mean), (5, 4.0, 1.0, 9.0, 4.2));
    assert_eq!(index_of_median(&[10.0, 30.0, 20.0]), Some(2));
}

fn run(label: &str, tool: ToolKind, rep: u32, ttc: Option<f64>) -> RunRecord {
    let bytes = 1_000_000_000u64;
    let samples: Vec<Sample> = (0..=10)
        .map(|i| {
            let t = ttc.unwrap_or(1.0) * i as f64 / 10.0;
            Sample(t, bytes / 10 * i, 0)
        })
        .collect();
    let end = |role: &str, cpu: f64, rss: u64| EndRecord {
        role: role.into(),
        side: "A".into(),
        usage: lightpath_bench::cgroup::Usage { cpu_s: Some(cpu), ..Default::default() },
        peak_rss_bytes: rss,
        ..Default::default()
    };
    RunRecord {
        scenario: "demo".into(),
        label: label.into(),
        tool: Some(tool),
        repetition: rep,
        ok: ttc.is_some(),
        error: ttc.is_none().then(|| "client exited with code 1".to_string()),
        ttc_s: ttc.unwrap_or(0.0),
        payload_bytes: bytes,
        goodput_bps: ttc.map_or(0.0, |t| bytes as f64 * 8.0 / t),
        samples,
        ends: vec![end("client", 1.5, 10 << 20), end("server", 2.5, 20 << 20)],
        caches_dropped: true,
        ..Default::default()
    }
}

fn results() -> Results {
    let scenario = Scenario::parse(
        "[path]\nkind = \"emulated\"\nrate = \"1Gbit\"\nrtt = \"95ms\"\n[dataset]\nkind = \"large-file\"\n[[tool]]\ntool = \"iperf3\"\n",
        std::path::Path::new("demo.toml"),
    )
    .unwrap();
    let mut runs = Vec::new();
    for rep in 1..=3 {
        runs.push(run("iperf3 -P 4", ToolKind::Iperf3, rep, Some(8.5 + rep as f64 * 0.1)));
        runs.push(run("guc -p 4", ToolKind::GlobusUrlCopy, rep, Some([12.0, 10.0, 11.0][rep as usize - 1])));
        runs.push(run("lightpath -p 4", ToolKind::Lightpath, rep, if rep == 2 { None } else { Some(9.0) }));
        runs.push(run("broken", ToolKind::Lightpath, rep, None));
    }
    let sc = ScenarioResult {
        name: "demo".into(),
        scenario,
        path: "1.00 Gbit/s, 95 ms RTT".into(),
        path_settings: Default::default(),
        counted_interfaces: vec!["wan0".into()],
        dataset: "large-file-1000000000".into(),
        dataset_files: 1,
        dataset_bytes: 1_000_000_000,
        wire_time_s: Some(8.0),
        tools: Vec::new(),
        runs,
        error: None,
    };
    Results {
        started: "2026-01-01T00:00:00Z".into(),
        finished: "2026-01-01T00:01:00Z".into(),
        quick: false,
        command: vec!["lightpath".into(), "bench".into()],
        host: HostInfo::default(),
        scenarios: vec![sc],
    }
}

fn line<'a>(table: &'a str, label: &str) -> &'a str {
    table.lines().find(|l| l.starts_with(&format!("| {label} |"))).unwrap_or_else(|| panic!("no row {label}:\n{table}"))
}

#[test]
fn summary_table_has_medians_ratios_and_failures() {
    let res = results();
    let md = report::summary(&res);
    // guc: TTCs 12, 10, 11 -> median 11, range 10-12; wire 8 s -> 1.38; best is lightpath (9 s).
    let guc = line(&md, "guc -p 4");
    assert!(guc.contains("| 3/3 | 11.00 (10.00–12.00) |"), "{guc}");
    assert!(guc.contains("727 Mbit/s (667–800)"), "{guc}");
    assert!(guc.contains("| 1.38 | 1.22 |"), "{guc}");
    assert!(guc.contains("| 1.50 / 2.50 | 4.00 | 10 / 20 |"), "both ends' CPU per GB: {guc}");
    let lp = line(&md, "lightpath -p 4");
    assert!(lp.contains("| 2/3 | 9.00 (9.00–9.00) |"), "a failed run is counted: {lp}");
    assert!(lp.contains("| 1.12 | 1.00 |"), "{lp}");
    let ip = line(&md, "iperf3 -P 4");
    assert!(ip.contains("| ref |"), "{ip}");
    let broken = line(&md, "broken");
    assert!(broken.contains("| 0/3 | FAILED |"), "an all-failed tool keeps its row: {broken}");
    assert!(md.contains("- broken failed: client exited with code 1"), "{md}");
    assert!(md.contains("wire time 8.00 s (rate)"), "{md}");
}

/// A run before which the page cache could not be dropped is named: the
/// legend says caches are dropped before every run.
#[test]
fn runs_whose_caches_were_not_dropped_are_named() {
    let mut res = results();
    assert!(!report::summary(&res).contains("caches not dropped"));
    res.scenarios[0].runs[1].caches_dropped = false;
    let md = report::summary(&res);
    assert!(md.contains("- **caches not dropped** before 1 run(s) (guc -p 4)"), "{md}");
}

#[test]
fn csv_keeps_every_run() {
    let csv = results().csv();
    assert_eq!(csv.lines().count(), 1 + 12);
    assert!(csv.lines().any(|l| l.contains("broken") && l.contains(",false,")));
}

/// A third-party run's servers count together in runs.csv, as in the
/// summary (the CSV had the source server's alone).
#[test]
fn csv_sums_both_servers_of_a_third_party_run() {
    let mut res = results();
    let r = &mut res.scenarios[0].runs[0];
    let server = r.ends.pop().unwrap();
    r.ends.push(EndRecord { role: "src-server".into(), ..server.clone() });
    r.ends.push(EndRecord { role: "dst-server".into(), ..server });
    let row = res.csv().lines().nth(1).unwrap().to_string();
    assert!(row.contains(",1.500,5.000,10485760,20971520,"), "{row}");
}

#[test]
fn plots_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let files = plot::plot_all(&results(), dir.path()).unwrap();
    // One overlay plus one per tool with a successful run (not "broken").
    assert_eq!(files.len(), 4, "{files:?}");
    let overlay = std::fs::read_to_string(&files[0]).unwrap();
    assert!(overlay.starts_with("<svg"));
    assert!(overlay.contains("guc -p 4 (median run)"));
    assert!(overlay.contains("<polyline"), "a line is drawn");
    assert!(overlay.contains("throughput (Gbit/s)"));
    let per_tool = std::fs::read_to_string(dir.path().join("demo--guc__p_4.svg")).unwrap();
    assert!(per_tool.contains("run 3"));
}

#[test]
fn results_round_trip_through_json() {
    let dir = tempfile::tempdir().unwrap();
    let res = results();
    res.save(dir.path()).unwrap();
    let back = Results::load(dir.path()).unwrap();
    assert_eq!(back.scenarios[0].runs, res.scenarios[0].runs);
    assert_eq!(report::summary(&back), report::summary(&res));
}

#[test]
fn percent_of_disk_is_the_disk_time_over_the_tool_time() {
    assert_eq!(report::percent_of_disk(9.0, 10.0), 90.0);
    assert_eq!(report::percent_of_disk(8.0, 4.0), 200.0, "a tool faster than the reference passes 100");
}

/// The demo scenario with a fio row (7 s, 7.5 s, 8 s: median 7.5 s).
fn with_fio() -> Results {
    let mut res = results();
    let sc = &mut res.scenarios[0];
    for rep in 1..=3 {
        let mut r = run("fio", ToolKind::Fio, rep, Some(6.5 + rep as f64 * 0.5));
        r.ends.retain(|e| e.role == "client");
        sc.runs.push(r);
    }
    res
}

#[test]
fn fio_is_a_disk_reference_row() {
    let md = report::summary(&with_fio());
    assert!(md.contains("| × best | % of disk | CPU s"), "the column appears with fio: {md}");
    assert!(md.contains("disk time 7.50 s (fio)"), "{md}");
    // fio (7.5 s) is faster than every transfer tool but is no transfer tool:
    // lightpath (9 s) stays the best; its share of the disk is 7.5 / 9 = 83.3 %.
    let lp = line(&md, "lightpath -p 4");
    assert!(lp.contains("| 1.12 | 1.00 | 83.3 |"), "{lp}");
    let guc = line(&md, "guc -p 4");
    assert!(guc.contains("| 1.22 | 68.2 |"), "7.5 / 11 s: {guc}");
    let fio = line(&md, "fio");
    assert!(fio.contains("| disk ref | ref |"), "{fio}");
    assert!(fio.contains("| 1.50 / — |"), "fio has no server: {fio}");
    let ip = line(&md, "iperf3 -P 4");
    assert!(ip.contains("| ref | — |"), "iperf3 has no share of the disk: {ip}");
    let broken = line(&md, "broken");
    assert!(broken.ends_with("| FAILED | — | — | — | — | — | — | — |"), "one cell more: {broken}");
}

#[test]
fn no_disk_column_without_fio() {
    let md = report::summary(&results());
    assert!(md.contains("| × best | CPU s"), "{md}");
    assert!(!md.contains("· disk time"), "{md}");
}

#[test]
fn runs_where_the_emulator_fell_behind_are_named() {
    let mut res = results();
    assert!(!report::summary(&res).contains("emulator behind"), "no emulator counters, no line");
    let lag = |late_over_1ms| Some(lightpath_bench::wanlab::EmuStats { late_over_1ms, ..Default::default() });
    res.scenarios[0].runs[0].emulator = lag(0);
    res.scenarios[0].runs[4].emulator = lag(37);
    let md = report::summary(&res);
    assert!(md.contains("- emulator behind (packets more than 1 ms late) in: iperf3 -P 4 #2 (37)"), "{md}");
}

#[test]
fn what_lightpath_parked_of_a_tree_is_summed_up_per_setting() {
    let mut res = results();
    assert!(!report::summary(&res).contains("parked"), "no tree reports, no line");
    let tree = |parked: u64| Some(serde_json::json!({ "tree": { "parked_peak": parked } }));
    // lightpath -p 4's three runs (its second failed: a failed run's report counts too).
    res.scenarios[0].runs[2].tool_report = tree(48_000_000);
    res.scenarios[0].runs[6].tool_report = tree(129_000_000);
    res.scenarios[0].runs[10].tool_report = tree(60_000_000);
    let md = report::summary(&res);
    let want =
        "- most data parked ahead of its manifest entries, per run (median): lightpath -p 4 60 MB (48–129, 3 runs)";
    assert!(md.contains(want), "{md}");
}

/// What fails a `--quick` run (CI's check that the harness still works).
#[test]
fn failures_list_every_failed_run_and_scenario() {
    let mut res = results();
    let f = report::failures(&res);
    assert_eq!(f.len(), 4, "{f:?}");
    assert!(f.contains(&"demo | lightpath -p 4 #2: client exited with code 1".to_string()), "{f:?}");
    res.scenarios[0].error = Some("lab did not come up".into());
    assert_eq!(report::failures(&res)[0], "demo: lab did not come up");
    res.scenarios[0].runs.retain(|r| r.ok);
    res.scenarios[0].error = None;
    assert!(report::failures(&res).is_empty());
}

/// The demo scenario with a warm-up run of guc (30 s) and of lightpath
/// (failed) before the measured ones.
fn with_warmups() -> Results {
    let mut res = results();
    let sc = &mut res.scenarios[0];
    let mut guc = run("guc -p 4", ToolKind::GlobusUrlCopy, 1, Some(30.0));
    let mut lp = run("lightpath -p 4", ToolKind::Lightpath, 1, None);
    guc.warmup = true;
    lp.warmup = true;
    sc.runs.splice(0..0, [guc, lp]);
    res
}

#[test]
fn warm_up_runs_are_shown_apart_and_left_out_of_the_statistics() {
    let md = report::summary(&with_warmups());
    assert!(md.contains("| TTC median s (min–max) | first run s | goodput"), "{md}");
    assert!(md.contains("repetitions: 5 (+ 1 warm-up)"), "{md}");
    let guc = line(&md, "guc -p 4");
    assert!(guc.contains("| 3/3 | 11.00 (10.00–12.00) | 30.00 | 727 Mbit/s (667–800) |"), "{guc}");
    assert!(guc.contains("| 1.38 | 1.22 |"), "{guc}");
    let lp = line(&md, "lightpath -p 4");
    assert!(lp.contains("| 2/3 | 9.00 (9.00–9.00) | failed |"), "{lp}");
    let broken = line(&md, "broken");
    assert!(broken.ends_with("| 0/3 | FAILED | — | — | — | — | — | — | — |"), "no warm-up, one cell more: {broken}");
    let header = md.lines().find(|l| l.starts_with("| tool |")).unwrap();
    let rule = md.lines().find(|l| l.starts_with("|---")).unwrap();
    assert_eq!(header.matches('|').count(), rule.matches('|').count(), "{header}\n{rule}");
    let f = report::failures(&with_warmups());
    assert!(f.contains(&"demo | lightpath -p 4 warm-up #1: client exited with code 1".to_string()), "{f:?}");
    let csv = with_warmups().csv();
    assert!(csv.lines().nth(1).unwrap().ends_with(",true"), "{csv}");
    assert!(!report::summary(&results()).contains("first run s"), "no warm-up, no column");
}

#[test]
fn the_legend_says_what_the_references_and_cpu_figures_are_not() {
    let md = report::summary(&results());
    for said in ["softirq context on the emulator's threads", "one thread per end", "not a proven ceiling of the disk"]
    {
        assert!(md.contains(said), "legend lacks `{said}`");
    }
}

#[test]
fn a_tool_with_few_successful_runs_cannot_be_the_best() {
    let mut res = results();
    // lightpath -p 4: 9 s in run 1 only (runs 2 and 3 fail): 1 of 3 ok.
    let third = res.scenarios[0].runs.iter_mut().find(|r| r.label == "lightpath -p 4" && r.repetition == 3).unwrap();
    third.ok = false;
    third.error = Some("client exited with code 1".into());
    let md = report::summary(&res);
    let guc = line(&md, "guc -p 4");
    assert!(guc.contains("| 1.38 | 1.00 |"), "guc (3/3, 11 s) is the best now: {guc}");
    let lp = line(&md, "lightpath -p 4");
    assert!(lp.contains("| 1/3 | 9.00 (9.00–9.00) |"), "{lp}");
    assert!(lp.contains("| 1.12 | 0.82 (1/3 ok) |"), "faster, but marked and not the best: {lp}");
}

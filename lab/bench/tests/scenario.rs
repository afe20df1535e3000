//! Scenario files: parsing, strictness, validation, quick overrides.
use std::path::{Path, PathBuf};

use lightpath_bench::scenario::{load_all, DatasetKind, Mode, PathKind, Scenario, ToolKind};

const GOOD: &str = r#"
description = "one file over a lossy path"
repetitions = 3
mode = "third-party"
timeout = "90s"

[path]
kind = "emulated"
rate = "1Gbit"
rtt = "95ms"
loss_percent = 0.01
mtu = 1500
tcp_buffer_max = "64M"

[dataset]
kind = "large-file"
size = "2G"

[quick]
repetitions = 1
size = "16M"

[[tool]]
tool = "globus-url-copy"
parallel = 4
concurrency = 2
pipeline = true
fast = true

[[tool]]
tool = "lightpath"
parallel = 8

[[tool]]
tool = "iperf3"
parallel = 4
"#;

fn parse(text: &str) -> anyhow::Result<Scenario> {
    Scenario::parse(text, Path::new("bench/scenarios/example.toml"))
}

fn err(text: &str) -> String {
    format!("{:#}", parse(text).expect_err("must be rejected"))
}

#[test]
fn parses_a_complete_scenario() {
    let s = parse(GOOD).unwrap();
    assert_eq!(s.name, "example", "the name defaults to the file stem");
    assert_eq!(s.repetitions, 3);
    assert_eq!(s.mode, Mode::ThirdParty);
    assert_eq!(s.path.kind, PathKind::Emulated);
    assert_eq!(s.path.rate.unwrap().0, 1_000_000_000);
    assert_eq!(s.path.rtt.unwrap().0.as_millis(), 95);
    assert_eq!(s.path.tcp_buffer_max.unwrap().0, 64 << 20);
    assert_eq!(s.dataset.kind, DatasetKind::LargeFile);
    assert_eq!(s.dataset.size.unwrap().0, 2 << 30);
    assert_eq!(s.tools.len(), 3);
    assert_eq!(s.tools[0].tool, ToolKind::GlobusUrlCopy);
    assert_eq!(s.tools[0].label(), "guc -p 4 -cc 2 -pp -fast");
    assert_eq!(s.tools[1].label(), "lightpath -p 8");
    assert_eq!(s.tools[2].label(), "iperf3 -P 4");
}

#[test]
fn unknown_keys_are_rejected_everywhere() {
    let cases = [
        ("repetitions = 3", "repetitons = 3"),
        ("kind = \"emulated\"", "kind = \"emulated\"\nlatency = \"95ms\""),
        ("kind = \"large-file\"", "kind = \"large-file\"\nfiles = 3"),
        ("repetitions = 1\nsize", "repetitions = 1\nverbose = true\nsize"),
        ("parallel = 8", "parallel = 8\nstreams = 8"),
    ];
    for (from, to) in cases {
        let text = GOOD.replacen(from, to, 1);
        assert_ne!(text, GOOD, "test case did not apply: {from}");
        let e = err(&text);
        assert!(e.contains("unknown field"), "{to}: {e}");
        assert!(e.contains("example.toml"), "the error names the file: {e}");
    }
}

#[test]
fn bad_values_are_explained() {
    let e = err(&GOOD.replace("rate = \"1Gbit\"\n", ""));
    assert!(e.contains("needs `rate`"), "{e}");
    let e = err(&GOOD.replace("kind = \"emulated\"", "kind = \"loopback\""));
    assert!(e.contains("loopback path is not shaped"), "{e}");
    let e = err(&GOOD.replace("parallel = 8", "parallel = 8\npipeline = true"));
    assert!(e.contains("`pipeline` is a globus-url-copy setting"), "{e}");
    let e = err(&GOOD.replace("loss_percent = 0.01", "loss_percent = 150"));
    assert!(e.contains("loss_percent"), "{e}");
    let e = err(&GOOD.replace("rtt = \"95ms\"", "rtt = \"95 parsecs\""));
    assert!(e.contains("unknown duration unit"), "{e}");
    let e = err(&GOOD.replace("mode = \"third-party\"", "mode = \"sideways\""));
    assert!(e.contains("unknown variant"), "{e}");
    let e = err(&GOOD.replace(
        "tool = \"lightpath\"\nparallel = 8",
        "tool = \"globus-url-copy\"\nparallel = 4\nconcurrency = 2\npipeline = true\nfast = true",
    ));
    assert!(e.contains("both labelled"), "{e}");
    let e = err(&GOOD.replace("kind = \"large-file\"", "kind = \"linux-source\""));
    assert!(e.contains("fixed size"), "{e}");
}

#[test]
fn quick_overrides_apply() {
    let mut s = parse(GOOD).unwrap();
    s.apply_quick();
    assert_eq!(s.repetitions, 1);
    assert_eq!(s.dataset.size.unwrap().0, 16 << 20);
    assert_eq!(s.timeout.0.as_secs(), 90, "unset quick keys keep their value");
}

#[test]
fn the_repository_scenarios_are_valid() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/scenarios");
    let all = load_all(&[dir]).unwrap();
    assert!(all.len() >= 8, "found {} scenarios", all.len());
    let quick: Vec<&Scenario> = all.iter().filter(|s| s.quick.is_some()).collect();
    assert!(quick.iter().any(|s| s.path.kind == PathKind::Loopback));
    assert!(quick.iter().any(|s| s.path.kind == PathKind::Emulated), "quick mode has one emulated case");
}

const FIO: &str = "[path]\nkind = \"loopback\"\n[dataset]\nkind = \"large-file\"\n[[tool]]\ntool = \"lightpath\"\n[[tool]]\ntool = \"fio\"\n";

#[test]
fn fio_is_the_disk_reference_for_one_file() {
    let s = parse(FIO).unwrap();
    assert_eq!(s.tools[1].tool, ToolKind::Fio);
    assert_eq!(s.tools[1].label(), "fio");
    assert_eq!(ToolKind::parse("fio").unwrap(), ToolKind::Fio);
    assert!(ToolKind::Fio.is_reference() && ToolKind::Iperf3.is_reference());
    assert!(!ToolKind::Lightpath.is_reference() && !ToolKind::GlobusUrlCopy.is_reference());
}

#[test]
fn fio_refuses_data_sets_that_are_not_one_file() {
    for kind in ["memory", "large-files", "git-like", "incompressible"] {
        let e = err(&FIO.replace("kind = \"large-file\"", &format!("kind = \"{kind}\"")));
        assert!(e.contains("[[tool]] #2"), "the error names the tool: {e}");
        assert!(e.contains(&format!("needs dataset kind = \"large-file\", not \"{kind}\"")), "{e}");
    }
    let e = err(&FIO.replace("kind = \"large-file\"", "kind = \"linux-source\""));
    assert!(e.contains("not \"linux-source\""), "{e}");
}

#[test]
fn fio_refuses_network_settings() {
    for (key, line) in
        [("parallel", "parallel = 4"), ("concurrency", "concurrency = 2"), ("server_args", "server_args = [\"-v\"]")]
    {
        let e = err(&format!("{FIO}{line}\n"));
        assert!(e.contains(&format!("`{key}` has no meaning for fio")), "{e}");
    }
    let e = err(&format!("{FIO}pipeline = true\n"));
    assert!(e.contains("`pipeline` is a globus-url-copy setting, not one of fio"), "{e}");
    parse(&format!("{FIO}extra_args = [\"--numjobs=1\"]\n")).expect("extra_args are fio options");
}

#[test]
fn a_client_may_talk_to_the_other_kinds_server() {
    let s = parse(&GOOD.replace(
        "tool = \"lightpath\"\nparallel = 8",
        "tool = \"lightpath\"\nparallel = 8\nserver = \"globus-gridftp-server\"",
    ))
    .unwrap();
    let lp = s.tools.iter().find(|t| t.tool == ToolKind::Lightpath).unwrap();
    assert_eq!(lp.label(), "lightpath -p 8 (GCT server)");
    let own = GOOD
        .replace("tool = \"lightpath\"\nparallel = 8", "tool = \"lightpath\"\nparallel = 8\nserver = \"lightpath\"");
    let s = parse(&own).unwrap();
    assert_eq!(s.tools.iter().find(|t| t.tool == ToolKind::Lightpath).unwrap().label(), "lightpath -p 8");
    let e = err(
        &GOOD.replace("tool = \"iperf3\"\nparallel = 4", "tool = \"iperf3\"\nparallel = 4\nserver = \"lightpath\"")
    );
    assert!(e.contains("`server` chooses the GridFTP server of lightpath or globus-url-copy"), "{e}");
    let e = err(&GOOD.replace("parallel = 8", "parallel = 8\nserver = \"vsftpd\""));
    assert!(e.contains("unknown variant"), "{e}");
}

#[test]
fn faults_are_parsed_and_an_empty_one_is_refused() {
    let s = parse(&format!("{GOOD}\n[fault]\ninterrupt_after = \"4s\"\n")).unwrap();
    let f = s.fault.unwrap();
    assert_eq!(f.interrupt_after.unwrap().0.as_secs(), 4);
    assert!(f.kill_stream_after.is_none());
    assert!(f.describe().contains("interrupted (SIGINT) 4.00 s"), "{}", f.describe());
    let s = parse(&format!("{GOOD}\n[fault]\nkill_stream_after = \"2s\"\n")).unwrap();
    assert!(s.fault.unwrap().describe().contains("destroyed 2.00 s"));
    let e = err(&format!("{GOOD}\n[fault]\n"));
    assert!(e.contains("names no fault"), "{e}");
    let e = err(&format!("{GOOD}\n[fault]\nkill_client_after = \"4s\"\n"));
    assert!(e.contains("unknown field"), "{e}");
}

#[test]
fn one_warm_up_run_unless_the_scenario_says_otherwise() {
    let s = Scenario::parse(GOOD, Path::new("x.toml")).unwrap();
    assert_eq!(s.warmup, 1, "the default");
    let none = GOOD.replace("repetitions = 3\n", "repetitions = 3\nwarmup = 0\n");
    assert_eq!(Scenario::parse(&none, Path::new("x.toml")).unwrap().warmup, 0, "0 is allowed");
    let quick = GOOD.replace("[quick]\n", "[quick]\nwarmup = 0\n");
    let mut q = Scenario::parse(&quick, Path::new("x.toml")).unwrap();
    q.apply_quick();
    assert_eq!(q.warmup, 0, "[quick] can change it");
}

//! Bad input is refused with a clear message before anything runs.
mod common;

use lightpath_bench::plan::Plan;
use lightpath_bench::BenchArgs;

fn build_err(files: &[(&str, &str)], tweak: impl FnOnce(&mut BenchArgs)) -> String {
    let dir = common::scenarios(files);
    let out = tempfile::tempdir().unwrap();
    let mut args = BenchArgs {
        scenarios: vec![dir.path().into()],
        out: Some(out.path().join("never")),
        cache: out.path().join("cache"),
        ..Default::default()
    };
    tweak(&mut args);
    let e = format!("{:#}", Plan::build(&args).err().expect("must be refused"));
    assert!(!out.path().join("never").exists() && !out.path().join("cache").exists(), "something ran");
    e
}

const OK: &str = "[path]\nkind = \"loopback\"\n[dataset]\nkind = \"memory\"\n[[tool]]\ntool = \"lightpath\"\n";

#[test]
fn unknown_key_is_refused() {
    let e = build_err(&[("typo.toml", &OK.replace("[dataset]", "[dataset]\nsise = \"1G\""))], |_| {});
    assert!(e.contains("typo.toml") && e.contains("unknown field `sise`"), "{e}");
}

#[test]
fn missing_tool_is_refused() {
    let e = build_err(&[("lp.toml", OK)], |a| a.lightpath = Some("/nonexistent/lightpath".into()));
    assert!(e.contains("lp: lightpath needs `/nonexistent/lightpath`, which is not installed"), "{e}");
}

#[test]
fn unemulatable_path_is_refused() {
    let fast = OK.replace("kind = \"loopback\"", "kind = \"emulated\"\nrate = \"100Gbit\"\nrtt = \"95ms\"\nmtu = 1500");
    let e = build_err(&[("fast.toml", &fast)], |a| a.lightpath = Some("/bin/true".into()));
    assert!(e.contains("fast: cannot emulate 100.00 Gbit/s"), "{e}");
}

#[test]
fn missing_linux_source_is_explained() {
    let linux = OK.replace("kind = \"memory\"", "kind = \"linux-source\"\ntarball = \"/nonexistent/linux.tar.xz\"");
    let e = build_err(&[("src.toml", &linux)], |a| a.lightpath = Some("/bin/true".into()));
    assert!(e.contains("apt-get install linux-source-6.1"), "{e}");
}

#[test]
fn all_problems_are_listed_together() {
    let bad_path = OK.replace("kind = \"loopback\"", "kind = \"emulated\"\nrate = \"100Gbit\"\nrtt = \"1ms\"");
    let e = build_err(&[("a.toml", OK), ("b.toml", &bad_path)], |a| a.lightpath = Some("/nonexistent/lp".into()));
    assert!(e.contains("a: lightpath needs") && e.contains("b: cannot emulate"), "{e}");
}

#[test]
fn fio_without_a_single_file_is_refused_at_plan_time() {
    let fio = OK.replace("tool = \"lightpath\"", "tool = \"fio\"");
    let e = build_err(&[("disk.toml", &fio)], |_| {});
    assert!(e.contains("disk.toml") && e.contains("fio (the disk reference) copies one file"), "{e}");
    assert!(e.contains("not \"memory\""), "{e}");
}

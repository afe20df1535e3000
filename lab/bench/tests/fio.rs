//! fio, the disk reference: its command line and what is kept of its report.
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use lightpath_bench::dataset::{Dataset, Manifest};
use lightpath_bench::fio;
use lightpath_bench::scenario::{DatasetKind, Mode, Scenario};
use lightpath_bench::tools::{invocation, Ctx};

mod common;
use common::programs;

fn dataset(kind: DatasetKind) -> Dataset {
    let is_file = kind == DatasetKind::LargeFile;
    Dataset {
        kind,
        id: "large-file-67108864".into(),
        root: (kind != DatasetKind::Memory).then(|| PathBuf::from("/cache/datasets/large-file-67108864")),
        entry: if is_file { "big.bin" } else { "tree" }.into(),
        is_dir: !is_file && kind != DatasetKind::Memory,
        files: 1,
        bytes: 64 << 20,
        manifest: Manifest::default(),
    }
}

fn client_for(ds: &Dataset, toml_extra: &str) -> anyhow::Result<Vec<String>> {
    let text = format!(
        "[path]\nkind = \"loopback\"\n[dataset]\nkind = \"large-file\"\n[[tool]]\ntool = \"fio\"\n{toml_extra}"
    );
    let sc = Scenario::parse(&text, Path::new("disk.toml")).unwrap();
    let ctx = Ctx {
        mode: Mode::Download,
        ds,
        a: Ipv4Addr::LOCALHOST,
        b: Ipv4Addr::LOCALHOST,
        dest: Path::new("/cache/scratch/dest"),
        logs: Path::new("/cache/scratch/logs"),
    };
    let inv = invocation(&sc.tools[0], &programs(), &ctx)?;
    assert!(inv.servers.is_empty(), "fio has no servers");
    Ok(inv.client)
}

#[test]
fn command_line_reads_the_file_and_writes_one_as_large() {
    let argv = client_for(&dataset(DatasetKind::LargeFile), "").unwrap();
    let expected = [
        "/usr/bin/fio",
        "--output-format=json",
        "--output=/cache/scratch/logs/fio.json",
        "--direct=1",
        "--ioengine=libaio",
        "--bs=1M",
        "--iodepth=16",
        "--name=read",
        "--rw=read",
        "--filename=/cache/datasets/large-file-67108864/big.bin",
        "--size=67108864",
        "--name=write",
        "--rw=write",
        "--filename=/cache/scratch/dest/big.bin",
        "--size=67108864",
    ];
    assert_eq!(argv, expected);
}

#[test]
fn extra_args_are_global_options() {
    let argv = client_for(&dataset(DatasetKind::LargeFile), "extra_args = [\"--numjobs=1\"]\n").unwrap();
    let extra = argv.iter().position(|a| a == "--numjobs=1").unwrap();
    let first_job = argv.iter().position(|a| a == "--name=read").unwrap();
    assert!(extra < first_job, "before the first job, so both jobs get it: {argv:?}");
}

#[test]
fn command_line_refuses_what_is_not_one_file() {
    for kind in [DatasetKind::Memory, DatasetKind::GitLike] {
        let e = format!("{:#}", client_for(&dataset(kind), "").unwrap_err());
        assert!(e.contains("fio copies one file"), "{e}");
    }
}

fn fio_json(read_bytes: u64, write_error: i64) -> String {
    let job = |name: &str, rb: u64, wb: u64, err: i64| {
        format!(
            r#"{{"jobname": "{name}", "error": {err},
                "read": {{"io_bytes": {rb}, "bw_bytes": {}, "runtime": {}}},
                "write": {{"io_bytes": {wb}, "bw_bytes": {}, "runtime": {}}}}}"#,
            if rb > 0 { 250_000_000 } else { 0 },
            if rb > 0 { 268 } else { 0 },
            if wb > 0 { 500_000_000 } else { 0 },
            if wb > 0 { 134 } else { 0 },
        )
    };
    format!(
        r#"{{"fio version": "fio-3.33", "jobs": [{}, {}]}}"#,
        job("read", read_bytes, 0, 0),
        job("write", 0, 64 << 20, write_error)
    )
}

#[test]
fn report_keeps_each_jobs_bytes_rate_and_runtime() {
    let r = fio::report(&fio_json(64 << 20, 0), 64 << 20).unwrap();
    assert_eq!(r["version"], "fio-3.33");
    assert_eq!(r["read_bytes"], 64 << 20);
    assert_eq!(r["read_bytes_per_s"], 250_000_000);
    assert_eq!(r["read_runtime_s"], 0.268);
    assert_eq!(r["write_bytes"], 64 << 20);
    assert_eq!(r["write_bytes_per_s"], 500_000_000);
    assert_eq!(r["write_runtime_s"], 0.134);
    assert_eq!(fio::disk_seconds(&r), Some(0.268), "the disk time is the slower job's runtime");
}

#[test]
fn report_refuses_short_or_failed_jobs() {
    let e = format!("{:#}", fio::report(&fio_json(1 << 20, 0), 64 << 20).unwrap_err());
    assert!(e.contains("fio read job moved 1048576 of 67108864 bytes"), "{e}");
    let e = format!("{:#}", fio::report(&fio_json(64 << 20, 5), 64 << 20).unwrap_err());
    assert!(e.contains("fio write job failed with error 5"), "{e}");
    let e = format!("{:#}", fio::report("fio: engine libaio not loadable", 1).unwrap_err());
    assert!(e.contains("not JSON"), "{e}");
}

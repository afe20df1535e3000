//! `lightpath bench`: declarative scenarios (one TOML file each) that set up
//! a path (loopback or the WAN emulator), a data set and the servers, run
//! each tool N times and record time to completion, goodput, throughput over
//! time, CPU and memory of both ends, as JSON/CSV, a markdown summary and
//! SVG plots. See `bench/README.md` at the repository root.
//!
//! Code layout: `scenario` (file format, validation) → `plan` (what will
//! run, checked before anything starts) → `runner` (one scenario), using
//! `netpath` (namespaces, counters), `cgroup` (per-end accounting), `proc`
//! (process groups, Ctrl-C), `tools` (command lines; `fio` for the disk
//! reference), `dataset`/`gen`/`manifest` (data), `scratchfs` (a fresh file system
//! for every run's output) and `sampler`; then `record`, `stats`, `report` and `plot` for output.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

pub mod cgroup;
pub mod dataset;
pub mod fault;
pub mod fio;
pub mod gen;
pub mod manifest;
pub mod netpath;
pub mod plan;
pub mod plot;
pub mod proc;
pub mod record;
pub mod report;
pub mod runner;
pub mod sampler;
pub mod scenario;
pub mod scratchfs;
pub mod stats;
pub mod tools;
pub mod units;
pub mod wanlab;

pub use proc::Interrupted;

/// `lightpath bench ...` arguments.
#[derive(Clone, Debug, Default, Args)]
pub struct BenchArgs {
    /// Scenario files or directories of them [default: bench/scenarios]
    pub scenarios: Vec<PathBuf>,
    /// CI smoke run: only scenarios with a [quick] table, with its small sizes
    #[arg(long)]
    pub quick: bool,
    /// Results directory [default: bench/results/<UTC time>, or target/bench/quick-<UTC time>]
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Data-set cache and scratch space (needs room for each data set twice)
    #[arg(long, env = "LIGHTPATH_BENCH_CACHE", default_value = "/var/tmp/lightpath-bench")]
    pub cache: PathBuf,
    /// Only these tools (comma-separated: lightpath, globus-url-copy or guc, iperf3, fio)
    #[arg(long, value_delimiter = ',')]
    pub tools: Vec<String>,
    /// Only scenarios whose name contains one of these (comma-separated)
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Override every scenario's repetitions
    #[arg(long)]
    pub repetitions: Option<u32>,
    /// The lightpath binary [default: this program when it is lightpath, else lightpath on PATH]
    #[arg(long, env = "LIGHTPATH_BENCH_LIGHTPATH")]
    pub lightpath: Option<PathBuf>,
    /// Leave out tools that are not installed (say so) instead of refusing to start
    #[arg(long)]
    pub skip_missing: bool,
    /// Validate scenarios, tools and paths, print the plan, run nothing
    #[arg(long)]
    pub check: bool,
    /// Rebuild summary.md and plots/ from DIR/results.json, run nothing
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
}

/// Entry point for `lightpath bench`.
pub fn run(args: BenchArgs) -> Result<()> {
    if let Some(dir) = &args.report {
        let res = record::Results::load(dir)?;
        write_report(&res, dir)?;
        println!("{}", report::summary(&res));
        return Ok(());
    }
    let plan = plan::Plan::build(&args)?;
    eprint!("{}", plan.describe());
    if args.check {
        return Ok(());
    }
    let _cache = lock_cache(&args.cache)?;
    let res = plan.execute()?;
    println!("{}", report::summary(&res));
    eprintln!("bench: results in {}", plan.out.display());
    let failed = report::failures(&res);
    // A quick run is CI's check that the harness and every tool still work:
    // a failed run must fail it (a real run reports failures in its tables).
    if args.quick && !failed.is_empty() {
        anyhow::bail!("{} quick run(s) failed: {}", failed.len(), failed.join("; "));
    }
    Ok(())
}

/// Hold the cache `dir` for this bench alone (an advisory lock, released
/// when the bench exits, however it ends): a second bench on the same
/// cache reformatted and unmounted the first one's scratch file system
/// mid-run, and the first blamed the failure on a tool.
fn lock_cache(dir: &std::path::Path) -> Result<std::fs::File> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))?;
    let path = dir.join(".lock");
    let f = std::fs::File::create(&path).with_context(|| format!("cannot open {}", path.display()))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "another bench is using the cache {}: wait for it to end, or give this one another --cache",
            dir.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => Err(e).with_context(|| format!("cannot lock {}", path.display())),
    }
}

/// Writes results.json, runs.csv, summary.md and plots/ into `dir`.
pub fn write_outputs(res: &record::Results, dir: &std::path::Path) -> Result<()> {
    res.save(dir)?;
    write_report(res, dir)
}

/// Writes summary.md and plots/ into `dir`: `--report` leaves the measured
/// results.json as it was (written again, its floats changed in their
/// last digits).
fn write_report(res: &record::Results, dir: &std::path::Path) -> Result<()> {
    std::fs::write(dir.join("summary.md"), report::summary(res))
        .with_context(|| format!("cannot write {}", dir.display()))?;
    plot::plot_all(res, &dir.join("plots"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    /// A second bench on one cache is refused while the first holds it.
    #[test]
    fn a_cache_serves_one_bench_at_a_time() {
        let d = tempfile::tempdir().unwrap();
        let first = super::lock_cache(d.path()).unwrap();
        let e = super::lock_cache(d.path()).unwrap_err();
        assert!(e.to_string().contains("another bench is using the cache"), "{e}");
        drop(first);
        super::lock_cache(d.path()).expect("free again once the first ends");
    }
}

//! fio, the disk reference: what the disk sustains for the I/O a
//! file-to-file copy does, measured in the same run as the transfers (as
//! iperf3 is the network reference). Its TTC is the slower job's runtime
//! (the raw wall time, with fio's start-up, stays in `client_wall_s`); its
//! own numbers go into the run's `tool_report`.

use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};

use crate::netpath::Side;
use crate::scenario::ToolSpec;
use crate::tools::{Ctx, Invocation, Programs};

/// fio's JSON report, in the run's log directory (never in the destination,
/// so it does not count as output; the scratch directory is recreated per run).
pub const REPORT_FILE: &str = "fio.json";

/// The job settings, the same for both jobs, and why:
/// - `direct=1`: O_DIRECT, so the page cache neither serves the reads nor
///   absorbs the writes; fio measures the device, not RAM (caches are
///   dropped before every run, but buffered writes would end in dirty
///   pages and fio would finish before the disk did).
/// - `ioengine=libaio`, `iodepth=16`: 16 requests in flight per job, enough
///   to keep a device at its sustained rate, as a mover with several
///   outstanding blocks does; synchronous I/O would measure latency.
/// - `bs=1M`: large sequential requests, the block sizes of a bulk copy.
///
/// Two jobs run at once (no `stonewall`): a copy reads the source and writes
/// the destination on the same disk at the same time, so the reference is
/// what the disk sustains for that mix, not for reads or writes alone.
pub const JOB_SETTINGS: [&str; 4] = ["--direct=1", "--ioengine=libaio", "--bs=1M", "--iodepth=16"];

/// fio separates file names with ':'; a literal one is written `\:`.
fn fio_path(p: &Path) -> String {
    p.display().to_string().replace(':', "\\:")
}

/// `fio` reading the data set's file and writing as many bytes into a new
/// file of the destination, both at once; no servers.
pub fn invocation(spec: &ToolSpec, progs: &Programs, ctx: &Ctx) -> Result<Invocation> {
    ensure!(!ctx.is_memory() && !ctx.ds.is_dir, "fio copies one file: data set {} is not a single file", ctx.ds.id);
    let src = ctx.src_root().join(&ctx.ds.entry);
    let dst = ctx.dest.join(&ctx.ds.entry);
    let size = format!("--size={}", ctx.ds.bytes);
    let mut client = vec![progs.fio.display().to_string(), "--output-format=json".into()];
    client.push(format!("--output={}", ctx.logs.join(REPORT_FILE).display()));
    client.extend(JOB_SETTINGS.map(String::from));
    // Before the first --name, so they apply to both jobs.
    client.extend(spec.extra_args.iter().cloned());
    for (job, file) in [("read", &src), ("write", &dst)] {
        client.extend([format!("--name={job}"), format!("--rw={job}")]);
        client.extend([format!("--filename={}", fio_path(file)), size.clone()]);
    }
    Ok(Invocation { servers: Vec::new(), client_side: Side::B, client })
}

/// The disk's time for the copy's I/O: the slower job's runtime, seconds.
pub fn disk_seconds(report: &Value) -> Option<f64> {
    let r = report["read_runtime_s"].as_f64()?;
    let w = report["write_runtime_s"].as_f64()?;
    Some(r.max(w)).filter(|t| *t > 0.0)
}

/// The numbers of fio's JSON report that matter here: each job's bytes,
/// bandwidth (bytes/s) and runtime; fails unless both jobs moved `bytes`.
pub fn report(text: &str, bytes: u64) -> Result<Value> {
    let json: Value = serde_json::from_str(text).context("fio output is not JSON")?;
    let jobs = json["jobs"].as_array().context("fio report has no jobs")?;
    let mut out = json!({ "version": json["fio version"] });
    for dir in ["read", "write"] {
        let job = jobs.iter().find(|j| j["jobname"] == dir).with_context(|| format!("fio report has no {dir} job"))?;
        if job["error"].as_i64().unwrap_or(0) != 0 {
            bail!("fio {dir} job failed with error {}", job["error"]);
        }
        let stats = &job[dir];
        let moved = stats["io_bytes"].as_u64().unwrap_or(0);
        ensure!(moved == bytes, "fio {dir} job moved {moved} of {bytes} bytes");
        out[format!("{dir}_bytes")] = stats["io_bytes"].clone();
        out[format!("{dir}_bytes_per_s")] = stats["bw_bytes"].clone();
        out[format!("{dir}_runtime_s")] = json!(stats["runtime"].as_f64().unwrap_or(0.0) / 1000.0);
    }
    Ok(out)
}

//! Runs a scenario: path up, data set ready, then for each repetition each
//! tool in turn (interleaved, the order rotated each repetition, so drift
//! hits every tool alike: [`run_order`]): clean the
//! destination, drop caches, start the servers, time the client, sample,
//! stop everything, check the output.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Context, Result};

use crate::cgroup::{Cgroups, Group, Usage};
use crate::dataset::{self, Dataset};
use crate::fio;
use crate::netpath::{NetPath, Side};
use crate::proc::{check_stop, run_quiet, Ending, Interrupted, Proc};
use crate::record::{EndRecord, RunRecord, ScenarioResult, ToolInfo};
use crate::sampler::{self, Trace};
use crate::scenario::{DatasetKind, PathKind, Scenario, ToolKind, ToolSpec, Verify};
use crate::scratchfs::ScratchFs;
use crate::tools::{self, Ctx, Invocation, Programs, SERVER_USER};
use crate::units::{fmt_rate, rfc3339};

/// What every run shares.
pub struct Env {
    pub progs: Programs,
    pub cache: PathBuf,
    pub out: PathBuf,
    pub cgroups: Cgroups,
    pub server_ids: (u32, u32),
}

/// Makes sure the unprivileged server user exists; returns (uid, gid).
pub fn ensure_server_user() -> Result<(u32, u32)> {
    let id = |flag: &str| run_quiet(Command::new("id").args([flag, SERVER_USER]));
    if id("-u").is_err() {
        run_quiet(Command::new("useradd").args([
            "-r",
            "-M",
            "-d",
            "/nonexistent",
            "-s",
            "/usr/sbin/nologin",
            SERVER_USER,
        ]))
        .context("cannot create the server user")?;
    }
    let parse = |s: String| s.trim().parse::<u32>().context("bad id output");
    Ok((parse(id("-u")?)?, parse(id("-g")?)?))
}

fn now_rfc3339() -> String {
    rfc3339(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()))
}

/// The 1-minute load average.
fn load_average() -> f64 {
    let text = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0.0)
}

/// Flushes dirty pages and drops the page cache; false when not allowed.
pub fn drop_caches() -> bool {
    rustix::fs::sync();
    fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

/// Runs every repetition of every tool of one scenario. When a run stops
/// with an error (Ctrl-C), the runs so far come back in a [`PartialScenario`].
pub fn run_scenario(env: &Env, sc: &Scenario, tools: &[&ToolSpec]) -> Result<ScenarioResult> {
    let ds = dataset::prepare(&sc.dataset, &env.cache)?;
    let mut res = empty_result(sc, &ds);
    res.tools = tools
        .iter()
        .map(|t| ToolInfo { label: t.label(), tool: t.tool, version: tools::version(t, &env.progs) })
        .collect();
    let path = match NetPath::start(&sc.path) {
        Ok(p) => p,
        Err(e) => {
            let msg = format!("path setup failed: {e:#}");
            eprintln!("bench: {}: {msg}", sc.name);
            res.runs = failed_runs(sc, tools, &ds, &msg);
            res.error = Some(msg);
            return Ok(res);
        }
    };
    res.counted_interfaces = path.counted_ifaces().to_vec();
    res.path_settings.insert("A".into(), path.settings(Side::A));
    if path.ns(Side::A) != path.ns(Side::B) {
        res.path_settings.insert("B".into(), path.settings(Side::B));
    }
    let scratch = ScratchFs::new(&env.cache.join("scratch"), ds.bytes, ds.files);
    for slot in schedule(sc, tools.len()) {
        if first_visit(sc, slot) {
            // Each tool's first run is a first visit, not only the first
            // tool's: the lightpath rows share one server address.
            forget_client_state(&env.cache)?;
            path.forget_tcp_metrics();
        }
        match run_once(env, sc, &path, &scratch, &ds, tools[slot.tool], slot) {
            Ok(rec) => {
                report_progress(sc, &rec);
                res.runs.push(rec);
            }
            Err(e) => {
                res.error = Some(format!("stopped after {} runs: {e:#}", res.runs.len()));
                return Err(PartialScenario { result: Box::new(res), cause: e }.into());
            }
        }
    }
    Ok(res)
}

/// What a lightpath client keeps between runs, in the bench's cache: its
/// book of servers met (`LIGHTPATH_PEERS`; data connections opened ahead
/// from the second visit on) and its state (`XDG_STATE_HOME`: notes of
/// uploads kept for `cp --partial`).
fn client_state(cache: &Path) -> [PathBuf; 2] {
    [cache.join("lightpath-peers"), cache.join("lightpath-state")]
}

/// Clears [`client_state`] before each tool's first run (with the
/// namespaces' TCP Fast Open cookies and route metrics,
/// [`NetPath::forget_tcp_metrics`]), so that its first run is a first
/// visit whatever ran before.
fn forget_client_state(cache: &Path) -> Result<()> {
    for p in client_state(cache) {
        let gone = match fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => fs::remove_dir_all(&p),
            Ok(_) => fs::remove_file(&p),
            Err(_) => Ok(()),
        };
        gone.with_context(|| format!("cannot remove {}", p.display()))?;
    }
    Ok(())
}

/// One run to do: which tool, which repetition (from 1), warm-up or counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub tool: usize,
    pub rep: u32,
    pub warmup: bool,
}

/// Every run of a scenario of `n` tools in order: the warm-up rounds
/// (each tool `sc.warmup` times), then the measured repetitions, each
/// round in its [`run_order`]. Caches are dropped before each alike.
pub fn schedule(sc: &Scenario, n: usize) -> Vec<Slot> {
    let round = |rep: u32, warmup: bool| run_order(n, rep).into_iter().map(move |tool| Slot { tool, rep, warmup });
    let warm = (1..=sc.warmup).flat_map(|w| round(w, true));
    warm.chain((1..=sc.repetitions).flat_map(|r| round(r, false))).collect()
}

/// The order of the `n` tools in repetition `rep` (from 1): rotated by one
/// each repetition, the first repetition in the listed order, so that no
/// tool always runs first in a round. It is not balanced: rounds run back
/// to back, so each tool mostly follows the same neighbour, and with fewer
/// repetitions than tools some never start a round (a Williams square
/// would balance neighbours; not done).
pub fn run_order(n: usize, rep: u32) -> Vec<usize> {
    let start = (rep as usize).saturating_sub(1) % n.max(1);
    (0..n).map(|i| (start + i) % n).collect()
}

/// Whether `slot` is its tool's first run in the scenario: its first
/// warm-up run, or without warm-up its first measured run.
fn first_visit(sc: &Scenario, slot: Slot) -> bool {
    slot.rep == 1 && (slot.warmup || sc.warmup == 0)
}

/// A scenario that stopped early (Ctrl-C): what it ran, and why it stopped.
#[derive(Debug)]
pub struct PartialScenario {
    pub result: Box<ScenarioResult>,
    pub cause: anyhow::Error,
}

impl std::fmt::Display for PartialScenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.cause)
    }
}
impl std::error::Error for PartialScenario {}

fn empty_result(sc: &Scenario, ds: &Dataset) -> ScenarioResult {
    let wire_time_s = match (sc.path.kind, sc.path.rate) {
        (PathKind::Emulated, Some(r)) => Some(ds.bytes as f64 * 8.0 / r.0 as f64),
        _ => None,
    };
    ScenarioResult {
        name: sc.name.clone(),
        scenario: sc.clone(),
        path: sc.path.describe(),
        path_settings: Default::default(),
        counted_interfaces: Vec::new(),
        dataset: ds.id.clone(),
        dataset_files: ds.files,
        dataset_bytes: ds.bytes,
        wire_time_s,
        tools: Vec::new(),
        runs: Vec::new(),
        error: None,
    }
}

fn failed_runs(sc: &Scenario, tools: &[&ToolSpec], ds: &Dataset, msg: &str) -> Vec<RunRecord> {
    let record = |slot: Slot| {
        let mut r = base_record(sc, tools[slot.tool], ds, slot);
        r.error = Some(msg.to_string());
        r
    };
    schedule(sc, tools.len()).into_iter().map(record).collect()
}

fn base_record(sc: &Scenario, spec: &ToolSpec, ds: &Dataset, slot: Slot) -> RunRecord {
    RunRecord {
        scenario: sc.name.clone(),
        label: spec.label(),
        tool: Some(spec.tool),
        repetition: slot.rep,
        warmup: slot.warmup,
        started: now_rfc3339(),
        payload_bytes: ds.bytes,
        verified: "no".into(),
        ..Default::default()
    }
}

fn report_progress(sc: &Scenario, r: &RunRecord) {
    let what = if r.ok {
        format!("{:.2} s, {}", r.ttc_s, fmt_rate(r.goodput_bps))
    } else {
        format!("FAILED: {}", r.error.as_deref().unwrap_or("?"))
    };
    let what = match &r.fault {
        Some(f) => format!("{what} ({f})"),
        None => what,
    };
    let (kind, of) = if r.warmup { ("warm-up", sc.warmup) } else { ("run", sc.repetitions) };
    eprintln!("bench: {} | {} | {kind} {}/{of}: {what}", sc.name, r.label, r.repetition);
}

/// Fresh, empty destination and log directories.
fn prepare_scratch(env: &Env, scratch: &ScratchFs) -> Result<(PathBuf, PathBuf)> {
    let root = scratch.reset()?;
    let (dest, logs) = (root.join("dest"), root.join("logs"));
    fs::create_dir_all(&dest)?;
    fs::create_dir_all(&logs)?;
    fs::set_permissions(root, fs::Permissions::from_mode(0o755))?;
    fs::set_permissions(&logs, fs::Permissions::from_mode(0o777))?;
    std::os::unix::fs::chown(&dest, Some(env.server_ids.0), Some(env.server_ids.1))?;
    Ok((dest, logs))
}

/// One repetition; every failure except an interruption becomes a failed record.
fn run_once(
    env: &Env,
    sc: &Scenario,
    path: &NetPath,
    scratch: &ScratchFs,
    ds: &Dataset,
    spec: &ToolSpec,
    slot: Slot,
) -> Result<RunRecord> {
    check_stop()?;
    let mut rec = base_record(sc, spec, ds, slot);
    let (dest, logs) = prepare_scratch(env, scratch)?;
    rec.dest_fs = scratch.describe();
    rec.caches_dropped = drop_caches();
    rec.load_before = load_average();
    let ctx = Ctx { mode: sc.mode, ds, a: path.addr(Side::A), b: path.addr(Side::B), dest: &dest, logs: &logs };
    let cpu0 = sampler::self_cpu_s();
    let outcome =
        tools::invocation(spec, &env.progs, &ctx).and_then(|inv| execute(env, sc, path, &inv, &logs, &mut rec));
    rec.harness_cpu_s = sampler::self_cpu_s() - cpu0;
    match outcome {
        Err(e) if e.is::<Interrupted>() => return Err(e),
        Err(e) => rec.error = Some(format!("{e:#}")),
        Ok(()) => check_output(sc, spec, ds, &dest, &mut rec),
    }
    rec.ok = rec.error.is_none();
    if !rec.ok {
        rec.stderr_tail = log_tail(&logs.join("client"));
        keep_logs(env, &rec, &logs);
    }
    Ok(rec)
}

fn check_output(sc: &Scenario, spec: &ToolSpec, ds: &Dataset, dest: &Path, rec: &mut RunRecord) {
    if rec.error.is_some() {
        return;
    }
    rec.verified = if spec.tool == ToolKind::Iperf3 {
        "n/a (iperf3 moves no files)".into()
    } else if spec.tool == ToolKind::Fio {
        "n/a (fio measures the disk)".into()
    } else if ds.kind == DatasetKind::Memory {
        match wire_check(rec) {
            Ok(()) => "wire bytes".into(),
            Err(e) => {
                rec.error = Some(format!("output check failed: {e}"));
                "failed".into()
            }
        }
    } else if sc.verify == Verify::None {
        "none".into()
    } else {
        let full = sc.verify == Verify::Full;
        match dataset::verify(ds, dest, full) {
            Ok(()) => if full { "full" } else { "size" }.into(),
            Err(e) => {
                rec.error = Some(format!("output check failed: {e:#}"));
                "failed".into()
            }
        }
    };
}

/// A memory-to-memory run leaves no copy to check: at least the payload
/// must have crossed the counted interfaces in the data direction (a
/// client that exits 0 having sent less moved less than it was asked to).
fn wire_check(rec: &RunRecord) -> Result<(), String> {
    if rec.wire_bytes >= rec.payload_bytes {
        return Ok(());
    }
    Err(format!(
        "{} bytes on the wire in the data direction, fewer than the {} asked for",
        rec.wire_bytes, rec.payload_bytes
    ))
}

/// A started server with its accounting group.
struct Running {
    role: String,
    side: Side,
    argv: Vec<String>,
    port: u16,
    proc: Proc,
    group: Group,
    /// The group's usage as the client starts: the server's start-up.
    startup: Usage,
}

fn start_server(env: &Env, path: &NetPath, s: &tools::ServerCmd, logs: &Path) -> Result<Running> {
    let group = env.cgroups.group(&s.role)?;
    let mut cmd = path.command(s.side, &group, &s.argv[0]);
    cmd.args(&s.argv[1..]).envs(s.env.iter().map(|(k, v)| (k, v)));
    let mut proc = Proc::spawn(&s.role, cmd, Some(&logs.join(&s.role)))?;
    path.wait_listen(s.side, s.port, Duration::from_secs(15), &mut proc)?;
    let (role, argv, startup) = (s.role.clone(), s.argv.clone(), Usage::default());
    Ok(Running { role, side: s.side, argv, port: s.port, proc, group, startup })
}

fn execute(env: &Env, sc: &Scenario, path: &NetPath, inv: &Invocation, logs: &Path, rec: &mut RunRecord) -> Result<()> {
    let mut running = Vec::new();
    for s in &inv.servers {
        running.push(start_server(env, path, s, logs)?);
    }
    let group = env.cgroups.group("client")?;
    let lightpath = rec.tool == Some(ToolKind::Lightpath);
    let client = || {
        let mut cmd = path.command(inv.client_side, &group, &inv.client[0]);
        cmd.args(&inv.client[1..]);
        if lightpath {
            cmd.env("LIGHTPATH_LOG", LIGHTPATH_CLIENT_LOG);
        }
        // lightpath's book of servers met (data connections opened ahead
        // from the second visit on) and its notes of uploads kept for
        // `cp --partial` live with the bench's cache, not in ~root.
        let [peers, state] = client_state(&env.cache);
        cmd.env("LIGHTPATH_PEERS", peers);
        cmd.env("XDG_STATE_HOME", state);
        cmd
    };
    running.iter_mut().for_each(|r| r.startup = r.group.usage());
    let groups: Vec<&Group> = std::iter::once(&group).chain(running.iter().map(|r| &r.group)).collect();
    let stop = AtomicBool::new(false);
    let reader = path.counter_reader();
    let emu0 = path.emu_snapshot();
    let base = reader.read()?;
    let t0 = Instant::now();
    let (waited, trace) = std::thread::scope(|scope| {
        let sampler = scope.spawn(|| sampler::run(&reader, &groups, t0, base, &stop));
        let stop_ref = &stop;
        let kill = sc.fault.as_ref().and_then(|f| f.kill_stream_after).zip(running.first());
        let fault = kill.map(|(after, srv)| {
            let pids = || srv.group.pids();
            let ns = path.ns(srv.side);
            scope.spawn(move || crate::fault::kill_stream(ns, &pids, srv.port, after.0, t0, stop_ref))
        });
        let (waited, mut said) = run_client(sc, &client, logs, t0);
        stop.store(true, Ordering::SeqCst);
        said.extend(fault.and_then(|f| f.join().ok()));
        rec.fault = (!said.is_empty()).then(|| said.join("; "));
        (waited, sampler.join().unwrap_or_default())
    });
    rec.emulator = emu0.zip(path.emu_snapshot()).map(|(b, a)| crate::wanlab::delta(&b, &a));
    for r in &mut running {
        r.proc.kill();
        r.group.kill_all();
    }
    record_ends(rec, inv, &group, &running, &trace);
    let (ending, ttc) = waited?;
    finish_timing(rec, ending, ttc, &trace, sc.timeout.0)?;
    reference_numbers(rec, logs)
}

/// Run the client (`client` makes its command) to its end, interrupted
/// and run again if the scenario's fault says so: how it ended, with the
/// time from `t0`, and what the fault did.
fn run_client(
    sc: &Scenario,
    client: &dyn Fn() -> Command,
    logs: &Path,
    t0: Instant,
) -> (Result<(Ending, Duration)>, Vec<String>) {
    match sc.fault.as_ref().and_then(|f| f.interrupt_after) {
        Some(after) => match crate::fault::interrupted_run(client, logs, after.0, sc.timeout.0, t0) {
            Ok((waited, said)) => (Ok(waited), vec![said]),
            Err(e) => (Err(e), Vec::new()),
        },
        None => {
            let waited = Proc::spawn("client", client(), Some(&logs.join("client")));
            (waited.and_then(|mut p| p.wait_timeout(sc.timeout.0)), Vec::new())
        }
    }
}

/// The tools' own reports: iperf3's sets its TTC; fio's, and what lightpath
/// said of a tree it rebuilt, are only recorded.
fn reference_numbers(rec: &mut RunRecord, logs: &Path) -> Result<()> {
    match rec.tool {
        Some(ToolKind::Lightpath) => {
            rec.tool_report = fs::read_to_string(logs.join("client.err")).ok().and_then(|e| tree_report(&e));
            Ok(())
        }
        Some(ToolKind::Iperf3) => iperf3_timing(rec, &logs.join("client.out")),
        Some(ToolKind::Fio) => {
            let text = fs::read_to_string(logs.join(fio::REPORT_FILE)).context("fio wrote no report")?;
            let report = fio::report(&text, rec.payload_bytes)?;
            // The disk's time: the slower job's runtime (fio's start-up and
            // file set-up, 0.5-0.75 s at 3 GiB here, are not the disk's).
            let secs = fio::disk_seconds(&report).ok_or_else(|| anyhow!("fio reported no runtime"))?;
            rec.ttc_s = secs;
            rec.goodput_bps = rec.payload_bytes as f64 * 8.0 / secs;
            rec.tool_report = Some(report);
            Ok(())
        }
        _ => Ok(()),
    }
}

/// lightpath's client log filter in runs: its warnings as usual, and the
/// one `tree rebuilt` line a tree download ends with ([`tree_report`]).
const LIGHTPATH_CLIENT_LOG: &str = "warn,lightpath_client::vfile=info";

/// What a lightpath client said of the tree it rebuilt (the last `tree
/// rebuilt` line of its stderr): the most data it held at once ahead of
/// the manifest entries that place it (`parked_peak`; over 512 MiB a try
/// fails), and manifest bytes that came twice. `None` for runs that
/// rebuilt no tree.
fn tree_report(stderr: &str) -> Option<serde_json::Value> {
    let line = stderr.lines().rfind(|l| l.contains("tree rebuilt"))?;
    let field = |name: &str| -> Option<u64> {
        let at = line.find(&format!(" {name}: "))? + name.len() + 3;
        line[at..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    };
    let tree = serde_json::json!({
        "files": field("files"),
        "parked_peak": field("parked_peak")?,
        "manifest_repeated": field("manifest_repeated"),
    });
    Some(serde_json::json!({ "tree": tree }))
}

/// iperf3 `-n` exits once the sender has handed the bytes to its kernel and
/// the receiver has counted what arrived by then; with large socket buffers
/// that is well before the last byte lands. So its TTC is the data set at
/// the receiver-side rate iperf3 reports.
fn iperf3_timing(rec: &mut RunRecord, json_path: &Path) -> Result<()> {
    let text = fs::read_to_string(json_path).context("no iperf3 output")?;
    let json: serde_json::Value = serde_json::from_str(&text).context("iperf3 output is not JSON")?;
    let end = &json["end"];
    let recv_bps = end["sum_received"]["bits_per_second"].as_f64();
    let report = serde_json::json!({
        "received_bytes": end["sum_received"]["bytes"],
        "received_seconds": end["sum_received"]["seconds"],
        "received_bps": end["sum_received"]["bits_per_second"],
        "sent_bytes": end["sum_sent"]["bytes"],
        "sent_bps": end["sum_sent"]["bits_per_second"],
        "retransmits": end["sum_sent"]["retransmits"],
    });
    rec.tool_report = Some(report);
    // A run of a few MB over loopback can end (well under 1 ms) before the
    // receiver has counted anything: iperf3 then reports 0 received. When
    // every byte was sent, the sender's rate is the only figure it gives.
    let sent_all = end["sum_sent"]["bytes"].as_u64().is_some_and(|b| b >= rec.payload_bytes);
    let send_bps = end["sum_sent"]["bits_per_second"].as_f64().filter(|_| sent_all);
    let bps = recv_bps.filter(|b| *b > 0.0).or(send_bps).filter(|b| *b > 0.0);
    let bps = bps.ok_or_else(|| anyhow!("iperf3 reported no received rate"))?;
    rec.goodput_bps = bps;
    rec.ttc_s = rec.payload_bytes as f64 * 8.0 / bps;
    Ok(())
}

fn record_ends(rec: &mut RunRecord, inv: &Invocation, client: &Group, running: &[Running], trace: &Trace) {
    let side = |s: Side| if s == Side::A { "A" } else { "B" }.to_string();
    rec.ends.push(EndRecord {
        role: "client".into(),
        side: side(inv.client_side),
        command: inv.client.clone(),
        usage: client.usage(),
        startup_cpu_s: None,
        peak_rss_bytes: trace.peak_rss.first().copied().unwrap_or(0),
    });
    for (i, r) in running.iter().enumerate() {
        rec.ends.push(EndRecord {
            role: r.role.clone(),
            side: side(r.side),
            command: r.argv.clone(),
            usage: r.group.usage().since(&r.startup),
            startup_cpu_s: r.startup.cpu_s,
            peak_rss_bytes: trace.peak_rss.get(i + 1).copied().unwrap_or(0),
        });
    }
}

fn finish_timing(rec: &mut RunRecord, ending: Ending, ttc: Duration, trace: &Trace, limit: Duration) -> Result<()> {
    rec.ttc_s = ttc.as_secs_f64();
    rec.client_wall_s = rec.ttc_s;
    rec.samples = trace.samples.clone();
    rec.wire_bytes = trace.samples.last().map_or(0, |s| s.1);
    match ending {
        Ending::Exited(Some(0)) => {
            rec.exit_code = Some(0);
            rec.goodput_bps = rec.payload_bytes as f64 * 8.0 / rec.ttc_s;
            Ok(())
        }
        Ending::Exited(code) => {
            rec.exit_code = code;
            Err(anyhow!("client exited with {}", code.map_or("a signal".into(), |c| format!("code {c}"))))
        }
        Ending::TimedOut => Err(anyhow!("timed out after {limit:?}")),
    }
}

fn log_tail(base: &Path) -> String {
    let mut text = String::new();
    for ext in ["err", "out"] {
        let t = fs::read_to_string(base.with_extension(ext)).unwrap_or_default();
        text += t.trim();
        text.push('\n');
    }
    let t = text.trim();
    let start = t.char_indices().rev().nth(1500).map_or(0, |(i, _)| i);
    t[start..].to_string()
}

/// Copies the logs of a failed run into the results.
fn keep_logs(env: &Env, rec: &RunRecord, logs: &Path) {
    let slug: String = rec.label.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let run = if rec.warmup { "warmup" } else { "run" };
    let dir = env.out.join("logs").join(&rec.scenario).join(format!("{slug}-{run}{}", rec.repetition));
    if fs::create_dir_all(&dir).is_err() {
        return;
    }
    for e in fs::read_dir(logs).into_iter().flatten().flatten() {
        let _ = fs::copy(e.path(), dir.join(e.file_name()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `iperf3_timing` of a JSON report with these `end` sums, for 8 MB.
    fn timing(received: (u64, f64), sent: (u64, f64)) -> Result<RunRecord> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("client.out");
        let end = serde_json::json!({ "end": {
            "sum_received": { "bytes": received.0, "seconds": 0.003, "bits_per_second": received.1 },
            "sum_sent": { "bytes": sent.0, "bits_per_second": sent.1, "retransmits": 0 },
        }});
        fs::write(&path, end.to_string())?;
        let mut rec = RunRecord { payload_bytes: 8_000_000, ..Default::default() };
        iperf3_timing(&mut rec, &path)?;
        Ok(rec)
    }

    #[test]
    fn each_repetition_starts_at_the_next_tool() {
        assert_eq!(run_order(3, 1), [0, 1, 2], "the first repetition in the listed order");
        assert_eq!(run_order(3, 2), [1, 2, 0]);
        assert_eq!(run_order(3, 3), [2, 0, 1]);
        assert_eq!(run_order(3, 4), [0, 1, 2]);
        assert_eq!(run_order(1, 5), [0]);
        assert!(run_order(0, 1).is_empty());
    }

    #[test]
    fn warm_up_rounds_come_first_and_every_round_is_rotated() {
        let text = "repetitions = 2\nwarmup = 1\n[path]\nkind = \"loopback\"\n[dataset]\nkind = \"memory\"\n\
            [[tool]]\ntool = \"iperf3\"\n[[tool]]\ntool = \"lightpath\"\n";
        let mut sc = Scenario::parse(text, Path::new("s.toml")).unwrap();
        let slots: Vec<(usize, u32, bool)> = schedule(&sc, 2).iter().map(|s| (s.tool, s.rep, s.warmup)).collect();
        assert_eq!(slots, [(0, 1, true), (1, 1, true), (0, 1, false), (1, 1, false), (1, 2, false), (0, 2, false)]);
        let firsts = |sc: &Scenario| schedule(sc, 2).into_iter().filter(|s| first_visit(sc, *s)).collect::<Vec<_>>();
        let want = |warmup| vec![Slot { tool: 0, rep: 1, warmup }, Slot { tool: 1, rep: 1, warmup }];
        assert_eq!(firsts(&sc), want(true), "each tool's state is forgotten before its warm-up");
        sc.warmup = 0;
        assert!(schedule(&sc, 2).iter().all(|s| !s.warmup), "warmup = 0: measured runs only");
        assert_eq!(firsts(&sc), want(false), "or before its first measured run");
        assert_eq!(schedule(&sc, 2).len(), 4);
    }

    #[test]
    fn a_scenario_starts_with_no_client_state() {
        let cache = tempfile::tempdir().unwrap();
        let [peers, state] = client_state(cache.path());
        fs::write(&peers, "127.0.0.1:2911 dcon=2912\n").unwrap();
        fs::create_dir_all(state.join("lightpath")).unwrap();
        fs::write(state.join("lightpath/partial"), "x").unwrap();
        forget_client_state(cache.path()).unwrap();
        assert!(!peers.exists() && !state.exists());
        forget_client_state(cache.path()).expect("nothing to forget is fine");
    }

    #[test]
    fn a_memory_run_must_put_its_payload_on_the_wire() {
        let text = "[path]\nkind = \"loopback\"\n[dataset]\nkind = \"memory\"\nsize = \"1M\"\n\
            [[tool]]\ntool = \"lightpath\"\n";
        let sc = Scenario::parse(text, Path::new("m.toml")).unwrap();
        let ds = Dataset {
            kind: DatasetKind::Memory,
            id: "memory".into(),
            root: None,
            entry: "dev/zero".into(),
            is_dir: false,
            files: 0,
            bytes: 1_000_000,
            manifest: Default::default(),
        };
        let check = |wire_bytes: u64| {
            let mut rec = RunRecord { payload_bytes: ds.bytes, wire_bytes, ..Default::default() };
            check_output(&sc, &sc.tools[0], &ds, Path::new("/nonexistent"), &mut rec);
            (rec.verified, rec.error)
        };
        assert_eq!(check(1_040_000), ("wire bytes".to_string(), None));
        let (verified, error) = check(999_999);
        assert_eq!(verified, "failed");
        assert!(error.unwrap().contains("999999 bytes on the wire"), "a short run fails");
    }

    #[test]
    fn a_tree_download_reports_what_it_parked() {
        let err = "2026-11-28T10:00:00Z  WARN lightpath_client: slow\n\
            2026-11-28T10:00:09Z  INFO lightpath_client::vfile: tree rebuilt stats=UnpackStats { files: 5000, \
            dirs: 417, symlinks: 0, hardlinks: 0, bytes: 480000000, parked_peak: 75497472, manifest_repeated: 12 }\n";
        let r = tree_report(err).unwrap();
        assert_eq!(r["tree"]["parked_peak"], 75_497_472);
        assert_eq!((r["tree"]["files"].as_u64(), r["tree"]["manifest_repeated"].as_u64()), (Some(5000), Some(12)));
        assert_eq!(tree_report("lightpath: 1 file(s) copied"), None, "no tree, no report");
    }

    #[test]
    fn iperf3_time_comes_from_the_receivers_rate() {
        let rec = timing((8_000_000, 4e9), (8_126_464, 8e9)).unwrap();
        assert_eq!(rec.goodput_bps, 4e9);
        assert_eq!(rec.ttc_s, 0.016);
    }

    #[test]
    fn a_run_over_before_the_receiver_counted_takes_the_senders_rate() {
        let rec = timing((0, 0.0), (8_126_464, 1e11)).unwrap();
        assert_eq!(rec.goodput_bps, 1e11);
    }

    #[test]
    fn nothing_received_of_a_short_send_is_a_failed_run() {
        let e = timing((0, 0.0), (4_000_000, 1e11)).unwrap_err();
        assert!(e.to_string().contains("no received rate"), "{e}");
    }
}

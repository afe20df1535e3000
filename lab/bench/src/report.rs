//! The markdown summary: one table per scenario, medians with min-max,
//! ratios to the wire time and to the best transfer tool, and, where fio ran,
//! each transfer tool's share of what the disk sustains. Failed runs are
//! counted and their errors listed; a tool whose runs all failed keeps its row.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::record::{Results, RunRecord, ScenarioResult};
use crate::scenario::ToolKind;
use crate::stats::{summarize, Summary};
use crate::units::fmt_bytes;

/// The statistics of one tool configuration in one scenario.
#[derive(Clone, Debug)]
pub struct Row {
    pub label: String,
    pub tool: Option<ToolKind>,
    pub total: usize,
    pub ok: usize,
    pub ttc: Option<Summary>,
    pub goodput: Option<Summary>,
    pub client_cpu: Option<f64>,
    pub server_cpu: Option<f64>,
    /// CPU seconds of both ends per GB (10^9 bytes) moved, median of the runs.
    pub cpu_per_gb: Option<f64>,
    pub client_rss: Option<f64>,
    pub server_rss: Option<f64>,
    /// The TTC of the tool's first warm-up run (`Some(None)`: it failed;
    /// `None`: no warm-up ran). Not in any statistic.
    pub first_run: Option<Option<f64>>,
    pub errors: Vec<String>,
}

/// Both ends' CPU seconds per GB (10^9 bytes) of payload in one run.
fn cpu_per_gb(r: &RunRecord) -> Option<f64> {
    let both = r.end("client")?.usage.cpu_s? + r.server_cpu_s()?;
    (r.payload_bytes > 0).then(|| both / (r.payload_bytes as f64 / 1e9))
}

fn med(values: Vec<f64>) -> Option<f64> {
    summarize(&values).map(|s| s.median)
}

/// Rows in the order the tools were listed.
pub fn rows(sc: &ScenarioResult) -> Vec<Row> {
    let mut order: Vec<String> = Vec::new();
    let mut by_label: BTreeMap<String, Vec<&RunRecord>> = BTreeMap::new();
    for r in &sc.runs {
        if !order.contains(&r.label) {
            order.push(r.label.clone());
        }
        by_label.entry(r.label.clone()).or_default().push(r);
    }
    order.iter().map(|l| row(l, &by_label[l])).collect()
}

fn row(label: &str, all: &[&RunRecord]) -> Row {
    let first = all.iter().find(|r| r.warmup && r.repetition == 1);
    let runs: Vec<&RunRecord> = all.iter().copied().filter(|r| !r.warmup).collect();
    let ok: Vec<&RunRecord> = runs.iter().copied().filter(|r| r.ok).collect();
    let mut errors: Vec<String> = all.iter().filter_map(|r| failure(r)).collect();
    errors.sort();
    errors.dedup();
    Row {
        label: label.to_string(),
        tool: runs.first().and_then(|r| r.tool),
        total: runs.len(),
        ok: ok.len(),
        ttc: summarize(&ok.iter().map(|r| r.ttc_s).collect::<Vec<_>>()),
        goodput: summarize(&ok.iter().map(|r| r.goodput_bps).collect::<Vec<_>>()),
        client_cpu: med(ok.iter().filter_map(|r| r.end("client")?.usage.cpu_s).collect()),
        server_cpu: med(ok.iter().filter_map(|r| r.server_cpu_s()).collect()),
        cpu_per_gb: med(ok.iter().filter_map(|r| cpu_per_gb(r)).collect()),
        client_rss: med(ok.iter().filter_map(|r| Some(r.end("client")?.peak_rss_bytes as f64)).collect()),
        server_rss: med(ok.iter().filter_map(|r| r.server_peak_rss().map(|b| b as f64)).collect()),
        first_run: first.map(|r| r.ok.then_some(r.ttc_s)),
        errors,
    }
}

/// The reference time for "× wire": the path's rate, or iperf3 on loopback.
pub fn wire_time(sc: &ScenarioResult, rows: &[Row]) -> Option<(f64, &'static str)> {
    if let Some(w) = sc.wire_time_s {
        return Some((w, "rate"));
    }
    let iperf = rows.iter().filter(|r| r.tool == Some(ToolKind::Iperf3)).filter_map(|r| r.ttc).map(|s| s.median);
    iperf.reduce(f64::min).map(|t| (t, "iperf3"))
}

/// The lowest median TTC among the transfer tools (the references, iperf3
/// and fio, excluded) whose runs mostly succeeded: a tool that failed half
/// its runs or more cannot be the best on the strength of the rest.
pub fn best_transfer(rows: &[Row]) -> Option<f64> {
    rows.iter()
        .filter(|r| !r.tool.is_some_and(ToolKind::is_reference) && mostly_ok(r))
        .filter_map(|r| r.ttc.map(|s| s.median))
        .reduce(f64::min)
}

/// More than half of the row's runs succeeded.
fn mostly_ok(r: &Row) -> bool {
    2 * r.ok > r.total
}

/// The reference time for "% of disk": the fio median TTC (the lowest, if
/// several fio rows ran); `None` without a successful fio run.
pub fn disk_time(rows: &[Row]) -> Option<f64> {
    let fio = rows.iter().filter(|r| r.tool == Some(ToolKind::Fio)).filter_map(|r| r.ttc).map(|s| s.median);
    fio.reduce(f64::min)
}

/// A tool's share of what the disk sustains: the disk's time for the data
/// set (fio median TTC) over the tool's median TTC, in percent (100 = as fast
/// as the disk's read-and-write reference).
pub fn percent_of_disk(disk_ttc: f64, tool_ttc: f64) -> f64 {
    disk_ttc / tool_ttc * 100.0
}

/// The times a row is compared with, and whether the table has a
/// `first run` column (some tool had a warm-up run).
struct Refs {
    wire: Option<f64>,
    best: Option<f64>,
    disk: Option<f64>,
    first_run: bool,
}

/// `941 Mbit/s (902–950)`: the range in the median's unit.
fn rate_range(g: &Summary) -> String {
    let (div, unit) = if g.median >= 1e9 { (1e9, "Gbit/s") } else { (1e6, "Mbit/s") };
    let digits = if div == 1e9 { 2 } else { 0 };
    format!("{:.d$} {unit} ({:.d$}–{:.d$})", g.median / div, g.min / div, g.max / div, d = digits)
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or("—".into(), f)
}

fn mib(v: f64) -> String {
    format!("{:.0}", v / 1048576.0)
}

/// The machine's 1-minute load average before the runs: `median (min–max)`.
fn load_range(sc: &ScenarioResult) -> String {
    let loads: Vec<f64> = sc.runs.iter().filter(|r| !r.warmup).map(|r| r.load_before).collect();
    summarize(&loads).map_or("—".into(), |l| format!("{:.1} ({:.1}–{:.1})", l.median, l.min, l.max))
}

/// One scenario's table.
pub fn scenario_table(sc: &ScenarioResult) -> String {
    let rows = rows(sc);
    let wire = wire_time(sc, &rows);
    let first_run = rows.iter().any(|r| r.first_run.is_some());
    let refs = Refs { wire: wire.map(|w| w.0), best: best_transfer(&rows), disk: disk_time(&rows), first_run };
    let mut out = scenario_header(sc, wire, refs.disk);
    if let Some(e) = &sc.error {
        let _ = writeln!(out, "**scenario error:** {e}\n");
    }
    let disk_col = if refs.disk.is_some() { " % of disk |" } else { "" };
    let first_col = if refs.first_run { " first run s |" } else { "" };
    let _ = writeln!(
        out,
        "| tool | ok | TTC median s (min–max) |{first_col} goodput median (min–max) | × wire | × best |{disk_col} CPU s client / server | CPU s per GB, both ends | peak PSS MiB client / server |"
    );
    let columns = 9 + usize::from(refs.disk.is_some()) + usize::from(refs.first_run);
    let _ = writeln!(out, "|{}", "---|".repeat(columns));
    for r in &rows {
        out += &table_row(r, &refs);
    }
    for r in rows.iter().filter(|r| !r.errors.is_empty()) {
        for e in &r.errors {
            let _ = writeln!(out, "\n- {} failed: {}", r.label, e.replace('\n', " "));
        }
    }
    out += &fault_line(sc);
    out += &emulator_lag(sc);
    out += &parked_line(sc);
    out += &caches_line(sc);
    out
}

/// The runs before which the page cache could not be dropped (no right to
/// write `/proc/sys/vm/drop_caches`): their reads may have come from
/// memory, which the legend says never happens.
fn caches_line(sc: &ScenarioResult) -> String {
    let kept: Vec<&str> = sc.runs.iter().filter(|r| !r.caches_dropped).map(|r| r.label.as_str()).collect();
    if kept.is_empty() {
        return String::new();
    }
    format!(
        "\n- **caches not dropped** before {} run(s) ({}): their reads may have come from memory\n",
        kept.len(),
        kept.join(", ")
    )
}

/// Per lightpath setting that downloaded a tree: the most data a run held
/// at once ahead of its manifest entries (`parked_peak` in the run's
/// `tool_report`), median and range over the runs that said.
fn parked_line(sc: &ScenarioResult) -> String {
    let mut by: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for r in sc.runs.iter().filter(|r| !r.warmup) {
        if let Some(p) = r.tool_report.as_ref().and_then(|t| t["tree"]["parked_peak"].as_u64()) {
            by.entry(&r.label).or_default().push(p);
        }
    }
    let parts: Vec<String> = by
        .into_iter()
        .filter_map(|(label, v)| {
            let mb: Vec<f64> = v.iter().map(|&b| b as f64 / 1e6).collect();
            let s = summarize(&mb)?;
            Some(format!("{label} {:.0} MB ({:.0}–{:.0}, {} runs)", s.median, s.min, s.max, s.n))
        })
        .collect();
    if parts.is_empty() {
        return String::new();
    }
    format!("\n- most data parked ahead of its manifest entries, per run (median): {}\n", parts.join("; "))
}

/// Why run `r` failed, with the last line the tool wrote to stderr (what
/// it said about it); `None` if it did not fail.
fn failure(r: &RunRecord) -> Option<String> {
    let e = r.error.as_ref()?;
    match r.stderr_tail.lines().rev().map(str::trim).find(|l| !l.is_empty()) {
        Some(last) => Some(format!("{e} (its last words: `{last}`)")),
        None => Some(e.clone()),
    }
}

/// The scenario's injected fault, said once under its table.
fn fault_line(sc: &ScenarioResult) -> String {
    match &sc.scenario.fault {
        Some(f) => format!("\n- fault in every run: {}\n", f.describe()),
        None => String::new(),
    }
}

/// A line naming the runs in which the emulator fell behind (packets more
/// than 1 ms late): those runs saw a worse path than the scenario's.
fn emulator_lag(sc: &ScenarioResult) -> String {
    let lagged: Vec<String> = sc
        .runs
        .iter()
        .filter_map(|r| {
            let n = r.emulator.as_ref()?.late_over_1ms;
            (n > 0).then(|| format!("{} {} ({n})", r.label, run_name(r)))
        })
        .collect();
    if lagged.is_empty() {
        return String::new();
    }
    format!("\n- emulator behind (packets more than 1 ms late) in: {}\n", lagged.join(", "))
}

/// `#3`, or `warm-up #1` for a warm-up run.
fn run_name(r: &RunRecord) -> String {
    if r.warmup {
        format!("warm-up #{}", r.repetition)
    } else {
        format!("#{}", r.repetition)
    }
}

/// `5`, or `5 (+ 1 warm-up)` when warm-up runs were recorded (counted from
/// the runs: results from before warm-ups have none).
fn repetitions(sc: &ScenarioResult) -> String {
    let warm = sc.runs.iter().filter(|r| r.warmup).map(|r| r.repetition).max().unwrap_or(0);
    let reps = sc.scenario.repetitions;
    if warm == 0 {
        reps.to_string()
    } else {
        format!("{reps} (+ {warm} warm-up)")
    }
}

/// The title and the line about the path, data set and references.
fn scenario_header(sc: &ScenarioResult, wire: Option<(f64, &str)>, disk: Option<f64>) -> String {
    let s = &sc.scenario;
    format!(
        "### {}\n\n{} · {:?} · {} ({} files, {}) · repetitions: {}{}{} · load before runs: {}\n\n",
        sc.name,
        sc.path,
        s.mode,
        sc.dataset,
        sc.dataset_files,
        fmt_bytes(sc.dataset_bytes),
        repetitions(sc),
        wire.map_or(String::new(), |(w, src)| format!(" · wire time {w:.2} s ({src})")),
        disk.map_or(String::new(), |d| format!(" · disk time {d:.2} s (fio)")),
        load_range(sc),
    )
}

/// `× best`; a row whose runs did not mostly succeed (never the best) has
/// its ok count beside the ratio.
fn best_cell(r: &Row, ttc: f64, best: Option<f64>) -> String {
    match (r.tool, best) {
        (Some(ToolKind::Iperf3), _) => "ref".into(),
        (Some(ToolKind::Fio), _) => "disk ref".into(),
        (_, Some(b)) if mostly_ok(r) => format!("{:.2}", ttc / b),
        (_, Some(b)) => format!("{:.2} ({}/{} ok)", ttc / b, r.ok, r.total),
        _ => "—".into(),
    }
}

fn disk_cell(tool: Option<ToolKind>, ttc: f64, disk: f64) -> String {
    match tool {
        Some(ToolKind::Fio) => "ref".into(),
        Some(t) if t.is_reference() => "—".into(),
        _ => format!("{:.1}", percent_of_disk(disk, ttc)),
    }
}

/// The `first run` cell: the warm-up's TTC, `failed`, or `—`.
fn first_cell(r: &Row) -> String {
    match r.first_run {
        Some(Some(t)) => format!("{t:.2}"),
        Some(None) => "failed".into(),
        None => "—".into(),
    }
}

fn table_row(r: &Row, refs: &Refs) -> String {
    let first = if refs.first_run { format!(" {} |", first_cell(r)) } else { String::new() };
    let Some(ttc) = r.ttc else {
        let empty = if refs.disk.is_some() { 7 } else { 6 };
        return format!("| {} | {}/{} | FAILED |{first}{}\n", r.label, r.ok, r.total, " — |".repeat(empty));
    };
    let g = r.goodput.expect("goodput exists when ttc does");
    let mut cells = vec![
        r.label.clone(),
        format!("{}/{}", r.ok, r.total),
        format!("{:.2} ({:.2}–{:.2})", ttc.median, ttc.min, ttc.max),
    ];
    if refs.first_run {
        cells.push(first_cell(r));
    }
    cells.extend([
        rate_range(&g),
        opt(refs.wire, |w| format!("{:.2}", ttc.median / w)),
        best_cell(r, ttc.median, refs.best),
    ]);
    if let Some(d) = refs.disk {
        cells.push(disk_cell(r.tool, ttc.median, d));
    }
    cells.push(format!("{} / {}", opt(r.client_cpu, |v| format!("{v:.2}")), opt(r.server_cpu, |v| format!("{v:.2}"))));
    cells.push(opt(r.cpu_per_gb, |v| format!("{v:.2}")));
    cells.push(format!("{} / {}", opt(r.client_rss, mib), opt(r.server_rss, mib)));
    format!("| {} |\n", cells.join(" | "))
}

/// The whole summary document.
pub fn summary(res: &Results) -> String {
    let mut out = String::from("# lightpath bench summary\n\n");
    let h = &res.host;
    let _ = writeln!(out, "- run: {} → {}{}", res.started, res.finished, if res.quick { " (quick)" } else { "" });
    let _ = writeln!(out, "- command: `{}`", res.command.join(" "));
    let _ = writeln!(
        out,
        "- host: {} · {} · {} × {} · {} RAM",
        h.hostname,
        h.os,
        h.cpus,
        h.cpu,
        fmt_bytes(h.mem_total_bytes)
    );
    let _ = writeln!(out, "- kernel: {}", h.kernel);
    let _ = writeln!(out, "- accounting: {}", h.cgroups);
    // Each distinct pair: a client may talk to another kind's server.
    let versions: std::collections::BTreeSet<(&str, &str)> =
        res.scenarios.iter().flat_map(|s| &s.tools).map(|t| (t.tool.name(), t.version.as_str())).collect();
    for (tool, v) in versions {
        let _ = writeln!(out, "- {tool}: {v}");
    }
    out += LEGEND;
    for sc in &res.scenarios {
        out.push('\n');
        out += &scenario_table(sc);
    }
    out
}

const LEGEND: &str = "
TTC = client start to client exit (includes process start and login), caches dropped before
every run (a table says so of any run where that was not allowed); for iperf3 (the line-rate
reference) TTC = data-set bits / iperf3's receiver-side rate, because `iperf3 -n` stops before the
bytes in its socket buffers arrive (over a long path that rate includes its slow start and misses
its last bytes: a rough figure there, which is why `× wire` uses the path's rate). fio is the disk reference:
two jobs at once, one reading the data set's file and one writing a file of the same size into
the destination (O_DIRECT, libaio, 1 MiB blocks, 16 in flight); its TTC is the slower job's
runtime. Goodput = data-set bytes × 8 / TTC. `× wire` = median TTC / wire time
(data-set bits at the path rate, or the iperf3 median on loopback). `× best` = median TTC / best
median TTC among the transfer tools with more than half their runs ok (1.00 = fastest; iperf3
and fio are references; a row with fewer ok runs says so beside its ratio). `% of disk`
(only where fio ran) = disk time / median TTC × 100, the disk time being the fio median: the
share of what the disk sustains for the copy's reads and writes (a tool that writes through the
page cache can pass 100, its last writes still in memory when it exits). CPU = cgroup CPU
seconds of all processes of that end (servers: from the client's start, their start-up left out;
sum of both in third-party runs); per GB, both
ends = (client + server CPU) / (payload bytes / 10^9), the median of the runs' ratios. Peak PSS =
highest sum of the proportional set size of the end's processes (`Pss` of /proc/PID/smaps_rollup,
RSS where unreadable), sampled when the client starts and every 100 ms: pages the processes of a
forking server share (globus-gridftp-server forks one per session) count once, not once per
process (results before 2026-11-28 summed RSS). `ok` = successful
runs / runs; statistics cover the successful runs, and every failure is listed under its table.
`first run` = TTC of the tool's warm-up run (the scenario's `warmup`, run before the measured
repetitions, caches dropped alike): its first visit, when lightpath's peer book and state, TCP Fast
Open cookies and route metrics are still empty; warm-up runs are in no other figure. The tools'
order rotates each repetition.
`load before runs` = the machine's 1-minute load average just before each run: anything well
above the tools' own share means other work shared the CPUs with that scenario. Every run of
a tree writes into a new file system; a single file's runs write into a fresh directory of the
cache's file system (`dest_fs` in results.json; see bench/README.md).

What the figures are not: (a) CPU, and CPU per GB, count the tools' processes only; kernel
network work done in softirq context on the emulator's threads is charged to the harness
(`harness_cpu_s`) and left out for every tool alike, which makes ratios of CPU per GB between
tools larger than ratios of total CPU would be. (b) iperf3 before 3.16 (such as 3.12) runs all -P
streams on one thread per end: on loopback it is bound by one core, not the loopback's ceiling.
(c) The fio reference is fio's own figure for its fixed job (1 MiB blocks, iodepth 16, no
end_fsync), not a proven ceiling of the disk.
";

/// Every failed run and scenario, one line each.
pub fn failures(res: &Results) -> Vec<String> {
    let mut out = Vec::new();
    for sc in &res.scenarios {
        if let Some(e) = &sc.error {
            out.push(format!("{}: {e}", sc.name));
        }
        for r in sc.runs.iter().filter(|r| !r.ok) {
            let e = r.error.as_deref().unwrap_or("failed");
            out.push(format!("{} | {} {}: {e}", sc.name, r.label, run_name(r)));
        }
    }
    out
}

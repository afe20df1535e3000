//! What a bench run writes down: every run with its command lines, and the
//! host, kernel, tool versions and path settings beside the numbers.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::cgroup::Usage;
use crate::scenario::{Scenario, ToolKind};

/// One counter sample: seconds since the client started, and the bytes
/// received (data direction) / sent (ACKs, requests) on the counted
/// interfaces of side B since then.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Sample(pub f64, pub u64, pub u64);

/// One end (client or a server) of one run.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct EndRecord {
    pub role: String,
    pub side: String,
    pub command: Vec<String>,
    /// CPU and memory; a server's CPU counts from the client's start (what
    /// it used starting up is `startup_cpu_s`).
    #[serde(flatten)]
    pub usage: Usage,
    /// CPU seconds a server used before the client started (its start-up),
    /// left out of `cpu_s`; none for the client, and in results from
    /// before 2026-11-28 (whose server CPU includes it).
    #[serde(default)]
    pub startup_cpu_s: Option<f64>,
    /// Highest sum of the memory of the end's processes over the samples:
    /// their PSS (results before 2026-11-28: their RSS, which counted the
    /// pages a forking server's processes share once per process).
    pub peak_rss_bytes: u64,
}

/// One repetition of one tool configuration.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RunRecord {
    pub scenario: String,
    pub label: String,
    pub tool: Option<ToolKind>,
    /// The repetition, from 1; of the warm-up runs when `warmup`.
    pub repetition: u32,
    /// An uncounted warm-up run (the scenario's `warmup`): kept, shown as
    /// the tool's first run, left out of every statistic.
    #[serde(default)]
    pub warmup: bool,
    pub ok: bool,
    pub error: Option<String>,
    pub started: String,
    pub exit_code: Option<i32>,
    /// Time to completion, seconds: client start to client exit (iperf3:
    /// data-set bits / iperf3's receiver-side rate, see `tool_report`).
    pub ttc_s: f64,
    /// Client start to client exit, seconds, for every tool.
    pub client_wall_s: f64,
    /// Bytes of the data set (what had to arrive).
    pub payload_bytes: u64,
    /// payload_bytes * 8 / ttc_s.
    pub goodput_bps: f64,
    /// Bytes on the wire in the data direction (received by side B) during the run.
    pub wire_bytes: u64,
    pub samples: Vec<Sample>,
    pub ends: Vec<EndRecord>,
    /// CPU of the harness process itself (sampler, and the emulator where it runs in-process).
    pub harness_cpu_s: f64,
    /// The emulator's own counters for the run (emulated paths only).
    pub emulator: Option<crate::wanlab::EmuStats>,
    /// What the tool itself reported (iperf3: its JSON end summary; fio:
    /// bytes, bandwidth and runtime of its read and write jobs).
    pub tool_report: Option<serde_json::Value>,
    pub caches_dropped: bool,
    /// What the run wrote into (see `scratchfs`); empty in results from
    /// before it was recorded, when runs wrote into a directory.
    #[serde(default)]
    pub dest_fs: String,
    /// 1-minute load average of the machine just before the run (other
    /// work on the machine shows up here).
    pub load_before: f64,
    pub verified: String,
    pub stderr_tail: String,
    /// What the scenario's `[fault]` did during the run.
    #[serde(default)]
    pub fault: Option<String>,
}

impl RunRecord {
    pub fn end(&self, role: &str) -> Option<&EndRecord> {
        self.ends.iter().find(|e| e.role == role)
    }

    /// CPU seconds of every end but the client: both servers of a
    /// third-party run.
    pub fn server_cpu_s(&self) -> Option<f64> {
        let cpus: Vec<f64> = self.ends.iter().filter(|e| e.role != "client").filter_map(|e| e.usage.cpu_s).collect();
        (!cpus.is_empty()).then(|| cpus.iter().sum())
    }

    /// The highest peak of the ends but the client.
    pub fn server_peak_rss(&self) -> Option<u64> {
        self.ends.iter().filter(|e| e.role != "client").map(|e| e.peak_rss_bytes).max()
    }
}

/// A tool configuration as it ran.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ToolInfo {
    pub label: String,
    pub tool: ToolKind,
    pub version: String,
}

/// One scenario: its settings as parsed and every run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScenarioResult {
    pub name: String,
    pub scenario: Scenario,
    pub path: String,
    /// sysctls and MTUs per namespace side.
    pub path_settings: BTreeMap<String, BTreeMap<String, String>>,
    pub counted_interfaces: Vec<String>,
    pub dataset: String,
    pub dataset_files: u64,
    pub dataset_bytes: u64,
    /// Bytes at the configured path rate, seconds (emulated paths only).
    pub wire_time_s: Option<f64>,
    pub tools: Vec<ToolInfo>,
    pub runs: Vec<RunRecord>,
    pub error: Option<String>,
}

/// The machine the numbers came from.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HostInfo {
    pub hostname: String,
    pub kernel: String,
    pub os: String,
    pub cpu: String,
    pub cpus: usize,
    pub mem_total_bytes: u64,
    pub cgroups: String,
}

/// Everything one `lightpath bench` invocation measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub started: String,
    pub finished: String,
    pub quick: bool,
    pub command: Vec<String>,
    pub host: HostInfo,
    pub scenarios: Vec<ScenarioResult>,
}

fn read_trim(path: &str) -> String {
    fs::read_to_string(path).unwrap_or_default().trim().to_string()
}

impl HostInfo {
    pub fn collect(cgroups: String) -> HostInfo {
        let os = read_trim("/etc/os-release")
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .unwrap_or("")
            .trim_matches('"')
            .to_string();
        let cpuinfo = read_trim("/proc/cpuinfo");
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split(':').nth(1)))
            .unwrap_or("")
            .trim()
            .to_string();
        let mem_kb = read_trim("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0);
        HostInfo {
            hostname: read_trim("/proc/sys/kernel/hostname"),
            kernel: format!("{} {}", read_trim("/proc/sys/kernel/osrelease"), read_trim("/proc/sys/kernel/version")),
            os,
            cpu,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            mem_total_bytes: mem_kb * 1024,
            cgroups,
        }
    }
}

impl Results {
    pub fn save(&self, dir: &Path) -> Result<()> {
        fs::create_dir_all(dir)?;
        let json = serde_json::to_string_pretty(self)?;
        fs::write(dir.join("results.json"), json)?;
        fs::write(dir.join("runs.csv"), self.csv())?;
        Ok(())
    }

    pub fn load(dir: &Path) -> Result<Results> {
        let path = dir.join("results.json");
        let text = fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{}: not a bench result", path.display()))
    }

    /// One row per run (warm-up runs too, marked), without the samples.
    pub fn csv(&self) -> String {
        let mut out = String::from(
            "scenario,label,tool,repetition,ok,ttc_s,payload_bytes,goodput_bps,wire_bytes,\
             client_cpu_s,server_cpu_s,client_peak_rss,server_peak_rss,harness_cpu_s,caches_dropped,verified,error,warmup\n",
        );
        for sc in &self.scenarios {
            for r in &sc.runs {
                out += &csv_row(r);
            }
        }
        out
    }
}

fn csv_row(r: &RunRecord) -> String {
    // The servers' figures as the summary gives them (both servers of a
    // third-party run; only the source's were here).
    let cpu = |c: Option<f64>| c.map_or(String::new(), |c| format!("{c:.3}"));
    let rss = |b: Option<u64>| b.map_or(String::new(), |b| b.to_string());
    let client = r.end("client");
    let err = r.error.clone().unwrap_or_default().replace(['"', '\n'], " ");
    format!(
        "{},\"{}\",{},{},{},{:.4},{},{:.0},{},{},{},{},{},{:.3},{},{},\"{}\",{}\n",
        r.scenario,
        r.label,
        r.tool.map_or("", |t| t.name()),
        r.repetition,
        r.ok,
        r.ttc_s,
        r.payload_bytes,
        r.goodput_bps,
        r.wire_bytes,
        cpu(client.and_then(|e| e.usage.cpu_s)),
        cpu(r.server_cpu_s()),
        rss(client.map(|e| e.peak_rss_bytes)),
        rss(r.server_peak_rss()),
        r.harness_cpu_s,
        r.caches_dropped,
        r.verified,
        err,
        r.warmup
    )
}

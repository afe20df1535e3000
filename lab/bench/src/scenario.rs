//! Scenario files: one TOML file per scenario, parsed strictly
//! (`deny_unknown_fields` everywhere) and validated before anything runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};

use crate::units::{Dur, Rate, Size};

/// A scenario as written in its TOML file.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name used in tables and file names; defaults to the file stem.
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_repetitions")]
    pub repetitions: u32,
    /// Uncounted runs of each tool before the measured repetitions: the
    /// first visit (lightpath's peer book and state, TCP Fast Open cookies
    /// and the kernel's route metrics all start empty) is recorded and
    /// shown apart (`first run`), not mixed into the medians. 0 = none.
    #[serde(default = "default_warmup")]
    pub warmup: u32,
    #[serde(default)]
    pub mode: Mode,
    /// Per-run time limit; a run that exceeds it is recorded as failed.
    #[serde(default = "default_timeout")]
    pub timeout: Dur,
    #[serde(default)]
    pub verify: Verify,
    pub path: PathConfig,
    pub dataset: DatasetConfig,
    /// Overrides for `--quick`; scenarios without it are skipped in quick mode.
    pub quick: Option<QuickConfig>,
    #[serde(rename = "tool")]
    pub tools: Vec<ToolSpec>,
    /// A fault injected into every run (`[fault]`).
    #[serde(default)]
    pub fault: Option<FaultConfig>,
}

/// `[fault]`: what goes wrong during each run, the same for every tool.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FaultConfig {
    /// Destroy one data connection of the (first) server this long after
    /// the client started (`ss -K`, as a middlebox's reset or a dead path
    /// would end it): a stream dies, the control connection lives.
    #[serde(default)]
    pub kill_stream_after: Option<Dur>,
    /// Interrupt the client (SIGINT, as Ctrl-C) this long after it
    /// started, and once it has stopped run the same command again to the
    /// end: the copy across a stopped run. TTC is from the first start to
    /// the second run's end.
    #[serde(default)]
    pub interrupt_after: Option<Dur>,
}

impl FaultConfig {
    /// What it does, said once under a scenario's table.
    pub fn describe(&self) -> String {
        let mut said = Vec::new();
        if let Some(d) = &self.kill_stream_after {
            let at = d.0.as_secs_f64();
            said.push(format!("one data connection of the server destroyed {at:.2} s after the client started (`ss -K`; each run's record says which)"));
        }
        if let Some(d) = &self.interrupt_after {
            let at = d.0.as_secs_f64();
            said.push(format!("the client interrupted (SIGINT) {at:.2} s after it started, then the same command run again to the end; TTC spans both"));
        }
        said.join("; ")
    }
}

fn default_repetitions() -> u32 {
    5
}
fn default_warmup() -> u32 {
    1
}
fn default_timeout() -> Dur {
    Dur(Duration::from_secs(600))
}

/// Who sends and who receives.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Server on side A holds the data, the client on side B pulls it.
    #[default]
    Download,
    /// Client on side A pushes the data to the server on side B.
    Upload,
    /// Client on side A drives a source server (A) and a destination server (B).
    ThirdParty,
}

/// How a run's output is checked against the data set.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Verify {
    /// Every path of the copy as in the source: each file's size and
    /// CRC-32C, the directories (empty ones too) and the symlinks' targets.
    #[default]
    Full,
    /// The same paths, files by size only.
    Size,
    /// Exit code only.
    None,
}

/// The network path between side A and side B.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PathConfig {
    pub kind: PathKind,
    pub rate: Option<Rate>,
    pub rtt: Option<Dur>,
    #[serde(default)]
    pub loss_percent: f64,
    #[serde(default)]
    pub reorder_percent: f64,
    #[serde(default)]
    pub corrupt_percent: f64,
    pub mtu: Option<u32>,
    /// Bottleneck queue; the emulator picks one BDP when unset.
    pub queue: Option<Size>,
    /// Maximum of the TCP autotuning buffers (`tcp_rmem`/`tcp_wmem`) in both
    /// namespaces, as on a tuned DTN; the kernel defaults when unset.
    pub tcp_buffer_max: Option<Size>,
    /// Let servers in both namespaces accept TCP Fast Open
    /// (`net.ipv4.tcp_fastopen = 3`), as a DTN's admin may; the kernel's
    /// default (1) allows it to clients only. Only lightpath uses it.
    #[serde(default)]
    pub tcp_fastopen: bool,
    /// Segmentation and checksum offload on the emulated interfaces (TSO,
    /// GRO), as the NICs of data transfer nodes have: the same path, less
    /// per-packet work in the hosts (`lab up --offload`). Clean paths only.
    #[serde(default)]
    pub offload: bool,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PathKind {
    /// Both sides in one fresh network namespace, over its `lo`.
    Loopback,
    /// Two namespaces joined by the `lightpath-wan` emulator.
    Emulated,
}

/// The data set to move.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetConfig {
    pub kind: DatasetKind,
    /// large-file: the file; large-files, incompressible: each file;
    /// git-like: the whole tree; memory: bytes streamed.
    pub size: Option<Size>,
    /// Number of files (large-files, incompressible, git-like).
    pub count: Option<u64>,
    /// linux-source: the tarball to extract once into the cache.
    pub tarball: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum DatasetKind {
    LargeFile,
    LargeFiles,
    LinuxSource,
    GitLike,
    Incompressible,
    Memory,
}

/// `[quick]`: what changes under `--quick`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct QuickConfig {
    pub repetitions: Option<u32>,
    pub warmup: Option<u32>,
    pub size: Option<Size>,
    pub count: Option<u64>,
    pub timeout: Option<Dur>,
}

/// One tool configuration (`[[tool]]`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    pub tool: ToolKind,
    /// Row name in the tables; derived from the settings when unset.
    pub label: Option<String>,
    /// Parallel TCP streams (guc `-p`, lightpath `-p`, iperf3 `-P`).
    pub parallel: Option<u32>,
    /// Concurrent files / control sessions (guc `-cc`, lightpath `--cc`).
    pub concurrency: Option<u32>,
    /// guc `-pp`.
    #[serde(default)]
    pub pipeline: bool,
    /// guc `-fast`.
    #[serde(default)]
    pub fast: bool,
    /// guc `-tcp-bs`.
    pub tcp_buffer: Option<Size>,
    /// guc `-bs`.
    pub block_size: Option<Size>,
    /// Appended to the client command line (fio: before its jobs, so both get them).
    #[serde(default)]
    pub extra_args: Vec<String>,
    /// Appended to each server command line.
    #[serde(default)]
    pub server_args: Vec<String>,
    /// The server the client talks to, when not its own kind's: a
    /// lightpath client against `globus-gridftp-server` measures the
    /// fallback with a plain GridFTP peer (issue 5, item 4); guc against
    /// `lightpath` measures our server with the real client.
    pub server: Option<ServerKind>,
}

/// The servers a transfer tool can talk to.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ServerKind {
    Lightpath,
    GlobusGridftpServer,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum ToolKind {
    Lightpath,
    GlobusUrlCopy,
    Iperf3,
    /// The disk reference: reads the data set's file and writes a copy's
    /// worth of bytes at once, with no network (see the `fio` module).
    Fio,
}

impl ServerKind {
    /// The name in row labels.
    pub fn short_name(self) -> &'static str {
        match self {
            ServerKind::Lightpath => "lightpath",
            ServerKind::GlobusGridftpServer => "GCT",
        }
    }
}

impl ToolKind {
    /// The name used on the command line (`--tools`) and in files.
    pub fn name(self) -> &'static str {
        match self {
            ToolKind::Lightpath => "lightpath",
            ToolKind::GlobusUrlCopy => "globus-url-copy",
            ToolKind::Iperf3 => "iperf3",
            ToolKind::Fio => "fio",
        }
    }

    /// A reference row (iperf3: the network, fio: the disk), not a transfer tool.
    pub fn is_reference(self) -> bool {
        matches!(self, ToolKind::Iperf3 | ToolKind::Fio)
    }

    /// Parses `lightpath`, `globus-url-copy` (or `guc`), `iperf3`, `fio`.
    pub fn parse(text: &str) -> Result<ToolKind> {
        Ok(match text {
            "lightpath" => ToolKind::Lightpath,
            "globus-url-copy" | "guc" => ToolKind::GlobusUrlCopy,
            "iperf3" => ToolKind::Iperf3,
            "fio" => ToolKind::Fio,
            _ => bail!("unknown tool `{text}` (known: lightpath, globus-url-copy, iperf3, fio)"),
        })
    }
}

impl ToolSpec {
    /// The row name: the explicit label or one built from the settings.
    pub fn label(&self) -> String {
        if let Some(l) = &self.label {
            return l.clone();
        }
        let mut s = match self.tool {
            ToolKind::Lightpath => "lightpath".to_string(),
            ToolKind::GlobusUrlCopy => "guc".to_string(),
            ToolKind::Iperf3 => "iperf3".to_string(),
            ToolKind::Fio => "fio".to_string(),
        };
        let p_flag = if self.tool == ToolKind::Iperf3 { "-P" } else { "-p" };
        if let Some(p) = self.parallel {
            s += &format!(" {p_flag} {p}");
        }
        if let Some(c) = self.concurrency {
            let cc_flag = if self.tool == ToolKind::Lightpath { "--cc" } else { "-cc" };
            s += &format!(" {cc_flag} {c}");
        }
        if self.pipeline {
            s += " -pp";
        }
        if self.fast {
            s += " -fast";
        }
        match self.server {
            Some(k) if k != self.own_server() => s += &format!(" ({} server)", k.short_name()),
            _ => {}
        }
        s
    }

    /// The server kind this tool talks to by default (guc and lightpath
    /// each their own; iperf3 and fio none that can be swapped).
    pub fn own_server(&self) -> ServerKind {
        match self.tool {
            ToolKind::GlobusUrlCopy => ServerKind::GlobusGridftpServer,
            _ => ServerKind::Lightpath,
        }
    }

    /// The server kind of this configuration's runs.
    pub fn server_kind(&self) -> ServerKind {
        self.server.unwrap_or_else(|| self.own_server())
    }

    fn validate(&self) -> Result<()> {
        let guc_only = [
            ("pipeline", self.pipeline),
            ("fast", self.fast),
            ("tcp_buffer", self.tcp_buffer.is_some()),
            ("block_size", self.block_size.is_some()),
        ];
        for (key, set) in guc_only {
            ensure!(
                !set || self.tool == ToolKind::GlobusUrlCopy,
                "`{key}` is a globus-url-copy setting, not one of {}",
                self.tool.name()
            );
        }
        ensure!(
            self.concurrency.is_none() || self.tool != ToolKind::Iperf3,
            "`concurrency` has no meaning for iperf3 (use `parallel` for streams)"
        );
        ensure!(
            self.server.is_none() || matches!(self.tool, ToolKind::Lightpath | ToolKind::GlobusUrlCopy),
            "`server` chooses the GridFTP server of lightpath or globus-url-copy, not of {}",
            self.tool.name()
        );
        self.validate_fio()?;
        ensure!(self.parallel != Some(0), "`parallel` must be at least 1");
        ensure!(self.concurrency != Some(0), "`concurrency` must be at least 1");
        Ok(())
    }

    /// fio's jobs are fixed (one reader, one writer) and it has no servers.
    fn validate_fio(&self) -> Result<()> {
        if self.tool != ToolKind::Fio {
            return Ok(());
        }
        let net_only = [
            ("parallel", self.parallel.is_some()),
            ("concurrency", self.concurrency.is_some()),
            ("server_args", !self.server_args.is_empty()),
        ];
        if let Some((key, _)) = net_only.iter().find(|(_, set)| *set) {
            bail!("`{key}` has no meaning for fio (its jobs are fixed: one reader, one writer, no servers)");
        }
        Ok(())
    }
}

impl PathConfig {
    fn validate(&self) -> Result<()> {
        for (key, v) in [
            ("loss_percent", self.loss_percent),
            ("reorder_percent", self.reorder_percent),
            ("corrupt_percent", self.corrupt_percent),
        ] {
            ensure!((0.0..100.0).contains(&v), "path.{key} = {v}: must be in [0, 100)");
        }
        match self.kind {
            PathKind::Emulated => {
                ensure!(self.rate.is_some(), "an emulated path needs `rate` (e.g. \"1Gbit\")");
                ensure!(self.rtt.is_some(), "an emulated path needs `rtt` (e.g. \"95ms\")");
                ensure!(self.rate.is_some_and(|r| r.0 > 0), "path.rate must be positive");
            }
            PathKind::Loopback => {
                let shaped = self.rate.is_some()
                    || self.rtt.is_some()
                    || self.loss_percent > 0.0
                    || self.reorder_percent > 0.0
                    || self.corrupt_percent > 0.0
                    || self.queue.is_some()
                    || self.mtu.is_some()
                    || self.offload;
                ensure!(
                    !shaped,
                    "a loopback path is not shaped: remove rate/rtt/loss/mtu/queue/offload or use kind = \"emulated\""
                );
            }
        }
        Ok(())
    }

    /// One line for tables: `1 Gbit/s, 95 ms, 0.01 % loss, MTU 1500`.
    pub fn describe(&self) -> String {
        if self.kind == PathKind::Loopback {
            return "loopback".into();
        }
        let mut s = format!(
            "{}, {} ms RTT",
            crate::units::fmt_rate(self.rate.map_or(0, |r| r.0) as f64),
            self.rtt.map_or(0, |d| d.0.as_millis())
        );
        if self.loss_percent > 0.0 {
            s += &format!(", {} % loss", self.loss_percent);
        }
        if let Some(m) = self.mtu {
            s += &format!(", MTU {m}");
        }
        if self.offload {
            s += ", TSO/GRO offload";
        }
        s
    }
}

impl DatasetConfig {
    fn validate(&self) -> Result<()> {
        use DatasetKind::*;
        let needs_count = matches!(self.kind, LargeFiles | GitLike | Incompressible);
        ensure!(needs_count || self.count.is_none(), "dataset.count has no meaning for {:?}", self.kind);
        ensure!(
            self.kind == LinuxSource || self.tarball.is_none(),
            "dataset.tarball is only for kind = \"linux-source\""
        );
        ensure!(
            self.kind != LinuxSource || (self.size.is_none() && self.count.is_none()),
            "a linux-source data set has a fixed size: remove size/count"
        );
        ensure!(self.count != Some(0), "dataset.count must be at least 1");
        ensure!(self.size.is_none_or(|s| s.0 > 0), "dataset.size must be positive");
        Ok(())
    }
}

impl Scenario {
    /// Parses TOML text; `origin` names the file in errors and gives the default name.
    pub fn parse(text: &str, origin: &Path) -> Result<Scenario> {
        let mut s: Scenario =
            toml::from_str(text).with_context(|| format!("{}: invalid scenario", origin.display()))?;
        if s.name.is_empty() {
            s.name = origin.file_stem().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        }
        s.validate().with_context(|| format!("{}: invalid scenario", origin.display()))?;
        Ok(s)
    }

    /// Reads and parses one file.
    pub fn load(path: &Path) -> Result<Scenario> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read scenario {}", path.display()))?;
        Scenario::parse(&text, path)
    }

    fn validate(&self) -> Result<()> {
        ensure!(
            !self.name.is_empty()
                && self.name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')),
            "name `{}`: use letters, digits, '-', '_' and '.' only",
            self.name
        );
        ensure!(self.repetitions >= 1, "repetitions must be at least 1");
        ensure!(!self.tools.is_empty(), "no [[tool]] to run");
        self.path.validate()?;
        self.dataset.validate()?;
        if let Some(q) = &self.quick {
            ensure!(q.repetitions != Some(0), "quick.repetitions must be at least 1");
        }
        if let Some(f) = &self.fault {
            ensure!(f.kill_stream_after.is_some() || f.interrupt_after.is_some(), "[fault] names no fault");
        }
        for (i, t) in self.tools.iter().enumerate() {
            t.validate().with_context(|| format!("[[tool]] #{}", i + 1))?;
            self.check_fio_dataset(t).with_context(|| format!("[[tool]] #{}", i + 1))?;
        }
        let mut labels: Vec<String> = self.tools.iter().map(ToolSpec::label).collect();
        labels.sort();
        if let Some(w) = labels.windows(2).find(|w| w[0] == w[1]) {
            bail!("two [[tool]] entries are both labelled `{}`: set `label`", w[0]);
        }
        Ok(())
    }

    /// fio reads the data set's one file and writes one of the same size:
    /// trees, folders and memory have no such file.
    fn check_fio_dataset(&self, t: &ToolSpec) -> Result<()> {
        let kind = self.dataset.kind;
        ensure!(
            t.tool != ToolKind::Fio || kind == DatasetKind::LargeFile,
            "fio (the disk reference) copies one file: it needs dataset kind = \"large-file\", not {}",
            serde_json::to_string(&kind).unwrap_or_default()
        );
        Ok(())
    }

    /// Applies the `[quick]` overrides (call only in quick mode).
    pub fn apply_quick(&mut self) {
        let Some(q) = self.quick.clone() else { return };
        if let Some(r) = q.repetitions {
            self.repetitions = r;
        }
        if let Some(w) = q.warmup {
            self.warmup = w;
        }
        if let Some(s) = q.size {
            self.dataset.size = Some(s);
        }
        if let Some(c) = q.count {
            self.dataset.count = Some(c);
        }
        if let Some(t) = q.timeout {
            self.timeout = t;
        }
    }
}

/// Expands files and directories (all `*.toml` inside, sorted) into scenarios.
pub fn load_all(inputs: &[PathBuf]) -> Result<Vec<Scenario>> {
    let mut files = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(input)
                .with_context(|| format!("cannot list {}", input.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "toml"))
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(input.clone());
        }
    }
    ensure!(!files.is_empty(), "no scenario files found in {inputs:?}");
    let scenarios = files.iter().map(|f| Scenario::load(f)).collect::<Result<Vec<_>>>()?;
    let mut names: Vec<&str> = scenarios.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        bail!("two scenario files are both named `{}`", w[0]);
    }
    Ok(scenarios)
}

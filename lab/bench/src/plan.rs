//! From arguments to a checked plan: scenarios loaded and filtered, tools
//! found, paths and data sets checked. Every problem is reported at once,
//! before anything runs.

use std::fmt::Write;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Result};

use crate::cgroup::Cgroups;
use crate::proc::{install_signal_handlers, Interrupted};
use crate::record::{HostInfo, Results};
use crate::runner::{ensure_server_user, run_scenario, Env, PartialScenario};
use crate::scenario::{load_all, PathKind, Scenario, ToolKind, ToolSpec};
use crate::tools::{check_programs, which, Programs};
use crate::units::rfc3339;
use crate::{dataset, netpath, wanlab, write_outputs, BenchArgs};

/// Problems (refuse to start) and notes (say, then go on) found while checking.
#[derive(Default)]
struct Checks {
    problems: Vec<String>,
    notes: Vec<String>,
}

impl Checks {
    /// Checks one scenario; returns it with the tools that will run.
    fn scenario(
        &mut self,
        sc: Scenario,
        wanted: &[ToolKind],
        progs: &Programs,
        skip_missing: bool,
    ) -> Option<(Scenario, Vec<ToolSpec>)> {
        let mut tools: Vec<ToolSpec> = Vec::new();
        for t in sc.tools.iter().filter(|t| wanted.is_empty() || wanted.contains(&t.tool)) {
            match check_programs(t, progs) {
                Ok(()) => tools.push(t.clone()),
                Err(e) if skip_missing => self.notes.push(format!("{}: left out {}: {e:#}", sc.name, t.label())),
                Err(e) => self.problems.push(format!("{}: {e:#}", sc.name)),
            }
        }
        if sc.path.kind == PathKind::Emulated {
            if let Err(e) = wanlab::check(&sc.path) {
                self.problems.push(format!("{}: cannot emulate {}: {e:#}", sc.name, sc.path.describe()));
            }
        }
        if let Err(e) = dataset::preflight(&sc.dataset) {
            self.problems.push(format!("{}: {e:#}", sc.name));
        }
        if tools.is_empty() {
            self.notes.push(format!("{}: no tool left to run, skipped", sc.name));
            return None;
        }
        for t in &tools {
            if let Some(why) = t.tcp_buffer.and_then(|b| buffer_capped(b.0, core_max)) {
                self.notes.push(format!("{}: {}: {why}", sc.name, t.label()));
            }
        }
        Some((sc, tools))
    }
}

/// The host's `net.core.{r,w}mem_max`: the most a socket may ask for with
/// SO_RCVBUF/SO_SNDBUF, whatever a namespace's tcp_rmem says (they belong
/// to the host, not to a network namespace).
fn core_max(which: &str) -> Option<u64> {
    fs::read_to_string(format!("/proc/sys/net/core/{which}_max")).ok()?.trim().parse().ok()
}

/// Why a tool's `tcp_buffer` of `bytes` will not be what it gets: the
/// kernel caps it at the host's limits, silently (a `guc -tcp-bs 16M`
/// measured as with 4 MiB). `None` when it fits.
fn buffer_capped(bytes: u64, max: impl Fn(&str) -> Option<u64>) -> Option<String> {
    let low = ["rmem", "wmem"].into_iter().filter_map(|w| max(w).map(|m| (w, m))).find(|&(_, m)| m < bytes)?;
    Some(format!(
        "tcp_buffer {bytes} exceeds net.core.{}_max ({}): the kernel caps the buffer there; raise \
         net.core.rmem_max and wmem_max (host-wide) to measure it as set",
        low.0, low.1
    ))
}

/// A validated plan.
pub struct Plan {
    pub scenarios: Vec<(Scenario, Vec<ToolSpec>)>,
    pub progs: Programs,
    pub out: PathBuf,
    pub cache: PathBuf,
    pub quick: bool,
    pub notes: Vec<String>,
}

fn stamp() -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    rfc3339(now).replace([':', '-'], "")
}

fn resolve(name: &str) -> PathBuf {
    which(Path::new(name)).unwrap_or_else(|| name.into())
}

fn programs(args: &BenchArgs) -> Programs {
    let me = std::env::current_exe().ok().filter(|p| p.file_name().is_some_and(|n| n == "lightpath"));
    let lightpath = args.lightpath.clone().or(me).unwrap_or_else(|| "lightpath".into());
    Programs {
        lightpath: which(&lightpath).unwrap_or(lightpath),
        guc: resolve("globus-url-copy"),
        guc_server: resolve("globus-gridftp-server"),
        iperf3: resolve("iperf3"),
        fio: resolve("fio"),
    }
}

fn select(args: &BenchArgs) -> Result<Vec<Scenario>> {
    let inputs =
        if args.scenarios.is_empty() { vec![PathBuf::from("bench/scenarios")] } else { args.scenarios.clone() };
    let mut all = load_all(&inputs)?;
    if !args.only.is_empty() {
        all.retain(|s| args.only.iter().any(|o| s.name.contains(o.as_str())));
    }
    if args.quick {
        all.retain(|s| s.quick.is_some());
        all.iter_mut().for_each(Scenario::apply_quick);
    }
    if let Some(r) = args.repetitions {
        ensure!(r >= 1, "--repetitions must be at least 1");
        all.iter_mut().for_each(|s| s.repetitions = r);
    }
    ensure!(
        !all.is_empty(),
        "no scenario left to run (check --only{})",
        if args.quick { " and the [quick] tables" } else { "" }
    );
    Ok(all)
}

impl Plan {
    /// Loads and checks everything; fails with the full list of problems.
    pub fn build(args: &BenchArgs) -> Result<Plan> {
        let wanted: Vec<ToolKind> = args.tools.iter().map(|t| ToolKind::parse(t)).collect::<Result<_>>()?;
        let scenarios = select(args)?;
        let progs = programs(args);
        let mut check = Checks::default();
        if !rustix::process::geteuid().is_root() {
            check.problems.push("bench needs root (network namespaces, cgroups, drop_caches): run it with sudo".into());
        }
        if which(Path::new("ip")).is_none() {
            check.problems.push("`ip` is missing (apt-get install iproute2)".into());
        }
        let planned: Vec<(Scenario, Vec<ToolSpec>)> =
            scenarios.into_iter().filter_map(|sc| check.scenario(sc, &wanted, &progs, args.skip_missing)).collect();
        check.problems.dedup();
        if !check.problems.is_empty() {
            bail!("cannot run the benchmark:\n  - {}", check.problems.join("\n  - "));
        }
        ensure!(!planned.is_empty(), "no scenario has a tool left to run:\n  - {}", check.notes.join("\n  - "));
        let out = args.out.clone().unwrap_or_else(|| {
            if args.quick {
                format!("target/bench/quick-{}", stamp()).into()
            } else {
                format!("bench/results/{}", stamp()).into()
            }
        });
        Ok(Plan { scenarios: planned, progs, out, cache: args.cache.clone(), quick: args.quick, notes: check.notes })
    }

    /// What will run, for the terminal.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for n in &self.notes {
            let _ = writeln!(s, "bench: note: {n}");
        }
        for (sc, tools) in &self.scenarios {
            let labels: Vec<String> = tools.iter().map(ToolSpec::label).collect();
            let _ = writeln!(
                s,
                "bench: {} [{} · {:?} · {:?} · ×{} + {} warm-up]: {}",
                sc.name,
                sc.path.describe(),
                sc.mode,
                sc.dataset.kind,
                sc.repetitions,
                sc.warmup,
                labels.join(", ")
            );
        }
        s
    }

    fn env(&self) -> Result<Env> {
        for d in [&self.cache, &self.out] {
            fs::create_dir_all(d)?;
        }
        fs::set_permissions(&self.cache, fs::Permissions::from_mode(0o755))?;
        Ok(Env {
            progs: self.progs.clone(),
            cache: self.cache.clone(),
            out: self.out.clone(),
            cgroups: Cgroups::detect(),
            server_ids: ensure_server_user()?,
        })
    }

    /// Runs every scenario, saving after each one; Ctrl-C keeps what ran.
    pub fn execute(&self) -> Result<Results> {
        install_signal_handlers()?;
        netpath::cleanup_stale();
        let env = self.env()?;
        let mut res = Results {
            started: rfc3339(now()),
            finished: String::new(),
            quick: self.quick,
            command: std::env::args().collect(),
            host: HostInfo::collect(env.cgroups.describe()),
            scenarios: Vec::new(),
        };
        for (sc, tools) in &self.scenarios {
            let refs: Vec<&ToolSpec> = tools.iter().collect();
            let outcome = run_scenario(&env, sc, &refs);
            res.finished = rfc3339(now());
            match outcome {
                Ok(r) => res.scenarios.push(r),
                Err(e) => {
                    let cause = match e.downcast::<PartialScenario>() {
                        Ok(p) => {
                            res.scenarios.push(*p.result);
                            p.cause
                        }
                        Err(e) => e,
                    };
                    write_outputs(&res, &self.out)?;
                    eprintln!("bench: stopped; partial results in {}", self.out.display());
                    if cause.is::<Interrupted>() {
                        return Err(cause);
                    }
                    return Err(cause.context(format!("scenario {}", sc.name)));
                }
            }
            res.save(&self.out)?;
        }
        write_outputs(&res, &self.out)?;
        Ok(res)
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_tcp_buffer_over_the_hosts_limits_is_noted() {
        let max = |w: &str| Some(if w == "rmem" { 4 << 20 } else { 32 << 20 });
        let why = super::buffer_capped(16 << 20, max).expect("16 MiB over a 4 MiB rmem_max");
        assert!(why.contains("net.core.rmem_max (4194304)"), "{why}");
        assert_eq!(super::buffer_capped(4 << 20, max), None);
        assert_eq!(super::buffer_capped(16 << 20, |_| None), None, "limits unknown: nothing said");
    }
}

//! Per-end accounting with cgroups: every process of one end (a server and
//! all its forked children, or a client) runs in its own cgroup, so CPU time
//! is exact even for children that exited, and the members can be listed to
//! sample their memory (PSS, see [`mem_bytes`]).
//!
//! Works with a pure cgroup v2 mount (`cpu.stat`, `memory.peak`), the hybrid
//! layout (v2 `unified` for CPU + v1 `memory`) and pure v1 (`cpuacct` +
//! `memory`). Without any writable hierarchy, CPU and memory are not recorded.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::proc::kill_pid;

const ROOT: &str = "/sys/fs/cgroup";
const OUR_DIR: &str = "lightpath-bench";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Kind {
    V2,
    V1Cpuacct,
    V1Memory,
}

#[derive(Clone, Debug)]
struct Hier {
    kind: Kind,
    base: PathBuf,
}

/// The hierarchies this machine offers, detected once.
#[derive(Clone, Debug, Default)]
pub struct Cgroups {
    hiers: Vec<Hier>,
}

/// What one end used during a run.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct Usage {
    pub cpu_s: Option<f64>,
    pub user_s: Option<f64>,
    pub system_s: Option<f64>,
    /// Peak of the cgroup's charged memory (includes page cache it caused).
    pub cgroup_mem_peak_bytes: Option<u64>,
}

impl Usage {
    /// What was used since `base` was read: CPU times less `base`'s (a
    /// counter `base` lacks counts from 0); the memory peak as read now.
    pub fn since(&self, base: &Usage) -> Usage {
        let less = |now: Option<f64>, then: Option<f64>| now.map(|n| (n - then.unwrap_or(0.0)).max(0.0));
        Usage {
            cpu_s: less(self.cpu_s, base.cpu_s),
            user_s: less(self.user_s, base.user_s),
            system_s: less(self.system_s, base.system_s),
            cgroup_mem_peak_bytes: self.cgroup_mem_peak_bytes,
        }
    }
}

/// Finds our own path in the hierarchy that has `controller` (`""` = v2).
fn own_path(controller: &str) -> Option<String> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = if controller.is_empty() { ctrls.is_empty() } else { ctrls.split(',').any(|c| c == controller) };
        hit.then(|| path.trim_start_matches('/').to_string())
    })
}

fn prepare(kind: Kind, base: PathBuf) -> Option<Hier> {
    fs::create_dir_all(&base).ok()?;
    if kind == Kind::V2 {
        // Best effort: lets our children get memory.peak where allowed.
        let parent = base.parent()?;
        let _ = fs::write(parent.join("cgroup.subtree_control"), "+memory");
        let _ = fs::write(base.join("cgroup.subtree_control"), "+memory");
    }
    Some(Hier { kind, base })
}

impl Cgroups {
    /// Detects the layout; never fails (an empty set means no accounting).
    pub fn detect() -> Cgroups {
        let root = Path::new(ROOT);
        let mut hiers = Vec::new();
        if root.join("cgroup.controllers").exists() {
            hiers.extend(prepare(Kind::V2, root.join(OUR_DIR)));
        } else {
            let unified = root.join("unified");
            if unified.join("cgroup.procs").exists() {
                let own = own_path("").unwrap_or_default();
                hiers.extend(prepare(Kind::V2, unified.join(own).join(OUR_DIR)));
            } else if let Some(own) = own_path("cpuacct") {
                let base = root.join("cpuacct").join(own).join(OUR_DIR);
                hiers.extend(prepare(Kind::V1Cpuacct, base));
            }
            if let Some(own) = own_path("memory") {
                let base = root.join("memory").join(own).join(OUR_DIR);
                hiers.extend(prepare(Kind::V1Memory, base));
            }
        }
        let c = Cgroups { hiers };
        c.cleanup_stale();
        c
    }

    /// A short description for the run metadata.
    pub fn describe(&self) -> String {
        if self.hiers.is_empty() {
            return "none (no writable cgroup hierarchy: CPU and memory not recorded)".into();
        }
        let parts: Vec<String> = self.hiers.iter().map(|h| format!("{:?} at {}", h.kind, h.base.display())).collect();
        parts.join("; ")
    }

    /// Creates a fresh group for one end of one run.
    pub fn group(&self, role: &str) -> Result<Group> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let name = format!("{}-{}-{}", std::process::id(), role, SEQ.fetch_add(1, Ordering::Relaxed));
        let mut dirs = Vec::new();
        for h in &self.hiers {
            let dir = h.base.join(&name);
            fs::create_dir(&dir).with_context(|| format!("cannot create cgroup {}", dir.display()))?;
            dirs.push((h.kind, dir));
        }
        Ok(Group { dirs })
    }

    /// Removes groups left by harness processes that no longer exist.
    fn cleanup_stale(&self) {
        for h in &self.hiers {
            let Ok(entries) = fs::read_dir(&h.base) else { continue };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let owner = name.split('-').next().and_then(|p| p.parse::<u32>().ok());
                let alive = owner.is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
                if e.path().is_dir() && !alive {
                    drain_and_remove(&e.path());
                }
            }
        }
    }
}

/// The cgroups of one end; kills its members and removes itself on drop.
#[derive(Debug)]
pub struct Group {
    dirs: Vec<(Kind, PathBuf)>,
}

impl Group {
    /// A shell prefix that moves the shell into this group before `exec`.
    pub fn join_script(&self) -> String {
        let mut s = String::new();
        for (_, d) in &self.dirs {
            s += &format!("echo $$ > '{}/cgroup.procs' && ", d.display());
        }
        s + "exec \"$@\""
    }

    /// Members right now (empty when accounting is unavailable).
    pub fn pids(&self) -> Vec<u32> {
        let Some((_, dir)) = self.dirs.first() else { return Vec::new() };
        read_pids(dir)
    }

    /// Reads the CPU and memory counters.
    pub fn usage(&self) -> Usage {
        let mut u = Usage::default();
        for (kind, dir) in &self.dirs {
            match kind {
                Kind::V2 => read_v2(dir, &mut u),
                Kind::V1Cpuacct => read_v1_cpu(dir, &mut u),
                Kind::V1Memory => {
                    u.cgroup_mem_peak_bytes = read_u64(&dir.join("memory.max_usage_in_bytes"));
                }
            }
        }
        u
    }

    /// Kills every member (processes that escaped their process group too).
    pub fn kill_all(&self) {
        for (_, d) in &self.dirs {
            for pid in read_pids(d) {
                kill_pid(pid);
            }
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        for (_, d) in &self.dirs {
            drain_and_remove(d);
        }
    }
}

fn read_pids(dir: &Path) -> Vec<u32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn read_v2(dir: &Path, u: &mut Usage) {
    let stat = fs::read_to_string(dir.join("cpu.stat")).unwrap_or_default();
    let field = |name: &str| {
        stat.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok()).map(|us| us as f64 / 1e6)
    };
    u.cpu_s = field("usage_usec ");
    u.user_s = field("user_usec ");
    u.system_s = field("system_usec ");
    if let Some(peak) = read_u64(&dir.join("memory.peak")) {
        u.cgroup_mem_peak_bytes = Some(peak);
    }
}

fn read_v1_cpu(dir: &Path, u: &mut Usage) {
    u.cpu_s = read_u64(&dir.join("cpuacct.usage")).map(|ns| ns as f64 / 1e9);
    let stat = fs::read_to_string(dir.join("cpuacct.stat")).unwrap_or_default();
    let ticks = |name: &str| {
        stat.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok()).map(|t| t as f64 / 100.0)
    };
    u.user_s = ticks("user ");
    u.system_s = ticks("system ");
}

/// Kills the members of a group directory, waits for them, removes it.
fn drain_and_remove(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids = read_pids(dir);
        for &p in &pids {
            kill_pid(p);
        }
        if (pids.is_empty() && fs::remove_dir(dir).is_ok()) || Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A process's memory in bytes: its proportional set size (`Pss` of
/// `/proc/PID/smaps_rollup`: each page shared with N processes counts
/// 1/N), so the processes a forking server (globus-gridftp-server: one
/// per session) shares pages with add up to what they hold together, not
/// N times the shared pages. `VmRSS` when that is unreadable; 0 when the
/// process is gone.
pub fn mem_bytes(pid: u32) -> u64 {
    let rollup = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    kb_field(&rollup, "Pss:").unwrap_or_else(|| rss_bytes(pid))
}

/// Resident memory of a process in bytes (`VmRSS`), 0 when it is gone.
pub fn rss_bytes(pid: u32) -> u64 {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    kb_field(&text, "VmRSS:").unwrap_or(0)
}

/// The bytes of a `Name:   123 kB` line of a /proc file.
fn kb_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_since_a_snapshot_leaves_out_what_came_before() {
        let at_start = Usage { cpu_s: Some(0.25), user_s: Some(0.2), system_s: None, cgroup_mem_peak_bytes: Some(1) };
        let at_end = Usage { cpu_s: Some(2.0), user_s: Some(1.5), system_s: Some(0.5), cgroup_mem_peak_bytes: Some(9) };
        let run = at_end.since(&at_start);
        assert_eq!((run.cpu_s, run.user_s, run.system_s), (Some(1.75), Some(1.3), Some(0.5)));
        assert_eq!(run.cgroup_mem_peak_bytes, Some(9));
        assert_eq!(Usage::default().since(&at_start), Usage::default(), "nothing read, nothing used");
    }

    #[test]
    fn memory_is_the_proportional_set_size() {
        let rollup = "5586b2ce2000-7ffcb8daa000 ---p 00000000 00:00 0  [rollup]\n\
            Rss:                1612 kB\nPss:                 331 kB\nPss_Dirty:           116 kB\n";
        assert_eq!(kb_field(rollup, "Pss:"), Some(331 * 1024), "Pss, not Rss nor Pss_Dirty");
        let me = std::process::id();
        let (pss, rss) = (mem_bytes(me), rss_bytes(me));
        assert!(pss > 0 && pss <= rss, "PSS {pss} of this process is at most its RSS {rss}");
        assert_eq!(mem_bytes(u32::MAX), 0, "a process that is gone holds nothing");
    }
}

//! The network between side A and side B: a fresh namespace with only `lo`
//! (loopback, so other traffic on the machine never pollutes the counters) or
//! the `lightpath-wan` emulator between two namespaces. In both cases a
//! sentinel process sits in each namespace, so its `/proc/<pid>/net/*` files
//! give that namespace's byte counters and listening sockets without `setns`.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::cgroup::Group;
use crate::proc::{check_stop, run_quiet, Proc};
use crate::scenario::{PathConfig, PathKind};
use crate::wanlab;

/// The two ends of the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

impl Side {
    fn idx(self) -> usize {
        match self {
            Side::A => 0,
            Side::B => 1,
        }
    }
}

/// Byte counters of the counted interfaces of side B (the receiving side).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bytes {
    pub tx: u64,
    pub rx: u64,
}

/// A running path; everything is torn down on drop (sentinels, lab, namespace).
pub struct NetPath {
    sentinels: Vec<Proc>,
    lab: Option<wanlab::Handle>,
    own_ns: Option<String>,
    ns: [String; 2],
    addr: [Ipv4Addr; 2],
    ifaces: Vec<String>,
    pub kind: PathKind,
}

const PREFIX: &str = "lpb";
const NETNS_ETC: &str = "/etc/netns";

/// A short unique prefix: `lpb<pid>s<seq>`.
fn new_prefix() -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    format!("{PREFIX}{}s{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed))
}

impl NetPath {
    /// Sets the path up (root needed).
    pub fn start(cfg: &PathConfig) -> Result<NetPath> {
        let prefix = new_prefix();
        let (lab, own_ns, ns, addr) = match cfg.kind {
            PathKind::Loopback => {
                let name = format!("{prefix}lo");
                run_quiet(Command::new("ip").args(["netns", "add", &name]))?;
                let up = run_quiet(Command::new("ip").args(["-n", &name, "link", "set", "lo", "up"]));
                if let Err(e) = up {
                    let _ = run_quiet(Command::new("ip").args(["netns", "del", &name]));
                    return Err(e);
                }
                let lo = Ipv4Addr::LOCALHOST;
                (None, Some(name.clone()), [name.clone(), name], [lo, lo])
            }
            PathKind::Emulated => {
                let (h, ns, addr) = wanlab::start(&prefix, cfg)?;
                (Some(h), None, ns, addr)
            }
        };
        let mut path = NetPath { sentinels: Vec::new(), lab, own_ns, ns, addr, ifaces: Vec::new(), kind: cfg.kind };
        path.write_hosts()?;
        path.start_sentinels()?;
        path.ifaces = path.pick_ifaces()?;
        if let Some(max) = cfg.tcp_buffer_max {
            path.set_sysctl("net.ipv4.tcp_rmem", &format!("4096 131072 {}", max.0))?;
            path.set_sysctl("net.ipv4.tcp_wmem", &format!("4096 16384 {}", max.0))?;
        }
        if cfg.tcp_fastopen {
            path.set_sysctl("net.ipv4.tcp_fastopen", "3")?;
        }
        Ok(path)
    }

    /// Gives each emulated namespace an `/etc/hosts` (through iproute2's
    /// `/etc/netns/<ns>/` overlay) that names both lab addresses: the Globus
    /// server resolves its own address at start and there is no DNS inside.
    fn write_hosts(&self) -> Result<()> {
        if self.kind == PathKind::Loopback {
            return Ok(());
        }
        let mut hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
        for (ns, addr) in self.ns.iter().zip(self.addr) {
            hosts += &format!("\n{addr} {ns}\n");
        }
        for ns in &self.ns {
            let dir = Path::new(NETNS_ETC).join(ns);
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join("hosts"), &hosts).with_context(|| format!("cannot write {}", dir.display()))?;
        }
        Ok(())
    }

    fn start_sentinels(&mut self) -> Result<()> {
        let distinct = if self.ns[0] == self.ns[1] { 1 } else { 2 };
        for ns in &self.ns[..distinct] {
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", ns, "sleep", "infinity"]);
            let p = Proc::spawn(&format!("sentinel {ns}"), cmd, None)?;
            self.sentinels.push(p);
        }
        // `ip netns exec` switches namespace before it execs sleep.
        let deadline = Instant::now() + Duration::from_secs(5);
        for i in 0..distinct {
            while !self.sentinel_ready(i) {
                if Instant::now() > deadline {
                    bail!("namespace {} did not come up", self.ns[i]);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(())
    }

    fn sentinel_ready(&self, i: usize) -> bool {
        let pid = self.sentinels[i].pid();
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        exe.file_name().is_some_and(|n| n == "sleep")
    }

    fn sentinel_pid(&self, side: Side) -> u32 {
        let i = side.idx().min(self.sentinels.len() - 1);
        self.sentinels[i].pid()
    }

    /// The interfaces of side B whose bytes are counted: `lo` on loopback,
    /// all but `lo` on the emulated path. Side B receives the data, after the
    /// emulated bottleneck (side A's TUN counts what enters the queue).
    fn pick_ifaces(&self) -> Result<Vec<String>> {
        let all = self.read_dev(Side::B)?;
        let want: Vec<String> =
            all.keys().filter(|n| (self.kind == PathKind::Loopback) == (n.as_str() == "lo")).cloned().collect();
        if want.is_empty() {
            bail!("no interface to count in namespace {} (found {:?})", self.ns[1], all.keys());
        }
        Ok(want)
    }

    fn read_dev(&self, side: Side) -> Result<BTreeMap<String, Bytes>> {
        let path = format!("/proc/{}/net/dev", self.sentinel_pid(side));
        let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
        Ok(parse_net_dev(&text))
    }

    /// Bytes sent and received so far on the counted interfaces of side B.
    pub fn counters(&self) -> Result<Bytes> {
        self.counter_reader().read()
    }

    /// A detached reader of side B's counters (for the sampler thread).
    pub fn counter_reader(&self) -> CounterReader {
        CounterReader { pid: self.sentinel_pid(Side::B), ifaces: self.ifaces.clone() }
    }

    pub fn addr(&self, side: Side) -> Ipv4Addr {
        self.addr[side.idx()]
    }

    pub fn ns(&self, side: Side) -> &str {
        &self.ns[side.idx()]
    }

    /// Forgets the TCP route metrics of both namespaces, TCP Fast Open
    /// cookies among them (`ip tcp_metrics flush all`; a namespace with
    /// none yet says so, which is not an error).
    pub fn forget_tcp_metrics(&self) {
        for ns in self.ns.iter() {
            let _ = run_quiet(Command::new("ip").args(["-n", ns, "tcp_metrics", "flush", "all"]));
        }
    }

    pub fn counted_ifaces(&self) -> &[String] {
        &self.ifaces
    }

    /// `program` inside the namespace of `side`, inside the cgroups of `group`.
    /// The shell joins the cgroups first: `ip netns exec` remounts `/sys`.
    pub fn command(&self, side: Side, group: &Group, program: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(group.join_script()).arg("sh");
        c.args(["ip", "netns", "exec", self.ns(side), program]);
        c
    }

    /// Waits until something listens on TCP `port` in the namespace of `side`.
    pub fn wait_listen(&self, side: Side, port: u16, limit: Duration, server: &mut Proc) -> Result<()> {
        let start = Instant::now();
        loop {
            if self.listening(side, port) {
                return Ok(());
            }
            if let Some(st) = server.try_wait()? {
                bail!("{} exited ({st}) before listening on port {port}", server.name);
            }
            if start.elapsed() > limit {
                bail!("{} did not listen on port {port} within {limit:?}", server.name);
            }
            check_stop()?;
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn listening(&self, side: Side, port: u16) -> bool {
        let pid = self.sentinel_pid(side);
        ["tcp", "tcp6"].iter().any(|f| {
            let text = std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).unwrap_or_default();
            listens_on(&text, port)
        })
    }

    /// The emulator's counters (None on loopback).
    pub fn emu_snapshot(&self) -> Option<(lightpath_wan::DirCounters, lightpath_wan::DirCounters)> {
        self.lab.as_ref().map(wanlab::Handle::snapshot)
    }

    /// Sets a sysctl in every namespace of the path.
    pub fn set_sysctl(&self, key: &str, value: &str) -> Result<()> {
        let distinct = if self.ns[0] == self.ns[1] { 1 } else { 2 };
        for ns in &self.ns[..distinct] {
            run_quiet(Command::new("ip").args(["netns", "exec", ns, "sysctl", "-q", "-w", &format!("{key}={value}")]))?;
        }
        Ok(())
    }

    /// TCP settings and interface MTUs inside a namespace.
    pub fn settings(&self, side: Side) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        let keys = [
            "net.ipv4.tcp_congestion_control",
            "net.ipv4.tcp_rmem",
            "net.ipv4.tcp_wmem",
            "net.core.rmem_max",
            "net.core.wmem_max",
            "net.ipv4.tcp_fastopen",
        ];
        for k in keys {
            let out = run_quiet(Command::new("ip").args(["netns", "exec", self.ns(side), "sysctl", "-n", k]));
            m.insert(k.to_string(), out.map_or_else(|e| format!("? ({e})"), |s| s.trim().replace('\t', " ")));
        }
        if let Ok(out) = run_quiet(Command::new("ip").args(["-n", self.ns(side), "-o", "link"])) {
            for line in out.lines() {
                if let Some((name, mtu)) = parse_link_mtu(line) {
                    m.insert(format!("mtu.{name}"), mtu);
                }
            }
        }
        m
    }
}

impl Drop for NetPath {
    fn drop(&mut self) {
        self.sentinels.clear();
        if self.kind == PathKind::Emulated {
            for ns in &self.ns {
                let _ = std::fs::remove_dir_all(Path::new(NETNS_ETC).join(ns));
            }
        }
        if let Some(ns) = &self.own_ns {
            let _ = run_quiet(Command::new("ip").args(["netns", "del", ns]));
        }
    }
}

/// Reads the byte counters of some interfaces of one namespace.
#[derive(Clone, Debug)]
pub struct CounterReader {
    pid: u32,
    ifaces: Vec<String>,
}

impl CounterReader {
    pub fn read(&self) -> Result<Bytes> {
        let path = format!("/proc/{}/net/dev", self.pid);
        let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
        let dev = parse_net_dev(&text);
        let mut b = Bytes::default();
        for i in &self.ifaces {
            let c = dev.get(i).copied().unwrap_or_default();
            b.tx += c.tx;
            b.rx += c.rx;
        }
        Ok(b)
    }
}

/// Parses `/proc/net/dev` into per-interface byte counters.
pub fn parse_net_dev(text: &str) -> BTreeMap<String, Bytes> {
    text.lines()
        .skip(2)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let f: Vec<u64> = rest.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            (f.len() >= 9).then(|| (name.trim().to_string(), Bytes { rx: f[0], tx: f[8] }))
        })
        .collect()
}

/// True when `/proc/net/tcp{,6}` text has a LISTEN socket on `port`.
pub fn listens_on(text: &str, port: u16) -> bool {
    text.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let local_port = f.get(1).and_then(|a| a.rsplit(':').next());
        let p = local_port.and_then(|p| u16::from_str_radix(p, 16).ok());
        p == Some(port) && f.get(3) == Some(&"0A")
    })
}

fn parse_link_mtu(line: &str) -> Option<(String, String)> {
    let name = line.split(':').nth(1)?.trim().split('@').next()?.to_string();
    let mut it = line.split_whitespace();
    it.find(|w| *w == "mtu")?;
    Some((name, it.next()?.to_string()))
}

/// Kill what still runs in the namespace `name` (a loopback path's
/// `sleep infinity` sentinel, left running when its bench was killed
/// outright: deleting the namespace's name does not end it).
fn kill_inside(name: &str) {
    let Ok(pids) = run_quiet(Command::new("ip").args(["netns", "pids", name])) else { return };
    for pid in pids.split_whitespace().filter(|p| p.bytes().all(|b| b.is_ascii_digit())) {
        let _ = run_quiet(Command::new("kill").args(["-9", pid]));
    }
}

/// Removes namespaces (and emulator labs) left by harness processes that died.
pub fn cleanup_stale() {
    let Ok(out) = run_quiet(Command::new("ip").args(["netns", "list"])) else { return };
    let mut dead = std::collections::BTreeSet::new();
    for line in out.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else { continue };
        let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
        if pid.is_empty() || alive {
            continue;
        }
        if let Some(lab) = name.strip_suffix("-a").or_else(|| name.strip_suffix("-b")) {
            dead.insert(lab.to_string());
        } else {
            kill_inside(name);
            let _ = run_quiet(Command::new("ip").args(["netns", "del", name]));
        }
    }
    for prefix in dead {
        wanlab::cleanup(&prefix);
    }
    for e in std::fs::read_dir(NETNS_ETC).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid: String = name.strip_prefix(PREFIX).unwrap_or("").chars().take_while(char::is_ascii_digit).collect();
        if !pid.is_empty() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

//! A running lab: two namespaces joined by the delay line.
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use lightpath_sys::tun::{Tun, TunOptions};

use crate::counters::{Counters, LiveCounters};
use crate::impair::Impair;
use crate::line::{Line, Shared};
use crate::link::LinkModel;
use crate::netns::{self, Watchdog};
use crate::ring::PacketRing;
use crate::{check_spec, LabError, PathSpec, Side};

/// Name of the emulated interface inside each namespace.
pub const IFNAME: &str = "wan0";
/// Kernel-side queue of each TUN device, in packets (the kernel drops beyond
/// it when the emulator falls behind; see `DirCounters::tun_dropped`).
const TXQUEUELEN: &str = "10000";

/// A running WAN emulator. Dropping it stops the delay line, ends every
/// process left in its namespaces and deletes them.
#[derive(Debug)]
pub struct Lab {
    prefix: String,
    names: [String; 2],
    addrs: [Ipv4Addr; 2],
    spec: PathSpec,
    shared: Arc<Shared>,
    live: [Arc<LiveCounters>; 2],
    threads: Vec<JoinHandle<()>>,
    watchdog: Option<Watchdog>,
    /// The namespaces this lab made, with their inodes ([`netns::ino`]):
    /// only those are removed when it ends. Removed by name, a lab took
    /// another's namespaces along (one that had reused the prefix after
    /// a `lab down`, or that failed to start beside it). Each is held open
    /// while the lab runs, so that its inode number, which the kernel
    /// hands out again once a namespace is freed, stays this one's.
    made: Vec<(String, u64, std::fs::File)>,
}

fn check_prefix(prefix: &str) -> Result<(), LabError> {
    let ok =
        (1..=24).contains(&prefix.len()) && prefix.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(LabError::BadPrefix(prefix.to_string()))
    }
}

fn ns_names(prefix: &str) -> [String; 2] {
    [format!("{prefix}-a"), format!("{prefix}-b")]
}

/// Third octet of the lab's addresses: a hash of the prefix (1..=250), so a
/// lab's addresses are recognizable; they exist only inside its namespaces.
fn subnet(prefix: &str) -> u8 {
    let h = prefix.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ b as u32).wrapping_mul(0x0100_0193));
    (h % 250 + 1) as u8
}

/// Deletes the namespaces of lab `prefix` and ends the processes in them.
/// Safe to call when nothing is left.
pub fn cleanup_prefix(prefix: &str) -> Result<(), LabError> {
    check_prefix(prefix)?;
    for name in ns_names(prefix) {
        netns::remove(&name, Duration::from_millis(500))?;
    }
    Ok(())
}

impl Lab {
    /// Creates namespaces `<prefix>-a` and `<prefix>-b`, a TUN device in each
    /// (`wan0`, addresses from [`Lab::addr`]) and starts the delay line on
    /// two threads of this process.
    pub fn start(prefix: &str, spec: &PathSpec) -> Result<Lab, LabError> {
        check_prefix(prefix)?;
        check_spec(spec)?;
        let names = ns_names(prefix);
        for n in &names {
            if netns::exists(n) {
                return Err(LabError::Exists(n.clone(), prefix.to_string()));
            }
        }
        let n = subnet(prefix);
        let mut lab = Lab {
            prefix: prefix.to_string(),
            names: names.clone(),
            addrs: [Ipv4Addr::new(10, 77, n, 1), Ipv4Addr::new(10, 77, n, 2)],
            spec: spec.clone(),
            shared: Arc::new(Shared::new()),
            live: Default::default(),
            threads: Vec::new(),
            watchdog: None,
            made: Vec::new(),
        };
        // From here on, Drop cleans up whatever was made.
        lab.watchdog = Some(Watchdog::spawn()?);
        for n in &names {
            netns::add(n)?;
            lab.made(n);
            for key in ["all", "default"] {
                netns::set_sysctl(n, &format!("net.ipv6.conf.{key}.disable_ipv6"), "1")?;
            }
        }
        let tuns = [lab.make_tun(Side::A)?, lab.make_tun(Side::B)?];
        lab.spawn_lines(tuns)?;
        Ok(lab)
    }

    /// Opens a TUN device, moves it into the side's namespace, configures it.
    fn make_tun(&self, side: Side) -> Result<Arc<Tun>, LabError> {
        let opts = TunOptions { nonblocking: true, multi_queue: false, offload: self.spec.offload };
        let tun = Tun::open("lpt%d", opts).map_err(|e| LabError::NoTun(e.to_string()))?;
        let ns = self.ns(side);
        let (me, peer) = (self.addr(side), self.addr(other(side)));
        let mtu = self.spec.mtu.to_string();
        netns::ip(&["link", "set", "dev", tun.name(), "netns", ns])?;
        let in_ns = |args: &[&str]| netns::ip(&[&["-n", ns], args].concat());
        in_ns(&["link", "set", "dev", tun.name(), "name", IFNAME])?;
        in_ns(&["link", "set", "dev", IFNAME, "mtu", &mtu])?;
        in_ns(&["link", "set", "dev", IFNAME, "txqueuelen", TXQUEUELEN])?;
        let cidr = format!("{me}/32");
        in_ns(&["addr", "add", &cidr, "peer", &format!("{peer}/32"), "dev", IFNAME])?;
        in_ns(&["link", "set", "dev", IFNAME, "up"])?;
        in_ns(&["link", "set", "dev", "lo", "up"])?;
        Ok(Arc::new(tun))
    }

    fn spawn_lines(&mut self, tuns: [Arc<Tun>; 2]) -> Result<(), LabError> {
        let s = &self.spec;
        // With offload a read may be one 64 KiB segment and its header.
        let max_pkt = if s.offload { 65_536 + lightpath_sys::tun::VNET_HDR_LEN } else { s.mtu as usize };
        for (i, name) in ["wan-a2b", "wan-b2a"].into_iter().enumerate() {
            let model = LinkModel::new(s.rate_bps, s.one_way_ns(), s.queue_limit());
            let seed = 0x5eed_0000 + i as u64;
            let impair = Impair::new(s.loss, s.reorder, s.corrupt, seed);
            let ring = PacketRing::new(s.ring_bytes() as usize, max_pkt);
            let (input, output) = (tuns[i].clone(), tuns[1 - i].clone());
            let line =
                Line::new(input, output, model, impair, ring, self.shared.clone(), max_pkt).with_offload(s.offload);
            self.live[i] = line.counters.clone();
            let handle = std::thread::Builder::new().name(name.into()).spawn(move || line.run())?;
            self.threads.push(handle);
        }
        Ok(())
    }

    /// The lab's prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The path being emulated.
    pub fn spec(&self) -> &PathSpec {
        &self.spec
    }

    /// Namespace name of `side`.
    pub fn ns(&self, side: Side) -> &str {
        &self.names[side.index()]
    }

    /// Address of `side` (on its `wan0`).
    pub fn addr(&self, side: Side) -> Ipv4Addr {
        self.addrs[side.index()]
    }

    /// `ip netns exec <ns> <program>`: add arguments and run it.
    pub fn command(&self, side: Side, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.ns(side), program]);
        cmd
    }

    /// Runs `f` on a thread inside `side`'s namespace.
    pub fn in_ns<T: Send>(&self, side: Side, f: impl FnOnce() -> T + Send) -> Result<T, LabError> {
        netns::in_ns(self.ns(side), f)
    }

    /// Sets a sysctl in both namespaces (e.g. `net.ipv4.tcp_rmem`).
    pub fn set_sysctl(&self, key: &str, value: &str) -> Result<(), LabError> {
        for n in &self.names {
            netns::set_sysctl(n, key, value)?;
        }
        Ok(())
    }

    /// Raises the TCP autotuning maxima (`tcp_rmem`/`tcp_wmem`) of both
    /// namespaces to `max_bytes`, as a tuned DTN would have.
    pub fn tune_tcp_buffers(&self, max_bytes: u64) -> Result<(), LabError> {
        self.set_sysctl("net.ipv4.tcp_rmem", &format!("4096 131072 {max_bytes}"))?;
        self.set_sysctl("net.ipv4.tcp_wmem", &format!("4096 16384 {max_bytes}"))
    }

    /// Counters of both directions, including the kernel's TUN queue drops.
    pub fn counters(&self) -> Counters {
        let mut c = Counters { a_to_b: self.live[0].snapshot(), b_to_a: self.live[1].snapshot() };
        if let Some((_, tx)) = netns::drop_stats(self.ns(Side::A), IFNAME) {
            c.a_to_b.tun_dropped = tx;
        }
        if let Some((_, tx)) = netns::drop_stats(self.ns(Side::B), IFNAME) {
            c.b_to_a.tun_dropped = tx;
        }
        c
    }

    /// Takes the link down in both directions for `dur`, starting now (does
    /// not block). Packets that arrive at the link or would start
    /// transmission while it is down are dropped.
    pub fn outage(&self, dur: Duration) {
        self.shared.outage(dur);
    }

    /// Stops the delay line and deletes the namespaces (also done by Drop).
    pub fn shutdown(mut self) -> Result<(), LabError> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), LabError> {
        self.shared.stop.store(true, Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(w) = self.watchdog.take() {
            w.finish();
        }
        for (name, ino, _held) in std::mem::take(&mut self.made) {
            if netns::ino(&name) == Some(ino) {
                netns::remove(&name, Duration::from_millis(500))?;
            }
        }
        Ok(())
    }

    /// Note the namespace `name` as this lab's, for its end (and its
    /// watchdog's, should this process die).
    fn made(&mut self, name: &str) {
        use std::os::unix::fs::MetadataExt;
        let Ok(held) = std::fs::File::open(std::path::Path::new("/run/netns").join(name)) else { return };
        let Ok(ino) = held.metadata().map(|m| m.ino()) else { return };
        self.made.push((name.to_string(), ino, held));
        if let Some(w) = self.watchdog.as_mut() {
            w.guard(name, ino);
        }
    }
}

fn other(side: Side) -> Side {
    match side {
        Side::A => Side::B,
        Side::B => Side::A,
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        assert!(check_prefix("lp").is_ok());
        assert!(check_prefix("t-1_x").is_ok());
        for bad in ["", "a b", "x/y", "../z", "a-very-long-prefix-over-24-chars"] {
            assert!(check_prefix(bad).is_err(), "{bad}");
        }
        assert_eq!(ns_names("lp"), ["lp-a", "lp-b"]);
    }

    #[test]
    fn lab_can_be_shared_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Lab>();
    }

    #[test]
    fn subnet_is_stable_and_in_range() {
        assert_eq!(subnet("lp"), subnet("lp"));
        for p in ["a", "b", "lp", "test-rtt", "x9"] {
            assert!((1..=250).contains(&subnet(p)));
        }
    }
}

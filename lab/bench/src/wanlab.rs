//! The bridge to the `lightpath-wan` emulator (two namespaces joined by a
//! TUN delay line, running on threads of this process). Kept in one place
//! so the rest of the harness only sees namespace names and addresses.

use std::net::Ipv4Addr;

use anyhow::{anyhow, Result};
use lightpath_wan::{DirCounters, Lab, PathSpec, Side};
use serde::{Deserialize, Serialize};

use crate::scenario::PathConfig;

/// Keeps the lab alive; dropping it tears it down.
pub struct Handle(Lab);

/// What the emulator did during one run, in the data direction (A to B),
/// plus the drops of the reverse (ACK) direction.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct EmuStats {
    pub forwarded_bytes: u64,
    pub forwarded_packets: u64,
    pub dropped_queue: u64,
    pub dropped_loss: u64,
    /// Dropped by the kernel before the emulator read them: non-zero means
    /// the emulator did not keep up and the figures understate the path.
    pub dropped_tun: u64,
    pub reverse_dropped: u64,
    /// The latest a packet left the delay line since the lab started (the
    /// whole scenario so far, not this run alone).
    pub late_max_ms: f64,
    /// Packets of this run that left the delay line more than 1 ms late:
    /// the emulator fell behind (starved of CPU), and the run saw a worse
    /// path than the scenario's.
    #[serde(default)]
    pub late_over_1ms: u64,
}

/// The emulator's path for a scenario's `[path]`.
pub fn spec(cfg: &PathConfig) -> PathSpec {
    PathSpec {
        rate_bps: cfg.rate.map_or(0, |r| r.0),
        rtt: cfg.rtt.map_or_else(Default::default, |d| d.0),
        loss: cfg.loss_percent / 100.0,
        reorder: cfg.reorder_percent / 100.0,
        corrupt: cfg.corrupt_percent / 100.0,
        mtu: cfg.mtu.unwrap_or(1500),
        queue_bytes: cfg.queue.map(|q| q.0),
        offload: cfg.offload,
    }
}

/// Whether this machine can emulate the path (checked before anything runs).
pub fn check(cfg: &PathConfig) -> Result<()> {
    lightpath_wan::check_spec(&spec(cfg)).map_err(|e| anyhow!("{e}"))
}

/// Starts a lab; returns it with its namespace names and addresses.
pub fn start(prefix: &str, cfg: &PathConfig) -> Result<(Handle, [String; 2], [Ipv4Addr; 2])> {
    let lab = Lab::start(prefix, &spec(cfg)).map_err(|e| anyhow!("wan lab: {e}"))?;
    let ns = [lab.ns(Side::A).to_string(), lab.ns(Side::B).to_string()];
    let addr = [lab.addr(Side::A), lab.addr(Side::B)];
    Ok((Handle(lab), ns, addr))
}

/// Removes a lab left by a dead harness.
pub fn cleanup(prefix: &str) {
    let _ = lightpath_wan::cleanup_prefix(prefix);
}

impl Handle {
    /// Counters since the lab started.
    pub fn snapshot(&self) -> (DirCounters, DirCounters) {
        let c = self.0.counters();
        (c.a_to_b, c.b_to_a)
    }
}

/// The difference of two snapshots.
pub fn delta(before: &(DirCounters, DirCounters), after: &(DirCounters, DirCounters)) -> EmuStats {
    let (b, a) = (&before.0, &after.0);
    EmuStats {
        forwarded_bytes: a.forwarded_bytes - b.forwarded_bytes,
        forwarded_packets: a.forwarded_packets - b.forwarded_packets,
        dropped_queue: a.dropped_queue - b.dropped_queue,
        dropped_loss: a.dropped_loss - b.dropped_loss,
        dropped_tun: a.tun_dropped.saturating_sub(b.tun_dropped),
        reverse_dropped: after.1.dropped().saturating_sub(before.1.dropped()),
        late_max_ms: a.late_max_ns as f64 / 1e6,
        late_over_1ms: a.late_over_1ms.saturating_sub(b.late_over_1ms),
    }
}

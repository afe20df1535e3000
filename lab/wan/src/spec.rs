//! What path to emulate, and whether this machine can.
use std::time::Duration;

use crate::LabError;

/// The emulated path. Rates count IP packets (headers included): a TCP
/// transfer's goodput is at most `rate * (mtu - 52) / mtu` with timestamps.
#[derive(Debug, Clone, PartialEq)]
pub struct PathSpec {
    /// Bottleneck rate in bits per second, each direction.
    pub rate_bps: u64,
    /// Round-trip time; each direction gets half as propagation delay.
    pub rtt: Duration,
    /// Random loss probability per packet (0..1), each direction.
    pub loss: f64,
    /// Probability that a packet is delivered after the next one (0..=1).
    pub reorder: f64,
    /// Probability that one bit of a packet is flipped (0..=1).
    pub corrupt: f64,
    /// MTU of both TUN devices (bytes of IP packet).
    pub mtu: u32,
    /// Drop-tail queue limit in bytes; `None` means one BDP (at least 32
    /// packets).
    pub queue_bytes: Option<u64>,
    /// The TUN devices offload segmentation and checksums, as the NICs of
    /// data transfer nodes do (TSO, GRO): the stacks hand over and take
    /// TCP segments of up to 64 KiB, and the delay line charges each for
    /// the packets of the MTU it stands for. Rate, queue and delay are the
    /// same; the hosts' per-packet work is not. Only on a clean path: an
    /// impairment would hit a whole segment at once, and checksums are not
    /// computed (`check_values` refuses the mix).
    pub offload: bool,
}

impl Default for PathSpec {
    fn default() -> PathSpec {
        PathSpec {
            rate_bps: 1_000_000_000,
            rtt: Duration::from_millis(95),
            loss: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            mtu: 1500,
            queue_bytes: None,
            offload: false,
        }
    }
}

/// Cost of one packet through the lab on the reference machine (2 cores,
/// both TCP endpoints, the delay line and the kernel stacks sharing them):
/// a fixed part in ns...
pub const PACKET_COST_NS: f64 = 4_000.0;
/// ...and a part per byte (copies). Fitted to iperf3 through the emulator
/// with no delay: about 2.4 Gbit/s at MTU 1500 and 5 Gbit/s at MTU 9000
/// (README.md); the limit below keeps some margin.
pub const BYTE_COST_NS: f64 = 1.2;
/// Highest rate accepted at any MTU.
pub const MAX_RATE_BPS: u64 = 40_000_000_000;
/// Set this environment variable to skip the capacity limit (to measure a
/// faster machine).
pub const NO_CAPACITY_CHECK_ENV: &str = "LIGHTPATH_LAB_NO_CAPACITY_CHECK";

/// Highest rate this machine is known to emulate faithfully at `mtu`.
pub fn capacity_bps(mtu: u32) -> u64 {
    let per_packet_ns = PACKET_COST_NS + BYTE_COST_NS * mtu as f64;
    (mtu as f64 * 8.0 / per_packet_ns * 1e9) as u64
}

/// Smallest and largest MTU (IPv4 minimum datagram a host must take;
/// the TUN driver's maximum).
const MTU_RANGE: std::ops::RangeInclusive<u32> = 576..=65535;

impl PathSpec {
    /// One-way propagation delay in ns.
    pub fn one_way_ns(&self) -> u64 {
        (self.rtt.as_nanos() / 2) as u64
    }

    /// Bandwidth-delay product in bytes.
    pub fn bdp_bytes(&self) -> u64 {
        (self.rate_bps as u128 * self.rtt.as_nanos() / 8_000_000_000) as u64
    }

    /// The drop-tail limit in effect.
    pub fn queue_limit(&self) -> u64 {
        self.queue_bytes.unwrap_or_else(|| self.bdp_bytes().max(32 * self.mtu as u64))
    }

    /// Bytes of delay-line buffer one direction needs: queue plus bytes in
    /// flight over the one-way delay, with slack.
    pub fn ring_bytes(&self) -> u64 {
        let flight = (self.rate_bps as u128 * self.one_way_ns() as u128 / 8_000_000_000) as u64;
        (self.queue_limit() + flight) / 4 * 5 + 64 * self.mtu as u64 + (1 << 20)
    }

    /// Largest goodput TCP can reach (timestamps on, IPv4): payload share of
    /// each full-size packet times the rate.
    pub fn tcp_goodput_bps(&self) -> f64 {
        self.rate_bps as f64 * (self.mtu as f64 - 52.0) / self.mtu as f64
    }
}

/// Checks the values alone, without looking at the machine.
pub fn check_values(spec: &PathSpec) -> Result<(), LabError> {
    let err = |m: String| Err(LabError::Spec(m));
    if !MTU_RANGE.contains(&spec.mtu) {
        return err(format!("MTU {} is outside {MTU_RANGE:?}", spec.mtu));
    }
    if spec.rate_bps == 0 || spec.rate_bps > MAX_RATE_BPS {
        return err(format!("rate {} bit/s is outside 1..={MAX_RATE_BPS}", spec.rate_bps));
    }
    let cap = capacity_bps(spec.mtu);
    if spec.rate_bps > cap && std::env::var_os(NO_CAPACITY_CHECK_ENV).is_none() {
        return err(format!(
            "rate {}bit/s needs {} packets/s at MTU {}; this machine emulates about {}bit/s \
             ({} packets/s) at that MTU: use a larger MTU or a lower rate \
             (or set {NO_CAPACITY_CHECK_ENV}=1 on a faster machine)",
            crate::parse::format_rate(spec.rate_bps),
            spec.rate_bps / (8 * spec.mtu as u64),
            spec.mtu,
            crate::parse::format_rate(cap),
            cap / (8 * spec.mtu as u64),
        ));
    }
    if spec.offload && (spec.loss > 0.0 || spec.reorder > 0.0 || spec.corrupt > 0.0) {
        return err("offload carries TCP segments of up to 64 KiB, each standing for many packets, \
                    with no checksum computed: loss, reordering and corruption need it off"
            .into());
    }
    if spec.rtt > Duration::from_secs(10) {
        return err(format!("RTT {:?} is above 10 s", spec.rtt));
    }
    for (name, p, max) in
        [("loss", spec.loss, 0.999_999), ("reorder", spec.reorder, 1.0), ("corrupt", spec.corrupt, 1.0)]
    {
        if !(0.0..=max).contains(&p) {
            return err(format!("{name} probability {p} is outside 0..={max}"));
        }
    }
    Ok(())
}

/// Checks that this machine can emulate `spec`: values in range, enough
/// memory for the delay lines, root, a TUN driver and `ip`.
pub fn check_spec(spec: &PathSpec) -> Result<(), LabError> {
    check_values(spec)?;
    let need = 2 * spec.ring_bytes();
    if let Some(avail) = mem_available() {
        if need > avail / 2 {
            return Err(LabError::Spec(format!(
                "the delay lines need {} MiB (queue + bytes in flight), more than half of the \
                 {} MiB available: lower the rate, RTT or queue",
                need >> 20,
                avail >> 20
            )));
        }
    }
    if !rustix::process::geteuid().is_root() {
        return Err(LabError::NotRoot);
    }
    if let Err(e) = std::fs::metadata("/dev/net/tun") {
        return Err(LabError::NoTun(format!("/dev/net/tun: {e}")));
    }
    crate::netns::ip(&["-V"]).map(|_| ())
}

fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_queue_is_one_bdp() {
        let s = PathSpec::default(); // 1 Gbit/s, 95 ms
        assert_eq!(s.bdp_bytes(), 11_875_000);
        assert_eq!(s.queue_limit(), 11_875_000);
        let small = PathSpec { rtt: Duration::ZERO, ..PathSpec::default() };
        assert_eq!(small.queue_limit(), 32 * 1500);
        assert!(s.ring_bytes() > s.queue_limit() + s.bdp_bytes() / 2);
    }

    #[test]
    fn rejects_what_cannot_be_emulated() {
        let ok = PathSpec::default();
        assert!(check_values(&ok).is_ok());
        let bad = [
            PathSpec { mtu: 100, ..ok.clone() },
            PathSpec { mtu: 70_000, ..ok.clone() },
            PathSpec { rate_bps: 0, ..ok.clone() },
            PathSpec { rate_bps: 3_000_000_000, mtu: 1500, ..ok.clone() },
            PathSpec { loss: 1.0, ..ok.clone() },
            PathSpec { reorder: -0.1, ..ok.clone() },
            PathSpec { corrupt: f64::NAN, ..ok.clone() },
            PathSpec { rtt: Duration::from_secs(11), ..ok.clone() },
        ];
        for s in bad {
            let e = check_values(&s).unwrap_err().to_string();
            assert!(e.starts_with("cannot emulate"), "{e}");
        }
    }

    #[test]
    fn capacity_model() {
        let c1500 = capacity_bps(1500);
        let c9000 = capacity_bps(9000);
        assert!((2_000_000_000..2_200_000_000).contains(&c1500), "{c1500}");
        assert!((4_500_000_000..5_000_000_000).contains(&c9000), "{c9000}");
    }

    #[test]
    fn goodput_accounts_for_headers() {
        let s = PathSpec { mtu: 1500, ..PathSpec::default() };
        assert!((s.tcp_goodput_bps() - 965_333_333.3).abs() < 1.0);
    }
}

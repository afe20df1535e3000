//! `lightpath lab up | down | validate`.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::parse::{format_rate, parse_duration, parse_fraction, parse_rate, parse_size};
use crate::{cleanup_prefix, validate, Lab, PathSpec, Side};

/// `lightpath lab ...` arguments.
#[derive(Debug, Args)]
pub struct LabArgs {
    #[command(subcommand)]
    cmd: LabCmd,
}

#[derive(Debug, Subcommand)]
enum LabCmd {
    /// Start an emulated WAN between namespaces <prefix>-a and <prefix>-b and
    /// run in the foreground until Ctrl-C.
    Up(UpArgs),
    /// Remove the namespaces (and their processes) of a lab, e.g. after a crash.
    Down {
        /// Lab prefix.
        #[arg(long, default_value = "lp", env = "LIGHTPATH_LAB_PREFIX")]
        prefix: String,
    },
    /// Check the emulator against iperf3 and print a table (needs root, iperf3).
    Validate {
        /// Prefix for the temporary labs.
        #[arg(long, default_value = "lpv", env = "LIGHTPATH_LAB_PREFIX")]
        prefix: String,
    },
}

#[derive(Debug, Args)]
struct UpArgs {
    /// Lab prefix: namespaces are <prefix>-a and <prefix>-b.
    #[arg(long, default_value = "lp", env = "LIGHTPATH_LAB_PREFIX")]
    prefix: String,
    /// Bottleneck rate per direction in bits/s (IP packets), e.g. 1G, 200M.
    #[arg(long, default_value = "1G", value_parser = parse_rate, env = "LIGHTPATH_LAB_RATE")]
    rate: u64,
    /// Round-trip time, e.g. 95ms.
    #[arg(long, default_value = "95ms", value_parser = parse_duration, env = "LIGHTPATH_LAB_RTT")]
    rtt: Duration,
    /// Random loss per packet, e.g. 0.01% or 0.0001.
    #[arg(long, default_value = "0", value_parser = parse_fraction, env = "LIGHTPATH_LAB_LOSS")]
    loss: f64,
    /// Probability that a packet is delivered after the next one.
    #[arg(long, default_value = "0", value_parser = parse_fraction, env = "LIGHTPATH_LAB_REORDER")]
    reorder: f64,
    /// Probability that one bit of a packet is flipped.
    #[arg(long, default_value = "0", value_parser = parse_fraction, env = "LIGHTPATH_LAB_CORRUPT")]
    corrupt: f64,
    /// MTU of the emulated interfaces.
    #[arg(long, default_value_t = 1500, env = "LIGHTPATH_LAB_MTU")]
    mtu: u32,
    /// Drop-tail queue size, e.g. 12M (default: one BDP).
    #[arg(long, value_parser = parse_size, env = "LIGHTPATH_LAB_QUEUE")]
    queue: Option<u64>,
    /// Raise tcp_rmem/tcp_wmem maxima inside the namespaces to this size, e.g. 64M.
    #[arg(long, value_parser = parse_size, env = "LIGHTPATH_LAB_TCP_BUFFERS")]
    tcp_buffers: Option<u64>,
    /// Let servers inside the namespaces accept TCP Fast Open
    /// (net.ipv4.tcp_fastopen = 3; the kernel's default lets clients only).
    #[arg(long, env = "LIGHTPATH_LAB_FASTOPEN")]
    fastopen: bool,
    /// Segmentation and checksum offload on the emulated interfaces, as
    /// data transfer nodes' NICs have (TSO/GRO): same rate, queue and delay,
    /// less per-packet work in the hosts. Clean paths only.
    #[arg(long, env = "LIGHTPATH_LAB_OFFLOAD")]
    offload: bool,
    /// How often to print the counters.
    #[arg(long, default_value = "5s", value_parser = parse_duration, env = "LIGHTPATH_LAB_INTERVAL")]
    interval: Duration,
}

/// Entry point for `lightpath lab`.
pub fn run(args: LabArgs) -> anyhow::Result<()> {
    match args.cmd {
        LabCmd::Up(up) => run_up(up),
        LabCmd::Down { prefix } => {
            let there: Vec<String> =
                ["a", "b"].iter().map(|s| format!("{prefix}-{s}")).filter(|n| crate::netns::exists(n)).collect();
            if there.is_empty() {
                anyhow::bail!("no lab {prefix}: neither {prefix}-a nor {prefix}-b exists");
            }
            cleanup_prefix(&prefix).with_context(|| format!("removing lab {prefix}"))?;
            println!("lab {prefix}: namespace(s) {} removed", there.join(" and "));
            Ok(())
        }
        LabCmd::Validate { prefix } => {
            let checks = validate::standard_suite(&prefix)?;
            println!("{}", validate::table(&checks));
            let failed = validate::failures(&checks);
            anyhow::ensure!(failed == 0, "{failed} check(s) failed");
            Ok(())
        }
    }
}

fn run_up(up: UpArgs) -> anyhow::Result<()> {
    let spec = PathSpec {
        rate_bps: up.rate,
        rtt: up.rtt,
        loss: up.loss,
        reorder: up.reorder,
        corrupt: up.corrupt,
        mtu: up.mtu,
        queue_bytes: up.queue,
        offload: up.offload,
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handler")?;
    }
    let lab = Lab::start(&up.prefix, &spec).context("starting the lab")?;
    if let Some(max) = up.tcp_buffers {
        lab.tune_tcp_buffers(max)?;
    }
    if up.fastopen {
        lab.set_sysctl("net.ipv4.tcp_fastopen", "3")?;
    }
    print_banner(&lab);
    let mut next = Instant::now() + up.interval;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if Instant::now() >= next {
            println!("{}\n", lab.counters());
            next += up.interval;
        }
    }
    println!("final counters:\n{}", lab.counters());
    lab.shutdown()?;
    println!("lab {}: torn down", up.prefix);
    Ok(())
}

fn print_banner(lab: &Lab) {
    let s = lab.spec();
    println!(
        "lab {}: {} <-> {}, rate {}bit/s, RTT {:?}, MTU {}{}, queue {} bytes, loss {}, reorder {}, corrupt {}",
        lab.prefix(),
        lab.ns(Side::A),
        lab.ns(Side::B),
        format_rate(s.rate_bps),
        s.rtt,
        s.mtu,
        if s.offload { " (offload: TSO/GRO)" } else { "" },
        s.queue_limit(),
        s.loss,
        s.reorder,
        s.corrupt
    );
    println!(
        "  {} has {}, {} has {} (interface {}); e.g. ip netns exec {} iperf3 -s",
        lab.ns(Side::A),
        lab.addr(Side::A),
        lab.ns(Side::B),
        lab.addr(Side::B),
        crate::lab::IFNAME,
        lab.ns(Side::B)
    );
    println!("  Ctrl-C to stop and remove the namespaces");
}

//! The sampler: every `INTERVAL` it reads the namespace byte counters (so
//! throughput over time works for any tool) and the memory (PSS) of each
//! end's processes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::cgroup::{mem_bytes, Group};
use crate::netpath::{Bytes, CounterReader};
use crate::record::Sample;

/// Sampling period (at least every 0.5 s is what the plots need).
pub const INTERVAL: Duration = Duration::from_millis(100);

/// Extra early samples (ms after the client starts), so that runs shorter
/// than one period still see their processes' memory and a throughput ramp.
const EARLY_MS: [u64; 4] = [10, 25, 50, 75];

/// What the sampler collected.
#[derive(Debug, Default)]
pub struct Trace {
    pub samples: Vec<Sample>,
    pub peak_rss: Vec<u64>,
}

/// Samples until `stop` is set. `base` is the counter reading at `t0`.
pub fn run(path: &CounterReader, groups: &[&Group], t0: Instant, base: Bytes, stop: &AtomicBool) -> Trace {
    let mut trace = Trace { samples: vec![Sample(0.0, 0, 0)], peak_rss: vec![0; groups.len()] };
    // The servers are up and listening at `t0`: their memory then counts
    // too, so a server that exits with a run of a few milliseconds (iperf3
    // -s -1) is not left unsampled.
    sample_rss(groups, &mut trace);
    let mut early = EARLY_MS.iter().map(|&ms| t0 + Duration::from_millis(ms));
    let mut next = early.next().unwrap_or(t0 + INTERVAL);
    loop {
        let now = Instant::now();
        if next > now {
            // Short sleeps so the final sample follows the client's exit closely.
            std::thread::sleep((next - now).min(Duration::from_millis(10)));
            if !stop.load(Ordering::SeqCst) {
                continue;
            }
        }
        // Read before the sample: a stop set while it was taken (a read
        // can take a millisecond under load) gets one more sample after
        // it, so the last follows the client's exit (the bench's e2e test
        // saw the last sample 1.2 ms before the exit).
        let stopping = stop.load(Ordering::SeqCst);
        take(path, groups, t0, base, &mut trace);
        if stopping {
            return trace;
        }
        next = early.next().unwrap_or(next + INTERVAL);
        if next < now {
            next = now + INTERVAL;
        }
    }
}

fn take(path: &CounterReader, groups: &[&Group], t0: Instant, base: Bytes, trace: &mut Trace) {
    let t = t0.elapsed().as_secs_f64();
    if let Ok(c) = path.read() {
        let s = Sample(t, c.rx.saturating_sub(base.rx), c.tx.saturating_sub(base.tx));
        trace.samples.push(s);
    }
    sample_rss(groups, trace);
}

fn sample_rss(groups: &[&Group], trace: &mut Trace) {
    for (i, g) in groups.iter().enumerate() {
        let rss: u64 = g.pids().into_iter().map(mem_bytes).sum();
        trace.peak_rss[i] = trace.peak_rss[i].max(rss);
    }
}

/// Throughput series in bits per second between successive samples
/// (x = the midpoint of each interval), from the data-direction counter.
pub fn throughput(samples: &[Sample]) -> Vec<(f64, f64)> {
    samples
        .windows(2)
        .filter(|w| w[1].0 > w[0].0)
        .map(|w| {
            let dt = w[1].0 - w[0].0;
            let bytes = w[1].1.saturating_sub(w[0].1);
            ((w[0].0 + w[1].0) / 2.0, bytes as f64 * 8.0 / dt)
        })
        .collect()
}

/// CPU seconds used by this process so far (user + system).
pub fn self_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); `after` starts at field 3.
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (ticks(11) + ticks(12)) as f64 / 100.0
}

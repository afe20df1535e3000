//! Faults injected into a run (`[fault]` in a scenario), at the same
//! moment for every tool: one of the server's data connections destroyed
//! midway with `ss -K` in its namespace (the kernel resets the connection
//! at both ends, as a middlebox or a dead path would); or the client
//! interrupted (SIGINT) and run again.

use crate::proc::{check_stop, run_quiet, Ending, Proc};
use anyhow::Result;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// After `after` from `t0` (unless `stop` is set first), destroy one
/// established TCP connection in namespace `ns` that belongs to one of
/// `pids` and is not on the control port `port`. Says what it did.
pub fn kill_stream(
    ns: &str,
    pids: &dyn Fn() -> Vec<u32>,
    port: u16,
    after: Duration,
    t0: Instant,
    stop: &AtomicBool,
) -> String {
    while t0.elapsed() < after {
        if stop.load(Ordering::SeqCst) {
            return format!("the run ended before {:.2} s: nothing destroyed", after.as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let at = t0.elapsed().as_secs_f64();
    let ss = |args: &[&str]| run_quiet(Command::new("ip").args(["netns", "exec", ns, "ss"]).args(args));
    let list = match ss(&["-tnpH", "state", "established"]) {
        Ok(list) => list,
        Err(e) => return format!("at {at:.2} s: {e:#}"),
    };
    let Some((local, peer)) = data_connection(&list, &pids(), port) else {
        return format!("no data connection of the server at {at:.2} s");
    };
    match ss(&["-K", "-tn", "src", &local, "dst", &peer]) {
        Ok(_) => format!("destroyed data connection {local} -> {peer} at {at:.2} s"),
        Err(e) => format!("at {at:.2} s: {e:#}"),
    }
}

/// Run the client (`cmd` makes its command), interrupt it with SIGINT
/// (its process group, as a terminal's Ctrl-C) `after` from `t0`, wait
/// for it to stop, then run the same command again to the end, within
/// `limit` in all. The second run's ending with the time from `t0`, and
/// what happened. A client that ends before the interrupt is not run again.
pub fn interrupted_run(
    cmd: &dyn Fn() -> Command,
    logs: &Path,
    after: Duration,
    limit: Duration,
    t0: Instant,
) -> Result<((Ending, Duration), String)> {
    let mut first = Proc::spawn("client", cmd(), Some(&logs.join("client-interrupted")))?;
    while t0.elapsed() < after {
        if let Some(st) = first.try_wait()? {
            let said = format!("the client ended ({st}) before {:.2} s: not interrupted", after.as_secs_f64());
            return Ok(((Ending::Exited(st.code()), t0.elapsed()), said));
        }
        check_stop()?;
        std::thread::sleep(Duration::from_millis(5));
    }
    let at = t0.elapsed().as_secs_f64();
    first.signal_group(rustix::process::Signal::INT);
    let (ended, _) = first.wait_timeout(limit.saturating_sub(t0.elapsed()))?;
    let stopped = t0.elapsed().as_secs_f64();
    let mut second = Proc::spawn("client", cmd(), Some(&logs.join("client")))?;
    let (ending, _) = second.wait_timeout(limit.saturating_sub(t0.elapsed()))?;
    let said = format!("client interrupted at {at:.2} s, stopped at {stopped:.2} s ({ended:?}), run again to the end");
    Ok(((ending, t0.elapsed()), said))
}

/// The local and peer address of the first connection in `ss -tnpH state
/// established` output `list` that one of `pids` holds, with neither end
/// on `port`.
fn data_connection(list: &str, pids: &[u32], port: u16) -> Option<(String, String)> {
    let control = format!(":{port}");
    list.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (local, peer, users) = (f.get(2)?, f.get(3)?, f.get(4)?);
        let owned = pids.iter().any(|p| users.contains(&format!("pid={p},")));
        let data = !local.ends_with(&control) && !peer.ends_with(&control);
        (owned && data).then(|| (local.to_string(), peer.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &str = "\
0 0 10.1.0.1:2811 10.1.0.2:40000 users:((\"lightpath\",pid=7,fd=9))
0 8000 10.1.0.1:2812 10.1.0.2:40002 users:((\"lightpath\",pid=7,fd=21),(\"lightpath\",pid=7,fd=34))
0 0 10.1.0.1:5201 10.1.0.2:40004 users:((\"iperf3\",pid=70,fd=3))";

    #[test]
    fn a_data_connection_of_the_server_is_chosen_not_its_control_connection() {
        let c = data_connection(LIST, &[7], 2811);
        assert_eq!(c, Some(("10.1.0.1:2812".into(), "10.1.0.2:40002".into())));
        assert_eq!(data_connection(LIST, &[70], 5201), None);
        assert_eq!(data_connection(LIST, &[8], 2811), None);
    }
}

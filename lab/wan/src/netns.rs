//! Network namespaces: create, configure, enter, clean up. Namespaces are
//! managed with iproute2 (`ip netns`, so they show up in `ip netns list`
//! under /run/netns); code runs inside one on a dedicated thread that joined
//! it with `setns`.
use std::fs;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use rustix::thread::LinkNameSpaceType;

use crate::LabError;

/// Runs `ip ARGS...`; an error carries ip's stderr.
pub(crate) fn ip(args: &[&str]) -> Result<String, LabError> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::MissingTool(format!("ip (iproute2): {e}")))?;
    if !out.status.success() {
        return Err(LabError::Command {
            cmd: format!("ip {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Does the named namespace exist (under /run/netns)?
pub fn exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

/// Creates a named namespace.
pub(crate) fn add(name: &str) -> Result<(), LabError> {
    ip(&["netns", "add", name]).map(|_| ())
}

/// Ends every process inside `name` (TERM, then KILL after `grace`) and
/// deletes the namespace. Missing namespaces are fine.
pub(crate) fn remove(name: &str, grace: Duration) -> Result<(), LabError> {
    if !exists(name) {
        return Ok(());
    }
    kill_all(name, grace);
    ip(&["netns", "del", name]).map(|_| ())
}

fn pids_in(name: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    ip(&["netns", "pids", name])
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|&p| p != me)
        .collect()
}

fn kill_all(name: &str, grace: Duration) {
    let send = |sig: Signal| {
        for pid in pids_in(name) {
            if let Some(pid) = Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, sig);
            }
        }
    };
    send(Signal::TERM);
    let deadline = Instant::now() + grace;
    while !pids_in(name).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    send(Signal::KILL);
}

/// Runs `f` on a new thread that has joined namespace `name`; returns what
/// `f` returns. Sockets `f` opens belong to that namespace.
pub fn in_ns<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> Result<T, LabError> {
    let path = Path::new("/run/netns").join(name);
    let file = fs::File::open(&path).map_err(|e| LabError::Netns { ns: name.to_string(), source: e })?;
    std::thread::scope(|s| {
        s.spawn(move || {
            rustix::thread::move_into_link_name_space(file.as_fd(), Some(LinkNameSpaceType::Network))
                .map_err(|e| LabError::Netns { ns: name.to_string(), source: e.into() })?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|_| Err(LabError::Spec("namespace thread panicked".into())))
    })
}

/// Writes a sysctl (`net.ipv4.tcp_rmem`) inside namespace `ns`.
pub fn set_sysctl(ns: &str, key: &str, value: &str) -> Result<(), LabError> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    in_ns(ns, || fs::write(&path, value))?.map_err(|e| LabError::Netns {
        ns: ns.to_string(),
        source: std::io::Error::new(e.kind(), format!("{path}: {e}")),
    })
}

/// `(rx_dropped, tx_dropped)` of interface `dev` in namespace `ns`.
pub(crate) fn drop_stats(ns: &str, dev: &str) -> Option<(u64, u64)> {
    let text = in_ns(ns, || fs::read_to_string("/proc/thread-self/net/dev")).ok()?.ok()?;
    parse_net_dev(&text, dev)
}

fn parse_net_dev(text: &str, dev: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.trim_start().starts_with(&format!("{dev}:")))?;
    let (_, rest) = line.split_once(':')?;
    let f: Vec<u64> = rest.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    Some((*f.get(3)?, *f.get(11)?))
}

/// A `sh` process that deletes the namespaces when this process dies, even
/// by SIGKILL: it waits for EOF on a pipe only this process holds.
#[derive(Debug)]
pub(crate) struct Watchdog(Child);

/// Reads `NAME INODE` lines, one per namespace made, until an empty line
/// or the end of its input (the lab ended, or died), then removes each
/// namespace that is still the one made: another lab may have taken the
/// name since (after a `lab down`), and was torn down with this one.
const WATCHDOG: &str = r#"trap '' INT TERM HUP
while read ns ino && [ -n "$ns" ]; do set -- "$@" "$ns" "$ino"; done
while [ $# -ge 2 ]; do
  ns=$1; ino=$2; shift 2
  [ "$(stat -L -c %i "/run/netns/$ns" 2>/dev/null)" = "$ino" ] || continue
  for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p"; done
  ip netns del "$ns" 2>/dev/null
done
exit 0"#;

/// The inode of the namespace named `name` (its nsfs file): another
/// namespace given the same name has another.
pub(crate) fn ino(name: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(Path::new("/run/netns").join(name)).ok().map(|m| m.ino())
}

impl Watchdog {
    pub fn spawn() -> Result<Watchdog, LabError> {
        let child = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("lightpath-lab-watchdog")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| LabError::MissingTool(format!("sh: {e}")))?;
        Ok(Watchdog(child))
    }

    /// Have the watchdog remove the namespace `name` (`ino`: [`ino`]).
    pub fn guard(&mut self, name: &str, ino: u64) {
        if let Some(stdin) = self.0.stdin.as_mut() {
            let _ = writeln!(stdin, "{name} {ino}");
        }
    }

    /// Lets the watchdog clean up now and waits for it.
    pub fn finish(mut self) {
        if let Some(mut stdin) = self.0.stdin.take() {
            let _ = stdin.write_all(b"\n");
        }
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_dev_parsing() {
        let text = "Inter-|   Receive |  Transmit\n face |bytes packets\n    lo: 1 2 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n  wan0: 100 10 0 3 0 0 0 0 200 20 0 7 0 0 0 0\n";
        assert_eq!(parse_net_dev(text, "wan0"), Some((3, 7)));
        assert_eq!(parse_net_dev(text, "eth0"), None);
    }
}

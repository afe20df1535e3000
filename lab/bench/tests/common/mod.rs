//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]
use std::path::{Path, PathBuf};

use lightpath_bench::tools::{which, Programs};

/// Fails the test unless this machine can run real benchmarks (root, ip,
/// guc, iperf3): an early return passed for a test that ran nothing, and
/// libtest hides a passing test's stderr (a test audit's find).
/// `scripts/install-test-deps.sh` installs the tools.
pub fn need_tools() {
    assert!(rustix::process::geteuid().is_root(), "the bench's end-to-end tests need root");
    let tools = ["ip", "globus-url-copy", "globus-gridftp-server", "iperf3"];
    let missing: Vec<&str> = tools.iter().copied().filter(|t| which(Path::new(t)).is_none()).collect();
    assert!(
        missing.is_empty(),
        "missing {missing:?}: run scripts/install-test-deps.sh (apt-get install iproute2 iperf3 globus-gass-copy-progs globus-gridftp-server-progs)"
    );
}

/// Writes scenario files into a fresh directory.
pub fn scenarios(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

/// Our own leftovers: namespaces and cgroups named after this process.
pub fn leftovers() -> Vec<String> {
    let me = format!("lpb{}s", std::process::id());
    let mut found = Vec::new();
    let out = std::process::Command::new("ip").args(["netns", "list"]).output().unwrap();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if line.starts_with(&me) {
            found.push(format!("netns {line}"));
        }
    }
    let pid = format!("{}-", std::process::id());
    for base in cgroup_bases() {
        for e in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().starts_with(&pid) {
                found.push(format!("cgroup {}", e.path().display()));
            }
        }
    }
    found
}

fn cgroup_bases() -> Vec<PathBuf> {
    let mut v =
        vec![PathBuf::from("/sys/fs/cgroup/lightpath-bench"), PathBuf::from("/sys/fs/cgroup/unified/lightpath-bench")];
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    for l in text.lines() {
        let parts: Vec<&str> = l.splitn(3, ':').collect();
        if parts.len() == 3 && parts[1].split(',').any(|c| c == "memory" || c == "cpuacct") {
            let ctrl = if parts[1].contains("memory") { "memory" } else { "cpuacct" };
            v.push(
                Path::new("/sys/fs/cgroup").join(ctrl).join(parts[2].trim_start_matches('/')).join("lightpath-bench"),
            );
        }
    }
    v
}

/// Processes whose command line mentions `needle`.
pub fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) {
            found.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
        }
    }
    found
}

/// The tools at their Debian paths, for tests of the command lines built.
pub fn programs() -> Programs {
    Programs {
        lightpath: "/usr/bin/lightpath".into(),
        guc: "/usr/bin/globus-url-copy".into(),
        guc_server: "/usr/sbin/globus-gridftp-server".into(),
        iperf3: "/usr/bin/iperf3".into(),
        fio: "/usr/bin/fio".into(),
    }
}

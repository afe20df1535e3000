//! Breaking transfers on purpose: the island file (sparse, random bytes
//! at four places), how far a process has read, killing it or one of its
//! data connections midway, and running `cp` to watch what it says.

use super::*;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A sparse file of `len` bytes with 1 MiB of random bytes at four
/// places (the start, two odd offsets inside, the end): a resumed copy
/// that put a range at the wrong offset differs.
pub fn islands(p: &Path, len: u64) {
    let f = std::fs::File::create(p).unwrap();
    f.set_len(len).unwrap();
    let chunk = scratch();
    for (k, off) in [0, len / 3 + 3, 2 * len / 3 + 77, len - (1 << 20)].into_iter().enumerate() {
        let c = chunk.path().join(k.to_string());
        write_random(&c, 1 << 20, 40 + k as u64);
        f.write_all_at(&std::fs::read(&c).unwrap(), off).unwrap();
    }
    std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
}

pub const LEN: u64 = 1 << 30;

/// Bytes process `pid` has read so far (`rchar`: `read`, `pread` and
/// `sendfile` alike), 0 once it is gone.
pub fn rchar(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    io.lines().find_map(|l| l.strip_prefix("rchar: ")).and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// Wait until one of the processes `pids` gives has read a quarter of
/// the file; that one.
pub fn midway(pids: impl Fn() -> Vec<u32>) -> u32 {
    let t = Instant::now();
    loop {
        if let Some(p) = pids().into_iter().find(|&p| rchar(p) >= LEN / 4) {
            return p;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "the transfer never got under way");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// SIGKILL the process of `pids` that has read a quarter of the file.
pub fn kill_midway(pids: impl Fn() -> Vec<u32>) {
    let pid = midway(pids);
    let st = Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
    assert!(st.success());
}

/// Destroy one TCP connection of process `pid` other than its control
/// connection on `port` (`ss -K`, as a middlebox reset or a dead path
/// would end it): one data stream dies, the rest of the transfer lives.
pub fn kill_a_stream(pid: u32, port: u16) {
    let out = Command::new("ss").args(["-tnpH", "state", "established"]).output().expect("ss (iproute2)");
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    let mine = format!("pid={pid},");
    let control = format!(":{port}");
    let data = list.lines().filter(|l| l.contains(&mine)).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 4 && !f[2].ends_with(&control) && !f[3].ends_with(&control))
            .then(|| (f[2].to_string(), f[3].to_string()))
    });
    let (local, peer) = data.unwrap_or_else(|| panic!("no data connection of {pid} in: {list}"));
    let st =
        Command::new("ss").args(["-K", "-tn", "src", &local, "dst", &peer]).stdout(Stdio::null()).status().unwrap();
    assert!(st.success(), "ss -K {local} {peer}");
}

/// Start `lightpath -v cp ARGS`, stderr piped (so no progress bar; not
/// `-q`, which would leave out the summary the tests read).
pub fn start_cp(args: &[&str]) -> Child {
    Command::new(LP).args(["-v", "cp"]).args(args).stderr(Stdio::piped()).spawn().expect("start cp")
}

/// Exit status 0, and what `cp` said; panics with its stderr otherwise.
pub fn succeeded(out: Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}");
    err
}

/// Start our server on `root` and `port` again, and wait for `cp`, which
/// must succeed: what it said.
pub fn restart_and_finish(root: &Path, port: u16, cp: Child) -> String {
    let _again = lp_server_on(root, port, &["--anonymous-write"]);
    succeeded(cp.wait_with_output().unwrap())
}

/// `dir/tree`: a small tree (`make_tree` with `seed`) and the island file.
pub fn island_tree(dir: &Path, seed: u64) -> PathBuf {
    let tree = open_dir(&dir.join("tree"));
    make_tree(&tree, 30, seed);
    islands(&tree.join("big"), LEN);
    tree
}

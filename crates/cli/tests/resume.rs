//! `cp --retries`: a download whose server went away midway is tried
//! again and resumes from the bytes it had (MODE E `REST` with the ranges
//! held), against our server restarted on its port and against the real
//! `globus-gridftp-server` whose session process was killed. Final
//! failures are not tried again. An upload whose data stream died sends
//! only what our server did not keep of it. With `--partial`, a download
//! that failed for good or was interrupted is kept, and resumed by the
//! next run; so is an upload, whose bytes our server keeps. Trees are in
//! `tree_resume.rs`.

mod common;
use common::breaks::*;
use common::*;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The bytes `cp`'s retry warning said it kept.
fn kept(err: &str) -> u64 {
    let n = err.split("keeping the ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok());
    n.unwrap_or_else(|| panic!("no retry keeping bytes in: {err}"))
}

/// What the resumed try said was kept and moved (`cp -v`: "resumed a
/// download: K bytes kept, M received", and so for `what` "an upload" and
/// "a third-party copy"): a server that ignored the restart and sent the
/// whole file again would make them add up to more than the file.
fn resumed_as(err: &str, what: &str) -> (u64, u64) {
    let line = err.lines().find_map(|l| l.split(&format!("resumed {what}: ")).nth(1));
    let line = line.unwrap_or_else(|| panic!("no resumed {what} in: {err}"));
    let n: Vec<u64> = line.split(' ').filter_map(|w| w.trim_end_matches(',').parse().ok()).collect();
    assert_eq!(n.len(), 2, "{line}");
    (n[0], n[1])
}

/// The download resumed from some of the file and received only the
/// rest, the kept bytes compared with the server's file by digest first.
/// After a stream that died under a live session the copy went on at
/// once; after a server that went away, it waited.
fn assert_resumed(err: &str, server_went_away: bool) {
    let told = kept(err);
    let (kept, received) = resumed_as(err, "a download");
    assert!(kept > 0 && kept <= told, "kept {kept} of the {told} bytes it had");
    assert_eq!(kept + received, LEN, "the server sent more than the missing ranges");
    assert!(err.contains(&format!("comparing the {kept} bytes kept")), "{err}");
    assert_eq!(err.contains("trying again now"), !server_went_away, "{err}");
    assert!(!err.contains("no digest"), "{err}");
}

/// Where a download of the island file from our server runs: the
/// scratch directory, the served root, the local directory, the server
/// and its port.
struct Under {
    _d: tempfile::TempDir,
    root: PathBuf,
    local: PathBuf,
    srv: Proc,
    port: u16,
}

impl Under {
    /// SIGKILL the server once it has read a quarter of the file.
    fn kill_server_midway(&mut self) {
        let pid = self.srv.0.id();
        kill_midway(|| vec![pid]);
        self.srv.0.wait().unwrap();
    }

    /// The file on the server and its copy.
    fn files(&self) -> (PathBuf, PathBuf) {
        (self.root.join("big"), self.local.join("big"))
    }

    /// Nothing in the local directory, not even a partial file.
    fn assert_nothing_local(&self) {
        assert!(std::fs::read_dir(&self.local).unwrap().next().is_none(), "a partial file was left");
    }
}

/// The island file on our server, and `cp args... URL local/big` started on it.
fn download_under_way(args: &[&str]) -> (Under, Child) {
    let (d, root, local) = root_and_local();
    islands(&root.join("big"), LEN);
    let (srv, port) = lp_server(&root, &["--anonymous-write"]);
    let url = format!("ftp://127.0.0.1:{port}/big");
    let cp = start_cp(&[args, &[&url, local.join("big").to_str().unwrap()]].concat());
    (Under { _d: d, root, local, srv, port }, cp)
}

/// Download the island file from our server, SIGKILL the server midway,
/// do `meanwhile` to its root, start it again on its port, and wait for
/// `cp`, which must succeed: what it said, and the file's two places.
fn download_across_a_server_restart(meanwhile: impl FnOnce(&Path)) -> (String, Under) {
    let (mut u, cp) = download_under_way(&[]);
    u.kill_server_midway();
    meanwhile(&u.root);
    (restart_and_finish(&u.root, u.port, cp), u)
}

#[test]
fn a_download_resumes_after_the_server_is_killed_and_restarted() {
    let (err, u) = download_across_a_server_restart(|_| {});
    let (src, dst) = u.files();
    assert_same_file(&src, &dst);
    assert_resumed(&err, true);
}

/// The session processes `globus-gridftp-server` (pid `daemon`) forked.
fn children(daemon: u32) -> Vec<u32> {
    let ppid = |p: &Path| -> Option<u32> {
        let stat = std::fs::read_to_string(p.join("stat")).ok()?;
        stat.rsplit(") ").next()?.split(' ').nth(1)?.parse().ok()
    };
    let procs = std::fs::read_dir("/proc").unwrap().flatten();
    procs.filter(|e| ppid(&e.path()) == Some(daemon)).filter_map(|e| e.file_name().to_str()?.parse().ok()).collect()
}

/// Download the island file from GCT with `-p 4`, with `fault` done to
/// it midway (given the daemon's pid and its port); `cp` must succeed:
/// what it said. The copy must equal the file.
fn gct_download(fault: impl FnOnce(u32, u16)) -> String {
    let home = scratch();
    let local = scratch();
    islands(&home.path().join("big"), LEN);
    let (srv, port) = gct_server(home.path());
    let url = format!("ftp://127.0.0.1:{port}{}", home.path().join("big").display());
    let cp = start_cp(&["-p", "4", &url, local.path().join("big").to_str().unwrap()]);
    fault(srv.0.id(), port);
    let err = succeeded(cp.wait_with_output().unwrap());
    assert_same_file(&home.path().join("big"), &local.path().join("big"));
    err
}

#[test]
fn a_download_from_gct_resumes_after_its_session_dies() {
    // The session that serves the copy: the one reading the file (the
    // harness's own probe of the port forked one too).
    let err = gct_download(|daemon, _| kill_midway(|| children(daemon)));
    assert_resumed(&err, true);
}

#[test]
fn with_no_retries_a_broken_download_fails_at_once_and_leaves_nothing() {
    let (mut u, cp) = download_under_way(&["--retries", "0"]);
    u.kill_server_midway();
    let out = cp.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("trying again"), "{err}");
    assert!(err.contains("server closed the control connection"), "{err}");
    u.assert_nothing_local();
}

#[test]
fn a_refused_file_is_not_tried_again() {
    let (_d, root, local) = root_and_local();
    let (_srv, port) = lp_server(&root, &["--anonymous-write"]);
    let (code, err) = cp(&[&format!("ftp://127.0.0.1:{port}/missing"), local.join("m").to_str().unwrap()]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("No such file") && !err.contains("trying again"), "{err}");
}

#[test]
fn a_download_whose_data_stream_dies_resumes() {
    let (u, cp) = download_under_way(&["-p", "4"]);
    let pid = u.srv.0.id();
    kill_a_stream(midway(|| vec![pid]), u.port);
    let err = succeeded(cp.wait_with_output().unwrap());
    let (src, dst) = u.files();
    assert_same_file(&src, &dst);
    assert_resumed(&err, false);
}

#[test]
fn a_download_from_gct_whose_data_stream_dies_resumes() {
    let err = gct_download(|daemon, port| kill_a_stream(midway(|| children(daemon)), port));
    assert_resumed(&err, false);
}

/// `cp -p 4` of the island file up to our server (started with `args`),
/// one of its data streams destroyed a quarter of the way: it must
/// succeed. What it said, and the file's two places.
fn upload_whose_stream_dies(args: &[&str]) -> (String, PathBuf, PathBuf, tempfile::TempDir) {
    let (d, root, local) = root_and_local();
    islands(&local.join("big"), LEN);
    let (_srv, port) = lp_server(&root, &[&["--anonymous-write"], args].concat());
    let cp = start_cp(&["-p", "4", local.join("big").to_str().unwrap(), &format!("ftp://127.0.0.1:{port}/big")]);
    let pid = cp.id();
    kill_a_stream(midway(|| vec![pid]), port);
    let err = succeeded(cp.wait_with_output().unwrap());
    assert_same_file(&local.join("big"), &root.join("big"));
    let names: Vec<_> = std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["big"], "nothing else left on the server");
    (err, root, local, d)
}

/// The server keeps what it wrote of an upload whose data stream died
/// and names it (111); the next try, at once, sends `REST` with those
/// ranges and only the rest of the file.
#[test]
fn an_upload_whose_data_stream_dies_resumes() {
    let (err, ..) = upload_whose_stream_dies(&[]);
    let told = kept(&err);
    let (kept, sent) = resumed_as(&err, "an upload");
    assert!(kept > 0 && kept == told, "resumed from {kept} of the {told} bytes confirmed: {err}");
    assert_eq!(kept + sent, LEN, "sent more than the missing ranges: {err}");
    assert!(err.contains("trying again now"), "{err}");
}

/// A server that keeps no partial uploads (`--keep-partial 0`) refuses
/// the restart (554); the file then goes again whole.
#[test]
fn an_upload_the_server_did_not_keep_goes_again_whole() {
    let (err, ..) = upload_whose_stream_dies(&["--keep-partial", "0"]);
    assert!(kept(&err) > 0, "{err}");
    assert!(err.contains("the server no longer holds the partial upload (554"), "{err}");
    assert!(!err.contains("resumed an upload"), "{err}");
}

/// A third-party copy between two of our servers whose data stream dies
/// (the source's end destroyed): the destination keeps what it wrote, and
/// the next try tells both servers `REST` with it, so the source sends
/// only the rest.
#[test]
fn a_third_party_copy_whose_data_stream_dies_resumes() {
    let (_d, src_root, dst_root) = root_and_local();
    islands(&src_root.join("big"), LEN);
    let (src, sport) = lp_server(&src_root, &["--anonymous-write"]);
    let (_dst, dport) = lp_server(&dst_root, &["--anonymous-write"]);
    let urls = [format!("ftp://127.0.0.1:{sport}/big"), format!("ftp://127.0.0.1:{dport}/big")];
    let cp = start_cp(&["-p", "4", &urls[0], &urls[1]]);
    let pid = src.0.id();
    kill_a_stream(midway(|| vec![pid]), sport);
    let err = succeeded(cp.wait_with_output().unwrap());
    assert_same_file(&src_root.join("big"), &dst_root.join("big"));
    let (kept_there, sent) = resumed_as(&err, "a third-party copy");
    assert!(kept_there > 0 && kept_there == kept(&err), "{err}");
    assert_eq!(kept_there + sent, LEN, "the source sent more than the missing ranges: {err}");
    let names: Vec<_> = std::fs::read_dir(&dst_root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["big"], "nothing else left at the destination");
}

/// Make `root/big` a new version of the same size, different everywhere
/// the island file has data.
fn new_version(root: &Path) {
    let new = scratch();
    write_random(&new.path().join("island"), 1 << 20, 99);
    let f = std::fs::OpenOptions::new().write(true).open(root.join("big")).unwrap();
    for off in (0..LEN).step_by(256 << 20) {
        f.write_all_at(&std::fs::read(new.path().join("island")).unwrap(), off).unwrap();
    }
}

/// The file changed on the server between the tries: the kept bytes are
/// not joined to the new version's; the copy starts over.
#[test]
fn a_file_changed_between_tries_starts_over() {
    let (err, u) = download_across_a_server_restart(new_version);
    assert!(err.contains("changed") && err.contains("starting over"), "{err}");
    assert!(!err.contains("resumed a download"), "{err}");
    let (src, dst) = u.files();
    assert_same_file(&src, &dst);
}

/// The file is rewritten in place on the server, then a data stream dies:
/// the retry at once compares the kept bytes too, and starts over. It
/// joined the old version's first quarter to the new one's rest, and
/// published that with exit 0 (a review's find): the server's own check
/// of a file changed while sent is not reached when a stream dies.
#[test]
fn a_file_rewritten_before_a_stream_dies_is_not_joined() {
    let (u, cp) = download_under_way(&["-p", "4"]);
    let pid = midway(|| vec![u.srv.0.id()]);
    new_version(&u.root);
    kill_a_stream(pid, u.port);
    let err = succeeded(cp.wait_with_output().unwrap());
    assert!(err.contains("trying again now"), "{err}");
    assert!(err.contains("changed") && err.contains("starting over"), "{err}");
    let (src, dst) = u.files();
    assert_same_file(&src, &dst);
}

/// Ctrl-C while `cp` waits to try again (its server gone): it stops then,
/// not after its retries, and the kept bytes go with it.
#[test]
fn ctrl_c_while_waiting_to_retry_stops_and_leaves_nothing() {
    let (mut u, mut cp) = download_under_way(&["--retries", "10"]);
    u.kill_server_midway();
    // Signalled once cp says it waits to try again (a fixed pause raced it).
    let (lines, said) = (std::io::BufReader::new(cp.stderr.take().unwrap()), std::sync::mpsc::channel());
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufRead::lines(lines).map_while(Result::ok) {
            if line.contains("trying again") {
                let _ = said.0.send(());
            }
            all += &line;
            all.push('\n');
        }
        all
    });
    assert!(said.1.recv_timeout(Duration::from_secs(30)).is_ok(), "cp never said it would try again");
    let t = Instant::now();
    assert!(Command::new("kill").args(["-INT", &cp.id().to_string()]).status().unwrap().success());
    let status = cp.wait().unwrap();
    let err = reader.join().unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    // Ten retries would take minutes, and cp's grace period after Ctrl-C
    // is 10 s: the worker stops at the signal, its pause watches for it.
    assert!(t.elapsed() < Duration::from_secs(5), "stopped after {:?}", t.elapsed());
    u.assert_nothing_local();
}

/// `cp --partial` of the island file, interrupted (Ctrl-C) once the
/// server has read a quarter of it: the download is kept under its hidden
/// name, alone in the directory. The bytes `cp` said it kept.
fn interrupted_with_partial(u: &Under, cp: Child) -> u64 {
    let pid = u.srv.0.id();
    interrupt_midway(|| vec![pid], &u.local, cp)
}

/// Interrupt `cp --partial` (a download into `local`) once one of the
/// server processes `pids` gives has read a quarter of the file: it must
/// have kept the download, alone there. The bytes it said it kept.
fn interrupt_midway(pids: impl Fn() -> Vec<u32>, local: &Path, cp: Child) -> u64 {
    midway(pids);
    let (code, err) = interrupt(cp);
    assert_eq!(code, Some(130), "{err}");
    assert_eq!(names(local), [".big.lightpath-partial"], "{err}");
    let n = err.split("kept ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok());
    n.unwrap_or_else(|| panic!("no kept bytes in: {err}"))
}

/// Run `cp -v --partial URL local/big` (`URL`: `name` on `u`'s server) to
/// success: what it said.
fn partial_run(u: &Under, name: &str) -> String {
    let url = format!("ftp://127.0.0.1:{}/{name}", u.port);
    succeeded(start_cp(&["--partial", &url, u.local.join("big").to_str().unwrap()]).wait_with_output().unwrap())
}

/// SIGHUP (a closed terminal or ssh session) stops `cp --partial` as
/// Ctrl-C does, and the download is kept: it killed `cp`, and nothing was
/// kept (nor a file named from the start removed: NFS) (a defect hunt's
/// find). The next run resumes it.
#[test]
fn a_download_hung_up_on_is_kept_with_partial() {
    // SIGHUP's default disposition (this test may itself run under
    // `nohup`, whose ignore `cp` respects: the next test).
    let (d, root, local) = root_and_local();
    islands(&root.join("big"), LEN);
    let (srv, port) = lp_server(&root, &["--anonymous-write"]);
    let url = format!("ftp://127.0.0.1:{port}/big");
    let cp = Command::new("env")
        .args(["--default-signal=HUP", LP, "-v", "cp", "--partial", &url, local.join("big").to_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let u = Under { _d: d, root, local, srv, port };
    let pid = u.srv.0.id();
    midway(|| vec![pid]);
    let st = Command::new("kill").args(["-HUP", &cp.id().to_string()]).status().unwrap();
    assert!(st.success());
    let out = cp.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert_eq!(names(&u.local), [".big.lightpath-partial"], "{err}");
    let err = partial_run(&u, "big");
    assert!(err.contains("kept by an earlier run"), "{err}");
    let (src, dst) = u.files();
    assert_same_file(&src, &dst);
}

/// Under `nohup` (SIGHUP ignored) a hang-up leaves `cp` alone: it took
/// SIGHUP up over the inherited ignore and stopped (a review's find).
#[test]
fn a_download_under_nohup_goes_on_after_a_hangup() {
    let (d, root, local) = root_and_local();
    islands(&root.join("big"), LEN);
    let (srv, port) = lp_server(&root, &["--anonymous-write"]);
    let url = format!("ftp://127.0.0.1:{port}/big");
    let cp = Command::new("nohup")
        .arg(LP)
        .args(["cp", "-q", &url, local.join("big").to_str().unwrap()])
        .current_dir(d.path())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = srv.0.id();
    midway(|| vec![pid]);
    let st = Command::new("kill").args(["-HUP", &cp.id().to_string()]).status().unwrap();
    assert!(st.success());
    succeeded(cp.wait_with_output().unwrap());
    assert_same_file(&root.join("big"), &local.join("big"));
}

/// `cp --partial`: a download interrupted midway is kept, and the next
/// run takes it up, compares it with the server's file and fetches only
/// the rest; nothing but the complete file is left.
#[test]
fn an_interrupted_download_kept_with_partial_resumes_in_the_next_run() {
    let (u, cp) = download_under_way(&["--partial", "-p", "4"]);
    let kept = interrupted_with_partial(&u, cp);
    assert!(kept > 0 && kept < LEN, "{kept}");
    let err = partial_run(&u, "big");
    assert!(err.contains(&format!("taking up {kept} bytes kept by an earlier run")), "{err}");
    assert!(err.contains(&format!("comparing the {kept} bytes kept")), "{err}");
    assert_eq!(resumed_as(&err, "a download"), (kept, LEN - kept), "{err}");
    let (src, dst) = u.files();
    assert_same_file(&src, &dst);
    assert_eq!(names(&u.local), ["big"]);
}

/// A download whose retries were spent (the server killed, `--retries
/// 0`) is kept too; the file changes on the server before the next run,
/// which finds that out by digest and starts over.
#[test]
fn a_kept_download_of_a_file_changed_since_starts_over() {
    let (mut u, cp) = download_under_way(&["--partial", "--retries", "0"]);
    u.kill_server_midway();
    let out = cp.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("(the same cp --partial resumes it)"), "{err}");
    assert_eq!(names(&u.local), [".big.lightpath-partial"]);
    new_version(&u.root);
    let _again = lp_server_on(&u.root, u.port, &["--anonymous-write"]);
    let err = partial_run(&u, "big");
    assert!(err.contains("it changed on the server") && err.contains("starting over"), "{err}");
    assert!(!err.contains("resumed a download"), "{err}");
    let (src, dst) = u.files();
    assert_same_file(&src, &dst);
    assert_eq!(names(&u.local), ["big"]);
}

/// A kept file is taken up only by a copy of the same source: another
/// source to the same destination replaces it.
#[test]
fn a_file_kept_from_another_source_is_not_taken_up() {
    let (u, cp) = download_under_way(&["--partial"]);
    interrupted_with_partial(&u, cp);
    write_random(&u.root.join("other"), 3 << 20, 5);
    let err = partial_run(&u, "other");
    assert!(err.contains(&format!("it was kept from ftp://127.0.0.1:{}/big", u.port)), "{err}");
    assert!(!err.contains("taking up"), "{err}");
    assert_same_file(&u.root.join("other"), &u.local.join("big"));
    assert_eq!(names(&u.local), ["big"]);
}

/// The same against the real `globus-gridftp-server`: the next run's
/// comparison (`CKSM ADLER32` over the kept range) and `REST` ranges are
/// GCT's.
#[test]
fn a_download_from_gct_kept_with_partial_resumes_in_the_next_run() {
    let (home, local) = (scratch(), scratch());
    islands(&home.path().join("big"), LEN);
    let (srv, port) = gct_server(home.path());
    let url = format!("ftp://127.0.0.1:{port}{}", home.path().join("big").display());
    let dst = local.path().join("big");
    let cp = start_cp(&["--partial", "-p", "4", &url, dst.to_str().unwrap()]);
    let daemon = srv.0.id();
    let kept = interrupt_midway(|| children(daemon), local.path(), cp);
    let err = succeeded(start_cp(&["--partial", &url, dst.to_str().unwrap()]).wait_with_output().unwrap());
    assert!(err.contains(&format!("comparing the {kept} bytes kept with the server's file (ADLER32)")), "{err}");
    assert_eq!(resumed_as(&err, "a download"), (kept, LEN - kept), "{err}");
    assert_same_file(&home.path().join("big"), &dst);
    assert_eq!(names(local.path()), ["big"]);
}

/// A copy that completes without `--partial` removes the file an earlier
/// run kept for its destination.
#[test]
fn a_complete_copy_removes_a_file_kept_for_it() {
    let (u, cp) = download_under_way(&["--partial"]);
    interrupted_with_partial(&u, cp);
    let url = format!("ftp://127.0.0.1:{}/big", u.port);
    let err = succeeded(start_cp(&[&url, u.local.join("big").to_str().unwrap()]).wait_with_output().unwrap());
    assert!(err.contains("removed the partial file an earlier run kept for it"), "{err}");
    assert!(!err.contains("resumed a download"), "{err}");
    let (src, dst) = u.files();
    assert_same_file(&src, &dst);
    assert_eq!(names(&u.local), ["big"]);
}

/// An upload of the island file to our server with `cp --partial`,
/// interrupted midway: the scratch directories, the server, the URL, and
/// the bytes `cp` said the server wrote.
struct UpInterrupted {
    _d: tempfile::TempDir,
    root: PathBuf,
    local: PathBuf,
    state: tempfile::TempDir,
    srv: Proc,
    port: u16,
    url: String,
    kept: u64,
}

impl UpInterrupted {
    /// Start the upload and interrupt it once it has read a quarter of
    /// the file: nothing appears under a name on the server, and `cp` says
    /// how many bytes the server wrote (and noted them).
    fn new() -> Self {
        let (_d, root, local) = root_and_local();
        islands(&local.join("big"), LEN);
        let (state, (srv, port)) = (scratch(), lp_server(&root, &["--anonymous-write"]));
        let url = format!("ftp://127.0.0.1:{port}/big");
        let mut u = UpInterrupted { _d, root, local, state, srv, port, url, kept: 0 };
        let cp = u.run(&[]);
        let pid = cp.id();
        midway(|| vec![pid]);
        let (code, err) = interrupt(cp);
        assert_eq!(code, Some(130), "{err}");
        assert!(names(&u.root).is_empty(), "{err}");
        let n = err.split("the server wrote ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok());
        u.kept = n.unwrap_or_else(|| panic!("no bytes written by the server in: {err}"));
        u
    }

    /// `cp -v --partial -p 4 [args] local/big URL`, its notes in `state`
    /// (not -q: the summary says what was kept).
    fn run(&self, args: &[&str]) -> Child {
        Command::new(LP)
            .env("XDG_STATE_HOME", self.state.path())
            .args(["-v", "cp", "--partial", "-p", "4"])
            .args(args)
            .args([self.local.join("big").to_str().unwrap(), &self.url])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start cp")
    }

    /// Run it again to success: what `cp` said. The file arrived whole
    /// and no note is left.
    fn finish(&self, args: &[&str]) -> String {
        let err = succeeded(self.run(args).wait_with_output().unwrap());
        assert_same_file(&self.local.join("big"), &self.root.join("big"));
        assert_eq!(names(&self.root), ["big"]);
        assert!(names(&self.state.path().join("lightpath/uploads")).is_empty(), "the note is used up");
        err
    }
}

/// `cp --partial` of an upload interrupted midway: the client breaks the
/// transfer off (no ABOR), the server keeps what it wrote and says so
/// (111), and `cp` notes it; the next `cp --partial` of the unchanged file
/// takes the note up and sends only the rest.
#[test]
fn an_interrupted_upload_with_partial_resumes_in_the_next_run() {
    let u = UpInterrupted::new();
    let kept = u.kept;
    assert!(kept > 0 && kept < LEN, "{kept}");
    let err = u.finish(&[]);
    assert!(err.contains(&format!("taking up the {kept} bytes an earlier run's upload left")), "{err}");
    assert_eq!(resumed_as(&err, "an upload"), (kept, LEN - kept), "{err}");
    assert!(err.contains(&format!("{LEN} bytes in ")), "the file counts whole: {err}");
    assert!(err.contains(&format!("{kept} of those bytes were kept from earlier tries")), "{err}");
}

/// A file changed (its mtime) since the interrupted run is sent whole:
/// the note does not apply to it.
#[test]
fn an_upload_noted_by_an_earlier_run_of_a_file_changed_since_goes_whole() {
    let u = UpInterrupted::new();
    let f = std::fs::File::options().write(true).open(u.local.join("big")).unwrap();
    f.set_modified(std::time::SystemTime::now() + Duration::from_secs(5)).unwrap();
    let err = u.finish(&[]);
    assert!(err.contains("the file changed since; sending it whole"), "{err}");
    assert!(!err.contains("resumed an upload"), "{err}");
}

/// A server restarted since the interrupted run holds nothing of it: the
/// noted restart is refused (554) and the file goes whole at once, even
/// with `--retries 0` (that refusal is no failure of this run's).
#[test]
fn a_noted_upload_the_server_no_longer_holds_goes_whole_even_without_retries() {
    let mut u = UpInterrupted::new();
    u.srv.0.kill().unwrap();
    u.srv.0.wait().unwrap();
    u.srv = lp_server_on(&u.root, u.port, &["--anonymous-write"]);
    let err = u.finish(&["--retries", "0"]);
    assert!(err.contains("taking up the"), "{err}");
    assert!(err.contains("no longer holds the partial upload (554"), "{err}");
    assert!(err.contains("sending it whole now"), "{err}");
    assert!(!err.contains("resumed an upload"), "{err}");
}

/// An upload to GCT whose server is killed midway and started again on
/// its port: what the first try stored under a hidden temporary name
/// could not be removed (nothing answered), and each try drew a name of
/// its own, so the first's stayed beside the published file (a defect
/// hunt's find: 171 MB, exit 0). Every try of a file now has the same
/// name, and the next one's STOR replaces what the last left.
#[test]
fn an_upload_to_gct_retried_after_a_restart_leaves_no_temporary_file() {
    let d = scratch();
    let home = open_dir(&d.path().join("home"));
    let src = scratch();
    islands(&src.path().join("big"), 512 << 20);
    let (srv, port) = gct_server(&home);
    let url = format!("ftp://127.0.0.1:{port}{}/big", home.display());
    let cp = start_cp(&[src.path().join("big").to_str().unwrap(), &url]);
    let t = Instant::now();
    while rchar(cp.id()) < 128 << 20 {
        assert!(t.elapsed() < Duration::from_secs(30), "the upload never got under way");
        std::thread::sleep(Duration::from_millis(2));
    }
    drop(srv); // the daemon and its sessions
               // Down while the failed try's leftover is removed, up for the retry.
    std::thread::sleep(Duration::from_millis(400));
    let _srv = gct_server_on(&home, port, &[]);
    let err = succeeded(cp.wait_with_output().unwrap());
    assert_same_file(&src.path().join("big"), &home.join("big"));
    assert_eq!(names(&home), ["big"], "{err}");
}

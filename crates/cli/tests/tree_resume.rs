//! `cp -r` of a tree sent as one virtual file (VRET/VSTO) that breaks
//! midway: a server killed and started again, or one data stream
//! destroyed. The next try leaves out the files the receiver holds
//! complete (a download's own, or what the receiving server says in its
//! failure reply) and the tree arrives complete.

mod common;
use common::breaks::*;
use common::*;
use std::path::Path;
use std::time::Duration;

/// A tree sent as one virtual file (VRET) whose server was killed midway
/// through its first file (the island file, walked first) and started
/// again: `cp -r` tries the whole tree again and it arrives complete.
#[test]
fn a_tree_download_starts_over_after_the_server_is_killed_and_restarted() {
    let (_d, root, local) = root_and_local();
    let tree = island_tree(&root, 7);
    let err = tree_download_across_a_server_restart(&root, &local);
    assert!(err.contains("trying the tree again in 1s, from the start"), "{err}");
    assert_same_tree(&tree, &local.join("tree"));
}

/// `cp -r` of `root/tree` into `local/tree` from our server, killed once
/// it has read a quarter of the island file and started again: what `cp`
/// said (it must succeed).
fn tree_download_across_a_server_restart(root: &Path, local: &Path) -> String {
    let (mut srv, port) = lp_server(root, &["--anonymous-write"]);
    let cp = start_cp(&["-r", &format!("ftp://127.0.0.1:{port}/tree"), local.join("tree").to_str().unwrap()]);
    let pid = srv.0.id();
    kill_midway(|| vec![pid]);
    srv.0.wait().unwrap();
    restart_and_finish(root, port, cp)
}

/// A tree download whose server was killed once the files before its
/// last one (the island file, walked last) had arrived: the next try asks
/// the server to leave them out, and only the island file goes again.
#[test]
fn a_tree_download_resumes_after_the_files_it_holds() {
    let (_d, root, local) = root_and_local();
    let tree = open_dir(&root.join("tree"));
    let n = make_tree(&tree, 30, 9);
    islands(&tree.join("zz-big"), LEN);
    let err = tree_download_across_a_server_restart(&root, &local);
    assert!(err.contains(&format!("trying the tree again in 1s, leaving out the {n} files held")), "{err}");
    assert!(err.contains(&format!("{} file(s) copied", n + 1)), "{err}");
    assert!(err.contains(&format!("{n} files of the tree (")), "{err}");
    // The second try rebuilt the island file alone: the server left out the rest.
    assert_rebuilt(&err, 1);
    assert_same_tree(&tree, &local.join("tree"));
}

/// The same for a tree uploaded as one virtual file (VSTO): the server
/// killed while it receives the tree, started again, and the tree tried
/// again whole on a new session.
#[test]
fn a_tree_upload_starts_over_after_the_server_is_killed_and_restarted() {
    let (_d, root, local) = root_and_local();
    let tree = island_tree(&local, 8);
    let (mut srv, port) = lp_server(&root, &["--anonymous-write"]);
    let cp = start_cp(&["-r", tree.to_str().unwrap(), &format!("ftp://127.0.0.1:{port}/")]);
    // The server receives by splice, which its `rchar` does not count:
    // the client's reads say how far the copy got.
    let client = cp.id();
    midway(|| vec![client]);
    srv.0.kill().unwrap();
    srv.0.wait().unwrap();
    let err = restart_and_finish(&root, port, cp);
    assert!(err.contains("trying the tree again"), "{err}");
    assert_same_tree(&tree, &root.join("tree"));
}

/// `dir/tree`: 30 small files (`make_tree`), then the island file
/// `zz-big`, walked last; the number of small files.
fn tree_with_a_big_last_file(dir: &Path, seed: u64) -> (std::path::PathBuf, usize) {
    let tree = open_dir(&dir.join("tree"));
    let n = make_tree(&tree, 30, seed);
    islands(&tree.join("zz-big"), LEN);
    (tree, n)
}

/// What `cp` said of a tree whose first try broke once the `n` small
/// files had arrived: the retry left them out, sent the big file alone
/// (`sent`: the line of the last try that says how many it sent), and
/// the tree counts them all.
fn assert_resumed_after(err: &str, n: usize, sent: &str) {
    assert!(err.contains(&format!("leaving out the {n} files held")), "{err}");
    assert!(err.contains(&format!("{} file(s) copied", n + 1)), "{err}");
    assert!(err.contains(&format!("{n} files of the tree (")), "{err}");
    let last = err.lines().rfind(|l| l.contains(sent)).unwrap_or_default();
    assert!(last.contains("files=1 ") || last.contains("files: 1,"), "{sent}: {err}");
}

/// A tree upload (VSTO) whose data stream dies once the big file is a
/// quarter sent: the server's failure reply says which files it holds
/// complete, and the next try sends only the big file.
#[test]
fn a_tree_upload_whose_data_stream_dies_resumes_after_the_files_the_server_holds() {
    let (_d, root, local) = root_and_local();
    let (tree, n) = tree_with_a_big_last_file(&local, 11);
    let (_srv, port) = lp_server(&root, &["--anonymous-write"]);
    let cp = start_cp(&["-r", "-p", "4", tree.to_str().unwrap(), &format!("ftp://127.0.0.1:{port}/")]);
    let pid = cp.id();
    kill_a_stream(midway(|| vec![pid]), port);
    let err = succeeded(cp.wait_with_output().unwrap());
    assert_resumed_after(&err, n, "tree sent");
    assert_same_tree(&tree, &root.join("tree"));
}

/// The same for a tree copied between two of our servers (VRET to VSTO),
/// the source's data stream destroyed: the destination's failure reply
/// says what it holds, and the source is asked to leave that out (`OPTS
/// VRET After=`).
#[test]
fn a_third_party_tree_whose_data_stream_dies_resumes_after_the_files_the_destination_holds() {
    let (_d, src_root, dst_root) = root_and_local();
    let (tree, n) = tree_with_a_big_last_file(&src_root, 12);
    let (src, sport) = lp_server(&src_root, &["--anonymous-write"]);
    let (_dst, dport) = lp_server(&dst_root, &["--anonymous-write"]);
    let urls = [format!("ftp://127.0.0.1:{sport}/tree"), format!("ftp://127.0.0.1:{dport}/tree")];
    let cp = start_cp(&["-r", "-p", "4", &urls[0], &urls[1]]);
    let pid = src.0.id();
    kill_a_stream(midway(|| vec![pid]), sport);
    let err = succeeded(cp.wait_with_output().unwrap());
    assert!(err.contains(&format!("leaving out the {n} files held")), "{err}");
    assert!(err.contains(&format!("{} file(s) copied", n + 1)), "{err}");
    assert_same_tree(&tree, &dst_root.join("tree"));
}

/// `lightpath -v cp -r --partial -p 4 URL local/tree` from `port`,
/// its notes kept in `state`. The first run makes `local/tree`; the same
/// command run again resumes it there (not in `local/tree/tree`, where
/// `cp -r` puts a tree copied to an existing directory).
fn partial_tree_cp(state: &Path, port: u16, local: &Path) -> std::process::Command {
    let mut c = std::process::Command::new(LP);
    c.env("XDG_STATE_HOME", state).args(["-v", "cp", "-r", "--partial", "-p", "4"]);
    c.args([&format!("ftp://127.0.0.1:{port}/tree"), local.join("tree").to_str().unwrap()]);
    c.stderr(std::process::Stdio::piped());
    c
}

/// A `cp -r --partial` of `root/tree` into `local/tree` from our server,
/// interrupted (Ctrl-C) once the server has read a quarter of the big
/// file: it notes what it holds. What it said.
fn interrupted_tree_download(state: &Path, root: &Path, local: &Path) -> (Proc, u16, String) {
    let (srv, port) = lp_server(root, &["--anonymous-write"]);
    let cp = partial_tree_cp(state, port, local).spawn().expect("start cp");
    let pid = srv.0.id();
    midway(|| vec![pid]);
    let (code, err) = interrupt(cp);
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("noted: the same cp -r --partial sends only the rest"), "{err}");
    (srv, port, err)
}

/// A tree download interrupted with `--partial` is taken up by the next
/// `cp -r --partial`: the files it holds have the server's check, so the
/// server leaves them out and only the big file goes.
#[test]
fn an_interrupted_tree_download_is_resumed_by_the_next_partial_run() {
    let (_d, root, local) = root_and_local();
    let state = scratch();
    let (tree, n) = tree_with_a_big_last_file(&root, 13);
    let (_srv, port, _) = interrupted_tree_download(state.path(), &root, &local);
    let err = succeeded(partial_tree_cp(state.path(), port, &local).output().unwrap());
    assert!(err.contains(&format!("{n} files, ")) && err.contains("held)"), "{err}");
    assert!(err.contains(&format!("{} file(s) copied", n + 1)), "{err}");
    assert_rebuilt(&err, 1);
    assert_same_tree(&tree, &local.join("tree"));
    // The successful run removed the note: a third run copies the whole tree, as `cp -r`
    // does to an existing directory, beneath it.
    let err = succeeded(partial_tree_cp(state.path(), port, &local).output().unwrap());
    assert_rebuilt(&err, n + 1);
    assert_same_tree(&tree, &local.join("tree/tree"));
}

/// A tree download whose client is killed (SIGKILL: it notes nothing at
/// its end) is resumed by the next `--partial` run all the same: the
/// client noted what it held every few seconds while the tree came. The
/// server is stopped once the small files are here, so that the tree
/// waits for the note.
#[test]
fn a_killed_tree_download_is_resumed_from_what_it_noted_while_it_ran() {
    let (_d, root, local) = root_and_local();
    let state = scratch();
    let (tree, n) = tree_with_a_big_last_file(&root, 21);
    let (srv, port) = lp_server(&root, &["--anonymous-write"]);
    let cp = partial_tree_cp(state.path(), port, &local).spawn().expect("start cp");
    let server = srv.0.id();
    midway(|| vec![server]);
    signal("STOP", server);
    wait_for_note_of(state.path(), n);
    signal("KILL", cp.id());
    cp.wait_with_output().unwrap();
    signal("CONT", server);
    let err = succeeded(partial_tree_cp(state.path(), port, &local).output().unwrap());
    assert!(err.contains(&format!("{n} files, ")) && err.contains("held)"), "{err}");
    assert_rebuilt(&err, 1);
    assert_same_tree(&tree, &local.join("tree"));
}

/// A `--partial` tree download killed before any of its files is
/// complete (the island file, walked first, is under way) leaves a note
/// that holds nothing but names where the tree goes: the same command run
/// again copies the tree into `local/tree` again, not beneath it into
/// `local/tree/tree` as `cp -r` into an existing directory would.
#[test]
fn a_download_killed_before_any_file_is_complete_goes_again_to_the_same_place() {
    let (_d, root, local) = root_and_local();
    let state = scratch();
    let tree = island_tree(&root, 24);
    let (srv, port) = lp_server(&root, &["--anonymous-write"]);
    let cp = partial_tree_cp(state.path(), port, &local).spawn().expect("start cp");
    let server = srv.0.id();
    midway(|| vec![server]);
    signal("KILL", cp.id());
    cp.wait_with_output().unwrap();
    assert!(local.join("tree").is_dir(), "the killed run made the tree's directory");
    let err = succeeded(partial_tree_cp(state.path(), port, &local).output().unwrap());
    assert!(err.contains("an earlier run began the tree there"), "{err}");
    assert!(!local.join("tree/tree").exists(), "copied beneath the tree: {err}");
    assert_same_tree(&tree, &local.join("tree"));
}

/// Set the mtime of the file `p` a minute back: a held file changed
/// between the runs.
fn a_minute_older(p: &Path) {
    let t = std::fs::metadata(p).unwrap().modified().unwrap();
    std::fs::File::options().write(true).open(p).unwrap().set_modified(t - Duration::from_secs(60)).unwrap();
}

/// A tree that changed between the runs, on the server (a held file's
/// mtime) or here (a held file removed), fails the check: the server
/// answers 554 and the tree goes whole at once, not counted as a retry
/// (`--retries 0`).
#[test]
fn a_tree_changed_since_the_interrupted_run_goes_whole() {
    let (_d, root, local) = root_and_local();
    let state = scratch();
    let (tree, n) = tree_with_a_big_last_file(&root, 14);
    let held = tree.join("d0/s0/f0.dat");
    let (_srv, port, _) = interrupted_tree_download(state.path(), &root, &local);
    a_minute_older(&held);
    let mut cp = partial_tree_cp(state.path(), port, &local);
    let err = succeeded(cp.args(["--retries", "0"]).output().unwrap());
    assert!(err.contains("the tree changed since") && err.contains("copying the whole tree now"), "{err}");
    assert_rebuilt(&err, n + 1);
    assert_same_tree(&tree, &local.join("tree"));
    // Removed here: the local check differs.
    std::fs::remove_dir_all(local.join("tree")).unwrap();
    let (_srv2, port2, _) = interrupted_tree_download(state.path(), &root, &local);
    std::fs::remove_file(local.join("tree/d0/s0/f0.dat")).unwrap();
    let err = succeeded(partial_tree_cp(state.path(), port2, &local).args(["--retries", "0"]).output().unwrap());
    assert!(err.contains("copying the whole tree now"), "{err}");
    assert_same_tree(&tree, &local.join("tree"));
}

/// `lightpath -v cp -q -r --partial -p 4 tree URL/` to our server on
/// `port`, its notes kept in `state`: the tree lands as `/tree`.
fn partial_tree_up(state: &Path, tree: &Path, port: u16) -> std::process::Command {
    let mut c = std::process::Command::new(LP);
    c.env("XDG_STATE_HOME", state).args(["-v", "cp", "-r", "--partial", "-p", "4"]);
    c.args([tree.to_str().unwrap(), &format!("ftp://127.0.0.1:{port}/")]);
    c.stderr(std::process::Stdio::piped());
    c
}

/// A `cp -r --partial` of `tree` to our server (serving `root`),
/// interrupted (Ctrl-C) once it has read a quarter of the big file: the
/// server's failure reply, read before it stops, says what the server
/// holds, and that is noted.
fn interrupted_tree_upload(state: &Path, tree: &Path, root: &Path) -> (Proc, u16) {
    let (srv, port) = lp_server(root, &["--anonymous-write"]);
    let cp = partial_tree_up(state, tree, port).spawn().expect("start cp");
    let pid = cp.id();
    midway(|| vec![pid]);
    let (code, err) = interrupt(cp);
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("noted: the same cp -r --partial sends only the rest"), "{err}");
    (srv, port)
}

/// The last `tree rebuilt` line of what a download's `cp -v` said
/// rebuilt `files` files.
fn assert_rebuilt(err: &str, files: usize) {
    let last = err.lines().rfind(|l| l.contains("tree rebuilt")).unwrap_or_default();
    assert!(last.contains(&format!("files: {files},")), "{files} files rebuilt: {err}");
}

/// The last `tree sent` line of what `cp -v` said sent `files` files.
fn assert_sent(err: &str, files: usize) {
    let last = err.lines().rfind(|l| l.contains("tree sent")).unwrap_or_default();
    assert!(last.contains(&format!("files={files} ")), "{files} files sent: {err}");
}

/// A tree upload interrupted with `--partial` is taken up by the next
/// `cp -r --partial`: the server holds the small files with the source's
/// check (`OPTS VSTO After=;Check=`), so only the big file goes.
#[test]
fn an_interrupted_tree_upload_is_resumed_by_the_next_partial_run() {
    let (_d, root, local) = root_and_local();
    let state = scratch();
    let (tree, n) = tree_with_a_big_last_file(&local, 15);
    let (_srv, port) = interrupted_tree_upload(state.path(), &tree, &root);
    // The tree kept for what it holds has its source's mode, not the
    // 0700 it was made with for the writing (which it kept).
    let mode =
        |p: &Path| std::fs::metadata(p).map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777);
    let want = mode(&tree).unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while mode(&root.join("tree")).ok() != Some(want) && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(mode(&root.join("tree")).ok(), Some(want), "the kept tree's own mode");
    let err = succeeded(partial_tree_up(state.path(), &tree, port).output().unwrap());
    assert!(err.contains(&format!("{n} files, ")) && err.contains("held)"), "{err}");
    assert!(err.contains(&format!("{} file(s) copied", n + 1)), "{err}");
    assert!(err.contains(&format!("{n} files of the tree (")), "{err}");
    assert_sent(&err, 1);
    assert_same_tree(&tree, &root.join("tree"));
    // The successful run removed the note: a third run sends the whole tree.
    let err = succeeded(partial_tree_up(state.path(), &tree, port).output().unwrap());
    assert_sent(&err, n + 1);
}

/// A resumed run that is killed (it has no chance to note anything)
/// leaves the earlier run's note: the run after it resumes from there.
#[test]
fn a_killed_resumed_upload_leaves_the_note_for_the_next_run() {
    let (_d, root, local) = root_and_local();
    let state = scratch();
    let (tree, n) = tree_with_a_big_last_file(&local, 18);
    let (_srv, port) = interrupted_tree_upload(state.path(), &tree, &root);
    let cp = partial_tree_up(state.path(), &tree, port).spawn().expect("start cp");
    let pid = cp.id();
    kill_midway(|| vec![pid]);
    cp.wait_with_output().unwrap();
    next_upload_resumes(state.path(), &tree, port, &root, n);
}

/// The same `cp -r --partial` of `tree` to `port` (serving `root`) run
/// again: it takes up the note of the `n` small files held and sends only
/// the big file.
fn next_upload_resumes(state: &Path, tree: &Path, port: u16, root: &Path, n: usize) {
    let err = succeeded(partial_tree_up(state, tree, port).output().unwrap());
    assert!(err.contains(&format!("{n} files, ")) && err.contains("held)"), "{err}");
    assert_sent(&err, 1);
    assert_same_tree(tree, &root.join("tree"));
}

/// A tree upload whose client is killed (SIGKILL: it reads no failure
/// reply) is still resumed by the next run: the server's perf markers
/// (every second here) said which files it held, and the client kept its
/// note current as they came. The client is stopped for a while once the
/// small files are sent, so that markers wait for it, then let go and
/// killed once its note is there.
#[test]
fn a_killed_upload_is_resumed_from_what_the_servers_markers_said() {
    let (_d, root, local) = root_and_local();
    let state = scratch();
    let (tree, n) = tree_with_a_big_last_file(&local, 19);
    let (_srv, port) = lp_server(&root, &["--anonymous-write", "--marker-interval", "1"]);
    let cp = partial_tree_up(state.path(), &tree, port).spawn().expect("start cp");
    let pid = cp.id();
    midway(|| vec![pid]);
    signal("STOP", pid);
    std::thread::sleep(Duration::from_millis(2500));
    signal("CONT", pid);
    wait_for_note_of(state.path(), n);
    signal("KILL", pid);
    cp.wait_with_output().unwrap();
    next_upload_resumes(state.path(), &tree, port, &root, n);
}

/// A tree upload whose server dies (no failure reply) after its markers
/// said which files it held: the retry has the restarted server check
/// them (`OPTS VSTO After=;Check=`) and leaves them out. The client is
/// stopped while the markers wait in its socket and the server is killed
/// and started again.
#[test]
fn a_tree_upload_whose_server_dies_resumes_from_its_last_marker() {
    let (_d, root, local) = root_and_local();
    let (tree, n) = tree_with_a_big_last_file(&local, 20);
    let err = upload_across_a_server_death(&root, &tree, |_| {});
    assert!(err.contains(&format!("leaving out the {n} files held")), "{err}");
    assert_sent(&err, 1);
    assert_same_tree(&tree, &root.join("tree"));
}

/// The same, but a file the dead server's marker said it held is gone
/// when it comes back (a crash lost it, a cleanup removed it): the
/// retry's check fails (554) and the tree goes whole, all of it there.
#[test]
fn a_file_lost_while_the_server_was_down_sends_the_tree_whole() {
    let (_d, root, local) = root_and_local();
    let (tree, n) = tree_with_a_big_last_file(&local, 23);
    let err =
        upload_across_a_server_death(&root, &tree, |r| std::fs::remove_file(r.join("tree/d0/s0/f0.dat")).unwrap());
    assert!(err.contains(&format!("leaving out the {n} files held")), "{err}");
    assert!(err.contains("copying the whole tree now"), "{err}");
    assert_sent(&err, n + 1);
    assert_same_tree(&tree, &root.join("tree"));
}

/// `cp -v -r tree` to a server on `root` (markers every second) that is
/// killed once the small files are there, `meanwhile` done to `root`, and
/// the server started again: what `cp` said (it must succeed).
fn upload_across_a_server_death(root: &Path, tree: &Path, meanwhile: impl FnOnce(&Path)) -> String {
    let (mut srv, port) = lp_server(root, &["--anonymous-write", "--marker-interval", "1"]);
    let cp = start_cp(&["-v", "-r", tree.to_str().unwrap(), &format!("ftp://127.0.0.1:{port}/")]);
    let pid = cp.id();
    midway(|| vec![pid]);
    signal("STOP", pid);
    std::thread::sleep(Duration::from_millis(2500));
    srv.0.kill().unwrap();
    srv.0.wait().unwrap();
    meanwhile(root);
    let _again = lp_server_on(root, port, &["--anonymous-write"]);
    signal("CONT", pid);
    succeeded(cp.wait_with_output().unwrap())
}

/// Wait (up to 20 s) until the one tree note in `state` says `n` files
/// are held (an earlier one may say fewer).
fn wait_for_note_of(state: &Path, n: usize) {
    let says_n = || {
        let Ok(mut notes) = std::fs::read_dir(state.join("lightpath/trees")) else { return false };
        let note = notes.next().and_then(|e| std::fs::read_to_string(e.ok()?.path()).ok());
        note.is_some_and(|t| t.contains(&format!("\nfiles {n}\n")))
    };
    let t = std::time::Instant::now();
    while !says_n() {
        assert!(t.elapsed() < Duration::from_secs(20), "no note of the {n} files written while the tree went");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn signal(sig: &str, pid: u32) {
    let st = std::process::Command::new("kill").args([&format!("-{sig}"), &pid.to_string()]).status().unwrap();
    assert!(st.success(), "kill -{sig} {pid}");
}

/// An uploaded tree that changed between the runs, on the server (a held
/// file's mtime) or here (a held file's mtime), fails the server's check:
/// 554 before its VSTO starts, and the tree goes whole at once, not
/// counted as a retry (`--retries 0`).
#[test]
fn an_uploaded_tree_changed_since_the_interrupted_run_goes_whole() {
    let (_d, root, local) = root_and_local();
    let state = scratch();
    let (tree, n) = tree_with_a_big_last_file(&local, 16);
    let (_srv, port) = interrupted_tree_upload(state.path(), &tree, &root);
    a_minute_older(&root.join("tree/d0/s0/f0.dat"));
    let err = succeeded(partial_tree_up(state.path(), &tree, port).args(["--retries", "0"]).output().unwrap());
    assert!(err.contains("the tree changed since") && err.contains("copying the whole tree now"), "{err}");
    assert_sent(&err, n + 1);
    assert_same_tree(&tree, &root.join("tree"));
    // Changed here: the source's check differs.
    let (_srv2, port2) = interrupted_tree_upload(state.path(), &tree, &root);
    a_minute_older(&tree.join("d0/s0/f0.dat"));
    let err = succeeded(partial_tree_up(state.path(), &tree, port2).args(["--retries", "0"]).output().unwrap());
    assert!(err.contains("copying the whole tree now"), "{err}");
    assert_sent(&err, n + 1);
    assert_same_tree(&tree, &root.join("tree"));
}

/// A tree download that fails for good without `--partial` keeps its
/// complete files and says so, and how to have them left out next time.
#[test]
fn a_failed_tree_says_which_files_it_left_complete() {
    let (_d, root, local) = root_and_local();
    let (_tree, n) = tree_with_a_big_last_file(&root, 17);
    let (mut srv, port) = lp_server(&root, &["--anonymous-write"]);
    let dst = local.join("tree");
    let cp = start_cp(&["-r", "--retries", "0", &format!("ftp://127.0.0.1:{port}/tree"), dst.to_str().unwrap()]);
    let pid = srv.0.id();
    kill_midway(|| vec![pid]);
    srv.0.wait().unwrap();
    let out = cp.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{n} files of the tree ("))
            && err.contains("not noted: a run with --partial notes what it leaves"),
        "{err}"
    );
    assert_eq!(regular_files(&dst), n, "{err}");
}

fn regular_files(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let t = e.file_type().unwrap();
        n += if t.is_dir() { regular_files(&e.path()) } else { usize::from(t.is_file()) };
    }
    n
}

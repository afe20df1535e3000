//! How `lightpath cp` meets a user's mistakes and a server not (yet)
//! there: sources on two servers, local to local, a port that speaks
//! another protocol, a server that starts late, options given through the
//! environment.

mod common;
use common::*;
use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

fn url(port: u16, path: &str) -> String {
    format!("ftp://127.0.0.1:{port}{path}")
}

/// Two servers holding a file of one name with different data: a copy
/// naming both was planned and copied through the first one's session,
/// and wrote its file in the second one's place (exit 0, `--verify`
/// agreeing). It is refused before anything is made.
#[test]
fn sources_on_two_servers_are_refused() {
    let d = scratch();
    let (a, b) = (open_dir(&d.path().join("a")), open_dir(&d.path().join("b")));
    std::fs::write(a.join("one"), b"from a").unwrap();
    std::fs::write(a.join("same"), b"a's copy").unwrap();
    std::fs::write(b.join("same"), b"b's copy").unwrap();
    let (_sa, pa) = lp_server(&a, &["--anonymous"]);
    let (_sb, pb) = lp_server(&b, &["--anonymous"]);
    // An existing directory: several files into anything else are refused
    // for that first.
    let out = open_dir(&d.path().join("out/"));
    let (code, err) = cp(&[&url(pa, "/one"), &url(pb, "/same"), out.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("more than one server"), "{err}");
    assert!(std::fs::read_dir(&out).unwrap().next().is_none(), "nothing is made");
    let other_user = format!("ftp://someone@127.0.0.1:{pa}/same");
    let (code, err) = cp(&[&url(pa, "/one"), &other_user, out.to_str().unwrap()]);
    assert_eq!((code, err.contains("more than one server")), (2, true), "another user is another session: {err}");
}

#[test]
fn local_to_local_is_a_usage_error_that_makes_nothing() {
    let d = scratch();
    let src = d.path().join("tree");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/f"), b"x").unwrap();
    let dst = d.path().join("copy");
    let (code, err) = cp(&["-r", src.to_str().unwrap(), dst.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("local to local"), "{err}");
    assert!(!dst.exists(), "no directories made first");
}

/// A port where something else answers first, as SSH does.
fn ssh_like_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for mut s in l.incoming().flatten() {
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n");
            held.push(s);
        }
    });
    port
}

/// A port where something else answers (SSH greets first) fails at once,
/// saying so, instead of waiting out the reply timeout.
#[test]
fn a_port_that_speaks_another_protocol_fails_at_once() {
    let port = ssh_like_port();
    let d = scratch();
    let t = Instant::now();
    let (code, err) =
        cp(&["--retries", "0", "--reply-timeout", "20", &url(port, "/x"), d.path().join("x").to_str().unwrap()]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("not an FTP server") && err.contains("SSH-2.0"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(10), "took {:?}", t.elapsed());
}

/// `--retries` covers the first connection: a copy started while its
/// server restarts waits for it, as it would for a file's retry.
#[test]
fn retries_wait_for_a_server_that_starts_late() {
    let (d, root, local) = root_and_local();
    std::fs::write(root.join("f"), b"late but whole").unwrap();
    let port = free_port();
    own_peer_book();
    let child = Command::new(LP)
        .args(["cp", "-q", "--retries", "3", &url(port, "/f")])
        .arg(local.join("f"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let _s = lp_server_on(&root, port, &["--anonymous"]);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("trying again"), "{err}");
    assert_eq!(std::fs::read(local.join("f")).unwrap(), b"late but whole");
    drop(d);
}

/// Boolean options from the environment take 1/0, yes/no, on/off as well
/// as true/false (`LIGHTPATH_READ_ONLY=0` leaves writes allowed).
#[test]
fn boolean_options_from_the_environment() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    let serve = |env: &[(&str, &str)]| {
        let mut c = Command::new(LP);
        c.args(["serve", "--listen", "127.0.0.1:1", "--ahead-port", "off", "--root"]).arg(&root);
        c.envs(env.iter().copied());
        let out = c.output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = serve(&[("LIGHTPATH_ANONYMOUS", "1"), ("LIGHTPATH_LOGIN_TIMEOUT", "99999999999")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--login-timeout") && err.contains("604800"), "bounded, no panic: {err}");
    let port = free_port();
    for (ro, aw) in [("0", "1"), ("no", "yes"), ("off", "on")] {
        let mut c = Command::new(LP);
        c.args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--ahead-port", "off", "--root"]).arg(&root);
        c.env("LIGHTPATH_READ_ONLY", ro).env("LIGHTPATH_ANONYMOUS_WRITE", aw);
        let _s = Proc(c.stderr(std::process::Stdio::null()).spawn().unwrap());
        let mut raw = connect_retrying(port);
        assert_eq!(raw.cmd("USER anonymous").0 / 100, 3);
        assert_eq!(raw.cmd("PASS x").0, 230);
        assert_eq!(raw.cmd("MKD made").0, 257, "writes allowed with READ_ONLY={ro}");
        std::fs::remove_dir(root.join("made")).unwrap();
    }
}

fn connect_retrying(port: u16) -> Raw {
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t.elapsed() < Duration::from_secs(10), "no server on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Raw::connect(port)
}

/// `cp -q` of a copy that succeeds prints nothing at all: no summary, in
/// any direction, file or tree, nor `--verify`'s word that it passed (it
/// still printed the summary). A failure is still told, with the summary.
#[test]
fn a_quiet_copy_that_succeeds_prints_nothing() {
    let (_d, root, local) = root_and_local();
    make_tree(&root.join("tree"), 12, 9);
    write_random(&root.join("f"), 70_000, 1);
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let (f, got) = (local.join("f").display().to_string(), local.join("got").display().to_string());
    let (src, up, tree, back) = (url(port, "/f"), url(port, "/up"), url(port, "/tree/"), url(port, "/back"));
    let into = format!("{got}/");
    let runs: [&[&str]; 4] = [&[&src, &f], &["--verify", "MD5", &f, &up], &["-r", &tree, &into], &["-r", &got, &back]];
    for args in runs {
        let (code, err) = cp(args);
        assert_eq!((code, err.as_str()), (0, ""), "cp -q {args:?}");
    }
    assert_same_file(&root.join("f"), &root.join("up"));
    assert_same_tree(&root.join("tree"), &root.join("back"));
    let (code, err) = cp(&[&url(port, "/nope"), local.join("nope").to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("FAILED") && err.contains("0 file(s) copied, 1 failed"), "{err}");
}

/// Run `lightpath ARGS` (`ls URL`, `sum URL`): its exit status and stderr.
fn ls_sum(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(LP).args(args).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `ls` and `sum` exit 2 for an argument that cannot be used, as `cp`
/// and clap's own usage errors do (they exited 1, as a failure does), and
/// 1 for a failure once running.
#[test]
fn ls_and_sum_usage_errors_exit_2_and_failures_1() {
    let (_d, root, local) = root_and_local();
    std::fs::write(root.join("f"), b"x").unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous"]);
    let local_path = local.display().to_string();
    for cmd in ["ls", "sum"] {
        for (arg, said) in [
            (local_path.as_str(), "not an ftp:// URL"),
            ("file:///etc/passwd", "not an ftp:// URL"),
            ("gsiftp://host/x", "not supported"),
            ("ftp:///x", "no host"),
            ("ftp://host:99999/x", "bad URL"),
        ] {
            let (code, err) = ls_sum(&[cmd, arg]);
            assert_eq!(code, Some(2), "{cmd} {arg}: {err}");
            assert!(err.contains(said), "{cmd} {arg}: {err}");
        }
        let (code, err) = ls_sum(&[cmd, &url(free_port(), "/")]);
        assert_eq!(code, Some(1), "{cmd}: no server there is a failure: {err}");
        let (code, err) = ls_sum(&[cmd, &url(port, "/nope")]);
        assert_eq!(code, Some(1), "{cmd}: a missing path is a failure: {err}");
    }
    let (code, err) = ls_sum(&["sum", &url(port, "/f")]);
    assert_eq!(code, Some(0), "{err}");
    // The URL printed beside the digest leaves the password out (it was there).
    let out = Command::new(LP).args(["sum", &format!("ftp://anonymous:s3cret@127.0.0.1:{port}/f")]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("ftp://anonymous@127.0.0.1") && !text.contains("s3cret"), "{text}");
    // An algorithm the server's FEAT does not offer is a usage error, as
    // with `cp --verify` (it exited 1).
    let (code, err) = ls_sum(&["sum", "--alg", "CRC32", &url(port, "/f")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--alg CRC32") && err.contains("does not compute CRC32"), "{err}");
}

/// A server that cannot be reached fails a copy with exit 1 whichever
/// way it goes, as a file that fails once running does; 2 is for usage
/// errors (a download from a server that is down exited 2, an upload 1).
#[test]
fn a_server_that_is_down_is_a_failure_not_a_usage_error() {
    let (_d, root, local) = root_and_local();
    std::fs::write(local.join("f"), b"x").unwrap();
    let dead = free_port();
    let (f, got) = (local.join("f").display().to_string(), local.join("got").display().to_string());
    for (src, dst) in [(url(dead, "/f"), got.clone()), (f.clone(), url(dead, "/f"))] {
        let (code, err) = cp(&["--retries", "0", &src, &dst]);
        assert_eq!(code, 1, "{src} -> {dst}: {err}");
        assert!(err.contains("Connection refused"), "{src} -> {dst}: {err}");
    }
    let (_s, port) = lp_server(&root, &["--anonymous"]);
    let (code, err) = cp(&["--retries", "0", &url(port, "/f"), &url(dead, "/f")]);
    assert_eq!(code, 1, "third party: {err}");
    let (code, err) = cp(&[&f, &got]);
    assert_eq!(code, 2, "local to local stays a usage error: {err}");
}

/// A server that takes the connection and never greets is given up after
/// the connect timeout (it was waited for through the reply timeout, 300
/// s a try), and the error says no greeting came.
#[test]
fn a_server_that_never_greets_is_given_up_after_the_connect_timeout() {
    let (_d, _root, local) = root_and_local();
    let mute = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = mute.local_addr().unwrap().port();
    let held = std::thread::spawn(move || mute.accept().map(|(s, _)| s));
    let started = Instant::now();
    let dst = local.join("x").display().to_string();
    let (code, err) = cp(&["--connect-timeout", "2", "--retries", "0", &url(port, "/x"), &dst]);
    let took = started.elapsed();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no greeting within 2 s"), "{err}");
    assert!(took < Duration::from_secs(20), "{took:?}: {err}");
    drop(held);
}

/// Ctrl-C while a server has not greeted ends the copy at once, in each
/// direction: the login was waited for through the interrupted copy's
/// grace (10 s), or the connect timeout if shorter.
#[test]
fn ctrl_c_before_the_greeting_ends_the_copy_at_once() {
    let (_d, root, local) = root_and_local();
    std::fs::write(root.join("f"), b"data").unwrap();
    let mute = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = mute.local_addr().unwrap().port();
    let held = std::thread::spawn(move || (0..3).map(|_| mute.accept().map(|(s, _)| s)).collect::<Vec<_>>());
    let (up, down) = (url(port, "/x"), local.join("x").display().to_string());
    let f = root.join("f").display().to_string();
    for args in [[up.as_str(), down.as_str()], [f.as_str(), up.as_str()], ["-r", up.as_str()]] {
        let dst = if args[0] == "-r" { format!("{down}-tree") } else { String::new() };
        let child = Command::new(LP)
            .args(["cp", "--connect-timeout", "60"])
            .args(args)
            .args((!dst.is_empty()).then_some(dst.as_str()))
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(700));
        let started = Instant::now();
        let (code, err) = interrupt(child);
        let took = started.elapsed();
        assert_eq!(code, Some(130), "{args:?}: {err}");
        assert!(took < Duration::from_secs(3), "{args:?}: {took:?}: {err}");
    }
    drop(held);
}

/// A source ending in `..` or `.` (`cp -r .. ftp://h/in/`) goes into the
/// destination, as GNU cp and rsync copy it: it went to `/in/..`, the
/// server's root, over a file of the same name there, exit 0 (a defect
/// hunt's find). The same with a second source (the file-by-file path).
#[test]
fn a_source_ending_in_dot_dot_goes_into_the_destination() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    std::fs::create_dir(root.join("in")).unwrap();
    std::fs::write(root.join("notes.txt"), b"the server's own").unwrap();
    let proj = d.path().join("proj");
    std::fs::create_dir_all(proj.join("sub")).unwrap();
    std::fs::write(proj.join("notes.txt"), b"the project's").unwrap();
    std::fs::write(d.path().join("single"), b"one").unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let in_url = url(port, "/in/");
    let single = d.path().join("single").display().to_string();
    let runs: [&[&str]; 3] = [&["-r", "..", &in_url], &["-r", ".", &in_url], &["-r", "../sub/..", &single, &in_url]];
    for args in runs {
        own_peer_book();
        let out = Command::new(LP).args(["cp", "-q"]).args(args).current_dir(proj.join("sub")).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(std::fs::read(root.join("notes.txt")).unwrap(), b"the server's own", "written over");
    assert_eq!(std::fs::read(root.join("in/notes.txt")).unwrap(), b"the project's");
    assert!(root.join("in/sub").is_dir() && root.join("in/single").is_file() && !root.join("sub").exists());
}

/// `--verify` into `/dev/null` is refused before anything moves: the copy
/// went, then failed its check ("not a regular file"), exit 1.
#[test]
fn verify_into_dev_null_is_a_usage_error() {
    let (_d, root, _local) = root_and_local();
    std::fs::write(root.join("f"), b"x").unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous"]);
    let (code, err) = cp(&["--verify", "MD5", &url(port, "/f"), "/dev/null"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/dev/null is not a regular file"), "{err}");
    let (code, err) = cp(&[&url(port, "/f"), "/dev/null"]);
    assert_eq!(code, 0, "without --verify it goes: {err}");
}

/// `cp --partial` without a state directory (neither `XDG_STATE_HOME` nor
/// `HOME`) says that it notes no upload or tree: it kept none, silently,
/// while the server held the upload's bytes for nobody.
#[test]
fn partial_without_a_state_directory_says_so() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    std::fs::write(d.path().join("f"), b"data").unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let out = Command::new(LP)
        .args(["cp", "-q", "--partial"])
        .arg(d.path().join("f"))
        .arg(url(port, "/f"))
        .env_remove("HOME")
        .env_remove("XDG_STATE_HOME")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("neither XDG_STATE_HOME nor HOME is set"), "{err}");
    assert_eq!(std::fs::read(root.join("f")).unwrap(), b"data");
}

/// Many streams under a low soft limit of open files: `cp` raises it to
/// the hard limit, as `serve` does. It did not, and `-p 128 --cc 4` under
/// a soft limit of 256 ran out of descriptors and stalled for minutes,
/// copying nothing (a defect hunt's find; 1024 is the usual soft limit).
#[test]
fn many_streams_under_a_low_soft_limit_of_open_files_copy() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    let local = open_dir(&d.path().join("local"));
    let mut urls = Vec::new();
    for i in 0..24 {
        write_random(&root.join(format!("m{i}")), 1 << 20, i);
        urls.push(String::new());
    }
    let (_s, port) = lp_server(&root, &["--anonymous"]);
    for (i, u) in urls.iter_mut().enumerate() {
        *u = url(port, &format!("/m{i}"));
    }
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -S -n 256 && exec \"$0\" \"$@\"")
        .arg(LP)
        .args(["cp", "-q", "--retries", "0", "-p", "128", "--cc", "4"])
        .args(&urls)
        .arg(format!("{}/", local.display()))
        .spawn()
        .unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            panic!("stalled for 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success());
    assert_same_tree(&root, &local);
}

/// Under a hard limit of open files too small for the streams asked, a
/// copy holds its streams (and sessions) to what the limit allows, and
/// says so. It opened them all, ran out of descriptors at once ("Too many
/// open files") and failed the tree and each file.
#[test]
fn streams_beyond_a_hard_limit_of_open_files_are_held_to_it() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    for i in 0..6 {
        write_random(&root.join(format!("m{i}")), 4 << 20, i);
    }
    let (_s, port) = lp_server(&root, &["--anonymous"]);
    let tree = d.path().join("tree");
    let files = open_dir(&d.path().join("files"));
    let urls: Vec<String> = (0..6).map(|i| url(port, &format!("/m{i}"))).collect();
    let runs: [Vec<String>; 2] = [
        vec!["-p".into(), "128".into(), "-r".into(), url(port, "/"), tree.display().to_string()],
        [vec!["-p".into(), "64".into(), "--cc".into(), "4".into()], urls, vec![format!("{}/", files.display())]]
            .concat(),
    ];
    for args in runs {
        let out = Command::new("sh")
            .arg("-c")
            .arg("ulimit -n 128 && exec \"$0\" \"$@\"")
            .arg(LP)
            .args(["cp", "--retries", "0"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {err}");
        assert!(err.contains("the limit of 128 open files allows no more"), "{err}");
    }
    assert_same_tree(&root, &tree);
    assert_same_tree(&root, &files);
}

/// `ls` and `sum` take `--connect-timeout` and `--reply-timeout` as `cp`
/// does (they read only the environment's): a server that never greets
/// fails them in the time given.
#[test]
fn ls_and_sum_take_the_timeouts_cp_takes() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    for cmd in [vec!["ls"], vec!["sum", "--alg", "MD5"]] {
        let t = Instant::now();
        let out = Command::new(LP)
            .args(&cmd)
            .args(["--connect-timeout", "1", "--reply-timeout", "5", &url(port, "/f")])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd:?}: {err}");
        assert!(t.elapsed() < Duration::from_secs(10), "{cmd:?} took {:?}: {err}", t.elapsed());
    }
}

/// A name with no address, and a port where something else answers, are
/// not tried again: every retry met the same, and a typo cost 7 s of
/// warnings (a defect hunt's find).
#[test]
fn a_server_that_is_not_there_is_not_tried_again() {
    let port = ssh_like_port();
    let d = scratch();
    let dst = d.path().join("x").display().to_string();
    for src in [url(port, "/x"), "ftp://no-such-host.invalid/x".to_string()] {
        let t = Instant::now();
        let (code, err) = cp(&["--retries", "3", &src, &dst]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("not an FTP server") || err.contains("no such host"), "{err}");
        assert!(!err.contains("trying again"), "{err}");
        assert!(t.elapsed() < Duration::from_secs(3), "took {:?}", t.elapsed());
    }
}

/// Several files into a destination that is not a directory are refused
/// before anything is asked of the server, as `cp` refuses them: each
/// failed alone, after its data had moved.
#[test]
fn several_files_into_what_is_not_a_directory_are_refused_at_once() {
    let (d, root, local) = root_and_local();
    std::fs::write(root.join("a"), b"a").unwrap();
    std::fs::write(root.join("b"), b"b").unwrap();
    std::fs::write(local.join("afile"), b"mine").unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous"]);
    for dst in [local.join("nodir/"), local.join("afile")] {
        let (code, err) = cp(&[&url(port, "/a"), &url(port, "/b"), dst.to_str().unwrap()]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("is not a directory") && !err.contains("FAILED"), "{err}");
    }
    assert_eq!(std::fs::read(local.join("afile")).unwrap(), b"mine");
    assert!(!local.join("nodir").exists());
    drop(d);
}

/// A URL without a user, to a server that takes no anonymous logins: the
/// refusal says how to give one.
#[test]
fn an_anonymous_login_refused_says_how_to_give_a_user() {
    let (d, root, local) = root_and_local();
    std::fs::write(root.join("f"), b"f").unwrap();
    let mut passwd = Command::new(LP)
        .args(["passwd", "alice"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    passwd.stdin.take().unwrap().write_all(b"secret\n").unwrap();
    let users = d.path().join("users");
    std::fs::write(&users, passwd.wait_with_output().unwrap().stdout).unwrap();
    let (_s, port) = lp_server(&root, &["--users", users.to_str().unwrap()]);
    let (code, err) = cp(&["--retries", "0", &url(port, "/f"), local.join("f").to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("give a user as ftp://USER@host/path, its password in LIGHTPATH_PASSWORD"), "{err}");
    let alice = format!("ftp://alice:secret@127.0.0.1:{port}/f");
    let (code, err) = cp(&[&alice, local.join("f").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    // The password out of the process list: from the environment, for a
    // URL that names a user without one; one in the URL wins.
    let alice = format!("ftp://alice@127.0.0.1:{port}/f");
    let g = local.join("g");
    for (pass, want) in [("secret", Some(0)), ("wrong", Some(1))] {
        let (code, err, _) =
            cp_within(&["--retries", "0", &alice, g.to_str().unwrap()], &[("LIGHTPATH_PASSWORD", pass)], 60);
        assert_eq!(code, want, "LIGHTPATH_PASSWORD={pass}: {err}");
    }
    let given = format!("ftp://alice:secret@127.0.0.1:{port}/f");
    let (code, err, _) = cp_within(&[&given, g.to_str().unwrap()], &[("LIGHTPATH_PASSWORD", "wrong")], 60);
    assert_eq!(code, Some(0), "{err}");
    // One password for one login: a copy naming two users without
    // passwords is refused before anything is sent (the one site's
    // password went to the other), and anonymous never gets it.
    let bob = format!("ftp://bob@127.0.0.1:{port}/g");
    let (code, err, _) = cp_within(&[&alice, &bob], &[("LIGHTPATH_PASSWORD", "secret")], 60);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("alice@127.0.0.1") && err.contains("bob@127.0.0.1"), "{err}");
    let anon = format!("ftp://anonymous@127.0.0.1:{port}/f");
    let (code, err, _) =
        cp_within(&["--retries", "0", &anon, g.to_str().unwrap()], &[("LIGHTPATH_PASSWORD", "secret")], 60);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("as anonymous"), "logged in as anonymous, not with alice's password: {err}");
}

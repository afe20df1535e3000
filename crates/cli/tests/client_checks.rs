//! Client failures found by an interop probe against the real Globus tools:
//! a third-party copy that fails on one side ends at once with the cause;
//! a directory the server cannot make is one error, not one per file;
//! `--verify` with an algorithm a server lacks is refused before copying;
//! `--verify` checks every file of a tree copied as one virtual file; and
//! a file named like an MLST fact (`type=dir`) is a file; a large
//! download whose destination cannot be made fails without moving it.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn url(port: u16, path: &str) -> String {
    format!("ftp://127.0.0.1:{port}{path}")
}

/// Run `lightpath ARGS`: whether it succeeded and what it said on stderr.
/// A run longer than `secs` is a hang: killed, and the test fails.
fn run(args: &[&str], secs: u64) -> (bool, String) {
    let mut child = Command::new(LP).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return (st.success(), reader.join().unwrap());
        }
        if t.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("lightpath {args:?} hung for {secs} s; it said: {}", reader.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A directory only root can write to (servers here run as `gftp`).
fn root_only(p: &Path) -> String {
    std::fs::create_dir_all(p).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p.display().to_string()
}

#[test]
fn a_third_party_copy_failing_on_one_side_ends_at_once_with_the_cause() {
    assert_eq!(lightpath_sys::privs::euid(), 0, "the lightpath server drops root to gftp (CI runs as root)");
    let d = scratch();
    let (home, lroot) = (open_dir(&d.path().join("g")), open_dir(&d.path().join("lp")));
    write_random(&home.join("f"), 5_000_017, 1);
    write_random(&lroot.join("ok"), 300_000, 2);
    root_only(&lroot.join("ro"));
    let (_g, gp) = gct_server(&home);
    let (_l, lp) = lp_server(&lroot, &["--anonymous-write", "--run-as", "gftp"]);
    let g = |p: &str| url(gp, &format!("{}/{p}", home.display()));
    for _ in 0..5 {
        let (ok, err) = run(&["cp", "-q", &g("f"), &url(lp, "/ro/f")], 30);
        assert!(!ok && err.contains("STOR refused") && err.contains("Permission denied"), "{err}");
        assert!(!err.contains("closed the control connection"), "{err}");
        let (ok, err) = run(&["cp", "-q", &url(lp, "/nope"), &g("x")], 30);
        assert!(!ok && err.contains("/nope") && err.contains("No such file"), "{err}");
        assert!(!err.contains("closed the control connection"), "{err}");
    }
    // Every Globus session process ended (an ABOR had left some hung).
    let t = Instant::now();
    while !gct_sessions(gp).is_empty() {
        assert!(t.elapsed() < Duration::from_secs(10), "hung Globus sessions: {:?}", gct_sessions(gp));
        std::thread::sleep(Duration::from_millis(100));
    }
    // The destination whose transfer was given up serves the next file.
    open_dir(&home.join("dir"));
    let (ok, err) = run(&["cp", "-q", &url(lp, "/nope"), &url(lp, "/ok"), &format!("{}/", g("dir"))], 30);
    assert!(!ok && err.contains("No such file") && err.contains("1 file(s) copied, 1 failed"), "{err}");
    assert_same_file(&lroot.join("ok"), &home.join("dir/ok"));
}

/// The session processes of the Globus server on `port` (it forks one
/// per connection, `-inetd`).
fn gct_sessions(port: u16) -> Vec<String> {
    let port = format!("\0{port}\0");
    let cmdline = |e: std::fs::DirEntry| std::fs::read(e.path().join("cmdline")).ok();
    let lines = std::fs::read_dir("/proc").unwrap().map_while(Result::ok).filter_map(cmdline);
    let ours = |c: &Vec<u8>| {
        let c = String::from_utf8_lossy(c);
        c.contains("globus-gridftp-server") && c.contains(&port) && c.contains("\0-inetd\0")
    };
    lines.filter(ours).map(|c| String::from_utf8_lossy(&c).replace('\0', " ")).collect()
}

#[test]
fn a_directory_the_server_cannot_make_is_one_error() {
    let d = scratch();
    let (home, local) = (open_dir(&d.path().join("g")), open_dir(&d.path().join("local")));
    let rootonly = root_only(&home.join("rootonly"));
    make_tree(&local.join("tree"), 30, 4);
    let (_g, gp) = gct_server(&home);
    let tree = format!("{}/", local.join("tree").display());
    let (ok, err) = run(&["cp", "-q", "-r", &tree, &url(gp, &format!("{rootonly}/t/"))], 60);
    assert!(!ok, "{err}");
    assert!(err.contains("MKD") && err.contains("PERMISSION_DENIED"), "the MKD's refusal: {err}");
    assert!(!err.contains("STOR"), "no file was tried: {err}");
    // Directories that are there already are no error.
    let into = url(gp, &format!("{}/again/", home.display()));
    for _ in 0..2 {
        let (ok, err) = run(&["cp", "-q", "-r", &tree, &into], 60);
        assert!(ok, "{err}");
    }
    assert_same_tree(&local.join("tree"), &home.join("again"));
}

/// A server that logs in, offers `CKSM MD5:10;ADLER32:10;` and refuses
/// anything else: its port, and every command it was sent.
fn fake_server() -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming().map_while(Result::ok) {
            let seen = s2.clone();
            std::thread::spawn(move || fake_session(c, &seen));
        }
    });
    (port, seen)
}

fn fake_session(c: std::net::TcpStream, seen: &Mutex<Vec<String>>) {
    let mut w = c.try_clone().unwrap();
    let _ = w.write_all(b"220 fake\r\n");
    for line in BufReader::new(c).lines().map_while(Result::ok) {
        seen.lock().unwrap().push(line.clone());
        let verb = line.split(' ').next().unwrap_or("").to_ascii_uppercase();
        let reply = match verb.as_str() {
            "USER" => "331 ok\r\n",
            "PASS" => "230 ok\r\n",
            "FEAT" => {
                "211-Extensions\r\n CKSM MD5:10;ADLER32:10;\r\n PARALLEL\r\n MLST Type*;Size*;\r\n SIZE\r\n211 End.\r\n"
            }
            "TYPE" | "SITE" => "200 ok\r\n",
            "QUIT" => "221 bye\r\n",
            _ => "502 not here\r\n",
        };
        if w.write_all(reply.as_bytes()).is_err() || verb == "QUIT" {
            return;
        }
    }
}

#[test]
fn verify_with_an_algorithm_the_server_lacks_is_refused_before_copying() {
    let (_d, root, local) = root_and_local();
    write_random(&local.join("f"), 100_000, 3);
    let (port, seen) = fake_server();
    let f = local.join("f").display().to_string();
    for args in [[f.as_str(), &url(port, "/f")], [&url(port, "/f"), &local.join("back").display().to_string()]] {
        let (ok, err) = run(&["cp", "-q", "--verify", "CRC32C", args[0], args[1]], 30);
        assert!(!ok, "{err}");
        assert!(err.contains("CRC32C") && err.contains("MD5, ADLER32"), "names what the server offers: {err}");
    }
    let sent = seen.lock().unwrap().clone();
    let moved = ["MODE", "PASV", "PORT", "ALLO", "STOR", "RETR"];
    assert!(!sent.iter().any(|c| moved.iter().any(|m| c.starts_with(m))), "nothing was copied: {sent:?}");
    assert!(!local.join("back").exists());
    // An algorithm this client cannot compute is refused up front too.
    let (_s, lp) = lp_server(&root, &["--anonymous-write"]);
    let (ok, err) = run(&["cp", "-q", "--verify", "BLAKE3", &f, &url(lp, "/f")], 30);
    assert!(!ok && err.contains("BLAKE3") && err.contains("SHA256"), "{err}");
    assert!(!root.join("f").exists());
}

/// The CKSM commands a `lightpath -vv cp` run sent.
fn cksm_sent(log: &str) -> usize {
    log.lines().filter(|l| l.contains("> CKSM ")).count()
}

#[test]
fn verify_checks_every_file_of_a_tree_copied_as_one_virtual_file() {
    let d = scratch();
    let (a, b, local) =
        (open_dir(&d.path().join("a")), open_dir(&d.path().join("b")), open_dir(&d.path().join("local")));
    let n = make_tree(&a.join("tree"), 40, 6);
    // Links, which the copy makes links again and --verify leaves out; a
    // server's MLSD shows each as what it points to, and walking `self`
    // went 40 levels down (41 CKSMs of the same file) until ELOOP.
    std::os::unix::fs::symlink(".", a.join("tree/d0/self")).unwrap();
    std::os::unix::fs::symlink("s0/f0.dat", a.join("tree/d0/file-link")).unwrap();
    let (_a, pa) = lp_server(&a, &["--anonymous-write"]);
    let (_b, pb) = lp_server(&b, &["--anonymous-write"]);
    let dl = format!("{}/", local.join("dl").display());
    // Not -q: a quiet copy that succeeds says nothing, not even that --verify passed.
    let cp = |alg: &str, src: &str, dst: &str| run(&["-vv", "cp", "-r", "--verify", alg, src, dst], 60);
    let (ok, log) = cp("MD5", &url(pa, "/tree/"), &dl);
    assert!(ok && log.contains("VRET"), "{log}");
    assert_eq!(cksm_sent(&log), n, "download: one CKSM per file");
    assert!(log.contains(&format!("--verify MD5: the checksums of the {n} file(s) copied match")), "{log}");
    assert_same_tree(&a.join("tree"), &local.join("dl"));
    let (ok, log) = cp("ADLER32", &dl, &url(pb, "/up/"));
    assert!(ok && log.contains("VSTO"), "{log}");
    assert_eq!(cksm_sent(&log), n, "upload: one CKSM per file");
    assert_same_tree(&a.join("tree"), &b.join("up"));
    let (ok, log) = cp("SHA256", &url(pa, "/tree/"), &url(pb, "/tpt/"));
    assert!(ok && log.contains("VSTO"), "{log}");
    assert_eq!(cksm_sent(&log), 2 * n, "third party: one CKSM per file on each server");
    assert_same_tree(&a.join("tree"), &b.join("tpt"));
}

/// MLST's answer names the path after its facts: a file named `type=dir`
/// was taken for a directory ("is a directory (use -r)") when the client
/// looked for the text anywhere in the reply. From our server and GCT's.
#[test]
fn a_file_named_like_an_mlst_fact_is_a_file() {
    let d = scratch();
    let (root, local) = (open_dir(&d.path().join("root")), open_dir(&d.path().join("local")));
    write_random(&root.join("type=dir"), 70_000, 5);
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let (_g, gp) = gct_server(&root);
    let gct_path = format!("{}/type=dir", root.display());
    for (n, src) in [url(port, "/type=dir"), url(gp, &gct_path)].iter().enumerate() {
        let dst = local.join(format!("copy{n}"));
        let (ok, log) = run(&["cp", "-q", src, &dst.display().to_string()], 60);
        assert!(ok, "{src}: {log}");
        assert_same_file(&root.join("type=dir"), &dst);
    }
}

/// A trailing slash on a source without `-r` is not taken for a
/// directory the server does not list: `f/` naming a file, or a missing
/// `gone/`, was refused as "is a directory (use -r)" (exit 2). A missing
/// one now fails (exit 1) for the server's reason; `f/` is fetched (our
/// server, like GCT's, reads `/f/` as `/f`). A listed directory still
/// asks for `-r`. From our server and GCT's.
#[test]
fn a_trailing_slash_is_not_a_directory_the_server_does_not_list() {
    let d = scratch();
    let (root, local) = (open_dir(&d.path().join("root")), open_dir(&d.path().join("local")));
    write_random(&root.join("f"), 70_000, 6);
    std::fs::create_dir(root.join("d")).unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous"]);
    let (_g, gp) = gct_server(&root);
    let gct = format!("{}", root.display());
    for (n, (p, base)) in [(port, ""), (gp, gct.as_str())].into_iter().enumerate() {
        let dst = local.join(format!("f{n}")).display().to_string();
        let (code, err) = cp(&[&url(p, &format!("{base}/f/")), &dst]);
        assert_eq!(code, 0, "{err}");
        assert_same_file(&root.join("f"), Path::new(&dst));
        let (code, err) = cp(&[&url(p, &format!("{base}/gone/")), &dst]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("No such file") || err.contains("not found") || err.contains("exist"), "{err}");
        let (code, err) = cp(&[&url(p, &format!("{base}/d/")), &dst]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("is a directory (use -r)"), "{err}");
    }
}

/// A tree download whose destination cannot be made (a file is there)
/// fails at once for that reason: the server, its VRET sent, waited for
/// data connections that never came, so no reply came either; that was
/// "control connection ...: no reply 10 s after our end of the data
/// channel failed", retried 3 times (47 s). Nothing on the server is held.
#[test]
fn a_tree_download_to_a_destination_that_cannot_be_made_fails_at_once() {
    let (_d, root, local) = root_and_local();
    make_tree(&root.join("t"), 3, 2);
    // More than the sockets hold: a server whose tree fits in them
    // answered without waiting for the client.
    write_random(&root.join("t/big"), 64 << 20, 3);
    std::fs::write(local.join("taken"), b"a file").unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous"]);
    // A server known from an earlier copy (the peer book): the VRET goes
    // with the login, data connections opened ahead.
    let (code, err) = cp(&["-r", &url(port, "/t"), &local.join("fine").display().to_string()]);
    assert_eq!(code, 0, "{err}");
    let taken = local.join("taken").display().to_string();
    for dst in [taken.clone(), format!("{taken}/")] {
        let started = Instant::now();
        let (code, err) = cp(&["-r", &url(port, "/t"), &dst]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("taken") && err.contains("File exists"), "{err}");
        assert!(!err.contains("control connection") && !err.contains("trying again"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(8), "{:?}: {err}", started.elapsed());
    }
    assert_eq!(std::fs::read(local.join("taken")).unwrap(), b"a file");
    // The server goes on serving.
    let (code, err) = cp(&["-r", &url(port, "/t"), &local.join("again").display().to_string()]);
    assert_eq!(code, 0, "{err}");
    assert_same_tree(&root.join("t"), &local.join("again"));
}

/// A tree copied on one server into itself is refused before anything
/// moves, as `cp -r d d/sub` is: the sender walked what the receiver was
/// writing, and left a spurious `zz/self/zz/self`. A sibling whose name
/// starts the same is not inside it.
#[test]
fn a_tree_copied_into_itself_is_refused() {
    let (_d, root, _local) = root_and_local();
    make_tree(&root.join("self"), 4, 3);
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    for (src, dst) in [("/self", "/self/zz/"), ("/self/", "/self"), ("/self", "//self/./zz")] {
        let (code, err) = cp(&["-r", &url(port, src), &url(port, dst)]);
        assert_eq!(code, 2, "{src} -> {dst}: {err}");
        assert!(err.contains("into itself"), "{err}");
    }
    // The same server by another name (they were compared as text).
    let (code, err) = cp(&["-r", &url(port, "/self"), &format!("ftp://localhost:{port}/self/zz/")]);
    assert_eq!(code, 2, "localhost: {err}");
    assert!(err.contains("into itself"), "{err}");
    assert!(!root.join("self/zz").exists(), "something was copied");
    let (code, err) = cp(&["-r", &url(port, "/self"), &url(port, "/selfish")]);
    assert_eq!(code, 0, "{err}");
    assert_same_tree(&root.join("self"), &root.join("selfish"));
}

/// Two sources bound for one file (`a/x` and `b/x` into `out/`, or two
/// trees merged into one directory) are refused before anything moves:
/// the second overwrote the first and both were counted as copied.
#[test]
fn two_sources_bound_for_one_file_are_refused() {
    let (_d, root, local) = root_and_local();
    for (dir, body) in [("a", "A"), ("b", "B")] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
        std::fs::write(root.join(dir).join("x"), body).unwrap();
    }
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let out = format!("{}/", local.display());
    let (code, err) = cp(&[&url(port, "/a/x"), &url(port, "/b/x"), &out]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("would both be copied to") && err.contains("/x"), "{err}");
    assert!(std::fs::read_dir(&local).unwrap().next().is_none(), "something was copied");
    let (code, err) = cp(&["-r", &url(port, "/a/"), &url(port, "/b/"), &out]);
    assert_eq!(code, 2, "{err}");
    assert!(std::fs::read_dir(&local).unwrap().next().is_none(), "something was copied");
    // One of them alone goes.
    let (code, err) = cp(&[&url(port, "/a/x"), &out]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(local.join("x")).unwrap(), b"A");
}

/// A tree holding a file whose name has a line break, copied with
/// `--verify`: the file arrives, but no listing shows it, so it cannot be
/// checked. It was counted as copied and verified ("the checksums of the
/// 4 file(s) copied match", exit 0) though only 3 were checked; now the
/// copy says so and fails (as an upload does, whose CKSM cannot carry
/// the name), the files kept.
#[test]
fn verify_says_which_files_of_a_tree_it_could_not_check() {
    let d = scratch();
    let (a, local) = (open_dir(&d.path().join("a")), open_dir(&d.path().join("local")));
    let n = make_tree(&a.join("tree"), 3, 1);
    std::fs::write(a.join("tree/new\nline"), b"a line break in the name").unwrap();
    // A hard link's second name, listed, hid the unchecked file from the
    // count (names counted, not files): exit 0 again, download and third
    // party.
    std::fs::write(a.join("tree/once"), b"one file, two names").unwrap();
    std::fs::hard_link(a.join("tree/once"), a.join("tree/twice")).unwrap();
    let n = n + 1;
    let (_a, pa) = lp_server(&a, &["--anonymous-write"]);
    let dl = local.join("dl");
    let (ok, log) = run(&["cp", "-r", "--verify", "MD5", &url(pa, "/tree/"), &format!("{}/", dl.display())], 60);
    assert!(!ok, "{log}");
    assert!(log.contains("--verify could not check 1 file(s) of the tree"), "{log}");
    assert!(log.contains(&format!("{n} file(s) copied, 1 failed")), "{log}");
    assert!(log.contains(&format!("the checksums of the {n} file(s) copied match")), "{log}");
    assert_same_tree(&a.join("tree"), &dl);
    let (_b, pb) = lp_server(&local, &["--anonymous-write"]);
    let (ok, log) = run(&["cp", "-r", "--verify", "MD5", &url(pa, "/tree/"), &url(pb, "/tpt/")], 60);
    assert!(!ok, "{log}");
    assert!(log.contains("--verify could not check 1 file(s) of the tree"), "{log}");
    assert_same_tree(&a.join("tree"), &local.join("tpt"));
}

/// A file whose size reads 0 but which holds data (`/proc/cpuinfo`) was
/// sent by its size: it arrived empty and passed for copied, alone and
/// in trees (a defect hunt). It now fails, saying why.
#[test]
fn a_pseudo_file_of_proc_fails_rather_than_arriving_empty() {
    let (_d, root, _local) = root_and_local();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let why = "its size reads 0 but it holds data";
    let (code, err) = cp(&["/proc/cpuinfo", &url(port, "/cpuinfo")]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(why), "{err}");
    assert!(!root.join("cpuinfo").exists());
    let (code, err) = cp(&["-r", "/proc/sys/net/ipv4/conf/lo", &url(port, "/lo")]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(why), "the tree: {err}");
    assert!(err.contains("0 file(s) copied"), "{err}");
}

/// A large download whose destination cannot be made fails at once, from
/// lightpath's server and from GCT's: it was received to its end and
/// thrown away first (a defect hunt: 21 s for 20 GiB on loopback, hours
/// on a WAN, with a progress bar as for a real copy). The server goes on.
#[test]
fn a_large_download_whose_destination_cannot_be_made_fails_without_moving_it() {
    let (_d, root, local) = root_and_local();
    std::fs::File::create(root.join("big")).unwrap().set_len(16 << 30).unwrap();
    std::fs::write(root.join("small"), b"small").unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous"]);
    let (_g, gp) = gct_server(&root);
    let on_gct = |p: &str| url(gp, &format!("{}{p}", root.display()));
    let nowhere = local.join("nosuch/x").display().to_string();
    for (n, src) in [url(port, "/big"), on_gct("/big")].iter().enumerate() {
        let (ok, err) = run(&["cp", src, &nowhere], 120);
        assert!(!ok && err.contains("nosuch/x: No such file or directory"), "{src}: {err}");
        assert!(!err.contains("moved in all"), "{src}: the file was received and thrown away: {err}");
        let small = if n == 0 { url(port, "/small") } else { on_gct("/small") };
        let dst = local.join(format!("small{n}"));
        let (ok, err) = run(&["cp", "-q", &small, &dst.display().to_string()], 60);
        assert!(ok, "{err}");
        assert_eq!(std::fs::read(&dst).unwrap(), b"small");
    }
}

/// The same from a plain FTP server (MODE S only): the data connection is
/// taken and closed at once, where all of it was received into nothing.
#[test]
fn a_large_mode_s_download_whose_destination_cannot_be_made_is_cut_short() {
    use common::scripted::{self, DataEnd};
    use std::sync::atomic::{AtomicU64, Ordering};
    const SIZE: u64 = 256 << 20;
    let sent = Arc::new(AtomicU64::new(0));
    let counted = sent.clone();
    let port = scripted::serve(move |conn| {
        let (mut data, sent) = (DataEnd::default(), counted.clone());
        scripted::commands(conn, "plain", |out, verb, arg| {
            Some(match verb {
                "USER" => "331 password\r\n".into(),
                "FEAT" => "211-Features:\r\n SIZE\r\n211 End\r\n".into(),
                "SIZE" => format!("213 {SIZE}\r\n"),
                "PASV" | "EPSV" | "PORT" => data.set(verb, arg),
                "RETR" => {
                    let _ = out.write_all(b"150 here it comes\r\n");
                    let mut dc = data.open()?;
                    let chunk = vec![0u8; 1 << 20];
                    while sent.load(Ordering::Relaxed) < SIZE && dc.write_all(&chunk).is_ok() {
                        sent.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                    }
                    let whole = sent.load(Ordering::Relaxed) >= SIZE;
                    if whole { "226 Transfer complete.\r\n" } else { "426 Connection closed.\r\n" }.into()
                }
                "MODE" if !arg.eq_ignore_ascii_case("S") => "504 only MODE S\r\n".into(),
                _ => "200 OK\r\n".into(),
            })
        })
    });
    let (_d, _root, local) = root_and_local();
    let dst = local.join("nosuch/x").display().to_string();
    let (ok, err) = run(&["cp", "--retries", "0", &url(port, "/big"), &dst], 60);
    assert!(!ok && err.contains("nosuch/x: No such file or directory"), "{err}");
    let n = sent.load(Ordering::Relaxed);
    assert!(n < SIZE / 4, "{n} of {SIZE} bytes sent into nothing: {err}");
}

/// Two large files of a tree copied file by file (from GCT) whose
/// destinations cannot be made fail alone: each closes its data channel,
/// and the files sent behind it go again. Only once before: the files
/// behind the second failed too, with GCT's "connection prematurely
/// closed" (a defect hunt's find).
#[test]
fn two_large_files_that_cannot_be_made_fail_alone_in_a_tree_from_gct() {
    let (_d, root, local) = root_and_local();
    for dir in ["a", "b", "c"] {
        let d = root.join("t").join(dir);
        std::fs::create_dir_all(&d).unwrap();
        for (n, len) in [("big1", 20 << 20), ("big2", 20 << 20), ("small1", 1000), ("small2", 1000)] {
            write_random(&d.join(n), len, n.len() as u64);
        }
    }
    let (_g, gp) = gct_server(&root);
    let stuck = local.join("t/b");
    std::fs::create_dir_all(&stuck).unwrap();
    assert!(Command::new("chattr").arg("+i").arg(&stuck).status().unwrap().success());
    let src = url(gp, &format!("{}/t", root.display()));
    let (ok, err) = run(&["cp", "-r", "--retries", "0", &src, &format!("{}/", local.display())], 120);
    assert!(Command::new("chattr").arg("-i").arg(&stuck).status().unwrap().success());
    assert!(!ok, "{err}");
    let failed: Vec<&str> = err.lines().filter(|l| l.contains("FAILED")).collect();
    assert_eq!(failed.len(), 4, "only b's four files fail: {err}");
    assert!(failed.iter().all(|l| l.contains("/t/b/")), "{err}");
    for dir in ["a", "c"] {
        for n in ["big1", "big2", "small1", "small2"] {
            assert_same_file(&root.join("t").join(dir).join(n), &local.join("t").join(dir).join(n));
        }
    }
}

/// A download with `--verify` from a server that refuses CKSM (GCT's
/// `-disable-command-list CKSM`, which FEAT still lists): the copy is
/// complete and has its name, over the old file, so the failure says it
/// is kept, unverified. It said only that CKSM was refused, and "0
/// file(s) copied" read as if the old file were still there (a defect
/// hunt's find).
#[test]
fn a_download_whose_checksum_is_refused_says_it_is_kept_unverified() {
    let (_d, root, local) = root_and_local();
    let served = open_dir(&root.join("served"));
    write_random(&served.join("f"), 100_000, 11);
    std::fs::write(local.join("f"), b"my old file").unwrap();
    let (_g, port) = gct_server_with(&root, &["-disable-command-list", "CKSM"]);
    let from = format!("ftp://127.0.0.1:{port}{}/f", served.display());
    let (ok, err) = run(&["cp", "--verify", "MD5", &from, &local.join("f").display().to_string()], 30);
    assert!(!ok, "{err}");
    assert!(err.contains("--verify MD5 could not check it") && err.contains("is kept, unverified"), "{err}");
    assert_same_file(&served.join("f"), &local.join("f"));
}

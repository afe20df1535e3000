//! More rules a server must keep: CWD/CDUP only into a directory the
//! session's user can search, RNTO errors naming what failed, STOR onto a
//! directory refused before any data, a refused VSTO leaving no directory
//! behind, and VRET leaving out symlinks that leave the served root (as
//! LIST and MLSD do).

mod common;
use common::*;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

/// A scratch directory with an empty root (mode 0777) in it.
fn with_root() -> (tempfile::TempDir, std::path::PathBuf) {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    (d, root)
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A server running as `gftp` (root may search any directory): a
/// directory it cannot search is refused at CWD, and at CDUP, with 550,
/// and the working directory stays.
#[test]
fn cwd_and_cdup_need_search_permission() {
    let (_d, root) = with_root();
    std::fs::create_dir(root.join("locked")).unwrap();
    chmod(&root.join("locked"), 0o700); // root's: gftp may not search it
    open_dir(&root.join("a/b"));
    let (_s, port) = lp_server(&root, &["--anonymous-write", "--run-as", "gftp"]);
    let mut c = Raw::login(port);
    let (code, text) = c.cmd("CWD locked");
    assert_eq!(code, 550, "{text}");
    assert!(text.contains("/locked") && text.contains("cannot be searched"), "{text}");
    assert!(c.cmd("PWD").1.contains("\"/\""), "the working directory stays");
    assert_eq!(c.cmd("CWD a/b").0, 250);
    chmod(&root.join("a"), 0o766); // no x for gftp (others) any more
    let (code, text) = c.cmd("CDUP");
    assert_eq!(code, 550, "{text}");
    assert!(text.contains("/a:") && text.contains("cannot be searched"), "{text}");
    assert!(c.cmd("PWD").1.contains("\"/a/b\""));
    assert_eq!(c.cmd("CWD /").0, 250, "the root itself");
    chmod(&root.join("a"), 0o777);
    assert_eq!(c.cmd("CWD a").0, 250);
}

/// RNTO's reply names the target that could not be made, not the source.
#[test]
fn rnto_errors_name_the_target() {
    let (_d, root) = with_root();
    std::fs::write(root.join("f"), b"x").unwrap();
    open_dir(&root.join("full"));
    std::fs::write(root.join("full/x"), b"x").unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let mut c = Raw::login(port);
    for to in ["nodir/g", "full"] {
        assert_eq!(c.cmd("RNFR f").0, 350);
        let (code, text) = c.cmd(&format!("RNTO {to}"));
        assert_eq!(code, 550, "{text}");
        assert!(text.starts_with(&format!("550 /{to}: ")), "RNTO {to}: {text}");
    }
    assert_eq!(std::fs::read(root.join("f")).unwrap(), b"x");
}

/// STOR (APPE, ESTO) onto a directory, or a symlink to one, is refused at
/// once: no 150, no data connection waited for.
#[test]
fn stor_onto_a_directory_is_refused_before_any_data() {
    let (_d, root) = with_root();
    open_dir(&root.join("d"));
    std::fs::write(root.join("d/keep"), b"keep").unwrap();
    symlink("d", root.join("to-d")).unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let mut c = Raw::login(port);
    for mode in ["S", "E"] {
        assert_eq!(c.cmd(&format!("MODE {mode}")).0, 200);
        for verb in ["STOR d", "STOR to-d", "STOR d/", "STOR /", "APPE d", "ESTO A 0 d", "ALLO 10\r\nSTOR d"] {
            c.pasv(); // never connected: a server that waited for data would time out the reply
            let (code, text) = c.cmd(verb);
            let (code, text) = if verb.starts_with("ALLO") { c.reply() } else { (code, text) };
            assert_eq!(code, 550, "MODE {mode} {verb}: {text}");
            assert!(text.to_lowercase().contains("is a directory"), "{verb}: {text}");
        }
    }
    assert_eq!(c.cmd("NOOP").0, 200);
    assert_eq!(std::fs::read(root.join("d/keep")).unwrap(), b"keep");
    assert_eq!(std::fs::read_dir(root.join("d")).unwrap().count(), 1, "nothing left in d");
}

/// A VSTO refused before any data (here: no data connection set up) removes
/// the directories it created, and only those.
#[test]
fn a_refused_vsto_leaves_no_directory_behind() {
    let (_d, root) = with_root();
    open_dir(&root.join("keep"));
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let mut c = Raw::login(port);
    assert_eq!(c.cmd("VSTO new").0, 501, "MODE S: refused before anything is made");
    assert_eq!(c.cmd("MODE E").0, 200);
    for (path, gone) in [("new", "new"), ("deep/er/tree", "deep"), ("keep/sub", "keep/sub"), ("keep", "")] {
        let (code, text) = c.cmd(&format!("VSTO {path}"));
        assert_eq!(code, 425, "VSTO {path}: {text}");
        if !gone.is_empty() {
            assert!(root.join(gone).symlink_metadata().is_err(), "VSTO {path} left {gone} behind");
        }
    }
    assert!(root.join("keep").is_dir(), "a directory that was there stays");
    // Started, then the data connection closes with nothing sent.
    let at = c.pasv();
    c.send(b"VSTO started");
    drop(std::net::TcpStream::connect(at).unwrap());
    let (code, text) = c.final_reply();
    assert!(code >= 400, "{text}");
    assert!(root.join("started").symlink_metadata().is_err(), "VSTO left its empty directory behind");
    let names: Vec<_> = std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["keep"]);
}

/// VRET (`cp -r` from a lightpath server) leaves out the symlinks that
/// leave the served root, as LIST and MLSD do: counted with the skipped
/// special files, logged by the server, and not made at the destination.
/// Links that stay beneath the root (outside the tree too) still travel.
#[test]
fn vret_skips_symlinks_leaving_the_served_root() {
    let (d, root, local) = root_and_local();
    std::fs::write(d.path().join("secret"), b"outside").unwrap();
    let tree = open_dir(&root.join("tree"));
    open_dir(&root.join("other"));
    open_dir(&tree.join("sub"));
    write_random(&tree.join("a"), 5_000, 1);
    symlink(d.path().join("secret"), tree.join("abs-out")).unwrap();
    symlink("../../secret", tree.join("rel-out")).unwrap();
    symlink("../../../secret", tree.join("sub/deep-out")).unwrap();
    symlink("a", tree.join("in")).unwrap();
    symlink("../other", tree.join("sibling")).unwrap();
    let log = d.path().join("server.log");
    let (_s, port) = logged_server(&root, &log, &[]);
    let got = local.join("got");
    let (code, err) = cp(&["-r", &format!("ftp://127.0.0.1:{port}/tree/"), &format!("{}/", got.display())]);
    assert_eq!(code, 0, "{err}");
    assert_same_file(&tree.join("a"), &got.join("a"));
    for kept in ["in", "sibling"] {
        let want = std::fs::read_link(tree.join(kept)).unwrap();
        assert_eq!(std::fs::read_link(got.join(kept)).unwrap(), want, "{kept} travels");
    }
    for gone in ["abs-out", "rel-out", "sub/deep-out"] {
        assert!(got.join(gone).symlink_metadata().is_err(), "{gone} must not be sent");
    }
    assert!(err.contains("warning: 3 special file(s) skipped on the server"), "{err}");
    let said = std::fs::read_to_string(&log).unwrap();
    for gone in ["abs-out", "rel-out", "sub/deep-out"] {
        let line = said.lines().find(|l| l.contains("leaves the served root") && l.contains(gone));
        assert!(line.is_some(), "the server logs {gone}: {said}");
    }
}

/// `--anonymous` sessions may only read (anyone could write, delete and
/// rename anywhere under the root: a UX audit); `--anonymous-write`
/// lets them write, and the line that says the server is up tells which.
#[test]
fn anonymous_sessions_only_read_unless_allowed_to_write() {
    let (_d, root, local) = root_and_local();
    write_random(&root.join("f"), 10_000, 5);
    let (_srv, port) = lp_server(&root, &["--anonymous"]);
    let (code, err) = cp(&[&format!("ftp://127.0.0.1:{port}/f"), local.join("f").to_str().unwrap()]);
    assert_eq!(code, 0, "reads work: {err}");
    let (code, err) = cp(&[local.join("f").to_str().unwrap(), &format!("ftp://127.0.0.1:{port}/up")]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("anonymous sessions may only read"), "{err}");
    assert!(!root.join("up").exists());
    let mut c = Raw::login(port);
    assert_eq!(c.cmd("DELE f").0, 550);
    assert!(root.join("f").exists());
    let (_srv2, port2) = lp_server(&root, &["--anonymous-write"]);
    let (code, err) = cp(&[local.join("f").to_str().unwrap(), &format!("ftp://127.0.0.1:{port2}/up")]);
    assert_eq!(code, 0, "{err}");
    assert_same_file(&root.join("f"), &root.join("up"));
}

/// Two VSTOs into one tree (or into a tree and one inside it) never run
/// at once: a run that gives up removes what looks empty and its partly
/// written files, which would break the other. The second is refused with
/// a transient 450 until the first ends; other trees are not held up.
#[test]
fn overlapping_tree_uploads_are_refused_while_one_runs() {
    let (_d, root) = with_root();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let start = |c: &mut Raw, tree: &str| {
        assert_eq!(c.cmd("MODE E").0, 200);
        let at = c.pasv();
        c.send(format!("VSTO {tree}").as_bytes());
        let data = std::net::TcpStream::connect(at).unwrap();
        (c.reply(), data)
    };
    let mut a = Raw::login(port);
    let ((code, text), a_data) = start(&mut a, "t");
    assert!((100..200).contains(&code), "the first run starts: {text}");
    let mut b = Raw::login(port);
    for tree in ["t", "t/sub"] {
        let ((code, text), _) = start(&mut b, tree);
        assert_eq!(code, 450, "VSTO {tree} beside a run into t: {text}");
        assert!(text.contains("under way"), "{text}");
    }
    let ((code, text), other) = start(&mut b, "u");
    assert!((100..200).contains(&code), "another tree is not held up: {text}");
    drop(other);
    assert!(b.final_reply().0 >= 400);
    // The first run ends (its data connection closes with nothing sent):
    // the tree is free again.
    drop(a_data);
    assert!(a.final_reply().0 >= 400);
    let ((code, text), again) = start(&mut b, "t/sub");
    assert!((100..200).contains(&code), "free once the first run ended: {text}");
    drop(again);
    assert!(b.final_reply().0 >= 400);
}

/// A server running as `gftp` undoes a `SITE CHMOD` that took the owner's
/// read bit, of a file and of a directory (which it can then empty and
/// remove): the mode was changed through a descriptor opened for
/// reading, which such a mode refuses, so a directory set to 000 stayed
/// so for good (a defect hunt's find).
#[test]
fn site_chmod_undoes_a_mode_without_the_read_bit() {
    let (_d, root) = with_root();
    let (_s, port) = lp_server(&root, &["--anonymous-write", "--run-as", "gftp"]);
    let mut c = Raw::login(port);
    assert_eq!(c.cmd("MKD d").0, 257);
    assert_eq!(c.cmd("MKD d/sub").0, 257);
    for (bits, back) in [("000", "755"), ("200", "700"), ("300", "755")] {
        assert_eq!(c.cmd(&format!("SITE CHMOD {bits} d")).0, 250);
        let (code, text) = c.cmd(&format!("SITE CHMOD {back} d"));
        assert_eq!(code, 250, "{bits} -> {back}: {text}");
    }
    assert_eq!(c.cmd("RMD d/sub").0, 250);
    assert_eq!(c.cmd("RMD d").0, 250);
    std::fs::write(root.join("f"), b"x").unwrap();
    std::os::unix::fs::chown(root.join("f"), Some(gftp_uid()), None).unwrap();
    assert_eq!(c.cmd("SITE CHMOD 000 f").0, 250);
    assert_eq!(c.cmd("SITE CHMOD 644 f").0, 250);
    assert_eq!(std::fs::metadata(root.join("f")).unwrap().permissions().mode() & 0o777, 0o644);
}

fn gftp_uid() -> u32 {
    let out = std::process::Command::new("id").args(["-u", "gftp"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// A directory listing (`verb`, MODE S over PASV): its bytes.
fn list(c: &mut Raw, verb: &str) -> String {
    let addr = c.pasv();
    c.send(verb.as_bytes());
    let mut d = std::net::TcpStream::connect(addr).unwrap();
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut d, &mut got).unwrap();
    assert_eq!(c.final_reply().0, 226, "{verb}");
    String::from_utf8_lossy(&got).into_owned()
}

/// An upload in progress is named from the start where the file system
/// has no `O_TMPFILE` (NFS): `.NAME.lpPID-TOKEN-N.part`. Such a file is in
/// no listing, no tree, and no command reaches it: another session
/// downloaded one unfinished and published it with RNFR/RNTO (a defect
/// hunt's find). Simulated here by a file of that name.
#[test]
fn an_upload_in_progress_is_hidden_and_out_of_reach() {
    let (_d, root) = with_root();
    let temp = ".big.lp4242-0123456789abcdef-0.part";
    std::fs::create_dir(root.join("d")).unwrap();
    std::fs::write(root.join("d").join(temp), b"half").unwrap();
    std::fs::write(root.join("d/f"), b"whole").unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let mut c = Raw::login(port);
    assert_eq!(c.cmd("TYPE I").0, 200);
    for verb in ["MLSD /d", "LIST /d", "NLST /d"] {
        let got = list(&mut c, verb);
        assert!(got.contains('f') && !got.contains(".lp4242"), "{verb}: {got}");
    }
    for cmd in ["SIZE", "MLST", "RNFR", "DELE", "CKSM MD5 0 -1"] {
        let (code, text) = c.cmd(&format!("{cmd} /d/{temp}"));
        assert_eq!(code, 550, "{cmd}: {text}");
    }
    c.pasv();
    c.send(format!("RETR /d/{temp}").as_bytes());
    assert_eq!(c.final_reply().0, 550);
    let local = scratch();
    let (code, err) = cp(&["-r", &format!("ftp://127.0.0.1:{port}/d"), &format!("{}/", local.path().display())]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(names(&local.path().join("d")), ["f"]);
    assert_eq!(std::fs::read(root.join("d").join(temp)).unwrap(), b"half", "left to its upload");
    // A local tree holding such a name: skipped with a warning (silently before).
    std::fs::write(local.path().join("d").join(temp), b"kept").unwrap();
    let (code, err) =
        cp(&["-r", &format!("{}", local.path().join("d").display()), &format!("ftp://127.0.0.1:{port}/up/")]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("skipping a temporary file of lightpath's") && err.contains(temp), "{err}");
    assert_eq!(names(&root.join("up/d")), ["f"]);
}

/// MFMT's reply says the time the file got, which ext4 holds to 2446:
/// it said the year 2500 asked for. (Times past the year 9999, which
/// tmpfs keeps, are held to 14 digits by `ftptime::format`.)
#[test]
fn mfmt_says_the_time_the_file_got() {
    use std::os::unix::fs::MetadataExt;
    let (_d, root) = with_root();
    std::fs::write(root.join("f"), b"x").unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let mut c = Raw::login(port);
    let (code, text) = c.cmd("MFMT 25000101000000 f");
    let got = std::fs::metadata(root.join("f")).unwrap().mtime();
    assert_eq!(code, 213, "{text}");
    // On ext4 (here) the file got 2446; where the file system keeps the
    // year 2500, reply and file agree all the same.
    let said = text.split("Modify=").nth(1).and_then(|t| t.split(';').next()).unwrap();
    assert_eq!(lightpath_proto::ftptime::parse(said), Some(got), "{text}");
}

/// A name holding an LF: globus-url-copy sends it as it is, inside a line
/// that ends in CR LF. The server ended the line at the LF, so
/// `STOR /y/a<LF>b` stored into `/y/a`, replacing that other file, and
/// guc said it succeeded (a defect hunt's find). Once a client has ended
/// a line in CR LF, only CR LF ends one: the name is refused whole.
#[test]
fn a_name_holding_an_lf_never_reaches_another_file() {
    let (_d, root) = with_root();
    std::fs::create_dir(root.join("y")).unwrap();
    std::fs::write(root.join("y/a"), b"KEEP").unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let mut c = Raw::login(port);
    assert_eq!(c.cmd("TYPE I").0, 200);
    let (code, text) = c.cmd("DELE /y/a\nb");
    assert_eq!(code / 100, 5, "{text}");
    let src = scratch();
    std::fs::write(src.path().join("f"), b"NEW BYTES").unwrap();
    let from = format!("file://{}/f", src.path().display());
    assert!(!guc(&[&from, &format!("ftp://127.0.0.1:{port}/y/a%0Ab")]), "guc said it stored the name");
    assert_eq!(std::fs::read(root.join("y/a")).unwrap(), b"KEEP");
    assert_eq!(names(&root.join("y")), ["a"]);
    // A client that ends its lines in LF alone is still understood.
    let mut lf = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::io::Write::write_all(&mut lf, b"USER anonymous\nPASS x\nNOOP\nQUIT\n").unwrap();
    let mut said = String::new();
    std::io::Read::read_to_string(&mut lf, &mut said).unwrap();
    assert!(said.contains("\r\n230") && said.contains("\r\n200") && said.contains("\r\n221"), "{said}");
}

/// A server running as root (CAP_FSETID: the kernel keeps the bits) drops
/// setuid and setgid from a file a client writes in place (APPE here;
/// ESTO opens the file alike, `sys::root`'s test): they stayed, so a
/// client chose the contents of a setuid-root program.
#[test]
fn a_setuid_file_written_in_place_loses_the_bit() {
    let (_d, root) = with_root();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let mut c = Raw::login(port);
    for (verb, mode) in [("APPE prog", 0o6755), ("APPE prog", 0o4700)] {
        std::fs::write(root.join("prog"), b"#!/bin/sh\n").unwrap();
        chmod(&root.join("prog"), mode);
        let at = c.pasv();
        c.send(verb.as_bytes());
        let mut data = std::net::TcpStream::connect(at).unwrap();
        std::io::Write::write_all(&mut data, b"id\n").unwrap();
        drop(data);
        let (code, text) = c.final_reply();
        assert_eq!(code, 226, "{verb}: {text}");
        let now = std::fs::metadata(root.join("prog")).unwrap().permissions().mode() & 0o7777;
        assert_eq!(now, mode & 0o1777, "{verb} of a {mode:o} file");
        assert_eq!(std::fs::read(root.join("prog")).unwrap(), b"#!/bin/sh\nid\n");
    }
    // A server run as another user may still write a group- or
    // world-writable setgid file it does not own (the kernel drops the
    // bit then); our chmod of it was refused, and with it the APPE.
    let (_s, port) = lp_server(&root, &["--anonymous-write", "--run-as", "gftp"]);
    let mut c = Raw::login(port);
    std::fs::write(root.join("prog"), b"#!/bin/sh\n").unwrap();
    chmod(&root.join("prog"), 0o2777);
    let at = c.pasv();
    c.send(b"APPE prog");
    let mut data = std::net::TcpStream::connect(at).unwrap();
    std::io::Write::write_all(&mut data, b"id\n").unwrap();
    drop(data);
    let (code, text) = c.final_reply();
    assert_eq!(code, 226, "{text}");
    assert_eq!(std::fs::metadata(root.join("prog")).unwrap().permissions().mode() & 0o7777, 0o777);
    assert_eq!(std::fs::read(root.join("prog")).unwrap(), b"#!/bin/sh\nid\n");
}

//! Special files (FIFOs, devices, sockets) in a tree sent as a virtual file
//! (VRET/VSTO) are skipped, and the user running `cp -r` is told so in
//! both directions: on a download the server's walk skipped them and its
//! final reply says how many; on an upload the client's own walk did.

mod common;
use common::*;
use std::path::Path;
use std::process::Command;

fn mkfifo(p: &Path) {
    let ok = Command::new("mkfifo").arg(p).status().map(|s| s.success());
    assert!(matches!(ok, Ok(true)), "mkfifo {} failed", p.display());
}

/// Two regular files and two FIFOs, one of each in a subdirectory.
fn tree_with_fifos(root: &Path) {
    std::fs::create_dir_all(root.join("sub")).unwrap();
    write_random(&root.join("a"), 70_000, 1);
    write_random(&root.join("sub/b"), 3_000, 2);
    mkfifo(&root.join("pipe"));
    mkfifo(&root.join("sub/pipe2"));
}

fn cp_r(src: &str, dst: &str) -> String {
    own_peer_book();
    let out = Command::new(LP).args(["cp", "-r", src, dst]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "cp -r {src} {dst}: {err}");
    err
}

/// The regular files arrived and no FIFO was made.
fn assert_copied_without_fifos(dst: &Path) {
    for f in ["a", "sub/b"] {
        assert!(dst.join(f).is_file(), "{f} arrived");
    }
    for f in ["pipe", "sub/pipe2"] {
        assert!(dst.join(f).symlink_metadata().is_err(), "{f}: no FIFO at the destination");
    }
}

#[test]
fn special_files_are_skipped_with_a_warning_both_ways() {
    let (_d, root, local) = root_and_local();
    tree_with_fifos(&root.join("tree"));
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let u = |p: &str| format!("ftp://127.0.0.1:{port}/{p}");

    // Download: the server's walk skipped them; its 226 says how many.
    let got = local.join("got");
    let err = cp_r(&u("tree/"), &format!("{}/", got.display()));
    assert_copied_without_fifos(&got);
    assert_same_file(&root.join("tree/a"), &got.join("a"));
    assert_same_file(&root.join("tree/sub/b"), &got.join("sub/b"));
    let want = "lightpath: warning: 2 special file(s) skipped on the server (FIFOs, devices, sockets, and symlinks leaving the served root are not copied; the server's log names each)";
    assert!(err.contains(want), "download warns of the skipped FIFOs: {err}");
    assert!(err.contains("2 file(s) copied"), "{err}");

    // Upload: the client's own walk skipped them; it names each and counts.
    let src = local.join("src");
    tree_with_fifos(&src);
    let err = cp_r(&format!("{}/", src.display()), &u("up/"));
    let up = root.join("up");
    assert_copied_without_fifos(&up);
    assert_same_file(&src.join("a"), &up.join("a"));
    assert_same_file(&src.join("sub/b"), &up.join("sub/b"));
    let want = "special file(s) skipped in"; // "2 special file(s) skipped in <dir>"
    assert!(err.contains(&format!("lightpath: warning: 2 {want}")), "upload warns of the skipped FIFOs: {err}");
    for name in ["pipe", "sub/pipe2"] {
        assert!(err.contains(name), "upload names {name} at the default log level: {err}");
    }
}

/// Third party between two lightpath servers: the source server's walk
/// skipped them, and its 226 (not the destination's) says how many.
#[test]
fn special_files_skipped_by_the_source_of_a_third_party_tree_are_reported() {
    let (_d, root, _local) = root_and_local();
    tree_with_fifos(&root.join("tree"));
    let dst = scratch();
    let (_a, pa) = lp_server(&root, &["--anonymous-write"]);
    let (_b, pb) = lp_server(dst.path(), &["--anonymous-write"]);
    let err = cp_r(&format!("ftp://127.0.0.1:{pa}/tree/"), &format!("ftp://127.0.0.1:{pb}/copy/"));
    assert_copied_without_fifos(&dst.path().join("copy"));
    assert_same_file(&root.join("tree/a"), &dst.path().join("copy/a"));
    let want = format!("lightpath: warning: 2 special file(s) skipped on the source server 127.0.0.1:{pa} (FIFOs");
    assert!(err.contains(&want), "third party warns of the skipped FIFOs: {err}");
}

/// What stands at the destination and cannot be replaced by an entry of
/// the tree (a directory where a file or a symlink comes, a file where a
/// directory does) fails that entry alone, as `cp -r` does: one such
/// conflict failed the whole tree, with files already published and the
/// summary saying none was copied (a defect hunt's find). Both ways and
/// third party; each is named, and the rest arrives.
#[test]
fn entries_that_cannot_replace_what_is_there_fail_alone() {
    let (_d, root, local) = root_and_local();
    let src = local.join("src");
    std::fs::create_dir_all(src.join("dir")).unwrap();
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("plain"), b"plain").unwrap();
    std::fs::write(src.join("dir/x"), b"x").unwrap();
    std::fs::write(src.join("other"), b"other").unwrap();
    std::fs::write(src.join("sub/s"), b"s").unwrap();
    std::os::unix::fs::symlink("other", src.join("lnk")).unwrap();
    // In the way at each destination: directories for `plain` and `lnk`,
    // a file for `sub`.
    let block = |at: &Path| {
        std::fs::create_dir_all(at.join("plain/inner")).unwrap();
        std::fs::create_dir_all(at.join("lnk/z")).unwrap();
        std::fs::write(at.join("sub"), b"in the way").unwrap();
    };
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let url = |p: &str| format!("ftp://127.0.0.1:{port}/{p}");
    block(&root.join("up/src"));
    let down = local.join("down");
    block(&down.join("src"));
    std::fs::create_dir_all(root.join("tp")).unwrap();
    let whole = Command::new("cp").arg("-a").arg(&src).arg(root.join("whole")).status().unwrap();
    assert!(whole.success());
    own_peer_book();
    let source = src.display().to_string();
    let runs = [
        (source.as_str(), url("up/"), root.join("up/src")),
        (&url("whole/")[..], format!("{}/src", down.display()), down.join("src")),
        (&url("whole/")[..], url("tp/src/"), root.join("tp/src")),
    ];
    for (i, (from, to, at)) in runs.iter().enumerate() {
        if i == 2 {
            block(at);
        }
        let out = Command::new(LP).args(["cp", "-r", from, to]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{from} -> {to}: {err}");
        let failed: Vec<&str> = err.lines().filter(|l| l.starts_with("lightpath: FAILED")).collect();
        let named =
            |n: &str| failed.iter().any(|l| l.contains(&format!("/{n} ->")) && l.contains("at the destination"));
        assert!(["plain", "sub", "lnk"].iter().all(|n| named(n)), "{from} -> {to}: {err}");
        assert_eq!(std::fs::read(at.join("dir/x")).unwrap(), b"x", "{from} -> {to}");
        assert!(at.join("plain/inner").is_dir() && at.join("lnk/z").is_dir(), "what was there stays");
        assert!(err.contains("2 file(s) copied"), "{from} -> {to}: {err}");
    }
}

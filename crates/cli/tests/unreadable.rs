//! A tree holding a file its sender may not read and a directory it may
//! not list: the copy goes on past them, as `cp -r` does, and reports
//! each as failed (exit 1) beside the files it copied, in every direction
//! and by both kinds of tree copy: the virtual file between lightpath
//! peers (the sender's walk leaves them out, and a server's final reply
//! names them) and file by file with GCT. One unreadable file used to
//! fail a whole lightpath tree, and an unreadable directory a whole
//! file-by-file one.

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const READABLE: [&str; 3] = ["a", "sub/b", "deep/er/c"];

/// Files anyone may read, `sub/secret` only root may read, and `closed`
/// (holding `x`) only root may list. The test runs as root; the sender
/// runs as `gftp`.
fn tree_with_locks(t: &Path) {
    for d in ["sub", "closed", "deep/er"] {
        std::fs::create_dir_all(t.join(d)).unwrap();
    }
    for (i, (f, len)) in
        [("a", 70_000), ("sub/b", 5_000), ("deep/er/c", 300_000), ("sub/secret", 1_000), ("closed/x", 10)]
            .into_iter()
            .enumerate()
    {
        write_random(&t.join(f), len, i as u64 + 1);
    }
    let mode = |p: &str, m| std::fs::set_permissions(t.join(p), std::fs::Permissions::from_mode(m)).unwrap();
    mode("sub/secret", 0o600);
    mode("closed", 0o700);
}

/// Everything readable arrived, nothing else did, `closed` arrived empty,
/// and the two failures were reported as such.
fn assert_went_on_past_them(src: &Path, dst: &Path, (code, err): (i32, String)) {
    assert_eq!(code, 1, "some files failed: {err}");
    for f in READABLE {
        assert_same_file(&src.join(f), &dst.join(f));
    }
    assert!(!dst.join("sub/secret").exists(), "the unreadable file did not arrive");
    let closed: Vec<_> = std::fs::read_dir(dst.join("closed")).unwrap().collect();
    assert!(closed.is_empty(), "the unlistable directory arrived empty: {closed:?}");
    let failed: Vec<&str> = err.lines().filter(|l| l.starts_with("lightpath: FAILED")).collect();
    assert_eq!(failed.len(), 2, "{err}");
    assert!(failed.iter().any(|l| l.contains("/sub/secret ->")), "{err}");
    assert!(failed.iter().any(|l| l.contains("/closed ->")), "{err}");
    assert!(err.contains("3 file(s) copied, 2 failed"), "{err}");
}

/// `lightpath cp -q -r ARGS` as the `gftp` user: exit code and stderr.
fn cp_r_as_gftp(args: &[&str]) -> (i32, String) {
    let out = Command::new("setpriv")
        .args(["--reuid", "gftp", "--regid", "gftp", "--clear-groups", LP, "cp", "-q", "-r"])
        .args(args)
        .env("LIGHTPATH_PEERS", "")
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_tree_download_goes_on_past_what_the_server_may_not_read() {
    let (_d, root, local) = root_and_local();
    tree_with_locks(&root.join("tree"));
    let (_s, port) = gftp_server(&root);
    let url = format!("ftp://127.0.0.1:{port}/tree/");
    let got = local.join("got");
    let r = cp(&["-r", &url, &format!("{}/", got.display())]);
    assert!(r.1.contains("could not read it (cannot open: Permission denied"), "{}", r.1);
    assert!(r.1.contains("could not read it (cannot list: Permission denied"), "{}", r.1);
    assert_went_on_past_them(&root.join("tree"), &got, r);
    // --verify checks what came, and does not report the two again.
    let again = local.join("again");
    let r = cp(&["-r", "--verify", "md5", &url, &format!("{}/", again.display())]);
    assert_went_on_past_them(&root.join("tree"), &again, r);
}

#[test]
fn a_third_party_tree_goes_on_past_what_the_source_may_not_read() {
    let (_d, root, _local) = root_and_local();
    tree_with_locks(&root.join("tree"));
    let dst = scratch();
    let (_a, pa) = gftp_server(&root);
    let (_b, pb) = lp_server(dst.path(), &["--anonymous-write"]);
    let r = cp(&["-r", &format!("ftp://127.0.0.1:{pa}/tree/"), &format!("ftp://127.0.0.1:{pb}/copy/")]);
    assert_went_on_past_them(&root.join("tree"), &dst.path().join("copy"), r);
}

#[test]
fn a_tree_upload_goes_on_past_what_the_client_may_not_read() {
    assert_eq!(lightpath_sys::privs::euid(), 0, "this test runs the client as gftp with setpriv (CI runs as root)");
    let (_d, root, local) = root_and_local();
    let src = local.join("tree");
    tree_with_locks(&src);
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let r = cp_r_as_gftp(&[&format!("{}/", src.display()), &format!("ftp://127.0.0.1:{port}/up/")]);
    assert!(r.1.contains("not copied: cannot open: Permission denied"), "{}", r.1);
    assert_went_on_past_them(&src, &root.join("up"), r);
}

/// File by file with GCT: its server answers a listing it may not read
/// with a refusal, and the client lists the rest.
#[test]
fn file_by_file_trees_with_gct_go_on_past_what_may_not_be_read() {
    assert_eq!(lightpath_sys::privs::euid(), 0, "this test runs the client as gftp with setpriv (CI runs as root)");
    let (_d, root, local) = root_and_local();
    let src = local.join("tree");
    tree_with_locks(&src);
    let (_g, port) = gct_server(&root);
    let up = root.join("up");
    let r = cp_r_as_gftp(&[&format!("{}/", src.display()), &format!("ftp://127.0.0.1:{port}{}/", up.display())]);
    assert_went_on_past_them(&src, &up, r);

    let (_d2, root2, local2) = root_and_local();
    tree_with_locks(&root2.join("tree"));
    let (_g2, port2) = gct_server(&root2);
    let got = local2.join("got");
    let url = format!("ftp://127.0.0.1:{port2}{}/", root2.join("tree").display());
    let r = cp(&["-r", &url, &format!("{}/", got.display())]);
    assert_went_on_past_them(&root2.join("tree"), &got, r);
}

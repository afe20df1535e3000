//! The client under partial failure: a missing file in the middle of a
//! pipelined batch is reported by name, the others still arrive intact
//! over the same reused channel, and the exit code says not everything
//! arrived.

mod common;
use common::*;
use std::process::Command;

fn cp(args: &[&str]) -> (i32, String) {
    let out = Command::new(LP).arg("cp").arg("-q").args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn missing_file_in_a_pipelined_batch() {
    let (d, root, local) = root_and_local();
    for n in ["a", "b", "c"] {
        write_random(&root.join(n), 700_001, n.as_bytes()[0] as u64);
        write_random(&local.join(n), 300_003, n.as_bytes()[0] as u64 + 10);
    }
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let u = |p: &str| format!("ftp://127.0.0.1:{port}/{p}");
    // Download: RETR of the missing file is refused before any data.
    let got = open_dir(&d.path().join("got"));
    let (code, err) =
        cp(&["-p", "3", "--cc", "1", &u("a"), &u("missing"), &u("b"), &u("c"), &format!("{}/", got.display())]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("missing") && err.contains("1 failed"), "{err}");
    for n in ["a", "b", "c"] {
        assert_same_file(&root.join(n), &got.join(n));
    }
    assert!(!got.join("missing").exists());
    // Upload: the unreadable source is reported before its STOR goes out.
    let up = open_dir(&root.join("up"));
    let srcs: Vec<String> = ["a", "missing", "b", "c"].iter().map(|n| local.join(n).display().to_string()).collect();
    let mut args: Vec<&str> = vec!["-p", "2", "--cc", "1"];
    args.extend(srcs.iter().map(String::as_str));
    let dst = u("up/");
    args.push(&dst);
    let (code, err) = cp(&args);
    assert_eq!(code, 1, "{err}");
    for n in ["a", "b", "c"] {
        assert_same_file(&local.join(n), &up.join(n));
    }
    assert!(!up.join("missing").exists());
    // A local target that cannot be put in place (a non-empty directory holds its
    // name): that file fails after its data, the others arrive, nothing is clobbered.
    let got2 = open_dir(&d.path().join("got2"));
    std::fs::create_dir(got2.join("b")).unwrap();
    std::fs::write(got2.join("b/blocker"), b"x").unwrap();
    let (code, err) = cp(&["-p", "2", "--cc", "1", &u("a"), &u("b"), &u("c"), &format!("{}/", got2.display())]);
    assert_eq!(code, 1, "{err}");
    assert_same_file(&root.join("a"), &got2.join("a"));
    assert_same_file(&root.join("c"), &got2.join("c"));
    assert_eq!(std::fs::read(got2.join("b/blocker")).unwrap(), b"x");
}

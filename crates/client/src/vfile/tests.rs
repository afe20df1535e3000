//! Unit tests of the client's tree (virtual file) copies.

use super::verify::{local_digests, Reader};
use super::*;
use crate::job::{compare_digests, discard_copy, local_digest};
use std::io;

/// Each changed file gets two free tries, for at most MAX_VRET_SKIP
/// files: a new name every time no longer retries for ever.
#[test]
fn free_tries_for_changed_files_are_bounded() {
    let mut h = TreeHeld::default();
    let mut free = |p: String| {
        h.note_changed(p.into_bytes());
        h.take_fresh_change()
    };
    assert!(free("log".into()) && free("log".into()) && !free("log".into()));
    assert_eq!((0..10_000).filter(|i| free(format!("f{i}"))).count(), MAX_VRET_SKIP - 1);
}

/// A try whose run of complete files ends before where the earlier
/// tries' ended (it re-sent a hard-linked file first, then broke) does
/// not move the resume point back, nor add to the counts.
#[test]
fn a_try_that_held_nothing_new_leaves_the_resume_point() {
    let held = |after: &[u8], files| Some(Held { after: after.to_vec(), files, bytes: files * 10 });
    let mut t = TreeHeld::default();
    t.note(held(b"b1-big", 2));
    t.note(held(b"a/f1", 1));
    assert_eq!((t.after.as_deref(), t.files, t.bytes), (Some(&b"b1-big"[..]), 2, 20));
    t.note(held(b"b1-big", 1));
    assert_eq!((t.after.as_deref(), t.files), (Some(&b"b1-big"[..]), 2), "the same point: nothing new");
    t.note(held(b"c/f", 3));
    assert_eq!((t.after.as_deref(), t.files, t.bytes), (Some(&b"c/f"[..]), 5, 50));
}

/// A tree's file whose digest differs is removed, named in the error;
/// a file that could not be checked for another reason stays.
#[tokio::test]
async fn a_tree_file_failing_verify_is_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("f");
    std::fs::write(&f, b"bad copy").expect("write");
    let unread = ClientError::Local("CKSM refused".into());
    let e = discard_copy(unread, &Location::Local(f.clone()), None).await;
    assert!(f.exists() && e.to_string().contains("CKSM refused"), "{e}");
    let differs = compare_digests("MD5", Ok("ab".into()), Ok("cd".into())).expect_err("differs");
    let e = discard_copy(differs, &Location::Local(f.clone()), None).await.to_string();
    assert!(!f.exists(), "the bad copy stays");
    assert!(e.contains("mismatch") && e.contains(&format!("the copy {} was removed", f.display())), "{e}");
}

/// A copy failing `--verify` keeps each digest in its own field and
/// what became of the copy in another (not appended to a digest).
#[tokio::test]
async fn a_failed_verify_keeps_the_digests_apart_from_the_outcome() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("f");
    std::fs::write(&f, b"bad copy").expect("write");
    let differs = compare_digests("MD5", Ok("ab".into()), Ok("cd".into())).expect_err("differs");
    let e = discard_copy(differs, &Location::Local(f.clone()), None).await;
    let ClientError::VerifyFailed { alg, local, remote, outcome } = &e else { panic!("{e:?}") };
    assert_eq!((alg.as_str(), local.as_str(), remote.as_str()), ("MD5", "ab", "cd"));
    assert_eq!(outcome, &format!("the copy {} was removed", f.display()));
    assert_eq!(e.to_string(), format!("MD5 checksum mismatch: the source's is ab, the copy's cd; {outcome}"));
}

/// The digests of many files come back in their order, a missing file
/// failing in its own place.
#[test]
fn local_digests_keep_the_order_of_the_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut paths: Vec<PathBuf> = (0..40).map(|i| dir.path().join(format!("f{i}"))).collect();
    for (i, p) in paths.iter().enumerate() {
        std::fs::write(p, vec![i as u8; 1000 + i]).expect("write");
    }
    paths.insert(7, dir.path().join("missing"));
    let got = local_digests("MD5", &paths, &Reader::AsNamed);
    assert_eq!(got.len(), paths.len());
    for (p, r) in paths.iter().zip(got) {
        match local_digest("MD5", p) {
            Ok(want) => assert_eq!(r.expect("digest"), want, "{}", p.display()),
            Err(_) => assert!(r.is_err(), "{}", p.display()),
        }
    }
}

#[test]
fn a_file_passes_only_with_both_digests_known_and_equal() {
    let ok = |d: &str| Ok::<_, ClientError>(d.to_string());
    assert!(compare_digests("MD5", ok("ab"), ok("ab")).is_ok());
    let m = compare_digests("MD5", ok("ab"), ok("cd")).expect_err("differs").to_string();
    assert!(m.contains("MD5 checksum mismatch: the source's is ab, the copy's cd"), "{m}");
    let refused = || Err(ClientError::Local("CKSM refused".into()));
    assert!(compare_digests("MD5", ok("ab"), refused()).is_err());
    assert!(compare_digests("MD5", refused(), ok("ab")).is_err());
}

fn fail(sent: Result<u64, EngineError>, walk: Result<PackStats, VfileError>) -> String {
    let ends = (&Control::new(), &ChangedFile::default());
    outcome(sent, walk, Path::new("/data/tree"), ends).expect_err("the upload failed").to_string()
}

/// A file that shrank while being sent: the send failed reading it and
/// cancelled the walk; the message names the file, not "aborted".
#[test]
fn the_file_that_changed_is_named_not_the_walks_abort() {
    let why = || VfileError::Changed("sub/f".into());
    let sent = || Err(EngineError::io("reading source", io::Error::from(why())));
    for walk in [Err(why()), Err(VfileError::Aborted)] {
        let m = fail(sent(), walk);
        assert!(m.contains("sub/f changed while being read"), "{m}");
    }
}

/// The data connection broke: the walk stopped with `Aborted`, and the
/// message is the connection's error.
#[test]
fn a_broken_connection_is_reported_not_the_walks_abort() {
    let reset = io::Error::from(io::ErrorKind::ConnectionReset);
    let m = fail(Err(EngineError::io("data connection 1", reset)), Err(VfileError::Aborted));
    assert!(m.contains("data connection 1"), "{m}");
    assert!(!m.contains("aborted"), "{m}");
}

/// `--verify` of a tree written here reads and removes beneath the
/// destination only: a symlink the tree's sender made (`sub` -> a
/// directory outside) is not followed, so a file there that differs from
/// the source's is neither read nor deleted; a real copy that differs is.
#[tokio::test]
async fn verify_follows_no_symlink_beneath_the_destination() {
    let d = tempfile::tempdir().expect("tempdir");
    let (src, dst, outside) = (d.path().join("src"), d.path().join("dst"), d.path().join("outside"));
    for dir in [src.join("sub"), dst.clone(), outside.clone()] {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    std::fs::write(src.join("sub/victim"), b"source").expect("write");
    std::fs::write(src.join("top"), b"source").expect("write");
    std::fs::write(outside.join("victim"), b"the user's own file").expect("write");
    std::fs::write(dst.join("top"), b"a bad copy").expect("write");
    std::os::unix::fs::symlink(&outside, dst.join("sub")).expect("symlink");
    let (s, t) = (Location::Local(src), Location::Local(dst.clone()));
    let (failed, _) = verify_tree(&s, &t, "MD5", (None, None), &Unreadables::default()).await.expect("verify");
    let said: Vec<String> = failed.iter().map(|f| format!("{}: {}", f.dst, f.result.as_ref().unwrap_err())).collect();
    assert_eq!(failed.len(), 2, "{said:?}");
    assert_eq!(std::fs::read(outside.join("victim")).expect("kept"), b"the user's own file", "{said:?}");
    assert!(said.iter().any(|s| s.contains("victim") && s.contains("symlink")), "{said:?}");
    assert!(!dst.join("top").exists(), "the bad copy is removed: {said:?}");
}

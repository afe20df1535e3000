//! What an upload or a download may replace. Files arrive under a
//! temporary name renamed over the old one, which needs only the
//! directory's write permission; they must still replace only what their
//! writer could have written in place (as GCT's server and cp(1) do), and
//! keep its permission bits. And a STOR after REST with no partial upload
//! kept for it is refused (`resume.rs` has the upload that resumes).

mod common;
use common::*;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// A file holding `data` with `mode`, owned by `owner` (uid, gid).
fn put_file(p: &Path, data: &[u8], mode: u32, owner: (u32, u32)) {
    std::fs::write(p, data).unwrap();
    std::os::unix::fs::chown(p, Some(owner.0), Some(owner.1)).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Contents, owner and permission bits.
fn state(p: &Path) -> (Vec<u8>, u32, u32) {
    let m = std::fs::metadata(p).unwrap();
    (std::fs::read(p).unwrap(), m.uid(), m.mode() & 0o7777)
}

fn url(port: u16, path: &str) -> String {
    format!("ftp://127.0.0.1:{port}{path}")
}

/// `STOR name` in MODE S over PASV, sending `data`: the final reply.
fn raw_stor(c: &mut Raw, name: &str, data: &[u8]) -> (u16, String) {
    let addr = c.pasv();
    c.send(format!("STOR {name}").as_bytes());
    let mut d = std::net::TcpStream::connect(addr).unwrap();
    let first = c.reply();
    if first.0 >= 200 {
        return first;
    }
    d.write_all(data).unwrap();
    drop(d);
    c.final_reply()
}

#[test]
fn uploads_replace_only_files_the_server_could_write() {
    assert_eq!(lightpath_sys::privs::euid(), 0, "this test starts the server as root (CI runs as root)");
    let gftp = gftp_ids();
    let (_d, root, local) = root_and_local();
    let up = open_dir(&root.join("up"));
    put_file(&up.join("rootfile"), b"root's", 0o644, (0, 0));
    put_file(&up.join("rofile"), b"read-only", 0o444, gftp);
    put_file(&up.join("shared"), b"everyone's", 0o666, (0, 0));
    put_file(&up.join("mine"), b"gftp's", 0o640, gftp);
    write_random(&local.join("new"), 100_000, 7);
    let before: Vec<_> = ["rootfile", "rofile"].iter().map(|n| state(&up.join(n))).collect();
    let (_srv, port) = gftp_server(&root);
    let src = format!("file://{}", local.join("new").display());
    for name in ["rootfile", "rofile"] {
        assert!(!guc(&[&src, &url(port, &format!("/up/{name}"))]), "guc replaced {name}");
    }
    let mut c = Raw::login(port);
    assert_eq!(c.cmd("TYPE I").0, 200);
    let (code, text) = raw_stor(&mut c, "/up/rofile", b"new bytes");
    assert!(code == 550 && text.contains("/up/rofile") && text.contains("Permission denied"), "{code} {text}");
    let after: Vec<_> = ["rootfile", "rofile"].iter().map(|n| state(&up.join(n))).collect();
    assert_eq!(after, before, "refused uploads leave the files as they were");
    // Writable files are replaced and keep their permission bits.
    for (name, mode) in [("shared", 0o666), ("mine", 0o640)] {
        assert!(guc(&[&src, &url(port, &format!("/up/{name}"))]), "upload to {name}");
        assert_same_file(&local.join("new"), &up.join(name));
        assert_eq!(state(&up.join(name)).2, mode, "{name} keeps its mode");
    }
    let names: Vec<_> = std::fs::read_dir(&up).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 4, "no temporary files left: {names:?}");
}

#[test]
fn a_restarted_stor_is_refused_and_changes_nothing() {
    let (_d, root, _local) = root_and_local();
    std::fs::write(root.join("old"), b"an older version of the file").unwrap();
    let (_srv, port) = lp_server(&root, &["--anonymous-write"]);
    let mut c = Raw::login(port);
    assert_eq!(c.cmd("TYPE I").0, 200);
    // MODE E ranges (guc -rst sends them from 111 markers) and a MODE S offset.
    for (mode, rest) in [("E", "REST 0-1000"), ("S", "REST 1000")] {
        assert_eq!(c.cmd(&format!("MODE {mode}")).0, 200);
        for name in ["missing", "old"] {
            c.pasv();
            assert_eq!(c.cmd(rest).0, 350);
            // Refused before 150, without waiting for a data connection.
            let (code, text) = c.cmd(&format!("STOR {name}"));
            assert!(code == 554 && text.contains("send the whole file"), "{rest} STOR {name}: {code} {text}");
        }
    }
    assert!(!root.join("missing").exists(), "no zero-filled file");
    assert_eq!(std::fs::read(root.join("old")).unwrap(), b"an older version of the file");
    // A restart that claims nothing is a whole upload: the old tail goes.
    assert_eq!(c.cmd("REST 0").0, 350);
    assert_eq!(raw_stor(&mut c, "old", b"new").0, 226);
    assert_eq!(std::fs::read(root.join("old")).unwrap(), b"new");
    let names: Vec<_> = std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["old"], "nothing else created: {names:?}");
}

#[test]
fn esto_and_rest_retr_still_work() {
    let (_d, root, local) = root_and_local();
    write_random(&root.join("f"), 300_000, 3);
    let (_srv, port) = lp_server(&root, &["--anonymous-write"]);
    let data = std::fs::read(root.join("f")).unwrap();
    // lightpath cp --off/--len uploads a part with ESTO into the existing file.
    let part = local.join("part");
    std::fs::write(&part, &data[..]).unwrap();
    std::fs::write(root.join("g"), vec![0u8; 300_000]).unwrap();
    assert!(lp_cp(&["--off", "1000", "--len", "5000", part.to_str().unwrap(), &url(port, "/g")]));
    let g = std::fs::read(root.join("g")).unwrap();
    assert_eq!((g.len(), &g[1000..6000]), (300_000, &data[1000..6000]));
    // Only the part: a client that sent the whole file passed the check above.
    assert!(g[..1000].iter().chain(&g[6000..]).all(|&b| b == 0), "bytes outside the part changed");
    // A part past the end of the local file is refused before anything
    // moves (it was sent short, and the copy said it was whole).
    let (code, err) = cp(&["--off", "299000", "--len", "5000", part.to_str().unwrap(), &url(port, "/h")]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("past the end of the file (300000 bytes)"), "{err}");
    assert!(!root.join("h").exists(), "nothing written on the server");
    // The same for a download and a third-party copy of a server's file:
    // the first failed at its end, the second stored the bytes there were.
    let far = url(port, "/f");
    let (code, err) = cp(&["--off", "299000", "--len", "5000", &far, local.join("dl").to_str().unwrap()]);
    assert!(code != 0 && err.contains("past the end of the file (300000 bytes)"), "{err}");
    assert!(!local.join("dl").exists(), "nothing written here");
    let (code, err) = cp(&["--off", "299000", "--len", "5000", &far, &url(port, "/tp")]);
    assert!(code != 0 && err.contains("past the end of the file (300000 bytes)"), "{err}");
    assert!(!root.join("tp").exists(), "nothing written on the server");
    // --off alone: to the end of the file, as guc's -off (it was refused).
    let tail = local.join("tail");
    let (code, err) = cp(&["--off", "299000", &far, tail.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let got = std::fs::read(&tail).unwrap();
    assert_eq!((got.len(), &got[299_000..]), (300_000, &data[299_000..]));
    assert!(got[..299_000].iter().all(|&b| b == 0), "more than the tail was fetched");
    let (code, err) = cp(&["--off", "300001", &far, local.join("none").to_str().unwrap()]);
    assert!(code != 0 && err.contains("past the end of the file (300000 bytes)"), "{err}");
    // REST + RETR in MODE S.
    let mut c = Raw::login(port);
    assert_eq!(c.cmd("TYPE I").0, 200);
    let addr = c.pasv();
    assert_eq!(c.cmd("REST 299000").0, 350);
    c.send(b"RETR f");
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut std::net::TcpStream::connect(addr).unwrap(), &mut got).unwrap();
    assert_eq!(c.final_reply().0, 226);
    assert_eq!(got, &data[299_000..]);
}

/// `lightpath cp SRC DST` as the `gftp` user: whether it succeeded.
fn cp_as_gftp(src: &str, dst: &Path) -> bool {
    let out = std::process::Command::new("setpriv")
        .args(["--reuid", "gftp", "--regid", "gftp", "--clear-groups", LP, "cp", "-q", src])
        .arg(dst)
        .env("LIGHTPATH_PEERS", "")
        .output()
        .unwrap();
    if !out.status.success() {
        eprintln!("cp {src} {}: {}", dst.display(), String::from_utf8_lossy(&out.stderr));
    }
    out.status.success()
}

#[test]
fn downloads_replace_only_local_files_the_client_could_write() {
    assert_eq!(lightpath_sys::privs::euid(), 0, "this test runs the client as gftp with setpriv (CI runs as root)");
    let gftp = gftp_ids();
    let (_d, root, local) = root_and_local();
    write_random(&root.join("f"), 200_000, 5);
    put_file(&local.join("rootfile"), b"root's", 0o644, (0, 0));
    put_file(&local.join("rofile"), b"read-only", 0o444, gftp);
    put_file(&local.join("shared"), b"everyone's", 0o666, (0, 0));
    put_file(&local.join("mine"), b"gftp's", 0o640, gftp);
    let before: Vec<_> = ["rootfile", "rofile"].iter().map(|n| state(&local.join(n))).collect();
    let (_srv, port) = lp_server(&root, &["--anonymous-write"]);
    for name in ["rootfile", "rofile"] {
        assert!(!cp_as_gftp(&url(port, "/f"), &local.join(name)), "cp replaced {name}");
    }
    let after: Vec<_> = ["rootfile", "rofile"].iter().map(|n| state(&local.join(n))).collect();
    assert_eq!(after, before, "refused downloads leave the files as they were");
    for (name, mode) in [("shared", 0o666), ("mine", 0o640)] {
        assert!(cp_as_gftp(&url(port, "/f"), &local.join(name)), "download to {name}");
        assert_same_file(&root.join("f"), &local.join(name));
        assert_eq!(state(&local.join(name)).2, mode, "{name} keeps its mode");
    }
    let names: Vec<_> = std::fs::read_dir(&local).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 4, "no temporary files left: {names:?}");
}

/// Files are read and written by offset over parallel streams: a pipe or
/// a device named as a source or destination is refused before anything
/// moves. An upload from a pipe stored an empty file, and a download onto
/// `/dev/stdout` (run as root) replaced that symlink with a regular file,
/// both reported as copied.
#[test]
fn a_pipe_as_source_or_destination_is_refused() {
    let (_d, root, local) = root_and_local();
    write_random(&root.join("f"), 100_000, 9);
    let (_srv, port) = lp_server(&root, &["--anonymous-write"]);
    let fifo = local.join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let fifo_s = fifo.to_str().unwrap();
    for (src, dst) in [(fifo_s.to_string(), url(port, "/up")), (url(port, "/f"), fifo_s.to_string())] {
        let (code, err) = cp(&[&src, &dst]);
        assert_eq!(code, 2, "{src} -> {dst}: {err}");
        assert!(err.contains(&format!("{fifo_s}: not a regular file")), "{err}");
    }
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the pipe is left as it was");
    assert!(!root.join("up").exists(), "nothing stored");
    // `/dev/null` stays a destination that keeps nothing; `/dev/zero` a
    // source with --len (without, it sent nothing, exit 0).
    let (code, err) = cp(&[&url(port, "/f"), "/dev/null"]);
    assert_eq!(code, 0, "{err}");
    let (code, err) = cp(&["/dev/zero", &url(port, "/z")]);
    assert!(code == 2 && err.contains("/dev/zero as a source needs --len"), "{err}");
    // --verify checks whole files: with a part of one it compared the
    // whole source's checksum with the part, failed every time and left
    // the part under its name. Refused before anything is copied.
    let (src, dst) = (url(port, "/f"), url(port, "/part"));
    for part in [&["--off", "100", "--len", "1000"][..], &["--len", "1000"], &["--off", "100"]] {
        let dl = local.join("part");
        let args = [part, &["--verify", "MD5", &src, dl.to_str().unwrap()]].concat();
        let (code, err) = cp(&args);
        assert!(code == 2 && err.contains("--verify checks whole files"), "{args:?}: {err}");
        assert!(!dl.exists(), "{args:?}: nothing copied");
        let up = local.join("up-src");
        std::fs::write(&up, vec![7u8; 5000]).unwrap();
        let args = [part, &["--verify", "MD5", up.to_str().unwrap(), &dst]].concat();
        let (code, err) = cp(&args);
        assert!(code == 2 && err.contains("--verify checks whole files"), "{args:?}: {err}");
        assert!(!root.join("part").exists(), "{args:?}: nothing stored");
    }
    // A destination that is a symlink is written through, as cp does (as
    // root, `cp URL /dev/stdout > out` replaced the system's link); one
    // that leads nowhere is refused.
    std::fs::write(local.join("real"), b"old").unwrap();
    std::os::unix::fs::symlink(local.join("real"), local.join("link")).unwrap();
    let (code, err) = cp(&[&url(port, "/f"), local.join("link").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(std::fs::symlink_metadata(local.join("link")).unwrap().file_type().is_symlink(), "the link stays");
    assert_same_file(&root.join("f"), &local.join("real"));
    std::os::unix::fs::symlink(local.join("nowhere"), local.join("dangling")).unwrap();
    let (code, err) = cp(&[&url(port, "/f"), local.join("dangling").to_str().unwrap()]);
    assert!(code == 2 && err.contains("not written through"), "{err}");
    assert!(!local.join("nowhere").exists());
}

/// A file uploaded to a lightpath server, or copied to one third party,
/// is made with its source's mode and mtime (`OPTS STOR`): it was made
/// 0644 and of the time it was stored, so a private (0600) file became
/// readable to all, where a tree's files, and GCT's, kept theirs (a defect
/// hunt's find). The second upload is a repeat visit (its STOR goes with
/// the login); a file replaced keeps its own mode, as before.
#[test]
fn files_made_on_a_lightpath_server_keep_their_sources_mode_and_mtime() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    let src = d.path().join("private");
    std::fs::write(&src, b"secret").unwrap();
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o600)).unwrap();
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(981_173_106_250_000_000);
    std::fs::File::options().write(true).open(&src).unwrap().set_modified(old).unwrap();
    put_file(&root.join("kept"), b"old", 0o640, (0, 0));
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let s = src.display().to_string();
    for (from, to) in [(s.as_str(), "/one"), (s.as_str(), "/two"), (&url(port, "/one"), "/tp"), (s.as_str(), "/kept")] {
        let (code, err) = cp(&[from, &url(port, to)]);
        assert_eq!(code, 0, "{from} -> {to}: {err}");
    }
    for (name, mode, ns) in [("one", 0o600, 250_000_000), ("two", 0o600, 250_000_000), ("tp", 0o600, 0)] {
        let m = std::fs::metadata(root.join(name)).unwrap();
        assert_eq!((m.mode() & 0o7777, m.mtime(), m.mtime_nsec()), (mode, 981_173_106, ns), "{name}");
    }
    assert_eq!(state(&root.join("kept")), (b"secret".to_vec(), 0, 0o640), "a file replaced keeps its mode");
}

/// `lightpath cp` to GCT's server stores each file under a temporary name
/// and renames it over the old one, which needs only the directory's
/// write permission: it replaced files GCT itself refuses to overwrite
/// (another user's, a read-only one) and made a private (0600) file it
/// replaced 0644 (a defect hunt's find). Now the name's MLST decides: a
/// file this login could not write in place (`Perm` without `w`) is not
/// replaced, unless a tree's file replaces one of the login's own; a
/// single file keeps the mode of the file it replaces; a tree's shared
/// directory keeps its sticky bit.
#[test]
fn uploads_to_gct_replace_only_what_its_login_could_write() {
    let gftp = gftp_ids();
    let (_d, root, local) = root_and_local();
    let up = open_dir(&root.join("up"));
    put_file(&up.join("rootfile"), b"root's", 0o644, (0, 0));
    put_file(&up.join("rofile"), b"read-only", 0o444, gftp);
    put_file(&up.join("private"), b"gftp's", 0o600, gftp);
    write_random(&local.join("new"), 100_000, 8);
    let (_g, port) = gct_server(&root);
    let at = |name: &str| url(port, &format!("{}/{name}", up.display()));
    let src = local.join("new").display().to_string();
    let before: Vec<_> = ["rootfile", "rofile"].iter().map(|n| state(&up.join(n))).collect();
    for name in ["rootfile", "rofile"] {
        let (code, err) = cp(&[&src, &at(name)]);
        assert!(code == 1 && err.contains("not replaced: this login may not write the file there"), "{name}: {err}");
    }
    let after: Vec<_> = ["rootfile", "rofile"].iter().map(|n| state(&up.join(n))).collect();
    assert_eq!(after, before, "refused uploads leave the files as they were");
    assert_eq!(cp(&[&src, &at("private")]).0, 0);
    assert_same_file(&local.join("new"), &up.join("private"));
    assert_eq!(state(&up.join("private")).2, 0o600, "a replaced file keeps its mode");
    // A tree: its read-only file replaces the login's own, not root's.
    let tree = open_dir(&local.join("tree"));
    for (name, mode) in [("rootfile", 0o644), ("rofile", 0o444)] {
        put_file(&tree.join(name), name.as_bytes(), mode, (0, 0));
    }
    std::fs::create_dir(tree.join("shared")).unwrap();
    std::fs::set_permissions(tree.join("shared"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let (code, err) = cp(&["-r", &format!("{}/", tree.display()), &format!("{}/", at(""))]);
    assert!(code == 1 && err.contains("rootfile") && err.contains("1 failed"), "{err}");
    assert_eq!(state(&up.join("rootfile")), before[0]);
    assert_eq!(state(&up.join("rofile")), (b"rofile".to_vec(), gftp.0, 0o444));
    assert_eq!(std::fs::metadata(up.join("shared")).unwrap().mode() & 0o7777, 0o1777, "sticky bit kept");
    let names: Vec<_> = std::fs::read_dir(&up).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 4, "no temporary files left: {names:?}");
}

/// GCT with `MLST` disabled: who may write a file there is unknown, so
/// root's file is not replaced (it was, exit 0, taken for "nothing
/// there"); a new file is stored.
#[test]
fn uploads_to_gct_without_mlst_replace_nothing() {
    let (_d, root, local) = root_and_local();
    let up = open_dir(&root.join("up"));
    put_file(&up.join("rootfile"), b"root's", 0o644, (0, 0));
    write_random(&local.join("new"), 10_000, 8);
    let (_g, port) = gct_server_with(&root, &["-disable-command-list", "MLST"]);
    let at = |name: &str| url(port, &format!("{}/{name}", up.display()));
    let src = local.join("new").display().to_string();
    let (code, err) = cp(&[&src, &at("rootfile")]);
    assert!(code == 1 && err.contains("not stored: the server refused MLST"), "{err}");
    assert_eq!(state(&up.join("rootfile")), (b"root's".to_vec(), 0, 0o644));
    assert_eq!(cp(&[&src, &at("fresh")]).0, 0);
    assert_same_file(&local.join("new"), &up.join("fresh"));
    let names: Vec<_> = std::fs::read_dir(&up).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "no temporary files left: {names:?}");
    // A tree into a directory that is there: MKD is refused, and the
    // refused MLST read as "no directory there" failed the whole copy
    // (a defect hunt's find); the MKD's reply says it exists.
    let t = local.join("t");
    std::fs::create_dir_all(t.join("sub")).unwrap();
    write_random(&t.join("sub/a"), 1_000, 9);
    open_dir(&up.join("t"));
    open_dir(&up.join("t/sub"));
    let (code, err) = cp(&["-r", &t.display().to_string(), &format!("{}/", at(""))]);
    assert_eq!(code, 0, "{err}");
    assert_same_file(&t.join("sub/a"), &up.join("t/sub/a"));
    // SIZE refused too: nothing says no file is there (it was replaced).
    drop(_g);
    let (_g, port) = gct_server_with(&root, &["-disable-command-list", "MLST,SIZE"]);
    let at = |name: &str| url(port, &format!("{}/{name}", up.display()));
    let (code, err) = cp(&[&src, &at("rootfile")]);
    assert!(code == 1 && err.contains("not stored: the server refused MLST"), "{err}");
    assert_eq!(state(&up.join("rootfile")), (b"root's".to_vec(), 0, 0o644));
}

/// A tree downloaded (one virtual file) as the `gftp` user into a
/// directory holding root's file of the same name as one of the tree's:
/// that file is left as it was and named, the rest of the tree is
/// written, and the copy fails (exit 1). The whole tree failed with
/// "creating rootfile: Permission denied" and nothing copied (a defect
/// hunt's find). A symlink where the tree has a directory is left out the
/// same way, and nothing is written through it.
#[test]
fn a_tree_leaves_out_what_its_user_may_not_replace_and_copies_the_rest() {
    let gftp = gftp_ids();
    let (_d, root, local) = root_and_local();
    let tree = open_dir(&root.join("t"));
    for name in ["rootfile", "mine", "sub/f", "link/f"] {
        std::fs::create_dir_all(tree.join(name).parent().unwrap()).unwrap();
        write_random(&tree.join(name), 50_000, name.len() as u64);
    }
    let dst = open_dir(&local.join("t"));
    std::os::unix::fs::chown(&dst, Some(gftp.0), Some(gftp.1)).unwrap();
    put_file(&dst.join("rootfile"), b"root's", 0o644, (0, 0));
    let elsewhere = open_dir(&local.join("elsewhere"));
    std::os::unix::fs::symlink(&elsewhere, dst.join("link")).unwrap();
    let (_srv, port) = lp_server(&root, &["--anonymous"]);
    let out = std::process::Command::new("setpriv")
        .args(["--reuid", "gftp", "--regid", "gftp", "--clear-groups", LP, "cp", "-r", "--retries", "0"])
        .arg(url(port, "/t/"))
        .arg(format!("{}/", dst.display()))
        .env("LIGHTPATH_PEERS", "")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("rootfile") && err.contains("may not write"), "{err}");
    assert!(err.contains("link") && err.contains("a symlink is in its place"), "{err}");
    assert_eq!(state(&dst.join("rootfile")), (b"root's".to_vec(), 0, 0o644));
    for name in ["mine", "sub/f"] {
        assert_same_file(&tree.join(name), &dst.join(name));
    }
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing through the symlink");
}

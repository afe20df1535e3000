//! Trees as one large virtual file (VRET/VSTO, lightpath peers): download,
//! upload and third party with names a file system allows but a protocol
//! may mangle, and a hostile manifest sent straight to the server.

mod common;
use common::*;
use lightpath_proto::manifest::{encode_end_unchecked, encode_entry_unchecked, encode_header, Entry, Kind, Summary};
use lightpath_proto::BlockHeader;
use std::io::Write;
use std::net::TcpStream;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn odd_tree(root: &Path) {
    make_tree(root, 150, 21);
    let names: [&[u8]; 5] = [b"with space", b"new\nline", b"bytes \xff\xfe", b"tab\there", &[b'n'; 255]];
    for (i, n) in names.iter().enumerate() {
        write_random(&root.join(std::ffi::OsStr::from_bytes(n)), 1000 + i, i as u64);
    }
    let mut deep = root.join("deep");
    for i in 0..40 {
        deep = deep.join(format!("l{i}"));
    }
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("leaf"), b"bottom").unwrap();
    std::os::unix::fs::symlink("d0/s0", root.join("link-inside")).unwrap();
}

#[test]
fn trees_travel_as_one_virtual_file() {
    let d = scratch();
    let (a, b, local) =
        (open_dir(&d.path().join("a")), open_dir(&d.path().join("b")), open_dir(&d.path().join("local")));
    odd_tree(&a.join("tree"));
    let (_s1, p1) = lp_server(&a, &["--anonymous-write"]);
    let (_s2, p2) = lp_server(&b, &["--anonymous-write"]);
    let u = |port: u16, p: &str| format!("ftp://127.0.0.1:{port}/{p}");
    let out = std::process::Command::new(LP)
        .args(["cp", "-q", "-r", &u(p1, "tree/"), &format!("{}/", local.join("got").display())])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("does not offer LPVF"),
        "lightpath peers use the virtual file"
    );
    assert_same_tree(&a.join("tree"), &local.join("got"));
    assert_eq!(std::fs::read_link(local.join("got/link-inside")).unwrap(), Path::new("d0/s0"));
    assert!(lp_cp(&["-r", &format!("{}/", local.join("got").display()), &u(p1, "up/")]));
    assert_same_tree(&a.join("tree"), &a.join("up"));
    let out = std::process::Command::new(LP).args(["cp", "-r", &u(p1, "tree/"), &u(p2, "copy/")]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_same_tree(&a.join("tree"), &b.join("copy"));
    let n = regular_files(&a.join("tree"));
    assert!(err.contains(&format!("{n} file(s) copied")), "third party: the servers' file count, {n}: {err}");
    // An empty tree counts 0 files, in any direction (the third-party one
    // was once summed up as a tree of unknown count).
    std::fs::create_dir(a.join("empty")).unwrap();
    for dst in [u(p2, "e1"), format!("{}", local.join("e2").display())] {
        let out = std::process::Command::new(LP).args(["cp", "-r", &u(p1, "empty"), &dst]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && err.contains("0 file(s) copied, 0 failed"), "{dst}: {err}");
        assert!(!err.contains("tree(s)"), "{dst}: {err}");
    }
    assert!(b.join("e1").is_dir() && local.join("e2").is_dir());
}

fn regular_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| match e.file_type().unwrap() {
            t if t.is_dir() => regular_files(&e.path()),
            t if t.is_file() => 1,
            _ => 0,
        })
        .sum()
}

/// `cp -r` from a lightpath server sends `VRET src/` with its login before
/// it knows what `src` is: a tree comes over at once (one VRET on the
/// wire), a file is refused by the server and then copied as a file, and
/// the `cp -r` naming rules hold either way.
#[test]
fn recursive_downloads_speculate_safely() {
    let (_d, root, local) = root_and_local();
    make_tree(&root.join("tree"), 40, 5);
    write_random(&root.join("file"), 300_000, 6);
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let u = |p: &str| format!("ftp://127.0.0.1:{port}/{p}");
    let cp_vv = |src: String, dst: &Path| {
        let out = std::process::Command::new(LP)
            .args(["-vv", "cp", "-q", "-r", &src, &dst.display().to_string()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        err
    };
    let log = cp_vv(u("tree"), &local);
    assert_same_tree(&root.join("tree"), &local.join("tree"));
    assert_eq!(log.matches("> VRET").count(), 1, "one VRET, sent with the login: {log}");
    let login = log.find("> USER").unwrap();
    let (vret, greeting) = (log.find("> VRET").unwrap(), log.find("< 220").unwrap());
    assert!(login < vret && vret < greeting, "VRET left before the greeting came back: {log}");
    let log = cp_vv(u("file"), &local.join("copied"));
    assert_same_file(&root.join("file"), &local.join("copied"));
    assert!(log.contains("< 550"), "the server refused `VRET file/`: {log}");
    assert!(!local.join("copied").is_dir());
}

/// `VSTO dst` in MODE E on a logged-in raw session: the data connection,
/// once the server said 150.
fn vsto_dst(c: &mut Raw) -> TcpStream {
    assert_eq!(c.cmd("MODE E").0, 200);
    let addr = c.pasv();
    c.send(b"VSTO dst");
    let dc = TcpStream::connect(addr).unwrap();
    assert_eq!(c.reply().0, 150);
    dc
}

/// A VSTO whose manifest chunks come twice, at both manifest offsets and
/// in any order (a copy before its original, one chunk as a copy only
/// until its original follows): the server takes each byte once and
/// rebuilds the tree. FEAT says it does (`LPVF-COPIES`).
#[test]
fn manifest_chunks_that_come_twice_are_taken_once() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let mut m = Vec::new();
    encode_header(&mut m);
    for (i, name) in [&b"a"[..], b"b"].into_iter().enumerate() {
        let e =
            Entry { path: name.to_vec(), kind: Kind::File { size: 3, offset: 3 * i as u64 }, mode: 0o644, mtime_ns: 0 };
        encode_entry_unchecked(&e, &mut m);
    }
    encode_end_unchecked(Summary { entries: 2, total: 6 }, &mut m);
    let mut c = Raw::login(port);
    assert!(c.cmd("FEAT").1.contains("LPVF-COPIES 2"));
    let mut dc = vsto_dst(&mut c);
    let (base, copy) = (lightpath_engine::vfile_chan::MANIFEST_BASE, lightpath_engine::vfile_chan::MANIFEST_COPY_BASE);
    let cut = 11;
    let block = |at: u64, b: &[u8]| [&BlockHeader::data(at, b.len() as u64).encode()[..], b].concat();
    let wire = [
        block(copy + cut as u64, &m[cut..]),
        block(base, &m[..cut]),
        block(base + cut as u64, &m[cut..]),
        block(copy, &m[..cut]),
        block(0, b"aaabbb"),
        BlockHeader::eof_eod(1).encode().to_vec(),
    ]
    .concat();
    dc.write_all(&wire).unwrap();
    drop(dc);
    let (code, text) = c.final_reply();
    assert_eq!(code, 226, "{text}");
    assert_eq!(std::fs::read(root.join("dst/a")).unwrap(), b"aaa");
    assert_eq!(std::fs::read(root.join("dst/b")).unwrap(), b"bbb");
}

#[test]
fn hostile_manifest_is_refused_and_nothing_escapes() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let mut m = Vec::new();
    encode_header(&mut m);
    let evil =
        Entry { path: b"../escaped".to_vec(), kind: Kind::File { size: 4, offset: 0 }, mode: 0o644, mtime_ns: 0 };
    encode_entry_unchecked(&evil, &mut m);
    encode_end_unchecked(Summary { entries: 1, total: 4 }, &mut m);
    let mut c = Raw::login(port);
    let mut dc = vsto_dst(&mut c);
    let base = lightpath_engine::vfile_chan::MANIFEST_BASE;
    let wire = [
        &BlockHeader::data(base, m.len() as u64).encode()[..],
        &m,
        &BlockHeader::data(0, 4).encode(),
        b"evil",
        &BlockHeader::eof_eod(1).encode(),
    ]
    .concat();
    dc.write_all(&wire).unwrap();
    let (code, text) = c.final_reply();
    assert!(code == 426 || code == 451, "{code} {text}");
    assert!(!d.path().join("escaped").exists() && !root.join("escaped").exists());
    // The refused VSTO removes the directory it made, as it was left empty.
    let left: Vec<_> = std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "nothing left in the root, not even dst: {left:?}");
    assert_eq!(c.cmd("NOOP").0, 200, "session survives");
}

/// The tree's own directory arrives with its mode and mtime, as its
/// subdirectories do, in all three directions: a private 0700 tree stays
/// private (it arrived 0755, its files readable by all). A download and a
/// third-party copy learn them from the source's MLST (`Modify` with the
/// fraction of the second: it was whole seconds, and the tree's own
/// directory lost what every entry in it kept, a defect hunt); an upload
/// sends its own (`OPTS VSTO`, to the nanosecond). As for every
/// entry of the tree, setgid (and setuid) are dropped and the sticky bit
/// kept: the top directory kept setgid (an audit's find).
#[test]
fn a_trees_own_directory_keeps_its_mode_and_mtime() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let d = scratch();
    let (a, b, local) =
        (open_dir(&d.path().join("a")), open_dir(&d.path().join("b")), open_dir(&d.path().join("local")));
    let tree = open_dir(&a.join("priv"));
    make_tree(&tree, 10, 5);
    std::fs::set_permissions(&tree, std::fs::Permissions::from_mode(0o3700)).unwrap();
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(978_307_200_500);
    std::fs::File::open(&tree).unwrap().set_modified(t).unwrap();
    let (_s1, p1) = lp_server(&a, &["--anonymous-write"]);
    let (_s2, p2) = lp_server(&b, &["--anonymous-write"]);
    let u = |port: u16, p: &str| format!("ftp://127.0.0.1:{port}/{p}");
    let root_of = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        (m.mode() & 0o7777, m.mtime(), m.mtime_nsec())
    };
    assert!(lp_cp(&["-r", &u(p1, "priv"), &format!("{}/", local.display())]));
    assert_eq!(root_of(&local.join("priv")), (0o1700, 978_307_200, 500_000_000), "download");
    // The second upload to the server sends its VSTO with the login (it
    // knows the server from the first): the OPTS VSTO goes before it.
    for up in ["up", "up2"] {
        assert!(lp_cp(&["-r", tree.to_str().unwrap(), &u(p2, up)]));
        assert_eq!(root_of(&b.join(up)), (0o1700, 978_307_200, 500_000_000), "upload to {up}");
    }
    assert!(lp_cp(&["-r", &u(p1, "priv"), &u(p2, "tp")]));
    assert_eq!(root_of(&b.join("tp")), (0o1700, 978_307_200, 500_000_000), "third party");
    for got in [local.join("priv"), b.join("up"), b.join("up2"), b.join("tp")] {
        assert_same_tree(&tree, &got);
    }
}

/// Local paths on the command line may hold any bytes a name can: a file
/// and a tree named with a byte that is not UTF-8 go up and come back
/// (clap refused such an argument: "invalid UTF-8 was detected").
#[test]
fn local_paths_that_are_not_utf8_can_be_named() {
    use std::ffi::OsStr;
    let (_d, root, local) = root_and_local();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let name = |s: &[u8]| local.join(OsStr::from_bytes(s));
    write_random(&name(b"f\xff"), 70_000, 3);
    make_tree(&name(b"t\xfe"), 5, 4);
    let run = |args: &[&OsStr]| {
        let out = std::process::Command::new(LP).arg("cp").arg("-q").args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    let u = |p: &str| std::ffi::OsString::from(format!("ftp://127.0.0.1:{port}/{p}"));
    run(&[name(b"f\xff").as_os_str(), &u("f")]);
    run(&["-r".as_ref(), name(b"t\xfe").as_os_str(), &u("t")]);
    run(&[&u("f"), name(b"back\xff").as_os_str()]);
    run(&["-r".as_ref(), &u("t"), name(b"tback\xfe").as_os_str()]);
    assert_same_file(&name(b"f\xff"), &name(b"back\xff"));
    assert_same_tree(&name(b"t\xfe"), &name(b"tback\xfe"));
}

/// A tree's summary counts its files' bytes, not the manifest sent with
/// them (50 files of 1,275,000 bytes were said to be 1,276,866), both ways
/// and third party (the servers' 226 say the bytes of file data).
#[test]
fn a_trees_summary_counts_its_files_bytes() {
    let d = scratch();
    let (root, tree) = (open_dir(&d.path().join("root")), open_dir(&d.path().join("t")));
    for i in 1..=50 {
        write_random(&tree.join(format!("f{i}")), i * 1000, i as u64);
    }
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let said = "50 file(s) copied, 0 failed, 1275000 bytes in";
    // Not `cp` (-q): a quiet copy that succeeds prints no summary.
    let cp = |args: &[&str]| {
        let out = std::process::Command::new(LP).arg("cp").args(args).output().unwrap();
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = cp(&["-r", tree.to_str().unwrap(), &format!("ftp://127.0.0.1:{port}/t")]);
    assert!(code == 0 && err.contains(said), "upload: {err}");
    let (code, err) = cp(&["-r", &format!("ftp://127.0.0.1:{port}/t"), d.path().join("back").to_str().unwrap()]);
    assert!(code == 0 && err.contains(said), "download: {err}");
    let (_b, pb) = lp_server(d.path(), &["--anonymous-write"]);
    let (code, err) = cp(&["-r", &format!("ftp://127.0.0.1:{port}/t/"), &format!("ftp://127.0.0.1:{pb}/third/")]);
    assert!(code == 0 && err.contains(said), "third party: {err}");
    assert_same_tree(&tree, &d.path().join("third"));
}

/// Every `manifest_repeated: N` a `-v` log shows (`UnpackStats`).
fn repeated(log: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(log).unwrap();
    let key = "manifest_repeated: ";
    text.match_indices(key)
        .map(|(i, _)| text[i + key.len()..].chars().take_while(char::is_ascii_digit).collect::<String>())
        .map(|n| n.parse().unwrap())
        .collect()
}

/// Between lightpath peers each manifest chunk goes twice, on two of the
/// streams, in every direction: the receiver's stats count the copies it
/// dropped (`OPTS VRET Copies=2;` for a download and a third-party
/// source, FEAT `LPVF-COPIES` for an upload and a third-party
/// destination). One stream carries each chunk once.
#[test]
fn manifest_chunks_go_twice_between_lightpath_peers() {
    let d = scratch();
    let (a, b, local) = (open_dir(&d.path().join("a")), open_dir(&d.path().join("b")), open_dir(&d.path().join("l")));
    make_tree(&a.join("tree"), 300, 9);
    let (la, lb, lc) = (d.path().join("a.log"), d.path().join("b.log"), d.path().join("c.log"));
    let (_sa, pa) = logged_server(&a, &la, &[]);
    let (_sb, pb) = logged_server(&b, &lb, &[]);
    let u = |port: u16, p: &str| format!("ftp://127.0.0.1:{port}/{p}");
    let cp_v = |args: &[&str]| {
        let log = std::fs::File::create(&lc).unwrap();
        let ok = std::process::Command::new(LP).args(["-v", "cp", "-q", "-r"]).args(args).stderr(log).status().unwrap();
        assert!(ok.success(), "{}", std::fs::read_to_string(&lc).unwrap());
    };
    cp_v(&["-p", "4", &u(pa, "tree"), &format!("{}/", local.display())]);
    assert_same_tree(&a.join("tree"), &local.join("tree"));
    assert!(matches!(repeated(&lc)[..], [n] if n > 0), "download: {:?}", repeated(&lc));
    cp_v(&["-p", "4", &local.join("tree").display().to_string(), &u(pa, "up")]);
    assert_same_tree(&a.join("tree"), &a.join("up"));
    assert!(matches!(repeated(&la)[..], [n] if n > 0), "upload: {:?}", repeated(&la));
    cp_v(&["-p", "4", &u(pa, "tree"), &u(pb, "third")]);
    assert_same_tree(&a.join("tree"), &b.join("third"));
    assert!(matches!(repeated(&lb)[..], [n] if n > 0), "third party: {:?}", repeated(&lb));
    cp_v(&["-p", "1", &u(pa, "tree"), &format!("{}/one", local.display())]);
    assert_same_tree(&a.join("tree"), &local.join("one"));
    assert_eq!(repeated(&lc), [0], "one stream: each chunk once");
}

/// A tree (one virtual file) uploaded to a server without `/proc` (a
/// chroot), and downloaded back from it: its directories get their modes
/// and mtimes. Both failed, "setting the metadata of sub: No such file
/// or directory", the files there but the directories left 0700 (a
/// defect hunt's find).
#[test]
fn trees_go_both_ways_with_a_server_without_proc() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let (d, root, local) = root_and_local();
    let t = local.join("t");
    std::fs::create_dir_all(t.join("sub/deeper")).unwrap();
    write_random(&t.join("sub/deeper/f"), 30_000, 13);
    write_random(&t.join("a"), 1_000, 14);
    std::fs::set_permissions(t.join("sub"), std::fs::Permissions::from_mode(0o751)).unwrap();
    let (_srv, port) = lp_server_without_proc(&root, &d.path().join("server.log"));
    let (code, err) = cp(&["-r", &t.display().to_string(), &format!("ftp://127.0.0.1:{port}/")]);
    assert_eq!(code, 0, "upload: {err}");
    let meta = |p: &Path| std::fs::metadata(p).map(|m| (m.mode() & 0o7777, m.mtime())).unwrap();
    assert_eq!(meta(&root.join("t/sub")), meta(&t.join("sub")));
    assert_same_file(&t.join("sub/deeper/f"), &root.join("t/sub/deeper/f"));
    let back = d.path().join("back");
    std::fs::create_dir(&back).unwrap();
    let (code, err) = cp(&["-r", &format!("ftp://127.0.0.1:{port}/t"), &format!("{}/", back.display())]);
    assert_eq!(code, 0, "download: {err}");
    assert_eq!(meta(&back.join("t/sub")), meta(&t.join("sub")));
}

//! `lightpath cp` against a plain FTP server that lies: a scripted
//! server (no lightpath extensions, MODE S only) whose listing names a
//! path outside the tree, and whose file is shorter than its SIZE said.
//! Nothing may be written outside the destination, and no short file may
//! appear under its final name. Also: a local name with a line break,
//! which would split an FTP command in two, is refused before it is sent.

mod common;
use common::scripted::{self, DataEnd};
use common::*;
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;

/// What the scripted server says about its one directory `/d` and its one
/// file `/d/f` (or `/f`).
#[derive(Clone, Copy)]
struct Script {
    /// The names MLSD lists in `/d`.
    listing: &'static [&'static str],
    /// The lines MLSR sends for `/d` (facts and a path below it); with
    /// any, FEAT offers MLSR. MLST of `/d` or of a directory listed here
    /// gives `Unique=` its path below `/d` (`.` for `/d`).
    tree: &'static [&'static str],
    /// What SIZE and MLST say of a file.
    size: u64,
    /// The bytes RETR sends.
    data: &'static [u8],
}

/// Start the scripted server; its port.
fn fake_server(script: Script) -> u16 {
    scripted::serve(move |conn| {
        let mut data = DataEnd::default();
        scripted::commands(conn, "scripted", |out, verb, arg| answer(out, &mut data, script, verb, arg))
    })
}

fn answer(out: &mut TcpStream, data: &mut DataEnd, script: Script, verb: &str, arg: &str) -> Option<String> {
    Some(match verb {
        "USER" => "331 password\r\n".to_string(),
        "SIZE" if arg.ends_with("/d") || arg.ends_with("/d/") => "550 not a file\r\n".into(),
        "SIZE" => format!("213 {}\r\n", script.size),
        "MLST" if arg.trim_end_matches('/').ends_with("/d") => "250-\r\n type=dir;unique=.; /d\r\n250 End\r\n".into(),
        "MLST" if listed_dir(script, arg) => format!("250-\r\n type=dir;unique={}; {arg}\r\n250 End\r\n", below_d(arg)),
        "MLST" => format!("250-\r\n type=file;size={}; {arg}\r\n250 End\r\n", script.size),
        "PASV" | "EPSV" | "PORT" => data.set(verb, arg),
        "RETR" | "MLSD" | "LIST" | "MLSR" => {
            let body = match verb {
                "RETR" => script.data.to_vec(),
                "MLSR" => script.tree.iter().flat_map(|l| [l.as_bytes(), b"\r\n\r\n"].concat()).collect(),
                _ => listing(script),
            };
            let _ = out.write_all(b"150 here it comes\r\n");
            let mut dc = data.open()?;
            let _ = dc.write_all(&body);
            drop(dc);
            "226 Transfer complete.\r\n".into()
        }
        "FEAT" if !script.tree.is_empty() => {
            "211-Features:\r\n MLST type*;size*;\r\n MLSR\r\n SIZE\r\n211 End\r\n".into()
        }
        "FEAT" => "211-Features:\r\n MLST type*;size*;\r\n SIZE\r\n211 End\r\n".into(),
        "MODE" if !arg.eq_ignore_ascii_case("S") => "504 only MODE S\r\n".into(),
        "TYPE" | "MODE" | "PASS" | "OPTS" | "CWD" => "200 OK\r\n".into(),
        _ => "502 not implemented\r\n".into(),
    })
}

/// `/d/a/b` as `a/b`.
fn below_d(path: &str) -> &str {
    path.split_once("/d/").map_or(path, |(_, rest)| rest)
}

/// Whether the script's MLSR lists `path` as a directory.
fn listed_dir(script: Script, path: &str) -> bool {
    script.tree.iter().any(|l| l.starts_with("type=dir;") && l.ends_with(&format!(" {}", below_d(path))))
}

fn listing(script: Script) -> Vec<u8> {
    let mut out = b"type=cdir; .\r\n".to_vec();
    for n in script.listing {
        out.extend_from_slice(format!("type=file;size={}; {n}\r\n", script.size).as_bytes());
    }
    out
}

/// Every entry under `dir`, recursively, as paths relative to it.
fn everything(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        out.push(p.strip_prefix(dir).unwrap().display().to_string());
        if e.file_type().unwrap().is_dir() {
            out.extend(everything(&p).into_iter().map(|s| format!("{}/{s}", e.file_name().to_string_lossy())));
        }
    }
    out.sort();
    out
}

#[test]
fn a_listing_naming_a_path_outside_the_tree_is_refused_and_nothing_is_written() {
    let d = scratch();
    let dest = open_dir(&d.path().join("a/b/dest"));
    let evils: [&'static [&'static str]; 3] =
        [&["fine", "../../escaped"], &["fine", "/tmp/lightpath-escaped-by-listing"], &["sub/../../../escaped"]];
    for listing in evils {
        let evil = listing.last().unwrap();
        let port = fake_server(Script { listing, tree: &[], size: 5, data: b"hello" });
        let (code, err) = cp(&["-r", &format!("ftp://127.0.0.1:{port}/d/"), &format!("{}/", dest.display())]);
        assert_ne!(code, 0, "{evil}: {err}");
        assert!(err.contains("unsafe name"), "{evil}: {err}");
        assert_eq!(everything(d.path()), vec!["a", "a/b", "a/b/dest"], "{evil}: nothing written anywhere");
        assert!(!Path::new("/tmp/lightpath-escaped-by-listing").exists());
    }
    // The same server with an honest listing is copied: the refusal was the name's.
    let port = fake_server(Script { listing: &["fine", "also fine"], tree: &[], size: 5, data: b"hello" });
    let (code, err) = cp(&["-r", &format!("ftp://127.0.0.1:{port}/d/"), &format!("{}/", dest.display())]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(everything(&dest), vec!["also fine", "fine"]);
    assert_eq!(std::fs::read(dest.join("also fine")).unwrap(), b"hello");
}

#[test]
fn a_recursive_listing_naming_a_path_outside_the_tree_is_refused_and_nothing_is_written() {
    let d = scratch();
    let dest = open_dir(&d.path().join("a/b/dest"));
    let evils: [&'static [&'static str]; 3] = [
        &["type=cdir;unique=.; .", "type=file;size=5; fine", "type=file;size=5; ../../escaped"],
        &["type=cdir;unique=.; .", "type=file;size=5; /tmp/lightpath-escaped-by-mlsr"],
        &["type=cdir;unique=.; .", "type=dir;unique=sub; sub", "type=file;size=5; sub/../../../escaped"],
    ];
    for tree in evils {
        let evil = tree.last().unwrap();
        let port = fake_server(Script { listing: &["fine"], tree, size: 5, data: b"hello" });
        let (code, err) = cp(&["-r", &format!("ftp://127.0.0.1:{port}/d/"), &format!("{}/", dest.display())]);
        assert_ne!(code, 0, "{evil}: {err}");
        assert!(err.contains("unsafe name"), "{evil}: {err}");
        assert_eq!(everything(d.path()), vec!["a", "a/b", "a/b/dest"], "{evil}: nothing written anywhere");
        assert!(!Path::new("/tmp/lightpath-escaped-by-mlsr").exists());
    }
}

/// A recursive listing that cannot be right is no use: the tree is listed
/// with MLSD after all (here: `fine` alone), and nothing else is written.
/// An entry inside a name not listed as a directory (a symlink's, which
/// would carry the write out of the destination), a name listed twice, no
/// line for the root or two, a directory whose `Unique` is not what MLST
/// says (GCT shows a directory whose name begins with a space so, under
/// its parent's name, and leaves out what it holds).
#[test]
fn a_recursive_listing_that_cannot_be_right_is_listed_again_with_mlsd() {
    let d = scratch();
    let cases: [&'static [&'static str]; 6] = [
        &["type=cdir;unique=.; .", "type=slink;unix.slink=/tmp; ln", "type=file;size=5; ln/escaped"],
        &["type=cdir;unique=.; .", "type=file;size=5; nodir/escaped"],
        &["type=cdir;unique=.; .", "type=file;size=5; twice", "type=file;size=5; twice"],
        &["type=slink;unix.slink=/tmp/x; d"],
        &["type=cdir;unique=.; .", "type=cdir;unique=k; .", "type=file;size=5; top"],
        &["type=cdir;unique=.; .", "type=dir;unique=sub/ e; sub", "type=file;size=5; sub/x"],
    ];
    for (i, tree) in cases.into_iter().enumerate() {
        let dest = open_dir(&d.path().join(format!("dest{i}")));
        let port = fake_server(Script { listing: &["fine"], tree, size: 5, data: b"hello" });
        let (code, err) = cp(&["-v", "-r", &format!("ftp://127.0.0.1:{port}/d/"), &format!("{}/", dest.display())]);
        assert_eq!(code, 0, "{tree:?}: {err}");
        assert!(err.contains("MLSR no use"), "{tree:?}: {err}");
        assert_eq!(everything(&dest), vec!["fine"], "{tree:?}: {err}");
    }
    assert!(!Path::new("/tmp/escaped").exists());
}

/// A server offering MLSR is listed with it: what MLSD would list (one
/// file, `flat`) is not what is copied. A symlink there is asked about with
/// MLST and copied as the file it leads to. `--no-mlsr` lists with MLSD.
#[test]
fn a_tree_is_listed_with_one_mlsr_where_the_server_offers_it() {
    let d = scratch();
    let tree = &[
        "type=cdir;unique=.; .",
        "type=dir;unique=sub; sub",
        "type=file;size=5; sub/deep",
        "type=file;size=5; top",
        "type=slink;unix.slink=top; ln",
    ];
    let port = fake_server(Script { listing: &["flat"], tree, size: 5, data: b"hello" });
    let src = format!("ftp://127.0.0.1:{port}/d/");
    let dest = open_dir(&d.path().join("mlsr"));
    let (code, err) = cp(&["-v", "-r", &src, &format!("{}/", dest.display())]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("listed the remote tree with one MLSR"), "{err}");
    assert_eq!(everything(&dest), vec!["ln", "sub", "sub/deep", "top"]);
    assert_eq!(std::fs::read(dest.join("sub/deep")).unwrap(), b"hello");
    assert!(std::fs::symlink_metadata(dest.join("ln")).unwrap().is_file(), "a link to a file is copied as the file");
    let dest = open_dir(&d.path().join("mlsd"));
    let (code, err) = cp(&["-r", "--no-mlsr", &src, &format!("{}/", dest.display())]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(everything(&dest), vec!["flat"]);
}

#[test]
fn a_file_shorter_than_its_announced_size_is_not_kept() {
    let d = scratch();
    let dest = open_dir(&d.path().join("dest"));
    let port = fake_server(Script { listing: &[], tree: &[], size: 1000, data: b"only 19 bytes here." });
    let (code, err) = cp(&[&format!("ftp://127.0.0.1:{port}/f"), &format!("{}/", dest.display())]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("got 19 of the 1000 bytes announced"), "{err}");
    assert!(err.contains("0 bytes in"), "{err}");
    assert!(err.contains("19 bytes moved in all, with those of the files that failed"), "{err}");
    assert!(everything(&dest).is_empty(), "{:?}", everything(&dest));
    // Told the truth, the same bytes are kept.
    let port = fake_server(Script { listing: &[], tree: &[], size: 19, data: b"only 19 bytes here." });
    let (code, err) = cp(&[&format!("ftp://127.0.0.1:{port}/f"), &format!("{}/", dest.display())]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(dest.join("f")).unwrap(), b"only 19 bytes here.");
}

/// A MODE S download whose local file cannot be made (its directory is
/// immutable: even root cannot create in it) still takes the server's data
/// connection, into nothing: the server, waiting for it, answers at once,
/// and the copy fails with the local error in 0.1 s. Without it each try
/// waited 10 s for a reply that could not come: 47 s for the copy (and,
/// with a second file pipelined behind, the full reply timeout, 300 s).
#[test]
fn a_stream_download_that_cannot_be_written_here_fails_at_once() {
    /// `chattr +i` on a directory until dropped.
    struct Immutable<'a>(&'a Path);
    impl Drop for Immutable<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("chattr").arg("-i").arg(self.0).status();
        }
    }
    let d = scratch();
    let dest = open_dir(&d.path().join("dest"));
    let set = std::process::Command::new("chattr").arg("+i").arg(&dest).status().expect("chattr (e2fsprogs)");
    assert!(set.success(), "chattr +i {}", dest.display());
    let _undo = Immutable(&dest);
    let port = fake_server(Script { listing: &["f"], tree: &[], size: 5, data: b"hello" });
    let started = std::time::Instant::now();
    let (code, err) = cp(&["-r", &format!("ftp://127.0.0.1:{port}/d/"), &format!("{}/", dest.display())]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("Operation not permitted"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "took {:?}: {err}", started.elapsed());
    assert!(everything(&dest).is_empty());
}

#[test]
fn a_local_name_with_a_line_break_is_refused_before_it_is_sent() {
    let (_d, root, local) = root_and_local();
    std::fs::write(root.join("victim"), b"keep me").unwrap();
    let evil = local.join("x\r\nDELE victim");
    std::fs::write(&evil, b"data").unwrap();
    std::fs::write(local.join("plain"), b"plain data").unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let dst = format!("ftp://127.0.0.1:{port}/");
    let (code, err) = cp(&[evil.to_str().unwrap(), local.join("plain").to_str().unwrap(), &dst]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("line break"), "{err}");
    assert_eq!(std::fs::read(root.join("victim")).unwrap(), b"keep me", "no second command ran");
    assert_eq!(std::fs::read(root.join("plain")).unwrap(), b"plain data", "the other file still arrives");
    // A download of such a name is refused the same way.
    let (code, err) = cp(&[&format!("ftp://127.0.0.1:{port}/a%0ADELE%20victim"), local.to_str().unwrap()]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("line break"), "{err}");
    assert!(root.join("victim").exists());
}

/// A server that takes our PORT for its MODE S data connection, while
/// another host (127.0.0.2) connects to the same listener first and sends
/// forged bytes of the announced length. The client takes data only from
/// the server's control address: the real bytes are kept (the forged ones
/// were, before). `--data-from-any` lifts that, for servers whose data
/// leaves from another host, and then the first connection wins.
#[test]
fn data_from_another_host_is_refused_unless_asked_for() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    const REAL: &[u8] = b"the server's 30 bytes of data.";
    const FORGED: &[u8] = b"forged by a host on the path.!";
    let ported = Arc::new(AtomicBool::new(false));
    let seen = ported.clone();
    let port = scripted::serve(move |conn| {
        let (mut data, seen) = (DataEnd::default(), seen.clone());
        scripted::commands(conn, "scripted", move |out, verb, arg| match verb {
            "PORT" => {
                seen.store(true, Ordering::Relaxed);
                let n: Vec<u16> = arg.split(',').filter_map(|x| x.trim().parse().ok()).collect();
                inject(([127, 0, 0, 1], (n[4] << 8) | n[5]).into(), FORGED);
                Some(data.set(verb, arg))
            }
            "RETR" => {
                std::thread::sleep(std::time::Duration::from_millis(300));
                let _ = out.write_all(b"150 here it comes\r\n");
                let mut dc = data.open()?;
                let _ = dc.write_all(REAL);
                drop(dc);
                Some("226 Transfer complete.\r\n".into())
            }
            "PASV" | "EPSV" => Some("502 use PORT\r\n".into()),
            _ => answer(out, &mut data, Script { listing: &[], tree: &[], size: 30, data: REAL }, verb, arg),
        })
    });
    let d = scratch();
    let dest = open_dir(&d.path().join("dest"));
    let (code, err) = cp(&[&format!("ftp://127.0.0.1:{port}/f"), &format!("{}/", dest.display())]);
    assert!(ported.load(Ordering::Relaxed), "the client never sent PORT: the test proves nothing");
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(dest.join("f")).unwrap(), REAL);
    // Said of the client's side, with the client's option (it named the
    // server's `--data-peers`).
    assert!(err.contains("not from the server's address (cp --data-from-any accepts it)"), "{err}");
    let (code, err) = cp(&["--data-from-any", &format!("ftp://127.0.0.1:{port}/f"), &format!("{}/g", dest.display())]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(dest.join("g")).unwrap(), FORGED, "the first connection, from anyone, was taken");
}

/// Connect to `to` from 127.0.0.2 and send `bytes`.
fn inject(to: std::net::SocketAddr, bytes: &'static [u8]) {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&std::net::SocketAddr::from(([127, 0, 0, 2], 0)).into()).unwrap();
    s.connect(&to.into()).unwrap();
    let mut c: TcpStream = s.into();
    c.write_all(bytes).unwrap();
}

/// A third-party copy from a server whose file is shorter than its SIZE
/// said, to GCT (which takes ALLO as a hint and answers 226 for what
/// came): the short file is not published, and the copy fails saying so.
#[test]
fn a_third_party_copy_short_of_its_size_at_gct_is_not_kept() {
    let d = scratch();
    let home = open_dir(&d.path().join("home"));
    let (_g, gport) = gct_server(&home);
    let port = fake_server(Script { listing: &[], tree: &[], size: 1000, data: b"only 19 bytes here." });
    let to = format!("ftp://127.0.0.1:{gport}{}/f", home.display());
    let (code, err) = cp(&[&format!("ftp://127.0.0.1:{port}/f"), &to]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("holds 19 of the 1000 bytes planned"), "{err}");
    assert!(everything(&home).is_empty(), "{:?}", everything(&home));
    // Told the truth, the same bytes are published.
    let port = fake_server(Script { listing: &[], tree: &[], size: 19, data: b"only 19 bytes here." });
    let (code, err) = cp(&[&format!("ftp://127.0.0.1:{port}/f"), &to]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(home.join("f")).unwrap(), b"only 19 bytes here.");
}

/// A listing whose PASV the server refuses (GCT answers 500 while it has
/// no port free) is asked again: such a refusal left whole directories
/// out as "cannot list", and the tree's own failed the copy (a defect
/// hunt's find, thousands of directories of a wide tree from GCT).
#[test]
fn a_listing_whose_pasv_was_refused_is_asked_again() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let refused = Arc::new(AtomicUsize::new(0));
    let count = refused.clone();
    let script = Script { listing: &["fine"], tree: &[], size: 5, data: b"hello" };
    let port = scripted::serve(move |conn| {
        let (mut data, count) = (DataEnd::default(), count.clone());
        scripted::commands(conn, "scripted", move |out, verb, arg| match verb {
            "PASV" | "EPSV" if count.fetch_add(1, Ordering::Relaxed) < 2 => {
                Some("500 Command failed. : globus_ftp_control_local_pasv failed. Address already in use\r\n".into())
            }
            _ => answer(out, &mut data, script, verb, arg),
        })
    });
    let d = scratch();
    let dest = d.path().join("dest");
    let (code, err) = cp(&["-r", &format!("ftp://127.0.0.1:{port}/d/"), &format!("{}/", dest.display())]);
    assert!(refused.load(Ordering::Relaxed) >= 1, "the server never refused a PASV: the test proves nothing");
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(dest.join("fine")).unwrap(), b"hello");
    // A listing with no mode: made 0666 less the umask, as cp makes a
    // file (a tree's files got exactly 0666 for a while: a review's find).
    use std::os::unix::fs::PermissionsExt;
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let umask =
        status.lines().find_map(|l| l.strip_prefix("Umask:")).map(|u| u32::from_str_radix(u.trim(), 8).unwrap());
    let mode = std::fs::metadata(dest.join("fine")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666 & !umask.unwrap());
}

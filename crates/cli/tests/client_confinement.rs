//! Where `lightpath cp` writes a download, against a server that lies (a
//! scripted plain FTP server, MODE S only, as in `hostile_server.rs`) or a
//! destination that holds a trap: nothing may be written outside the
//! destination through a symlink in it, a partial copy writes only the
//! window it asked for, and a file that cannot be put in place leaves no
//! temporary file behind.

mod common;
use common::scripted::{self, DataEnd};
use common::*;
use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the scripted server serves.
#[derive(Default)]
struct Script {
    /// Directories (absolute, no trailing `/`).
    dirs: Vec<&'static str>,
    /// Files (absolute) and their bytes.
    files: Vec<(&'static str, &'static [u8])>,
    /// What an ERET sends, whatever part it asked for (at offset 0).
    eret: &'static [u8],
    /// A directory made under the name of the file being downloaded, once
    /// the client's temporary file for it is there (during the RETR).
    mkdir_during_retr: Option<PathBuf>,
}

impl Script {
    fn file(&self, path: &str) -> Option<&'static [u8]> {
        self.files.iter().find(|(p, _)| *p == path).map(|(_, d)| *d)
    }

    fn is_dir(&self, path: &str) -> bool {
        self.dirs.contains(&path)
    }

    /// MLSD of `dir`: its subdirectories and files.
    fn listing(&self, dir: &str) -> Vec<u8> {
        let child = |p: &str| p.strip_prefix(dir)?.strip_prefix('/').filter(|n| !n.contains('/')).map(String::from);
        let mut out = b"type=cdir; .\r\n".to_vec();
        for name in self.dirs.iter().filter_map(|d| child(d)) {
            out.extend_from_slice(format!("type=dir; {name}\r\n").as_bytes());
        }
        for (name, data) in self.files.iter().filter_map(|(p, d)| Some((child(p)?, d))) {
            out.extend_from_slice(format!("type=file;size={}; {name}\r\n", data.len()).as_bytes());
        }
        out
    }
}

/// Start the scripted server; its port.
fn fake_server(script: Script) -> u16 {
    scripted::serve(move |conn| {
        let mut data = DataEnd::default();
        scripted::commands(conn, "scripted", |out, verb, arg| {
            Some(match verb {
                "RETR" | "MLSD" | "ERET" => transfer(out, &mut data, &script, verb, arg),
                "PASV" | "EPSV" | "PORT" => data.set(verb, arg),
                _ => command(&script, verb, arg),
            })
        })
    })
}

/// A path as the server knows it: no trailing `/`.
fn norm(arg: &str) -> &str {
    let p = arg.trim_end_matches('/');
    if p.is_empty() {
        "/"
    } else {
        p
    }
}

fn command(script: &Script, verb: &str, arg: &str) -> String {
    let path = norm(arg);
    match (verb, script.file(path)) {
        ("USER", _) => "331 password\r\n".into(),
        ("SIZE", Some(d)) => format!("213 {}\r\n", d.len()),
        ("MLST", Some(d)) => format!("250-\r\n type=file;size={}; {path}\r\n250 End\r\n", d.len()),
        ("MLST", None) if script.is_dir(path) => format!("250-\r\n type=dir; {path}\r\n250 End\r\n"),
        ("SIZE" | "MLST", _) => "550 no such file\r\n".into(),
        ("FEAT", _) => "211-Features:\r\n MLST type*;size*;\r\n SIZE\r\n ERET\r\n211 End\r\n".into(),
        ("MODE", _) if !arg.eq_ignore_ascii_case("S") => "504 only MODE S\r\n".into(),
        ("TYPE" | "MODE" | "PASS" | "OPTS" | "CWD", _) => "200 OK\r\n".into(),
        _ => "502 not implemented\r\n".into(),
    }
}

/// RETR, MLSD or ERET (`P off len path`, answered with the script's bytes).
fn transfer(out: &mut TcpStream, data: &mut DataEnd, script: &Script, verb: &str, arg: &str) -> String {
    let body = match verb {
        "MLSD" => Some(script.listing(norm(arg))),
        "ERET" => Some(script.eret.to_vec()),
        _ => script.file(norm(arg)).map(<[u8]>::to_vec),
    };
    let Some(body) = body else { return "550 no such file\r\n".into() };
    let _ = out.write_all(b"150 here it comes\r\n");
    let Some(mut dc) = data.open() else { return "425 no data connection\r\n".into() };
    if let (Some(dir), "RETR") = (&script.mkdir_during_retr, verb) {
        wait_for_temporary_file(dir.parent().unwrap());
        std::fs::create_dir(dir).unwrap();
    }
    let _ = dc.write_all(&body);
    drop(dc);
    "226 Transfer complete.\r\n".into()
}

/// Wait until the receiver has its file open in `dir` (unnamed until
/// complete, so seen through `/proc`).
fn wait_for_temporary_file(dir: &Path) {
    let t = Instant::now();
    while open_in(dir).is_empty() {
        assert!(t.elapsed() < Duration::from_secs(20), "no temporary file appeared in {}", dir.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Every entry under `dir`, recursively (not through symlinks), relative to it.
fn everything(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type().unwrap().is_dir() {
            out.extend(everything(&e.path()).into_iter().map(|s| format!("{name}/{s}")));
        }
        out.push(name);
    }
    out.sort();
    out
}

/// `dst` with `dst/sub` a symlink to the directory `outside`, beside it.
fn trap(d: &Path) -> (PathBuf, PathBuf) {
    let (dst, outside) = (open_dir(&d.join("dst")), open_dir(&d.join("outside")));
    std::os::unix::fs::symlink(&outside, dst.join("sub")).unwrap();
    (dst, outside)
}

fn tree_script() -> Script {
    Script {
        dirs: vec!["/d", "/d/sub"],
        files: vec![("/d/good", b"good\n"), ("/d/sub/x", b"evil")],
        ..Script::default()
    }
}

/// Issue 1, file by file (a server without LPVF): the listing has `sub/x`
/// and `dst/sub` is a symlink out of the destination. As `cp -r` says
/// "cannot overwrite non-directory", the copy is refused and nothing is
/// written outside.
#[test]
fn a_tree_copied_file_by_file_does_not_follow_a_symlink_in_the_destination() {
    let d = scratch();
    let (dst, outside) = trap(d.path());
    let port = fake_server(tree_script());
    let (code, err) = cp(&["-r", &format!("ftp://127.0.0.1:{port}/d/"), &format!("{}/", dst.display())]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("not a directory"), "{err}");
    assert!(everything(&outside).is_empty(), "written outside: {:?}", everything(&outside));
    // The tree's own root under a symlink (`cp -r .../sub dst/`) is refused too.
    let (code, err) = cp(&["-r", &format!("ftp://127.0.0.1:{port}/d/sub"), &format!("{}/", dst.display())]);
    assert_ne!(code, 0, "{err}");
    assert!(everything(&outside).is_empty(), "written outside: {:?}", everything(&outside));
    // Without the trap the same tree is copied.
    std::fs::remove_file(dst.join("sub")).unwrap();
    let (code, err) = cp(&["-r", &format!("ftp://127.0.0.1:{port}/d/"), &format!("{}/", dst.display())]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(everything(&dst), ["good", "sub", "sub/x"]);
}

/// Issue 1 with a virtual file (a lightpath server): the tree's root
/// `dst/sub` is a symlink out of the destination.
#[test]
fn a_tree_copied_as_a_virtual_file_does_not_follow_a_symlinked_root() {
    let (d, root, _local) = root_and_local();
    let (dst, outside) = trap(d.path());
    open_dir(&root.join("sub"));
    std::fs::write(root.join("sub/x"), b"evil").unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let (code, err) = cp(&["-r", &format!("ftp://127.0.0.1:{port}/sub"), &format!("{}/", dst.display())]);
    assert_ne!(code, 0, "{err}");
    assert!(everything(&outside).is_empty(), "written outside: {:?}", everything(&outside));
    std::fs::remove_file(dst.join("sub")).unwrap();
    let (code, err) = cp(&["-r", &format!("ftp://127.0.0.1:{port}/sub"), &format!("{}/", dst.display())]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(everything(&dst), ["sub", "sub/x"]);
}

/// Issue 2: the final rename fails (a directory appeared under the file's
/// name while it was received): the error names the file and no
/// temporary file is left.
#[test]
fn a_file_that_cannot_be_renamed_into_place_leaves_no_temporary_file() {
    let d = scratch();
    let dst = open_dir(&d.path().join("dst"));
    let script = Script { files: vec![("/f", b"hello")], mkdir_during_retr: Some(dst.join("f")), ..Script::default() };
    let port = fake_server(script);
    let (code, err) = cp(&[&format!("ftp://127.0.0.1:{port}/f"), &format!("{}/", dst.display())]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains(&format!("{}: ", dst.join("f").display())), "{err}");
    assert_eq!(everything(&dst), ["f"], "only the directory in the way");
}

/// Issue 3: `--off 100 --len 50` into an existing 1000-byte file, from a
/// server that sends the whole file (or less than asked): the copy fails,
/// and nothing outside bytes 100-150 changes.
#[test]
fn a_partial_copy_writes_only_its_window_and_must_get_all_of_it() {
    let d = scratch();
    let dst = open_dir(&d.path().join("dst")).join("f");
    for (sent, what) in [(&[b'X'; 1000][..], "outside the requested 100-150"), (&[b'Z'; 10][..], "got 10 of the 50")] {
        std::fs::write(&dst, [b'S'; 1000]).unwrap();
        let port = fake_server(Script { files: vec![("/f", &[b'S'; 1000])], eret: sent, ..Script::default() });
        let url = format!("ftp://127.0.0.1:{port}/f");
        let (code, err) = cp(&["--off", "100", "--len", "50", &url, dst.to_str().unwrap()]);
        assert_ne!(code, 0, "{what}: {err}");
        assert!(err.contains(what), "{err}");
        let got = std::fs::read(&dst).unwrap();
        assert_eq!(got.len(), 1000, "{what}: not grown");
        assert!(got[..100].iter().chain(&got[150..]).all(|&b| b == b'S'), "{what}: written outside the window");
    }
    // Sent as asked, the window is written.
    let port = fake_server(Script { files: vec![("/f", &[b'S'; 1000])], eret: &[b'W'; 50], ..Script::default() });
    let (code, err) = cp(&["--off", "100", "--len", "50", &format!("ftp://127.0.0.1:{port}/f"), dst.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(&dst).unwrap()[100..150], [b'W'; 50]);
    // Into a path with no file yet: one that failed leaves nothing under
    // the name (it left a file of zeros and a short tail, as if whole);
    // one that came whole is the window at its offset.
    let new = dst.with_file_name("new");
    for (sent, ok) in [(&[b'Z'; 10][..], false), (&[b'W'; 50][..], true)] {
        let port = fake_server(Script { files: vec![("/f", &[b'S'; 1000])], eret: sent, ..Script::default() });
        let (code, err) =
            cp(&["--off", "100", "--len", "50", &format!("ftp://127.0.0.1:{port}/f"), new.to_str().unwrap()]);
        assert_eq!(code == 0, ok, "{err}");
        assert_eq!(new.exists(), ok, "{err}");
    }
    let got = std::fs::read(&new).unwrap();
    assert_eq!((got.len(), &got[100..]), (150, &[b'W'; 50][..]));
    assert!(got[..100].iter().all(|&b| b == 0));
    assert_eq!(names(new.parent().unwrap()), ["f", "new"], "no temporary file left");
}

/// A partial copy from a lightpath server (MODE E, ERET) lands at its
/// offset in the existing file, and nothing else changes.
#[test]
fn a_partial_copy_from_a_lightpath_server_lands_at_its_offset() {
    let (_d, root, local) = root_and_local();
    write_random(&root.join("f"), 300_000, 7);
    let dst = local.join("f");
    std::fs::write(&dst, vec![b'S'; 1000]).unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let url = format!("ftp://127.0.0.1:{port}/f");
    assert!(lp_cp(&["--off", "100000", "--len", "150000", &url, dst.to_str().unwrap()]));
    let (got, src) = (std::fs::read(&dst).unwrap(), std::fs::read(root.join("f")).unwrap());
    assert_eq!(got.len(), 250_000);
    assert!(got[..1000].iter().all(|&b| b == b'S'), "the old bytes before the hole stay");
    assert!(got[1000..100_000].iter().all(|&b| b == 0), "the hole stays a hole");
    assert_eq!(&got[100_000..], &src[100_000..250_000]);
}

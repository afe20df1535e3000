//! How `lightpath cp` recovers from one bad file: a transfer that fails
//! once begun must not take the files pipelined behind it down (or stall
//! them), and a file that fails `--verify` must not stay under its final
//! name. The servers: a scripted GridFTP-like server (MODE E, one data
//! connection, and like GCT it forgets its PORT or PASV after a failed
//! transfer, answering "500 Command failed" until it gets a new one), and
//! the real GCT server.

mod common;
use common::scripted::{self, DataEnd};
use common::*;
use lightpath_proto::modee::{BlockHeader, HEADER_LEN};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// md5 of `hello\n`.
const HELLO_MD5: &str = "b1946ac92492d2347c6235b4d2611184";

/// What the scripted server serves and how it misbehaves.
#[derive(Default)]
struct Script {
    /// Files (absolute) and their bytes; uploads land here too.
    files: Mutex<HashMap<String, Vec<u8>>>,
    /// Directories (absolute, no trailing `/`).
    dirs: Vec<&'static str>,
    /// Paths whose RETR or STOR fails once begun (150, then 451).
    failing: Vec<&'static str>,
    /// What CKSM answers, whatever the file (`None`: the md5 of `hello\n`).
    cksm: Option<&'static str>,
    /// DELE is refused.
    refuse_dele: bool,
    /// Paths DELE removed.
    deleted: Mutex<Vec<String>>,
    /// The path of the last RNFR.
    rename_from: Mutex<Option<String>>,
}

impl Script {
    fn with_files(files: &[(&str, &[u8])]) -> Script {
        let files = files.iter().map(|(p, d)| (p.to_string(), d.to_vec())).collect();
        Script { files: Mutex::new(files), dirs: vec!["/d"], ..Script::default() }
    }

    fn file(&self, path: &str) -> Option<Vec<u8>> {
        self.files.lock().unwrap().get(path).cloned()
    }

    /// Whether a transfer of `path` fails: it is named in `failing`, or
    /// is the temporary name an upload of such a file goes under
    /// (`dir/.NAME.lp-<hex>.part`, renamed once complete).
    fn fails(&self, path: &str) -> bool {
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        let own = name.strip_prefix('.').and_then(|n| n.strip_suffix(".part")).and_then(|n| n.rsplit_once(".lp-"));
        let shown = own.map_or(path.to_string(), |(n, _)| format!("{dir}/{n}"));
        self.failing.contains(&shown.as_str())
    }
}

/// Start the scripted server; its port.
fn fake_server(script: Arc<Script>) -> u16 {
    scripted::serve(move |conn| {
        let mut data = Data::default();
        scripted::commands(conn, "scripted GridFTP", |out, verb, arg| {
            Some(match verb {
                "RETR" | "STOR" => transfer(out, &mut data, &script, verb, arg),
                "PASV" | "PORT" => {
                    // A new endpoint drops the cached connection.
                    data = Data::default();
                    data.end.set(verb, arg)
                }
                _ => command(&script, verb, arg),
            })
        })
    })
}

/// The data channel: where new connections come from, and the one cached.
#[derive(Default)]
struct Data {
    end: DataEnd,
    cached: Option<TcpStream>,
}

impl Data {
    /// The connection of the next transfer, and whether it is reused.
    fn conn(&mut self) -> Option<(TcpStream, bool)> {
        if let Some(c) = self.cached.take() {
            return Some((c, true));
        }
        self.end.connect().map(|c| (c, false))
    }

    fn ready(&self) -> bool {
        self.cached.is_some() || self.end.is_set()
    }
}

fn command(script: &Script, verb: &str, arg: &str) -> String {
    let path = arg.trim_end_matches('/');
    match (verb, script.file(path)) {
        ("USER", _) => "331 password\r\n".into(),
        ("SIZE", Some(d)) => format!("213 {}\r\n", d.len()),
        ("MLST", Some(d)) => format!("250-\r\n type=file;size={}; {path}\r\n250 End\r\n", d.len()),
        ("MLST", None) if script.dirs.contains(&path) => format!("250-\r\n type=dir; {path}\r\n250 End\r\n"),
        ("SIZE" | "MLST", _) => "550 no such file\r\n".into(),
        ("FEAT", _) => "211-Features:\r\n MLST type*;size*;\r\n SIZE\r\n PARALLEL\r\n211 End\r\n".into(),
        ("CKSM", _) => format!("213 {}\r\n", script.cksm.unwrap_or(HELLO_MD5)),
        ("RNFR", Some(_)) => {
            *script.rename_from.lock().unwrap() = Some(arg.to_string());
            "350 ready for RNTO\r\n".into()
        }
        ("RNTO", _) => match script.rename_from.lock().unwrap().take() {
            Some(from) => {
                let mut files = script.files.lock().unwrap();
                let body = files.remove(&from).unwrap_or_default();
                files.insert(arg.to_string(), body);
                "250 renamed\r\n".into()
            }
            None => "503 RNFR first\r\n".into(),
        },
        ("DELE", _) if script.refuse_dele => "550 DELE: permission denied\r\n".into(),
        ("DELE", _) => {
            let p = arg.to_string();
            script.files.lock().unwrap().remove(&p);
            script.deleted.lock().unwrap().push(p);
            "250 deleted\r\n".into()
        }
        ("TYPE" | "MODE" | "PASS" | "OPTS" | "ALLO" | "CWD", _) => "200 OK\r\n".into(),
        _ => "502 not implemented\r\n".into(),
    }
}

/// RETR or STOR in MODE E on one connection. A failing file forgets the
/// data channel, as GCT does; without one, the transfer is refused.
fn transfer(out: &mut TcpStream, data: &mut Data, script: &Script, verb: &str, path: &str) -> String {
    let body = script.file(path);
    if verb == "RETR" && body.is_none() {
        return "550 no such file\r\n".into();
    }
    if !data.ready() {
        return "500 Command failed\r\n".into();
    }
    let Some((mut dc, reused)) = data.conn() else { return "425 no data connection\r\n".into() };
    let _ = out.write_all(if reused { b"125 reusing\r\n" } else { b"150 opening\r\n" });
    let got = match verb {
        "RETR" => send_e(&mut dc, &body.unwrap_or_default(), script.fails(path)),
        _ => recv_e(&mut dc),
    };
    if script.fails(path) || got.is_none() {
        *data = Data::default();
        return "451 Command failed. : callback failed.\r\n".into();
    }
    if let Some(bytes) = got.filter(|_| verb == "STOR") {
        script.files.lock().unwrap().insert(path.to_string(), bytes);
    }
    data.cached = Some(dc);
    "226 Transfer Complete.\r\n".into()
}

/// Send `body` as one block and EOF|EOD; a failing file stops halfway.
fn send_e(dc: &mut TcpStream, body: &[u8], fail: bool) -> Option<Vec<u8>> {
    let _ = dc.write_all(&BlockHeader::data(0, body.len() as u64).encode());
    if fail {
        let _ = dc.write_all(&body[..body.len() / 2]);
        return None;
    }
    let _ = dc.write_all(body);
    dc.write_all(&BlockHeader::eof_eod(1).encode()).ok().map(|_| Vec::new())
}

/// Blocks up to EOD.
fn recv_e(dc: &mut TcpStream) -> Option<Vec<u8>> {
    let mut file = Vec::new();
    loop {
        let mut h = [0u8; HEADER_LEN];
        dc.read_exact(&mut h).ok()?;
        let h = BlockHeader::parse(&h).ok()?;
        let mut payload = vec![0; h.payload_len() as usize];
        dc.read_exact(&mut payload).ok()?;
        if !payload.is_empty() {
            let end = h.offset as usize + payload.len();
            file.resize(file.len().max(end), 0);
            file[h.offset as usize..end].copy_from_slice(&payload);
        }
        if h.is_eod() {
            return Some(file);
        }
    }
}

/// `lightpath cp -q --cc 1 -p 1 ARGS`, timed: exit code, stderr, seconds.
fn timed_cp(args: &[&str]) -> (i32, String, Duration) {
    let t = Instant::now();
    let (code, err) = cp(&[&["--cc", "1", "-p", "1"][..], args].concat());
    (code, err, t.elapsed())
}

fn five_files() -> Vec<(String, Vec<u8>)> {
    (1..=5).map(|i| (format!("/d/f{i}"), format!("file {i}\n").repeat(1000 * i).into_bytes())).collect()
}

/// Task: one file of five fails once begun (150, then 451) on a server
/// that then forgets its PORT: the other four arrive, in seconds, and the
/// failure is reported with the server's reply.
#[test]
fn a_download_failing_once_begun_does_not_sink_the_files_pipelined_behind_it() {
    let files = five_files();
    let list: Vec<(&str, &[u8])> = files.iter().map(|(p, d)| (p.as_str(), d.as_slice())).collect();
    let script = Arc::new(Script { failing: vec!["/d/f2"], ..Script::with_files(&list) });
    let port = fake_server(script);
    let d = scratch();
    let dst = open_dir(&d.path().join("dst"));
    let urls: Vec<String> = files.iter().map(|(p, _)| format!("ftp://127.0.0.1:{port}{p}")).collect();
    let mut args: Vec<&str> = urls.iter().map(String::as_str).collect();
    let dst_arg = format!("{}/", dst.display());
    args.push(&dst_arg);
    let (code, err, took) = timed_cp(&args);
    assert_ne!(code, 0, "{err}");
    assert!(took < Duration::from_secs(30), "took {took:?}: {err}");
    for (p, data) in files.iter().filter(|(p, _)| p != "/d/f2") {
        let name = p.rsplit('/').next().unwrap();
        assert_eq!(std::fs::read(dst.join(name)).ok().as_ref(), Some(data), "{name}: {err}");
    }
    assert!(!dst.join("f2").exists());
    assert!(err.contains("RETR /d/f2 refused: Command failed. : callback failed"), "with the server's reply: {err}");
}

/// The same for uploads: the server fails the second STOR once its data
/// came, then forgets its PASV.
#[test]
fn an_upload_failing_once_begun_does_not_sink_the_files_pipelined_behind_it() {
    let script = Arc::new(Script { failing: vec!["/d/f2"], ..Script::with_files(&[]) });
    let port = fake_server(script.clone());
    let d = scratch();
    let files = five_files();
    let mut args = Vec::new();
    for (p, data) in &files {
        let local = d.path().join(p.rsplit('/').next().unwrap());
        std::fs::write(&local, data).unwrap();
        args.push(local.display().to_string());
    }
    args.push(format!("ftp://127.0.0.1:{port}/d/"));
    let (code, err, took) = timed_cp(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_ne!(code, 0, "{err}");
    assert!(took < Duration::from_secs(30), "took {took:?}: {err}");
    for (p, data) in files.iter().filter(|(p, _)| p != "/d/f2") {
        assert_eq!(script.file(p).as_ref(), Some(data), "{p}: {err}");
    }
    // Stored under a temporary name (`.f2.lp-<hex>.part`), renamed once whole.
    assert!(err.contains("-> ftp://") && err.contains("/d/f2: "), "the file named: {err}");
    assert!(err.contains("/d/.f2.lp-") && err.contains("refused: Command failed. : callback failed"), "{err}");
    assert!(script.file("/d/f2").is_none(), "{err}");
}

/// Against the real GCT server: an upload into `/dev/full` (a symlink in
/// the destination) fails once begun, and GCT then refuses every STOR
/// until a new PASV. The files behind it must still arrive. That happens
/// to partial copies (`--len`), which write into the files themselves;
/// whole files go under a temporary name, renamed once complete, which
/// replaces the symlink rather than writing through it.
#[test]
fn uploads_behind_a_failed_one_reach_a_gct_server() {
    let home = scratch();
    let (src, dst) = (open_dir(&home.path().join("src")), open_dir(&home.path().join("dst")));
    std::os::unix::fs::symlink("/dev/full", dst.join("f2")).unwrap();
    let mut files = Vec::new();
    for i in 1..=5 {
        write_random(&src.join(format!("f{i}")), 100_000 * i, i as u64);
        files.push(src.join(format!("f{i}")).display().to_string());
    }
    let (_g, port) = gct_server(home.path());
    let to = format!("ftp://127.0.0.1:{port}{}/", dst.display());
    let args = |extra: &[&str]| -> Vec<String> {
        extra.iter().map(|a| a.to_string()).chain(files.iter().cloned()).chain([to.clone()]).collect()
    };
    let partial = args(&["--len", "100000"]);
    let (code, err, took) = timed_cp(&partial.iter().map(String::as_str).collect::<Vec<_>>());
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("f2"), "{err}");
    assert!(took < Duration::from_secs(30), "took {took:?}: {err}");
    for i in [1, 3, 4, 5] {
        let want = std::fs::read(src.join(format!("f{i}"))).unwrap();
        assert_eq!(std::fs::read(dst.join(format!("f{i}"))).unwrap(), want[..100_000], "f{i}: {err}");
    }
    let whole = args(&[]);
    let (code, err, _) = timed_cp(&whole.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{err}");
    for i in 1..=5 {
        assert_same_file(&src.join(format!("f{i}")), &dst.join(format!("f{i}")));
    }
    assert!(std::fs::symlink_metadata(dst.join("f2")).unwrap().is_file(), "the symlink replaced");
}

/// Task: `--verify md5` of a download whose server's CKSM disagrees: the
/// copy fails, says so, and the file is not left under its final name.
#[test]
fn a_download_failing_verify_is_removed() {
    let script = Arc::new(Script { cksm: Some("0123456789abcdef0123456789abcdef"), ..Script::with_files(&[]) });
    script.files.lock().unwrap().insert("/d/f".into(), b"hello\n".to_vec());
    let port = fake_server(script);
    let d = scratch();
    let dst = open_dir(&d.path().join("dst"));
    let (code, err, _) = timed_cp(&["--verify", "md5", &format!("ftp://127.0.0.1:{port}/d/f"), dst.to_str().unwrap()]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("checksum mismatch") && err.contains("removed"), "{err}");
    // Which digest is which: the server's file is the source here.
    let md5 = "b1946ac92492d2347c6235b4d2611184"; // of "hello\n", the copy's
    assert!(err.contains(&format!("source's is 0123456789abcdef0123456789abcdef, the copy's {md5}")), "{err}");
    assert!(!dst.join("f").exists(), "the bad copy stays: {err}");
    // With the right digest the copy stays.
    let port = fake_server(Arc::new(Script::with_files(&[("/d/f", b"hello\n")])));
    let (code, err, _) = timed_cp(&["--verify", "md5", &format!("ftp://127.0.0.1:{port}/d/f"), dst.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(dst.join("f")).unwrap(), b"hello\n");
}

/// `--verify md5` of an upload whose server's CKSM disagrees: the remote
/// copy is deleted, and a refused DELE is reported.
#[test]
fn an_upload_failing_verify_is_deleted_on_the_server() {
    let d = scratch();
    let src = d.path().join("f");
    std::fs::write(&src, b"hello\n").unwrap();
    for refuse_dele in [false, true] {
        let wrong = Some("0123456789abcdef0123456789abcdef");
        let script = Arc::new(Script { cksm: wrong, refuse_dele, ..Script::with_files(&[]) });
        let port = fake_server(script.clone());
        let (code, err, _) =
            timed_cp(&["--verify", "md5", src.to_str().unwrap(), &format!("ftp://127.0.0.1:{port}/d/f")]);
        assert_ne!(code, 0, "{err}");
        assert!(err.contains("checksum mismatch"), "{err}");
        // The copy went under a temporary name, checked there: a bad one
        // never stood under the file's own name.
        assert!(script.file("/d/f").is_none(), "{err}");
        let kept: Vec<String> = script.files.lock().unwrap().keys().cloned().collect();
        if refuse_dele {
            assert!(err.contains("DELE") && err.contains("permission denied"), "{err}");
            assert!(kept.len() == 1 && kept[0].starts_with("/d/.f.lp-"), "{kept:?}");
        } else {
            assert!(err.contains("removed"), "{err}");
            let deleted = script.deleted.lock().unwrap().clone();
            assert!(deleted.len() == 1 && deleted[0].starts_with("/d/.f.lp-"), "removed once: {deleted:?}");
            assert!(kept.is_empty(), "{kept:?}");
        }
    }
}

/// `lightpath sum` prints a digest only when it has its algorithm's
/// length: a server's `213 a` was printed as the file's MD5, exit 0 (a
/// defect hunt's find).
#[test]
fn sum_refuses_a_digest_of_the_wrong_length() {
    for (cksm, ok) in [("a", false), (&HELLO_MD5[..31], false), (HELLO_MD5, true)] {
        let script = Arc::new(Script { cksm: Some(cksm), ..Script::with_files(&[("/d/f", b"hello")]) });
        let port = fake_server(script);
        let out = std::process::Command::new(LP)
            .args(["sum", "--alg", "MD5", &format!("ftp://127.0.0.1:{port}/d/f")])
            .output()
            .unwrap();
        let (stdout, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.success(), ok, "{cksm}: {stdout} {err}");
        assert_eq!(stdout.starts_with(cksm), ok, "{cksm}: {stdout}");
        if !ok {
            assert!(err.contains("not a MD5 digest"), "{err}");
        }
    }
}

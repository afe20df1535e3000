//! What the client puts on the control channel, and what it makes of the
//! answers: names with 0xFF bytes (Telnet's IAC, doubled as RFC 854 and
//! 959 ask) up, down and to CKSM against `lightpath serve`, and refused
//! before they are sent to the real Globus server, which cannot take them; a data
//! connection reset under a transfer, reported beside the server's reply
//! (or its silence); and MKD refusals from a server without MLST, told
//! apart from "exists".

mod common;
use common::scripted::{self, DataEnd};
use common::*;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// md5 of `hello\n`.
const HELLO_MD5: &str = "b1946ac92492d2347c6235b4d2611184";

/// Names whose 0xFF a server that interprets Telnet would misread unless
/// it is doubled: IAC WILL 'z' is a Telnet negotiation (3 bytes dropped),
/// and a name may end in 0xFF.
const IAC_NAMES: [&[u8]; 2] = [b"a\xff\xfbz", b"x\xff"];

/// `name` percent-encoded for a URL path.
fn pct(name: &[u8]) -> String {
    name.iter()
        .map(|&b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

/// The names in `dir`, as bytes, sorted.
fn names(dir: &Path) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().as_bytes().to_vec()).collect();
    v.sort();
    v
}

/// Task: a single file whose name holds 0xFF bytes goes up and comes down
/// under exactly that name (the server's Telnet filter reads `IAC IAC` as
/// one 0xFF; a lone IAC followed by 0xFB would lose three bytes).
#[test]
fn names_with_iac_bytes_travel_up_and_down_intact() {
    let (_d, root, local) = root_and_local();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let src = local.join("src");
    std::fs::write(&src, b"hello\n").unwrap();
    for name in IAC_NAMES {
        let url = format!("ftp://127.0.0.1:{port}/{}", pct(name));
        let (code, err) = cp(&[src.to_str().unwrap(), &url]);
        assert_eq!(code, 0, "upload of {name:?}: {err}");
        assert_eq!(std::fs::read(root.join(OsStr::from_bytes(name))).ok().as_deref(), Some(&b"hello\n"[..]));
    }
    let mut want: Vec<Vec<u8>> = IAC_NAMES.iter().map(|n| n.to_vec()).collect();
    want.sort();
    assert_eq!(names(&root), want, "no other name on the server");
    let down = open_dir(&local.join("down"));
    for name in IAC_NAMES {
        let url = format!("ftp://127.0.0.1:{port}/{}", pct(name));
        let (code, err) = cp(&[&url, &format!("{}/", down.display())]);
        assert_eq!(code, 0, "download of {name:?}: {err}");
    }
    assert_eq!(names(&down), want);
    for name in IAC_NAMES {
        assert_eq!(std::fs::read(down.join(OsStr::from_bytes(name))).unwrap(), b"hello\n");
    }
}

/// Task: against the real globus-gridftp-server, which drops a 0xFF and
/// the byte after it (or refuses the line), a name with 0xFF is refused
/// by the client with a clear error, before a command could act on
/// another name: nothing is made on the server, nothing comes down.
#[test]
fn names_with_iac_bytes_are_refused_to_the_globus_server() {
    let (_d, home, local) = root_and_local();
    let (_g, port) = gct_server(&home);
    let src = local.join("src");
    std::fs::write(&src, b"hello\n").unwrap();
    let at = |name: &[u8]| format!("ftp://127.0.0.1:{port}{}/{}", home.display(), pct(name));
    for name in IAC_NAMES {
        let (code, err) = cp(&[src.to_str().unwrap(), &at(name)]);
        assert_ne!(code, 0, "upload of {name:?}: {err}");
        assert!(err.contains("0xFF") && err.contains("not lightpath"), "{err}");
    }
    assert!(names(&home).is_empty(), "nothing made on the server: {:?}", names(&home));
    std::fs::write(home.join(OsStr::from_bytes(b"x\xff")), b"hello\n").unwrap();
    let down = open_dir(&local.join("down"));
    let (code, err) = cp(&[&at(b"x\xff"), &format!("{}/", down.display())]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("0xFF"), "{err}");
    assert!(names(&down).is_empty());
    // GCT drops 0xFF and the byte after it: RETR of `r\xff\xfbz` would
    // fetch `r`. The name is not sent on the first visit either, when the
    // client does not know yet that the server is not lightpath (the RETR
    // it sends with its login to save a round trip waits for FEAT then).
    std::fs::write(home.join("r"), b"the wrong file\n").unwrap();
    std::fs::write(home.join(OsStr::from_bytes(b"r\xff\xfbz")), b"hello\n").unwrap();
    let (code, err) = cp(&[&at(b"r\xff\xfbz"), &format!("{}/", down.display())]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("0xFF"), "{err}");
    assert!(names(&down).is_empty(), "{:?}", names(&down));
    std::fs::remove_file(home.join("r")).unwrap();
    std::fs::remove_file(home.join(OsStr::from_bytes(b"r\xff\xfbz"))).unwrap();
    let (code, err) = cp(&[src.to_str().unwrap(), &at(b"plain")]);
    assert_eq!(code, 0, "a plain name still goes: {err}");
    // In a tree copied file by file (pipelined), such a name fails alone.
    let tree = open_dir(&local.join("tree"));
    for name in [&b"a\xff\xfbz"[..], b"ok1", b"ok2"] {
        std::fs::write(tree.join(OsStr::from_bytes(name)), b"hello\n").unwrap();
    }
    let (code, err) = cp(&["-r", tree.to_str().unwrap(), &format!("ftp://127.0.0.1:{port}{}/", home.display())]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("0xFF"), "{err}");
    assert_eq!(names(&home.join("tree")), [b"ok1".to_vec(), b"ok2".to_vec()], "the other files go: {err}");
    // Third party, from lightpath to GCT: refused before either side is set up.
    let lroot = open_dir(&local.join("lroot"));
    std::fs::write(lroot.join(OsStr::from_bytes(b"a\xff\xfbz")), b"hello\n").unwrap();
    let (_l, lport) = lp_server(&lroot, &["--anonymous-write"]);
    let before = names(&home);
    let from = format!("ftp://127.0.0.1:{lport}/{}", pct(b"a\xff\xfbz"));
    let (code, err) = cp(&[&from, &format!("ftp://127.0.0.1:{port}{}/", home.display())]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("0xFF"), "{err}");
    assert_eq!(names(&home), before, "nothing made on the server");
}

/// A download asks any server for blocks of up to 1 MiB, with its login
/// (before FEAT says what the server is). A lightpath server grows its
/// blocks (`protocol.rs` checks that); the Globus server takes the option
/// and goes on sending 256 KiB blocks, as read off the wire here. In a
/// third-party copy the source is asked only for a lightpath destination.
#[test]
fn a_download_asks_for_bigger_blocks_and_the_globus_server_ignores_it() {
    let (_d, home, local) = root_and_local();
    write_random(&home.join("one"), 3 << 20, 7);
    let (_g, gport) = gct_server(&home);
    let (_l, lport) = lp_server(&home, &["--anonymous-write"]);
    let urls = [
        ("gct", format!("ftp://127.0.0.1:{gport}{}/one", home.display())),
        ("lp", format!("ftp://127.0.0.1:{lport}/one")),
    ];
    for (name, url) in urls {
        let dest = local.join(name);
        let out = Command::new(LP)
            .args(["-vv", "cp", "-q", "--no-connect-ahead", &url, dest.to_str().unwrap()])
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {log}");
        let asked = log.lines().any(|l| l.contains("> OPTS RETR") && l.contains("BlockSize=1048576;"));
        assert!(asked, "{name}: {log}");
        assert_same_file(&home.join("one"), &dest);
    }
    // Third party: the source is asked only when the destination is lightpath.
    let from = format!("ftp://127.0.0.1:{lport}/one");
    let dests = [(format!("ftp://127.0.0.1:{gport}{}/tp-gct", home.display()), false), (format!("{from}-tp"), true)];
    for (to, asks) in dests {
        let out = Command::new(LP).args(["-vv", "cp", "-q", &from, &to]).output().unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{to}: {log}");
        let asked = log.lines().any(|l| l.contains("> OPTS RETR") && l.contains("BlockSize="));
        assert_eq!(asked, asks, "{to}: {log}");
    }
    assert_same_file(&home.join("one"), &home.join("tp-gct"));
    assert_same_file(&home.join("one"), &home.join("one-tp"));
    let mut c = Raw::login(gport);
    for cmd in ["TYPE I", "MODE E", "OPTS RETR Parallelism=1,1,1;BlockSize=1048576;"] {
        assert_eq!(c.cmd(cmd).0, 200, "{cmd}");
    }
    let l = c.port();
    c.send(format!("RETR {}/one", home.display()).as_bytes());
    assert_eq!(c.reply().0, 150);
    let blocks = read_mode_e(&mut [l.accept().unwrap().0]);
    assert_eq!(c.final_reply().0, 226);
    let lens: Vec<usize> = blocks.iter().map(|b| b.1.len()).collect();
    assert_eq!(lens.iter().sum::<usize>(), 3 << 20);
    assert!(lens.iter().all(|&n| n == 256 << 10), "{lens:?}");
}

/// Task: `lightpath sum` of a name that is not UTF-8 asks for that name,
/// not for its lossy UTF-8 rendering.
#[test]
fn the_checksum_of_a_non_utf8_name_is_that_files() {
    let (_d, root, _local) = root_and_local();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    for name in [&b"caf\xe9"[..], b"a\xff\xfbz"] {
        std::fs::write(root.join(OsStr::from_bytes(name)), b"hello\n").unwrap();
        let url = format!("ftp://127.0.0.1:{port}/{}", pct(name));
        let out = Command::new(LP).args(["sum", &url]).output().unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "sum of {name:?}: {stderr}");
        assert!(stdout.starts_with(HELLO_MD5), "{stdout}");
    }
}

/// How the scripted MODE S server ends a RETR of `/f` after its 150.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reset {
    /// Resets the data connection halfway, then never answers.
    ThenSilence,
    /// Answers 451 first, and resets the data connection 500 ms later.
    AfterReply,
}

/// A plain FTP server (MODE S) whose RETR resets its data connection.
fn resetting_server(how: Reset) -> u16 {
    scripted::serve(move |conn| {
        let mut data = DataEnd::default();
        scripted::commands(conn, "resetting", |out, verb, arg| {
            Some(match verb {
                "FEAT" => "211-Features:\r\n SIZE\r\n211 End\r\n".into(),
                "PASV" | "EPSV" | "PORT" => data.set(verb, arg),
                "RETR" => retr_reset(out, &mut data, how)?,
                "USER" => "331 password\r\n".into(),
                "MODE" if !arg.eq_ignore_ascii_case("S") => "504 only MODE S\r\n".into(),
                "SIZE" => "213 1000000\r\n".into(),
                _ => "200 OK\r\n".into(),
            })
        })
    })
}

fn retr_reset(out: &mut TcpStream, data: &mut DataEnd, how: Reset) -> Option<String> {
    let _ = out.write_all(b"150 here it comes\r\n");
    let mut dc = data.open()?;
    let _ = dc.write_all(&[7u8; 4000]);
    std::thread::sleep(Duration::from_millis(200));
    socket2::SockRef::from(&dc).set_linger(Some(Duration::ZERO)).unwrap();
    if how == Reset::AfterReply {
        let _ = out.write_all(b"451 Command failed. : callback failed.\r\n");
        std::thread::sleep(Duration::from_millis(500));
        drop(dc);
        return Some(String::new());
    }
    drop(dc);
    std::thread::sleep(Duration::from_secs(60));
    None
}

/// `lightpath cp -q` of `/f` from `port` into `dest` with `env`: exit code, stderr.
fn get_f(port: u16, dest: &Path, env: &[(&str, &str)]) -> (i32, String) {
    own_peer_book();
    let url = format!("ftp://127.0.0.1:{port}/f");
    let out = Command::new(LP).args(["cp", "-q", &url, dest.to_str().unwrap()]).envs(env.iter().copied()).output();
    let out = out.unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Task: a data connection reset under a download is reported, with the
/// server's silence after it (in bounded time, not the whole reply
/// timeout), and with the server's refusal when that came first.
#[test]
fn a_data_connection_reset_is_reported_beside_the_reply() {
    let d = scratch();
    let dest = d.path().join("f");
    let port = resetting_server(Reset::ThenSilence);
    let t = std::time::Instant::now();
    let (code, err) = get_f(port, &dest, &[("LIGHTPATH_REPLY_TIMEOUT", "60"), ("LIGHTPATH_RETRIES", "0")]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("no reply 10 s after our end of the data channel failed"), "{err}");
    assert!(err.contains("Connection reset"), "the data side's own error: {err}");
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    // A 451 blames the server's own side (its file): not tried again,
    // though our end was reset too (GCT's 500 for a reset is, in resume.rs).
    let port = resetting_server(Reset::AfterReply);
    let (code, err) = get_f(port, &dest, &[("LIGHTPATH_RETRIES", "1")]);
    assert_ne!(code, 0, "{err}");
    assert!(!err.contains("trying again"), "{err}");
    assert!(err.contains("Command failed. : callback failed."), "the server's reply: {err}");
    assert!(err.contains("Connection reset"), "the data side's own error: {err}");
    assert!(!dest.exists());
}

/// What the scripted server without MLST answers MKD, and what it was asked.
struct NoMlst {
    mkd_reply: &'static str,
    mkd: Mutex<Vec<String>>,
    stored: Mutex<Vec<String>>,
}

/// A plain FTP server (MODE S, no MLST) taking uploads.
fn no_mlst_server(script: Arc<NoMlst>) -> u16 {
    scripted::serve(move |conn| {
        let (mut data, mut from) = (DataEnd::default(), None::<String>);
        scripted::commands(conn, "no MLST", |out, verb, arg| {
            Some(match verb {
                "FEAT" => "211-Features:\r\n SIZE\r\n211 End\r\n".into(),
                "PASV" | "EPSV" | "PORT" => data.set(verb, arg),
                "MKD" => {
                    script.mkd.lock().unwrap().push(arg.to_string());
                    script.mkd_reply.into()
                }
                "STOR" => {
                    let _ = out.write_all(b"150 go ahead\r\n");
                    let _ = data.open()?.read_to_end(&mut Vec::new());
                    script.stored.lock().unwrap().push(arg.to_string());
                    "226 Transfer complete.\r\n".into()
                }
                // Files go under a temporary name, renamed once stored.
                "RNFR" => {
                    from = Some(arg.to_string());
                    "350 ready for RNTO\r\n".into()
                }
                "RNTO" => {
                    let mut stored = script.stored.lock().unwrap();
                    match stored.iter_mut().find(|p| Some(p.as_str()) == from.as_deref()) {
                        Some(p) => *p = arg.to_string(),
                        None => return Some("550 no such file\r\n".into()),
                    }
                    "250 renamed\r\n".into()
                }
                "USER" => "331 password\r\n".into(),
                "MODE" if !arg.eq_ignore_ascii_case("S") => "504 only MODE S\r\n".into(),
                "SIZE" | "MLST" => "550 no such file\r\n".into(),
                _ => "200 OK\r\n".into(),
            })
        })
    })
}

/// GCT's answer to MKD of a directory that exists (checked against
/// globus-gridftp-server 13.24).
const GCT_EXISTS: &str = "553-GlobusError: v=1 c=PATH_EXISTS\r\n553-GridFTP-Errno: 17\r\n\
553-GridFTP-Reason: System error in mkdir\r\n553-GridFTP-Error-String: File exists\r\n553 End.\r\n";

/// Task: against a server without MLST, an MKD refused for want of
/// permission fails the copy naming the first directory refused (no STOR
/// follows); an MKD answered "exists" lets it go on.
#[test]
fn an_mkd_refusal_without_mlst_fails_the_copy_but_exists_does_not() {
    let d = scratch();
    let tree = d.path().join("t");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    std::fs::write(tree.join("f"), b"hello\n").unwrap();
    std::fs::write(tree.join("sub/g"), b"hello\n").unwrap();
    let denied = "550 /dst/t: Permission denied\r\n";
    for (reply, ok) in [(denied, false), (GCT_EXISTS, true), ("521 \"/dst/t\" already present\r\n", true)] {
        let script = Arc::new(NoMlst { mkd_reply: reply, mkd: Mutex::default(), stored: Mutex::default() });
        let port = no_mlst_server(script.clone());
        let (code, err) = cp(&["-r", tree.to_str().unwrap(), &format!("ftp://127.0.0.1:{port}/dst/")]);
        let mut stored = script.stored.lock().unwrap().clone();
        stored.sort();
        if ok {
            assert_eq!(code, 0, "{reply}: {err}");
            assert_eq!(stored, ["/dst/t/f", "/dst/t/sub/g"], "{err}");
        } else {
            assert_ne!(code, 0, "{err}");
            assert!(err.contains("MKD /dst/t refused") && err.contains("Permission denied"), "{err}");
            // The MKDs go pipelined (the one below too, and the parent's
            // first, whose refusal is no error); the first refusal of the
            // tree's is the error.
            assert_eq!(*script.mkd.lock().unwrap(), ["/dst", "/dst/t", "/dst/t/sub"], "{err}");
            assert!(stored.is_empty(), "{stored:?}: {err}");
        }
    }
}

//! Protocol rules a server must keep against a client that tests them:
//! RNFR of a missing name, DELE/RMD of symlinks, EPSV ALL, the Telnet
//! abort sequence, ALLO reservations and honest MLSD `Perm` facts.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// A scratch directory with an empty root (mode 0777) in it.
fn with_root() -> (tempfile::TempDir, std::path::PathBuf) {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    (d, root)
}

#[test]
fn rnfr_of_a_missing_name_is_refused_at_once() {
    let (_d, root) = with_root();
    std::fs::write(root.join("f"), b"x").unwrap();
    symlink("nowhere", root.join("dangling")).unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let mut c = Raw::login(port);
    let (code, text) = c.cmd("RNFR missing");
    assert_eq!(code, 550, "{text}");
    assert_eq!(c.cmd("RNTO x").0, 503, "nothing to rename");
    assert_eq!(c.cmd("RNFR /").0, 550, "the root cannot be renamed");
    assert_eq!(c.cmd("RNFR f").0, 350);
    assert_eq!(c.cmd("RNTO g").0, 250);
    assert_eq!(std::fs::read(root.join("g")).unwrap(), b"x");
    assert_eq!(c.cmd("RNFR dangling").0, 350, "a symlink is a name of its own, dangling or not");
    assert_eq!(c.cmd("RNTO link").0, 250);
    assert_eq!(std::fs::read_link(root.join("link")).unwrap(), Path::new("nowhere"));
}

#[test]
fn dele_removes_a_symlink_to_a_directory_never_its_target() {
    let (d, root) = with_root();
    let out = open_dir(&d.path().join("out"));
    std::fs::write(out.join("keep"), b"outside").unwrap();
    open_dir(&root.join("sub"));
    std::fs::write(root.join("sub/keep"), b"inside").unwrap();
    for (target, name) in [("sub", "in-link"), (out.to_str().unwrap(), "out-link"), ("../out", "rel-link")] {
        symlink(target, root.join(name)).unwrap();
    }
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let mut c = Raw::login(port);
    for name in ["in-link", "out-link", "rel-link"] {
        let (code, text) = c.cmd(&format!("RMD {name}"));
        assert!(code == 550 && text.contains("Not a directory"), "RMD {name}: {text}");
        let (code, text) = c.cmd(&format!("DELE {name}"));
        assert_eq!(code, 250, "DELE {name}: {text}");
        assert!(std::fs::symlink_metadata(root.join(name)).is_err(), "{name} removed");
    }
    symlink(&out, root.join("up")).unwrap();
    assert_eq!(c.cmd("DELE up/keep").0, 550, "through a symlink out of the root");
    let (code, text) = c.cmd("DELE sub");
    assert!(code == 550 && text.contains("RMD"), "{text}");
    assert_eq!(std::fs::read(root.join("sub/keep")).unwrap(), b"inside");
    assert_eq!(std::fs::read(out.join("keep")).unwrap(), b"outside");
}

#[test]
fn after_epsv_all_only_epsv_sets_up_data_connections() {
    let (_d, root) = with_root();
    std::fs::write(root.join("f"), b"listed").unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let mut c = Raw::login(port);
    assert_eq!(c.cmd("EPSV ALL").0, 229);
    for line in ["PASV", "PORT 127,0,0,1,19,137", "EPRT |1|127.0.0.1|5001|", "SPAS"] {
        let (code, text) = c.cmd(line);
        assert_eq!(code, 503, "{line}: {text}");
    }
    let (code, text) = c.cmd("EPSV");
    assert_eq!(code, 229, "{text}");
    let at = &text[text.find("(|||").unwrap() + 4..];
    let data_port: u16 = at[..at.find('|').unwrap()].parse().unwrap();
    let mut data = TcpStream::connect(("127.0.0.1", data_port)).unwrap();
    data.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.send(b"NLST");
    let mut names = String::new();
    data.read_to_string(&mut names).unwrap();
    assert_eq!(c.final_reply().0, 226);
    assert_eq!(names, "f\r\n");
}

/// RFC 959 4.1.3: a client aborts with Telnet IP and Synch (`IAC IP IAC
/// DM`) before ABOR, the DM (or the IAC before it) sent as TCP urgent data.
#[test]
fn the_telnet_abort_sequence_stops_a_transfer_waiting_for_its_connection() {
    let (_d, root) = with_root();
    std::fs::write(root.join("f"), b"data").unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    type Send = fn(&TcpStream);
    let inline: Send = |w| (&*w).write_all(b"\xff\xf4\xff\xf2ABOR\r\n").unwrap();
    let dm_urgent: Send = |w| {
        (&*w).write_all(b"\xff\xf4\xff").unwrap();
        socket2::SockRef::from(w).send_out_of_band(b"\xf2").unwrap();
        (&*w).write_all(b"ABOR\r\n").unwrap();
    };
    let iac_urgent: Send = |w| {
        socket2::SockRef::from(w).send_out_of_band(b"\xff\xf4\xff").unwrap();
        (&*w).write_all(b"\xf2ABOR\r\n").unwrap();
    };
    for (how, abort) in [("inline", inline), ("DM urgent", dm_urgent), ("IAC urgent", iac_urgent)] {
        let mut c = Raw::login(port);
        c.pasv();
        c.send(b"RETR f");
        assert_eq!(c.reply().0, 150, "{how}");
        let t = Instant::now();
        abort(&c.w);
        let (code, text) = c.final_reply();
        assert!(code == 426 || code == 451, "{how}: {text}");
        assert!(t.elapsed() < Duration::from_secs(5), "{how}: ABOR waited {:?}", t.elapsed());
        assert_eq!(c.final_reply().0, 226, "{how}: ABOR's own reply");
        assert_eq!(c.cmd("NOOP").0, 200, "{how}");
    }
}

/// Bytes available on the file system holding `p`, as `statvfs` says.
fn available(p: &Path) -> u64 {
    let out = std::process::Command::new("stat").args(["-f", "-c", "%a %S"]).arg(p).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let v: Vec<u64> = text.split_whitespace().map(|x| x.parse().unwrap()).collect();
    v[0] * v[1]
}

/// ALLO reservations may hold at most half of the free space; the upload
/// still starts, and an ALLO beyond all the free space is refused first.
#[test]
fn allo_does_not_let_a_client_reserve_most_of_the_disk() {
    let (_d, root) = with_root();
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let mut c = Raw::login(port);
    assert_eq!(c.cmd("MODE E").0, 200);
    let at = c.pasv();
    let free = available(&root);
    assert_eq!(c.cmd(&format!("ALLO {}", free.saturating_mul(3))).0, 200);
    let (code, text) = c.cmd("STOR huge");
    assert_eq!(code, 552, "refused before the transfer: {text}");
    let n = free / 10 * 6;
    assert_eq!(c.cmd(&format!("ALLO {n}")).0, 200);
    c.send(b"STOR big");
    let _data = TcpStream::connect(at).unwrap();
    let (code, text) = c.reply();
    assert!(code == 150 || code == 125, "{text}");
    let taken = free.saturating_sub(available(&root));
    assert!(taken < n / 4, "ALLO {n} took {taken} of {free} bytes free");
}

/// The `Perm` fact of an MLSD or MLST entry as the session sees it.
fn perms(c: &mut Raw, dir: &str) -> Vec<(String, String)> {
    let mut data = TcpStream::connect(c.pasv()).unwrap();
    data.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.send(format!("MLSD {dir}").as_bytes());
    let mut text = String::new();
    data.read_to_string(&mut text).unwrap();
    assert_eq!(c.final_reply().0, 226);
    let perm = |facts: &str| facts.split(';').find_map(|f| f.strip_prefix("Perm=")).unwrap_or("").to_string();
    text.lines().map(|l| l.split_once(' ').unwrap()).map(|(f, name)| (name.to_string(), perm(f))).collect()
}

fn chown_gftp(p: &Path) {
    assert!(std::process::Command::new("chown").arg("gftp:gftp").arg(p).status().unwrap().success());
}

/// Perm facts say what the server's user may really do (RFC 3659 7.5.5),
/// here a server running as `gftp` over files that root owns.
#[test]
fn mlsd_perm_facts_are_what_the_server_user_may_do() {
    let (_d, root) = with_root();
    for (name, mode) in [("mine", 0o600), ("ro", 0o444), ("secret", 0o600)] {
        std::fs::write(root.join(name), b"x").unwrap();
        std::fs::set_permissions(root.join(name), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    chown_gftp(&root.join("mine"));
    std::fs::create_dir(root.join("locked")).unwrap();
    std::fs::write(root.join("locked/w"), b"x").unwrap();
    std::fs::set_permissions(root.join("locked/w"), std::fs::Permissions::from_mode(0o666)).unwrap();
    open_dir(&root.join("open"));
    let (_s, port) = lp_server(&root, &["--anonymous-write", "--run-as", "gftp"]);
    let mut c = Raw::login(port);
    let want =
        [(".", "celmp"), ("locked", "defl"), ("mine", "adfrw"), ("open", "cdeflmp"), ("ro", "dfr"), ("secret", "df")];
    let got = perms(&mut c, "/");
    assert_eq!(got, want.map(|(n, p)| (n.to_string(), p.to_string())));
    let got = perms(&mut c, "locked");
    assert_eq!(
        got,
        [(".", "defl"), ("w", "ar")].map(|(n, p)| (n.to_string(), p.to_string())),
        "STOR needs the directory"
    );
    let (code, text) = c.cmd("MLST ro");
    assert!(code == 250 && text.contains("Perm=dfr;"), "{text}");
    let (_s, port) = lp_server(&root, &["--anonymous-write", "--read-only"]);
    let mut c = Raw::login(port);
    let got = perms(&mut c, "open");
    assert_eq!(got, [(".", "el")].map(|(n, p)| (n.to_string(), p.to_string())), "read-only server");
    let (code, text) = c.cmd("MLST mine");
    assert!(code == 250 && text.contains("Perm=r;"), "{text}");
}

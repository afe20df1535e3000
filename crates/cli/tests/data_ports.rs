//! Data ports in a range a firewall lets through: `serve --data-ports` (or
//! `GLOBUS_TCP_PORT_RANGE`, as Globus's tools read it) for the server's
//! passive listeners, `LIGHTPATH_DATA_PORTS` (or the same variable) for
//! the client's listener of a MODE E download. Without them a server
//! behind a firewall could not be opened up for a fixed range.

mod common;
use common::*;
use lightpath_proto::hostport;
use std::process::Command;

/// Ten ports from a free one (those taken meanwhile are skipped).
fn range() -> (u16, u16) {
    let low = free_port().clamp(20000, 60000);
    (low, low + 9)
}

/// The port of a `227` reply as [`Raw`] reads it (the code first).
fn pasv_port(reply: &str) -> u16 {
    let text = reply.get(4..).unwrap_or_default();
    hostport::parse_pasv_reply(text).unwrap_or_else(|e| panic!("{reply}: {e}")).port()
}

#[test]
fn passive_listeners_take_the_ports_given() {
    let (_d, root, _local) = root_and_local();
    let (low, high) = range();
    let (_s, port) = lp_server(&root, &["--anonymous", "--data-ports", &format!("{low}-{high}")]);
    let mut c = Raw::login(port);
    for _ in 0..3 {
        let (code, text) = c.cmd("PASV");
        assert_eq!(code, 227, "{text}");
        assert!((low..=high).contains(&pasv_port(&text)), "{text} outside {low}-{high}");
    }
    let (code, text) = c.cmd("EPSV");
    let p = hostport::parse_epsv_reply(&text, [127, 0, 0, 1].into()).map(|a| a.port());
    assert!(code == 229 && p.is_ok_and(|p| (low..=high).contains(&p)), "{text}");
    // GCT's variable, where the option is not given.
    let (low, high) = range();
    let port = free_port();
    own_peer_book();
    let mut child = Command::new(LP)
        .args(["serve", "--anonymous", "--listen", &format!("127.0.0.1:{port}"), "--root"])
        .arg(&root)
        .env("GLOBUS_TCP_PORT_RANGE", format!("{low},{high}"))
        .spawn()
        .unwrap();
    wait_port(&mut child, port);
    let _g = Proc(child);
    let (_, text) = Raw::login(port).cmd("PASV");
    assert!((low..=high).contains(&pasv_port(&text)), "{text} outside {low}-{high}");
}

#[test]
fn a_downloads_listener_takes_the_ports_given() {
    let (_d, root, local) = root_and_local();
    write_random(&root.join("f"), 1 << 20, 7);
    let (_s, port) = lp_server(&root, &["--anonymous"]);
    let (low, high) = range();
    let out = Command::new(LP)
        .args(["-vv", "cp", "--no-connect-ahead", &format!("ftp://127.0.0.1:{port}/f")])
        .arg(local.join("f"))
        .env("LIGHTPATH_DATA_PORTS", format!("{low}-{high}"))
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert_same_file(&root.join("f"), &local.join("f"));
    let line = log.lines().find(|l| l.contains("> PORT ")).unwrap_or_else(|| panic!("no PORT sent: {log}"));
    let hp = line.split("> PORT ").nth(1).unwrap().split_whitespace().next().unwrap();
    let p = hostport::parse_port(hp).map(|a| a.port());
    assert!(p.is_ok_and(|p| (low..=high).contains(&p)), "{line} outside {low}-{high}");
    let out = Command::new(LP)
        .args(["cp", &format!("ftp://127.0.0.1:{port}/f")])
        .arg(local.join("g"))
        .env("LIGHTPATH_DATA_PORTS", "80-90")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("LIGHTPATH_DATA_PORTS"));
    assert!(!local.join("g").exists());
}

/// A `--public-ip` of another address family than `--listen` is refused
/// at start: its PASV told IPv4 clients "use EPSV".
#[test]
fn a_public_address_of_the_other_family_is_refused() {
    let (_d, root, _local) = root_and_local();
    let port = free_port();
    let out = Command::new(LP)
        .args(["serve", "--anonymous", "--listen", &format!("127.0.0.1:{port}"), "--public-ip", "2001:db8::1"])
        .arg("--root")
        .arg(&root)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("another address family"), "{err}");
}

/// A session's next PASV in a range of one port gets that port again: its
/// last listener held it, and the PASV got 425 (globus-url-copy then fell
/// back to PORT, which a firewall stops). Another session gets it once
/// the first one's is replaced.
#[test]
fn a_session_reuses_its_port_in_a_range_of_one() {
    let (_d, root, _local) = root_and_local();
    std::fs::write(root.join("f"), b"data").unwrap();
    let p = free_port().clamp(20000, 60000);
    let (_s, port) = lp_server(&root, &["--anonymous", "--data-ports", &format!("{p}-{p}")]);
    let mut c = Raw::login(port);
    for _ in 0..3 {
        let (code, text) = c.cmd("PASV");
        assert_eq!((code, pasv_port(&text)), (227, p), "{text}");
        let mut data = std::net::TcpStream::connect(("127.0.0.1", p)).unwrap();
        assert_eq!(c.cmd("RETR f").0, 150);
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut data, &mut got).unwrap();
        assert_eq!((got.as_slice(), c.final_reply().0), (&b"data"[..], 226));
    }
}

/// The port of data connections opened ahead, when the control port + 1
/// is taken, is another one: said by default (a firewall opened for + 1,
/// as README says, would stop them), not only at -v.
#[test]
fn an_ahead_port_other_than_the_usual_one_is_said() {
    let (_d, root, _local) = root_and_local();
    // A port held here whose port - 1 is free, for the control port.
    let (_taken, port) = (0..50)
        .find_map(|_| {
            let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = taken.local_addr().unwrap().port() - 1;
            std::net::TcpListener::bind(("127.0.0.1", port)).ok().map(|_| (taken, port))
        })
        .expect("a free port below a taken one");
    let mut child = Command::new(LP)
        .args(["serve", "--anonymous", "--listen", &format!("127.0.0.1:{port}"), "--root"])
        .arg(&root)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Until it says it serves (the port listens before that is said).
    let mut err = String::new();
    let lines = std::io::BufRead::lines(std::io::BufReader::new(child.stderr.take().unwrap()));
    for line in lines.map_while(Result::ok) {
        err += &format!("{line}\n");
        if line.starts_with("lightpath: serving") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(err.contains("the control port + 1 was taken"), "{err}");
}

//! One remote file to a local path: MODE E, PORT and RETR leave with the
//! login, before the greeting. It must stay safe when the guess is wrong:
//! a missing file, a directory, and a plain FTP server without MODE E
//! (which refuses MODE E and sends the file in MODE S to our PORT).

mod common;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;

fn cp_vv(src: &str, dst: &Path) -> (bool, String) {
    let out = Command::new(LP).args(["-vv", "cp", "-q", src, &dst.display().to_string()]).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_single_download_sends_retr_with_the_login() {
    let (_d, root, local) = root_and_local();
    write_random(&root.join("file"), 3_000_017, 41);
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let (ok, log) = cp_vv(&format!("ftp://127.0.0.1:{port}/file"), &local.join("copy"));
    assert!(ok, "{log}");
    assert_same_file(&root.join("file"), &local.join("copy"));
    assert_eq!(log.matches("> RETR").count(), 1, "one RETR: {log}");
    let (retr, greeting) = (log.find("> RETR /file").unwrap(), log.find("< 220").unwrap());
    assert!(retr < greeting, "RETR left before the greeting came back: {log}");
    // A wrong guess: no such file, and a directory (no -r).
    std::fs::create_dir(root.join("dir")).unwrap();
    for (bad, says) in [("nothing", "RETR /nothing refused"), ("dir", "is a directory (use -r)")] {
        let (ok, log) = cp_vv(&format!("ftp://127.0.0.1:{port}/{bad}"), &local.join(bad));
        assert!(!ok, "{bad}: {log}");
        let said = log.lines().any(|l| l.starts_with("lightpath:") && l.contains(says));
        assert!(said, "{bad}: the error says {says:?}: {log}");
        assert!(!local.join(bad).exists(), "{bad}: nothing under the final name");
    }
    let left: Vec<_> = std::fs::read_dir(&local).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("copy")], "no temporary files left");
}

#[test]
fn a_server_without_mode_e_gets_the_file_in_mode_s() {
    let d = scratch();
    let local = open_dir(&d.path().join("local"));
    let data: Vec<u8> = (0..1_234_567u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let served = data.clone();
    let server = std::thread::spawn(move || plain_ftp_server(l, &served));
    let (ok, log) = cp_vv(&format!("ftp://127.0.0.1:{port}/f.bin"), &local.join("f.bin"));
    let commands = server.join().unwrap();
    assert!(ok, "{log}\nserver saw: {commands:?}");
    assert_eq!(std::fs::read(local.join("f.bin")).unwrap(), data, "byte-exact in MODE S");
    assert!(commands.iter().any(|c| c == "MODE E"), "the guess was sent: {commands:?}");
    assert_eq!(commands.iter().filter(|c| c.starts_with("RETR")).count(), 1, "{commands:?}");
}

/// A minimal FTP server that knows neither MODE E nor PASV and serves one
/// file: it answers everything of the login, refuses MODE E and OPTS, and
/// sends the file to the last PORT. Returns the commands it received.
fn plain_ftp_server(l: TcpListener, data: &[u8]) -> Vec<String> {
    let (c, _) = l.accept().unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
    let mut w = c.try_clone().unwrap();
    let mut r = BufReader::new(c);
    let mut seen = Vec::new();
    let mut port = None;
    w.write_all(b"220 plain FTP\r\n").unwrap();
    let mut line = String::new();
    while r.read_line(&mut line).is_ok_and(|n| n > 0) {
        let cmd = line.trim_end().to_string();
        line.clear();
        seen.push(cmd.clone());
        let verb = cmd.split(' ').next().unwrap_or("").to_ascii_uppercase();
        let reply: &[u8] = match verb.as_str() {
            "USER" => b"331 Password.\r\n",
            "PASS" => b"230 Logged in.\r\n",
            "FEAT" => b"211-Features:\r\n SIZE\r\n MLST Type*;Size*;\r\n211 End\r\n",
            "TYPE" => b"200 Binary.\r\n",
            "MLST" => b"250-Listing\r\n Type=file;Size=1234567; /f.bin\r\n250 End\r\n",
            "SIZE" => b"213 1234567\r\n",
            "MODE" if cmd.eq_ignore_ascii_case("MODE S") => b"200 Stream.\r\n",
            "PORT" => {
                port = parse_port(&cmd);
                b"200 PORT ok.\r\n"
            }
            "RETR" => {
                let mut dc = TcpStream::connect(port.expect("PORT before RETR")).unwrap();
                w.write_all(b"150 Opening data connection.\r\n").unwrap();
                dc.write_all(data).unwrap();
                drop(dc);
                b"226 Transfer complete.\r\n"
            }
            "QUIT" => {
                w.write_all(b"221 Bye.\r\n").unwrap();
                break;
            }
            _ => b"500 Unknown or unsupported command.\r\n",
        };
        w.write_all(reply).unwrap();
    }
    let _ = r.read_to_end(&mut Vec::new());
    seen
}

fn parse_port(cmd: &str) -> Option<std::net::SocketAddr> {
    let n: Vec<u16> = cmd.get(5..)?.split(',').filter_map(|p| p.trim().parse().ok()).collect();
    let ip = std::net::Ipv4Addr::new(n[0] as u8, n[1] as u8, n[2] as u8, n[3] as u8);
    Some(std::net::SocketAddr::from((ip, n[4] * 256 + n[5])))
}

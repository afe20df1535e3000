//! A hostile client against the server's own resources: modes it must not
//! set, special files that would hold a session forever, and connections
//! and logins in numbers meant to exhaust the server.

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

#[test]
fn site_chmod_sets_permission_bits_only_and_never_on_the_root() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    std::fs::write(root.join("evil.sh"), b"#!/bin/sh\n").unwrap();
    let (_s, port) = lp_server(&root, &["--anonymous"]);
    let mut c = Raw::login(port);
    for bits in ["6755", "4755", "2755", "1777"] {
        let (code, text) = c.cmd(&format!("SITE CHMOD {bits} evil.sh"));
        assert_eq!(code, 550, "{bits}: {text}");
        assert!(text.contains("only permission bits"), "{text}");
    }
    assert_eq!(c.cmd("SITE CHMOD 750 evil.sh").0, 250);
    let mode = std::fs::metadata(root.join("evil.sh")).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o750);
    std::os::unix::fs::symlink(".", root.join("here")).unwrap();
    for root_path in ["/", ".", "/..", "here"] {
        let (code, text) = c.cmd(&format!("SITE CHMOD 000 {root_path}"));
        assert_eq!(code, 550, "{root_path}: {text}");
    }
    assert_eq!(std::fs::metadata(&root).unwrap().permissions().mode() & 0o777, 0o777, "root untouched");
}

#[test]
fn special_files_are_refused_at_once_and_listed_as_such() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    let fifo = root.join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let (_s, port) = lp_server(&root, &["--anonymous"]);
    let mut c = Raw::login(port);
    let t = Instant::now();
    for line in ["CKSM MD5 0 -1 fifo", "SITE CHMOD 644 fifo"] {
        let (code, text) = c.cmd(line);
        assert_eq!(code, 550, "{line}: {text}");
        assert!(text.contains("not a regular file"), "{line}: {text}");
    }
    let _data = std::net::TcpStream::connect(c.pasv()).unwrap();
    c.send(b"RETR fifo");
    let (code, text) = c.final_reply();
    assert_eq!(code, 550, "{text}");
    let (code, text) = c.cmd("STAT fifo");
    assert!(code == 213 && text.contains("prw"), "listed as a FIFO: {text}");
    assert!(t.elapsed() < Duration::from_secs(5), "answered without waiting for a writer");
    assert_eq!(c.cmd("NOOP").0, 200);
}

//! Data connections opened ahead (`DCON`): a client that met a lightpath
//! server before opens its MODE E connections while it logs in, and the
//! first RETR or VRET reuses them (`125`). Every way it can go wrong must
//! end in a normal transfer over PORT: a stale book, a server that does
//! not offer DCON (ours with `--ahead-port off`, and the real Globus
//! server), and connections that never arrive.

mod common;
use common::*;
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn cp_vv(book: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(LP).env("LIGHTPATH_PEERS", book).args(["-vv", "cp", "-q"]).args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn book_line(book: &Path, port: u16) -> Option<String> {
    let text = std::fs::read_to_string(book).ok()?;
    text.lines().find(|l| l.starts_with(&format!("127.0.0.1 {port} "))).map(String::from)
}

const OFFERED: &str = "data connections opened ahead (DCON)";

#[test]
fn the_second_visit_opens_data_connections_ahead() {
    let (d, root, local) = root_and_local();
    write_random(&root.join("file"), 5_000_011, 3);
    make_tree(&open_dir(&root.join("tree")), 40, 5);
    let book = d.path().join("peers");
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let url = format!("ftp://127.0.0.1:{port}/file");

    let (ok, log) = cp_vv(&book, &["-p", "3", &url, &local.join("first").display().to_string()]);
    assert!(ok, "{log}");
    assert!(!log.contains(OFFERED), "nothing is known on the first visit: {log}");
    let line = book_line(&book, port).expect("the server is in the book");
    assert!(line.starts_with(&format!("127.0.0.1 {port} {} ", port + 1)), "{line}");

    let (ok, log) = cp_vv(&book, &["-p", "3", &url, &local.join("second").display().to_string()]);
    assert!(ok, "{log}");
    assert_same_file(&root.join("file"), &local.join("second"));
    assert!(log.contains(OFFERED) && log.contains("n=3"), "{log}");
    assert!(log.contains("< 200 DCON: 3 data connections adopted."), "{log}");
    assert!(log.contains("< 125 "), "RETR reuses them: {log}");
    assert!(!log.contains("< 150 "), "no new data connection: {log}");

    let tree = format!("ftp://127.0.0.1:{port}/tree/");
    let (ok, log) = cp_vv(&book, &["-r", &tree, &local.join("tree").display().to_string()]);
    assert!(ok, "{log}");
    assert_same_tree(&root.join("tree"), &local.join("tree"));
    assert!(log.contains("DCON: ") && log.contains("data connections adopted"), "VRET too: {log}");
}

#[test]
fn a_stale_book_costs_nothing() {
    let (d, root, local) = root_and_local();
    write_random(&root.join("file"), 2_000_003, 4);
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    // Nothing listens on the port the book gives.
    let dead = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let book = d.path().join("peers");
    std::fs::write(&book, format!("127.0.0.1 {port} {dead} 100\n")).unwrap();
    let (ok, log) = cp_vv(&book, &[&format!("ftp://127.0.0.1:{port}/file"), &local.join("f").display().to_string()]);
    assert!(ok, "{log}");
    assert_same_file(&root.join("file"), &local.join("f"));
    assert!(!log.contains("> DCON"), "no connection opened, no DCON sent: {log}");
    let line = book_line(&book, port).unwrap();
    assert!(line.starts_with(&format!("127.0.0.1 {port} {} ", port + 1)), "the book is mended: {line}");
}

/// Write a book that sends the data connections for the server on `port`
/// to a listener of its own (returned: keep it alive), which takes them
/// and says nothing, so the server never sees them.
fn misdirect(book: &Path, port: u16) -> TcpListener {
    let sink = TcpListener::bind("127.0.0.1:0").unwrap();
    std::fs::write(book, format!("127.0.0.1 {port} {} 100\n", sink.local_addr().unwrap().port())).unwrap();
    sink
}

/// The book points the client at a listener that takes the connections,
/// but the control server does not know them.
fn refused_dcon_falls_back(server_port: u16, url: &str, dst: &Path, book: &Path) -> String {
    let _sink = misdirect(book, server_port);
    let (ok, log) = cp_vv(book, &["-p", "2", url, &dst.display().to_string()]);
    assert!(ok, "{log}");
    assert!(log.contains("> DCON "), "{log}");
    assert!(log.contains("data connections opened ahead refused"), "{log}");
    assert_eq!(book_line(book, server_port), None, "a server without DCON is forgotten: {log}");
    log
}

#[test]
fn a_server_without_dcon_refuses_it_and_port_stands() {
    let (d, root, local) = root_and_local();
    write_random(&root.join("file"), 3_000_001, 6);
    let (_s, port) = lp_server(&root, &["--anonymous-write", "--ahead-port", "off"]);
    let url = format!("ftp://127.0.0.1:{port}/file");
    let log = refused_dcon_falls_back(port, &url, &local.join("f"), &d.path().join("peers"));
    assert!(log.contains("< 502 DCON is not enabled"), "{log}");
    assert_same_file(&root.join("file"), &local.join("f"));
}

#[test]
fn the_globus_server_refuses_dcon_and_port_stands() {
    let (d, root, local) = root_and_local();
    write_random(&root.join("file"), 3_000_001, 8);
    let (_g, port) = gct_server(&root);
    let url = format!("ftp://127.0.0.1:{port}{}/file", root.display());
    refused_dcon_falls_back(port, &url, &local.join("f"), &d.path().join("peers"));
    assert_same_file(&root.join("file"), &local.join("f"));
}

#[test]
fn dcon_without_its_connections_is_refused_in_time() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let mut raw = Raw::login(port);
    let t = Instant::now();
    let (code, text) = raw.cmd("DCON 0123456789abcdef0123456789abcdef 2");
    assert_eq!(code, 425, "{text}");
    assert!(text.contains("0 of 2"), "{text}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    let (code, text) = raw.cmd("DCON ../../etc/passwd 2");
    assert_eq!(code, 501, "{text}");
    assert_eq!(raw.cmd("NOOP").0, 200, "the session goes on");
}

#[test]
fn uploads_open_data_connections_ahead_too() {
    let (d, root, local) = root_and_local();
    write_random(&local.join("file"), 4_000_037, 9);
    make_tree(&open_dir(&local.join("tree")), 30, 10);
    let book = d.path().join("peers");
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let src = local.join("file").display().to_string();

    let (ok, log) = cp_vv(&book, &["-p", "2", &src, &format!("ftp://127.0.0.1:{port}/first")]);
    assert!(ok, "{log}");
    assert!(log.contains("> PASV") && !log.contains(OFFERED), "first visit: {log}");

    let (ok, log) = cp_vv(&book, &["-p", "2", &src, &format!("ftp://127.0.0.1:{port}/second")]);
    assert!(ok, "{log}");
    assert_same_file(&local.join("file"), &root.join("second"));
    assert!(log.contains("< 200 DCON: 2 data connections adopted."), "{log}");
    assert!(!log.contains("> PASV"), "no PASV round trip: {log}");
    assert!(log.contains("< 125 "), "STOR reuses them: {log}");

    let tree = local.join("tree").display().to_string();
    let (ok, log) = cp_vv(&book, &["-r", &format!("{tree}/"), &format!("ftp://127.0.0.1:{port}/tree/")]);
    assert!(ok, "{log}");
    assert_same_tree(&local.join("tree"), &root.join("tree"));
    assert!(log.contains("data connections adopted") && !log.contains("> PASV"), "VSTO too: {log}");
    let (vsto, greeting) = (log.find("> VSTO /tree").unwrap(), log.find("< 220").unwrap());
    assert!(vsto < greeting, "VSTO left with the login: {log}");
    assert_eq!(log.matches("> VSTO").count(), 1, "{log}");
}

#[test]
fn an_upload_falls_back_to_pasv_when_dcon_is_refused() {
    let (d, root, local) = root_and_local();
    write_random(&local.join("file"), 2_500_001, 12);
    let (_s, port) = lp_server(&root, &["--anonymous-write", "--ahead-port", "off"]);
    let book = d.path().join("peers");
    let _sink = misdirect(&book, port);
    let src = local.join("file").display().to_string();
    let (ok, log) = cp_vv(&book, &["-p", "2", &src, &format!("ftp://127.0.0.1:{port}/up")]);
    assert!(ok, "{log}");
    assert!(log.contains("> DCON ") && log.contains("> PASV"), "{log}");
    assert_same_file(&local.join("file"), &root.join("up"));
    // The STOR sent with the login had no connection (425); it went again.
    assert!(log.contains("< 425 "), "{log}");
    assert_eq!(log.matches("> STOR /up").count(), 2, "{log}");
    assert_eq!(names_in(&root), vec!["up"], "no temporary file left");
}

#[test]
fn a_tree_upload_falls_back_to_pasv_when_dcon_is_refused() {
    let (d, root, local) = root_and_local();
    make_tree(&open_dir(&local.join("tree")), 25, 7);
    let (_s, port) = lp_server(&root, &["--anonymous-write", "--ahead-port", "off"]);
    let book = d.path().join("peers");
    let _sink = misdirect(&book, port);
    let tree = local.join("tree").display().to_string();
    let (ok, log) = cp_vv(&book, &["-r", &format!("{tree}/"), &format!("ftp://127.0.0.1:{port}/up/")]);
    assert!(ok, "{log}");
    assert_same_tree(&local.join("tree"), &root.join("up"));
    // The VSTO sent with the login had no connection (425); it went again.
    assert!(log.contains("< 425 ") && log.contains("> PASV"), "{log}");
    assert_eq!(log.matches("> VSTO /up").count(), 2, "{log}");
    assert_eq!(names_in(&root), vec!["up"], "nothing else written");
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// With the connections opened ahead, an upload's ALLO and STOR go with
/// the login too (one round trip less). A wrong guess (no such directory,
/// a directory) fails as it would have, and leaves nothing behind.
#[test]
fn a_known_servers_upload_sends_its_stor_with_the_login() {
    let (d, root, local) = root_and_local();
    write_random(&local.join("file"), 3_000_029, 17);
    std::fs::create_dir(root.join("dir")).unwrap();
    let book = d.path().join("peers");
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let src = local.join("file").display().to_string();
    let (ok, log) = cp_vv(&book, &[&src, &format!("ftp://127.0.0.1:{port}/first")]);
    assert!(ok && !log.contains(OFFERED), "first visit: {log}");

    let (ok, log) = cp_vv(&book, &[&src, &format!("ftp://127.0.0.1:{port}/second")]);
    assert!(ok, "{log}");
    assert_same_file(&local.join("file"), &root.join("second"));
    let (stor, greeting) = (log.find("> STOR /second").unwrap(), log.find("< 220").unwrap());
    assert!(stor < greeting, "STOR left before the greeting came back: {log}");
    assert!(log.contains("> ALLO 3000029"), "{log}");
    assert_eq!(log.matches("> STOR").count(), 1, "one STOR: {log}");
    assert!(log.contains("< 125 "), "{log}");

    for (bad, says) in [("missing/f", "STOR refused: /missing/f"), ("dir", "STOR refused: /dir")] {
        let (ok, log) = cp_vv(&book, &[&src, &format!("ftp://127.0.0.1:{port}/{bad}")]);
        assert!(!ok, "{bad}: {log}");
        assert!(log.contains(OFFERED), "{bad}: sent with the login: {log}");
        let said = log.lines().any(|l| l.starts_with("lightpath:") && l.contains(says));
        assert!(said, "{bad}: the error names {says:?}: {log}");
    }
    assert_eq!(names_in(&root), vec!["dir", "first", "second"], "nothing else written");
    assert_eq!(names_in(&root.join("dir")), Vec::<String>::new());
}

/// Connections sent to an older DCON port than the one the server
/// announces (a server restarted on another port, its old one taken by
/// another program) are refused (425), and the next run sends them to the
/// announced port. The book's port for that server was set to 0, out of
/// reach, for good (a defect hunt's find).
#[test]
fn connections_sent_to_an_old_dcon_port_go_to_the_announced_one_next() {
    let (d, root, local) = root_and_local();
    write_random(&root.join("file"), 1_000_003, 12);
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let book = d.path().join("peers");
    let _sink = misdirect(&book, port);
    let url = format!("ftp://127.0.0.1:{port}/file");
    let (ok, log) = cp_vv(&book, &["-p", "2", &url, &local.join("a").display().to_string()]);
    assert!(ok && log.contains("< 425"), "{log}");
    assert!(!log.contains("DCON port is out of reach"), "{log}");
    assert_same_file(&root.join("file"), &local.join("a"));
    let line = book_line(&book, port).unwrap();
    assert!(line.starts_with(&format!("127.0.0.1 {port} {} ", port + 1)), "FEAT's port: {line}");
    let (ok, log) = cp_vv(&book, &["-p", "2", &url, &local.join("b").display().to_string()]);
    assert!(ok && log.contains(OFFERED) && !log.contains("refused"), "{log}");
    assert_same_file(&root.join("file"), &local.join("b"));
}

/// A server whose DCON port the book holds out of reach (0: connections
/// sent to the port it announced never arrived, as through a firewall
/// that drops them while TCP Fast Open makes them look open) gets none
/// opened ahead, and stays so.
#[test]
fn connections_that_never_arrive_are_not_opened_again() {
    let (d, root, local) = root_and_local();
    write_random(&root.join("file"), 1_000_003, 12);
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let book = d.path().join("peers");
    std::fs::write(&book, format!("127.0.0.1 {port} 0 100\n")).unwrap();
    let url = format!("ftp://127.0.0.1:{port}/file");
    let (ok, log) = cp_vv(&book, &["-p", "2", &url, &local.join("b").display().to_string()]);
    assert!(ok && !log.contains("> DCON"), "{log}");
    assert_same_file(&root.join("file"), &local.join("b"));
    let again = book_line(&book, port).unwrap();
    assert!(again.starts_with(&format!("127.0.0.1 {port} 0 ")), "it stays out of reach: {again}");
}

#[test]
fn a_full_park_is_told_at_once_and_the_server_stays_in_the_book() {
    use std::io::Write;
    let (d, root, local) = root_and_local();
    write_random(&root.join("file"), 3_000_017, 12);
    let book = d.path().join("peers");
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let url = format!("ftp://127.0.0.1:{port}/file");
    let (ok, log) = cp_vv(&book, &[&url, &local.join("first").display().to_string()]);
    assert!(ok, "{log}");
    let learned = format!("127.0.0.1 {port} {} ", port + 1);
    assert!(book_line(&book, port).is_some_and(|l| l.starts_with(&learned)), "the DCON port is learned");
    // Fill this address's share of the park with hellos of other tokens.
    let share = lightpath_server::ahead::MAX_PARKED_PER_IP;
    let held: Vec<std::net::TcpStream> = (0..share)
        .map(|i| {
            let mut c = std::net::TcpStream::connect(("127.0.0.1", port + 1)).unwrap();
            let token = lightpath_proto::ahead::Token([(i % 251) as u8 + 1; 16]);
            c.write_all(&lightpath_proto::ahead::hello(&token)).unwrap();
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500)); // the server reads the hellos
    let (ok, log) = cp_vv(&book, &["-p", "3", &url, &local.join("second").display().to_string()]);
    assert!(ok, "{log}");
    assert_same_file(&root.join("file"), &local.join("second"));
    assert!(log.contains("< 450 DCON: server busy"), "{log}");
    let line = book_line(&book, port).unwrap_or_default();
    assert!(line.starts_with(&learned), "DCON stays on for later: {line}\n{log}");
    drop(held);
}

/// `--ahead-port auto` takes the control port + 1: a server started on
/// that port next fails, and says why it may be taken.
#[test]
fn a_port_taken_by_a_neighbours_ahead_port_is_explained() {
    let d = scratch();
    let (_s, port) = lp_server(d.path(), &["--anonymous-write"]);
    let out = Command::new(LP)
        .args(["serve", "--anonymous-write", "--listen", &format!("127.0.0.1:{}", port + 1)])
        .arg("--root")
        .arg(d.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the port is taken: {err}");
    let want =
        format!("cannot listen on 127.0.0.1:{} (if a lightpath server runs on port {port}: it also takes", port + 1);
    assert!(err.contains(&want), "{err}");
    assert!(err.contains("--ahead-port") && err.contains("Address already in use"), "{err}");
}

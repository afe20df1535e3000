//! Our server's side of a restarted upload, over raw commands (GFD.20's
//! `REST` with ranges before `STOR`): a MODE E upload whose data or
//! control connection broke keeps what it wrote (as its `111` markers
//! named it), and a restart that claims only those ranges sends
//! just the rest; a claim beyond them is refused and nothing appears
//! under the name. `resume.rs` has the client's side (`cp --retries`).

mod common;
use common::*;
use lightpath_proto::{BlockHeader, RangeSet};
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

/// The file: 3 MiB that differ at every offset a misplaced range could land on.
fn content() -> Vec<u8> {
    (0..3 * MIB).map(|i| (i * 7 % 251) as u8).collect()
}

fn block(offset: usize, payload: &[u8]) -> Vec<u8> {
    [&BlockHeader::data(offset as u64, payload.len() as u64).encode()[..], payload].concat()
}

/// `ALLO` (3 MiB), the `REST` line `rest` if any, and `STOR name` over a
/// new PASV connection; its reply and the connection if the server took it.
fn stor(c: &mut Raw, name: &str, rest: Option<&str>) -> ((u16, String), Option<TcpStream>) {
    stor_allo(c, name, rest, true)
}

/// [`stor`], with `ALLO` only if `allo`.
fn stor_allo(c: &mut Raw, name: &str, rest: Option<&str>, allo: bool) -> ((u16, String), Option<TcpStream>) {
    assert_eq!(c.cmd("TYPE I").0, 200);
    assert_eq!(c.cmd("MODE E").0, 200);
    let addr = c.pasv();
    if allo {
        assert_eq!(c.cmd(&format!("ALLO {}", 3 * MIB)).0, 200);
    }
    if let Some(r) = rest {
        assert_eq!(c.cmd(r).0, 350);
    }
    c.send(format!("STOR {name}").as_bytes());
    let data = TcpStream::connect(addr).unwrap();
    let r = c.reply();
    let taken = r.0 == 150 || r.0 == 125;
    (r, taken.then_some(data))
}

/// The replies up to the final one: the 111 markers' text, and the final reply.
fn markers_and_final(c: &mut Raw) -> (String, (u16, String)) {
    let mut markers = String::new();
    loop {
        let r = c.reply();
        if r.0 >= 200 {
            return (markers, r);
        }
        if r.0 == 111 {
            markers.push_str(&r.1);
        }
    }
}

/// The ranges a `111 Range Marker` reply names.
fn marker_ranges(text: &str) -> RangeSet {
    let r = text.trim().strip_prefix("111 Range Marker").unwrap_or_else(|| panic!("not a marker: {text:?}"));
    RangeSet::parse(r.trim()).unwrap()
}

/// Send the first `len` bytes of `name`, wait until the server's markers
/// say it wrote them (every 5 s), and close the data connection before
/// EOD: the upload fails, and the server keeps what it wrote if that is
/// a MiB or more.
fn break_after(port: u16, name: &str, len: usize) {
    break_after_as(port, name, len, None);
}

/// [`break_after`] with `OPTS STOR opts` first: the source file's mode
/// and mtime, as lightpath's client sends them.
fn break_after_as(port: u16, name: &str, len: usize, opts: Option<&str>) {
    let mut c = Raw::login(port);
    if let Some(o) = opts {
        assert_eq!(c.cmd(&format!("OPTS STOR {o}")).0, 200);
    }
    let (r, dc) = stor(&mut c, name, None);
    let mut dc = dc.unwrap_or_else(|| panic!("STOR refused: {r:?}"));
    dc.write_all(&block(0, &content()[..len])).unwrap();
    let mut written = RangeSet::new();
    while !written.contains_range(0, len as u64) {
        let (code, text) = c.reply();
        assert!(code == 111 || code == 112, "{code} {text}");
        if code == 111 {
            written = written.union(&marker_ranges(&text));
        }
    }
    drop(dc);
    let (markers, fin) = markers_and_final(&mut c);
    assert!(fin.0 / 100 == 4, "{markers} {fin:?}");
}

/// `REST rest` + `STOR name` on a new session, until the broken
/// session's transfer has ended and kept its file (at most 10 s).
fn restart(port: u16, name: &str, rest: &str) -> (Raw, (u16, String), Option<TcpStream>) {
    restart_as(port, name, rest, None)
}

/// [`restart`] with `OPTS STOR opts` first ([`break_after_as`]).
fn restart_as(port: u16, name: &str, rest: &str, opts: Option<&str>) -> (Raw, (u16, String), Option<TcpStream>) {
    let t = Instant::now();
    loop {
        let mut c = Raw::login(port);
        if let Some(o) = opts {
            assert_eq!(c.cmd(&format!("OPTS STOR {o}")).0, 200);
        }
        let (r, dc) = stor(&mut c, name, Some(rest));
        if !(r.0 == 554 && r.1.contains("no partial upload") && t.elapsed() < Duration::from_secs(10)) {
            return (c, r, dc);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_broken_upload_is_kept_and_resumed_with_only_the_rest() {
    let (_d, root, _local) = root_and_local();
    let (_srv, port) = lp_server(&root, &["--anonymous-write"]);
    let data = content();
    break_after(port, "f", 2 * MIB);
    assert!(!root.join("f").exists(), "nothing under the name yet");
    // Resumed, then the control connection is lost with half a MiB more
    // sent: the partial file is kept again (with or without that half).
    let (c, r, dc) = restart(port, "f", &format!("REST 0-{}", 2 * MIB));
    let mut dc = dc.unwrap_or_else(|| panic!("restart refused: {r:?}"));
    dc.write_all(&block(2 * MIB, &data[2 * MIB..5 * MIB / 2])).unwrap();
    drop(c);
    std::thread::sleep(Duration::from_millis(200));
    drop(dc);
    // Resumed again: only the last MiB goes, and the file is whole.
    let (mut c, r, dc) = restart(port, "f", &format!("REST 0-{}", 2 * MIB));
    let mut dc = dc.unwrap_or_else(|| panic!("restart after a lost session refused: {r:?}"));
    dc.write_all(&[block(2 * MIB, &data[2 * MIB..]), BlockHeader::eof_eod(1).encode().to_vec()].concat()).unwrap();
    let (_, fin) = markers_and_final(&mut c);
    assert_eq!(fin.0, 226, "{fin:?}");
    assert!(std::fs::read(root.join("f")).unwrap() == data, "the resumed file differs");
    let names: Vec<_> = std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["f"], "nothing else left");
}

#[test]
fn a_restart_claiming_more_than_was_kept_is_refused() {
    let (_d, root, _local) = root_and_local();
    let (_srv, port) = lp_server(&root, &["--anonymous-write"]);
    break_after(port, "g", 2 * MIB);
    let (_c, (code, text), dc) = restart(port, "g", &format!("REST 0-{}", 2 * MIB + 1));
    assert!(dc.is_none() && code == 554, "{code} {text}");
    assert!(text.contains(&format!("holds 0-{}, not 0-{}", 2 * MIB, 2 * MIB + 1)), "{text}");
    // The wrong claim cost the partial file: the client sends it whole.
    let mut c = Raw::login(port);
    let ((code, text), dc) = stor(&mut c, "g", Some(&format!("REST 0-{}", 2 * MIB)));
    assert!(dc.is_none() && code == 554 && text.contains("send the whole file"), "{code} {text}");
    assert!(std::fs::read_dir(&root).unwrap().next().is_none(), "nothing under any name");
}

/// A whole upload (no REST) of a path replaces what an earlier try of it
/// left kept, even when it breaks too soon to be kept itself: a restart
/// that claimed the newer try's ranges resumed the older try's bytes and
/// was published with 226 (a defect hunt).
#[test]
fn a_whole_upload_drops_what_an_earlier_try_left_kept() {
    let (_d, root, _local) = root_and_local();
    let (_srv, port) = lp_server(&root, &["--anonymous-write"]);
    break_after(port, "h", 2 * MIB);
    break_after(port, "h", MIB / 2);
    let mut c = Raw::login(port);
    let ((code, text), dc) = stor(&mut c, "h", Some(&format!("REST 0-{}", MIB / 2)));
    assert!(dc.is_none() && code == 554 && text.contains("no partial upload"), "{code} {text}");
    assert!(std::fs::read_dir(&root).unwrap().next().is_none(), "nothing under any name");
}

/// A restart of an upload of another source file of the same name and
/// size (its mode and mtime, from `OPTS STOR`, differ) is refused: two
/// uploads of one name from one user and host, both broken off, were
/// joined and published, 226 (a defect hunt's find). The same file's
/// restart resumes.
#[test]
fn a_restart_from_another_source_file_is_refused() {
    let (_d, root, _local) = root_and_local();
    let (_srv, port) = lp_server(&root, &["--anonymous-write"]);
    let (a, b) = ("Mode=644;Modify=1000000001;", "Mode=644;Modify=2000000002;");
    break_after_as(port, "m", 2 * MIB, Some(a));
    let (_c, (code, text), dc) = restart_as(port, "m", &format!("REST 0-{}", MIB), Some(b));
    assert!(dc.is_none() && code == 554 && text.contains("another source file"), "{code} {text}");
    break_after_as(port, "m", 2 * MIB, Some(a));
    let (_c, r, dc) = restart_as(port, "m", &format!("REST 0-{}", MIB), Some(a));
    assert!(dc.is_some(), "{r:?}");
}

/// A restart without ALLO of an upload whose first try announced its size
/// must still bring all of it: one that sent less was published at the
/// announced size, the rest zeros, with 226 (a defect hunt).
#[test]
fn a_restart_without_allo_still_owes_the_announced_size() {
    let (_d, root, _local) = root_and_local();
    let (_srv, port) = lp_server(&root, &["--anonymous-write"]);
    let data = content();
    break_after(port, "r", 2 * MIB);
    let t = Instant::now();
    let (mut c, mut dc) = loop {
        let mut c = Raw::login(port);
        let (r, dc) = stor_allo(&mut c, "r", Some(&format!("REST 0-{}", 2 * MIB)), false);
        if let Some(dc) = dc {
            break (c, dc);
        }
        assert!(r.1.contains("no partial upload") && t.elapsed() < Duration::from_secs(10), "{r:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let end = [block(2 * MIB, &data[2 * MIB..5 * MIB / 2]), BlockHeader::eof_eod(1).encode().to_vec()].concat();
    dc.write_all(&end).unwrap();
    let (_, fin) = markers_and_final(&mut c);
    assert_eq!(fin.0, 451, "{fin:?}");
    assert!(fin.1.contains("incomplete"), "{fin:?}");
    assert!(!root.join("r").exists(), "a short file was published");
}

/// With `--keep-partial 0`, and for an upload that wrote less than a MiB,
/// nothing is kept.
#[test]
fn small_breaks_and_a_server_that_keeps_none_keep_nothing() {
    let (_d, root, _local) = root_and_local();
    let (_srv, port) = lp_server(&root, &["--anonymous-write", "--keep-partial", "0"]);
    break_after(port, "h", 2 * MIB);
    let mut c = Raw::login(port);
    let ((code, text), _) = stor(&mut c, "h", Some(&format!("REST 0-{}", 2 * MIB)));
    assert!(code == 554 && text.contains("no partial upload"), "{code} {text}");
    let (_d2, root2, _) = root_and_local();
    let (_srv2, port2) = lp_server(&root2, &["--anonymous-write"]);
    break_after(port2, "s", MIB / 2);
    let mut c = Raw::login(port2);
    let ((code, text), _) = stor(&mut c, "s", Some("REST 0-524288"));
    assert!(code == 554 && text.contains("no partial upload"), "{code} {text}");
}

/// A kept partial upload holds disk for what arrived, not for its whole
/// ALLO: the reservation ends with the transfer, and the space allocated
/// past what arrived goes back with it. Kept whole, a client that broke
/// uploads after a MiB held half the free space with each (a review's find).
#[test]
fn a_kept_partial_upload_holds_only_what_arrived() {
    use std::os::unix::fs::MetadataExt;
    let (_d, root, _local) = root_and_local();
    let (_srv, port) = lp_server(&root, &["--anonymous-write"]);
    break_after(port, "p", MIB + MIB / 2);
    let t = Instant::now();
    let held = loop {
        // The broken session's transfer keeps its (unnamed) file a moment later.
        let fds = open_in(&root);
        if let Some(fd) = fds.first() {
            break std::fs::metadata(fd).unwrap().blocks() * 512;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "no partial upload kept");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(held < 2 * MIB as u64, "{held} bytes held for 1.5 MiB of a 3 MiB upload");
    assert!(held >= (MIB + MIB / 2) as u64, "what arrived is kept: {held}");
}

//! `lightpath cp` against a scripted plain FTP server (MODE S only, as in
//! `hostile_server.rs`) that tries to take the client's memory or time:
//! a FEAT reply of megabytes, a reply trickled one line at a time without
//! end, a transfer that stalls after its 150, and a tree whose every
//! directory holds another. Each is refused with an error naming the
//! server, in bounded time; the same server behaving copies.

mod common;
use common::scripted::{self, DataEnd};
use common::*;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

/// How the scripted server misbehaves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Trick {
    /// Nothing: serves `/f` (5 bytes) and the tree `/d` with `/d/f`.
    None,
    /// A FEAT reply of 300 continuation lines of 8000 bytes (2.4 MB).
    HugeFeat,
    /// A FEAT reply that sends one more line every 300 ms, never ending.
    TrickleFeat,
    /// RETR says 150, opens the data connection and sends nothing.
    StallRetr,
    /// Every directory under `/d` holds a directory with a 200-byte name
    /// (and a file), down to paths of 64 KiB.
    Deep,
}

/// The name of each level of [`Trick::Deep`].
fn deep_name() -> String {
    "a".repeat(200)
}

/// Start the scripted server; its port.
fn fake_server(trick: Trick) -> u16 {
    scripted::serve(move |conn| {
        let mut data = DataEnd::default();
        scripted::commands(conn, "scripted", |out, verb, arg| answer(out, &mut data, trick, verb, arg))
    })
}

fn answer(out: &mut TcpStream, data: &mut DataEnd, trick: Trick, verb: &str, arg: &str) -> Option<String> {
    Some(match verb {
        "FEAT" => feat(out, trick),
        "PASV" | "EPSV" | "PORT" => data.set(verb, arg),
        "RETR" | "MLSD" => {
            let _ = out.write_all(b"150 here it comes\r\n");
            let mut dc = data.open()?;
            if verb == "RETR" && trick == Trick::StallRetr {
                std::thread::sleep(Duration::from_secs(600));
            }
            let _ = dc.write_all(&if verb == "RETR" { b"hello".to_vec() } else { listing(arg, trick) });
            drop(dc);
            "226 Transfer complete.\r\n".into()
        }
        _ => simple(verb, arg),
    })
}

/// Replies to the commands that need no data connection.
fn simple(verb: &str, arg: &str) -> String {
    let is_dir = arg.trim_end_matches('/').starts_with("/d");
    match verb {
        "USER" => "331 password\r\n".into(),
        "SIZE" if is_dir => "550 not a file\r\n".into(),
        "SIZE" => "213 5\r\n".into(),
        "MLST" if is_dir => format!("250-\r\n type=dir; {arg}\r\n250 End\r\n"),
        "MLST" => format!("250-\r\n type=file;size=5; {arg}\r\n250 End\r\n"),
        "MODE" if !arg.eq_ignore_ascii_case("S") => "504 only MODE S\r\n".into(),
        "TYPE" | "MODE" | "PASS" | "OPTS" | "CWD" => "200 OK\r\n".into(),
        _ => "502 not implemented\r\n".into(),
    }
}

/// Writes the FEAT reply (as `trick` says); returns nothing more to send.
fn feat(out: &mut TcpStream, trick: Trick) -> String {
    let _ = out.write_all(b"211-Features:\r\n MLST type*;size*;\r\n SIZE\r\n");
    match trick {
        Trick::HugeFeat => {
            let line = format!(" {}\r\n", "B".repeat(8000));
            for _ in 0..300 {
                let _ = out.write_all(line.as_bytes());
            }
        }
        Trick::TrickleFeat => loop {
            std::thread::sleep(Duration::from_millis(300));
            if out.write_all(b" X\r\n").is_err() {
                return String::new();
            }
        },
        _ => {}
    }
    "211 End\r\n".into()
}

/// MLSD of `dir`: `/d` holds the file `f`; under [`Trick::Deep`] also a
/// directory, down to 64 KiB paths.
fn listing(dir: &str, trick: Trick) -> Vec<u8> {
    let mut out = b"type=cdir; .\r\ntype=file;size=5; f\r\n".to_vec();
    if trick == Trick::Deep && dir.len() < 64 << 10 {
        out.extend_from_slice(format!("type=dir; {}\r\n", deep_name()).as_bytes());
    }
    out
}

/// A download of `/f` from a fresh server playing `trick`, into `dest`.
fn get_f(trick: Trick, dest: &std::path::Path, env: &[(&str, &str)]) -> (Option<i32>, String, Duration, u16) {
    let port = fake_server(trick);
    let (code, err, took) =
        cp_within(&[&format!("ftp://127.0.0.1:{port}/f"), &format!("{}/", dest.display())], env, 60);
    (code, err, took, port)
}

#[test]
fn a_reply_of_megabytes_is_refused_naming_the_server() {
    let d = scratch();
    let dest = open_dir(&d.path().join("dest"));
    let (code, err, _, port) = get_f(Trick::HugeFeat, &dest, &[]);
    assert!(matches!(code, Some(c) if c != 0), "{code:?}: {err}");
    assert!(err.contains(&format!("127.0.0.1:{port}: multi-line reply larger than 1024 KiB")), "{err}");
    assert!(err.contains("last command sent"), "{err}");
    // The same server with a short FEAT is copied from.
    let (code, err, _, _) = get_f(Trick::None, &dest, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(std::fs::read(dest.join("f")).unwrap(), b"hello");
}

/// The reply deadline covers the whole reply: a line every 300 ms does
/// not keep the client past it.
#[test]
fn a_reply_trickled_line_by_line_times_out_as_a_whole() {
    let d = scratch();
    let dest = open_dir(&d.path().join("dest"));
    let (code, err, took, port) = get_f(Trick::TrickleFeat, &dest, &[("LIGHTPATH_REPLY_TIMEOUT", "2")]);
    assert!(code.is_some(), "still waiting after {took:?}: {err}");
    assert_ne!(code, Some(0), "{err}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert!(err.contains(&format!("control connection to 127.0.0.1:{port}: reply not finished 2 s")), "{err}");
    assert!(err.contains("last command sent"), "{err}");
}

/// A transfer that stalls after its 150 is reported as such, not as a
/// reply that never came.
#[test]
fn a_stalled_transfer_says_so() {
    let d = scratch();
    let dest = open_dir(&d.path().join("dest"));
    let (code, err, took, _) = get_f(Trick::StallRetr, &dest, &[("LIGHTPATH_REPLY_TIMEOUT", "2")]);
    assert!(matches!(code, Some(c) if c != 0), "{code:?} after {took:?}: {err}");
    assert!(err.contains("no reply for 2 s after 150: the transfer under way stalled"), "{err}");
    assert!(err.contains("RETR /f"), "{err}");
    // The same bound from the command line (`--reply-timeout`).
    let port = fake_server(Trick::StallRetr);
    let url = format!("ftp://127.0.0.1:{port}/f");
    let args = ["--retries", "0", "--reply-timeout", "2", &url, &format!("{}/", dest.display())];
    let (code, err, took) = cp_within(&args, &[], 60);
    assert!(matches!(code, Some(c) if c != 0), "{code:?} after {took:?}: {err}");
    assert!(err.contains("no reply for 2 s after 150"), "{err}");
}

/// A tree nested without end is refused once a path is 4096 bytes below
/// its root (here about 20 levels), before anything is written.
#[test]
fn a_tree_nested_without_end_is_refused() {
    let d = scratch();
    let dest = open_dir(&d.path().join("dest"));
    let port = fake_server(Trick::Deep);
    let src = format!("ftp://127.0.0.1:{port}/d/");
    let (code, err, took) = cp_within(&["-r", &src, &format!("{}/", dest.display())], &[], 60);
    assert!(matches!(code, Some(c) if c != 0), "{code:?} after {took:?}: {err}");
    assert!(err.contains(&format!("{src}: a path in this tree is")), "{err}");
    assert!(err.contains("levels) below it, more than 4096"), "{err}");
    assert_eq!(std::fs::read_dir(&dest).unwrap().count(), 0, "nothing written");
    // The same tree cut short is copied.
    let port = fake_server(Trick::None);
    let src = format!("ftp://127.0.0.1:{port}/d/");
    let (code, err, _) = cp_within(&["-r", &src, &format!("{}/", dest.display())], &[], 60);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(std::fs::read(dest.join("f")).unwrap(), b"hello");
}

/// `-p` takes 1 to 128 streams: past a listener's queue of 128 a download
/// waited 30 s a stream and failed "connection timed out" (129 worked,
/// 130 did not), and far past it the copy retried a refused OPTS.
#[test]
fn parallel_streams_past_128_are_refused_at_once() {
    let d = scratch();
    let root = open_dir(&d.path().join("root"));
    write_random(&root.join("f"), 1 << 20, 1);
    let (_s, port) = lp_server(&root, &["--anonymous-write"]);
    let src = format!("ftp://127.0.0.1:{port}/f");
    let dst = d.path().join("got");
    let (code, err) = cp(&["-p", "129", &src, dst.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("129 is not in 1..=128"), "{err}");
    let (code, err) = cp(&["-p", "128", &src, dst.to_str().unwrap()]);
    assert_eq!(code, 0, "128 streams work: {err}");
    assert_same_file(&root.join("f"), &dst);
}

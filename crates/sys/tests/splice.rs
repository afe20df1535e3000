//! Zero copy through a pipe over a loopback TCP connection.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::time::Duration;

use lightpath_sys::splice::{splice_from_file, splice_to_file, splice_to_file_exact, Pipe};

fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let a = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (b, _) = l.accept().expect("accept");
    (a, b)
}

fn pattern(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn temp(dir: &str) -> File {
    tempfile::tempfile_in(dir).expect("temp file")
}

#[test]
fn socket_to_file_at_offset_is_exact() {
    for dir in ["/var/tmp", "/dev/shm"] {
        let data = pattern(5_000_017, 3);
        let (mut tx, rx) = pair();
        let d = data.clone();
        let t = std::thread::spawn(move || tx.write_all(&d));
        let f = temp(dir);
        f.write_all_at(b"head", 0).expect("head");
        let pipe = Pipe::new().expect("pipe");
        splice_to_file_exact(&rx, &pipe, &f, 12_345, data.len() as u64).expect("splice");
        t.join().expect("thread").expect("send");
        let mut back = vec![0u8; data.len()];
        f.read_exact_at(&mut back, 12_345).expect("read back");
        assert!(back == data, "bytes differ in {dir}");
        assert_eq!(f.metadata().expect("meta").len(), 12_345 + data.len() as u64);
        let mut head = [0u8; 4];
        f.read_exact_at(&mut head, 0).expect("head");
        assert_eq!(&head, b"head");
    }
}

#[test]
fn socket_to_file_behaves_like_read_with_timeout() {
    let (mut tx, rx) = pair();
    rx.set_read_timeout(Some(Duration::from_millis(50))).expect("timeout");
    let f = temp("/var/tmp");
    let pipe = Pipe::with_size(64 << 10).expect("pipe");
    let e = splice_to_file(&rx, &pipe, &f, 0, 100).expect_err("nothing sent yet");
    assert_eq!(e.kind(), ErrorKind::WouldBlock);
    tx.write_all(b"0123456789").expect("send");
    // a partial move: 10 bytes asked 100, returned without waiting for more
    let n = splice_to_file(&rx, &pipe, &f, 0, 100).expect("some bytes");
    assert_eq!(n, 10);
    assert_eq!(splice_to_file(&rx, &pipe, &f, 10, 0).expect("len 0"), 0);
    drop(tx);
    assert_eq!(splice_to_file(&rx, &pipe, &f, 10, 100).expect("eof"), 0);
    let mut back = String::new();
    (&f).read_to_string(&mut back).expect("read");
    assert_eq!(back, "0123456789");
}

#[test]
fn exact_move_reports_early_close() {
    let (mut tx, rx) = pair();
    tx.write_all(&[5u8; 1000]).expect("send");
    drop(tx);
    let f = temp("/var/tmp");
    let pipe = Pipe::new().expect("pipe");
    let e = splice_to_file_exact(&rx, &pipe, &f, 0, 2000).expect_err("short");
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
    assert_eq!(f.metadata().expect("meta").len(), 1000);
}

#[test]
fn file_to_socket_sends_exact_range() {
    let data = pattern(3_000_000, 9);
    let f = temp("/var/tmp");
    f.write_all_at(&data, 0).expect("write");
    let (tx, mut rx) = pair();
    let t = std::thread::spawn(move || {
        let mut got = Vec::new();
        rx.read_to_end(&mut got).map(|_| got)
    });
    let pipe = Pipe::new().expect("pipe");
    splice_from_file(&f, &pipe, &tx, 1001, 2_000_000).expect("splice");
    splice_from_file(&f, &pipe, &tx, 0, 0).expect("empty range");
    drop(tx);
    let got = t.join().expect("thread").expect("recv");
    assert!(got == data[1001..2_001_001], "bytes differ");
}

#[test]
fn file_to_socket_past_eof_is_unexpected_eof() {
    let f = temp("/var/tmp");
    f.write_all_at(&[1u8; 100], 0).expect("write");
    let (tx, _rx) = pair();
    let pipe = Pipe::new().expect("pipe");
    let e = splice_from_file(&f, &pipe, &tx, 50, 100).expect_err("file too short");
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
}

#[test]
fn pipe_capacity_is_what_the_kernel_gave() {
    let p = Pipe::with_size(256 << 10).expect("pipe");
    assert!(p.capacity() >= 256 << 10, "{}", p.capacity());
    let p = Pipe::with_size(4096).expect("pipe");
    assert!(p.capacity() >= 4096);
}

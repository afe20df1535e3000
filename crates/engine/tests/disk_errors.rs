//! A disk that errors part way through a transfer: a source whose reads
//! fail with EIO after some bytes, a sink whose writes do. Over MODE E
//! (parallel streams) and MODE S, the failing side returns the disk's
//! error with what it was doing ("reading source", "writing data"), the
//! other side fails too (nothing looks complete), and neither hangs.
//! The engine does not know file names: the server and the client add
//! them (`crates/cli/tests/faults.rs` checks that they do).

mod common;
use common::pair;
use lightpath_engine::{
    modee, stream, BytesSource, Control, EngineError, MemorySink, RecvOpts, SendPlan, Sink, Source,
};
use std::io;
use std::sync::mpsc;
use std::time::Duration;

const EIO: i32 = 5;
const LEN: usize = 8 << 20;
/// Where the disk goes bad: past the first blocks, well before the end.
const BAD_AT: u64 = 3 << 20;

fn eio() -> io::Error {
    io::Error::from_raw_os_error(EIO)
}

/// Reads fail with EIO from `BAD_AT` on.
struct BadSource(BytesSource);

impl Source for BadSource {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if offset + buf.len() as u64 > BAD_AT {
            return Err(eio());
        }
        self.0.read_exact_at(buf, offset)
    }
}

/// Writes fail with EIO from `BAD_AT` on.
struct BadSink(MemorySink);

impl Sink for BadSink {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if offset + buf.len() as u64 > BAD_AT {
            return Err(eio());
        }
        self.0.write_all_at(buf, offset)
    }
}

fn data() -> Vec<u8> {
    (0..LEN).map(|i| (i * 31 + i / 4093) as u8).collect()
}

fn opts() -> RecvOpts {
    RecvOpts { base: 0, max_offset: 1 << 40, idle: Duration::from_secs(10) }
}

/// Run `f` on a thread; a hang fails the test instead of stalling it.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| panic!("{what} hung"))
}

/// The disk's EIO, with the context `ctx`.
fn assert_disk_error(r: Result<u64, EngineError>, ctx: &str) {
    match r {
        Err(EngineError::Io { context, source }) => {
            assert!(context.starts_with(ctx), "says what it was doing: {context}: {source}");
            assert_eq!(source.raw_os_error(), Some(EIO), "the disk's own error: {context}: {source}");
        }
        other => panic!("expected the disk's EIO ({ctx}), got {other:?}"),
    }
}

fn plan() -> SendPlan {
    SendPlan { ranges: vec![(0, LEN as u64)], wire_base: 0, block: 256 << 10, grow: None }
}

/// MODE E over 4 streams: (sender's result, receiver's result).
fn modee_run(
    src: Box<dyn Source + Send>,
    sink: Box<dyn Sink + Send>,
) -> (Result<u64, EngineError>, Result<u64, String>) {
    let (mut s, mut r) = pair(4);
    let sender = std::thread::spawn(move || {
        let res = modee::send(&mut s, src.as_ref(), &plan(), &Control::new());
        drop(s);
        res
    });
    let got = modee::recv(&mut r, None, sink.as_ref(), &opts(), &Control::new());
    // The receiver gives up on its connections when it fails.
    drop(r);
    (sender.join().unwrap(), got.map(|g| g.covered()).map_err(|e| e.to_string()))
}

#[test]
fn a_source_read_failing_mid_transfer_fails_a_mode_e_send() {
    let (sent, got) = within("MODE E send from a bad disk", || {
        modee_run(Box::new(BadSource(BytesSource(data()))), Box::new(MemorySink::new(1 << 30)))
    });
    assert_disk_error(sent, "reading source");
    assert!(got.is_err(), "the receiver does not take the short stream as complete: {got:?}");
}

#[test]
fn a_sink_write_failing_mid_transfer_fails_a_mode_e_receive() {
    let (sent, got) = within("MODE E receive onto a bad disk", || {
        let (mut s, mut r) = pair(4);
        let sender = std::thread::spawn(move || {
            let src = BytesSource(data());
            let res = modee::send(&mut s, &src, &plan(), &Control::new());
            drop(s);
            res
        });
        let sink = BadSink(MemorySink::new(1 << 30));
        let got = modee::recv(&mut r, None, &sink, &opts(), &Control::new()).map(|g| g.covered());
        drop(r);
        (sender.join().unwrap(), got)
    });
    assert_disk_error(got, "writing data");
    // Whether the sender noticed before it finished depends on buffering.
    drop(sent);
}

#[test]
fn a_source_read_failing_mid_transfer_fails_a_mode_s_send() {
    let (sent, got) = within("MODE S send from a bad disk", || {
        let (mut s, mut r) = pair(1);
        let (s, r) = (s.remove(0), r.remove(0));
        let sender = std::thread::spawn(move || {
            stream::send(s, &BadSource(BytesSource(data())), (0, LEN as u64), Duration::from_secs(10), &Control::new())
        });
        let sink = MemorySink::new(1 << 30);
        let got = stream::recv(r, &sink, 0, 1 << 40, Duration::from_secs(10), &Control::new());
        (sender.join().unwrap(), got)
    });
    assert_disk_error(sent, "reading source");
    // MODE S ends at EOF, so a close would pass the short file off as
    // complete: the failed sender resets the connection instead.
    match got {
        Err(EngineError::Io { context, source }) => {
            assert_eq!(context, "data connection");
            assert_eq!(source.kind(), io::ErrorKind::ConnectionReset, "{source}");
        }
        other => panic!("the receiver must see the failure, not an end of file: {other:?}"),
    }
}

#[test]
fn a_sink_write_failing_mid_transfer_fails_a_mode_s_receive() {
    let got = within("MODE S receive onto a bad disk", || {
        let (mut s, mut r) = pair(1);
        let (s, r) = (s.remove(0), r.remove(0));
        let sender = std::thread::spawn(move || {
            stream::send(s, &BytesSource(data()), (0, LEN as u64), Duration::from_secs(10), &Control::new())
        });
        let got =
            stream::recv(r, &BadSink(MemorySink::new(1 << 30)), 0, 1 << 40, Duration::from_secs(10), &Control::new());
        let _ = sender.join().unwrap();
        got
    });
    assert_disk_error(got, "writing data");
}

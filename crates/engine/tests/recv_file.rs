//! Receiving MODE E into a file on the splice path (`set_recv_splice`):
//! the payload goes from the socket into pipes and from the pipes into the
//! file, never through user space.
//! Byte-exact with parallel streams, out-of-order blocks and segments so
//! small that a pipe runs out of slots before its piece is full; a file
//! that refuses writes fails the transfer instead of hanging it. Blocks
//! that do go through memory use the engine's buffer pool and give every
//! buffer back.

mod common;
use common::pair;
use lightpath_engine::iothreads;
use lightpath_engine::{modee, BytesSource, Control, FileSink, MemorySink, RecvOpts, SendPlan, Sink};
use lightpath_proto::BlockHeader;
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The tests of this file run one at a time, so that the pool's counters
/// seen by one are its own.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    iothreads::set_recv_splice(true);
    g
}

fn opts() -> RecvOpts {
    RecvOpts { base: 0, max_offset: 1 << 40, idle: Duration::from_secs(10) }
}

fn data(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 13 + i / 509 + seed) as u8).collect()
}

#[test]
fn file_sinks_offer_their_file_for_splicing() {
    let f = tempfile::tempfile().unwrap();
    assert!(FileSink(&f).file().is_some());
    assert!(lightpath_engine::NullSink.file().is_none());
}

#[test]
fn parallel_streams_into_a_file_byte_exact() {
    let _g = serial();
    let (mut s, mut r) = pair(4);
    // Round 0 splices, round 1 takes the copy path (both forced).
    for round in 0..2 {
        iothreads::set_recv_splice(round == 0);
        let bytes = data(9_000_000 + round * 4097, round);
        let src = BytesSource(bytes.clone());
        let plan = SendPlan { ranges: vec![(0, bytes.len() as u64)], wire_base: 0, block: 256 << 10, grow: None };
        let f = tempfile::tempfile().unwrap();
        std::thread::scope(|sc| {
            let h = sc.spawn(|| modee::send(&mut s, &src, &plan, &Control::new()).unwrap());
            modee::recv(&mut r, None, &FileSink(&f), &opts(), &Control::new()).unwrap();
            assert_eq!(h.join().unwrap(), bytes.len() as u64);
        });
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut &f, &mut got).unwrap();
        assert!(got == bytes, "round {round}: file differs ({} B, want {} B)", got.len(), bytes.len());
        assert_eq!(r.len(), 4, "connections kept for reuse");
    }
}

/// One block of 1 MiB + 5 B written 61 bytes at a time with Nagle off:
/// many small segments, more than a pipe has slots for one piece; copied,
/// the reads fill several buffers at once (`readv`), often partly.
#[test]
fn tiny_segments_into_a_file_byte_exact() {
    let _g = serial();
    for splice in [true, false] {
        iothreads::set_recv_splice(splice);
        tiny_segments_into_a_file();
    }
}

fn tiny_segments_into_a_file() {
    let (mut s, mut r) = pair(1);
    s[0].set_nodelay(true).unwrap();
    let bytes = data((1 << 20) + 5, 7);
    let f = tempfile::tempfile().unwrap();
    std::thread::scope(|sc| {
        let w = &mut s[0];
        let payload = &bytes;
        sc.spawn(move || {
            w.write_all(&BlockHeader::data(0, payload.len() as u64).encode()).unwrap();
            for c in payload.chunks(61) {
                w.write_all(c).unwrap();
            }
            w.write_all(&BlockHeader::eof_eod(1).encode()).unwrap();
        });
        modee::recv(&mut r, None, &FileSink(&f), &opts(), &Control::new()).unwrap();
    });
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut &f, &mut got).unwrap();
    assert!(got == bytes, "file differs ({} B)", got.len());
}

#[test]
fn a_file_refusing_writes_fails_the_transfer() {
    let _g = serial();
    let (mut s, mut r) = pair(2);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ro");
    std::fs::write(&p, b"").unwrap();
    let ro = std::fs::File::open(&p).unwrap();
    let bytes = data(4 << 20, 3);
    let src = BytesSource(bytes.clone());
    let plan = SendPlan { ranges: vec![(0, bytes.len() as u64)], wire_base: 0, block: 256 << 10, grow: None };
    let t = Instant::now();
    let err = std::thread::scope(|sc| {
        sc.spawn(|| modee::send(&mut s, &src, &plan, &Control::new()));
        // The failed connections are dropped, which stops the sender too.
        modee::recv(&mut r, None, &FileSink(&ro), &opts(), &Control::new()).unwrap_err()
    });
    assert!(err.to_string().contains("writing data"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(8), "failed promptly, not by the idle timeout");
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 0);
}

/// A memory-to-memory transfer reads its blocks into pool buffers (both
/// ends), and every buffer is back in the pool afterwards, also after a
/// failed transfer.
#[test]
fn pool_buffers_are_used_and_come_back() {
    let _g = serial();
    let (mut s, mut r) = pair(4);
    let bytes = data(6 << 20, 5);
    let src = BytesSource(bytes.clone());
    let plan = SendPlan { ranges: vec![(0, bytes.len() as u64)], wire_base: 0, block: 256 << 10, grow: None };
    let sink = MemorySink::new(1 << 30);
    std::thread::scope(|sc| {
        sc.spawn(|| modee::send(&mut s, &src, &plan, &Control::new()).unwrap());
        modee::recv(&mut r, None, &sink, &opts(), &Control::new()).unwrap();
    });
    assert!(sink.into_inner() == bytes);
    let st = iothreads::pool_stats().expect("the engine runs");
    assert_eq!(st.count, iothreads::POOL_BUFFERS);
    assert!(st.high_water >= 2, "pool buffers were used: {st:?}");
    assert_eq!(st.in_use, 0, "every buffer is back: {st:?}");
    let small = MemorySink::new(1 << 20);
    let e = std::thread::scope(|sc| {
        sc.spawn(|| modee::send(&mut s, &src, &plan, &Control::new()));
        modee::recv(&mut r, None, &small, &opts(), &Control::new())
    });
    assert!(e.is_err(), "a 6 MiB transfer into a 1 MiB sink fails");
    assert_eq!(iothreads::pool_stats().unwrap().in_use, 0, "every buffer is back after a failure");
}

//! The fixed I/O threads: many concurrent MODE E transfers share the same
//! network and disk threads, deliver every byte, and a small transfer is
//! not starved by a big one.

mod common;
use common::pair;
use lightpath_engine::iothreads::{self, IoConfig};
use lightpath_engine::{
    modee, BytesSource, Control, EngineError, MemorySink, NullSink, RecvOpts, SendPlan, Source, ZeroSource,
};
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const CFG: IoConfig = IoConfig { net_threads: 2, disk_threads: 3 };

fn setup() {
    iothreads::configure(CFG).unwrap();
}

/// `(lp-net-*, lp-disk-*)` threads of this process.
fn io_threads() -> (usize, usize) {
    let (mut net, mut disk) = (0, 0);
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        net += comm.starts_with("lp-net-") as usize;
        disk += comm.starts_with("lp-disk-") as usize;
    }
    (net, disk)
}

fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn opts() -> RecvOpts {
    RecvOpts { base: 0, max_offset: 1 << 40, idle: Duration::from_secs(30) }
}

/// One transfer over `streams` loopback connections; returns the bytes received.
fn transfer(bytes: &[u8], streams: usize, block: u64) -> Vec<u8> {
    let (mut s, mut r) = pair(streams);
    let src = BytesSource(bytes.to_vec());
    let plan = SendPlan { ranges: vec![(0, bytes.len() as u64)], wire_base: 0, block, grow: None };
    let sink = MemorySink::new(1 << 30);
    std::thread::scope(|sc| {
        let h = sc.spawn(|| modee::send(&mut s, &src, &plan, &Control::new()).unwrap());
        modee::recv(&mut r, None, &sink, &opts(), &Control::new()).unwrap();
        assert_eq!(h.join().unwrap(), bytes.len() as u64);
    });
    assert_eq!(r.len(), streams, "connections kept for reuse");
    sink.into_inner()
}

#[test]
fn twenty_concurrent_transfers_share_the_fixed_threads() {
    setup();
    let done = AtomicBool::new(false);
    let samples = Mutex::new(Vec::new());
    std::thread::scope(|sc| {
        sc.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                samples.lock().unwrap().push(io_threads());
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let jobs: Vec<_> = (0..20u64)
            .map(|i| {
                sc.spawn(move || {
                    let bytes = data(1_500_000 + i as usize * 40_961, i);
                    let got = transfer(&bytes, 4, 64 << 10);
                    assert!(got == bytes, "transfer {i}: {} bytes back, differ", got.len());
                })
            })
            .collect();
        for j in jobs {
            j.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    let samples = samples.into_inner().unwrap();
    assert!(samples.len() > 5, "too few samples: {}", samples.len());
    let want = (CFG.net_threads, CFG.disk_threads);
    assert!(samples.iter().all(|&s| s == want), "I/O thread counts {:?} != {want:?}", samples);
}

#[test]
fn a_small_transfer_is_not_starved_by_a_big_one() {
    setup();
    let big_len: u64 = 1 << 30;
    let (mut bs, mut br) = pair(4);
    let big_rx = Control::new();
    let order = Mutex::new(Vec::new());
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let plan = SendPlan { ranges: vec![(0, big_len)], wire_base: 0, block: 256 << 10, grow: None };
            modee::send(&mut bs, &ZeroSource::new(big_len), &plan, &Control::new()).unwrap();
        });
        sc.spawn(|| {
            modee::recv(&mut br, None, &NullSink, &opts(), &big_rx).unwrap();
            order.lock().unwrap().push(("big", big_rx.bytes()));
        });
        let t = Instant::now();
        while big_rx.bytes() < 8 << 20 {
            assert!(t.elapsed() < Duration::from_secs(60), "big transfer did not start");
            std::thread::sleep(Duration::from_millis(1));
        }
        let small = data(1 << 20, 7);
        assert!(transfer(&small, 4, 256 << 10) == small);
        order.lock().unwrap().push(("small", big_rx.bytes()));
    });
    let order = order.into_inner().unwrap();
    assert_eq!(order[0].0, "small", "completion order {order:?}");
    assert!(order[0].1 < big_len, "the big transfer was already complete: {order:?}");
}

#[test]
fn cancelled_receiver_stops_both_sides() {
    setup();
    let (mut s, mut r) = pair(2);
    let len: u64 = 1 << 40;
    let rx = Control::new();
    let sent = std::thread::scope(|sc| {
        let h = sc.spawn(|| {
            let plan = SendPlan { ranges: vec![(0, len)], wire_base: 0, block: 256 << 10, grow: None };
            modee::send(&mut s, &ZeroSource::new(len), &plan, &Control::new())
        });
        sc.spawn(|| {
            while rx.bytes() < 4 << 20 {
                std::thread::sleep(Duration::from_millis(1));
            }
            rx.cancel();
        });
        let got = modee::recv(&mut r, None, &NullSink, &opts(), &rx);
        assert!(matches!(got, Err(EngineError::Aborted)), "receiver: {got:?}");
        assert!(r.is_empty(), "connections of a failed transfer are not kept");
        h.join().unwrap()
    });
    assert!(sent.is_err(), "sender to a vanished receiver: {sent:?}");
}

#[test]
fn connections_block_again_after_a_transfer() {
    setup();
    let (mut s, mut r) = pair(2);
    let bytes = data(300_000, 3);
    let src = BytesSource(bytes.clone());
    let plan = SendPlan { ranges: vec![(0, bytes.len() as u64)], wire_base: 0, block: 65536, grow: None };
    let sink = MemorySink::new(1 << 30);
    std::thread::scope(|sc| {
        sc.spawn(|| modee::send(&mut s, &src, &plan, &Control::new()).unwrap());
        modee::recv(&mut r, None, &sink, &opts(), &Control::new()).unwrap();
    });
    assert!(sink.into_inner() == bytes);
    // Nothing more comes: a blocking read with a timeout waits for it, a
    // non-blocking one would return at once.
    for c in r.iter_mut().chain(s.iter_mut()) {
        c.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let t = Instant::now();
        let e = c.read(&mut [0u8; 1]).unwrap_err();
        assert!(t.elapsed() >= Duration::from_millis(250), "connection left non-blocking: {e}");
    }
}

/// A sink that counts how many writes run at once.
struct CountingSink {
    inner: MemorySink,
    serial: bool,
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl lightpath_engine::Sink for CountingSink {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(n, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(2));
        let r = self.inner.write_all_at(buf, offset);
        self.now.fetch_sub(1, Ordering::SeqCst);
        r
    }
    fn serial_writes(&self) -> bool {
        self.serial
    }
}

/// Most writes at once into a sink, over 4 streams with 3 disk threads.
fn most_writes_at_once(serial: bool) -> usize {
    setup();
    let bytes = data(8 << 20, 7);
    let (mut s, mut r) = pair(4);
    let src = BytesSource(bytes.clone());
    let plan = SendPlan { ranges: vec![(0, bytes.len() as u64)], wire_base: 0, block: 64 << 10, grow: None };
    let zero = std::sync::atomic::AtomicUsize::new(0);
    let sink = CountingSink { inner: MemorySink::new(16 << 20), serial, now: zero, most: Default::default() };
    std::thread::scope(|sc| {
        sc.spawn(|| modee::send(&mut s, &src, &plan, &Control::new()).unwrap());
        modee::recv(&mut r, None, &sink, &opts(), &Control::new()).unwrap();
    });
    assert_eq!(sink.inner.into_inner()[..bytes.len()], bytes[..]);
    sink.most.into_inner()
}

/// Buffered writes into one file serialize on its inode lock: a sink that
/// says so gets one write at a time; others get several.
#[test]
fn a_serial_sink_gets_one_write_at_a_time() {
    assert_eq!(most_writes_at_once(true), 1);
    assert!(most_writes_at_once(false) > 1);
}

/// Write `bytes` in pieces of `step`, pausing between them.
fn trickle(c: &mut std::net::TcpStream, bytes: &[u8], step: usize) {
    use std::io::Write;
    for piece in bytes.chunks(step) {
        c.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(15));
    }
}

/// Receivers wait on a socket until the rest of a header or of a piece is
/// there (`SO_RCVLOWAT`): a sender that stops short of that, between and
/// inside headers and payloads, must still be read to the end, and the
/// kept connection must wake its next reader for a single byte again.
/// `rcvbuf`: a fixed receive buffer for the receiving end.
fn trickled_transfer(rcvbuf: Option<usize>) {
    use lightpath_proto::BlockHeader;
    setup();
    let (mut s, mut r) = pair(1);
    if let Some(b) = rcvbuf {
        let opts = lightpath_sys::net::SockOpts { buffer: Some(b), ..Default::default() };
        assert!(lightpath_sys::net::tune(&r[0], &opts).is_empty());
    }
    let bytes = data(600_000, 11);
    let mut wire = Vec::new();
    for (at, len) in [(0u64, 400_000u64), (400_000, 200_000)] {
        wire.extend_from_slice(&BlockHeader::data(at, len).encode());
        wire.extend_from_slice(&bytes[at as usize..(at + len) as usize]);
    }
    wire.extend_from_slice(&BlockHeader::eof_eod(1).encode());
    let sink = MemorySink::new(1 << 30);
    let t = Instant::now();
    std::thread::scope(|sc| {
        let s0 = &mut s[0];
        sc.spawn(move || {
            // Headers a few bytes at a time, payload in uneven slices, and a
            // pause longer than a wake-up before the final header.
            trickle(s0, &wire[..5], 2);
            trickle(s0, &wire[5..300_000], 70_001);
            trickle(s0, &wire[300_000..wire.len() - 17], 123_457);
            std::thread::sleep(Duration::from_millis(200));
            trickle(s0, &wire[wire.len() - 17..], 7);
        });
        modee::recv(&mut r, None, &sink, &opts(), &Control::new()).unwrap();
    });
    assert!(t.elapsed() < Duration::from_secs(10), "stalled: {:?}", t.elapsed());
    assert!(sink.into_inner() == bytes);
    assert_eq!(r.len(), 1, "connection kept");
    use std::io::Write;
    s[0].write_all(b"x").unwrap();
    assert!(lightpath_sys::net::wait_readable(&r[0], Duration::from_secs(2)).unwrap(), "one byte wakes");
}

#[test]
fn a_trickling_sender_is_read_to_the_end_and_the_kept_connection_wakes_for_a_byte() {
    trickled_transfer(None);
}

/// A fixed receive buffer smaller than a piece: the socket can never queue
/// what the mark asks for, so the kernel must wake the reader when the
/// buffer fills (it does: `tcp_rmem_pressure`).
#[test]
fn a_receive_buffer_smaller_than_a_piece_does_not_stall() {
    trickled_transfer(Some(32 << 10));
}

/// Counts what a receiver writes, and any byte that is not zero.
#[derive(Default)]
struct ZeroCheckSink {
    written: std::sync::atomic::AtomicU64,
    nonzero: std::sync::atomic::AtomicU64,
}

impl lightpath_engine::Sink for ZeroCheckSink {
    fn write_all_at(&self, buf: &[u8], _offset: u64) -> std::io::Result<()> {
        self.written.fetch_add(buf.len() as u64, Ordering::SeqCst);
        self.nonzero.fetch_add(buf.iter().filter(|&&b| b != 0).count() as u64, Ordering::SeqCst);
        Ok(())
    }
}

type MakeZeros = fn(u64) -> ZeroSource;

/// A `/dev/zero` source is sent with `sendfile` from a sparse memfd, or
/// from memory (zeroed into pool buffers, with blocks smaller and larger
/// than a buffer). Every way, every byte arrives, and arrives as zero.
#[test]
fn a_zero_source_delivers_zeros_with_small_and_large_blocks() {
    setup();
    assert!(ZeroSource::new(1).file().is_some(), "no memfd: the sendfile path goes untested");
    assert!(ZeroSource::in_memory(1).file().is_none());
    let (mem, fd): (MakeZeros, MakeZeros) = (ZeroSource::in_memory, ZeroSource::new);
    for (block, zeros) in [(300_001, mem), (2 << 20, mem), (300_001, fd)] {
        let len = 5 * block + 12_345;
        let (mut s, mut r) = pair(3);
        let plan = SendPlan { ranges: vec![(0, len)], wire_base: 0, block, grow: None };
        let sink = ZeroCheckSink::default();
        std::thread::scope(|sc| {
            let h = sc.spawn(|| modee::send(&mut s, &zeros(len), &plan, &Control::new()).unwrap());
            modee::recv(&mut r, None, &sink, &opts(), &Control::new()).unwrap();
            assert_eq!(h.join().unwrap(), len);
        });
        assert_eq!(sink.written.into_inner(), len, "block {block}");
        assert_eq!(sink.nonzero.into_inner(), 0, "block {block}");
    }
}

/// Block lengths of one MODE E transfer read raw from `conn`, to its EOD.
fn block_lens(conn: &mut std::net::TcpStream) -> Vec<u64> {
    let mut lens = Vec::new();
    loop {
        let mut h = [0u8; 17];
        conn.read_exact(&mut h).unwrap();
        let h = lightpath_proto::BlockHeader::parse(&h).unwrap();
        std::io::copy(&mut conn.by_ref().take(h.payload_len()), &mut std::io::sink()).unwrap();
        if h.payload_len() > 0 {
            lens.push(h.payload_len());
        }
        if h.is_eod() {
            return lens;
        }
    }
}

/// Blocks grow ([`Growth`]) only where they go with `sendfile`: a block
/// read into a pool buffer is at most the plan's base block.
#[test]
fn only_blocks_sent_from_files_grow() {
    setup();
    let len = 16usize << 20;
    let mut f = tempfile::tempfile().unwrap();
    std::io::Write::write_all(&mut f, &data(len, 9)).unwrap();
    let grow = Some(lightpath_engine::Growth { max: 1 << 20, streams: 1 });
    let plan = SendPlan { ranges: vec![(0, len as u64)], wire_base: 0, block: 256 << 10, grow };
    let sources: [(Box<dyn Source>, u64); 2] = [
        (Box::new(lightpath_engine::FileSource::new(f.try_clone().unwrap(), true).unwrap()), 1 << 20),
        (Box::new(lightpath_engine::FileSource::new(f, false).unwrap()), 256 << 10),
    ];
    for (src, largest) in sources {
        let (mut s, mut r) = pair(1);
        let lens = std::thread::scope(|sc| {
            sc.spawn(|| modee::send(&mut s, src.as_ref(), &plan, &Control::new()).unwrap());
            block_lens(&mut r[0])
        });
        assert_eq!(lens.iter().sum::<u64>(), len as u64);
        assert_eq!(lens.iter().max(), Some(&largest), "{lens:?}");
    }
}

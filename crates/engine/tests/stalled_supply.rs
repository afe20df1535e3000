//! A send whose source has nothing yet (a tree whose walk is behind) does
//! not hold the shared disk threads: with one disk thread in the process,
//! another transfer runs to the end while the first one's supply is stalled,
//! and the stalled one waits on its own management thread.
//! (Its own test binary: the thread counts are process-wide.)

mod common;
use common::pair;
use lightpath_engine::iothreads::{self, IoConfig};
use lightpath_engine::modee::{self, OutBlock, Payload, Supply};
use lightpath_engine::{BytesSource, Control, MemorySink, RecvOpts, SendPlan, Source};
use std::collections::BTreeSet;
use std::io;
use std::sync::{mpsc, Condvar, Mutex};
use std::time::Duration;

/// Hands out `blocks` blocks of `len` bytes, but only once released;
/// until then it says `WouldBlock`. Records the threads that waited.
struct Stalled {
    released: Mutex<bool>,
    cv: Condvar,
    left: Mutex<u64>,
    len: u64,
    waiters: Mutex<BTreeSet<String>>,
}

impl Stalled {
    fn release(&self) {
        *self.released.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

impl Supply<'static> for Stalled {
    fn next(&self) -> io::Result<Option<OutBlock<'static>>> {
        if !*self.released.lock().unwrap() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mut left = self.left.lock().unwrap();
        if *left == 0 {
            return Ok(None);
        }
        *left -= 1;
        let payload = Payload::Bytes(vec![(*left % 251) as u8; self.len as usize]);
        Ok(Some(OutBlock { wire_offset: *left * self.len, len: self.len, payload, apart: None }))
    }
    fn wait(&self, timeout: Duration) {
        let name = std::thread::current().name().unwrap_or("?").to_string();
        self.waiters.lock().unwrap().insert(name);
        let g = self.released.lock().unwrap();
        let _ = self.cv.wait_timeout_while(g, timeout, |r| !*r).unwrap();
    }
}

fn recv_opts() -> RecvOpts {
    RecvOpts { base: 0, max_offset: 1 << 40, idle: Duration::from_secs(60) }
}

#[test]
fn a_stalled_supply_leaves_the_disk_threads_to_other_transfers() {
    iothreads::configure(IoConfig { net_threads: 1, disk_threads: 1 }).unwrap();
    let stalled = Stalled {
        released: Mutex::new(false),
        cv: Condvar::new(),
        left: Mutex::new(8),
        len: 64 << 10,
        waiters: Mutex::new(BTreeSet::new()),
    };
    let (mut sa, mut ra) = pair(2);
    let (mut sb, mut rb) = pair(2);
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i % 253) as u8).collect();
    let src = BytesSource(data.clone());
    let (sink_a, sink_b) = (MemorySink::new(1 << 30), MemorySink::new(1 << 30));
    std::thread::scope(|sc| {
        let a_sent = sc.spawn(|| modee::send_blocks(&mut sa, &stalled, &Control::new()).unwrap());
        let a_got = sc.spawn(|| modee::recv(&mut ra, None, &sink_a, &recv_opts(), &Control::new()).unwrap());
        // B reads its blocks on the only disk thread while A is stalled.
        let (done_tx, done_rx) = mpsc::channel();
        sc.spawn(|| {
            let plan = SendPlan { ranges: vec![(0, src.len())], wire_base: 0, block: 256 << 10, grow: None };
            modee::send(&mut sb, &src, &plan, &Control::new()).unwrap();
        });
        sc.spawn(move || {
            modee::recv(&mut rb, None, &sink_b, &recv_opts(), &Control::new()).unwrap();
            done_tx.send(sink_b.into_inner()).unwrap();
        });
        let got_b = done_rx.recv_timeout(Duration::from_secs(60));
        // Release A whatever happened, so that the scope can end.
        stalled.release();
        let got_b = got_b.expect("a stalled supply held the only disk thread: the other transfer never ended");
        assert!(got_b == data, "the other transfer's bytes");
        assert_eq!(a_sent.join().unwrap(), 8 * (64 << 10));
        assert_eq!(a_got.join().unwrap().covered(), 8 * (64 << 10));
    });
    let a = sink_a.into_inner();
    assert!((0..8u64).all(|i| a[(i * (64 << 10)) as usize] == (i % 251) as u8), "A's blocks in place");
    let waiters = stalled.waiters.lock().unwrap().clone();
    assert!(!waiters.is_empty(), "A waited for its supply");
    assert!(waiters.iter().all(|n| !n.starts_with("lp-disk-")), "never on a disk thread: {waiters:?}");
}

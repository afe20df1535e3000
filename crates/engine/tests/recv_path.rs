//! Which way a receive into a file moves its bytes when nothing forces it
//! (no `set_recv_splice`, no `LIGHTPATH_RECV_SPLICE`): over loopback it
//! splices, so no pool buffer is taken. Its own test binary, so that no
//! other test forced the process-wide choice first.

mod common;
use common::pair;
use lightpath_engine::{iothreads, modee, Control, FileSink, FileSource, RecvOpts, SendPlan};
use std::io::{Read, Seek, Write};
use std::time::Duration;

#[test]
fn a_file_received_over_loopback_is_spliced() {
    assert!(std::env::var_os("LIGHTPATH_RECV_SPLICE").is_none(), "the test needs the default path");
    let bytes: Vec<u8> = (0..6_000_000u32).map(|i| (i * 31 + i / 4093) as u8).collect();
    let mut from = tempfile::tempfile().unwrap();
    from.write_all(&bytes).unwrap();
    // The sender uses sendfile, so pool buffers could only be the receiver's.
    let src = FileSource::new(from, true).unwrap();
    let plan = SendPlan { ranges: vec![(0, bytes.len() as u64)], wire_base: 0, block: 256 << 10, grow: None };
    let (mut s, mut r) = pair(4);
    let mut to = tempfile::tempfile().unwrap();
    let opts = RecvOpts { base: 0, max_offset: 1 << 40, idle: Duration::from_secs(10) };
    std::thread::scope(|sc| {
        sc.spawn(|| modee::send(&mut s, &src, &plan, &Control::new()).unwrap());
        modee::recv(&mut r, None, &FileSink(&to), &opts, &Control::new()).unwrap();
    });
    let mut got = Vec::new();
    to.rewind().unwrap();
    to.read_to_end(&mut got).unwrap();
    assert!(got == bytes, "file differs");
    let stats = iothreads::pool_stats().expect("I/O threads run");
    assert_eq!(stats.high_water, 0, "a pool buffer was used: the bytes were copied, not spliced");
}

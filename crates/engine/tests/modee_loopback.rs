//! MODE E sender and receiver against each other, and against hand-made
//! hostile block streams.

mod common;
use common::pair;
use lightpath_engine::{modee, BytesSource, Control, MemorySink, RecvOpts, SendPlan};
use lightpath_proto::BlockHeader;
use std::io::Write;
use std::time::Duration;

fn opts() -> RecvOpts {
    RecvOpts { base: 0, max_offset: 1 << 40, idle: Duration::from_secs(10) }
}

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn parallel_streams_roundtrip_and_reuse() {
    let (mut s, mut r) = pair(4);
    for round in 0..3 {
        let bytes = data(3_000_000 + round * 1234);
        let src = BytesSource(bytes.clone());
        let plan = SendPlan { ranges: vec![(0, bytes.len() as u64)], wire_base: 0, block: 65536, grow: None };
        let sink = MemorySink::new(1 << 30);
        let ctl = Control::new();
        std::thread::scope(|sc| {
            let h = sc.spawn(|| modee::send(&mut s, &src, &plan, &Control::new()).unwrap());
            modee::recv(&mut r, None, &sink, &opts(), &ctl).unwrap();
            assert_eq!(h.join().unwrap(), bytes.len() as u64);
        });
        assert_eq!(r.len(), 4, "connections kept for reuse");
        assert_eq!(sink.into_inner(), bytes);
    }
}

fn recv_raw(frames: &[(BlockHeader, Vec<u8>)], close_after: bool) -> Result<Vec<u8>, String> {
    let (mut s, mut r) = pair(1);
    let mut wire = Vec::new();
    for (h, p) in frames {
        wire.extend_from_slice(&h.encode());
        wire.extend_from_slice(p);
    }
    s[0].write_all(&wire).unwrap();
    if close_after {
        s.clear();
    }
    let sink = MemorySink::new(1 << 20);
    modee::recv(&mut r, None, &sink, &opts(), &Control::new()).map_err(|e| e.to_string())?;
    Ok(sink.into_inner())
}

#[test]
fn out_of_order_blocks_are_fine() {
    let got = recv_raw(
        &[
            (BlockHeader::data(3, 3), b"def".to_vec()),
            (BlockHeader::eof_eod(1), vec![]),
            (BlockHeader::data(0, 3), b"abc".to_vec()),
        ],
        false,
    );
    // EOF|EOD ends this stream: the block after it belongs to no transfer.
    assert_eq!(got.unwrap(), b"\0\0\0def");
}

#[test]
fn hostile_streams_fail_cleanly() {
    let overlap =
        recv_raw(&[(BlockHeader::data(0, 4), b"abcd".to_vec()), (BlockHeader::data(2, 2), b"xx".to_vec())], false);
    assert!(overlap.unwrap_err().contains("overlapping"));
    let early = recv_raw(&[(BlockHeader::data(0, 4), b"abcd".to_vec())], true);
    assert!(early.unwrap_err().contains("closed"));
    let mut bad = BlockHeader::data(0, 0);
    bad.desc.0 = 0x10;
    assert!(recv_raw(&[(bad, vec![])], false).unwrap_err().contains("unsupported"));
    let huge = recv_raw(&[(BlockHeader::data(u64::MAX - 2, 4), vec![])], false);
    assert!(huge.is_err());
}

/// Tiny blocks sent apart (at falling offsets, the worst order for a
/// sorted list) are refused once they leave 65536 separate ranges.
#[test]
fn tiny_blocks_apart_are_refused_before_they_add_up() {
    let (mut s, mut r) = pair(1);
    let mut sender = s.pop().unwrap();
    let n = (1u64 << 16) + 10;
    let writer = std::thread::spawn(move || {
        let mut wire = Vec::new();
        for i in (0..n).rev() {
            wire.extend_from_slice(&BlockHeader::data(2 * i, 1).encode());
            wire.push(b'x');
        }
        // The receiver stops reading once it refuses: what it did not read is lost.
        let _ = sender.write_all(&wire);
    });
    let sink = MemorySink::new(1 << 20);
    let e = modee::recv(&mut r, None, &sink, &opts(), &Control::new()).unwrap_err().to_string();
    assert!(e.contains("over 65536 separate ranges"), "{e}");
    drop(r);
    writer.join().unwrap();
}

/// A sender that announces one stream but sends on two ends the transfer
/// with a block still coming: its range must not pass for received.
#[test]
fn a_block_cut_short_by_the_end_fails_the_transfer() {
    let (mut s, mut r) = pair(2);
    // The receiver reads the cut block first, then the other stream's end.
    let writer = std::thread::spawn(move || {
        s[1].write_all(&BlockHeader::data(4, 4).encode()).unwrap();
        s[1].write_all(b"ef").unwrap();
        std::thread::sleep(Duration::from_millis(300));
        s[0].write_all(&BlockHeader::data(0, 4).encode()).unwrap();
        s[0].write_all(b"abcd").unwrap();
        s[0].write_all(&BlockHeader::eof_eod(1).encode()).unwrap();
        s
    });
    let sink = MemorySink::new(1 << 20);
    let e = modee::recv(&mut r, None, &sink, &opts(), &Control::new()).unwrap_err().to_string();
    assert!(e.contains("bytes short of its blocks"), "{e}");
    drop(writer.join().unwrap());
}

/// A block that takes longer than the idle limit to leave, while its
/// bytes keep moving, is not an idle transfer.
#[test]
fn a_slow_but_moving_block_is_not_idle() {
    let (mut s, mut r) = pair(1);
    socket2::SockRef::from(&s[0]).set_send_buffer_size(64 << 10).unwrap();
    socket2::SockRef::from(&r[0]).set_recv_buffer_size(64 << 10).unwrap();
    s[0].set_write_timeout(Some(Duration::from_millis(300))).unwrap();
    let len = 2u64 << 20;
    let src = BytesSource(data(len as usize));
    let plan = SendPlan { ranges: vec![(0, len)], wire_base: 0, block: len, grow: None };
    let mut reader = r.pop().unwrap();
    // About 1.6 MB/s: each 1 MiB takes over twice the idle limit.
    let slow = std::thread::spawn(move || {
        let (mut buf, mut got) = (vec![0u8; 32 << 10], 0u64);
        loop {
            std::thread::sleep(Duration::from_millis(20));
            match std::io::Read::read(&mut reader, &mut buf) {
                Ok(0) | Err(_) => return got,
                Ok(n) => got += n as u64,
            }
        }
    });
    let sent = modee::send(&mut s, &src, &plan, &Control::new());
    drop(s);
    assert_eq!(sent.map_err(|e| e.to_string()), Ok(len));
    assert!(slow.join().unwrap() >= len);
}

/// A sink that keeps nothing still hears of every byte, as ranges for the
/// restart markers, once the receive returns.
#[test]
fn a_discarding_sink_reports_every_range() {
    let (mut s, mut r) = pair(4);
    let len = 5_000_000u64 + 17;
    let src = BytesSource(data(len as usize));
    let plan = SendPlan { ranges: vec![(0, len)], wire_base: 0, block: 100_000, grow: None };
    let ctl = Control::new();
    std::thread::scope(|sc| {
        let h = sc.spawn(|| modee::send(&mut s, &src, &plan, &Control::new()).unwrap());
        let claimed = modee::recv(&mut r, None, &lightpath_engine::NullSink, &opts(), &ctl).unwrap();
        assert_eq!(h.join().unwrap(), len);
        assert_eq!(claimed.ranges(), &[(0, len)]);
    });
    assert_eq!(ctl.bytes(), len);
    assert_eq!(ctl.take_written().ranges(), &[(0, len)]);
}

/// Hostile streams fail the same way when nothing is kept.
#[test]
fn a_discarding_sink_still_refuses_hostile_streams() {
    let run = |frames: &[(BlockHeader, &[u8])], close: bool| {
        let (mut s, mut r) = pair(1);
        for (h, p) in frames {
            s[0].write_all(&h.encode()).unwrap();
            s[0].write_all(p).unwrap();
        }
        if close {
            s.clear();
        }
        modee::recv(&mut r, None, &lightpath_engine::NullSink, &opts(), &Control::new()).map_err(|e| e.to_string())
    };
    let overlap = run(&[(BlockHeader::data(0, 4), b"abcd"), (BlockHeader::data(2, 2), b"xx")], false);
    assert!(overlap.unwrap_err().contains("overlapping"));
    let early = run(&[(BlockHeader::data(0, 4), b"ab")], true);
    assert!(early.unwrap_err().contains("closed"));
    let ok = run(&[(BlockHeader::data(0, 4), b"abcd"), (BlockHeader::eof_eod(1), b"")], false);
    assert_eq!(ok.unwrap().ranges(), &[(0, 4)]);
}

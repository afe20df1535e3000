//! Direct-I/O sinks and sources write and read exact bytes for any offsets,
//! lengths and memory alignment, on a disk (ext4 under /var/tmp: direct)
//! and on tmpfs (/dev/shm: buffered fallback).

use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;

use lightpath_engine::dio::{DirectFileSink, DirectFileSource, IoMode};
use lightpath_engine::io::{Sink, Source};
use lightpath_engine::pool::{BufferPool, PoolOptions};

const DISK: &str = "/var/tmp";
const SHM: &str = "/dev/shm";

/// The byte expected at file position `i`.
fn byte_at(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ (i >> 20) as u8
}

fn expected(offset: u64, len: usize) -> Vec<u8> {
    (offset..offset + len as u64).map(byte_at).collect()
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Cut `[0, size)` into blocks: some 4 KiB-aligned, some arbitrary.
fn blocks(rng: &mut Rng, size: u64) -> Vec<(u64, usize)> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < size {
        let len = match rng.below(4) {
            0 => (1 + rng.below(64)) * 4096,
            1 => 1 + rng.below(5000),
            _ => 1 + rng.below(700_000),
        };
        let len = len.min(size - off);
        out.push((off, len as usize));
        off += len;
    }
    for i in (1..out.len()).rev() {
        out.swap(i, rng.below(i as u64 + 1) as usize);
    }
    out
}

/// Write `blocks` from 3 threads, the caller's memory aligned or not.
fn write_blocks(sink: &(impl Sink + ?Sized), blocks: &[(u64, usize)]) {
    let pool = BufferPool::new(&PoolOptions { count: 3, size: 1 << 20, ..Default::default() }).expect("pool");
    std::thread::scope(|s| {
        for t in 0..3 {
            let pool = pool.clone();
            s.spawn(move || {
                for (i, &(off, len)) in blocks.iter().enumerate().filter(|(i, _)| i % 3 == t) {
                    let data = expected(off, len);
                    if i % 2 == 0 && len <= pool.buf_size() {
                        let mut pb = pool.get();
                        pb.set_len(len);
                        pb.copy_from_slice(&data);
                        sink.write_all_at(&pb, off).expect("aligned write");
                    } else {
                        let mut v = vec![0u8; len + 1];
                        v[1..].copy_from_slice(&data);
                        sink.write_all_at(&v[1..], off).expect("unaligned write");
                    }
                }
            });
        }
    });
}

fn check_file(f: &File, size: u64) {
    assert_eq!(f.metadata().expect("meta").len(), size);
    let mut back = vec![0u8; size as usize];
    f.read_exact_at(&mut back, 0).expect("read back");
    if let Some(i) = (0..size as usize).find(|&i| back[i] != byte_at(i as u64)) {
        panic!("first wrong byte at {i} of {size}");
    }
}

fn sink_round(dir: &str, seed: u64) -> lightpath_engine::dio::DirectStats {
    let mut rng = Rng(seed);
    let size = 8_000_000 + rng.below(3_000_000);
    let f = tempfile::tempfile_in(dir).expect("temp file");
    let check = f.try_clone().expect("clone");
    let sink = DirectFileSink::new(f, Some(size)).expect("sink");
    write_blocks(&sink, &blocks(&mut rng, size));
    check_file(&check, size);
    sink.stats()
}

#[test]
fn direct_sink_writes_exact_bytes_on_disk() {
    let f = tempfile::tempfile_in(DISK).expect("temp");
    let mode = DirectFileSink::new(f, None).expect("sink").mode();
    assert!(matches!(mode, IoMode::Direct(_)), "ext4 must take direct I/O: {mode}");
    for seed in [1, 2, 3, 0x5eed] {
        let st = sink_round(DISK, seed);
        assert!(st.direct > 0 && st.buffered > 0 && st.copied > 0, "every path used: {st:?}");
        assert!(st.copied <= st.direct);
    }
}

#[test]
fn sink_falls_back_to_buffered_on_tmpfs() {
    let f = tempfile::tempfile_in(SHM).expect("temp");
    let sink = DirectFileSink::new(f, None).expect("sink");
    assert!(matches!(sink.mode(), IoMode::Buffered(_)), "{}", sink.mode());
    for seed in [7, 8] {
        let st = sink_round(SHM, seed);
        assert_eq!((st.direct, st.copied), (0, 0), "{st:?}");
        assert!(st.buffered > 8_000_000);
    }
}

#[test]
fn buffered_by_choice_says_so() {
    let f = tempfile::tempfile_in(DISK).expect("temp");
    let sink = DirectFileSink::buffered(f, None).expect("sink");
    match sink.mode() {
        IoMode::Buffered(why) => assert!(why.contains("not asked"), "{why}"),
        m => panic!("{m}"),
    }
    sink.write_all_at(&[1u8; 1 << 20], 0).expect("write");
    assert_eq!(sink.stats().direct, 0);
}

#[test]
fn sink_preallocates_known_size() {
    use std::os::unix::fs::MetadataExt;
    let f = tempfile::tempfile_in(DISK).expect("temp");
    let sink = DirectFileSink::new(f, Some(16 << 20)).expect("sink");
    let m = sink.file().metadata().expect("meta");
    assert_eq!(m.len(), 0, "size kept at 0");
    assert!(m.blocks() * 512 >= 16 << 20, "{} blocks allocated", m.blocks());
}

#[test]
fn sink_uses_the_given_pool_for_unaligned_memory() {
    let pool = BufferPool::new(&PoolOptions { count: 2, size: 256 << 10, ..Default::default() }).expect("pool");
    let f = tempfile::tempfile_in(DISK).expect("temp");
    let check = f.try_clone().expect("clone");
    let sink = DirectFileSink::new(f, None).expect("sink").with_pool(pool.clone());
    let data = expected(0, 1 << 20);
    let mut v = vec![0u8; data.len() + 1];
    v[1..].copy_from_slice(&data);
    sink.write_all_at(&v[1..], 0).expect("write");
    assert_eq!(pool.stats().high_water, 1);
    assert_eq!(sink.stats().copied, 1 << 20);
    check_file(&check, 1 << 20);
}

fn source_round(dir: &str, direct: bool) {
    let size = 5_000_000u64 + 1234;
    let f = tempfile::tempfile_in(dir).expect("temp");
    f.write_all_at(&expected(0, size as usize), 0).expect("fill");
    let src = DirectFileSource::new(f, false).expect("source");
    assert_eq!(src.len(), size);
    assert_eq!(matches!(src.mode(), IoMode::Direct(_)), direct, "{}", src.mode());
    let mut rng = Rng(99);
    let mut aligned = lightpath_sys::mem::AlignedBuf::new(1 << 20, 4096).expect("buf");
    for i in 0..200 {
        let len = 1 + rng.below(if i % 3 == 0 { 4096 } else { 1 << 20 }) as usize;
        let off = if i % 2 == 0 { rng.below(size - len as u64) / 4096 * 4096 } else { rng.below(size - len as u64) };
        let off = if i == 0 { size - len as u64 } else { off };
        let mut v = vec![0u8; len + 1];
        let buf: &mut [u8] = if i % 4 < 2 { &mut aligned[..len] } else { &mut v[1..] };
        src.read_exact_at(buf, off).expect("read");
        assert!(buf == &expected(off, len)[..], "range {off}+{len} differs");
    }
    let e = src.read_exact_at(&mut aligned[..8192], size - 4096).expect_err("past the end");
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
    let st = src.stats();
    assert_eq!(st.direct > 0 && st.copied > 0, direct, "{st:?}");
}

#[test]
fn direct_source_reads_exact_bytes_on_disk() {
    source_round(DISK, true);
}

#[test]
fn source_falls_back_to_buffered_on_tmpfs() {
    source_round(SHM, false);
}

#[test]
fn source_offers_its_file_for_sendfile_only_when_asked() {
    let f = tempfile::tempfile_in(DISK).expect("temp");
    let g = f.try_clone().expect("clone");
    assert!(DirectFileSource::new(f, true).expect("source").file().is_some());
    assert!(DirectFileSource::new(g, false).expect("source").file().is_none());
}

/// Write pieces `lens` long, holding the file's bytes from `off`, from
/// pool buffers with one `write_vectored_at`.
fn write_pieces(sink: &DirectFileSink, pool: &BufferPool, off: u64, lens: &[usize]) {
    let mut at = off;
    let mut pieces = Vec::new();
    for &len in lens {
        let mut pb = pool.get();
        pb.set_len(len);
        pb.copy_from_slice(&expected(at, len));
        pieces.push(pb);
        at += len as u64;
    }
    let bufs: Vec<&[u8]> = pieces.iter().map(|b| &b[..]).collect();
    sink.write_vectored_at(&bufs, off).expect("write");
}

/// A sink for a new file of `size` bytes in `dir`, the file to check it
/// with, and a pool of 1 MiB buffers.
fn vectored_setup(dir: &str, size: u64) -> (DirectFileSink, File, BufferPool) {
    let f = tempfile::tempfile_in(dir).expect("temp");
    let check = f.try_clone().expect("clone");
    let sink = DirectFileSink::new(f, Some(size)).expect("sink");
    let pool = BufferPool::new(&PoolOptions { count: 4, size: 1 << 20, ..Default::default() }).expect("pool");
    (sink, check, pool)
}

#[test]
fn vectored_writes_go_direct_as_one_run_and_the_rest_piece_by_piece() {
    let size = 5 << 20;
    let (sink, check, pool) = vectored_setup(DISK, size);
    // Aligned run of three, then one that is not a whole number of pages.
    write_pieces(&sink, &pool, 0, &[1 << 20, 1 << 20, 1 << 20, (1 << 20) - 100]);
    let st = sink.stats();
    assert_eq!(st.direct, (3 << 20) + (1 << 20) - 4096, "{st:?}");
    assert_eq!(st.buffered, 4096 - 100, "{st:?}");
    // The rest from an unaligned offset: no direct run, each piece split.
    write_pieces(&sink, &pool, (4 << 20) - 100, &[100, (1 << 20) - 8192, 8192]);
    assert_eq!(sink.stats().copied, 0, "pool memory is aligned: {:?}", sink.stats());
    check_file(&check, size);
}

#[test]
fn vectored_writes_on_tmpfs_are_buffered_and_exact() {
    let size = 3 << 20;
    let (sink, check, pool) = vectored_setup(SHM, size);
    write_pieces(&sink, &pool, 0, &[1 << 20, 1 << 20, 1 << 20]);
    assert_eq!((sink.stats().direct, sink.stats().buffered), (0, size), "{:?}", sink.stats());
    check_file(&check, size);
}

/// A direct-I/O source tells that its file changed since it was opened, as
/// a buffered one does: a server's download read so (a large, uncached file
/// to a client on the same host) sent a rewritten file's bytes as whole (a
/// review's find).
#[test]
fn a_direct_source_tells_a_changed_file() {
    for buffered in [false, true] {
        let f = tempfile::tempfile_in(DISK).expect("temp");
        f.write_all_at(&expected(0, 1 << 20), 0).expect("fill");
        let g = f.try_clone().expect("clone");
        let src = if buffered { DirectFileSource::buffered(f, false) } else { DirectFileSource::new(f, false) };
        let src = src.expect("source");
        src.unchanged().expect("unchanged");
        g.write_all_at(b"more", 1 << 20).expect("append");
        let e = src.unchanged().expect_err("grown");
        assert!(e.to_string().contains("changed while being read"), "{e}");
    }
}

/// A file rewritten in place to the same size is told apart by its
/// modification time, and the error says so rather than quoting two equal
/// sizes (a defect hunt's find: "1048576 bytes when opened, 1048576 now").
#[test]
fn a_same_size_rewrite_is_told_by_its_modification_time() {
    let f = tempfile::tempfile_in(DISK).expect("temp");
    f.write_all_at(&expected(0, 1 << 20), 0).expect("fill");
    f.set_modified(std::time::SystemTime::UNIX_EPOCH).expect("old mtime");
    let g = f.try_clone().expect("clone");
    let src = DirectFileSource::buffered(f, false).expect("source");
    g.write_all_at(b"same size", 0).expect("rewrite");
    let e = src.unchanged().expect_err("rewritten").to_string();
    assert!(e.contains("modification time moved"), "{e}");
    assert!(!e.contains("now)"), "{e}");
}

//! The virtual file end to end: pack a generated tree, scramble what the
//! sender produced (blocks shuffled, random block sizes, the manifest cut at
//! random points and interleaved with the blocks), unpack, compare. Then
//! hostile manifests and interrupted transfers.

use lightpath_engine::vfile::{self, Pack, PackItem, PackOptions, UnpackOptions, Unpacker, VfileError};
use lightpath_engine::vfile_chan::{recv_opts, send_pack, VfileSink, MANIFEST_BASE};
use lightpath_engine::Source;
use lightpath_engine::{Control, DataChannel, Sink};
use lightpath_proto::manifest::{self, Entry, Kind, ManifestError, Summary};
use lightpath_sys::root::Root;
use std::collections::HashMap;
use std::fs::{self, File, FileTimes};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

// ---------------------------------------------------------------- helpers

/// xorshift64*: reproducible randomness without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

/// `src/`, `dst/` and a sentinel `outside/` that nothing may touch.
struct Scratch {
    _dir: tempfile::TempDir,
    base: PathBuf,
}

impl Scratch {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().to_path_buf();
        for d in ["src", "dst", "outside"] {
            fs::create_dir(base.join(d)).unwrap();
        }
        fs::write(base.join("outside/sentinel"), b"untouched").unwrap();
        Scratch { _dir: dir, base }
    }
    fn p(&self, rel: &str) -> PathBuf {
        self.base.join(rel)
    }
    fn root(&self, rel: &str) -> Arc<Root> {
        Arc::new(Root::open(&self.p(rel)).unwrap())
    }
    fn assert_outside_untouched(&self) {
        let names: Vec<_> = fs::read_dir(self.p("outside")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("sentinel")], "something was created outside");
        assert_eq!(fs::read(self.p("outside/sentinel")).unwrap(), b"untouched");
    }
}

fn set_mtime(p: &Path, secs: u64, nanos: u32) {
    let t = UNIX_EPOCH + Duration::new(secs, nanos);
    File::open(p).unwrap().set_times(FileTimes::new().set_modified(t)).unwrap();
}

fn osp(base: &Path, rel: &[u8]) -> PathBuf {
    base.join(std::ffi::OsStr::from_bytes(rel))
}

/// A tree with every awkward thing the issue lists.
fn make_tree(src: &Path, rng: &mut Rng) {
    let w = |rel: &[u8], data: &[u8]| fs::write(osp(src, rel), data).unwrap();
    let md = |rel: &[u8]| fs::create_dir_all(osp(src, rel)).unwrap();
    md(b"a b");
    w(b"a b/c\nd", b"newline in the name");
    w(b"\xff\xfe not utf-8", b"latin-1");
    md(b"empty dir");
    w(b"empty file", b"");
    let long = vec![b'L'; 255];
    w(&long, b"long name");
    md(b"many");
    for i in 0..300 {
        let n = rng.below(6000) as usize;
        w(format!("many/f{i:03}").as_bytes(), &rng.bytes(n));
    }
    w(b"big", &rng.bytes(3 << 20 | 12345));
    w(b"medium", &rng.bytes(100_000));
    let deep: Vec<u8> = (0..60).map(|i| format!("d{i:02}")).collect::<Vec<_>>().join("/").into_bytes();
    md(&deep);
    w(&[deep.as_slice(), b"/leaf"].concat(), b"deep");
    fs::hard_link(src.join("medium"), src.join("many/medium-link")).unwrap();
    fs::hard_link(src.join("empty file"), src.join("a b/empty-link")).unwrap();
    std::os::unix::fs::symlink("c\nd", src.join("a b/link")).unwrap();
    std::os::unix::fs::symlink("../a b", src.join("many/dirlink")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/abs", src.join("dangling")).unwrap();
    fs::set_permissions(src.join("medium"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(src.join("big"), fs::Permissions::from_mode(0o751)).unwrap();
    // Modes the umask would strip at creation, and the sticky bit.
    fs::set_permissions(src.join("many/f000"), fs::Permissions::from_mode(0o666)).unwrap();
    fs::set_permissions(src.join("many/f001"), fs::Permissions::from_mode(0o1644)).unwrap();
    fs::set_permissions(src.join("empty dir"), fs::Permissions::from_mode(0o555)).unwrap();
    set_mtime(&src.join("medium"), 1_000_000_000, 123_456_789);
    set_mtime(&src.join("many"), 1_500_000_000, 7);
    set_mtime(&src.join("empty dir"), 1_600_000_000, 0);
}

/// Special files the packer must skip.
fn make_specials(src: &Path) -> std::os::unix::net::UnixListener {
    let ok = std::process::Command::new("mkfifo").arg(src.join("fifo")).status().map(|s| s.success());
    assert!(matches!(ok, Ok(true)), "mkfifo failed");
    std::os::unix::net::UnixListener::bind(src.join("socket")).unwrap()
}

/// Everything a pack produced: the manifest stream and the blocks.
struct Sent {
    manifest: Vec<u8>,
    blocks: Vec<(u64, Vec<u8>)>,
}

/// Take every item the sender would put on the wire, in the order it hands
/// them out (manifest chunks and blocks of random sizes).
fn send_all(pack: &Pack, rng: &mut Rng, max_block: u64) -> Sent {
    let _dog = Watchdog::new();
    let reader = pack.reader();
    let (mut manifest, mut blocks) = (Vec::new(), Vec::new());
    while let Some(item) = pack.next_item(1 + rng.below(max_block)).unwrap() {
        match item {
            PackItem::Manifest { bytes, .. } => manifest.extend_from_slice(&bytes),
            PackItem::Data { offset, len } => {
                let mut buf = vec![0; len as usize];
                reader.read_exact_at(&mut buf, offset).unwrap();
                blocks.push((offset, buf));
            }
        }
    }
    assert_eq!(reader.len(), pack.total().unwrap());
    Sent { manifest, blocks }
}

/// Aborts the test binary if a test hangs (a deadlock must fail, not stall CI).
struct Watchdog(#[allow(dead_code)] std::sync::mpsc::Sender<()>);

impl Watchdog {
    fn new() -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if rx.recv_timeout(Duration::from_secs(120)) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                eprintln!("vfile test hung for 120 s");
                std::process::abort();
            }
        });
        Watchdog(tx)
    }
}

enum Ev {
    Manifest(Vec<u8>),
    Block(u64, Vec<u8>),
}

/// Manifest cut at random points, blocks shuffled, both interleaved at random.
fn scramble(sent: Sent, rng: &mut Rng) -> Vec<Ev> {
    let mut pieces = Vec::new();
    let mut pos = 0;
    while pos < sent.manifest.len() {
        let n = (1 + rng.below(3000) as usize).min(sent.manifest.len() - pos);
        pieces.push(sent.manifest[pos..pos + n].to_vec());
        pos += n;
    }
    let mut blocks = sent.blocks;
    rng.shuffle(&mut blocks);
    let (mut m, mut b) = (pieces.into_iter().peekable(), blocks.into_iter().peekable());
    let mut out = Vec::new();
    while m.peek().is_some() || b.peek().is_some() {
        let take_m = b.peek().is_none() || (m.peek().is_some() && rng.below(3) == 0);
        match take_m {
            true => out.push(Ev::Manifest(m.next().unwrap())),
            false => {
                let (o, d) = b.next().unwrap();
                out.push(Ev::Block(o, d));
            }
        }
    }
    out
}

fn deliver(u: &Unpacker, evs: Vec<Ev>) -> Result<(), VfileError> {
    for ev in evs {
        match ev {
            Ev::Manifest(m) => u.manifest_bytes(&m)?,
            Ev::Block(o, d) => u.write_block(o, &d)?,
        }
    }
    Ok(())
}

fn small_pack_opts() -> PackOptions {
    PackOptions { small_file: 16 << 10, chunk_bytes: 700, chunk_data: 50_000, ..PackOptions::default() }
}

/// Relative paths beneath `base` with their `lstat`, recursively.
fn walk(base: &Path) -> HashMap<Vec<u8>, fs::Metadata> {
    let mut out = HashMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in fs::read_dir(base.join(&rel)).unwrap() {
            let e = e.unwrap();
            let r = rel.join(e.file_name());
            let m = fs::symlink_metadata(base.join(&r)).unwrap();
            if m.is_dir() {
                stack.push(r.clone());
            }
            out.insert(r.as_os_str().as_bytes().to_vec(), m);
        }
    }
    out
}

fn is_temp(name: &[u8]) -> bool {
    name.ends_with(b".part") && name.windows(3).any(|w| w == b".lp")
}

/// `dst` holds exactly the packable part of `src`, with modes and mtimes.
fn assert_same_tree(src: &Path, dst: &Path) {
    let (s, d) = (walk(src), walk(dst));
    let packable = |m: &fs::Metadata| m.is_dir() || m.is_file() || m.file_type().is_symlink();
    let expected: Vec<_> = s.iter().filter(|(_, m)| packable(m)).map(|(p, _)| p.clone()).collect();
    assert_eq!(d.len(), expected.len(), "entry count (temp files left or specials copied?)");
    for p in &expected {
        let (sm, dm) = (&s[p], d.get(p).unwrap_or_else(|| panic!("missing {}", manifest::show(p))));
        assert_eq!(sm.file_type(), dm.file_type(), "type of {}", manifest::show(p));
        assert_eq!(sm.mtime(), dm.mtime(), "mtime of {}", manifest::show(p));
        assert_eq!(sm.mtime_nsec(), dm.mtime_nsec(), "mtime ns of {}", manifest::show(p));
        if sm.file_type().is_symlink() {
            assert_eq!(fs::read_link(osp(src, p)).unwrap(), fs::read_link(osp(dst, p)).unwrap());
            continue;
        }
        assert_eq!(sm.mode() & 0o1777, dm.mode() & 0o1777, "mode of {}", manifest::show(p));
        if sm.is_file() {
            assert_eq!(fs::read(osp(src, p)).unwrap(), fs::read(osp(dst, p)).unwrap(), "{}", manifest::show(p));
        }
    }
    assert_eq!(d[&b"medium"[..]].ino(), d[&b"many/medium-link"[..]].ino(), "hard link kept");
    assert_eq!(d[&b"empty file"[..]].ino(), d[&b"a b/empty-link"[..]].ino(), "hard link kept");
    assert!(!d.keys().any(|k| is_temp(k)), "temp files left");
}

// ---------------------------------------------------------------- round trips

#[test]
fn round_trip_scrambled() {
    let _dog = Watchdog::new();
    for seed in 1..=3u64 {
        let s = Scratch::new();
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        make_tree(&s.p("src"), &mut rng);
        let _sock = make_specials(&s.p("src"));
        let pack = vfile::pack(s.root("src"), vec![Vec::new()], small_pack_opts()).unwrap();
        let sent = send_all(&pack, &mut rng, 100_000);
        let stats = pack.wait().unwrap();
        assert_eq!((stats.skipped, stats.hardlinks, stats.symlinks), (2, 2, 3));
        let u = Unpacker::new(s.root("dst"), UnpackOptions { park_limit: 1 << 30, ..Default::default() }).unwrap();
        deliver(&u, scramble(sent, &mut rng)).unwrap();
        let us = u.finish().unwrap();
        assert_eq!((us.files, us.hardlinks, us.symlinks, us.bytes), (stats.files, 2, 3, stats.bytes));
        fs::remove_file(s.p("src/fifo")).unwrap();
        fs::remove_file(s.p("src/socket")).unwrap();
        assert_same_tree(&s.p("src"), &s.p("dst"));
        s.assert_outside_untouched();
    }
}

/// A tree resumed after a broken try: the first try gets the manifest and
/// the blocks below half the virtual file, in order, and says what it
/// holds; the second pack, told so, leaves those files out, and the tree
/// completes the same as the source.
#[test]
fn a_resumed_tree_leaves_out_what_the_receiver_holds() {
    let _dog = Watchdog::new();
    let s = Scratch::new();
    let mut rng = Rng(11);
    make_tree(&s.p("src"), &mut rng);
    let unpacker = || Unpacker::new(s.root("dst"), UnpackOptions { park_limit: 1 << 30, ..Default::default() });
    let pack = vfile::pack(s.root("src"), vec![Vec::new()], small_pack_opts()).unwrap();
    let mut sent = send_all(&pack, &mut rng, 100_000);
    let whole = pack.wait().unwrap();
    let u = unpacker().unwrap();
    u.manifest_bytes(&sent.manifest).unwrap();
    sent.blocks.sort_by_key(|b| b.0);
    for (o, d) in sent.blocks.iter().filter(|(o, d)| o + d.len() as u64 <= whole.bytes / 2) {
        u.write_block(*o, d).unwrap();
    }
    let got = u.give_up().expect("the first files complete");
    assert!(got.bytes > 0 && got.bytes <= whole.bytes / 2, "{got:?}");
    let (after, held) = (got.after, got.files);
    assert!(held > 0 && held < whole.files, "{held} of {}", whole.files);
    let opts = PackOptions { after: Some(after.clone()), ..small_pack_opts() };
    let pack = vfile::pack(s.root("src"), vec![Vec::new()], opts).unwrap();
    let sent = send_all(&pack, &mut rng, 100_000);
    let rest = pack.wait().unwrap();
    // A file with hard links goes again (the prefix held holds one here).
    assert_eq!(rest.files + rest.held, whole.files, "after {}", manifest::show(&after));
    assert!(rest.held > 0 && rest.held <= held, "{} left out, {held} held", rest.held);
    assert!(rest.bytes < whole.bytes);
    let u = unpacker().unwrap();
    deliver(&u, scramble(sent, &mut rng)).unwrap();
    assert_eq!(u.finish().unwrap().files, rest.files);
    assert_same_tree(&s.p("src"), &s.p("dst"));
}

#[test]
fn walk_order_is_depth_first_by_name() {
    use std::cmp::Ordering::*;
    let o = vfile::walk_order;
    assert_eq!(o(b"a", b"a/b"), Less, "a directory before what it holds");
    assert_eq!(o(b"a/z", b"a-b"), Less, "all of a/ before a-b ('/' sorts after '-')");
    assert_eq!(o(b"a/b", b"a/b"), Equal);
    assert_eq!(o(b"b", b"a/z/z"), Greater);
}

#[test]
fn round_trip_parallel_writers_with_a_late_manifest() {
    let _dog = Watchdog::new();
    let s = Scratch::new();
    let mut rng = Rng(42);
    make_tree(&s.p("src"), &mut rng);
    let pack = vfile::pack(s.root("src"), vec![Vec::new()], small_pack_opts()).unwrap();
    let sent = send_all(&pack, &mut rng, 300_000);
    let Sent { manifest, mut blocks } = sent;
    rng.shuffle(&mut blocks);
    let opts = UnpackOptions { workers: 3, queue: 4, ..Default::default() };
    let u = Unpacker::new(s.root("dst"), opts).unwrap();
    std::thread::scope(|sc| {
        let u = &u;
        for part in blocks.chunks(blocks.len().div_ceil(4)) {
            sc.spawn(move || part.iter().for_each(|(o, d)| u.write_block(*o, d).unwrap()));
        }
        sc.spawn(move || {
            for c in manifest.chunks(997) {
                std::thread::sleep(Duration::from_micros(300));
                u.manifest_bytes(c).unwrap();
            }
        });
    });
    u.finish().unwrap();
    assert_same_tree(&s.p("src"), &s.p("dst"));
}

#[test]
fn sending_starts_before_the_walk_ends() {
    let _dog = Watchdog::new();
    let s = Scratch::new();
    make_tree(&s.p("src"), &mut Rng(7));
    // One queued chunk stalls the walk (max_queued 1), and each item taken
    // frees at most one: data must come out while hundreds of entries are
    // still to be walked. (Which comes second, the next chunk or the first
    // chunk's data, is a race with the walk: chunks go first when queued.)
    let opts = PackOptions { max_queued: 1, chunk_bytes: 1, ..small_pack_opts() };
    let pack = vfile::pack(s.root("src"), vec![Vec::new()], opts).unwrap();
    let first = pack.next_item(1 << 20).unwrap().expect("a first item");
    assert!(matches!(first, PackItem::Manifest { at: 0, .. }), "the manifest comes first: {first:?}");
    let mut chunks = 1;
    loop {
        match pack.next_item(1 << 20).unwrap().expect("more items") {
            PackItem::Manifest { .. } => chunks += 1,
            PackItem::Data { offset, .. } => {
                assert_eq!(offset, 0, "data comes in order");
                break;
            }
        }
    }
    assert_eq!(pack.total(), None, "walk still running after {chunks} chunks and the first data");
    let sent = send_all(&pack, &mut Rng(8), 1 << 20);
    assert!(!sent.blocks.is_empty());
    pack.wait().unwrap();
}

/// Streams as a real channel has them: each sender thread writes the item
/// it took before taking the next, into a bounded in-order queue (its
/// socket); each receiver thread reads one queue in order, and they stall
/// in turn, so data on some runs ahead of the manifest on others and is
/// parked over the limit. A receiver waiting for entries must never hold
/// back the manifest chunk that would free it (that deadlock once failed
/// LPVF transfers over the emulated WAN after 30 s).
#[test]
fn streams_never_block_the_manifest_they_wait_for() {
    let _dog = Watchdog::new();
    let s = Scratch::new();
    let mut rng = Rng(77);
    make_tree(&s.p("src"), &mut rng);
    for i in 0..400 {
        let n = 1 + rng.below(9000) as usize;
        fs::write(s.p(&format!("src/many/extra{i}")), rng.bytes(n)).unwrap();
    }
    let pack = vfile::pack(s.root("src"), vec![Vec::new()], small_pack_opts()).unwrap();
    let opts = UnpackOptions { park_limit: 64 << 20, ..Default::default() };
    let sink = VfileSink::new(Unpacker::new(s.root("dst"), opts).unwrap());
    let reader = pack.reader();
    let streams = 4;
    std::thread::scope(|sc| {
        for i in 0..streams {
            let (tx, rx) = std::sync::mpsc::sync_channel::<(u64, Vec<u8>)>(2);
            let (pack, reader, sink) = (&pack, &reader, &sink);
            sc.spawn(move || {
                while let Some(item) = pack.next_item(5000).unwrap() {
                    let msg = match item {
                        PackItem::Manifest { at, bytes } => (MANIFEST_BASE + at, bytes),
                        PackItem::Data { offset, len } => {
                            let mut buf = vec![0; len as usize];
                            reader.read_exact_at(&mut buf, offset).unwrap();
                            (offset, buf)
                        }
                    };
                    tx.send(msg).unwrap();
                }
            });
            sc.spawn(move || {
                for (n, (off, buf)) in rx.into_iter().enumerate() {
                    if (n + i) % streams == 0 {
                        std::thread::sleep(Duration::from_millis(3));
                    }
                    sink.write_all_at(&buf, off).unwrap();
                }
            });
        }
    });
    sink.finish().unwrap();
    assert_same_tree(&s.p("src"), &s.p("dst"));
}

/// Writers never wait for entries (they share the engine's disk threads
/// with everything else): data ahead of its entry is parked at once and
/// placed when the entry arrives; over the park limit it fails at once.
#[test]
fn parking_never_blocks_a_writer() {
    let _dog = Watchdog::new();
    let s = Scratch::new();
    let (a, b) = (file(b"a", 4, 0), file(b"b", 100, 4));
    let mut first = Vec::new();
    manifest::encode_header(&mut first);
    manifest::encode_entry_unchecked(&a, &mut first);
    let mut second = Vec::new();
    manifest::encode_entry_unchecked(&b, &mut second);
    manifest::encode_end_unchecked(Summary { entries: 2, total: 104 }, &mut second);
    let opts = UnpackOptions { park_limit: 150, ..Default::default() };
    let u = Unpacker::new(s.root("dst"), opts.clone()).unwrap();
    u.manifest_bytes(&first).unwrap();
    u.write_block(4, &[7; 100]).unwrap(); // parked, returns at once
    u.write_block(0, b"aaaa").unwrap();
    u.manifest_bytes(&second).unwrap();
    let stats = u.finish().unwrap();
    assert_eq!(stats.parked_peak, 100);
    assert_eq!(fs::read(s.p("dst/b")).unwrap(), vec![7; 100]);
    fs::remove_dir_all(s.p("dst")).unwrap();
    fs::create_dir(s.p("dst")).unwrap();
    let u = Unpacker::new(s.root("dst"), UnpackOptions { park_limit: 99, ..opts }).unwrap();
    u.manifest_bytes(&first).unwrap();
    assert!(matches!(u.write_block(4, &[7; 100]), Err(VfileError::ParkLimit(99))));
}

/// The sender's half: every data block handed out lies within entries of
/// manifest chunks handed out before it.
#[test]
fn data_is_handed_out_only_after_its_entries() {
    let _dog = Watchdog::new();
    let s = Scratch::new();
    let mut rng = Rng(5);
    make_tree(&s.p("src"), &mut rng);
    let pack = vfile::pack(s.root("src"), vec![Vec::new()], small_pack_opts()).unwrap();
    let mut dec = manifest::Decoder::new(manifest::Limits::default());
    let (mut known_end, mut next_at, mut data) = (0, 0, 0);
    while let Some(item) = pack.next_item(1 + rng.below(70_000)).unwrap() {
        match item {
            PackItem::Manifest { at, bytes } => {
                assert_eq!(at, next_at, "chunks in order");
                next_at += bytes.len() as u64;
                dec.handle_bytes(&bytes);
                while let Some(e) = dec.poll_entry().unwrap() {
                    if let Kind::File { size, offset } = e.kind {
                        known_end = offset + size;
                    }
                }
            }
            PackItem::Data { offset, len } => {
                assert!(offset + len <= known_end, "block {offset}+{len} ahead of the entries (end {known_end})");
                data += len;
            }
        }
    }
    assert!(dec.is_finished());
    assert_eq!(Some(data), pack.total());
}

#[test]
fn named_items_pack_under_their_last_component() {
    let _dog = Watchdog::new();
    let s = Scratch::new();
    fs::create_dir_all(s.p("src/x/tree/sub")).unwrap();
    fs::write(s.p("src/x/tree/sub/f"), b"hello").unwrap();
    fs::write(s.p("src/x/single"), b"one").unwrap();
    let items = vec![b"x/tree".to_vec(), b"x/single".to_vec()];
    let pack = vfile::pack(s.root("src"), items, PackOptions::default()).unwrap();
    let sent = send_all(&pack, &mut Rng(3), 1 << 20);
    let u = Unpacker::new(s.root("dst"), UnpackOptions::default()).unwrap();
    deliver(&u, scramble(sent, &mut Rng(4))).unwrap();
    u.finish().unwrap();
    assert_eq!(fs::read(s.p("dst/tree/sub/f")).unwrap(), b"hello");
    assert_eq!(fs::read(s.p("dst/single")).unwrap(), b"one");
}

// ---------------------------------------------------------------- hostile input

fn raw(entries: &[Entry], total: u64) -> Vec<u8> {
    let mut out = Vec::new();
    manifest::encode_header(&mut out);
    for e in entries {
        manifest::encode_entry_unchecked(e, &mut out);
    }
    manifest::encode_end_unchecked(Summary { entries: entries.len() as u64, total }, &mut out);
    out
}

fn file(path: &[u8], size: u64, offset: u64) -> Entry {
    Entry { path: path.to_vec(), kind: Kind::File { size, offset }, mode: 0o644, mtime_ns: 0 }
}

fn dir(path: &[u8]) -> Entry {
    Entry { path: path.to_vec(), kind: Kind::Dir, mode: 0o755, mtime_ns: 0 }
}

fn symlink(path: &[u8], target: &[u8]) -> Entry {
    Entry { path: path.to_vec(), kind: Kind::Symlink { target: target.to_vec() }, mode: 0o777, mtime_ns: 0 }
}

/// Feed a manifest (blocks first, then the manifest, then finish); the error.
fn unpack_hostile(s: &Scratch, entries: &[Entry], total: u64, blocks: &[(u64, &[u8])]) -> VfileError {
    let u = Unpacker::new(s.root("dst"), UnpackOptions::default()).unwrap();
    let r = (|| {
        for (o, d) in blocks {
            u.write_block(*o, d)?;
        }
        u.manifest_bytes(&raw(entries, total))?;
        Ok(())
    })();
    let err = match r {
        Err(e) => e,
        Ok(()) => u.finish().expect_err("hostile manifest accepted"),
    };
    s.assert_outside_untouched();
    assert!(!walk(&s.p("dst")).keys().any(|k| is_temp(k)), "temp files left");
    err
}

fn only(s: &Scratch) -> Vec<Vec<u8>> {
    let mut v: Vec<_> = walk(&s.p("dst")).into_keys().collect();
    v.sort();
    v
}

#[test]
fn path_escapes_refused() {
    let _dog = Watchdog::new();
    let s = Scratch::new();
    let abs = s.p("outside/evil");
    for path in [&b"../outside/evil"[..], b"a/../../outside/evil", abs.as_os_str().as_bytes(), b"./x", b"x//y"] {
        let e = unpack_hostile(&s, &[dir(b"a"), file(path, 4, 0)], 4, &[(0, b"evil")]);
        assert!(matches!(e, VfileError::Manifest(ManifestError::BadPath { .. })), "{e}");
    }
    let e = unpack_hostile(&s, &[file(b"a\0b", 1, 0)], 1, &[]);
    assert!(matches!(e, VfileError::Manifest(ManifestError::BadPath { .. })), "{e}");
}

#[test]
fn duplicates_refused() {
    let _dog = Watchdog::new();
    let s = Scratch::new();
    let e = unpack_hostile(&s, &[file(b"x", 1, 0), file(b"x", 1, 1)], 2, &[(0, b"ab")]);
    assert!(matches!(e, VfileError::Manifest(ManifestError::Duplicate(_))), "{e}");
    let e = unpack_hostile(&s, &[dir(b"d"), symlink(b"d", b"/")], 0, &[]);
    assert!(matches!(e, VfileError::Manifest(ManifestError::Duplicate(_))), "{e}");
}

#[test]
fn size_disagreeing_with_data_refused() {
    let _dog = Watchdog::new();
    let s = Scratch::new();
    // Too little data: the file never appears under its name.
    let e = unpack_hostile(&s, &[file(b"short", 10, 0)], 10, &[(0, b"12345")]);
    assert!(matches!(e, VfileError::Incomplete { count: 1, got: 5, size: 10, .. }), "{e}");
    assert!(only(&s).is_empty());
    // Too much data.
    let e = unpack_hostile(&s, &[file(b"long", 3, 0)], 3, &[(0, b"12345")]);
    assert!(matches!(e, VfileError::OutOfBounds { offset: 3, total: 3, .. }), "{e}");
    // The end record fails the manifest before the parked data covering
    // `long` reaches a writer: it never appears, not even with 3 bytes.
    assert!(only(&s).is_empty());
    // An end record that disagrees with the entries.
    let e = unpack_hostile(&s, &[file(b"f", 3, 0)], 4, &[]);
    assert!(matches!(e, VfileError::Manifest(ManifestError::EndMismatch { .. })), "{e}");
    // Overlapping blocks.
    let u = Unpacker::new(s.root("dst"), UnpackOptions::default()).unwrap();
    u.write_block(0, b"abcd").unwrap();
    assert!(matches!(u.write_block(2, b"xy"), Err(VfileError::Overlap { offset: 2, len: 2 })));
}

#[test]
fn symlink_redirects_refused() {
    let _dog = Watchdog::new();
    let s = Scratch::new();
    // In the manifest: a symlink, then a path through it.
    let es = [symlink(b"a", b"../outside"), file(b"a/sentinel", 4, 0)];
    let e = unpack_hostile(&s, &es, 4, &[(0, b"evil")]);
    assert!(matches!(e, VfileError::Manifest(ManifestError::ParentNotDir(_))), "{e}");
    // Planted in the destination beforehand: out of the root, and within it.
    std::os::unix::fs::symlink(s.p("outside"), s.p("dst/p")).unwrap();
    fs::create_dir(s.p("dst/real")).unwrap();
    std::os::unix::fs::symlink("real", s.p("dst/q")).unwrap();
    for d in [b"p", b"q"] {
        let es = [dir(d), file(&[&d[..], b"/sentinel"].concat(), 4, 0)];
        let e = unpack_hostile(&s, &es, 4, &[(0, b"evil")]);
        assert!(matches!(e, VfileError::Io { op: "creating directory", .. }), "{e}");
    }
    assert_eq!(fs::read_dir(s.p("dst/real")).unwrap().count(), 0);
    // A planted symlink at a file's final name is replaced, not followed.
    std::os::unix::fs::symlink(s.p("outside/sentinel"), s.p("dst/f")).unwrap();
    let u = Unpacker::new(s.root("dst"), UnpackOptions::default()).unwrap();
    u.manifest_bytes(&raw(&[file(b"f", 4, 0)], 4)).unwrap();
    u.write_block(0, b"mine").unwrap();
    u.finish().unwrap();
    assert_eq!(fs::read(s.p("dst/f")).unwrap(), b"mine");
    assert!(!fs::symlink_metadata(s.p("dst/f")).unwrap().file_type().is_symlink());
    s.assert_outside_untouched();
}

#[test]
fn data_for_unknown_ranges_refused() {
    let _dog = Watchdog::new();
    let s = Scratch::new();
    // Before the manifest: parked, then refused when the end record comes.
    let e = unpack_hostile(&s, &[file(b"f", 4, 0)], 4, &[(0, b"abcd"), (100, b"zz")]);
    assert!(matches!(e, VfileError::OutOfBounds { offset: 100, .. }), "{e}");
    // After it.
    let u = Unpacker::new(s.root("dst"), UnpackOptions::default()).unwrap();
    u.manifest_bytes(&raw(&[file(b"g", 4, 0)], 4)).unwrap();
    assert!(matches!(u.write_block(4, b"x"), Err(VfileError::OutOfBounds { .. })));
    // No manifest end at all.
    let u = Unpacker::new(s.root("dst"), UnpackOptions::default()).unwrap();
    let mut m = raw(&[file(b"h", 1, 0)], 1);
    m.truncate(m.len() - 5);
    u.manifest_bytes(&m).unwrap();
    u.write_block(0, b"h").unwrap();
    assert!(matches!(u.finish(), Err(VfileError::Manifest(ManifestError::Truncated))));
    // Too much data ahead of the manifest.
    let opts = UnpackOptions { park_limit: 10, ..Default::default() };
    let u = Unpacker::new(s.root("dst"), opts).unwrap();
    assert!(matches!(u.write_block(0, &[0; 11]), Err(VfileError::ParkLimit(10))));
    assert!(u.write_block(100, b"x").is_err(), "errors are final");
    s.assert_outside_untouched();
}

// ---------------------------------------------------------------- interruption

#[test]
fn interrupted_transfer_leaves_no_partial_file_under_a_final_name() {
    let _dog = Watchdog::new();
    let s = Scratch::new();
    let mut rng = Rng(99);
    make_tree(&s.p("src"), &mut rng);
    let pack = vfile::pack(s.root("src"), vec![Vec::new()], small_pack_opts()).unwrap();
    let mut sent = send_all(&pack, &mut rng, 40_000);
    rng.shuffle(&mut sent.blocks);
    let keep = sent.blocks.len() * 2 / 3;
    sent.blocks.truncate(keep);
    for finish in [false, true] {
        let dst = if finish { "dst/b" } else { "dst/a" };
        fs::create_dir(s.p(dst)).unwrap();
        let u = Unpacker::new(s.root(dst), UnpackOptions { park_limit: 1 << 30, ..Default::default() }).unwrap();
        u.manifest_bytes(&sent.manifest).unwrap();
        sent.blocks.iter().for_each(|(o, d)| u.write_block(*o, d).unwrap());
        if finish {
            assert!(matches!(u.finish(), Err(VfileError::Incomplete { .. })));
        } else {
            drop(u);
        }
        for (p, m) in walk(&s.p(dst)) {
            assert!(!is_temp(&p), "temp file {} left", manifest::show(&p));
            if m.is_dir() {
                // Made 0700 while the tree was written; released with the
                // sender's modes all the same.
                let want = fs::metadata(osp(&s.p("src"), &p)).unwrap().permissions().mode();
                assert_eq!(m.permissions().mode() & 0o7777, want & 0o7777, "mode of {}", manifest::show(&p));
            }
            if m.is_file() {
                let want = fs::read(osp(&s.p("src"), &p)).unwrap();
                assert_eq!(fs::read(osp(&s.p(dst), &p)).unwrap(), want, "partial {}", manifest::show(&p));
            }
        }
    }
}

/// Where a file shrinks while the walk is still running.
#[derive(Debug, Clone, Copy)]
enum Shrink {
    /// A small file (read whole), before its data is read.
    BeforeRead,
    /// A large file (read by range), after its first block was read.
    WhileRead,
}

/// Take items as a sender does until a read fails; what was sent, and the
/// read's error. `src/a` shrinks as `how` says. A large file's next block
/// is read at once after its first, with no `next_item` between: each
/// call may hand out a manifest chunk and let the walk go on, and on a
/// loaded machine the walk could finish before a second data item came.
fn send_until_a_read_fails(s: &Scratch, pack: &Pack, how: Shrink) -> (Sent, VfileError) {
    let reader = pack.reader();
    let mut sent = Sent { manifest: Vec::new(), blocks: Vec::new() };
    let shrink = || File::options().write(true).open(s.p("src/a")).unwrap().set_len(5_000).unwrap();
    loop {
        match pack.next_item(10_000).unwrap().expect("more items") {
            PackItem::Manifest { bytes, .. } => sent.manifest.extend_from_slice(&bytes),
            PackItem::Data { offset, len } => {
                if matches!((how, offset), (Shrink::BeforeRead, 0)) {
                    shrink();
                }
                let mut buf = vec![0; len as usize];
                match reader.read_at(&mut buf, offset) {
                    Ok(()) => sent.blocks.push((offset, buf)),
                    Err(e) => return (sent, e),
                }
                if matches!((how, offset), (Shrink::WhileRead, 0)) {
                    shrink();
                    let mut next = vec![0; 10_000];
                    let e = reader.read_at(&mut next, len).expect_err("a read past the new end of a");
                    return (sent, e);
                }
            }
        }
    }
}

/// A file that shrinks after the walk listed it fails the pack with an
/// error naming it, also once the sender cancels the still running walk
/// (as `send_pack` does when a send fails): `Aborted` must not hide the
/// cause. The receiver never publishes the file under its name.
#[test]
fn a_file_shrinking_while_sent_fails_the_pack_naming_it() {
    let _dog = Watchdog::new();
    for (how, size) in [(Shrink::BeforeRead, 8_000), (Shrink::WhileRead, 100_000)] {
        let s = Scratch::new();
        let pack = pack_file_a_and_a_tree(&s, 13, size);
        let (sent, e) = send_until_a_read_fails(&s, &pack, how);
        assert!(matches!(&e, VfileError::Changed(p) if p == "a"), "{how:?}: {e}");
        assert_eq!(pack.total(), None, "{how:?}: the walk is still running");
        pack.cancel();
        let e = pack.next_item(10_000).unwrap_err();
        assert!(matches!(&e, VfileError::Changed(p) if p == "a"), "{how:?}: other senders see {e}");
        let e = pack.wait().unwrap_err();
        assert!(matches!(&e, VfileError::Changed(p) if p == "a"), "{how:?}: the pack failed with {e}");
        assert_eq!(e.to_string(), "a changed while being read");
        let u = Unpacker::new(s.root("dst"), UnpackOptions { park_limit: 1 << 30, ..Default::default() }).unwrap();
        u.manifest_bytes(&sent.manifest).unwrap();
        sent.blocks.iter().for_each(|(o, d)| u.write_block(*o, d).unwrap());
        assert!(u.finish().is_err(), "{how:?}: an incomplete tree is an error");
        assert_a_not_published(&s, &format!("{how:?}"));
    }
}

/// `src/a` (`size` random bytes) beside a tree, packed with one queued
/// chunk at most, which stalls the walk (see
/// `sending_starts_before_the_walk_ends`).
fn pack_file_a_and_a_tree(s: &Scratch, seed: u64, size: usize) -> Pack {
    let mut rng = Rng(seed);
    fs::write(s.p("src/a"), rng.bytes(size)).unwrap();
    fs::create_dir(s.p("src/rest")).unwrap();
    make_tree(&s.p("src/rest"), &mut rng);
    let opts = PackOptions { max_queued: 1, chunk_bytes: 1, ..small_pack_opts() };
    vfile::pack(s.root("src"), vec![Vec::new()], opts).unwrap()
}

/// Nothing of `a` under `dst`: not under its name, no temporary file.
fn assert_a_not_published(s: &Scratch, case: &str) {
    let got = walk(&s.p("dst"));
    assert!(!got.contains_key(&b"a"[..]), "{case}: a published");
    assert!(!got.keys().any(|k| is_temp(k)), "{case}: temp files left");
}

/// The same through `send_pack` over real streams: the send's error and
/// the pack's both name the file.
#[test]
fn send_pack_reports_the_file_that_shrank() {
    let _dog = Watchdog::new();
    let s = Scratch::new();
    let pack = pack_file_a_and_a_tree(&s, 17, 100_000);
    while pack.reader().len() < 100_000 {
        std::thread::sleep(Duration::from_millis(1)); // until the walk listed `a`
    }
    File::options().write(true).open(s.p("src/a")).unwrap().set_len(5_000).unwrap();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (mut tx, mut rx) = (DataChannel::new(), DataChannel::new());
    tx.connect_to(vec![l.local_addr().unwrap()]);
    rx.listen(l);
    let sink = VfileSink::new(Unpacker::new(s.root("dst"), UnpackOptions::default()).unwrap());
    let (sent, got) = std::thread::scope(|sc| {
        let h = sc.spawn(|| {
            tx.prepare_send(4).unwrap();
            send_pack(&mut tx, &pack, 10_000, &Control::new())
        });
        rx.prepare_recv().unwrap();
        let got = rx.recv_e(&sink, &recv_opts(Duration::from_secs(30)), &Control::new());
        (h.join().unwrap(), got)
    });
    let e = sent.unwrap_err().to_string();
    assert!(e.contains("a changed while being read"), "{e}");
    let e = pack.wait().unwrap_err();
    assert!(matches!(&e, VfileError::Changed(p) if p == "a"), "{e}");
    assert!(got.is_err(), "the receiver saw no EOD: {got:?}");
    drop(sink);
    assert_a_not_published(&s, "send_pack");
}

#[test]
fn bad_hard_links_refused() {
    let _dog = Watchdog::new();
    let s = Scratch::new();
    let hl = |path: &[u8], target: &[u8]| Entry {
        path: path.to_vec(),
        kind: Kind::HardLink { target: target.to_vec() },
        mode: 0,
        mtime_ns: 0,
    };
    for target in [&b"d"[..], b"nothing", b"../outside/sentinel", b"l"] {
        let es = [dir(b"d"), symlink(b"l", b"d"), hl(b"h", target)];
        let e = unpack_hostile(&s, &es, 0, &[]);
        assert!(matches!(e, VfileError::Manifest(ManifestError::BadHardLink { .. })), "{e}");
    }
}

#[test]
fn paths_too_long_for_the_format_are_refused_when_packing() {
    let _dog = Watchdog::new();
    let s = Scratch::new();
    // 17 levels of 250-byte names: 4,267 bytes, more than PATH_MAX allows in
    // one path; built with relative steps (nothing else in this binary uses
    // relative paths).
    let here = std::env::current_dir().unwrap();
    std::env::set_current_dir(s.p("src")).unwrap();
    let name = "n".repeat(250);
    for _ in 0..17 {
        fs::create_dir(&name).unwrap();
        std::env::set_current_dir(&name).unwrap();
    }
    std::env::set_current_dir(here).unwrap();
    let pack = vfile::pack(s.root("src"), vec![Vec::new()], PackOptions::default()).unwrap();
    let e = pack.wait().unwrap_err();
    assert!(e.to_string().contains("path longer than 4095 bytes"), "{e}");
}

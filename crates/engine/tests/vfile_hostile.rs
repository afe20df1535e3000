//! The virtual file against hostile manifests, and transfers interrupted or
//! broken by a source that shrinks: nothing outside the destination is
//! touched and no partial file appears under a final name.

use lightpath_engine::vfile::{self, Pack, PackItem, PackOptions, UnpackOptions, Unpacker, VfileError};
use lightpath_engine::vfile_chan::{recv_opts, send_pack, VfileSink};
use lightpath_engine::Source;
use lightpath_engine::{Control, DataChannel};
use lightpath_proto::manifest::{self, Entry, Kind, ManifestError};
use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

mod vtree;
use vtree::*;

// ---------------------------------------------------------------- hostile input

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

/// A refused tree leaves no empty directories it made (a chain of 65 was
/// left by a path too long); one that was there before stays.
#[test]
fn a_refused_tree_removes_the_empty_directories_it_made() {
    let _dog = Watchdog::new();
    let s = Scratch::new();
    fs::create_dir(s.p("dst/pre")).unwrap();
    let entries = [dir(b"pre"), dir(b"pre/x"), dir(b"a"), dir(b"a/b"), dir(b"a/b/c"), file(b"../evil", 1, 0)];
    let e = unpack_hostile(&s, &entries, 1, &[(0, b"e")]);
    assert!(matches!(e, VfileError::Manifest(ManifestError::BadPath { .. })), "{e}");
    assert_eq!(only(&s), [b"pre".to_vec()], "only what was there before");
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

/// A sender that writes the first byte of each of many files (the last
/// byte never) would have the receiver hold a descriptor per file: the
/// tree fails past 2048 files partly written at once, and nothing stays.
#[test]
fn scattered_bytes_fail_the_tree_before_descriptors_run_out() {
    let _dog = Watchdog::new();
    let s = Scratch::new();
    let n = 2100u64;
    let entries: Vec<Entry> = (0..n).map(|i| file(format!("f{i}").as_bytes(), 2, 2 * i)).collect();
    let blocks: Vec<(u64, &[u8])> = (0..n).map(|i| (2 * i, &b"x"[..])).collect();
    let fds = || fs::read_dir("/proc/self/fd").unwrap().count();
    let before = fds();
    let e = unpack_hostile(&s, &entries, 2 * n, &blocks);
    assert!(matches!(e, VfileError::TooScattered(2048)), "{e}");
    assert!(only(&s).is_empty());
    assert!(fds() < before + 512, "descriptors left open: {} -> {}", before, fds());
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
    // Planted in the destination beforehand, out of the root and within
    // it: the directory and what is beneath it are left out, named, and
    // the rest of the tree is written (as `cp -a` does; the whole tree
    // failed).
    std::os::unix::fs::symlink(s.p("outside"), s.p("dst/p")).unwrap();
    fs::create_dir(s.p("dst/real")).unwrap();
    std::os::unix::fs::symlink("real", s.p("dst/q")).unwrap();
    for d in [b"p", b"q"] {
        let u = Unpacker::new(s.root("dst"), UnpackOptions::default()).unwrap();
        let at = |rest: &[u8]| [&d[..], rest].concat();
        let es = [
            dir(d),
            file(&at(b"/sentinel"), 4, 0),
            dir(&at(b"/sub")),
            file(&at(b"/sub/deeper"), 4, 4),
            symlink(&at(b"/sub/l"), b"x"),
            file(b"other", 2, 8),
        ];
        u.manifest_bytes(&raw(&es, 10)).unwrap();
        u.write_block(0, b"evilevilok").unwrap();
        let refused = u.finish().unwrap().refused;
        let named: Vec<_> = refused.named.iter().map(|r| (r.path.clone(), r.why.clone())).collect();
        // The directory, named; its two files and its link, counted.
        assert_eq!((refused.count, named.len()), (4, 1), "{named:?}");
        assert!(named[0].1.contains("a symlink is in its place"), "{named:?}");
        assert_eq!(fs::read(s.p("dst/other")).unwrap(), b"ok");
        fs::remove_file(s.p("dst/other")).unwrap();
        assert!(fs::symlink_metadata(s.p(&format!("dst/{}", String::from_utf8_lossy(d)))).unwrap().is_symlink());
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

/// How and when a file changes while the walk is still running.
#[derive(Debug, Clone, Copy)]
enum Change {
    /// A small file (read whole) shrinks before its data is read.
    ShrinksEarly,
    /// A large file (read by range) shrinks after its first block was read.
    ShrinksLate,
    /// A small file grows before its data is read.
    GrowsEarly,
    /// A large file is rewritten in place (same size, new mtime) after its
    /// first block was read.
    RewrittenLate,
    /// A small file is removed before its data is read.
    RemovedEarly,
}

impl Change {
    fn before_read(self) -> bool {
        matches!(self, Change::ShrinksEarly | Change::GrowsEarly | Change::RemovedEarly)
    }

    fn apply(self, p: &std::path::Path) {
        if matches!(self, Change::RemovedEarly) {
            return fs::remove_file(p).unwrap();
        }
        let f = File::options().write(true).open(p).unwrap();
        match self {
            Change::ShrinksEarly | Change::ShrinksLate | Change::RemovedEarly => f.set_len(5_000).unwrap(),
            Change::GrowsEarly => f.set_len(f.metadata().unwrap().len() + 1).unwrap(),
            Change::RewrittenLate => {
                use std::os::unix::fs::FileExt;
                f.write_all_at(b"new bytes", 0).unwrap();
                let t = f.metadata().unwrap().modified().unwrap();
                f.set_modified(t + std::time::Duration::from_secs(1)).unwrap();
            }
        }
    }
}

/// Take items as a sender does until a read fails; what was sent, and the
/// read's error. `src/a` shrinks as `how` says. A large file's next block
/// is read at once after its first, with no `next_item` between: each
/// call may hand out a manifest chunk and let the walk go on, and on a
/// loaded machine the walk could finish before a second data item came.
fn send_until_a_read_fails(s: &Scratch, pack: &Pack, how: Change) -> (Sent, VfileError) {
    let reader = pack.reader();
    let mut sent = Sent { manifest: Vec::new(), blocks: Vec::new() };
    loop {
        match pack.next_item(10_000).unwrap().expect("more items") {
            PackItem::Manifest { bytes, .. } => sent.manifest.extend_from_slice(&bytes),
            PackItem::Data { offset, len } => {
                if how.before_read() && offset == 0 {
                    how.apply(&s.p("src/a"));
                }
                let mut buf = vec![0; len as usize];
                match reader.read_at(&mut buf, offset) {
                    Ok(()) => sent.blocks.push((offset, buf)),
                    Err(e) => return (sent, e),
                }
                if !how.before_read() && offset == 0 {
                    how.apply(&s.p("src/a"));
                    // The rest of a, up to its last byte, where a file
                    // rewritten in place is caught.
                    let mut at = len;
                    loop {
                        let mut next = vec![0; 10_000];
                        match reader.read_at(&mut next, at) {
                            Ok(()) => at += 10_000,
                            Err(e) => return (sent, e),
                        }
                        assert!(at < 200_000, "{how:?}: the change was never seen");
                    }
                }
            }
        }
    }
}

/// A file that shrinks, grows, is rewritten in place or removed after the
/// walk listed it fails the pack with an error naming it (by its manifest
/// path, which a retry may ask to leave out), also once the sender cancels the still running walk
/// (as `send_pack` does when a send fails): `Aborted` must not hide the
/// cause. The receiver never publishes the file under its name.
#[test]
fn a_file_changing_while_sent_fails_the_pack_naming_it() {
    let _dog = Watchdog::new();
    let cases = [
        (Change::ShrinksEarly, 8_000),
        (Change::ShrinksLate, 100_000),
        (Change::GrowsEarly, 8_000),
        (Change::RewrittenLate, 100_000),
        (Change::RemovedEarly, 8_000),
    ];
    for (how, size) in cases {
        let s = Scratch::new();
        let pack = pack_file_a_and_a_tree(&s, 13, size);
        let (sent, e) = send_until_a_read_fails(&s, &pack, how);
        assert!(matches!(&e, VfileError::Changed(p) if p == b"a"), "{how:?}: {e}");
        assert_eq!(pack.total(), None, "{how:?}: the walk is still running");
        pack.cancel();
        let e = pack.next_item(10_000).unwrap_err();
        assert!(matches!(&e, VfileError::Changed(p) if p == b"a"), "{how:?}: other senders see {e}");
        let e = pack.wait().unwrap_err();
        assert!(matches!(&e, VfileError::Changed(p) if p == b"a"), "{how:?}: the pack failed with {e}");
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
            send_pack(&mut tx, &pack, 10_000, 1, &Control::new())
        });
        rx.prepare_recv().unwrap();
        let got = rx.recv_e(&sink, &recv_opts(Duration::from_secs(30)), &Control::new());
        (h.join().unwrap(), got)
    });
    let e = sent.unwrap_err().to_string();
    assert!(e.contains("a changed while being read"), "{e}");
    let e = pack.wait().unwrap_err();
    assert!(matches!(&e, VfileError::Changed(p) if p == b"a"), "{e}");
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

/// Left out and counted, with what is beneath them; the rest of the
/// tree goes (`vfile.rs` unpacks such a tree).
#[test]
fn paths_too_long_for_the_format_are_left_out_when_packing() {
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
    let stats = pack.wait().unwrap();
    assert_eq!((stats.dirs, stats.unreadable.count), (16, 1), "{stats:?}");
}

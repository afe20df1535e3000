//! Helpers shared by the virtual-file test binaries: reproducible random
//! trees with every awkward name, a sender that takes every item a pack
//! hands out, scrambling, and the comparison of two trees.
#![allow(dead_code)]

use lightpath_engine::vfile::{Pack, PackItem, PackOptions, Unpacker, VfileError};
use lightpath_engine::Source;
use lightpath_proto::manifest::{self, Entry, Kind, Summary};
use lightpath_sys::root::Root;
use std::collections::HashMap;
use std::fs::{self, File, FileTimes};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

/// xorshift64*: reproducible randomness without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

/// `src/`, `dst/` and a sentinel `outside/` that nothing may touch.
pub struct Scratch {
    pub _dir: tempfile::TempDir,
    pub base: PathBuf,
}

impl Scratch {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().to_path_buf();
        for d in ["src", "dst", "outside"] {
            fs::create_dir(base.join(d)).unwrap();
        }
        fs::write(base.join("outside/sentinel"), b"untouched").unwrap();
        Scratch { _dir: dir, base }
    }
    pub fn p(&self, rel: &str) -> PathBuf {
        self.base.join(rel)
    }
    pub fn root(&self, rel: &str) -> Arc<Root> {
        Arc::new(Root::open(&self.p(rel)).unwrap())
    }
    pub fn assert_outside_untouched(&self) {
        let names: Vec<_> = fs::read_dir(self.p("outside")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("sentinel")], "something was created outside");
        assert_eq!(fs::read(self.p("outside/sentinel")).unwrap(), b"untouched");
    }
}

pub fn set_mtime(p: &Path, secs: u64, nanos: u32) {
    let t = UNIX_EPOCH + Duration::new(secs, nanos);
    File::open(p).unwrap().set_times(FileTimes::new().set_modified(t)).unwrap();
}

pub fn osp(base: &Path, rel: &[u8]) -> PathBuf {
    base.join(std::ffi::OsStr::from_bytes(rel))
}

/// A tree with every awkward thing the issue lists.
pub fn make_tree(src: &Path, rng: &mut Rng) {
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
pub fn make_specials(src: &Path) -> std::os::unix::net::UnixListener {
    let ok = std::process::Command::new("mkfifo").arg(src.join("fifo")).status().map(|s| s.success());
    assert!(matches!(ok, Ok(true)), "mkfifo failed");
    std::os::unix::net::UnixListener::bind(src.join("socket")).unwrap()
}

/// Everything a pack produced: the manifest stream and the blocks.
pub struct Sent {
    pub manifest: Vec<u8>,
    pub blocks: Vec<(u64, Vec<u8>)>,
}

/// Take every item the sender would put on the wire, in the order it hands
/// them out (manifest chunks and blocks of random sizes).
pub fn send_all(pack: &Pack, rng: &mut Rng, max_block: u64) -> Sent {
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
pub struct Watchdog(#[allow(dead_code)] std::sync::mpsc::Sender<()>);

impl Watchdog {
    pub fn new() -> Self {
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

pub enum Ev {
    Manifest(Vec<u8>),
    Block(u64, Vec<u8>),
}

/// Manifest cut at random points, blocks shuffled, both interleaved at random.
pub fn scramble(sent: Sent, rng: &mut Rng) -> Vec<Ev> {
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

pub fn deliver(u: &Unpacker, evs: Vec<Ev>) -> Result<(), VfileError> {
    for ev in evs {
        match ev {
            Ev::Manifest(m) => u.manifest_bytes(&m)?,
            Ev::Block(o, d) => u.write_block(o, &d)?,
        }
    }
    Ok(())
}

pub fn small_pack_opts() -> PackOptions {
    PackOptions { small_file: 16 << 10, chunk_bytes: 700, chunk_data: 50_000, ..PackOptions::default() }
}

/// Relative paths beneath `base` with their `lstat`, recursively.
pub fn walk(base: &Path) -> HashMap<Vec<u8>, fs::Metadata> {
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

pub fn is_temp(name: &[u8]) -> bool {
    name.ends_with(b".part") && name.windows(3).any(|w| w == b".lp")
}

/// `dst` holds exactly the packable part of `src`, with modes and mtimes.
pub fn assert_same_tree(src: &Path, dst: &Path) {
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

// ---------------------------------------------------------------- manifests by hand

pub fn raw(entries: &[Entry], total: u64) -> Vec<u8> {
    let mut out = Vec::new();
    manifest::encode_header(&mut out);
    for e in entries {
        manifest::encode_entry_unchecked(e, &mut out);
    }
    manifest::encode_end_unchecked(Summary { entries: entries.len() as u64, total }, &mut out);
    out
}

pub fn file(path: &[u8], size: u64, offset: u64) -> Entry {
    Entry { path: path.to_vec(), kind: Kind::File { size, offset }, mode: 0o644, mtime_ns: 0 }
}

pub fn dir(path: &[u8]) -> Entry {
    Entry { path: path.to_vec(), kind: Kind::Dir, mode: 0o755, mtime_ns: 0 }
}

pub fn symlink(path: &[u8], target: &[u8]) -> Entry {
    Entry { path: path.to_vec(), kind: Kind::Symlink { target: target.to_vec() }, mode: 0o777, mtime_ns: 0 }
}

//! Data parked ahead of its manifest is bounded for the whole process, not
//! only per tree: sessions that each send data and no manifest would
//! otherwise hold as much memory as they like between them. A test binary
//! of its own, so that no other test's parking shares the count.

use lightpath_engine::vfile::{UnpackOptions, Unpacker, VfileError, PARK_LIMIT_ALL};
use lightpath_proto::manifest::{self, Entry, Kind};
use lightpath_sys::root::Root;
use std::sync::Arc;

/// An unpacker into a new directory of `dir` that has seen the header and
/// one 4-byte file, so that any data past offset 4 is parked.
fn unpacker(dir: &tempfile::TempDir, name: &str) -> Unpacker {
    let p = dir.path().join(name);
    std::fs::create_dir(&p).unwrap();
    let opts = UnpackOptions { park_limit: PARK_LIMIT_ALL, ..Default::default() };
    let u = Unpacker::new(Arc::new(Root::open(&p).unwrap()), opts).unwrap();
    let mut m = Vec::new();
    manifest::encode_header(&mut m);
    let a = Entry { path: b"a".to_vec(), kind: Kind::File { size: 4, offset: 0 }, mode: 0o644, mtime_ns: 0 };
    manifest::encode_entry_unchecked(&a, &mut m);
    u.manifest_bytes(&m).unwrap();
    u
}

#[test]
fn trees_share_one_bound_for_data_ahead_of_their_manifests() {
    let dir = tempfile::tempdir().unwrap();
    let block = vec![7u8; 64 << 20];
    let share = PARK_LIMIT_ALL / 2 + (64 << 20);
    let (one, two) = (unpacker(&dir, "one"), unpacker(&dir, "two"));
    let mut at = 4;
    while at - 4 < share {
        one.write_block(at, &block).unwrap();
        at += block.len() as u64;
    }
    let mut at = 4;
    let refused = loop {
        match two.write_block(at, &block) {
            Ok(_) => at += block.len() as u64,
            Err(e) => break e,
        }
        assert!(at - 4 <= share, "the second tree parked as much as the first");
    };
    assert!(matches!(refused, VfileError::ParkLimit(PARK_LIMIT_ALL)), "{refused}");
    drop((one, two));
    let three = unpacker(&dir, "three");
    three.write_block(4, &block).expect("the count went back down with the trees");
}

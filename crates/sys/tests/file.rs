//! Space reservation: kept at size 0 for files written in place, full size
//! at once for temporary files. Needs /var/tmp on a disk file system (ext4
//! here), which has fallocate.

use lightpath_sys::file::{preallocate, preallocate_sized};
use std::os::unix::fs::MetadataExt;

fn disk_file() -> std::fs::File {
    tempfile::tempfile_in("/var/tmp").expect("temp file in /var/tmp")
}

#[test]
fn a_reservation_kept_at_size_zero_still_holds_the_blocks() {
    let f = disk_file();
    preallocate(&f, 8 << 20).expect("fallocate");
    let m = f.metadata().expect("metadata");
    assert_eq!(m.len(), 0);
    assert!(m.blocks() * 512 >= 8 << 20, "{} blocks", m.blocks());
}

#[test]
fn a_sized_reservation_gives_the_file_its_length_and_blocks() {
    let f = disk_file();
    preallocate_sized(&f, 8 << 20).expect("fallocate");
    let m = f.metadata().expect("metadata");
    assert_eq!(m.len(), 8 << 20);
    assert!(m.blocks() * 512 >= 8 << 20, "{} blocks", m.blocks());
}

#[test]
fn nothing_to_reserve_leaves_the_file_alone() {
    let f = disk_file();
    preallocate_sized(&f, 0).expect("no-op");
    assert_eq!(f.metadata().expect("metadata").len(), 0);
}

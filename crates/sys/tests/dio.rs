//! Direct-I/O probing: alignment from statx, the second descriptor, refusals.
//! Needs /var/tmp on a disk file system (ext4 here) and /dev/shm on tmpfs.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use lightpath_sys::dio::{dio_alignment, is_refusal, reopen_direct, DirectError};
use lightpath_sys::mem::AlignedBuf;

/// True if `dir` is on tmpfs (`stat -f` type 0x01021994).
fn is_tmpfs(dir: &Path) -> bool {
    rustix::fs::statfs(dir).expect("statfs").f_type as i64 == 0x0102_1994
}

fn disk_file() -> File {
    assert!(!is_tmpfs(Path::new("/var/tmp")), "these tests need /var/tmp on a disk file system");
    tempfile::tempfile_in("/var/tmp").expect("temp file in /var/tmp")
}

#[test]
fn disk_reports_power_of_two_alignment() {
    let a = dio_alignment(&disk_file()).expect("ext4 on Linux >= 6.1 reports STATX_DIOALIGN");
    assert!(a.mem.is_power_of_two() && a.offset.is_power_of_two(), "{a:?}");
    assert!(a.offset >= 512 && a.offset <= 65536, "{a:?}");
}

#[test]
fn tmpfs_is_unsupported_not_an_error() {
    assert!(is_tmpfs(Path::new("/dev/shm")), "this test needs /dev/shm on tmpfs");
    let f = tempfile::tempfile_in("/dev/shm").expect("temp file in /dev/shm");
    assert_eq!(dio_alignment(&f), None);
    match reopen_direct(&f, true) {
        Err(DirectError::Unsupported(_)) => {}
        other => panic!("expected Unsupported on tmpfs, got {other:?}"),
    }
}

#[test]
fn direct_write_is_seen_by_the_buffered_descriptor() {
    let f = disk_file();
    let a = dio_alignment(&f).expect("alignment");
    let d = reopen_direct(&f, true).expect("O_DIRECT reopen on ext4");
    let mut buf = AlignedBuf::new(64 << 10, a.mem.max(4096)).expect("buffer");
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i * 7 % 251) as u8;
    }
    d.write_all_at(&buf, 4096).expect("aligned direct write");
    let mut back = vec![0u8; buf.len()];
    f.read_exact_at(&mut back, 4096).expect("buffered read back");
    assert_eq!(&back[..], &buf[..]);
    assert_eq!(f.metadata().expect("metadata").len(), 4096 + (64 << 10));
}

#[test]
fn direct_descriptor_is_read_only_when_asked() {
    let f = disk_file();
    f.write_all_at(&[1u8; 8192], 0).expect("write");
    let d = reopen_direct(&f, false).expect("O_DIRECT reopen");
    let mut buf = AlignedBuf::new(8192, 4096).expect("buffer");
    d.read_exact_at(&mut buf, 0).expect("direct read");
    assert!(buf.iter().all(|&b| b == 1));
    assert!(d.write_all_at(&buf, 0).is_err(), "a read-only direct fd must refuse writes");
}

#[test]
fn misaligned_direct_write_is_a_refusal() {
    let f = disk_file();
    let a = dio_alignment(&f).expect("alignment");
    let d = reopen_direct(&f, true).expect("O_DIRECT reopen");
    let buf = AlignedBuf::new(8192, 4096).expect("buffer");
    let e = d.write_at(&buf[..a.offset + 1], 0).expect_err("odd length must be refused");
    assert!(is_refusal(&e), "{e:?}");
    let e = d.write_at(&buf[..a.offset], 1).expect_err("odd file offset must be refused");
    assert!(is_refusal(&e), "{e:?}");
    // (a misaligned memory address was accepted by 6.18 on virtio here, so
    // it is not asserted; the sink aligns memory anyway)
}

#[test]
fn unsupported_converts_to_io_unsupported() {
    let e: std::io::Error = DirectError::Unsupported("x".into()).into();
    assert_eq!(e.kind(), std::io::ErrorKind::Unsupported);
}

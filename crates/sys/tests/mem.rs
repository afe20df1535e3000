//! Aligned buffers, mlock and NUMA binding.

use std::path::Path;

use lightpath_sys::mem::{bind_to_node, lock, node_of, page_size, AlignedBuf};

#[test]
fn alignment_and_capacity_are_honoured() {
    for align in [1, 512, 4096, 1 << 16, 2 << 20] {
        for cap in [1, 4095, 4096, 256 << 10, 3 << 20] {
            let mut b = AlignedBuf::new(cap, align).expect("alloc");
            assert_eq!(b.as_ptr() as usize % align, 0, "align {align} cap {cap}");
            assert_eq!((b.len(), b.capacity(), b.align()), (cap, cap, align));
            assert!(b.iter().all(|&x| x == 0), "zeroed");
            b[cap - 1] = 7;
            assert_eq!(b[cap - 1], 7);
        }
    }
}

#[test]
fn bad_requests_are_invalid_input() {
    for (cap, align) in [(0, 4096), (4096, 3), (4096, 0)] {
        let e = AlignedBuf::new(cap, align).expect_err("must refuse");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "cap {cap} align {align}");
    }
}

#[test]
fn buffers_move_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<AlignedBuf>();
    let mut b = AlignedBuf::new(4096, 4096).expect("alloc");
    b.fill(9);
    let b = std::thread::spawn(move || {
        assert!(b.iter().all(|&x| x == 9));
        b
    })
    .join()
    .expect("thread");
    assert_eq!(b[0], 9);
}

fn vm_locked_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("status");
    let line = s.lines().find(|l| l.starts_with("VmLck:")).expect("VmLck line");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("VmLck value")
}

#[test]
fn lock_pins_pages_or_reports_why_not() {
    let b = AlignedBuf::new(4 << 20, page_size()).expect("alloc");
    let before = vm_locked_kib();
    match lock(&b) {
        Ok(()) => assert!(vm_locked_kib() >= before + 4096, "VmLck did not grow by 4 MiB"),
        Err(e) => {
            assert!(lightpath_sys::privs::euid() != 0, "root (CAP_IPC_LOCK) must be able to mlock: {e}");
            assert!(matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::ENOMEM)), "{e:?}");
        }
    }
    drop(b);
}

#[test]
fn bind_to_existing_node_places_pages_there() {
    let mut b = AlignedBuf::new(1 << 20, page_size()).expect("alloc");
    if !Path::new("/sys/devices/system/node/node0").exists() {
        let e = bind_to_node(&b, 0).expect_err("no NUMA support");
        assert_eq!(e.raw_os_error(), Some(libc::ENOSYS));
        return;
    }
    bind_to_node(&b, 0).expect("bind to node 0");
    b.prefault();
    assert_eq!(node_of(&b).expect("get_mempolicy"), 0);
}

#[test]
fn bind_to_missing_node_is_an_error() {
    let b = AlignedBuf::new(1 << 20, page_size()).expect("alloc");
    let online = std::fs::read_to_string("/sys/devices/system/node/online").unwrap_or_default();
    assert!(!online.contains("1000"), "test assumes node 1000 does not exist");
    assert!(bind_to_node(&b, 1000).is_err());
    assert!(bind_to_node(&b, 1 << 20).is_err());
}

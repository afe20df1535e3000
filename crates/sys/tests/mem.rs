//! Aligned buffers, and regions of them on huge pages with their mlock and
//! NUMA binding.

use std::path::Path;

use lightpath_sys::mem::{huge_page_bytes, node_of, page_size, AlignedBuf, Region};

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

/// Tests that read VmLck take turns: another test's lock or unlock in
/// between would move it.
static VMLCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn vm_locked_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("status");
    let line = s.lines().find(|l| l.starts_with("VmLck:")).expect("VmLck line");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("VmLck value")
}

#[test]
fn lock_pins_pages_or_reports_why_not() {
    let _turn = VMLCK.lock().unwrap_or_else(|e| e.into_inner());
    let region = Region::new(4, 1 << 20, page_size()).expect("region");
    let before = vm_locked_kib();
    match region.lock() {
        Ok(()) => assert!(vm_locked_kib() >= before + 4096, "VmLck did not grow by 4 MiB"),
        Err(e) => {
            assert!(lightpath_sys::privs::euid() != 0, "root (CAP_IPC_LOCK) must be able to mlock: {e}");
            assert!(matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::ENOMEM)), "{e:?}");
        }
    }
    drop(region);
}

#[test]
fn bind_to_existing_node_places_pages_there() {
    let region = Region::new(4, 1 << 20, page_size()).expect("region");
    if !Path::new("/sys/devices/system/node/node0").exists() {
        let e = region.bind_to_node(0).expect_err("no NUMA support");
        assert_eq!(e.raw_os_error(), Some(libc::ENOSYS));
        return;
    }
    region.bind_to_node(0).expect("bind to node 0");
    let mut bufs = region.into_buffers();
    bufs[3].fill(1); // faulted in after the bind: the policy places it
    assert_eq!(node_of(&bufs[3]).expect("get_mempolicy"), 0);
}

#[test]
fn bind_to_missing_node_is_an_error() {
    let region = Region::new(1, 1 << 20, page_size()).expect("region");
    let online = std::fs::read_to_string("/sys/devices/system/node/online").unwrap_or_default();
    assert!(!online.contains("1000"), "test assumes node 1000 does not exist");
    assert!(region.bind_to_node(1000).is_err());
    assert!(region.bind_to_node(1 << 20).is_err());
}

/// The kernel's transparent huge page mode: "always", "madvise" or "never".
fn thp_mode() -> String {
    let s = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    s.split_once('[').and_then(|(_, r)| r.split_once(']')).map(|(m, _)| m.to_string()).unwrap_or_default()
}

#[test]
fn a_region_cuts_into_aligned_disjoint_zeroed_buffers() {
    let region = Region::new(5, 100_000, 4096).expect("region");
    let mut bufs = region.into_buffers();
    assert_eq!(bufs.len(), 5);
    for (i, b) in bufs.iter_mut().enumerate() {
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        assert_eq!((b.len(), b.capacity(), b.align()), (100_000, 100_000, 4096));
        assert!(b.iter().all(|&x| x == 0), "zeroed");
        b.fill(i as u8 + 1);
    }
    for (i, b) in bufs.iter().enumerate() {
        assert!(b.iter().all(|&x| x == i as u8 + 1), "buffer {i} was overwritten by a neighbour");
    }
    let mut starts: Vec<usize> = bufs.iter().map(|b| b.as_ptr() as usize).collect();
    starts.sort_unstable();
    assert!(starts.windows(2).all(|w| w[1] - w[0] >= 100_000), "pieces overlap: {starts:?}");
}

#[test]
fn a_region_outlives_any_of_its_buffers_and_goes_with_the_last() {
    let mut bufs = Region::new(4, 1 << 20, 4096).expect("region").into_buffers();
    let addr = bufs[0].as_ptr() as usize;
    let mapped = || {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        maps.lines().filter_map(|l| l.split_once(' ')?.0.split_once('-')).any(|(lo, hi)| {
            let (lo, hi) = (usize::from_str_radix(lo, 16).unwrap(), usize::from_str_radix(hi, 16).unwrap());
            (lo..hi).contains(&addr)
        })
    };
    let last = bufs.pop().expect("a buffer");
    drop(bufs);
    assert!(mapped(), "unmapped while a buffer still uses it");
    let last = std::thread::spawn(move || last).join().expect("thread");
    assert!(last.iter().all(|&x| x == 0));
    drop(last);
    assert!(!mapped(), "still mapped after its last buffer went");
}

#[test]
fn a_large_region_sits_on_huge_pages_where_the_kernel_has_them() {
    let region = Region::new(16, 256 << 10, 4096).expect("region");
    let advised = region.huge_pages().as_ref().copied().map_err(|e| e.to_string());
    let mut bufs = region.into_buffers();
    bufs.iter_mut().for_each(|b| b.fill(1));
    let huge = huge_page_bytes(&bufs[0]).expect("smaps names the region");
    match thp_mode().as_str() {
        "always" | "madvise" => {
            assert_eq!(advised, Ok(true));
            assert!(huge >= 2 << 20, "4 MiB advised, {huge} bytes on huge pages");
        }
        mode => assert_eq!(huge, 0, "THP mode {mode:?}"),
    }
    let small = Region::new(2, 4096, 4096).expect("small region");
    assert!(matches!(small.huge_pages(), Ok(false)), "a region under 2 MiB is not advised");
}

#[test]
fn bad_regions_are_invalid_input() {
    for (count, cap, align) in [(0, 4096, 4096), (1, 0, 4096), (1, 4096, 3), (usize::MAX, 4096, 4096)] {
        let e = Region::new(count, cap, align).err().expect("must refuse");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{count} x {cap} align {align}");
    }
}

//! The buffer pool: alignment, exclusive hand-out, blocking when empty.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use lightpath_engine::pool::{BufferPool, PoolOptions};

fn pool(count: usize, size: usize, align: usize) -> BufferPool {
    BufferPool::new(&PoolOptions { count, size, align, ..Default::default() }).expect("pool")
}

#[test]
fn buffers_are_aligned_sized_and_full_length() {
    for align in [512, 4096, 1 << 16] {
        let p = pool(3, 100_000, align);
        let bufs: Vec<_> = (0..3).map(|_| p.get()).collect();
        for b in &bufs {
            assert_eq!(b.as_ptr() as usize % align, 0);
            assert_eq!((b.len(), b.capacity()), (100_000, 100_000));
        }
        assert_eq!((p.buf_size(), p.align()), (100_000, align));
    }
}

#[test]
fn set_len_limits_the_view() {
    let p = pool(1, 4096, 4096);
    let mut b = p.get();
    b.full_mut().fill(3);
    b.set_len(10);
    assert_eq!(&b[..], &[3u8; 10]);
    b[9] = 4;
    assert_eq!(b.full_mut()[9], 4);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.set_len(4097)));
    assert!(r.is_err(), "set_len beyond capacity must panic");
}

#[test]
fn try_get_is_none_when_empty_and_drop_returns() {
    let p = pool(2, 4096, 4096);
    let a = p.try_get().expect("first");
    let b = p.try_get().expect("second");
    assert_ne!(a.as_ptr(), b.as_ptr());
    assert!(p.try_get().is_none());
    assert_eq!(p.stats().in_use, 2);
    drop(a);
    let c = p.try_get().expect("returned buffer");
    assert!(p.try_get().is_none());
    drop((b, c));
    let s = p.stats();
    assert_eq!((s.count, s.in_use, s.high_water), (2, 0, 2));
    assert!(p.get_timeout(Duration::from_millis(1)).is_some());
}

#[test]
fn get_timeout_gives_up_when_empty() {
    let p = pool(1, 4096, 4096);
    let _held = p.get();
    assert!(p.get_timeout(Duration::from_millis(30)).is_none());
    assert_eq!(p.stats().waits, 1);
}

#[test]
fn get_blocks_until_a_buffer_is_dropped() {
    let p = pool(1, 4096, 4096);
    let held = p.get();
    let got = Arc::new(AtomicBool::new(false));
    let (p2, got2) = (p.clone(), got.clone());
    let t = std::thread::spawn(move || {
        let b = p2.get();
        got2.store(true, Ordering::SeqCst);
        b.as_ptr() as usize
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(!got.load(Ordering::SeqCst), "get returned while the pool was empty");
    let addr = held.as_ptr() as usize;
    drop(held);
    assert_eq!(t.join().expect("thread"), addr, "the waiter gets the returned buffer");
    assert!(p.stats().waits >= 1);
}

#[test]
fn no_buffer_is_handed_out_twice_under_contention() {
    const COUNT: usize = 4;
    let p = pool(COUNT, 4096, 4096);
    let live = Arc::new(Mutex::new(HashSet::new()));
    let start = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let (p, live, start) = (p.clone(), live.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for _ in 0..2000 {
                    let mut b = p.get();
                    let addr = b.as_ptr() as usize;
                    assert!(live.lock().expect("lock").insert(addr), "buffer {addr:#x} handed out twice");
                    b[0] = i as u8;
                    b[4095] = i as u8;
                    std::hint::spin_loop();
                    assert_eq!((b[0], b[4095]), (i as u8, i as u8), "another thread wrote into our buffer");
                    assert!(live.lock().expect("lock").remove(&addr));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("worker");
    }
    let s = p.stats();
    assert_eq!(s.in_use, 0);
    assert!(s.high_water <= COUNT && s.high_water >= 1, "{s:?}");
}

#[test]
fn lock_and_node_are_done_or_noted() {
    let opts = PoolOptions { count: 2, size: 1 << 20, align: 4096, lock: true, node: Some(0) };
    let p = BufferPool::new(&opts).expect("pool");
    let root = lightpath_sys::privs::euid() == 0;
    let numa = std::path::Path::new("/sys/devices/system/node/node0").exists();
    if root && numa {
        assert!(p.notes().is_empty(), "{:?}", p.notes());
    } else if !numa {
        // What could not be done is said, not skipped (a locked 2 MiB may
        // fit an unprivileged memlock limit, so only the node is sure).
        assert!(p.notes().iter().any(|n| n.contains("NUMA node 0")), "{:?}", p.notes());
    }
    let opts = PoolOptions { node: Some(1000), lock: false, ..opts };
    let p = BufferPool::new(&opts).expect("a bad node is a note, not an error");
    assert_eq!(p.notes().len(), 1, "{:?}", p.notes());
    assert!(p.notes()[0].contains("NUMA node 1000"), "{:?}", p.notes());
}

#[test]
fn bad_options_are_errors() {
    for (count, size, align) in [(0, 4096, 4096), (1, 0, 4096), (1, 4096, 3)] {
        let e = BufferPool::new(&PoolOptions { count, size, align, ..Default::default() }).expect_err("refused");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    }
}

#[test]
fn a_pool_of_several_mib_sits_on_huge_pages_where_the_kernel_has_them() {
    let p = pool(16, 256 << 10, 4096);
    // Its pages come in as buffers are first used, not before.
    assert_eq!(p.huge_page_bytes(), Some(0), "a fresh pool's pages were faulted in");
    let mut used: Vec<_> = (0..16).map(|_| p.get()).collect();
    used.iter_mut().for_each(|b| b.fill(1));
    drop(used);
    let huge = p.huge_page_bytes().expect("smaps names the pool's region");
    let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if !mode.contains("[always]") && !mode.contains("[madvise]") {
        assert_eq!(huge, 0, "THP off or absent: {mode:?}");
    } else {
        assert!(huge >= 2 << 20, "a 4 MiB pool with {huge} bytes on huge pages (THP: {mode:?})");
        assert!(p.notes().is_empty(), "{:?}", p.notes());
    }
    let held: Vec<_> = (0..16).map(|_| p.get()).collect();
    assert_eq!(p.huge_page_bytes(), None, "no free buffer to ask about");
    drop(held);
    assert!(p.huge_page_bytes().is_some());
}

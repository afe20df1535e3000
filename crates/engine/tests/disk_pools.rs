//! One pool of disk threads per declared storage device: a transfer's disk
//! work runs on the pool of the disk holding its file (found from the
//! file's `st_dev` through sysfs), anything else on the first pool, and the
//! process runs exactly the declared number of disk threads.
//! (Its own test binary: the devices are process-wide.)

mod common;
use common::pair;
use lightpath_engine::iothreads::{self, DiskDevice, DiskId, IoConfig};
use lightpath_engine::{modee, Control, FileSource, MemorySink, RecvOpts, SendPlan, Source};
use lightpath_sys::topo::Sysfs;
use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

/// A file source that records which threads read it and claims `dev`.
struct Recording {
    inner: FileSource,
    dev: Option<u64>,
    threads: Mutex<BTreeSet<String>>,
}

impl Source for Recording {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let name = std::thread::current().name().unwrap_or("?").to_string();
        self.threads.lock().unwrap().insert(name);
        self.inner.read_exact_at(buf, offset)
    }
    fn device(&self) -> Option<u64> {
        self.dev
    }
}

/// Send `src` over 4 loopback streams to memory; returns the reading threads.
fn send_recording(src: &Recording) -> BTreeSet<String> {
    let (mut s, mut r) = pair(4);
    let plan = SendPlan { ranges: vec![(0, src.len())], wire_base: 0, block: 64 << 10, grow: None };
    let sink = MemorySink::new(1 << 30);
    let opts = RecvOpts { base: 0, max_offset: 1 << 40, idle: Duration::from_secs(10) };
    std::thread::scope(|sc| {
        sc.spawn(|| modee::send(&mut s, src, &plan, &Control::new()).unwrap());
        modee::recv(&mut r, None, &sink, &opts, &Control::new()).unwrap();
    });
    assert_eq!(sink.into_inner().len() as u64, src.len());
    src.threads.lock().unwrap().clone()
}

fn disk_threads_running() -> usize {
    let names = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok().map(|c| c.trim().to_string()));
    names.filter(|n| n.starts_with("lp-disk-")).count()
}

fn names(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn each_device_has_its_pool_and_transfers_use_their_disks_pool() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let holder = Sysfs::system().block_device_of(dir).unwrap();
    let holder = holder.unwrap_or_else(|| panic!("{} is not on a block device", dir.display()));
    let disk = holder.disks[0].clone();
    iothreads::set_devices(vec![
        DiskDevice { name: "lp-no-such-disk".into(), threads: 1 },
        DiskDevice { name: disk.clone(), threads: 2 },
    ]);
    iothreads::configure(IoConfig { net_threads: 1, disk_threads: 7 }).unwrap();
    let path = dir.join("disk-pools.dat");
    std::fs::write(&path, vec![7u8; 3 << 20]).unwrap();
    let dev = std::fs::metadata(&path).unwrap().dev();
    assert_eq!(iothreads::disk_pool_of(Some(dev)), Some((DiskId(1), disk.clone())), "{disk} is pool 1");
    assert_eq!(iothreads::disk_pool_of(None).map(|p| p.0), Some(DiskId::DEFAULT));

    let on_disk = Recording {
        inner: FileSource::new(std::fs::File::open(&path).unwrap(), false).unwrap(),
        dev: Some(dev),
        threads: Mutex::default(),
    };
    let used = send_recording(&on_disk);
    assert!(!used.is_empty() && used.is_subset(&names(&["lp-disk-1", "lp-disk-2"])), "{disk}'s pool: {used:?}");

    let unknown = Recording { dev: None, ..on_disk };
    unknown.threads.lock().unwrap().clear();
    assert_eq!(send_recording(&unknown), names(&["lp-disk-0"]), "no device: the first pool");
    assert_eq!(disk_threads_running(), 3, "1 + 2 declared disk threads, not IoConfig's 7");
    std::fs::remove_file(&path).unwrap();
}

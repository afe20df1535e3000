//! Topology discovery on fake sysfs trees built in temporary directories,
//! and a few facts about this machine's real /sys.

use lightpath_sys::topo::{self, BlockHolder, Sysfs, TopoError};
use proptest::prelude::*;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

/// A fake sysfs under a temporary directory.
struct Fake {
    dir: tempfile::TempDir,
}

impl Fake {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().expect("tempdir") }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn sysfs(&self) -> Sysfs {
        Sysfs::new(self.root())
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.root().join(rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(&p, text).expect("write");
        p
    }

    fn mkdir(&self, rel: &str) -> PathBuf {
        let p = self.root().join(rel);
        fs::create_dir_all(&p).expect("mkdir");
        p
    }

    fn link(&self, rel_link: &str, rel_target: &str) {
        let l = self.root().join(rel_link);
        fs::create_dir_all(l.parent().expect("parent")).expect("mkdir");
        symlink(self.root().join(rel_target), l).expect("symlink");
    }

    fn node(&self, id: u32, cpulist: &str) {
        self.write(&format!("devices/system/node/node{id}/cpulist"), &format!("{cpulist}\n"));
    }

    /// A PCI function with a numa_node, and a NIC under it (optionally behind virtio).
    fn pci_nic(&self, pci: &str, numa: &str, name: &str, speed: Option<&str>, virtio: bool) {
        let func = format!("devices/pci0000:00/{pci}");
        self.write(&format!("{func}/numa_node"), &format!("{numa}\n"));
        let dev = if virtio { self.mkdir(&format!("{func}/virtio3")).display().to_string() } else { func.clone() };
        let dev = dev.strip_prefix(&format!("{}/", self.root().display())).unwrap_or(&dev).to_string();
        let ndir = format!("{dev}/net/{name}");
        self.mkdir(&ndir);
        if let Some(s) = speed {
            self.write(&format!("{ndir}/speed"), &format!("{s}\n"));
        }
        self.link(&format!("{ndir}/device"), &dev);
        self.link(&format!("class/net/{name}"), &ndir);
    }

    fn virtual_nic(&self, name: &str) {
        let ndir = format!("devices/virtual/net/{name}");
        self.mkdir(&ndir);
        self.link(&format!("class/net/{name}"), &ndir);
    }

    /// A whole disk under a controller directory `ctrl` (created with numa_node),
    /// with `dev` number, rotational flag and partitions `(name, dev)`.
    fn disk(&self, ctrl: &str, numa: &str, name: &str, dev: &str, rot: &str, parts: &[(&str, &str)]) {
        self.write(&format!("{ctrl}/numa_node"), &format!("{numa}\n"));
        let ddir = format!("{ctrl}/block/{name}");
        self.write(&format!("{ddir}/dev"), &format!("{dev}\n"));
        self.write(&format!("{ddir}/queue/rotational"), &format!("{rot}\n"));
        self.link(&format!("{ddir}/device"), ctrl);
        self.link(&format!("block/{name}"), &ddir);
        self.link(&format!("dev/block/{dev}"), &ddir);
        for (p, pdev) in parts {
            self.write(&format!("{ddir}/{p}/partition"), "1\n");
            self.write(&format!("{ddir}/{p}/dev"), &format!("{pdev}\n"));
            self.link(&format!("dev/block/{pdev}"), &format!("{ddir}/{p}"));
        }
    }

    /// A device-mapper device over the given block directories (relative paths).
    fn dm(&self, name: &str, dev: &str, slaves: &[&str]) {
        let ddir = format!("devices/virtual/block/{name}");
        self.write(&format!("{ddir}/dev"), &format!("{dev}\n"));
        for s in slaves {
            let sname = Path::new(s).file_name().expect("name").to_string_lossy().into_owned();
            self.link(&format!("{ddir}/slaves/{sname}"), s);
        }
        self.link(&format!("block/{name}"), &ddir);
        self.link(&format!("dev/block/{dev}"), &ddir);
    }
}

const NVME_CTRL: &str = "devices/pci0000:00/0000:00:04.0/nvme/nvme0";
const SATA_CTRL: &str = "devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0";

/// Two nodes; a 100G NIC on node 1, a virtio NIC on node 1 (speed -1), a NIC with
/// numa_node -1 and no speed file, an NVMe on node 0,
/// a SATA disk (numa -1) with two partitions, an LVM volume over both disks.
fn two_node_box() -> Fake {
    let f = Fake::new();
    f.node(0, "0-3,8-11");
    f.node(1, "4-7,12-15");
    f.pci_nic("0000:81:00.0", "1", "ens1f0", Some("100000"), false);
    f.pci_nic("0000:00:03.0", "1", "eth0", Some("-1"), true);
    f.pci_nic("0000:00:05.0", "-1", "eno2", None, false);
    f.virtual_nic("lo");
    f.virtual_nic("bond0");
    // NVMe: namespace -> controller (no numa_node of its own) -> PCI function (node 0).
    f.write("devices/pci0000:00/0000:00:04.0/numa_node", "0\n");
    f.disk(NVME_CTRL, "", "nvme0n1", "259:0", "0", &[("nvme0n1p1", "259:1")]);
    fs::remove_file(f.root().join(NVME_CTRL).join("numa_node")).expect("rm");
    f.disk(SATA_CTRL, "-1", "sda", "8:0", "1", &[("sda1", "8:1"), ("sda2", "8:2")]);
    f.dm("dm-0", "253:0", &[&format!("{SATA_CTRL}/block/sda/sda2"), &format!("{NVME_CTRL}/block/nvme0n1/nvme0n1p1")]);
    f.write("devices/virtual/block/loop0/dev", "7:0\n");
    f.link("block/loop0", "devices/virtual/block/loop0");
    f
}

#[test]
fn nodes_and_their_cpus() {
    let f = two_node_box();
    let nodes = f.sysfs().nodes().unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!((nodes[0].id, nodes[0].cpus.clone()), (0, vec![0, 1, 2, 3, 8, 9, 10, 11]));
    assert_eq!((nodes[1].id, nodes[1].cpus.clone()), (1, vec![4, 5, 6, 7, 12, 13, 14, 15]));
}

#[test]
fn without_node_directories_one_node_has_the_online_cpus() {
    let f = Fake::new();
    f.write("devices/system/cpu/online", "0-5\n");
    let nodes = f.sysfs().nodes().unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!((nodes[0].id, nodes[0].cpus.clone()), (0, vec![0, 1, 2, 3, 4, 5]));
}

#[test]
fn nodes_sorted_numerically_and_memory_only_nodes_kept() {
    let f = Fake::new();
    for id in [10, 2, 0, 1] {
        f.node(id, if id == 10 { "" } else { "0" });
    }
    let ids: Vec<u32> = f.sysfs().nodes().unwrap().iter().map(|n| n.id).collect();
    assert_eq!(ids, vec![0, 1, 2, 10]);
    assert!(f.sysfs().nodes().unwrap()[3].cpus.is_empty());
}

#[test]
fn a_bad_cpulist_is_an_error_naming_it() {
    let f = Fake::new();
    f.node(0, "0-x");
    let err = f.sysfs().nodes().unwrap_err();
    assert!(matches!(err, TopoError::CpuList { .. }), "{err}");
    assert!(err.to_string().contains("0-x"), "{err}");
}

#[test]
fn nics_with_node_and_speed_and_virtual_ones_skipped() {
    let f = two_node_box();
    let nics = f.sysfs().nics(&[]).unwrap();
    let names: Vec<&str> = nics.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, vec!["eno2", "ens1f0", "eth0"]);
    assert_eq!((nics[0].node, nics[0].speed_mbit, nics[0].is_virtual), (None, None, false), "numa_node -1");
    assert_eq!((nics[1].node, nics[1].speed_mbit, nics[1].is_virtual), (Some(1), Some(100_000), false));
    // virtio: numa_node is on the PCI function above the virtio device; speed -1 is unknown.
    assert_eq!((nics[2].node, nics[2].speed_mbit), (Some(1), None));
}

#[test]
fn virtual_nics_when_asked_by_name() {
    let f = two_node_box();
    let nics = f.sysfs().nics(&["lo", "bond0"]).unwrap();
    assert_eq!(nics.len(), 5);
    let lo = f.sysfs().nic("lo").unwrap();
    assert!(lo.is_virtual && lo.node.is_none() && lo.speed_mbit.is_none());
    assert!(matches!(f.sysfs().nic("wlan9"), Err(TopoError::NoDevice { .. })));
}

#[test]
fn disks_with_node_media_and_virtual_ones_skipped() {
    let f = two_node_box();
    let disks = f.sysfs().disks(&[]).unwrap();
    let names: Vec<&str> = disks.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, vec!["nvme0n1", "sda"]);
    let nvme = &disks[0];
    assert_eq!((nvme.node, nvme.rotational, nvme.nvme), (Some(0), Some(false), true), "walked up to the PCI function");
    let sda = &disks[1];
    assert_eq!((sda.node, sda.rotational, sda.nvme), (None, Some(true), false));
    assert!(f.sysfs().disk("dm-0").unwrap().is_virtual);
    assert_eq!(f.sysfs().disks(&["loop0"]).unwrap().len(), 3);
}

#[test]
fn discover_all_and_unknown_wanted_name_is_an_error() {
    let f = two_node_box();
    let t = f.sysfs().discover(&["lo"]).unwrap();
    assert_eq!((t.nodes.len(), t.nics.len(), t.disks.len()), (2, 4, 2));
    let err = f.sysfs().discover(&["eth7"]).unwrap_err();
    assert!(err.to_string().contains("eth7"), "{err}");
}

#[test]
fn block_numbers_resolve_to_whole_disks() {
    let f = two_node_box();
    let s = f.sysfs();
    let holder = |d: &str, disks: &[&str]| BlockHolder {
        device: d.into(),
        disks: disks.iter().map(|x| x.to_string()).collect(),
    };
    assert_eq!(s.block_device_of_dev(8, 0).unwrap(), Some(holder("sda", &["sda"])));
    assert_eq!(s.block_device_of_dev(8, 2).unwrap(), Some(holder("sda2", &["sda"])));
    assert_eq!(s.block_device_of_dev(259, 1).unwrap(), Some(holder("nvme0n1p1", &["nvme0n1"])));
    assert_eq!(s.block_device_of_dev(253, 0).unwrap(), Some(holder("dm-0", &["nvme0n1", "sda"])));
    assert_eq!(s.block_device_of_dev(0, 42).unwrap(), None, "major 0: no block device (tmpfs, overlayfs)");
    assert_eq!(s.block_device_of_dev(9, 9).unwrap(), None, "not in sysfs");
}

#[test]
fn stacked_device_mapper_resolves_through_both_layers() {
    let f = two_node_box();
    // dm-1 (e.g. dm-crypt) over dm-0 (LVM) over sda2 + nvme0n1p1.
    f.dm("dm-1", "253:1", &["devices/virtual/block/dm-0"]);
    let h = f.sysfs().block_device_of_dev(253, 1).unwrap().unwrap();
    assert_eq!(h.disks, vec!["nvme0n1".to_string(), "sda".to_string()]);
}

#[test]
fn this_machine_real_sys() {
    let s = Sysfs::system();
    let t = s.discover(&[]).unwrap();
    assert!(!t.nodes.is_empty());
    assert!(t.nodes.iter().any(|n| !n.cpus.is_empty()), "{:?}", t.nodes);
    let allowed = topo::allowed_cpus().unwrap();
    let all: Vec<u32> = t.nodes.iter().flat_map(|n| n.cpus.clone()).collect();
    assert!(!allowed.is_empty() && allowed.iter().all(|c| all.contains(c)), "{allowed:?} vs {all:?}");
    // The disk holding this crate: a block device whose disks are in /sys/block,
    // or (overlayfs, tmpfs, btrfs) a device number of major 0 and no answer.
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let st = rustix::fs::stat(here).unwrap();
    match s.block_device_of(here).unwrap() {
        Some(h) => {
            eprintln!("{} is on {h:?}", here.display());
            assert!(!h.disks.is_empty());
            for d in &h.disks {
                assert!(Path::new("/sys/block").join(d).exists(), "{d} not in /sys/block");
            }
        }
        None => assert_eq!(rustix::fs::major(st.st_dev), 0, "a real block device went unresolved"),
    }
}

#[test]
fn loopback_address_is_on_lo() {
    assert_eq!(topo::nic_of("127.0.0.1".parse().unwrap()).unwrap().as_deref(), Some("lo"));
    assert_eq!(topo::nic_of("::ffff:127.0.0.1".parse().unwrap()).unwrap().as_deref(), Some("lo"));
    assert_eq!(topo::nic_of("0.0.0.0".parse().unwrap()).unwrap(), None);
    // TEST-NET-3, never configured on a machine that runs the tests.
    assert_eq!(topo::nic_of("203.0.113.254".parse().unwrap()).unwrap(), None);
}

/// The ephemeral range is the sysctl's.
#[test]
fn the_ephemeral_ports_are_the_kernels() {
    let (low, high) = lightpath_sys::net::ephemeral_ports().unwrap();
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    assert_eq!(text.split_whitespace().collect::<Vec<_>>(), [low.to_string(), high.to_string()]);
    assert!(low <= high);
}

/// The host's addresses are those `ip addr` shows: loopback and the
/// address this host's route to the outside leaves from.
#[test]
fn the_hosts_addresses_are_its_interfaces() {
    let all = topo::host_addresses().unwrap();
    assert!(all.contains(&"127.0.0.1".parse().unwrap()), "{all:?}");
    assert!(!all.contains(&"203.0.113.254".parse().unwrap()), "{all:?}");
    let out = std::process::Command::new("ip").args(["-o", "addr", "show"]).output().unwrap();
    let shown: Vec<std::net::IpAddr> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            l.split_whitespace().skip_while(|w| !w.starts_with("inet")).nth(1)?.split('/').next()?.parse().ok()
        })
        .collect();
    assert!(!shown.is_empty());
    assert!(shown.iter().all(|a| all.contains(a)), "ip addr: {shown:?}, getifaddrs: {all:?}");
}

#[test]
fn pinning_narrows_the_affinity_of_this_thread_only() {
    let allowed = topo::allowed_cpus().unwrap();
    let cpu = *allowed.last().unwrap();
    let inner = std::thread::spawn(move || {
        topo::pin_current_thread(&[cpu]).unwrap();
        (topo::allowed_cpus().unwrap(), rustix::thread::sched_getcpu())
    })
    .join()
    .unwrap();
    assert_eq!(inner, (vec![cpu], cpu as usize));
    assert_eq!(topo::allowed_cpus().unwrap(), allowed, "the test thread itself was not pinned");
    assert!(matches!(topo::pin_current_thread(&[]), Err(TopoError::CpuSet { .. })));
    assert!(matches!(topo::pin_current_thread(&[1 << 20]), Err(TopoError::CpuSet { .. })));
}

#[test]
fn capabilities_of_this_process_are_readable() {
    let c = topo::capabilities().unwrap();
    let status = fs::read_to_string("/proc/self/status").unwrap();
    assert_eq!(Some(c), topo::parse_capabilities(&status));
}

proptest! {
    #[test]
    fn cpulist_round_trip(mut cpus in proptest::collection::vec(0u32..300, 0..64)) {
        let text = topo::format_cpulist(&cpus);
        cpus.sort_unstable();
        cpus.dedup();
        prop_assert_eq!(topo::parse_cpulist(&text).unwrap(), cpus);
    }
}

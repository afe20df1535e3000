//! Machine topology for I/O placement: NUMA nodes and their cpus, which node
//! holds each NIC and block device, which device holds a path or an address,
//! thread pinning, and the capabilities this process has.
//!
//! Everything comes from sysfs, whose root is a parameter ([`Sysfs::new`]) so
//! tests can build fake trees in a temporary directory. hwloc is not used:
//! for the questions placement asks (cpus per node, the node of a PCI device)
//! hwloc reads the same sysfs files (`node*/cpulist`, `device/numa_node`), and
//! linking it would need the C library at build time on every machine. What
//! hwloc adds (caches, SMT siblings, GPU and co-processor objects) does not
//! change which node a thread or a buffer belongs on.

use std::ffi::CStr;
use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

/// Capability numbers from `<linux/capability.h>`.
const CAP_IPC_LOCK: u32 = 14;
const CAP_SYS_NICE: u32 = 23;
/// How far up the device tree to look for `numa_node` (virtio: 1 level; NVMe
/// namespace -> controller -> PCI function: 2).
const NUMA_WALK_UP: usize = 4;
/// Nesting limit for stacked block devices (dm on md on partitions...).
const STACK_DEPTH: usize = 8;

/// What went wrong while reading the topology or applying it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TopoError {
    /// A cpu list such as `0-3,8` could not be parsed.
    #[error("bad cpu list {text:?}: {why}")]
    CpuList {
        /// The text given.
        text: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A sysfs or procfs file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A file held something other than what the kernel writes there.
    #[error("{}: unexpected contents {text:?}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What it held.
        text: String,
    },
    /// A device asked for by name does not exist.
    #[error("no {kind} named {name:?} in {}", dir.display())]
    NoDevice {
        /// "network interface" or "block device".
        kind: &'static str,
        /// The name asked for.
        name: String,
        /// Where it was looked for.
        dir: PathBuf,
    },
    /// A cpu number beyond what an affinity mask can hold, or an empty set.
    #[error("cannot pin to cpus {cpus:?}: {why}")]
    CpuSet {
        /// The cpus asked for.
        cpus: Vec<u32>,
        /// Why not.
        why: &'static str,
    },
    /// A system call failed.
    #[error("{call}: {source}")]
    Sys {
        /// The call.
        call: &'static str,
        /// The error.
        source: io::Error,
    },
}

type Result<T> = std::result::Result<T, TopoError>;

/// One NUMA node and the cpus it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaNode {
    /// Node number (`nodeN`).
    pub id: u32,
    /// Its cpus, ascending (may be empty: memory-only nodes).
    pub cpus: Vec<u32>,
}

/// A network interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nic {
    /// Interface name (`eth0`).
    pub name: String,
    /// NUMA node of its device; `None` when the kernel says -1 or there is none.
    pub node: Option<u32>,
    /// Link speed in Mbit/s, when the driver reports one.
    pub speed_mbit: Option<u64>,
    /// No `device` link: loopback, bridges, bonds, VLANs, tunnels.
    pub is_virtual: bool,
}

/// A whole block device (a disk, not a partition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    /// Kernel name (`sda`, `nvme0n1`, `vda`).
    pub name: String,
    /// NUMA node of its controller; `None` when unknown.
    pub node: Option<u32>,
    /// `queue/rotational`, when readable.
    pub rotational: Option<bool>,
    /// An NVMe namespace.
    pub nvme: bool,
    /// A virtio disk (a VM's disk: its `rotational` flag says nothing
    /// about the host's storage behind it).
    pub virtio: bool,
    /// No `device` link: loop, zram, device-mapper, md.
    pub is_virtual: bool,
}

/// Nodes, NICs and disks of a machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// NUMA nodes, by id.
    pub nodes: Vec<NumaNode>,
    /// Network interfaces, by name.
    pub nics: Vec<Nic>,
    /// Whole disks, by name.
    pub disks: Vec<Disk>,
}

/// The block device a path lives on and the whole disks under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockHolder {
    /// The device of the file system (`sda2`, `dm-0`, `vda`).
    pub device: String,
    /// The whole disks holding it, ascending (several for LVM or RAID).
    pub disks: Vec<String>,
}

/// This process's effective capabilities, as far as placement cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// CAP_SYS_NICE: raise I/O thread priority, move other processes' pages.
    pub sys_nice: bool,
    /// CAP_IPC_LOCK: lock buffers in memory beyond RLIMIT_MEMLOCK.
    pub ipc_lock: bool,
    /// The whole `CapEff` mask.
    pub effective: u64,
}

/// A sysfs tree: `/sys`, or a fake one under a test's temporary directory.
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    /// A sysfs tree rooted at `root` (the directory that holds `devices/`, `class/`, `block/`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The running system's `/sys`.
    pub fn system() -> Self {
        Self::new("/sys")
    }

    /// The root this reads from.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Nodes, NICs and disks. `wanted` names interfaces or disks to include
    /// even if virtual (`lo`, `bond0`, `dm-0`); a wanted name that exists
    /// nowhere is an error.
    pub fn discover(&self, wanted: &[&str]) -> Result<Topology> {
        let nics = self.nics(wanted)?;
        let disks = self.disks(wanted)?;
        for w in wanted {
            if !nics.iter().any(|n| n.name == *w) && !disks.iter().any(|d| d.name == *w) {
                let dir = self.root.clone();
                return Err(TopoError::NoDevice {
                    kind: "network interface or block device",
                    name: w.to_string(),
                    dir,
                });
            }
        }
        Ok(Topology { nodes: self.nodes()?, nics, disks })
    }

    /// NUMA nodes from `devices/system/node/node*/cpulist`; without any (a
    /// kernel built without NUMA) one node 0 with the online cpus.
    pub fn nodes(&self) -> Result<Vec<NumaNode>> {
        let dir = self.root.join("devices/system/node");
        let mut nodes = Vec::new();
        for name in list_dir(&dir)? {
            let Some(id) = name.strip_prefix("node").and_then(|s| s.parse::<u32>().ok()) else { continue };
            let cpus = parse_cpulist(&read_trimmed(&dir.join(&name).join("cpulist"))?)?;
            nodes.push(NumaNode { id, cpus });
        }
        if nodes.is_empty() {
            let cpus = parse_cpulist(&read_trimmed(&self.root.join("devices/system/cpu/online"))?)?;
            nodes.push(NumaNode { id: 0, cpus });
        }
        nodes.sort_by_key(|n| n.id);
        Ok(nodes)
    }

    /// Network interfaces from `class/net`: the physical ones, plus any
    /// virtual ones named in `wanted`. `lo` only when wanted.
    pub fn nics(&self, wanted: &[&str]) -> Result<Vec<Nic>> {
        let dir = self.root.join("class/net");
        let mut out = Vec::new();
        for name in list_dir(&dir)? {
            let nic = self.nic_at(&dir.join(&name), &name);
            let asked = wanted.contains(&name.as_str());
            if asked || (!nic.is_virtual && name != "lo") {
                out.push(nic);
            }
        }
        Ok(out)
    }

    /// One interface by name, virtual or not.
    pub fn nic(&self, name: &str) -> Result<Nic> {
        let path = self.root.join("class/net").join(name);
        if !path.exists() {
            let dir = self.root.join("class/net");
            return Err(TopoError::NoDevice { kind: "network interface", name: name.into(), dir });
        }
        Ok(self.nic_at(&path, name))
    }

    fn nic_at(&self, path: &Path, name: &str) -> Nic {
        let device = path.join("device");
        let is_virtual = !device.exists();
        let node = if is_virtual { None } else { self.numa_node_of(&device) };
        // Down links and virtio report -1 or fail with EINVAL: unknown.
        let speed_mbit = fs::read_to_string(path.join("speed"))
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .and_then(|v| u64::try_from(v).ok())
            .filter(|&v| v > 0);
        Nic { name: name.to_string(), node, speed_mbit, is_virtual }
    }

    /// Whole disks from `block/`: the physical ones plus virtual ones named in `wanted`.
    pub fn disks(&self, wanted: &[&str]) -> Result<Vec<Disk>> {
        let dir = self.root.join("block");
        let mut out = Vec::new();
        for name in list_dir(&dir)? {
            let disk = self.disk_at(&dir.join(&name), &name);
            if !disk.is_virtual || wanted.contains(&name.as_str()) {
                out.push(disk);
            }
        }
        Ok(out)
    }

    /// One whole disk by name, virtual or not.
    pub fn disk(&self, name: &str) -> Result<Disk> {
        let path = self.root.join("block").join(name);
        if !path.exists() {
            let dir = self.root.join("block");
            return Err(TopoError::NoDevice { kind: "block device", name: name.into(), dir });
        }
        Ok(self.disk_at(&path, name))
    }

    fn disk_at(&self, path: &Path, name: &str) -> Disk {
        let device = path.join("device");
        let is_virtual = !device.exists();
        let node = if is_virtual { None } else { self.numa_node_of(&device) };
        let rotational = match fs::read_to_string(path.join("queue/rotational")).map(|s| s.trim().to_string()) {
            Ok(s) if s == "1" => Some(true),
            Ok(s) if s == "0" => Some(false),
            _ => None,
        };
        let dev_path = fs::canonicalize(&device).unwrap_or_default();
        let nvme = name.starts_with("nvme") || dev_path.components().any(|c| c.as_os_str() == "nvme");
        let virtio = dev_path.components().any(|c| c.as_os_str().to_string_lossy().starts_with("virtio"));
        Disk { name: name.to_string(), node, rotational, nvme, virtio, is_virtual }
    }

    /// The node of a device directory: its own `numa_node`, else its
    /// parents' (virtio devices sit under the PCI function that has it).
    fn numa_node_of(&self, device: &Path) -> Option<u32> {
        let mut dir = fs::canonicalize(device).ok()?;
        let top = fs::canonicalize(&self.root).ok()?;
        for _ in 0..NUMA_WALK_UP {
            if !dir.starts_with(&top) || dir == top {
                return None;
            }
            if let Ok(s) = fs::read_to_string(dir.join("numa_node")) {
                // -1 means the firmware did not say; going up would not help.
                return s.trim().parse::<i64>().ok().and_then(|v| u32::try_from(v).ok());
            }
            dir = dir.parent()?.to_path_buf();
        }
        None
    }

    /// The block device with number `major:minor` and the whole disks under
    /// it (through `dev/block/MAJ:MIN`, `partition` and `slaves/`). `None`
    /// when sysfs has no such device: major 0 is tmpfs, overlayfs, NFS,
    /// btrfs subvolumes and other file systems without one block device.
    pub fn block_device_of_dev(&self, major: u32, minor: u32) -> Result<Option<BlockHolder>> {
        let link = self.root.join(format!("dev/block/{major}:{minor}"));
        if major == 0 || !link.exists() {
            return Ok(None);
        }
        let dir = fs::canonicalize(&link).map_err(|source| TopoError::Io { path: link.clone(), source })?;
        let device = file_name(&dir);
        let mut disks = Vec::new();
        whole_disks(&dir, 0, &mut disks);
        disks.sort();
        disks.dedup();
        Ok(Some(BlockHolder { device, disks }))
    }

    /// The block device of an `st_dev` number.
    pub fn block_device_of_st_dev(&self, dev: u64) -> Result<Option<BlockHolder>> {
        self.block_device_of_dev(rustix::fs::major(dev), rustix::fs::minor(dev))
    }

    /// The block device holding the file system of `path` (its `st_dev`).
    pub fn block_device_of(&self, path: &Path) -> Result<Option<BlockHolder>> {
        let st = rustix::fs::stat(path).map_err(|e| TopoError::Io { path: path.into(), source: e.into() })?;
        self.block_device_of_dev(rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev))
    }
}

/// The whole disks under a block device directory: a partition's parent, a
/// stacked device's slaves (recursively), or the device itself.
fn whole_disks(dir: &Path, depth: usize, out: &mut Vec<String>) {
    if dir.join("partition").exists() {
        if let Some(parent) = dir.parent() {
            out.push(file_name(parent));
        }
        return;
    }
    let slaves: Vec<PathBuf> = fs::read_dir(dir.join("slaves"))
        .map(|rd| rd.flatten().filter_map(|e| fs::canonicalize(e.path()).ok()).collect())
        .unwrap_or_default();
    if slaves.is_empty() || depth >= STACK_DEPTH {
        out.push(file_name(dir));
        return;
    }
    for s in slaves {
        whole_disks(&s, depth + 1, out);
    }
}

fn file_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Entry names of a directory, sorted; a missing directory is empty.
fn list_dir(dir: &Path) -> Result<Vec<String>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(TopoError::Io { path: dir.into(), source }),
    };
    let mut names: Vec<String> = rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    Ok(names)
}

fn read_trimmed(path: &Path) -> Result<String> {
    fs::read_to_string(path).map(|s| s.trim().to_string()).map_err(|source| TopoError::Io { path: path.into(), source })
}

/// Parse a kernel cpu list (`0-3,8,10-11`; empty means none) into ascending,
/// distinct cpu numbers.
pub fn parse_cpulist(text: &str) -> Result<Vec<u32>> {
    let bad = |why| TopoError::CpuList { text: text.to_string(), why };
    let mut cpus = Vec::new();
    let t = text.trim();
    if t.is_empty() {
        return Ok(cpus);
    }
    for part in t.split(',') {
        let part = part.trim();
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let lo: u32 = lo.parse().map_err(|_| bad("not a cpu number or range"))?;
        let hi: u32 = hi.parse().map_err(|_| bad("not a cpu number or range"))?;
        if hi < lo {
            return Err(bad("range ends before it starts"));
        }
        if hi - lo >= 1 << 16 {
            return Err(bad("range longer than 65536 cpus"));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Format cpu numbers as a kernel cpu list (`0-3,8,10-11`).
pub fn format_cpulist(cpus: &[u32]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if i == j { v[i].to_string() } else { format!("{}-{}", v[i], v[j]) });
        i = j + 1;
    }
    parts.join(",")
}

/// Pin the calling thread to `cpus` (`sched_setaffinity`). Pinning one's own
/// threads needs no privilege; the cpus must be allowed by the process's
/// cpuset (see [`allowed_cpus`]) or the kernel answers EINVAL.
pub fn pin_current_thread(cpus: &[u32]) -> Result<()> {
    let bad = |why| TopoError::CpuSet { cpus: cpus.to_vec(), why };
    if cpus.is_empty() {
        return Err(bad("empty cpu set"));
    }
    let mut set = rustix::thread::CpuSet::new();
    for &c in cpus {
        if c as usize >= rustix::thread::CpuSet::MAX_CPU {
            return Err(bad("cpu number beyond the affinity mask"));
        }
        set.set(c as usize);
    }
    rustix::thread::sched_setaffinity(None, &set)
        .map_err(|e| TopoError::Sys { call: "sched_setaffinity", source: e.into() })
}

/// Set the calling thread's nice value (`setpriority(PRIO_PROCESS, 0)`,
/// which on Linux is this thread only). Below the current value needs
/// CAP_SYS_NICE (or RLIMIT_NICE).
pub fn set_current_thread_nice(nice: i32) -> Result<()> {
    rustix::process::setpriority_process(None, nice)
        .map_err(|e| TopoError::Sys { call: "setpriority", source: e.into() })
}

/// The calling thread's nice value.
pub fn current_thread_nice() -> Result<i32> {
    rustix::process::getpriority_process(None).map_err(|e| TopoError::Sys { call: "getpriority", source: e.into() })
}

/// The cpus the calling thread may run on (`sched_getaffinity`): cgroup
/// cpusets and `taskset` narrow this below the online cpus.
pub fn allowed_cpus() -> Result<Vec<u32>> {
    let set = rustix::thread::sched_getaffinity(None)
        .map_err(|e| TopoError::Sys { call: "sched_getaffinity", source: e.into() })?;
    Ok((0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).map(|c| c as u32).collect())
}

/// This process's effective capabilities, from `CapEff` in `/proc/self/status`.
pub fn capabilities() -> Result<Capabilities> {
    let path = Path::new("/proc/self/status");
    let text = fs::read_to_string(path).map_err(|source| TopoError::Io { path: path.into(), source })?;
    parse_capabilities(&text).ok_or_else(|| TopoError::Parse { path: path.into(), text: "no CapEff line".into() })
}

/// Capabilities from the text of a `/proc/<pid>/status` file.
pub fn parse_capabilities(status: &str) -> Option<Capabilities> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?.trim();
    let effective = u64::from_str_radix(hex, 16).ok()?;
    let has = |bit: u32| effective & (1u64 << bit) != 0;
    Some(Capabilities { sys_nice: has(CAP_SYS_NICE), ipc_lock: has(CAP_IPC_LOCK), effective })
}

/// The interface that holds local address `ip` (`getifaddrs`), without an
/// alias label (`eth0:1` -> `eth0`). `None` for an address no interface
/// has, including the unspecified address a wildcard listener binds.
///
/// getifaddrs rather than /proc: /proc/net lists IPv6 addresses per
/// interface (`if_inet6`) but IPv4 ones only inside the routing trie
/// (`fib_trie`), whose text format is not an interface; getifaddrs answers
/// both families in one call, as `ip addr` shows them. rustix has no
/// wrapper for it, so this is a libc call.
pub fn nic_of(ip: IpAddr) -> Result<Option<String>> {
    let ip = ip.to_canonical();
    if ip.is_unspecified() {
        return Ok(None);
    }
    let mut found = None;
    each_address(|name, a| {
        if a == ip && found.is_none() {
            found = Some(name.split(':').next().unwrap_or_default().to_string());
        }
    })?;
    Ok(found)
}

/// Every address of this host's interfaces (`getifaddrs`), loopback ones
/// too: a server that may connect anywhere must still not be sent at its
/// own services by a client elsewhere.
pub fn host_addresses() -> Result<Vec<IpAddr>> {
    let mut all = Vec::new();
    each_address(|_, a| all.push(a))?;
    Ok(all)
}

/// `f(interface name, address)` for each IPv4 and IPv6 address of each
/// interface. rustix has no wrapper for getifaddrs, so this is a libc call.
fn each_address(mut f: impl FnMut(&str, IpAddr)) -> Result<()> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a pointer to a list it allocated into `head`;
    // we free it exactly once below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(TopoError::Sys { call: "getifaddrs", source: io::Error::last_os_error() });
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        // SAFETY: ifa_addr is null or points to a sockaddr of the family it names.
        if let (Some(ip), false) = (unsafe { sockaddr_ip(ifa.ifa_addr) }, ifa.ifa_name.is_null()) {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            f(&unsafe { CStr::from_ptr(ifa.ifa_name) }.to_string_lossy(), ip.to_canonical());
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(())
}

/// The IP address in a sockaddr, for AF_INET and AF_INET6.
///
/// # Safety
/// `sa` must be null or point to a valid sockaddr whose `sa_family` tells
/// its real type.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: non-null and valid per the caller; the family field is common to all sockaddrs.
    match i32::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            // SAFETY: the family says this is a sockaddr_in.
            let sin = unsafe { &*(sa as *const libc::sockaddr_in) };
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this is a sockaddr_in6.
            let sin6 = unsafe { &*(sa as *const libc::sockaddr_in6) };
            Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_parse() {
        assert_eq!(parse_cpulist("0-3,8,10-11\n").unwrap(), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpulist("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_cpulist(" 5 ").unwrap(), vec![5]);
        assert_eq!(parse_cpulist("3,1-2,2").unwrap(), vec![1, 2, 3]);
        for bad in ["a", "3-1", "1,", "-", "0-7:2/4", "1--2", "0-4294967295"] {
            assert!(parse_cpulist(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn cpulists_format() {
        assert_eq!(format_cpulist(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format_cpulist(&[]), "");
        assert_eq!(format_cpulist(&[7, 7, 5]), "5,7");
    }

    #[test]
    fn capabilities_parse() {
        let root = "Name:\tx\nCapEff:\t000001fffeffffff\n";
        let c = parse_capabilities(root).unwrap();
        assert!(c.sys_nice && c.ipc_lock);
        let none = parse_capabilities("CapEff:\t0000000000000000\n").unwrap();
        assert!(!none.sys_nice && !none.ipc_lock);
        let nice_only = parse_capabilities(&format!("CapEff:\t{:016x}\n", 1u64 << 23)).unwrap();
        assert!(nice_only.sys_nice && !nice_only.ipc_lock);
        assert!(parse_capabilities("CapPrm:\t0\n").is_none());
        assert!(parse_capabilities("CapEff:\tzz\n").is_none());
    }
}

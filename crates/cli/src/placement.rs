//! `serve`'s hardware placement: the NIC of the listen address and the disks
//! under the served root, found in sysfs (`sys::topo`), placed by the pure
//! rules of `plan::placement` (or a hand-written device file), turned into
//! CPU sets for the engine's I/O threads. What could not be done is said at
//! info level (`serve -v`), never an error: placement is an optimisation.

use anyhow::Context;
use lightpath_engine::iothreads::{DiskDevice, Pins};
use lightpath_plan::placement::{self, Device, DeviceKind, Limits, Media, Node, Placement, Role, Topology};
use lightpath_sys::topo::{self, Sysfs};
use std::net::IpAddr;
use std::path::Path;

/// Where the I/O threads go, and how to describe it.
pub struct Plan {
    /// CPU sets for the network and disk threads.
    pub pins: Pins,
    /// The disks under the root, each with its own disk threads.
    pub disks: Vec<DiskDevice>,
    /// Nice value for the I/O threads, where the process may raise them.
    pub nice: Option<i32>,
    /// NUMA node for the buffer pool: the NIC's, where known.
    pub buffer_node: Option<usize>,
    /// CPUs for everything else (control sessions, transfer management):
    /// those free of I/O threads where there are any.
    pub management: Vec<u32>,
    /// One line per thread and note, for verbose output.
    pub lines: Vec<String>,
}

/// Place the I/O threads for a server on `ip` serving `root`, with an
/// optional device file (`--devices`, the `[[device]]` TOML of
/// `plan::placement::parse_config`). `disk_threads` overrides the
/// placement's per-disk thread count.
pub fn plan(
    ip: IpAddr,
    root: &Path,
    devices: Option<&Path>,
    net: usize,
    disk_threads: Option<usize>,
) -> anyhow::Result<Plan> {
    let config = match devices {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            Some(placement::parse_config(&text).with_context(|| format!("in {}", p.display()))?)
        }
        None => None,
    };
    let topo = discover(ip, root)?;
    let caps = topo::capabilities().ok();
    let limits = Limits {
        sys_nice: caps.is_some_and(|c| c.sys_nice),
        ipc_lock: caps.is_some_and(|c| c.ipc_lock),
        allowed_cpus: topo::allowed_cpus().ok(),
    };
    let p = placement::place(&topo, config.as_ref(), &limits).context("placing the I/O threads")?;
    let disks = disk_devices(&p, disk_threads);
    let pins = Pins { net: cycle(&p, Role::Net, None, net), disk: disk_pins(&p, &disks) };
    // Started with a lower priority (`nice -n 19 lightpath serve`), the
    // operator's choice stands: the I/O threads were raised to -5 all the
    // same, ahead of every normal process (a defect hunt's find).
    let started = topo::current_thread_nice().unwrap_or(0);
    let nice = (p.raise_priority && started <= 0).then_some(IO_NICE);
    let buffer_node = buffer_node(&p, &topo);
    let lines = lines(&p, net, &disks, nice, buffer_node);
    Ok(Plan { lines, pins, disks, nice, buffer_node, management: p.management_cpus })
}

/// Nice value of the I/O threads where CAP_SYS_NICE allows: ahead of the
/// control sessions and whatever else runs on their cpus, short of the
/// real-time classes (a busy mover must not starve the machine).
pub const IO_NICE: i32 = -5;

/// The buffer pool is one per process and every block crosses the network
/// threads, so it goes on the NIC's node; without a known NIC node, on the
/// first placed device's.
fn buffer_node(p: &Placement, topo: &Topology) -> Option<usize> {
    let is_nic = |name: &str| topo.devices.iter().any(|d| d.name == name && d.kind == DeviceKind::Nic);
    let nic = p.buffers.iter().find(|b| is_nic(&b.device) && b.node.is_some());
    nic.or_else(|| p.buffers.iter().find(|b| b.node.is_some())).and_then(|b| b.node).map(|n| n as usize)
}

/// The placed disks with their thread counts (or `each` threads apiece).
fn disk_devices(p: &Placement, each: Option<usize>) -> Vec<DiskDevice> {
    let mut out: Vec<DiskDevice> = Vec::new();
    for t in p.threads.iter().filter(|t| t.role == Role::Disk) {
        match out.iter_mut().find(|d| d.name == t.device) {
            Some(d) => d.threads += usize::from(each.is_none()),
            None => out.push(DiskDevice { name: t.device.clone(), threads: each.unwrap_or(1) }),
        }
    }
    out
}

/// The NIC holding `ip` (every physical NIC when it is a wildcard) and the
/// disks under `root`, as the placement rules see them.
fn discover(ip: IpAddr, root: &Path) -> anyhow::Result<Topology> {
    let fs = Sysfs::system();
    let nic = topo::nic_of(ip).context("finding the interface of the listen address")?;
    let holder = fs.block_device_of(root).context("finding the disk under the served root")?;
    let mut wanted: Vec<&str> = nic.iter().map(String::as_str).collect();
    wanted.extend(holder.iter().flat_map(|h| h.disks.iter().map(String::as_str)));
    let t = fs.discover(&wanted).context("reading the topology from sysfs")?;
    let nodes = t.nodes.iter().map(|n| Node { id: n.id, cpus: n.cpus.clone() }).collect();
    let nics = t.nics.iter().filter(|n| nic.as_ref().is_none_or(|x| *x == n.name));
    let mut devices: Vec<Device> = nics
        .map(|n| Device {
            name: n.name.clone(),
            kind: DeviceKind::Nic,
            node: n.node,
            speed_mbit: n.speed_mbit,
            media: Media::Unknown,
        })
        .collect();
    let disks = t.disks.iter().filter(|d| holder.as_ref().is_some_and(|h| h.disks.contains(&d.name)));
    devices.extend(disks.map(|d| Device {
        name: d.name.clone(),
        kind: DeviceKind::Disk,
        node: d.node,
        speed_mbit: None,
        media: match (d.nvme, d.rotational) {
            (true, _) => Media::Nvme,
            _ if d.virtio => Media::Virtio,
            (_, Some(true)) => Media::Hdd,
            (_, Some(false)) => Media::Ssd,
            _ => Media::Unknown,
        },
    }));
    Ok(Topology { nodes, devices })
}

/// CPU sets for `n` running threads of `role` (of one device, if given):
/// each takes the CPUs of a placed thread, in turn.
fn cycle(p: &Placement, role: Role, device: Option<&str>, n: usize) -> Vec<Vec<u32>> {
    let placed = p.threads.iter().filter(|t| t.role == role && device.is_none_or(|d| d == t.device));
    let sets: Vec<&Vec<u32>> = placed.map(|t| &t.cpus).collect();
    if sets.is_empty() {
        return Vec::new();
    }
    (0..n).map(|i| sets[i % sets.len()].clone()).collect()
}

/// The disk threads' CPU sets in the engine's order: device by device.
fn disk_pins(p: &Placement, disks: &[DiskDevice]) -> Vec<Vec<u32>> {
    disks.iter().flat_map(|d| cycle(p, Role::Disk, Some(&d.name), d.threads)).collect()
}

fn lines(p: &Placement, net: usize, disks: &[DiskDevice], nice: Option<i32>, node: Option<usize>) -> Vec<String> {
    let placed = |role: Role| p.threads.iter().filter(|t| t.role == role).count();
    let mut v = placement::describe(p);
    v.push(match nice {
        Some(n) => format!("I/O threads run at nice {n}"),
        None => "I/O threads keep the server's priority (no CAP_SYS_NICE, or it was started with a lower one)".into(),
    });
    v.push(match node {
        Some(n) => format!("buffer pool on NUMA node {n} (one pool per process, on the NIC's node)"),
        None => "buffer pool on any node (no device reports a NUMA node)".into(),
    });
    if net != placed(Role::Net) {
        let suggested = placed(Role::Net);
        v.push(format!("running {net} net threads (--net-threads); the devices' capacity suggests {suggested}"));
    }
    for d in disks {
        v.push(format!("disk pool {}: {} threads", d.name, d.threads));
    }
    v
}

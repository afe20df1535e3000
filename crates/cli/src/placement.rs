//! `serve`'s hardware placement: the NIC of the listen address and the disks
//! under the served root, found in sysfs (`sys::topo`), placed by the pure
//! rules of `plan::placement` (or a hand-written device file), turned into
//! CPU sets for the engine's I/O threads. What could not be done is said at
//! info level (`serve -v`), never an error: placement is an optimisation.

use anyhow::Context;
use lightpath_engine::iothreads::Pins;
use lightpath_plan::placement::{self, Device, DeviceKind, Limits, Media, Node, Placement, Role, Topology};
use lightpath_sys::topo::{self, Sysfs};
use std::net::IpAddr;
use std::path::Path;

/// Where the I/O threads go, and how to describe it.
pub struct Plan {
    /// CPU sets for the network and disk threads.
    pub pins: Pins,
    /// One line per thread and note, for verbose output.
    pub lines: Vec<String>,
}

/// Place the I/O threads for a server on `ip` serving `root`, with an
/// optional device file (`--devices`, the `[[device]]` TOML of
/// `plan::placement::parse_config`).
pub fn plan(ip: IpAddr, root: &Path, devices: Option<&Path>, counts: (usize, usize)) -> anyhow::Result<Plan> {
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
    Ok(Plan { pins: pins(&p, counts), lines: lines(&p, counts) })
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
            (_, Some(true)) => Media::Hdd,
            (_, Some(false)) => Media::Ssd,
            _ => Media::Unknown,
        },
    }));
    Ok(Topology { nodes, devices })
}

/// CPU sets for `counts` (network, disk) threads: each running thread takes
/// the CPUs of a placed thread of its role, in turn.
fn pins(p: &Placement, (net, disk): (usize, usize)) -> Pins {
    let of = |role: Role, n: usize| -> Vec<Vec<u32>> {
        let sets: Vec<&Vec<u32>> = p.threads.iter().filter(|t| t.role == role).map(|t| &t.cpus).collect();
        if sets.is_empty() {
            return Vec::new();
        }
        (0..n).map(|i| sets[i % sets.len()].clone()).collect()
    };
    Pins { net: of(Role::Net, net), disk: of(Role::Disk, disk) }
}

fn lines(p: &Placement, (net, disk): (usize, usize)) -> Vec<String> {
    let placed = |role: Role| p.threads.iter().filter(|t| t.role == role).count();
    let mut v = placement::describe(p);
    v.push(
        "note: the mover pins its threads; it does not yet lock buffers, raise priority or bind buffers to nodes"
            .into(),
    );
    for (flag, running, suggested) in [("net", net, placed(Role::Net)), ("disk", disk, placed(Role::Disk))] {
        if running != suggested {
            v.push(format!(
                "running {running} {flag} threads (--{flag}-threads); the devices' capacity suggests {suggested}"
            ));
        }
    }
    v
}

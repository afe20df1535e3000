//! Where the engine's fixed set of I/O threads runs and where their buffers
//! live, from a description of the machine (NUMA nodes, their cpus, which
//! node holds each NIC and disk), an optional hand-written device config and
//! what this process is allowed to do. Pure: the engine discovers the
//! machine (`lightpath_sys::topo`), calls [`place`] once at start, pins each
//! I/O thread to its cpus and has it allocate (first touch) its buffers, so
//! the kernel's default local-allocation policy puts them on the thread's
//! node. The thread set is fixed for the server's life: it follows the
//! devices' capacity ([`capacity_threads`]), not the number of sessions.
//!
//! Nothing here fails for want of information or privilege: an unknown
//! node, a single node, missing capabilities or too few cpus give a working
//! placement and a line in [`Placement::notes`] for `serve -v`. Only a
//! config that contradicts the machine (a node that does not exist) is an
//! error.

use serde::Deserialize;
use std::collections::BTreeSet;

/// Largest `threads =` a config may ask for one device.
pub const MAX_THREADS_PER_DEVICE: u32 = 64;

/// A NIC's link speed served by one I/O thread (10 Gbit/s, in Mbit/s).
pub const NIC_MBIT_PER_THREAD: u64 = 10_000;

/// What kind of device an I/O thread serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// A network interface.
    Nic,
    /// A block device.
    Disk,
}

/// Storage media of a disk (ignored for NICs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Media {
    /// Spinning disk (`queue/rotational` = 1).
    Hdd,
    /// SATA/SAS solid state.
    Ssd,
    /// NVMe namespace.
    Nvme,
    /// A VM's virtio disk: the host's storage behind a deep queue.
    Virtio,
    /// Not known.
    #[default]
    Unknown,
}

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Node number.
    pub id: u32,
    /// Its cpus (may be empty: memory-only nodes).
    pub cpus: Vec<u32>,
}

/// One device the engine moves data through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Kernel name (`eth0`, `nvme0n1`).
    pub name: String,
    /// NIC or disk.
    pub kind: DeviceKind,
    /// NUMA node, `None` when the kernel does not know (numa_node -1).
    pub node: Option<u32>,
    /// Link speed in Mbit/s (NICs), when known.
    pub speed_mbit: Option<u64>,
    /// Media (disks).
    pub media: Media,
}

/// The machine as discovered: nodes and the devices the server will use
/// (the engine passes the NIC of the data address and the disks of the
/// served root, not every device in the box).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Topology {
    /// NUMA nodes.
    pub nodes: Vec<Node>,
    /// Devices, in the order their threads are placed.
    pub devices: Vec<Device>,
}

/// What this process may do.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Limits {
    /// CAP_SYS_NICE: I/O threads may run at raised priority.
    pub sys_nice: bool,
    /// CAP_IPC_LOCK: buffers may be locked in memory beyond RLIMIT_MEMLOCK.
    pub ipc_lock: bool,
    /// The cpus this process may run on (`sched_getaffinity`); `None` = all.
    pub allowed_cpus: Option<Vec<u32>>,
}

/// A device declared by hand (`[[device]]` in the config).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceDecl {
    /// Kernel name; overrides the discovered device of that name, or adds one.
    pub name: String,
    /// `"nic"` or `"disk"`.
    pub kind: DeviceKind,
    /// NUMA node (what a VM cannot discover).
    pub node: Option<u32>,
    /// I/O threads for it, instead of the capacity rule.
    pub threads: Option<u32>,
    /// Link speed in Mbit/s (NICs only).
    pub speed_mbit: Option<u64>,
    /// `"hdd"`, `"ssd"` or `"nvme"` (disks only).
    pub media: Option<Media>,
}

/// The hand-written device config, as mdtmFTP's `topology` section:
///
/// ```toml
/// [management]        # optional: the node whose cpus run everything else
/// node = 0
///
/// [[device]]
/// name = "eth1"
/// kind = "nic"        # or "disk"
/// node = 1
/// threads = 2         # optional
/// speed_mbit = 40000  # optional, NICs
/// # media = "nvme"    # optional, disks: "hdd" | "ssd" | "nvme" | "virtio"
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceConfig {
    /// Declared devices.
    pub devices: Vec<DeviceDecl>,
    /// Node for management work (control sessions, the runtime).
    pub management_node: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    device: Vec<DeviceDecl>,
    management: Option<RawManagement>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManagement {
    node: u32,
}

/// A device config that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Not TOML, or not the expected fields (the message has line and column).
    #[error("device config: {0}")]
    Syntax(String),
    /// A field value that makes no sense.
    #[error("device config: device {name:?}: {why}")]
    Invalid {
        /// The device.
        name: String,
        /// What is wrong.
        why: String,
    },
}

/// A config that contradicts the machine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlacementError {
    /// A declared node that the machine does not have.
    #[error("{what} is declared on NUMA node {node}, but this machine has nodes {nodes}")]
    UnknownNode {
        /// The device or "management".
        what: String,
        /// The node declared.
        node: u32,
        /// The nodes there are.
        nodes: String,
    },
    /// Declared as a NIC but discovered as a disk, or the reverse.
    #[error("device {name:?} is declared as a {declared:?} but is a {found:?}")]
    KindMismatch {
        /// The device.
        name: String,
        /// Kind in the config.
        declared: DeviceKind,
        /// Kind discovered.
        found: DeviceKind,
    },
    /// No cpu at all to run on.
    #[error("no usable cpu (nodes have none, or none is in this process's affinity mask)")]
    NoCpus,
}

/// Parse a device config (TOML, see [`DeviceConfig`]).
pub fn parse_config(text: &str) -> Result<DeviceConfig, ConfigError> {
    let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string().trim().to_string()))?;
    let mut seen = BTreeSet::new();
    for d in &raw.device {
        let bad = |why: &str| Err(ConfigError::Invalid { name: d.name.clone(), why: why.into() });
        if d.name.trim().is_empty() || d.name.contains(['/', ' ']) {
            return bad("not a device name");
        }
        if !seen.insert(d.name.as_str()) {
            return bad("declared twice");
        }
        match d.threads {
            Some(0) => return bad("threads must be at least 1"),
            Some(n) if n > MAX_THREADS_PER_DEVICE => return bad("more than 64 threads"),
            _ => {}
        }
        if d.kind == DeviceKind::Nic && d.media.is_some() {
            return bad("media is for disks, not NICs");
        }
        if d.kind == DeviceKind::Disk && d.speed_mbit.is_some() {
            return bad("speed_mbit is for NICs, not disks");
        }
        if d.speed_mbit == Some(0) {
            return bad("speed_mbit must be positive");
        }
    }
    Ok(DeviceConfig { devices: raw.device, management_node: raw.management.map(|m| m.node) })
}

/// The I/O threads a device's capacity calls for, before the cap at the
/// cpus of its node. The rules, in one table:
///
/// | device                        | threads                               |
/// |-------------------------------|---------------------------------------|
/// | NIC, link speed known         | one per 10 Gbit/s, rounded up, min 1  |
/// | NIC, speed unknown (virtio)   | 1                                     |
/// | disk, rotational (HDD)        | 1 (a second stream only seeks)        |
/// | disk, SATA/SAS SSD            | 2                                     |
/// | disk, NVMe                    | 4 (deep hardware queues)              |
/// | disk, virtio (a VM's disk)    | 4 (the host's queue; see below)       |
/// | disk, media unknown           | 1                                     |
///
/// Virtio disks report `rotational` = 1 whatever the host has; on the
/// 2-CPU development VM, 4 disk threads moved files faster than 2 (the
/// engine's default before placement chose the counts).
///
/// A `threads =` in the config replaces the table for that device.
pub fn capacity_threads(dev: &Device) -> u32 {
    match dev.kind {
        DeviceKind::Nic => match dev.speed_mbit {
            Some(s) => s.div_ceil(NIC_MBIT_PER_THREAD).clamp(1, u64::from(MAX_THREADS_PER_DEVICE)) as u32,
            None => 1,
        },
        DeviceKind::Disk => match dev.media {
            Media::Hdd | Media::Unknown => 1,
            Media::Ssd => 2,
            Media::Nvme | Media::Virtio => 4,
        },
    }
}

/// What an I/O thread does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sends and receives on a NIC.
    Net,
    /// Reads and writes a disk.
    Disk,
}

/// One I/O thread of the fixed set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoThread {
    /// Network or disk.
    pub role: Role,
    /// The device it serves.
    pub device: String,
    /// Its number among that device's threads (0-based).
    pub index: u32,
    /// The node it runs on, `None` when the device's node is unknown.
    pub node: Option<u32>,
    /// The cpus to pin it to (never empty).
    pub cpus: Vec<u32>,
    /// Whether those cpus are its own (no other I/O thread, no management).
    pub dedicated: bool,
}

/// Where a device's buffers go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferPlace {
    /// The device.
    pub device: String,
    /// NUMA node to allocate on; `None` = wherever the kernel puts them.
    pub node: Option<u32>,
}

/// The placement of the server's I/O threads and buffers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The fixed I/O thread set, device by device.
    pub threads: Vec<IoThread>,
    /// Cpus for everything else (control sessions, the async runtime):
    /// those no node-bound I/O thread uses, or all when none is free.
    pub management_cpus: Vec<u32>,
    /// Buffer node of each device.
    pub buffers: Vec<BufferPlace>,
    /// Run I/O threads at raised priority (CAP_SYS_NICE).
    pub raise_priority: bool,
    /// Lock buffers in memory (CAP_IPC_LOCK).
    pub lock_buffers: bool,
    /// What could not be done, or was decided for want of information.
    pub notes: Vec<String>,
}

impl Placement {
    /// The threads of one device.
    pub fn threads_of<'a>(&'a self, device: &'a str) -> impl Iterator<Item = &'a IoThread> + 'a {
        self.threads.iter().filter(move |t| t.device == device)
    }

    /// The buffer node of a device (`None`: unknown device or unknown node).
    pub fn buffer_node(&self, device: &str) -> Option<u32> {
        self.buffers.iter().find(|b| b.device == device).and_then(|b| b.node)
    }
}

/// A device with its resolved node and thread count.
struct Planned {
    dev: Device,
    threads: u32,
    /// A node with cpus to pin to (`None`: float).
    run_node: Option<u32>,
}

/// Place the I/O threads of `topo`'s devices (with `config` applied) given `limits`.
pub fn place(topo: &Topology, config: Option<&DeviceConfig>, limits: &Limits) -> Result<Placement, PlacementError> {
    let mut notes = Vec::new();
    let nodes = usable_nodes(topo, limits, &mut notes)?;
    let empty = DeviceConfig::default();
    let config = config.unwrap_or(&empty);
    let node_list = fmt_ids(topo.nodes.iter().map(|n| n.id));
    if let Some(m) = config.management_node {
        if !topo.nodes.iter().any(|n| n.id == m) {
            return Err(PlacementError::UnknownNode { what: "management".into(), node: m, nodes: node_list });
        }
    }
    let devices = merge(topo, config, &node_list, &mut notes)?;
    let planned = plan_devices(&devices, config, &nodes, &mut notes);
    let (threads, busy) = assign_cpus(&planned, &nodes, config.management_node, &mut notes);
    let management_cpus = management(&nodes, &busy, config.management_node, &mut notes);
    let total_cpus = nodes.iter().map(|n| n.cpus.len()).sum::<usize>();
    if threads.len() > total_cpus {
        notes.push(format!("{} I/O threads for {total_cpus} cpus: threads share cpus", threads.len()));
    }
    privilege_notes(limits, &mut notes);
    let buffers = planned.iter().map(|p| BufferPlace { device: p.dev.name.clone(), node: p.dev.node }).collect();
    Ok(Placement {
        threads,
        management_cpus,
        buffers,
        raise_priority: limits.sys_nice,
        lock_buffers: limits.ipc_lock,
        notes,
    })
}

/// Nodes with their cpus cut to the affinity mask.
fn usable_nodes(topo: &Topology, limits: &Limits, notes: &mut Vec<String>) -> Result<Vec<Node>, PlacementError> {
    let mut out = Vec::new();
    let mut excluded = Vec::new();
    for n in &topo.nodes {
        let mut cpus: Vec<u32> = n.cpus.clone();
        cpus.sort_unstable();
        cpus.dedup();
        if let Some(allowed) = &limits.allowed_cpus {
            excluded.extend(cpus.iter().filter(|c| !allowed.contains(c)));
            cpus.retain(|c| allowed.contains(c));
        }
        out.push(Node { id: n.id, cpus });
    }
    if !excluded.is_empty() {
        notes.push(format!(
            "cpus {} are outside this process's affinity mask (cpuset, taskset): not used",
            fmt_cpus(&excluded)
        ));
    }
    if out.iter().all(|n| n.cpus.is_empty()) {
        return Err(PlacementError::NoCpus);
    }
    if out.len() == 1 {
        notes.push(format!("one NUMA node: placement is trivial, every buffer on node {}", out[0].id));
    }
    Ok(out)
}

/// Discovered devices with the config applied; declared-only devices appended.
fn merge(
    topo: &Topology,
    config: &DeviceConfig,
    nodes: &str,
    notes: &mut Vec<String>,
) -> Result<Vec<(Device, Option<u32>)>, PlacementError> {
    let mut out: Vec<(Device, Option<u32>)> = topo.devices.iter().map(|d| (d.clone(), None)).collect();
    let known = |n: u32| topo.nodes.iter().any(|x| x.id == n);
    for (d, _) in out.iter_mut() {
        if let Some(n) = d.node.filter(|&n| !known(n)) {
            notes.push(format!("{}: sysfs says NUMA node {n}, which has no cpulist: treated as unknown", d.name));
            d.node = None;
        }
    }
    for decl in &config.devices {
        if let Some(n) = decl.node.filter(|&n| !known(n)) {
            return Err(PlacementError::UnknownNode {
                what: format!("device {:?}", decl.name),
                node: n,
                nodes: nodes.into(),
            });
        }
        let i = match out.iter().position(|(d, _)| d.name == decl.name) {
            Some(i) => i,
            None => {
                let media = Media::Unknown;
                out.push((
                    Device { name: decl.name.clone(), kind: decl.kind, node: None, speed_mbit: None, media },
                    None,
                ));
                out.len() - 1
            }
        };
        let (dev, threads) = &mut out[i];
        if dev.kind != decl.kind {
            return Err(PlacementError::KindMismatch { name: decl.name.clone(), declared: decl.kind, found: dev.kind });
        }
        dev.node = decl.node.or(dev.node);
        dev.speed_mbit = decl.speed_mbit.or(dev.speed_mbit);
        dev.media = decl.media.unwrap_or(dev.media);
        *threads = decl.threads;
    }
    Ok(out)
}

/// Resolve each device's run node and thread count.
fn plan_devices(
    devices: &[(Device, Option<u32>)],
    config: &DeviceConfig,
    nodes: &[Node],
    notes: &mut Vec<String>,
) -> Vec<Planned> {
    let total: usize = nodes.iter().map(|n| n.cpus.len()).sum();
    let mut out = Vec::new();
    for (dev, threads) in devices {
        let mut dev = dev.clone();
        let declared = config.devices.iter().any(|d| d.name == dev.name);
        let (run_node, node_cpus) = resolve_node(&mut dev, declared, nodes, notes);
        let cap = if run_node.is_some() { node_cpus } else { total }.max(1) as u32;
        let wanted = capacity_threads(&dev);
        // Network threads spin on their sockets: no more than cpus. Disk
        // threads mostly sleep in I/O: the device's queue decides, not cpus.
        let threads = match threads {
            Some(n) => *n,
            None if wanted > cap && dev.kind == DeviceKind::Nic => {
                notes.push(format!(
                    "{}: capacity calls for {wanted} I/O threads, capped at the {cap} cpus it can run on",
                    dev.name
                ));
                cap
            }
            None => wanted,
        };
        out.push(Planned { dev, threads, run_node });
    }
    out
}

/// The node a device's threads run on (`None`: float) and its cpu count.
/// On one node every device is on it, whatever sysfs said.
fn resolve_node(dev: &mut Device, declared: bool, nodes: &[Node], notes: &mut Vec<String>) -> (Option<u32>, usize) {
    if nodes.len() == 1 {
        dev.node = Some(nodes[0].id);
    }
    let Some(id) = dev.node else {
        let hint = if declared { "" } else { "; declare `node = N` for it in the device config" };
        notes.push(format!(
            "{}: NUMA node unknown (numa_node -1): its threads are not tied to a node, \
             its buffers go where the kernel puts them{hint}",
            dev.name
        ));
        return (None, 0);
    };
    let cpus = nodes.iter().find(|n| n.id == id).map_or(0, |n| n.cpus.len());
    if cpus == 0 {
        notes.push(format!(
            "{}: node {id} has no usable cpu: its threads run elsewhere, its buffers stay on node {id}",
            dev.name
        ));
        return (None, 0);
    }
    (Some(id), cpus)
}

/// Give each thread its cpus. On a node with fewer threads than cpus each
/// thread gets one cpu of its own, from the highest-numbered down (cpu 0
/// and its neighbours keep interrupts and housekeeping); otherwise the
/// node's threads share all its cpus. Threads without a node float over
/// the cpus no node-bound thread uses. Returns the threads and the cpus
/// node-bound threads use (dedicated or shared).
fn assign_cpus(
    planned: &[Planned],
    nodes: &[Node],
    mgmt_node: Option<u32>,
    notes: &mut Vec<String>,
) -> (Vec<IoThread>, Vec<u32>) {
    let mut threads = Vec::new();
    let mut busy = Vec::new();
    for node in nodes {
        let on_node: Vec<&Planned> = planned.iter().filter(|p| p.run_node == Some(node.id)).collect();
        let count: usize = on_node.iter().map(|p| p.threads as usize).sum();
        // Keep one cpu for management unless the config puts it on another node.
        let room =
            if mgmt_node.is_some_and(|m| m != node.id) { node.cpus.len() } else { node.cpus.len().saturating_sub(1) };
        let own = count > 0 && count <= room;
        if count > 0 && !own {
            notes.push(format!(
                "node {}: {count} I/O threads for {} cpus: they share cpus {} instead of one cpu each",
                node.id,
                node.cpus.len(),
                fmt_cpus(&node.cpus)
            ));
        }
        if count > 0 && !own {
            busy.extend(&node.cpus);
        }
        let mut free = node.cpus.iter().rev();
        for p in on_node {
            for index in 0..p.threads {
                let cpus = match own.then(|| free.next()).flatten() {
                    Some(&c) => vec![c],
                    None => node.cpus.clone(),
                };
                if own {
                    busy.extend(&cpus);
                }
                threads.push(io_thread(p, index, Some(node.id), cpus, own));
            }
        }
    }
    let all: Vec<u32> = nodes.iter().flat_map(|n| n.cpus.iter().copied()).collect();
    let rest: Vec<u32> = all.iter().copied().filter(|c| !busy.contains(c)).collect();
    let floating = if rest.is_empty() { all } else { rest };
    for p in planned.iter().filter(|p| p.run_node.is_none()) {
        for index in 0..p.threads {
            threads.push(io_thread(p, index, None, floating.clone(), false));
        }
    }
    (threads, busy)
}

fn io_thread(p: &Planned, index: u32, node: Option<u32>, cpus: Vec<u32>, dedicated: bool) -> IoThread {
    let role = match p.dev.kind {
        DeviceKind::Nic => Role::Net,
        DeviceKind::Disk => Role::Disk,
    };
    IoThread { role, device: p.dev.name.clone(), index, node, cpus, dedicated }
}

/// Cpus for management: free of node-bound I/O threads, on the configured node if any.
fn management(nodes: &[Node], busy: &[u32], mgmt_node: Option<u32>, notes: &mut Vec<String>) -> Vec<u32> {
    let pool: Vec<u32> =
        nodes.iter().filter(|n| mgmt_node.is_none_or(|m| m == n.id)).flat_map(|n| n.cpus.iter().copied()).collect();
    let free: Vec<u32> = pool.iter().copied().filter(|c| !busy.contains(c)).collect();
    if !free.is_empty() {
        return free;
    }
    let all: Vec<u32> = nodes.iter().flat_map(|n| n.cpus.iter().copied()).collect();
    let (cpus, where_) = if pool.is_empty() { (all, "any cpu") } else { (pool, "cpus shared with I/O threads") };
    notes.push(format!("no cpu is free of I/O threads: management runs on {where_} ({})", fmt_cpus(&cpus)));
    cpus
}

fn privilege_notes(limits: &Limits, notes: &mut Vec<String>) {
    if !limits.sys_nice {
        notes.push("no CAP_SYS_NICE: I/O threads keep normal priority (pinning needs no privilege and is done)".into());
    }
    if !limits.ipc_lock {
        notes.push("no CAP_IPC_LOCK: buffers are not locked in memory beyond RLIMIT_MEMLOCK".into());
    }
}

/// Lines for `serve -v`: the thread set, management cpus, buffers, then the notes.
pub fn describe(p: &Placement) -> Vec<String> {
    let mut out = vec![format!("I/O threads: {} (fixed for this server)", p.threads.len())];
    for t in &p.threads {
        let role = match t.role {
            Role::Net => "net",
            Role::Disk => "disk",
        };
        let node = t.node.map_or("node ?".to_string(), |n| format!("node {n}"));
        let own = if t.dedicated { " (own)" } else { "" };
        out.push(format!("  {role:<4} {}#{}: {node}, cpus {}{own}", t.device, t.index, fmt_cpus(&t.cpus)));
    }
    out.push(format!("management: cpus {}", fmt_cpus(&p.management_cpus)));
    let bufs: Vec<String> = p
        .buffers
        .iter()
        .map(|b| format!("{} on {}", b.device, b.node.map_or("any node".into(), |n| format!("node {n}"))))
        .collect();
    out.push(format!("buffers: {}", if bufs.is_empty() { "none".into() } else { bufs.join(", ") }));
    let prio = if p.raise_priority { "raised" } else { "normal" };
    let lock = if p.lock_buffers { "locked" } else { "not locked" };
    out.push(format!("priority: {prio}; buffers {lock}"));
    out.extend(p.notes.iter().map(|n| format!("note: {n}")));
    out
}

/// Cpus as a kernel cpu list (`0-3,8`).
fn fmt_cpus(cpus: &[u32]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts: Vec<String> = Vec::new();
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

fn fmt_ids(ids: impl Iterator<Item = u32>) -> String {
    ids.map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
}

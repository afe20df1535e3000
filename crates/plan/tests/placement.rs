//! Placement on synthetic topologies (this VM has one node).

use lightpath_plan::placement::{
    capacity_threads, describe, parse_config, place, ConfigError, Device, DeviceKind, Limits, Media, Node, Placement,
    PlacementError, Role, Topology,
};

fn node(id: u32, cpus: std::ops::Range<u32>) -> Node {
    Node { id, cpus: cpus.collect() }
}

fn nic(name: &str, node: Option<u32>, speed_mbit: Option<u64>) -> Device {
    Device { name: name.into(), kind: DeviceKind::Nic, node, speed_mbit, media: Media::Unknown }
}

fn disk(name: &str, node: Option<u32>, media: Media) -> Device {
    Device { name: name.into(), kind: DeviceKind::Disk, node, speed_mbit: None, media }
}

fn root() -> Limits {
    Limits { sys_nice: true, ipc_lock: true, allowed_cpus: None }
}

fn has_note(p: &Placement, needle: &str) -> bool {
    p.notes.iter().any(|n| n.contains(needle))
}

/// Every thread has cpus of its own node (or floats), dedicated cpus are
/// used once, management never shares a dedicated cpu.
fn check_invariants(p: &Placement, topo: &Topology) {
    let mut owned = Vec::new();
    for t in &p.threads {
        assert!(!t.cpus.is_empty(), "{t:?}");
        if let Some(n) = t.node {
            let cpus = &topo.nodes.iter().find(|x| x.id == n).expect("node").cpus;
            assert!(t.cpus.iter().all(|c| cpus.contains(c)), "{t:?} off its node");
        }
        if t.dedicated {
            assert_eq!(t.cpus.len(), 1);
            assert!(!owned.contains(&t.cpus[0]), "cpu {} dedicated twice", t.cpus[0]);
            owned.push(t.cpus[0]);
        }
    }
    assert!(!p.management_cpus.is_empty());
    if !owned.is_empty() && !has_note(p, "no cpu is free") {
        assert!(p.management_cpus.iter().all(|c| !owned.contains(c)), "management on an I/O cpu");
    }
}

#[test]
fn this_vm_one_node_two_cpus() {
    // eth0: virtio, speed -1; vda: virtio disk reporting rotational.
    let topo =
        Topology { nodes: vec![node(0, 0..2)], devices: vec![nic("eth0", None, None), disk("vda", None, Media::Hdd)] };
    let p = place(&topo, None, &root()).unwrap();
    check_invariants(&p, &topo);
    assert_eq!(p.threads.len(), 2);
    assert!(p.threads.iter().all(|t| t.node == Some(0) && t.cpus == vec![0, 1] && !t.dedicated));
    assert_eq!(p.management_cpus, vec![0, 1]);
    assert_eq!(p.buffer_node("eth0"), Some(0), "one node: unknown numa_node resolves to it");
    assert!(has_note(&p, "one NUMA node"));
    assert!(has_note(&p, "node 0: 2 I/O threads for 2 cpus"));
    assert!(!has_note(&p, "unknown"), "{:?}", p.notes);
}

#[test]
fn two_nodes_nic_on_1_nvme_on_0() {
    let topo = Topology {
        nodes: vec![node(0, 0..8), node(1, 8..16)],
        devices: vec![nic("ens1f0", Some(1), Some(25_000)), disk("nvme0n1", Some(0), Media::Nvme)],
    };
    let p = place(&topo, None, &root()).unwrap();
    check_invariants(&p, &topo);
    let net: Vec<_> = p.threads_of("ens1f0").collect();
    assert_eq!(net.len(), 3, "25 Gbit/s: three threads");
    assert!(net.iter().all(|t| t.role == Role::Net && t.node == Some(1) && t.dedicated));
    assert_eq!(net.iter().map(|t| t.cpus[0]).collect::<Vec<_>>(), vec![15, 14, 13], "highest cpus first");
    let dsk: Vec<_> = p.threads_of("nvme0n1").collect();
    assert_eq!(dsk.len(), 4);
    assert!(dsk.iter().all(|t| t.role == Role::Disk && t.node == Some(0) && t.dedicated));
    assert_eq!(dsk.iter().map(|t| t.cpus[0]).collect::<Vec<_>>(), vec![7, 6, 5, 4]);
    assert_eq!(p.management_cpus, vec![0, 1, 2, 3, 8, 9, 10, 11, 12]);
    assert_eq!((p.buffer_node("ens1f0"), p.buffer_node("nvme0n1")), (Some(1), Some(0)));
    assert!(p.notes.is_empty(), "{:?}", p.notes);
}

#[test]
fn four_nodes() {
    let topo = Topology {
        nodes: (0..4).map(|i| node(i, i * 4..i * 4 + 4)).collect(),
        devices: vec![
            nic("eth0", Some(2), Some(10_000)),
            nic("eth1", Some(3), Some(100_000)),
            disk("sda", Some(1), Media::Ssd),
            disk("sdb", Some(1), Media::Hdd),
        ],
    };
    let p = place(&topo, None, &root()).unwrap();
    check_invariants(&p, &topo);
    assert_eq!(p.threads_of("eth0").count(), 1);
    // 100 Gbit/s wants 10 threads; node 3 has 4 cpus.
    assert_eq!(p.threads_of("eth1").count(), 4);
    assert!(has_note(&p, "eth1: capacity calls for 10 I/O threads, capped at the 4 cpus"));
    assert!(has_note(&p, "node 3: 4 I/O threads for 4 cpus"));
    assert!(p.threads_of("eth1").all(|t| t.cpus == vec![12, 13, 14, 15] && !t.dedicated));
    // Node 1: sda 2 + sdb 1 = 3 threads on 4 cpus, one each, cpu 4 left.
    let n1: Vec<u32> = p.threads.iter().filter(|t| t.node == Some(1)).map(|t| t.cpus[0]).collect();
    assert_eq!(n1, vec![7, 6, 5]);
    assert_eq!(p.management_cpus, vec![0, 1, 2, 3, 4, 8, 9, 10]);
}

#[test]
fn unknown_numa_node_on_two_nodes_floats() {
    let topo = Topology {
        nodes: vec![node(0, 0..4), node(1, 4..8)],
        devices: vec![nic("eth0", None, Some(10_000)), disk("nvme0n1", Some(0), Media::Nvme)],
    };
    let p = place(&topo, None, &root()).unwrap();
    check_invariants(&p, &topo);
    // NVMe wants 4 on a 4-cpu node: they share node 0. eth0 floats over the cpus
    // no node-bound thread uses, which management shares.
    let e = p.threads_of("eth0").next().unwrap();
    assert_eq!((e.node, e.dedicated), (None, false));
    assert_eq!(e.cpus, vec![4, 5, 6, 7]);
    assert_eq!(p.management_cpus, vec![4, 5, 6, 7]);
    assert_eq!(p.buffer_node("eth0"), None);
    assert!(has_note(&p, "eth0: NUMA node unknown"));
    assert!(has_note(&p, "declare `node = N`"));
}

#[test]
fn a_node_sysfs_names_but_that_has_no_cpulist_is_unknown() {
    let topo = Topology { nodes: vec![node(0, 0..4), node(1, 4..8)], devices: vec![nic("eth0", Some(5), None)] };
    let p = place(&topo, None, &root()).unwrap();
    assert_eq!(p.threads[0].node, None);
    assert!(has_note(&p, "NUMA node 5, which has no cpulist"));
}

#[test]
fn a_device_on_a_node_without_usable_cpus_floats_but_keeps_its_buffer_node() {
    let topo =
        Topology { nodes: vec![node(0, 0..4), node(1, 4..8)], devices: vec![disk("nvme0n1", Some(1), Media::Nvme)] };
    let limits = Limits { allowed_cpus: Some(vec![0, 1, 2, 3]), ..root() };
    let p = place(&topo, None, &limits).unwrap();
    check_invariants(&p, &topo);
    assert_eq!(p.threads.len(), 4);
    assert!(p.threads.iter().all(|t| t.node.is_none() && t.cpus == vec![0, 1, 2, 3]));
    assert_eq!(p.buffer_node("nvme0n1"), Some(1));
    assert!(has_note(&p, "nvme0n1: node 1 has no usable cpu"));
}

#[test]
fn no_privileges_still_pins_and_says_what_it_could_not_do() {
    let topo =
        Topology { nodes: vec![node(0, 0..4), node(1, 4..8)], devices: vec![nic("eth1", Some(1), Some(10_000))] };
    let p = place(&topo, None, &Limits::default()).unwrap();
    check_invariants(&p, &topo);
    assert!(!p.raise_priority && !p.lock_buffers);
    assert_eq!(p.threads[0].cpus, vec![7]);
    assert!(has_note(&p, "no CAP_SYS_NICE"));
    assert!(has_note(&p, "no CAP_IPC_LOCK"));
    let root = place(&topo, None, &root()).unwrap();
    assert!(root.raise_priority && root.lock_buffers && root.notes.is_empty());
}

#[test]
fn affinity_mask_narrows_the_cpus_used() {
    let topo =
        Topology { nodes: vec![node(0, 0..4), node(1, 4..8)], devices: vec![nic("eth1", Some(1), Some(10_000))] };
    let limits = Limits { allowed_cpus: Some(vec![0, 1, 4, 5]), ..root() };
    let p = place(&topo, None, &limits).unwrap();
    assert_eq!(p.threads[0].cpus, vec![5]);
    assert_eq!(p.management_cpus, vec![0, 1, 4]);
    assert!(has_note(&p, "cpus 2-3,6-7 are outside"));
    let none = Limits { allowed_cpus: Some(vec![99]), ..root() };
    assert!(matches!(place(&topo, None, &none), Err(PlacementError::NoCpus)));
}

#[test]
fn more_threads_than_cores() {
    let topo = Topology {
        nodes: vec![node(0, 0..2)],
        devices: vec![
            nic("eth0", Some(0), Some(40_000)),
            disk("nvme0n1", Some(0), Media::Nvme),
            disk("nvme1n1", Some(0), Media::Nvme),
        ],
    };
    let p = place(&topo, None, &root()).unwrap();
    check_invariants(&p, &topo);
    // The NIC's 4 network threads are capped at the node's 2 cpus; disk
    // threads sleep in I/O, so each NVMe keeps its 4.
    assert_eq!(p.threads_of("eth0").count(), 2, "network threads capped at the cpus");
    assert_eq!(p.threads_of("nvme0n1").count(), 4, "disk threads not capped");
    assert_eq!(p.threads.len(), 10);
    assert!(p.threads.iter().all(|t| t.cpus == vec![0, 1]));
    assert!(has_note(&p, "eth0: capacity calls for 4 I/O threads, capped at the 2 cpus"));
    assert!(has_note(&p, "10 I/O threads for 2 cpus"));
    assert!(has_note(&p, "no cpu is free of I/O threads"));
    assert_eq!(p.management_cpus, vec![0, 1]);
}

#[test]
fn hand_config_overrides_discovery_and_adds_devices() {
    // A VM: nothing known; the admin knows the NIC is on node 1.
    let topo = Topology {
        nodes: vec![node(0, 0..4), node(1, 4..8)],
        devices: vec![nic("eth0", None, None), disk("vda", None, Media::Hdd)],
    };
    let cfg = parse_config(
        r#"
        [management]
        node = 0

        [[device]]
        name = "eth0"
        kind = "nic"
        node = 1
        speed_mbit = 40000

        [[device]]
        name = "vda"
        kind = "disk"
        node = 0
        media = "nvme"
        threads = 3

        [[device]]
        name = "vdb"
        kind = "disk"
        node = 0
        "#,
    )
    .unwrap();
    let p = place(&topo, Some(&cfg), &root()).unwrap();
    check_invariants(&p, &topo);
    // eth0: 40 Gbit/s => 4 threads, and management is on node 0, so node 1's 4 cpus are all theirs.
    assert!(p.threads_of("eth0").all(|t| t.node == Some(1) && t.dedicated));
    assert_eq!(p.threads_of("eth0").count(), 4);
    assert_eq!(p.threads_of("vda").count(), 3, "threads = 3 beats the NVMe rule");
    assert_eq!(p.threads_of("vdb").count(), 1, "declared only; media unknown");
    assert_eq!(p.buffer_node("eth0"), Some(1));
    // Node 0: 4 threads, 4 cpus, management there: shared.
    assert!(p.threads.iter().filter(|t| t.node == Some(0)).all(|t| t.cpus == vec![0, 1, 2, 3]));
    assert_eq!(p.management_cpus, vec![0, 1, 2, 3]);
    assert!(!has_note(&p, "unknown"), "{:?}", p.notes);
}

#[test]
fn config_contradicting_the_machine_is_an_error() {
    let topo = Topology { nodes: vec![node(0, 0..2)], devices: vec![nic("eth0", None, None)] };
    let cfg = parse_config("[[device]]\nname = \"eth0\"\nkind = \"nic\"\nnode = 3\n").unwrap();
    let err = place(&topo, Some(&cfg), &root()).unwrap_err();
    assert!(err.to_string().contains("NUMA node 3, but this machine has nodes 0"), "{err}");
    let cfg = parse_config("[[device]]\nname = \"eth0\"\nkind = \"disk\"\n").unwrap();
    assert!(matches!(place(&topo, Some(&cfg), &root()), Err(PlacementError::KindMismatch { .. })));
    let cfg = parse_config("[management]\nnode = 2\n").unwrap();
    assert!(matches!(place(&topo, Some(&cfg), &root()), Err(PlacementError::UnknownNode { .. })));
}

#[test]
fn bad_config_text() {
    let cases = [
        ("[[device]]\nname = \"eth0\"\n", "kind"),
        ("[[device]]\nname = \"eth0\"\nkind = \"gpu\"\n", "gpu"),
        ("[[device]]\nname = \"eth0\"\nkind = \"nic\"\nnode = -1\n", "node"),
        ("[[device]]\nname = \"eth0\"\nkind = \"nic\"\nthreds = 2\n", "threds"),
        ("[[device]\nname = 1", "line 1"),
        ("[[device]]\nname = \"eth0\"\nkind = \"nic\"\nthreads = 0\n", "at least 1"),
        ("[[device]]\nname = \"eth0\"\nkind = \"nic\"\nthreads = 65\n", "more than 64"),
        ("[[device]]\nname = \"sda\"\nkind = \"disk\"\nspeed_mbit = 10\n", "for NICs"),
        ("[[device]]\nname = \"eth0\"\nkind = \"nic\"\nmedia = \"ssd\"\n", "for disks"),
        ("[[device]]\nname = \"\"\nkind = \"nic\"\n", "not a device name"),
        ("[[device]]\nname = \"a\"\nkind = \"nic\"\n[[device]]\nname = \"a\"\nkind = \"nic\"\n", "twice"),
        ("[[device]]\nname = \"sda\"\nkind = \"disk\"\nmedia = \"tape\"\n", "tape"),
    ];
    for (text, needle) in cases {
        let err = parse_config(text).expect_err(text);
        assert!(matches!(err, ConfigError::Syntax(_) | ConfigError::Invalid { .. }));
        let msg = err.to_string();
        assert!(msg.starts_with("device config: ") && msg.contains(needle), "{text:?} gave {msg:?}");
    }
    assert_eq!(parse_config("").unwrap(), Default::default());
}

#[test]
fn capacity_table() {
    let t = |d: Device| capacity_threads(&d);
    assert_eq!(t(nic("a", None, None)), 1);
    assert_eq!(t(nic("a", None, Some(1_000))), 1);
    assert_eq!(t(nic("a", None, Some(10_000))), 1);
    assert_eq!(t(nic("a", None, Some(10_001))), 2);
    assert_eq!(t(nic("a", None, Some(100_000))), 10);
    assert_eq!(t(nic("a", None, Some(u64::MAX))), 64);
    assert_eq!(t(disk("d", None, Media::Hdd)), 1);
    assert_eq!(t(disk("d", None, Media::Ssd)), 2);
    assert_eq!(t(disk("d", None, Media::Nvme)), 4);
    assert_eq!(t(disk("d", None, Media::Unknown)), 1);
    assert_eq!(t(disk("d", None, Media::Virtio)), 4);
}

#[test]
fn describe_has_a_line_per_thread_and_the_notes() {
    let topo = Topology {
        nodes: vec![node(0, 0..8), node(1, 8..16)],
        devices: vec![nic("ens1f0", Some(1), Some(20_000)), disk("sda", None, Media::Ssd)],
    };
    let p = place(&topo, None, &Limits::default()).unwrap();
    let lines = describe(&p);
    assert_eq!(lines[0], "I/O threads: 4 (fixed for this server)");
    assert_eq!(lines[1], "  net  ens1f0#0: node 1, cpus 15 (own)");
    assert_eq!(lines[2], "  net  ens1f0#1: node 1, cpus 14 (own)");
    assert_eq!(lines[3], "  disk sda#0: node ?, cpus 0-13");
    assert_eq!(lines[5], "management: cpus 0-13");
    assert_eq!(lines[6], "buffers: ens1f0 on node 1, sda on any node");
    assert_eq!(lines[7], "priority: normal; buffers not locked");
    assert_eq!(lines.iter().filter(|l| l.starts_with("note: ")).count(), p.notes.len());
    assert_eq!(lines.len(), 8 + p.notes.len());
}

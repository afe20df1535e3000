//! A host name with several addresses: one that drops every SYN (an AAAA
//! record of a broken IPv6 path, here one routed to a veth whose far end
//! answers nothing) does not keep `cp` from the next. It took the whole connect
//! timeout, and the working address was never tried. Runs in a network
//! namespace of its own (needs root, as CI runs), whose `/etc/hosts`
//! (iproute2's `/etc/netns/NAME/hosts`) names `bh` twice.

mod common;
use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

struct Netns(&'static str);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", self.0]).status();
        let _ = std::fs::remove_dir_all(format!("/etc/netns/{}", self.0));
    }
}

fn ip(args: &[&str]) {
    assert!(Command::new("ip").args(args).status().unwrap().success(), "ip {args:?}");
}

#[test]
fn an_address_that_drops_every_syn_does_not_hide_the_next() {
    let ns = Netns("lpc-addrs");
    let _ = Command::new("ip").args(["netns", "del", ns.0]).status();
    ip(&["netns", "add", ns.0]);
    ip(&["-n", ns.0, "link", "set", "lo", "up"]);
    // A veth pair whose far end has no address: SYNs sent there (to a
    // fixed neighbour, so no neighbour discovery fails) vanish. A global
    // IPv6 address sorts before IPv4 (RFC 6724's precedence), as a broken
    // AAAA record's does.
    ip(&["-n", ns.0, "link", "add", "v0", "type", "veth", "peer", "name", "v1"]);
    ip(&["-n", ns.0, "link", "set", "v0", "up"]);
    ip(&["-n", ns.0, "link", "set", "v1", "up"]);
    ip(&["-n", ns.0, "addr", "add", "2001:db8:99::2/64", "dev", "v0", "nodad"]);
    let mac = ["lladdr", "02:00:00:00:00:01", "dev", "v0", "nud", "permanent"];
    ip(&[&["-n", ns.0, "neigh", "add", "2001:db8:99::1"][..], &mac].concat());
    std::fs::create_dir_all(format!("/etc/netns/{}", ns.0)).unwrap();
    std::fs::write(format!("/etc/netns/{}/hosts", ns.0), "2001:db8:99::1 bh\n127.0.0.1 bh\n").unwrap();
    let (_d, root, local) = root_and_local();
    std::fs::write(root.join("f"), b"through the second address").unwrap();
    let port = free_port();
    let script = format!(
        "\"$0\" serve --listen 127.0.0.1:{port} --anonymous --root {root} 2>/dev/null & \
         while ! (echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null; do sleep 0.05; done; \
         \"$0\" -v cp -q --retries 0 --connect-timeout 20 ftp://bh:{port}/f {dst}; rc=$?; kill $!; exit $rc",
        root = root.display(),
        dst = local.join("f").display()
    );
    let t = Instant::now();
    let out = Command::new("ip")
        .args(["netns", "exec", ns.0, "bash", "-c", &script, LP])
        .env("LIGHTPATH_PEERS", "")
        .output()
        .unwrap();
    let took = t.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(std::fs::read(local.join("f")).unwrap(), b"through the second address");
    assert!(took < Duration::from_secs(15), "{took:?}: the first address took the whole timeout");
    // The RTT is the kernel's sample of the handshake, not the 5 s the
    // first address took (which chose 64 streams for loopback).
    let rtts: Vec<u64> = err
        .lines()
        .filter(|l| l.contains("automatic stream count"))
        .filter_map(|l| l.split("rtt_us=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect();
    assert!(!rtts.is_empty() && rtts.iter().all(|&r| r < 100_000), "{rtts:?}: {err}");
}

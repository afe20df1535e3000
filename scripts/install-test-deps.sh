#!/usr/bin/env bash
# Installs everything the tests and the benchmark harness need on a fresh
# Debian 12 machine (run as root): the real Globus tools (interop peers),
# iperf3/fio/hyperfine (lab and bench references), the unprivileged `gftp`
# user the Globus server runs its sessions as; mount(8) and losetup(8)
# (package mount) for the full-disk tests (small tmpfs mounts) and the
# bench's fresh scratch file systems, which mkfs.ext4 (e2fsprogs) makes;
# setfacl (acl) for a test of a file an ACL keeps from its sender; g++
# for libfuzzer-sys, whose build script compiles libFuzzer when the fuzz
# targets are checked (scripts/test.sh); bindfs for a file system that
# keeps no permission bits (`--chmod-deny`, as FAT through FUSE);
# fincore (util-linux-extra) to see a file leave the page cache.
# Idempotent.
set -euo pipefail

PKGS=(globus-gridftp-server-progs globus-gass-copy-progs iperf3 fio hyperfine iproute2 procps mount e2fsprogs acl g++ bindfs util-linux-extra)
EXTRA_PKGS=${LIGHTPATH_EXTRA_PKGS:-}

missing=()
for p in "${PKGS[@]}" $EXTRA_PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-test-deps: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The Globus server refuses anonymous sessions as root: they run as gftp.
id gftp >/dev/null 2>&1 || useradd -r -M -d /nonexistent -s /usr/sbin/nologin gftp

# globus-gridftp-server resolves this machine's own name at start; a
# fresh container may not know it (this image's /etc/hosts has it).
getent hosts "$(hostname)" >/dev/null || echo "127.0.0.1 $(hostname)" >> /etc/hosts

# The interop tests over IPv6 listen on ::1 and [::].
if [ -w /proc/sys/net/ipv6/conf/lo/disable_ipv6 ]; then
    echo 0 > /proc/sys/net/ipv6/conf/all/disable_ipv6
    echo 0 > /proc/sys/net/ipv6/conf/lo/disable_ipv6
fi

for t in cargo globus-url-copy globus-gridftp-server iperf3 mount; do
    command -v "$t" >/dev/null || { echo "install-test-deps: $t still missing" >&2; exit 1; }
done
echo "install-test-deps: ok"

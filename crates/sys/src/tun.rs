//! TUN devices for the WAN emulator (lab/wan).
//!
//! A [`Tun`] is an open `/dev/net/tun` file bound to one layer-3 interface
//! (`IFF_TUN | IFF_NO_PI`): each `read` returns one whole IP packet, each
//! `write` injects one. The device lives as long as the file is open (it is
//! not made persistent), so a crashed process leaves no interface behind.
//! The fd may be used after the interface is moved to another network
//! namespace (`ip link set <name> netns <ns>`).
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{Mode, OFlags};

/// Options for [`Tun::open`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TunOptions {
    /// Open the fd with `O_NONBLOCK` (reads return `WouldBlock` when empty).
    pub nonblocking: bool,
    /// Create a multi-queue device (`IFF_MULTI_QUEUE`); open more queues with
    /// [`Tun::open`] on the same name.
    pub multi_queue: bool,
    /// Segmentation and checksum offload, as a NIC with TSO and GRO has
    /// (`IFF_VNET_HDR`, `TUNSETOFFLOAD` with `TUN_F_CSUM | TUN_F_TSO4 |
    /// TUN_F_TSO6`): every packet read or written starts with a
    /// [`VNET_HDR_LEN`]-byte `struct virtio_net_hdr`, and the stack hands
    /// over TCP segments of up to 64 KiB that stand for many packets of
    /// the MTU (and takes such segments in whole), so per-packet work is
    /// not done once per MTU.
    pub offload: bool,
}

/// Bytes of the `struct virtio_net_hdr` in front of each packet of a
/// device opened with [`TunOptions::offload`] (the kernel's default size).
pub const VNET_HDR_LEN: usize = 10;

/// An open TUN interface (layer 3, no packet-info header).
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
    name: String,
}

/// Length of an interface name including its NUL (`IFNAMSIZ`).
const IFNAMSIZ: usize = libc::IFNAMSIZ;

impl Tun {
    /// Opens (creates) a TUN interface. `name` may be a template such as
    /// `"lpt%d"`: the kernel then picks a free number, see [`Tun::name`].
    pub fn open(name: &str, opts: TunOptions) -> io::Result<Tun> {
        if name.is_empty() || name.len() >= IFNAMSIZ || name.contains('\0') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad interface name {name:?} (1..{} bytes)", IFNAMSIZ - 1),
            ));
        }
        let mut flags = OFlags::RDWR | OFlags::CLOEXEC;
        if opts.nonblocking {
            flags |= OFlags::NONBLOCK;
        }
        let fd = rustix::fs::open("/dev/net/tun", flags, Mode::empty())?;
        let mut ifr_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
        if opts.multi_queue {
            ifr_flags |= libc::IFF_MULTI_QUEUE as libc::c_short;
        }
        if opts.offload {
            ifr_flags |= libc::IFF_VNET_HDR as libc::c_short;
        }
        let name = set_iff(&fd, name, ifr_flags)?;
        if opts.offload {
            let features = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6;
            // SAFETY: `fd` is an open TUN device with IFF_VNET_HDR;
            // TUNSETOFFLOAD takes its argument (a feature mask) by value and
            // touches no memory of ours.
            let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD, features as libc::c_ulong) };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(Tun { fd, name })
    }

    /// The interface name the kernel assigned.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reads one packet into `buf`; returns its length. A packet longer than
    /// `buf` is truncated by the kernel, so size `buf` for the MTU.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        Ok(rustix::io::read(&self.fd, buf)?)
    }

    /// Writes one IP packet into the interface (the kernel receives it).
    pub fn write(&self, packet: &[u8]) -> io::Result<usize> {
        Ok(rustix::io::write(&self.fd, packet)?)
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Runs `TUNSETIFF` on `fd` and returns the name the kernel chose.
fn set_iff(fd: &OwnedFd, name: &str, flags: libc::c_short) -> io::Result<String> {
    // SAFETY: `ifreq` is a plain C struct (arrays, integers, a union of such
    // and pointers); all-zero bytes are a valid value for every field.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    ifr.ifr_ifru.ifru_flags = flags;
    // SAFETY: `fd` is an open /dev/net/tun file; TUNSETIFF reads and writes
    // exactly one `struct ifreq`, and `ifr` is a valid, exclusively borrowed
    // `ifreq` that outlives the call. The name is NUL-terminated because it
    // is shorter than IFNAMSIZ and the rest of the array is zero.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut ifr) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let raw: Vec<u8> = ifr.ifr_name.iter().map(|&c| c as u8).collect();
    let cstr = CStr::from_bytes_until_nul(&raw)
        .map_err(|_| io::Error::other("kernel returned an unterminated interface name"))?;
    Ok(cstr.to_string_lossy().into_owned())
}

/// Gives the calling thread real-time `SCHED_FIFO` priority `prio`
/// (1..=99), so that an emulated wire is not starved by the processes whose
/// packets it carries. Needs root (CAP_SYS_NICE). The kernel's RT throttling
/// (`kernel.sched_rt_runtime_us`) still leaves other tasks some CPU.
pub fn set_current_thread_fifo(prio: i32) -> io::Result<()> {
    // SAFETY: `sched_param` is a plain C struct of integers; zero is valid.
    let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
    param.sched_priority = prio;
    // SAFETY: pid 0 means the calling thread only; `param` is a valid,
    // initialized `sched_param` that outlives the call, which only reads it.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_names() {
        let o = TunOptions::default();
        assert!(Tun::open("", o).is_err());
        assert!(Tun::open("a-name-that-is-too-long", o).is_err());
    }
}

//! What a packet read from a TUN device with offloads
//! ([`lightpath_sys::tun::TunOptions::offload`]) stands for on the wire.
//!
//! Such a packet starts with a `struct virtio_net_hdr` (10 bytes). When its
//! `gso_type` is set, the IP packet behind it is one TCP segment of up to
//! 64 KiB that a NIC with TSO would have cut into packets of `gso_size`
//! payload bytes, each with a copy of the IP and TCP headers. The link
//! model charges those packets, header copies included, so the emulated
//! rate and queue are the same with offloads as without.
//!
//! Written by hand: a few fixed offsets of the virtio header (virtio spec
//! 1.1, 5.1.6) and of the IPv4/IPv6 and TCP headers, which no crate is
//! needed for. Everything read is bounds-checked: the packets come from the
//! kernel, but a malformed one must cost a wrong count, never a panic.
use lightpath_sys::tun::VNET_HDR_LEN;

/// `VIRTIO_NET_HDR_GSO_NONE`.
const GSO_NONE: u8 = 0;

/// One packet (or segment) as the wire sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wire {
    /// Bytes of IP packets on the wire.
    pub bytes: usize,
    /// IP packets on the wire.
    pub packets: usize,
}

/// The wire bytes and packets of `raw` (virtio header + IP packet).
pub fn wire(raw: &[u8]) -> Wire {
    let ip = raw.get(VNET_HDR_LEN..).unwrap_or(&[]);
    let plain = Wire { bytes: ip.len(), packets: 1 };
    let (Some(&gso_type), Some(gso_size)) = (raw.get(1), u16_le(raw, 4)) else { return plain };
    if gso_type == GSO_NONE || gso_size == 0 {
        return plain;
    }
    let Some(hdr) = headers_len(ip).filter(|&h| h < ip.len()) else { return plain };
    let packets = (ip.len() - hdr).div_ceil(gso_size as usize);
    Wire { bytes: ip.len() + (packets - 1) * hdr, packets }
}

/// Bytes of the IP and TCP headers at the start of `ip` (options
/// included), if it is a TCP packet.
fn headers_len(ip: &[u8]) -> Option<usize> {
    let (ip_len, proto) = match ip.first()? >> 4 {
        4 => ((*ip.first()? as usize & 0x0f) * 4, *ip.get(9)?),
        6 => (40, *ip.get(6)?),
        _ => return None,
    };
    if proto != 6 {
        return None;
    }
    let tcp_len = (*ip.get(ip_len + 12)? as usize >> 4) * 4;
    Some(ip_len + tcp_len)
}

fn u16_le(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A virtio header with `gso_type` and `gso_size`, then an IPv4 TCP
    /// packet (20-byte IP header, 32-byte TCP header) with `payload` bytes.
    fn tso_packet(gso_type: u8, gso_size: u16, payload: usize) -> Vec<u8> {
        let mut p = vec![0u8; VNET_HDR_LEN];
        p[1] = gso_type;
        p[4..6].copy_from_slice(&gso_size.to_le_bytes());
        let mut ip = vec![0u8; 52 + payload];
        ip[0] = 0x45;
        ip[9] = 6;
        ip[20 + 12] = 8 << 4;
        p.extend_from_slice(&ip);
        p
    }

    #[test]
    fn a_tso_segment_counts_as_the_packets_it_stands_for() {
        // 64 000 bytes in segments of 8948 (MTU 9000): 8 packets, the last short.
        let w = wire(&tso_packet(1, 8948, 64_000));
        assert_eq!(w, Wire { bytes: 64_000 + 8 * 52, packets: 8 });
        // An exact multiple: no empty packet at the end.
        assert_eq!(wire(&tso_packet(1, 1000, 3000)), Wire { bytes: 3000 + 3 * 52, packets: 3 });
    }

    #[test]
    fn a_plain_packet_counts_once_without_its_virtio_header() {
        assert_eq!(wire(&tso_packet(GSO_NONE, 0, 100)), Wire { bytes: 152, packets: 1 });
        assert_eq!(wire(&tso_packet(1, 0, 100)), Wire { bytes: 152, packets: 1 }, "gso_size 0");
    }

    #[test]
    fn malformed_packets_count_once_and_never_panic() {
        for raw in [vec![], vec![0u8; 3], vec![0, 1, 0, 0, 10, 0], tso_packet(1, 100, 0)[..20].to_vec()] {
            assert_eq!(wire(&raw).packets, 1, "{raw:?}");
        }
        let mut udp = tso_packet(1, 100, 1000);
        udp[VNET_HDR_LEN + 9] = 17;
        assert_eq!(wire(&udp), Wire { bytes: 1052, packets: 1 });
    }
}

//! Data-channel addresses: `PORT`/`PASV` (RFC 959), `EPRT`/`EPSV` (RFC 2428),
//! `SPOR`/`SPAS` (GFD.20 striping).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Error parsing an address from the network.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddrError {
    /// Not `h1,h2,h3,h4,p1,p2` / `|af|addr|port|`.
    #[error("malformed host-port {0:?}")]
    Malformed(String),
    /// Port 0 or a privileged port (FTP bounce protection).
    #[error("refusing data port {0}")]
    BadPort(u16),
    /// Address family not 1 (IPv4) or 2 (IPv6).
    #[error("unsupported network protocol {0}")]
    Family(String),
}

/// Whether `ip` is only meaningful inside a host or site: loopback,
/// private, link-local, unique local, or no host at all.
pub fn inside(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v) => v.is_loopback() || v.is_private() || v.is_link_local() || v.is_unspecified(),
        IpAddr::V6(v) => {
            let s = v.segments()[0];
            v.is_loopback() || v.is_unspecified() || s & 0xfe00 == 0xfc00 || s & 0xffc0 == 0xfe80
        }
    }
}

/// Whether a data address `ip`, named by a peer at `peer`, is one the peer
/// cannot vouch for: inside a site when the peer is not, or on the local
/// host when the peer is not. A hostile peer could otherwise aim a
/// connection at the other end's own loopback or private network.
pub fn unvouched(ip: IpAddr, peer: IpAddr) -> bool {
    let (ip, peer) = (ip.to_canonical(), peer.to_canonical());
    reaches_inside(ip, peer) || (peer.is_loopback() && !ip.is_loopback())
}

/// Whether a data address `ip` named by a client at `client` reaches
/// into the server's own host or site from outside it: a site address
/// named by a client outside the site, or a loopback one named by a client
/// not on the host. (A client on the host or in the site may name an
/// outside address: unlike [`unvouched`], the direction matters.)
pub fn reaches_inside(ip: IpAddr, client: IpAddr) -> bool {
    let (ip, client) = (ip.to_canonical(), client.to_canonical());
    ip != client && ((inside(ip) && !inside(client)) || (ip.is_loopback() && !client.is_loopback()))
}

/// Parse RFC 959 `h1,h2,h3,h4,p1,p2`.
pub fn parse_port(arg: &str) -> Result<SocketAddr, AddrError> {
    let bad = || AddrError::Malformed(arg.chars().take(64).collect());
    let nums: Vec<u8> =
        arg.trim().split(',').map(|p| p.trim().parse::<u8>()).collect::<Result<_, _>>().map_err(|_| bad())?;
    if nums.len() != 6 {
        return Err(bad());
    }
    let ip = Ipv4Addr::new(nums[0], nums[1], nums[2], nums[3]);
    let port = u16::from(nums[4]) << 8 | u16::from(nums[5]);
    check_port(SocketAddr::new(IpAddr::V4(ip), port))
}

/// Parse RFC 2428 `<d>af<d>addr<d>port<d>`.
pub fn parse_eprt(arg: &str) -> Result<SocketAddr, AddrError> {
    let bad = || AddrError::Malformed(arg.chars().take(64).collect());
    let arg = arg.trim();
    let delim = arg.chars().next().ok_or_else(bad)?;
    if !(33..=126).contains(&(delim as u32)) || delim.is_ascii_alphanumeric() {
        return Err(bad());
    }
    let parts: Vec<&str> = arg.split(delim).collect();
    if parts.len() != 5 || !parts[0].is_empty() || !parts[4].is_empty() {
        return Err(bad());
    }
    let ip: IpAddr = parts[2].parse().map_err(|_| bad())?;
    let family_ok = matches!((parts[1], ip), ("1", IpAddr::V4(_)) | ("2", IpAddr::V6(_)));
    if !family_ok {
        return Err(AddrError::Family(parts[1].chars().take(8).collect()));
    }
    let port: u16 = parts[3].parse().map_err(|_| bad())?;
    check_port(SocketAddr::new(ip, port))
}

fn check_port(addr: SocketAddr) -> Result<SocketAddr, AddrError> {
    if addr.port() < 1024 {
        return Err(AddrError::BadPort(addr.port()));
    }
    Ok(addr)
}

/// Format `h1,h2,h3,h4,p1,p2` (IPv4 only; IPv6 needs EPRT/EPSV).
pub fn format_port(addr: SocketAddr) -> Option<String> {
    let IpAddr::V4(ip) = addr.ip() else { return None };
    let o = ip.octets();
    let p = addr.port();
    Some(format!("{},{},{},{},{},{}", o[0], o[1], o[2], o[3], p >> 8, p & 0xff))
}

/// Format `|1|addr|port|` / `|2|addr|port|`.
pub fn format_eprt(addr: SocketAddr) -> String {
    let af = if addr.is_ipv4() { 1 } else { 2 };
    format!("|{af}|{}|{}|", addr.ip(), addr.port())
}

/// Find the `h1,h2,h3,h4,p1,p2` inside a 227 reply or a SPAS line.
pub fn parse_pasv_reply(text: &str) -> Result<SocketAddr, AddrError> {
    let start = text.find(|c: char| c.is_ascii_digit()).ok_or_else(|| AddrError::Malformed(text.into()))?;
    let rest = &text[start..];
    let end = rest.find(|c: char| !(c.is_ascii_digit() || c == ',' || c == ' ')).unwrap_or(rest.len());
    parse_port(rest[..end].trim_end_matches([',', ' ']))
}

/// Parse the `(|||port|)` of a 229 reply; the host is the control peer's.
pub fn parse_epsv_reply(text: &str, control_peer: IpAddr) -> Result<SocketAddr, AddrError> {
    let bad = || AddrError::Malformed(text.chars().take(80).collect());
    let open = text.find('(').ok_or_else(bad)?;
    let close = text[open..].find(')').ok_or_else(bad)? + open;
    let inner = &text[open + 1..close];
    let d = inner.chars().next().ok_or_else(bad)?;
    let parts: Vec<&str> = inner.split(d).collect();
    if parts.len() != 5 {
        return Err(bad());
    }
    let port: u16 = parts[3].parse().map_err(|_| bad())?;
    check_port(SocketAddr::new(control_peer, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_forms() {
        let a = parse_port("127,0,0,1,194,59").unwrap();
        assert_eq!(a, "127.0.0.1:49723".parse().unwrap());
        assert_eq!(format_port(a).unwrap(), "127,0,0,1,194,59");
        assert_eq!(parse_eprt("|1|127.0.0.1|49723|").unwrap(), a);
        assert_eq!(parse_eprt(&format_eprt("[::1]:5000".parse().unwrap())).unwrap().port(), 5000);
        assert_eq!(parse_pasv_reply("Entering Passive Mode (127,0,0,1,194,59)").unwrap(), a);
        let e = parse_epsv_reply("Entering Extended Passive Mode (|||58301|)", a.ip()).unwrap();
        assert_eq!(e.port(), 58301);
    }

    #[test]
    fn hostile_ports() {
        assert_eq!(parse_port("127,0,0,1,0,21"), Err(AddrError::BadPort(21)));
        for bad in ["1,2,3", "256,0,0,1,4,4", "a,b,c,d,e,f", "", "1,2,3,4,5,6,7"] {
            assert!(parse_port(bad).is_err(), "{bad}");
        }
        assert!(parse_eprt("|1|::1|5000|").is_err());
        assert!(parse_eprt("|3|1.2.3.4|5000|").is_err());
        assert!(parse_eprt("x1x1.2.3.4x5000x").is_err());
    }
}

//! Data ports in a range a firewall lets through: `serve --data-ports`
//! for its PASV/SPAS/EPSV listeners, and the client's listeners for a
//! MODE E download (PORT). `GLOBUS_TCP_PORT_RANGE`, which Globus's tools
//! read for the same purpose (`LOW,HIGH`), is honoured where lightpath's
//! own setting is not given, so a DTN configured for GCT stays so.

use std::io;
use std::net::{IpAddr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};

/// Ports `low..=high`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    pub low: u16,
    pub high: u16,
}

impl std::str::FromStr for PortRange {
    type Err = String;

    /// `LOW-HIGH` or `LOW,HIGH` (GCT's form), 1024 to 65535, `LOW <= HIGH`.
    fn from_str(s: &str) -> Result<PortRange, String> {
        let bad = || format!("{s:?}: give a port range as LOW-HIGH (e.g. 50000-51000), ports 1024 to 65535");
        let (a, b) = s.split_once(['-', ',']).ok_or_else(bad)?;
        let port = |p: &str| p.trim().parse::<u16>().ok().filter(|&p| p >= 1024);
        match (port(a), port(b)) {
            (Some(low), Some(high)) if low <= high => Ok(PortRange { low, high }),
            _ => Err(bad()),
        }
    }
}

impl std::fmt::Display for PortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.low, self.high)
    }
}

/// The range in `GLOBUS_TCP_PORT_RANGE` (or `var`'s, checked first), if
/// one is set and well formed; a malformed one is an error naming it.
pub fn range_from_env(var: &str) -> Result<Option<PortRange>, String> {
    for name in [var, "GLOBUS_TCP_PORT_RANGE"] {
        if let Some(v) = std::env::var_os(name).filter(|v| !v.is_empty()) {
            let text = v.to_string_lossy();
            return text.parse().map(Some).map_err(|e| format!("{name}: {e}"));
        }
    }
    Ok(None)
}

/// Listen on `ip`, at a free port of `range` (any port without one).
/// Each call starts one port further on, so that sessions spread over the
/// range instead of all trying its first ports.
pub fn listen_in(ip: IpAddr, range: Option<PortRange>) -> io::Result<TcpListener> {
    let Some(r) = range else { return TcpListener::bind((ip, 0)) };
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = u32::from(r.high - r.low) + 1;
    let start = NEXT.fetch_add(1, Ordering::Relaxed);
    for i in 0..n {
        let port = r.low + ((start.wrapping_add(i)) % n) as u16;
        match TcpListener::bind((ip, port)) {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(io::ErrorKind::AddrInUse, format!("no free data port in {r}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_in_both_forms_or_are_refused() {
        assert_eq!("50000-51000".parse(), Ok(PortRange { low: 50000, high: 51000 }));
        assert_eq!("50000,50000".parse(), Ok(PortRange { low: 50000, high: 50000 }));
        for bad in ["", "50000", "51000-50000", "80-90", "50000-70000", "a-b", "1-2-3"] {
            assert!(bad.parse::<PortRange>().is_err(), "{bad:?}");
        }
    }

    /// A listener takes the range's free port, and none is left once it
    /// is taken.
    #[test]
    fn listeners_stay_in_their_range() {
        let probe = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = probe.local_addr().unwrap().port();
        drop(probe);
        let r = PortRange { low: p, high: p };
        let ip = IpAddr::from([127, 0, 0, 1]);
        let held = listen_in(ip, Some(r)).unwrap();
        assert_eq!(held.local_addr().unwrap().port(), p);
        let e = listen_in(ip, Some(r)).unwrap_err();
        assert!(e.to_string().contains("no free data port in"), "{e}");
        assert!(listen_in(ip, None).is_ok());
    }
}

//! `111` restart markers and `112` performance markers (GFD.20), sent by the
//! receiving server during STOR/ESTO.

use crate::ranges::RangeSet;
use crate::reply::Reply;

/// `111 Range Marker a-b,c-d`: ranges written since the last marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartMarker(pub RangeSet);

impl RestartMarker {
    /// The reply to send.
    pub fn to_reply(&self) -> Reply {
        Reply::new(111, format!("Range Marker {}", self.0))
    }

    /// Parse a 111 reply; `None` if it is not a range marker.
    pub fn from_reply(r: &Reply) -> Option<RestartMarker> {
        if r.code != 111 {
            return None;
        }
        let rest = r.text().trim().strip_prefix("Range Marker")?;
        RangeSet::parse(rest.trim()).ok().map(RestartMarker)
    }
}

/// `113-Status Marker` of a long `CKSM` (GCT's, after `OPTS CKSM
/// markers=N;`): the bytes it has read so far. A client counts it as a
/// reply, so a checksum of hours does not pass its reply timeout.
pub fn status_marker(timestamp: f64, bytes: u64) -> Reply {
    let lines = [format!("Timestamp: {timestamp:.1}"), format!("Bytes Processed: {bytes}")];
    Reply::multi(113, "Status Marker", lines)
}

/// The name of the perf-line fact that carries [`PerfMarker::data_path`].
const DATA_PATH: &str = "Data Path:";

/// `112-Perf Marker` with the bytes moved so far on one stripe.
#[derive(Debug, Clone, PartialEq)]
pub struct PerfMarker {
    /// Seconds since the Unix epoch (the caller passes the wall clock in).
    pub timestamp: f64,
    /// Stripe this marker is for.
    pub stripe_index: u32,
    /// Bytes received on that stripe.
    pub bytes: u64,
    /// Number of stripes.
    pub total_stripes: u32,
    /// How the server moves the bytes (`sendfile`, `splice`, `direct I/O`...),
    /// a `Data Path:` fact of our own. GFD.20 lets a marker carry "any other
    /// perf-line facts"; GCT's client finds its four by name and skips it.
    pub data_path: Option<String>,
}

impl PerfMarker {
    /// The multi-line reply, laid out as GCT 13.24 writes it (with the
    /// data path last, when known).
    pub fn to_reply(&self) -> Reply {
        let mut lines = vec![
            format!("Timestamp:  {:.1}", self.timestamp),
            format!("Stripe Index: {}", self.stripe_index),
            format!("Stripe Bytes Transferred: {}", self.bytes),
            format!("Total Stripe Count: {}", self.total_stripes),
        ];
        lines.extend(self.data_path.iter().map(|p| format!("{DATA_PATH} {p}")));
        Reply::multi(112, "Perf Marker", lines)
    }

    /// Parse a 112 reply (whitespace handled loosely).
    pub fn from_reply(r: &Reply) -> Option<PerfMarker> {
        if r.code != 112 {
            return None;
        }
        let field = |name: &str| r.lines.iter().find_map(|l| l.trim().strip_prefix(name).map(|v| v.trim().to_string()));
        Some(PerfMarker {
            timestamp: field("Timestamp:")?.parse().ok()?,
            stripe_index: field("Stripe Index:")?.parse().ok()?,
            bytes: field("Stripe Bytes Transferred:")?.parse().ok()?,
            total_stripes: field("Total Stripe Count:")?.parse().ok()?,
            data_path: field(DATA_PATH).filter(|p| !p.is_empty()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::ReplyParser;

    #[test]
    fn status_marker_as_gct_writes_it() {
        let wire = "113-Status Marker\r\n Timestamp: 1795938539.8\r\n Bytes Processed: 277348352\r\n113 End.\r\n";
        assert_eq!(String::from_utf8(status_marker(1795938539.8, 277348352).encode()).unwrap(), wire);
    }

    #[test]
    fn perf_marker_as_gct_writes_it() {
        let wire = "112-Perf Marker\r\n Timestamp:  1795288682.5\r\n Stripe Index: 0\r\n Stripe Bytes Transferred: 67108864\r\n Total Stripe Count: 1\r\n112 End.\r\n";
        let mut p = ReplyParser::new();
        let mut r = None;
        for l in wire.split("\r\n").filter(|l| !l.is_empty()) {
            r = p.handle_line(l).unwrap();
        }
        let m = PerfMarker::from_reply(&r.unwrap()).unwrap();
        assert_eq!(m.bytes, 67108864);
        assert_eq!(String::from_utf8(m.to_reply().encode()).unwrap(), wire);
        assert_eq!(m.data_path, None);
    }

    #[test]
    fn perf_marker_carries_the_data_path_as_a_fact_of_its_own() {
        let m = PerfMarker {
            timestamp: 1.0,
            stripe_index: 0,
            bytes: 5,
            total_stripes: 1,
            data_path: Some("sendfile".into()),
        };
        let r = m.to_reply();
        let wire = String::from_utf8(r.encode()).unwrap();
        assert!(wire.ends_with(" Total Stripe Count: 1\r\n Data Path: sendfile\r\n112 End.\r\n"), "{wire}");
        assert_eq!(PerfMarker::from_reply(&r), Some(m));
    }

    #[test]
    fn restart_marker() {
        let r = RestartMarker(RangeSet::parse("0-5,9-12").unwrap()).to_reply();
        assert_eq!(r.encode(), b"111 Range Marker 0-5,9-12\r\n");
        assert_eq!(RestartMarker::from_reply(&r).unwrap().0.covered(), 8);
    }
}

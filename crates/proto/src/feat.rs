//! `FEAT` (RFC 2389): what we advertise and what we learn from a peer.
//! Features are taken from FEAT, never assumed.

use crate::reply::Reply;

/// Our own extension, advertised only by lightpath servers.
pub const LIGHTPATH_FEAT: &str = "LIGHTPATH";
/// The large virtual file (VRET/VSTO), with the manifest version.
pub const LPVF_FEAT: &str = "LPVF";
/// FEAT label: `LPVF-COPIES <n>`, the server takes each manifest chunk of
/// a VSTO up to `n` times (see [`crate::manifest::MAX_COPIES`]).
pub const LPVF_COPIES_FEAT: &str = "LPVF-COPIES";
/// Data connections opened ahead (`DCON`), with the port they go to.
pub const DCON_FEAT: &str = "DCON";

/// Features a peer advertised.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Features {
    /// MODE E with parallel streams (`PARALLEL`).
    pub parallel: bool,
    /// `ERET` partial retrieve.
    pub eret: bool,
    /// `ESTO` adjusted store.
    pub esto: bool,
    /// `REST STREAM`.
    pub rest_stream: bool,
    /// `SIZE`.
    pub size: bool,
    /// `MDTM`.
    pub mdtm: bool,
    /// `MLST` (and so `MLSD`).
    pub mlst: bool,
    /// `MLSR`: a whole tree listed in one command (GCT's recursive MLSD).
    pub mlsr: bool,
    /// `SPAS`/`SPOR` striping.
    pub spas: bool,
    /// Checksum algorithms from `CKSM alg:..;alg:..;` (upper case).
    pub cksm: Vec<String>,
    /// `LIGHTPATH <version>` if the peer is lightpath.
    pub lightpath: Option<String>,
    /// `LPVF <manifest version>`: the peer speaks VRET/VSTO.
    pub lpvf: Option<u8>,
    /// `LPVF-COPIES <n>`: a VSTO may carry each manifest chunk up to `n`
    /// times (0: once only).
    pub lpvf_copies: u8,
    /// `DCON <port>`: where data connections opened ahead go.
    pub dcon: Option<u16>,
    /// `MFMT`: a file's modification time can be set.
    pub mfmt: bool,
    /// `DSI <name>`: Globus GridFTP's Data Storage Interface, which only
    /// globus-gridftp-server lists.
    pub dsi: bool,
}

impl Features {
    /// Learn features from a 211 reply.
    pub fn from_reply(r: &Reply) -> Features {
        let mut f = Features::default();
        if r.code != 211 {
            return f;
        }
        for line in r.lines.iter().skip(1) {
            f.learn(line.trim());
        }
        f
    }

    fn learn(&mut self, line: &str) {
        let (name, arg) = line.split_once(' ').unwrap_or((line, ""));
        match name.to_ascii_uppercase().as_str() {
            "PARALLEL" => self.parallel = true,
            "ERET" => self.eret = true,
            "ESTO" => self.esto = true,
            "REST" => self.rest_stream = arg.trim().eq_ignore_ascii_case("STREAM"),
            "SIZE" => self.size = true,
            "MDTM" => self.mdtm = true,
            "MLST" => self.mlst = true,
            "MLSR" => self.mlsr = true,
            "SPAS" => self.spas = true,
            "DSI" => self.dsi = true,
            "MFMT" => self.mfmt = true,
            "CKSM" => {
                self.cksm = arg
                    .split(';')
                    .filter_map(|a| a.split(':').next())
                    .map(|a| a.trim().to_ascii_uppercase())
                    .filter(|a| !a.is_empty())
                    .collect()
            }
            LIGHTPATH_FEAT => self.lightpath = Some(arg.trim().to_string()),
            LPVF_FEAT => self.lpvf = arg.trim().parse().ok(),
            LPVF_COPIES_FEAT => self.lpvf_copies = arg.trim().parse().unwrap_or(0),
            // Not a privileged port: a server must not aim our hellos at
            // its host's ssh or mail daemon (PASV replies are held to the same).
            DCON_FEAT => self.dcon = arg.trim().parse().ok().filter(|&p| p >= 1024),
            _ => {}
        }
    }

    /// Whether the peer computes `alg` with CKSM.
    pub fn has_cksm(&self, alg: &str) -> bool {
        self.cksm.iter().any(|a| a.eq_ignore_ascii_case(alg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gct_feat() {
        let r = Reply::multi(
            211,
            "Extensions supported",
            [
                " CKSM MD5:10;ADLER32:10;SHA1:10;SHA256:11;SHA512:12;",
                " PARALLEL",
                " REST STREAM",
                " ERET",
                " MLST Type*;Size*;",
                " MLSR",
            ]
            .map(String::from),
        );
        let f = Features::from_reply(&r);
        assert!(f.parallel && f.rest_stream && f.eret && f.mlst && f.mlsr && !f.esto);
        assert!(f.has_cksm("adler32") && !f.has_cksm("CRC32C"));
        assert_eq!(f.lightpath, None);
    }

    #[test]
    fn lightpath_feat_with_dcon() {
        let lines = [" LIGHTPATH 0.1.0", " LPVF 1", " LPVF-COPIES 2", " DCON 2912"].map(String::from);
        let f = Features::from_reply(&Reply::multi(211, "Extensions supported", lines));
        assert_eq!((f.lightpath.as_deref(), f.lpvf, f.dcon), (Some("0.1.0"), Some(1), Some(2912)));
        assert_eq!(f.lpvf_copies, 2);
        for (line, n) in [(" LPVF 1", 0), (" LPVF-COPIES x", 0), (" LPVF-COPIES 1", 1)] {
            assert_eq!(Features::from_reply(&Reply::multi(211, "x", [line.to_string()])).lpvf_copies, n, "{line}");
        }
        for bad in [" DCON 0", " DCON", " DCON 70000", " DCON x", " DCON 22", " DCON 1023"] {
            let f = Features::from_reply(&Reply::multi(211, "x", [bad.to_string()]));
            assert_eq!(f.dcon, None, "{bad}");
        }
    }
}

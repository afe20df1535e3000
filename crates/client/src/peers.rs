//! What the client remembers of the lightpath servers it has met: the
//! port of their data connections opened ahead (FEAT `DCON`) and the
//! control connection's RTT. With it, the next session to the same server
//! opens its data connections while it logs in (see
//! `lightpath_proto::ahead`); without it, no connection goes anywhere but
//! the control port, so a plain GridFTP server never sees more than the
//! session it was asked for.
//!
//! The book is one text file, a line per server: `host port ahead_port
//! rtt_us`. `LIGHTPATH_PEERS` names it (empty: no book); else
//! `$XDG_STATE_HOME/lightpath/peers`, else `~/.local/state/lightpath/peers`.
//! Lines that do not parse are ignored; the newest [`MAX_PEERS`] are kept.
//! A path naming something else than a regular file (`LIGHTPATH_PEERS=/dev/null`)
//! is never written: the book is replaced by a rename, which as root
//! replaced the device node `/dev/null` with a file (a defect hunt's find).

use std::path::PathBuf;

/// Servers remembered at most.
pub const MAX_PEERS: usize = 256;

/// What is known of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Port of its data connections opened ahead; 0 once connections sent
    /// there never reached the server (a firewall, say): none are opened
    /// ahead to it again, but it is still known as lightpath (TCP Fast
    /// Open). Deleting its line starts over.
    pub ahead_port: u16,
    /// Its control connection's RTT when last seen (microseconds).
    pub rtt_us: u64,
}

/// The book's file, if there is one.
pub fn book_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LIGHTPATH_PEERS") {
        return (!p.is_empty()).then(|| PathBuf::from(p));
    }
    let state = std::env::var_os("XDG_STATE_HOME").filter(|s| !s.is_empty()).map(PathBuf::from).or_else(|| {
        std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| PathBuf::from(h).join(".local/state"))
    })?;
    Some(state.join("lightpath/peers"))
}

type Entry = (String, u16, Peer);

fn parse_line(line: &str) -> Option<Entry> {
    let f: Vec<&str> = line.split_ascii_whitespace().collect();
    let [host, port, ahead, rtt] = f[..] else { return None };
    // 0: no DCON. Below 1024 FEAT's DCON is refused too: a book edited
    // by someone else must not aim hellos at a service's port (ssh, smtp).
    let ahead_port = ahead.parse().ok().filter(|&p: &u16| p == 0 || p >= 1024)?;
    let peer = Peer { ahead_port, rtt_us: rtt.parse().ok()? };
    Some((host.to_string(), port.parse().ok()?, peer))
}

/// The book, at [`book_path`] or elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerBook(Option<PathBuf>);

impl Default for PeerBook {
    fn default() -> Self {
        PeerBook(book_path())
    }
}

impl PeerBook {
    /// A book kept in `path`.
    pub fn at(path: PathBuf) -> Self {
        PeerBook(Some(path))
    }

    /// No book: nothing is remembered.
    pub fn none() -> Self {
        PeerBook(None)
    }

    fn load(&self) -> Vec<Entry> {
        let Some(p) = &self.0 else { return Vec::new() };
        // Line by line: one line that is not UTF-8 lost every entry. Only a
        // regular file: a FIFO would block the read for ever.
        if !std::fs::metadata(p).is_ok_and(|m| m.is_file()) {
            return Vec::new();
        }
        let raw = std::fs::read(p).unwrap_or_default();
        raw.split(|&b| b == b'\n').filter_map(|l| std::str::from_utf8(l).ok().and_then(parse_line)).collect()
    }

    /// What the book says of `host:port`.
    pub fn lookup(&self, host: &str, port: u16) -> Option<Peer> {
        self.load().into_iter().rev().find(|(h, p, _)| h == host && *p == port).map(|e| e.2)
    }

    /// Write down `peer` for `host:port` (`None`: forget it). Best effort: a
    /// book that cannot be written costs a round trip next time, nothing more.
    pub fn remember(&self, host: &str, port: u16, peer: Option<Peer>) {
        let Some(path) = &self.0 else { return };
        if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
            return;
        }
        if let Err(e) = self.rewrite(path, host, port, peer) {
            tracing::debug!("peer book {}: {e}", path.display());
        }
    }

    fn rewrite(&self, path: &std::path::Path, host: &str, port: u16, peer: Option<Peer>) -> std::io::Result<()> {
        let mut all = self.load();
        let before = all.iter().find(|(h, p, _)| h == host && *p == port).map(|e| e.2);
        if close_enough(before, peer) {
            return Ok(());
        }
        all.retain(|(h, p, _)| !(h == host && *p == port));
        if let Some(peer) = peer {
            all.push((host.to_string(), port, peer));
        }
        let skip = all.len().saturating_sub(MAX_PEERS);
        let text: String =
            all[skip..].iter().map(|(h, p, e)| format!("{h} {p} {} {}\n", e.ahead_port, e.rtt_us)).collect();
        write_atomically(path, &text)
    }
}

/// The same port and an RTT within a quarter: not worth a rewrite.
fn close_enough(a: Option<Peer>, b: Option<Peer>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.ahead_port == b.ahead_port && a.rtt_us.abs_diff(b.rtt_us) * 4 <= a.rtt_us,
        _ => false,
    }
}

fn write_atomically(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir)?;
    // Sessions of one job (--cc) may write at once: a name of their own each.
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".peers.{}.{n}.tmp", std::process::id()));
    // Created, never opened as found: in a directory others may write, a
    // symlink planted under this (predictable) name would have had the
    // write truncate its target. A stale one (a reused pid) is removed.
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
    let r = std::io::Write::write_all(&mut f, text.as_bytes()).and_then(|()| std::fs::rename(&tmp, path));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp); // a full disk left one each run
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_or_are_ignored() {
        let p = Peer { ahead_port: 2912, rtt_us: 95000 };
        assert_eq!(parse_line("10.0.0.1 2911 2912 95000"), Some(("10.0.0.1".into(), 2911, p)));
        assert_eq!(
            parse_line("  ::1   2811 2812 40 "),
            Some(("::1".into(), 2811, Peer { ahead_port: 2812, rtt_us: 40 }))
        );
        assert_eq!(parse_line("h 1 0 3").map(|e| e.2.ahead_port), Some(0), "no DCON");
        // The last: a DCON port below 1024 (ssh), which FEAT would not give.
        for bad in ["", "h 1 2", "h 1 2 3 4", "h x 2 3", "h 1 -1 3", "h 1 70000 3", "h 1 2000 -3", "h 1 22 3"] {
            assert_eq!(parse_line(bad), None, "{bad:?}");
        }
    }

    /// A symlink planted under the temporary name is not written through.
    #[test]
    fn a_planted_symlink_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        for n in 0..64 {
            let name = format!(".peers.{}.{n}.tmp", std::process::id());
            std::os::unix::fs::symlink(&victim, dir.path().join(name)).unwrap();
        }
        let b = PeerBook::at(dir.path().join("peers"));
        b.remember("h", 1, Some(Peer { ahead_port: 2002, rtt_us: 300 }));
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(b.lookup("h", 1).map(|p| p.ahead_port), Some(2002));
    }

    /// A line that is not UTF-8 hides only itself; a device is not
    /// replaced; a book that cannot be written leaves no temporary file.
    #[test]
    fn odd_books_lose_nothing_else() {
        use std::os::unix::fs::FileTypeExt;
        let dir = tempfile::tempdir().unwrap();
        let book = dir.path().join("peers");
        std::fs::write(&book, b"a 1 2000 3\ncaf\xe9 1 2000 3\nb 1 2001 4\n").unwrap();
        let b = PeerBook::at(book.clone());
        assert_eq!(b.lookup("b", 1).map(|p| p.ahead_port), Some(2001));
        b.remember("c", 1, Some(Peer { ahead_port: 2002, rtt_us: 5 }));
        assert_eq!(b.lookup("a", 1).map(|p| p.ahead_port), Some(2000));
        let null = PeerBook::at("/dev/null".into());
        null.remember("c", 1, Some(Peer { ahead_port: 2002, rtt_us: 5 }));
        assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        PeerBook::at(fifo.clone()).remember("c", 1, Some(Peer { ahead_port: 2002, rtt_us: 5 }));
        assert_eq!(PeerBook::at(fifo.clone()).lookup("c", 1), None, "a FIFO is not read (it would block)");
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo(), "not replaced");
        std::fs::create_dir(dir.path().join("dir")).unwrap();
        std::fs::write(dir.path().join("dir/x"), b"").unwrap();
        // A rename over a non-empty directory fails: its temporary file goes.
        assert!(write_atomically(&dir.path().join("dir"), "x 1 2000 3\n").is_err());
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 3, "{left:?}");
    }

    #[test]
    fn remember_lookup_forget() {
        let dir = tempfile::tempdir().unwrap();
        let book = dir.path().join("sub/peers");
        let b = PeerBook::at(book.clone());
        assert_eq!(b.lookup("h", 1), None);
        let p = Peer { ahead_port: 2002, rtt_us: 300 };
        b.remember("h", 1, Some(p));
        b.remember("g", 1, Some(Peer { ahead_port: 2009, rtt_us: 1 }));
        assert_eq!(b.lookup("h", 1), Some(p));
        assert_eq!(b.lookup("h", 2), None);
        b.remember("h", 1, Some(Peer { ahead_port: 2002, rtt_us: 310 }));
        assert_eq!(b.lookup("h", 1), Some(p), "a small RTT change is not written");
        let newer = Peer { ahead_port: 2003, rtt_us: 400 };
        b.remember("h", 1, Some(newer));
        assert_eq!(b.lookup("h", 1), Some(newer));
        std::fs::write(&book, format!("{}garbage line\n", std::fs::read_to_string(&book).unwrap())).unwrap();
        assert_eq!(b.lookup("h", 1), Some(newer), "a bad line does not hide the good ones");
        b.remember("h", 1, None);
        assert_eq!(b.lookup("h", 1), None);
        assert_eq!(b.lookup("g", 1).map(|p| p.ahead_port), Some(2009));
        for i in 0..(MAX_PEERS + 10) {
            b.remember("many", i as u16 + 1, Some(p));
        }
        let lines = std::fs::read_to_string(&book).unwrap().lines().count();
        assert_eq!(lines, MAX_PEERS);
        assert_eq!(b.lookup("g", 1), None, "the oldest went first");
        let none = PeerBook::none();
        none.remember("h", 1, Some(p));
        assert_eq!(none.lookup("h", 1), None);
    }
}

//! What a broken tree transfer left complete at its receiver, said in the
//! receiver's failure reply so that the next try leaves it out (see
//! docs/manifest.md, "Resuming a tree"). A downloading client knows this
//! itself and sends it as `OPTS VRET After=`; a server receiving a tree
//! (`VSTO`) adds it to the reply that ends the failed transfer:
//!
//! ```text
//! 426-Data connection 2: Connection reset by peer
//!  Held After=7375622f66; Files=30; Bytes=3145728;
//! 426 End.
//! ```

use crate::command::MAX_VRET_AFTER;
use crate::Reply;

/// The regular files a receiver holds complete: every one up to `after`
/// in the sender's walk order, `files` of them, of `bytes`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    /// The manifest path of the last file held.
    pub after: Vec<u8>,
    /// Files held.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// Where a `VRET` resumes (`OPTS VRET After=<hex>;[Check=<16 hex>;]`):
/// the receiver holds every regular file up to `after` in the walk's
/// order. `check`, when given, is the receiver's check of those
/// files (a run resumed from an earlier one): the sender compares its own
/// and refuses the resume if they differ, so a tree that changed between
/// the runs goes whole. The check is a digest of each held regular
/// file's manifest path, size and mtime in walk order (the engine's
/// `HeldCheck`: the quick check rsync makes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeResume {
    /// The manifest path of the last file held.
    pub after: Vec<u8>,
    /// The held files' check, if the receiver sent one.
    pub check: Option<u64>,
}

/// The tree's own directory, as `OPTS VSTO Mode=<octal>;[Modify=<ns>;]`
/// gives it before a `VSTO`: the manifest describes what the directory
/// holds, not the directory itself, so its mode and mtime travel here. The
/// receiving server applies them once the tree is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeRoot {
    /// Permission bits (`0o7777` at most).
    pub mode: u32,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: Option<i64>,
}

impl TreeRoot {
    /// The mode the receiver gives the directory ([`crate::manifest::APPLY_MODE`]:
    /// no setuid or setgid, as for every entry of the tree).
    pub fn applied_mode(&self) -> u32 {
        self.mode & crate::manifest::APPLY_MODE
    }

    /// The mtime in whole seconds (rounded down), if known.
    pub fn mtime_secs(&self) -> Option<i64> {
        self.mtime_ns.map(|t| t.div_euclid(1_000_000_000))
    }

    /// `OPTS VSTO Mode=<octal>;[Modify=<ns>;]`.
    pub fn opts(&self) -> Vec<u8> {
        self.opts_for("VSTO")
    }

    /// `OPTS <verb> Mode=<octal>;[Modify=<ns>;]` (`VSTO`, or `STOR` for a
    /// single file: [`crate::command::Opts::Stor`]).
    pub fn opts_for(&self, verb: &str) -> Vec<u8> {
        let modify = self.mtime_ns.map(|t| format!("Modify={t};")).unwrap_or_default();
        format!("OPTS {verb} Mode={:o};{modify}", self.mode & 0o7777).into_bytes()
    }
}

const PREFIX: &str = "Held After=";

/// `bytes` as lower-case hex, two digits a byte.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of `hex` (an even number of hex digits), or `None`.
pub fn unhex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect()
}

impl Held {
    /// The continuation line; `None` for a path too long to travel.
    fn line(&self) -> Option<String> {
        let ok = !self.after.is_empty() && self.after.len() <= MAX_VRET_AFTER;
        ok.then(|| format!("{PREFIX}{}; Files={}; Bytes={};", hex(&self.after), self.files, self.bytes))
    }

    /// A line written by [`Held::line`]; anything else is `None`.
    fn parse(line: &str) -> Option<Held> {
        let rest = line.trim().strip_prefix(PREFIX)?.strip_suffix(';')?;
        let mut parts = rest.split("; ");
        let after = unhex(parts.next()?).filter(|a| !a.is_empty() && a.len() <= MAX_VRET_AFTER)?;
        let files = parts.next()?.strip_prefix("Files=")?.parse().ok()?;
        let bytes = parts.next()?.strip_prefix("Bytes=")?.parse().ok()?;
        parts.next().is_none().then_some(Held { after, files, bytes })
    }
}

impl Reply {
    /// This reply (a failure, or a tree receiver's perf marker) saying
    /// also what the receiver holds. A path too long for a control line is
    /// left out: the tree goes whole.
    pub fn with_held(self, held: &Held) -> Reply {
        match held.line() {
            Some(line) => self.with_lines(vec![line]),
            None => self,
        }
    }

    /// What a [`Reply::with_held`] says the receiver holds, its line taken
    /// out (the rest is the reply a user is shown). Only from a failure or
    /// a preliminary reply (a marker), and only the first such line; one
    /// that does not parse stays.
    pub fn take_held(&mut self) -> Option<Held> {
        if !(self.is_error() || self.is_preliminary()) {
            return None;
        }
        self.take_line(PREFIX, Held::parse)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::through_the_wire as parsed;

    #[test]
    fn held_travels_in_a_failure_reply_and_is_taken_out() {
        let held = Held { after: b"a b/\n\xff;= f".to_vec(), files: 30, bytes: 3 << 20 };
        let r = Reply::new(426, "Data connection 2: reset").with_held(&held);
        let wire = String::from_utf8(r.encode()).unwrap();
        assert_eq!(
            wire,
            "426-Data connection 2: reset\r\n Held After=6120622f0aff3b3d2066; Files=30; Bytes=3145728;\r\n426 End.\r\n"
        );
        let mut got = parsed(&r);
        assert_eq!(got.take_held(), Some(held.clone()));
        assert_eq!(got, Reply::new(426, "Data connection 2: reset"));
        // A multi-line reply keeps its own lines.
        let multi = Reply::multi(451, "Tree incomplete", ["2 files missing".to_string()]);
        let mut got = parsed(&multi.clone().with_held(&held));
        assert_eq!(got.take_held(), Some(held));
        assert_eq!(got, parsed(&multi));
    }

    #[test]
    fn held_travels_in_a_perf_marker_whose_facts_still_read() {
        let held = Held { after: b"d/f".to_vec(), files: 7, bytes: 700 };
        let m = crate::PerfMarker {
            timestamp: 1.5,
            stripe_index: 0,
            bytes: 900,
            total_stripes: 1,
            data_path: Some("splice".into()),
        };
        let mut got = parsed(&m.to_reply().with_held(&held));
        assert_eq!(crate::PerfMarker::from_reply(&got), Some(m.clone()), "the held line is skipped");
        assert_eq!(got.take_held(), Some(held));
        assert_eq!(got, parsed(&m.to_reply()));
    }

    #[test]
    fn only_a_well_formed_line_of_a_failure_counts() {
        let held = Held { after: b"f".to_vec(), files: 1, bytes: 2 };
        let mut ok = Reply::multi(226, "Transfer Complete.", [held.line().unwrap()]);
        assert_eq!(ok.take_held(), None, "not from a success");
        for bad in [
            "Held After=6; Files=1; Bytes=2;",
            "Held After=zz; Files=1; Bytes=2;",
            "Held After=; Files=1; Bytes=2;",
            "Held After=66; Files=-1; Bytes=2;",
            "Held After=66; Files=1; Bytes=2",
            "Held After=66; Files=1; Bytes=2; More=3;",
            "Held After=66; Bytes=2; Files=1;",
        ] {
            let mut r = Reply::multi(426, "reset", [bad.to_string()]);
            assert_eq!(r.take_held(), None, "{bad}");
            assert_eq!(r.lines.len(), 3, "a line that does not parse stays: {bad}");
        }
        let long = Held { after: vec![b'x'; MAX_VRET_AFTER + 1], files: 1, bytes: 1 };
        assert_eq!(Reply::new(426, "x").with_held(&long), Reply::new(426, "x"), "too long to travel");
        let edge = Held { after: vec![b'x'; MAX_VRET_AFTER], ..long };
        let r = Reply::new(426, "x").with_held(&edge);
        assert!(r.encode().len() < crate::line::MAX_LINE + 20);
        assert_eq!(parsed(&r).take_held(), Some(edge));
    }

    #[test]
    fn hex_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(unhex(&hex(&all)), Some(all));
        assert_eq!(unhex("0"), None);
        assert_eq!(unhex("+1"), None);
        assert_eq!(unhex("é1"), None);
    }
}

//! Files and directories a tree's sender could not read (permission
//! denied), said in the final reply of a virtual file (docs/manifest.md).
//! The walk leaves them out of the manifest and goes on, as `cp -r` goes
//! on past a file it cannot open; the reply names them, so that the client
//! reports each as failed:
//!
//! ```text
//! 226-Transfer Complete: 4999 files.
//!  1 file(s) or directories could not be read.
//!  Unreadable 7375622f736563726574: cannot open: Permission denied (os error 13)
//! 226 End.
//! ```
//!
//! Paths travel in hex (any byte may be in a name). The count covers all
//! of them; at most [`MAX_NAMED`] are named.

use crate::held::{hex, unhex};
use crate::Reply;

/// How many unreadable entries a reply names; the count says the rest.
pub const MAX_NAMED: usize = 100;

/// The longest path named: its hex and the reason fit in a control line.
const MAX_NAMED_PATH: usize = 3000;

/// The longest reason kept, in characters.
const MAX_WHY: usize = 200;

const PREFIX: &str = "Unreadable ";
const COUNT: &str = "file(s) or directories could not be read.";

/// One entry a walk could not read: its manifest path, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The manifest path (relative to the tree).
    pub path: Vec<u8>,
    /// Why, e.g. `cannot open: Permission denied (os error 13)`.
    pub why: String,
}

/// What a walk could not read: how many, and the first [`MAX_NAMED`] of
/// them by name (paths over 3000 bytes are counted, not named).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unreadables {
    /// Entries left out, named or not.
    pub count: u64,
    /// The first of them.
    pub named: Vec<Unreadable>,
}

impl Unreadables {
    /// Count `path`, naming it while there is room.
    pub fn add(&mut self, path: &[u8], why: &str) {
        self.count += 1;
        if self.named.len() < MAX_NAMED && !path.is_empty() && path.len() <= MAX_NAMED_PATH {
            let why = why.chars().take(MAX_WHY).map(|c| if c.is_control() { '?' } else { c }).collect();
            self.named.push(Unreadable { path: path.to_vec(), why });
        }
    }

    /// Add what `other` counts and names (the sender's entries and the
    /// receiver's of one tree).
    pub fn merge(&mut self, other: Unreadables) {
        let room = MAX_NAMED.saturating_sub(self.named.len());
        self.count += other.count;
        self.named.extend(other.named.into_iter().take(room));
    }

    /// Nothing was left out.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn lines(&self) -> Vec<String> {
        let named = self.named.iter().map(|u| format!("{PREFIX}{}: {}", hex(&u.path), u.why));
        std::iter::once(format!("{} {COUNT}", self.count)).chain(named).collect()
    }

    fn parse_named(line: &str) -> Option<Unreadable> {
        let (path, why) = line.trim_start().strip_prefix(PREFIX)?.split_once(": ")?;
        let path = unhex(path).filter(|p| !p.is_empty())?;
        Some(Unreadable { path, why: why.to_string() })
    }
}

impl Reply {
    /// This (final, `226`) reply of a tree saying also what its walk could
    /// not read; none: the reply as it is.
    pub fn with_unreadable(self, u: &Unreadables) -> Reply {
        if u.is_empty() {
            return self;
        }
        self.with_lines(u.lines())
    }

    /// What a [`Reply::with_unreadable`] says (empty: nothing, or a reply
    /// that is not a `226`). A count below the names given counts those.
    pub fn unreadable(&self) -> Unreadables {
        if self.code != 226 || self.lines.len() < 3 {
            return Unreadables::default();
        }
        let body = &self.lines[1..self.lines.len() - 1];
        let count = |l: &String| l.trim().strip_suffix(COUNT)?.trim_end().parse::<u64>().ok();
        let named: Vec<Unreadable> = body.iter().filter_map(|l| Unreadables::parse_named(l)).collect();
        let count = body.iter().find_map(count).unwrap_or(0).max(named.len() as u64);
        Unreadables { count, named }
    }
}

/// A tree's failure (`450`) saying which file changed while being read:
///
/// ```text
/// 450-/data/tree: logs/run.log changed while being read
///  Changed 6c6f67732f72756e2e6c6f67
/// 450 End.
/// ```
///
/// The client tries the tree again, and leaves out of the try after that
/// a file that changed twice (`OPTS VRET Skip=`, docs/manifest.md).
const CHANGED: &str = "Changed ";

impl Reply {
    /// This failure naming the file (manifest path) that changed while
    /// being read, on a line of its own, in hex.
    pub fn with_changed(self, path: &[u8]) -> Reply {
        self.with_lines(vec![format!("{CHANGED}{}", hex(path))])
    }

    /// What a [`Reply::with_changed`] says, its line taken out (the rest is
    /// the reply a user is shown). Only from a `450`, and only the first
    /// such line; one that does not parse stays.
    pub fn take_changed(&mut self) -> Option<Vec<u8>> {
        if self.code != 450 {
            return None;
        }
        self.take_line(CHANGED, |l| unhex(l.trim_start().strip_prefix(CHANGED)?).filter(|p| !p.is_empty()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::through_the_wire as parsed;

    #[test]
    fn unreadable_entries_travel_in_a_tree_reply() {
        let mut u = Unreadables::default();
        u.add(b"sub/secret", "cannot open: Permission denied (os error 13)");
        u.add(b"a\nb\xff: c", "cannot list: Permission denied (os error 13)");
        let r = Reply::tree_complete(Some(4999), 0).with_unreadable(&u);
        let wire = String::from_utf8(r.encode()).unwrap();
        assert_eq!(
            wire,
            "226-Transfer Complete: 4999 files.\r\n 2 file(s) or directories could not be read.\r\n \
             Unreadable 7375622f736563726574: cannot open: Permission denied (os error 13)\r\n \
             Unreadable 610a62ff3a2063: cannot list: Permission denied (os error 13)\r\n226 End.\r\n"
        );
        let got = parsed(&r);
        assert_eq!(got.unreadable(), u);
        assert_eq!(got.files_completed(), Some(4999), "older clients still read the count");
    }

    #[test]
    fn beside_special_files_and_none_at_all() {
        let mut u = Unreadables::default();
        u.add(b"x", "cannot open: denied");
        let got = parsed(&Reply::tree_complete(Some(5), 2).with_unreadable(&u));
        assert_eq!((got.special_files_skipped(), got.unreadable()), (2, u));
        assert_eq!(
            Reply::tree_complete(Some(5), 0).with_unreadable(&Unreadables::default()),
            Reply::tree_complete(Some(5), 0)
        );
        assert!(parsed(&Reply::tree_complete(Some(5), 2)).unreadable().is_empty());
    }

    #[test]
    fn only_the_first_are_named_and_long_paths_are_counted() {
        let mut u = Unreadables::default();
        u.add(&vec![b'x'; MAX_NAMED_PATH + 1], "too long to name");
        for i in 0..MAX_NAMED + 5 {
            u.add(format!("f{i}").as_bytes(), &"why ".repeat(100));
        }
        assert_eq!((u.count, u.named.len()), (MAX_NAMED as u64 + 6, MAX_NAMED));
        assert_eq!(u.named[0].path, b"f0");
        assert_eq!(u.named[0].why.chars().count(), MAX_WHY);
        assert_eq!(parsed(&Reply::tree_complete(Some(1), 0).with_unreadable(&u)).unreadable(), u);
        let mut edge = Unreadables::default();
        edge.add(&vec![0xff; MAX_NAMED_PATH], &"w".repeat(MAX_WHY));
        let r = Reply::tree_complete(Some(1), 0).with_unreadable(&edge);
        assert!(r.encode().split(|&b| b == b'\n').all(|l| l.len() <= crate::line::MAX_LINE));
        assert_eq!(parsed(&r).unreadable(), edge);
    }

    #[test]
    fn only_a_226_and_well_formed_lines_count() {
        let body = |l: &str| vec!["1 file(s) or directories could not be read.".to_string(), l.to_string()];
        assert!(Reply::multi(451, "failed", body("Unreadable 66: x")).unreadable().is_empty());
        for bad in ["Unreadable 6: x", "Unreadable zz: x", "Unreadable : x", "Unreadable 66 x", "Readable 66: x"] {
            let got = Reply::multi(226, "Transfer Complete: 1 files.", body(bad)).unreadable();
            assert_eq!((got.count, got.named.len()), (1, 0), "{bad}");
        }
    }

    #[test]
    fn the_file_that_changed_travels_in_a_450() {
        let name = b"logs/r\xffn.log";
        let mut r = parsed(&Reply::new(450, "/t: logs/r?n.log changed while being read").with_changed(name));
        assert_eq!(r.take_changed().as_deref(), Some(&name[..]));
        assert_eq!(r.lines, vec!["/t: logs/r?n.log changed while being read".to_string()], "back to one line");
        assert_eq!(r.take_changed(), None);
        // Only a 450 says it; a line that does not parse stays.
        let mut other = parsed(&Reply::new(451, "x").with_changed(name));
        assert_eq!(other.take_changed(), None);
        let mut bad = parsed(&Reply::multi(450, "x", vec!["Changed zz".into()]));
        assert_eq!(bad.take_changed(), None);
        assert_eq!(bad.lines.len(), 3);
    }
}

//! A download kept across runs (`cp --partial`): a file whose retries were
//! spent, or whose copy was interrupted (Ctrl-C, SIGTERM), is kept under
//! the hidden name `.NAME.lightpath-partial` next to its destination
//! ([`crate::local::kept_name`]) instead of vanishing, with a note in an
//! extended attribute: the source, its size and the bytes held. The next
//! `cp --partial` of the same source to the same place takes it up, and
//! the file resumes as a retry within one run does: the kept bytes are
//! compared with the server's file first ([`crate::retry::check_kept`]),
//! then only the rest is fetched. A note of another source or size, or
//! one that does not parse, starts the file over (the kept file goes).
//! An upload's counterpart, where the server keeps the bytes and this end
//! notes the ranges, is [`upload`]; a tree download's, where the complete
//! files stay and this end notes how far they go, is [`tree`].
//!
//! The note is plain text, every line `key value`:
//!
//! ```text
//! lightpath-partial 1
//! size 1073741824
//! have 0-536870912
//! source ftp://host:2811/data/big
//! ```

/// Whether notes of uploads and trees can be kept: there is a state
/// directory (`$XDG_STATE_HOME` or `$HOME` is set). Without one,
/// `cp --partial` would keep none of them, and say nothing.
pub fn notes_possible() -> bool {
    upload::notes_dir("uploads").is_some()
}

pub(crate) mod tree;
pub(crate) mod upload;

use crate::local::{kept_name, OpenTarget};
use crate::plan::describe;
use crate::retry::Task;
use crate::Location;
use lightpath_proto::ranges::RangeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const VERSION_LINE: &str = "lightpath-partial 1";

/// What a kept file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Note {
    /// The source as [`describe`] names it (no password).
    source: String,
    /// The source's size when the file was kept.
    size: u64,
    /// The bytes held: `[start, end)`.
    have: (u64, u64),
}

impl Note {
    fn encode(&self) -> Vec<u8> {
        let (s, e) = self.have;
        format!("{VERSION_LINE}\nsize {}\nhave {s}-{e}\nsource {}\n", self.size, self.source).into_bytes()
    }

    /// Parse a note read from the disk (any bytes: refused with the reason
    /// unless it is well formed and its range lies within its size).
    fn parse(raw: &[u8]) -> Result<Note, String> {
        let mut f = Fields::open(raw, VERSION_LINE)?;
        let num = |v: &str| v.parse::<u64>().map_err(|_| format!("bad number {v:?}"));
        let size = num(f.field("size")?)?;
        let (s, e) = f.field("have")?.split_once('-').ok_or("bad range")?;
        let have = (num(s)?, num(e)?);
        let source = f.field("source")?.to_string();
        f.end()?;
        if have.0 >= have.1 || have.1 > size {
            return Err(format!("range {}-{} not within {size} bytes", have.0, have.1));
        }
        Ok(Note { source, size, have })
    }
}

/// A note read back (a kept download's, or an upload's: [`upload`]): a
/// version line, then `key value` lines in a fixed order, then nothing.
/// Any bytes are refused with the reason unless they are so.
struct Fields<'a>(std::str::Split<'a, char>);

impl<'a> Fields<'a> {
    fn open(raw: &'a [u8], version: &str) -> Result<Fields<'a>, String> {
        let text = std::str::from_utf8(raw).map_err(|_| "not UTF-8".to_string())?;
        let mut lines = text.strip_suffix('\n').ok_or("unterminated")?.split('\n');
        if lines.next() != Some(version) {
            return Err(format!("not a {version} note"));
        }
        Ok(Fields(lines))
    }

    /// The value of the next line, which must be `key`'s.
    fn field(&mut self, key: &str) -> Result<&'a str, String> {
        let line = self.0.next().ok_or(format!("no {key}"))?;
        line.strip_prefix(key).and_then(|v| v.strip_prefix(' ')).ok_or(format!("{key} expected"))
    }

    /// No line after the last field.
    fn end(mut self) -> Result<(), String> {
        self.0.next().map_or(Ok(()), |_| Err("trailing lines".into()))
    }
}

/// Tests of both notes: each of `bad` is refused by `parse`, and so are
/// bytes that are not UTF-8.
#[cfg(test)]
fn assert_refused<T: std::fmt::Debug>(parse: impl Fn(&[u8]) -> Result<T, String>, bad: &[String]) {
    for b in bad {
        assert!(parse(b.as_bytes()).is_err(), "{b:?} accepted");
    }
    assert!(parse(&[0xff, b'\n']).is_err());
}

/// Where and whether files are kept across runs: the destination root of
/// a copy to local files (downloads), and `cp --partial` (both ways).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keeping<'a> {
    pub root: Option<&'a Path>,
    pub on: bool,
}

/// A file is done with. What a download that `failed` holds is kept for
/// a later run with `cp --partial`, or dropped. A download that arrived
/// whole removes a file an earlier run kept for it (it is of no use now,
/// and would hold its space for ever), `--partial` or not.
pub(crate) fn end(task: &Task, failed: bool, k: Keeping<'_>) {
    upload::end(task, failed, k.on);
    match place(task, k.root) {
        Some(dst) if failed && k.on => keep(task, dst),
        Some(dst) if !failed => remove_stale(dst),
        _ => {}
    }
    task.resume.clear();
}

/// With `cp --partial`, a download into the destination root (the file
/// itself, or one directly in it: no directory beneath it is opened by
/// a path) takes up the file an earlier run kept for it, and an upload
/// the ranges an earlier run noted ([`upload::take_up`]).
pub(crate) fn take_up(task: &Task, k: Keeping<'_>) {
    if !k.on {
        return;
    }
    upload::take_up(task);
    if let Some(dst) = place(task, k.root).filter(|_| task.resume.have().is_none()) {
        adopt(task, dst);
    }
}

/// Remove the file kept for `dst` by an earlier run, if there is one of
/// ours (a regular file of this user's with a note; anything else under
/// that name is left alone).
fn remove_stale(dst: &Path) {
    if let Ok(Some((kept, _))) = OpenTarget::adopt(dst) {
        drop(kept); // an adopted file not committed is removed
        tracing::info!("{}: removed the partial file an earlier run kept for it", dst.display());
    }
}

/// Where `task` keeps and takes up a file for `cp --partial` into `root`:
/// a download's destination, if it is `root` or directly in it.
fn place<'a>(task: &'a Task, root: Option<&Path>) -> Option<&'a Path> {
    let (Location::Remote(_), Location::Local(dst), Some(r)) = (&task.item.src, &task.item.dst, root) else {
        return None;
    };
    (dst == r || dst.parent() == Some(r)).then_some(dst.as_path())
}

/// Whether an earlier run kept a file for the download of `remote` to
/// `dst` (the path itself, or the directory it names): the download
/// then sends no RETR with the login, since its `REST` goes first.
pub(crate) fn kept_for(dst: &Path, remote: &[u8]) -> bool {
    let name = OsStr::from_bytes(remote.rsplit(|&b| b == b'/').next().unwrap_or(remote));
    [dst.to_path_buf(), dst.join(name)].iter().any(|p| kept_name(p).is_ok_and(|k| k.exists()))
}

/// Keep what `task` (a download that failed for good) holds for a later
/// `cp --partial`, and say where. Nothing held: nothing kept.
fn keep(task: &Task, dst: &Path) {
    let Some(k) = task.resume.take() else { return };
    let Some(&have) = k.have.ranges().first() else { return };
    let note = Note { source: describe(&task.item.src), size: task.item.size, have };
    match k.target.keep_as(&note.encode()) {
        Ok(kept) => say!(
            "lightpath: kept {} bytes of {} as {} (the same cp --partial resumes it)",
            have.1 - have.0,
            dst.display(),
            kept.display()
        ),
        Err(e) => tracing::warn!("{}: the partial file cannot be kept: {e}", dst.display()),
    }
}

/// Take up the file kept for `dst` by an earlier run into `task`'s resume
/// slot, when its note names the same source and size; one that does not
/// is removed (the copy replaces it anyway). Returns whether one was taken.
fn adopt(task: &Task, dst: &Path) -> bool {
    let (target, raw) = match OpenTarget::adopt(dst) {
        Ok(Some(found)) => found,
        Ok(None) => return false,
        Err(e) => {
            tracing::warn!("{e}; not resumed");
            return false;
        }
    };
    let source = describe(&task.item.src);
    let why = match Note::parse(&raw) {
        Ok(n) if n.source == source && n.size == task.item.size => {
            tracing::info!("{}: taking up {} bytes kept by an earlier run", dst.display(), n.have.1 - n.have.0);
            let mut have = RangeSet::new();
            have.insert(n.have.0, n.have.1);
            task.resume.keep(target, have);
            return true;
        }
        Ok(n) if n.source != source => format!("it was kept from {}", n.source),
        Ok(n) => format!("the source had {} bytes then, {} now", n.size, task.item.size),
        Err(e) => format!("its note is unreadable ({e})"),
    };
    tracing::warn!("{}: not resuming the file kept for it: {why}; starting over", dst.display());
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note() -> Note {
        Note { source: "ftp://h:2811/a b".into(), size: 1000, have: (0, 600) }
    }

    #[test]
    fn a_note_reads_back_as_written() {
        let n = note();
        assert_eq!(Note::parse(&n.encode()), Ok(n));
    }

    #[test]
    fn bad_notes_are_refused_with_a_reason() {
        let good = String::from_utf8(note().encode()).unwrap();
        let bad = [
            good.replace("partial 1", "partial 2"),
            good.replace("have 0-600", "have 600-600"),
            good.replace("have 0-600", "have 0-1001"),
            good.replace("have 0-600", "have 0600"),
            good.replace("size 1000", "size -1"),
            good.replace("size 1000", "size 99999999999999999999999"),
            good.replace("size", "sise"),
            good.trim_end().to_string(),
            format!("{good}extra\n"),
            good.lines().take(2).map(|l| format!("{l}\n")).collect(),
            String::new(),
        ];
        assert_refused(Note::parse, &bad);
    }
}

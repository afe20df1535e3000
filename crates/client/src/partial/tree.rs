//! A tree copy kept across runs (`cp -r --partial`). A tree that fails
//! for good or is interrupted leaves its complete files under their names
//! (each file appears only once whole); with `--partial` the client notes
//! where the longest run of them from the walk's first ends
//! ([`crate::vfile::TreeHeld`]): what it holds itself (a download), or
//! what the receiving server's failure reply said it holds (an upload;
//! Ctrl-C reads that reply before it stops). The next `cp -r --partial` of
//! the same tree to the same place computes the check of those files at
//! its local end ([`lightpath_engine::vfile::held_check`]: path, size,
//! mtime and mode of each), the destination's for a download, the source's for an
//! upload, and sends it with where the run ends:
//! - a download asks the server to leave them out (`OPTS VRET
//!   After=<hex>;Check=<16 hex>;`), and the server compares the check of
//!   its own files as its walk reaches them;
//! - an upload leaves them out itself, once the server took `OPTS VSTO
//!   After=<hex>;Check=<16 hex>;`, and the server compares the check of the
//!   files it holds before its `VSTO` starts.
//!
//! A tree changed on either side since (a file edited, added, removed)
//! gets 554, and it goes whole at once, not counted as a retry.
//!
//! One note per source and destination, in the user's state directory
//! beside the uploads' ([`super::upload`]):
//!
//! ```text
//! lightpath-tree 1
//! after 7375622f66
//! files 30
//! bytes 3145728
//! source ftp://host:2811/data/tree
//! target /home/me/tree
//! ```
//!
//! (An upload's source is the local directory, its target the URL.) A
//! note with an empty `after` (and no files) holds nothing: it says where
//! a run began the tree, so that the same command copies it there again,
//! not beneath it as `cp -r` copies into an existing directory. Every
//! `--partial` tree run writes one as it starts ([`Keeper::begin`]).

use super::upload::{note_path, notes_dir, write_note};
use super::Fields;
use crate::plan::describe;
use crate::vfile::TreeHeld;
use crate::Location;
use lightpath_proto::held::{hex, unhex};
use std::path::{Path, PathBuf};

const VERSION_LINE: &str = "lightpath-tree 1";
const KIND: &str = "trees";

/// A note's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Note {
    /// The manifest path of the last file held.
    after: Vec<u8>,
    /// Files held, and their bytes.
    files: u64,
    bytes: u64,
    /// The source: a download's URL without its password, an upload's
    /// local directory (absolute where it could be made so).
    source: String,
    /// The target: a download's local directory, an upload's URL.
    target: String,
}

impl Note {
    fn encode(&self) -> Vec<u8> {
        let (after, files, bytes) = (hex(&self.after), self.files, self.bytes);
        let (source, target) = (&self.source, &self.target);
        format!("{VERSION_LINE}\nafter {after}\nfiles {files}\nbytes {bytes}\nsource {source}\ntarget {target}\n")
            .into_bytes()
    }

    /// The note's bytes, if they read back as this note (`None`: a line
    /// break in its source or target; such a note would promise a resume
    /// the next run cannot make).
    fn encoded(&self) -> Option<Vec<u8>> {
        let bytes = self.encode();
        (Note::parse(&bytes).as_ref() == Ok(self)).then_some(bytes)
    }

    /// Parse a note read from the disk: refused with the reason unless it
    /// is well formed.
    fn parse(raw: &[u8]) -> Result<Note, String> {
        let mut f = Fields::open(raw, VERSION_LINE)?;
        let after = unhex(f.field("after")?).ok_or("bad path")?;
        let num = |v: &str| v.parse::<u64>().map_err(|_| format!("bad number {v:?}"));
        let (files, bytes) = (num(f.field("files")?)?, num(f.field("bytes")?)?);
        if after.is_empty() && (files, bytes) != (0, 0) {
            return Err("files held after no path".into());
        }
        let (source, target) = (f.field("source")?.to_string(), f.field("target")?.to_string());
        f.end()?;
        Ok(Note { after, files, bytes, source, target })
    }
}

/// The note's path for the tree download or upload `src` to `target`, if
/// it is one, and an empty note naming both (the local end absolute where
/// it can be).
fn path_of(src: &Location, target: &Location) -> Option<(PathBuf, Note)> {
    let local = |dir: &PathBuf| std::path::absolute(dir).unwrap_or_else(|_| dir.clone()).to_string_lossy().into_owned();
    let (source, target) = match (src, target) {
        (Location::Remote(_), Location::Local(dir)) => (describe(src), local(dir)),
        (Location::Local(dir), Location::Remote(_)) => (local(dir), describe(target)),
        _ => return None,
    };
    let path = note_path(&notes_dir(KIND)?, &source, &target);
    Some((path, Note { after: Vec::new(), files: 0, bytes: 0, source, target }))
}

/// Whether an earlier run noted a tree copy of `src` to `target`: its
/// `VRET` or `VSTO` then does not go with the login, since the check goes
/// first.
pub(crate) fn noted(src: &Location, target: &Location) -> bool {
    path_of(src, target).is_some_and(|(p, _)| p.exists())
}

/// With `cp -r --partial`, before a tree copy's first try: take up what
/// an earlier run noted for it, with the check of the files held computed
/// at this end: a download's in `root` (`Some`: the copy's destination
/// directory, beneath which `target` is opened without following
/// symlinks), an upload's in its source. Nothing usable gives an empty
/// [`TreeHeld`], and an unusable note is removed; a usable one stays until
/// the run ends ([`end`]), so that a run killed before then (no `end`)
/// leaves it for the next: the files it names stay held, since a resumed
/// run does not touch them.
pub(crate) async fn take_up(src: &Location, target: &Location, root: Option<&Path>) -> TreeHeld {
    let Some((path, want)) = path_of(src, target) else { return TreeHeld::default() };
    let Ok(raw) = std::fs::read(&path) else { return TreeHeld::default() };
    let note = match Note::parse(&raw) {
        Ok(n) if (&n.source, &n.target) != (&want.source, &want.target) => return TreeHeld::default(),
        Ok(n) => n,
        Err(e) => {
            tracing::warn!("{}: not resuming the tree an earlier run left: its note is unreadable ({e})", want.source);
            let _ = std::fs::remove_file(&path);
            return TreeHeld::default();
        }
    };
    if note.after.is_empty() {
        tracing::info!("{}: an earlier run began the tree there; nothing of it held", want.source);
        return TreeHeld::default();
    }
    let checked = match (src, root) {
        (Location::Local(dir), _) => check_source(dir, &note.after).await,
        (_, Some(root)) => check_held(target, root, &note.after).await,
        (_, None) => Err("no local tree".into()),
    };
    match checked {
        Ok(check) => {
            let (f, b) = (note.files, note.bytes);
            tracing::info!("{}: resuming the tree an earlier run left ({f} files, {b} bytes held)", want.source);
            TreeHeld {
                after: Some(note.after),
                files: f,
                bytes: b,
                check: Some(check),
                noted: true,
                ..TreeHeld::default()
            }
        }
        Err(e) => {
            tracing::warn!("{}: not resuming the tree an earlier run left: {e}; it goes whole", want.source);
            let _ = std::fs::remove_file(&path);
            TreeHeld::default()
        }
    }
}

/// The check of the files the local tree `target` (beneath `root`) holds
/// up to `after`, computed on a blocking thread. A tree resumed from a
/// note sends it with every try: a later try's `after` is further on.
pub(crate) async fn check_held(target: &Location, root: &Path, after: &[u8]) -> Result<u64, String> {
    let Location::Local(dir) = target else { return Err("not a local tree".into()) };
    let (root, dir) = (root.to_path_buf(), dir.clone());
    let open = move || crate::local::tree_root(&root, &dir).map_err(|e| e.to_string());
    check_in(open, lightpath_engine::vfile::held_check, after).await
}

/// The check of the files the local tree `dir` holds up to `after`, as
/// an upload's sender computes it over its source ([`check_held`];
/// what it may not read left out: [`lightpath_engine::vfile::source_check`]).
pub(crate) async fn check_source(dir: &Path, after: &[u8]) -> Result<u64, String> {
    let dir = dir.to_path_buf();
    let open = move || lightpath_sys::root::Root::open(&dir).map_err(|e| e.to_string());
    check_in(open, lightpath_engine::vfile::source_check, after).await
}

/// `check` (a receiver's or a source's) of the tree `open` opens, on a
/// blocking thread (it walks the tree).
async fn check_in(
    open: impl FnOnce() -> Result<lightpath_sys::root::Root, String> + Send + 'static,
    check: fn(&lightpath_sys::root::Root, &[u8]) -> Result<u64, lightpath_engine::vfile::VfileError>,
    after: &[u8],
) -> Result<u64, String> {
    let after = after.to_vec();
    let job = tokio::task::spawn_blocking(move || check(&open()?, &after).map_err(|e| e.to_string()));
    job.await.map_err(|e| e.to_string()).and_then(|c| c)
}

/// Keeps a tree copy's note current while it runs (`--partial`): an
/// upload's as the receiving server's perf markers say what it holds, a
/// download's as its own unpacker does (every second). A run killed
/// before its end (SIGKILL, a crash, a network gone with the control
/// connection) leaves the note for the next. [`end`] has the last word
/// when the run ends.
#[derive(Debug)]
pub(crate) struct Keeper {
    path: PathBuf,
    note: Note,
    /// A write failed and was told (once: the next are tried quietly).
    told: bool,
}

impl Keeper {
    /// The keeper of `src`'s note to `target`, if it has one that can be
    /// written (no line break in their names).
    pub(crate) fn new(src: &Location, target: &Location) -> Option<Keeper> {
        let (path, note) = path_of(src, target)?;
        Note { after: b"x".to_vec(), ..note.clone() }.encoded()?;
        Some(Keeper { path, note, told: false })
    }

    /// As the run starts: a note that holds nothing, where none is, so
    /// that a run killed before any file is complete leaves the next one
    /// its target (see the module's doc).
    pub(crate) fn begin(&mut self) {
        if !self.path.exists() {
            self.write(b"", 0, 0);
        }
    }

    /// Note that the target holds `held` (what earlier tries and runs
    /// left, and this try's so far), if it holds more than last noted.
    pub(crate) fn keep(&mut self, held: &TreeHeld) {
        let Some(after) = held.after.as_deref().filter(|a| *a != self.note.after) else { return };
        if self.write(after, held.files, held.bytes) {
            tracing::debug!("{}: noted {} files held so far", self.note.source, held.files);
            self.note.after = after.to_vec();
        }
    }

    /// Write the note with `after`, `files` and `bytes`; a failure is
    /// warned about once (the next are tried quietly).
    fn write(&mut self, after: &[u8], files: u64, bytes: u64) -> bool {
        let note = Note { after: after.to_vec(), files, bytes, ..self.note.clone() };
        let Err(e) = write_note(&self.path, &note.encode()) else { return true };
        if std::mem::replace(&mut self.told, true) {
            tracing::debug!("{}: the tree's note cannot be written: {e}", self.path.display());
        } else {
            tracing::warn!("{}: the tree's note cannot be written: {e}", self.path.display());
        }
        false
    }
}

/// A tree copy is done with: one that `failed` (for good, or
/// interrupted) with `--partial` (`keep`) notes what it holds (without,
/// it says what is complete, and how to keep a note next time); one that
/// succeeded removes a note an earlier run left for it.
pub(crate) fn end(src: &Location, target: &Location, held: &TreeHeld, failed: bool, keep: bool) {
    let Some((path, mut note)) = path_of(src, target) else { return };
    if !failed {
        if std::fs::remove_file(&path).is_ok() {
            tracing::info!("{}: the tree is complete; its note removed", note.source);
        }
        return;
    }
    let Some(after) = held.after.clone() else {
        // Nothing held (a tree that went whole after a 554, or broke
        // before its first file was complete): with `--partial` the note
        // says only where the tree goes; without, an earlier run's note no
        // longer says anything true.
        let begun = keep.then(|| note.encoded()).flatten();
        if begun.is_none_or(|b| write_note(&path, &b).is_err()) {
            let _ = std::fs::remove_file(&path);
        }
        return;
    };
    if !keep {
        let (f, b, t) = (held.files, held.bytes, &note.target);
        // Where depends on the command (a directory the first run made
        // is copied into, beneath it, as cp -r does; a named one merged
        // into): said as "beneath it" always, it was wrong for the second.
        let again = match target {
            Location::Local(_) => "copies the whole tree again",
            Location::Remote(_) => "sends the whole tree again",
        };
        say!("lightpath: {f} files of the tree ({b} bytes) are complete in {t} (kept, not noted: a run with --partial notes what it leaves, and the same command then sends only the rest; without, the same command {again})");
        return;
    }
    (note.after, note.files, note.bytes) = (after, held.files, held.bytes);
    let Some(bytes) = note.encoded() else {
        let (f, b, t) = (note.files, note.bytes, &note.target);
        say!("lightpath: {f} files of the tree ({b} bytes) are complete in {t}; not noted for --partial: a line break in its source or target cannot be");
        return;
    };
    match write_note(&path, &bytes) {
        Ok(()) => say!(
            "lightpath: {} files of the tree ({} bytes) are complete in {}; noted: the same cp -r --partial sends only the rest",
            note.files, note.bytes, note.target
        ),
        Err(e) => tracing::warn!("{}: the tree's note cannot be written: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note() -> Note {
        let (source, target) = ("ftp://h:2811/data/a b".into(), "/home/me/a b".into());
        Note { after: b"sub/\n\xff f".to_vec(), files: 30, bytes: 3 << 20, source, target }
    }

    #[test]
    fn a_note_reads_back_as_written() {
        let n = note();
        assert_eq!(Note::parse(&n.encode()), Ok(n.clone()));
        let begun = Note { after: Vec::new(), files: 0, bytes: 0, ..n };
        assert_eq!(Note::parse(&begun.encode()), Ok(begun), "a note that holds nothing");
    }

    /// A path with a line break does not read back: `end` does not write
    /// such a note (it would promise a resume the next run cannot make).
    #[test]
    fn a_note_naming_a_path_with_a_line_break_does_not_read_back() {
        for (source, target) in [("/tmp/a\nb", "ftp://h/t"), ("ftp://h/t", "/tmp/a\nb")] {
            let n = Note { source: source.into(), target: target.into(), ..note() };
            assert_ne!(Note::parse(&n.encode()).as_ref(), Ok(&n), "{source} {target}");
        }
    }

    #[test]
    fn bad_notes_are_refused_with_a_reason() {
        let good = String::from_utf8(note().encode()).unwrap();
        let bad = [
            good.replace("tree 1", "tree 2"),
            good.replace("after 737562", "after 73756"),
            good.replace("after 737562", "after zz7562"),
            good.replace("after 7375622f0aff2066", "after "),
            good.replace("files 30", "files -1"),
            good.replace("bytes 3145728", "bytes x"),
            good.replace("target", "targe"),
            good.trim_end().to_string(),
            format!("{good}extra\n"),
            good.lines().take(5).map(|l| format!("{l}\n")).collect(),
            String::new(),
        ];
        for b in &bad[..4] {
            assert_ne!(b, &good, "the test's replacement did not apply");
        }
        super::super::assert_refused(Note::parse, &bad);
    }
}

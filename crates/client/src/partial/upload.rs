//! An upload kept across runs (`cp --partial`). A lightpath server keeps
//! what it wrote of an upload whose connection broke (unnamed, for
//! `serve --keep-partial`, 15 minutes by default) and its `111` markers
//! say which ranges. When such an upload fails for good or is interrupted
//! (Ctrl-C, SIGTERM: with `--partial` the client then breaks the
//! connections off rather than sending `ABOR`, which would make the server
//! drop the file), this end writes those ranges down in a note in the
//! user's state directory. The next `cp --partial` of the same, unchanged
//! file (same size, mtime, device, inode and ctime: `mtime` holds the four
//! as fixed-width digits) to the same URL takes the note up and sends
//! `REST` with the ranges, as a retry within one run does; a server that
//! no longer holds them answers 554 and the file goes whole at once, a
//! retry not counted (`retry::again`).
//!
//! One note per source and destination, named by the CRC-32C of both
//! (the note names them in full, and only a note naming both is used):
//!
//! ```text
//! lightpath-upload 1
//! size 2147483648
//! mtime 1764210000123456789
//! have 0-536870912,540016640-541065216
//! source /data/big
//! target ftp://host:2811/big
//! ```

use super::Fields;
use crate::plan::describe;
use crate::resume::Sent;
use crate::retry::Task;
use crate::Location;
use lightpath_proto::ranges::RangeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const VERSION_LINE: &str = "lightpath-upload 1";

/// How long a note nobody took up is kept. A server keeps what it holds of
/// an upload for 15 minutes by default (`serve --keep-partial`), so a note
/// this old is almost surely of no use; without a limit, the notes of
/// uploads never tried again piled up for ever.
const NOTE_LIFE: Duration = Duration::from_secs(30 * 24 * 3600);

/// A note's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Note {
    /// The ranges the server confirmed, and the source's size and mtime.
    sent: Sent,
    /// The local file, as given (absolute where it could be made so).
    source: String,
    /// The destination URL without its password.
    target: String,
}

impl Note {
    fn encode(&self) -> Vec<u8> {
        let (size, mtime) = (&self.sent.source.0, self.sent.source.1.as_deref().unwrap_or("-"));
        let (have, source, target) = (&self.sent.have, &self.source, &self.target);
        format!("{VERSION_LINE}\nsize {size}\nmtime {mtime}\nhave {have}\nsource {source}\ntarget {target}\n")
            .into_bytes()
    }

    /// Parse a note read from the disk: refused with the reason unless it
    /// is well formed and its ranges lie within its size.
    fn parse(raw: &[u8]) -> Result<Note, String> {
        let mut f = Fields::open(raw, VERSION_LINE)?;
        let size = f.field("size")?.parse::<u64>().map_err(|_| "bad size".to_string())?;
        let mtime = Some(f.field("mtime")?.to_string()).filter(|m| m != "-");
        if mtime.as_ref().is_some_and(|m| m.is_empty() || !m.bytes().all(|b| b.is_ascii_digit())) {
            return Err("bad mtime".into());
        }
        let have = RangeSet::parse(f.field("have")?).map_err(|e| format!("bad ranges: {e}"))?;
        let (source, target) = (f.field("source")?.to_string(), f.field("target")?.to_string());
        f.end()?;
        if have.is_empty() || have.end() > size {
            return Err(format!("ranges {have} not within {size} bytes"));
        }
        Ok(Note { sent: Sent { have, source: (size, mtime) }, source, target })
    }
}

/// Where the notes of `kind` live: `$XDG_STATE_HOME/lightpath/<kind>`,
/// else `~/.local/state/lightpath/<kind>`.
pub(super) fn notes_dir(kind: &str) -> Option<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME").filter(|s| !s.is_empty()).map(PathBuf::from).or_else(|| {
        std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| PathBuf::from(h).join(".local/state"))
    })?;
    Some(state.join("lightpath").join(kind))
}

/// The local file of `task`, if it is an upload.
fn local_file(task: &Task) -> Option<&Path> {
    let (Location::Local(src), Location::Remote(_)) = (&task.item.src, &task.item.dst) else { return None };
    Some(src)
}

/// The source and target of `task` as a note names them, if it is an
/// upload of a local file.
fn names(task: &Task) -> Option<(String, String)> {
    let src = local_file(task)?;
    let abs = std::path::absolute(src).unwrap_or_else(|_| src.to_path_buf());
    Some((abs.to_string_lossy().into_owned(), describe(&task.item.dst)))
}

/// The note's path for `source` to `target` in `dir`.
pub(super) fn note_path(dir: &Path, source: &str, target: &str) -> PathBuf {
    let key = crc32c::crc32c(format!("{source}\n{target}").as_bytes());
    dir.join(format!("{key:08x}"))
}

/// With `cp --partial`, before an upload's first try: take up the ranges
/// an earlier run noted for it, if the note names this file and URL and
/// the file is unchanged. The note is used up either way.
pub(crate) fn take_up(task: &Task) {
    let (Some((source, target)), Some(dir)) = (names(task), notes_dir("uploads")) else { return };
    let path = note_path(&dir, &source, &target);
    let Ok(raw) = std::fs::read(&path) else { return };
    // The file itself, not its name as noted (which may be lossy).
    let now = local_file(task).and_then(|p| crate::local::LocalSource::File(p.to_path_buf()).stamp());
    let why = match Note::parse(&raw) {
        Ok(n) if (&n.source, &n.target) != (&source, &target) => return, // another's (same CRC)
        Ok(n) if Some(&n.sent.source) == now.as_ref() => {
            let bytes = n.sent.have.covered();
            tracing::info!("{source}: taking up the {bytes} bytes an earlier run's upload left on the server");
            task.resume.keep_noted(n.sent.have, n.sent.source);
            let _ = std::fs::remove_file(&path);
            return;
        }
        Ok(_) => "the file changed since".to_string(),
        Err(e) => format!("its note is unreadable ({e})"),
    };
    tracing::warn!("{source}: not resuming the upload an earlier run left: {why}; sending it whole");
    let _ = std::fs::remove_file(&path);
}

/// An upload is done with: one that `failed` (for good, or interrupted)
/// with `--partial` (`keep`) notes what the server confirmed of it; one
/// that succeeded removes a note an earlier run left for it.
pub(crate) fn end(task: &Task, failed: bool, keep: bool) {
    let (Some((source, target)), Some(dir)) = (names(task), notes_dir("uploads")) else { return };
    let path = note_path(&dir, &source, &target);
    if failed {
        if let Some(sent) = task.resume.sent_kept().filter(|_| keep) {
            write(&path, &Note { sent, source, target });
        }
    } else if std::fs::remove_file(&path).is_ok() {
        tracing::info!("{source}: removed the note an earlier run left for its upload");
    }
}

/// Write `note` at `path`, and say so. A note that would not read back
/// (a line break in a path) is not written, and the user is told.
fn write(path: &Path, note: &Note) {
    let bytes = note.encode();
    if Note::parse(&bytes).as_ref() != Ok(note) {
        say!(
            "lightpath: {}: the upload cannot be noted for --partial (a line break in its source or URL)",
            note.source
        );
        return;
    }
    if let Some(dir) = path.parent() {
        prune(dir, SystemTime::now());
    }
    match write_note(path, &bytes) {
        Ok(()) => say!(
            "lightpath: the server wrote {} bytes of {} before the copy stopped; noted: the same cp --partial sends only the rest while the server keeps them",
            note.sent.have.covered(),
            note.source
        ),
        Err(e) => tracing::warn!("{}: the upload's note cannot be written: {e}", path.display()),
    }
}

/// Remove the files of `dir` (notes, and temporary names a killed run
/// left) last written more than [`NOTE_LIFE`] before `now`. (Not trees'
/// notes: one decides where the same command resumes its tree, which
/// without it would be copied into the directory its first run made.)
fn prune(dir: &Path, now: SystemTime) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let written = e.metadata().ok().filter(|m| m.is_file()).and_then(|m| m.modified().ok());
        if written.and_then(|t| now.duration_since(t).ok()).is_some_and(|age| age > NOTE_LIFE) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Write a note's `bytes` at `path` through a temporary name: a note is
/// whole or absent.
pub(super) fn write_note(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let r = path.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| {
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, path)
    });
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note() -> Note {
        let mut have = RangeSet::new();
        have.insert(0, 600);
        have.insert(700, 800);
        let sent = Sent { have, source: (1000, Some("1764210000123456789".into())) };
        Note { sent, source: "/data/a b".into(), target: "ftp://h:2811/a b".into() }
    }

    #[test]
    fn a_note_reads_back_as_written() {
        let n = note();
        assert_eq!(Note::parse(&n.encode()), Ok(n.clone()));
        let no_mtime = Note { sent: Sent { source: (1000, None), ..n.sent }, ..n };
        assert_eq!(Note::parse(&no_mtime.encode()), Ok(no_mtime));
    }

    #[test]
    fn bad_notes_are_refused_with_a_reason() {
        let good = String::from_utf8(note().encode()).unwrap();
        let bad = [
            good.replace("upload 1", "upload 2"),
            good.replace("have 0-600,700-800", "have "),
            good.replace("have 0-600,700-800", "have 0-600,700-1001"),
            good.replace("have 0-600", "have 600-0"),
            good.replace("size 1000", "size -1"),
            good.replace("mtime 1764210000123456789", "mtime 17x"),
            good.replace("mtime 1764210000123456789", "mtime "),
            good.replace("target", "targe"),
            good.trim_end().to_string(),
            format!("{good}extra\n"),
            good.lines().take(4).map(|l| format!("{l}\n")).collect(),
            String::new(),
        ];
        super::super::assert_refused(Note::parse, &bad);
    }

    #[test]
    fn notes_unused_for_a_month_are_pruned() {
        let dir = std::env::temp_dir().join(format!("lp-prune-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let now = SystemTime::now();
        for (name, age) in [("old", NOTE_LIFE + Duration::from_secs(60)), ("young", NOTE_LIFE / 2)] {
            let f = std::fs::File::create(dir.join(name)).unwrap();
            f.set_modified(now - age).unwrap();
        }
        prune(&dir, now);
        let mut left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        left.sort();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(left, ["sub", "young"]);
    }

    #[test]
    fn notes_are_named_by_source_and_target() {
        let d = Path::new("/s");
        assert_eq!(note_path(d, "/a", "ftp://h/a"), note_path(d, "/a", "ftp://h/a"));
        assert_ne!(note_path(d, "/a", "ftp://h/a"), note_path(d, "/a", "ftp://h/b"));
        assert_ne!(note_path(d, "/a", "ftp://h/a"), note_path(d, "/b", "ftp://h/a"));
    }
}

//! The manifest of a virtual file (issue 5, "lots of small files").
//!
//! A tree of small files travels as one *virtual file*: its offset space is
//! the concatenation of the regular files' contents, in manifest order, with
//! no gaps. It is sent over the parallel MODE E streams like any file. The
//! *manifest* is a separate ordered byte stream that names what the bytes
//! are: one record per entry (path, kind, mode, mtime, size, offset), so the
//! sender can emit entries while it is still walking the tree and the
//! receiver can create files while blocks are still arriving.
//!
//! The format is documented byte by byte in `docs/manifest.md`:
//!
//! ```text
//! header  "LPVF" | version u8 (=1) | flags u8 (=0) | reserved u16 (=0)          8 bytes
//! entry   0x01 | kind u8 | mode u32 | mtime_ns i64 | size u64 | offset u64
//!              | path_len u16 | link_len u16 | path | link                  34 + lengths
//! end     0x02 | entries u64 | total u64                                       17 bytes
//! ```
//! All integers are big-endian (as in MODE E headers).
//!
//! This module is sans-IO. [`Encoder`] and [`Decoder`] run the same
//! [`Validator`], so a sender cannot produce a manifest that a receiver
//! refuses, and the receiver treats every byte as hostile: bounded lengths
//! and counts, relative paths without `.`, `..`, empty components or NUL,
//! parents declared as directories before their children, no duplicates,
//! contiguous non-overlapping data ranges, hard links only to earlier files.

use std::collections::HashMap;
use std::fmt;

/// First bytes of every manifest.
pub const MAGIC: [u8; 4] = *b"LPVF";
/// The format version this module reads and writes.
pub const VERSION: u8 = 1;
/// Most copies of each manifest chunk a sender may put on the wire (on
/// different streams) when its receiver said it takes them (`OPTS VRET
/// Copies=`, FEAT `LPVF-COPIES`): the receiver keeps the first and drops
/// the rest.
pub const MAX_COPIES: u8 = 2;
/// Length of the stream header.
pub const HEADER_LEN: usize = 8;
/// Fixed part of an entry record, tag included.
pub const ENTRY_FIXED_LEN: usize = 34;
/// Length of the end record, tag included.
pub const END_LEN: usize = 17;
/// Longest path or link target in bytes (Linux `PATH_MAX` minus the NUL).
pub const MAX_PATH: usize = 4095;
/// Longest path component in bytes (Linux `NAME_MAX`).
pub const MAX_NAME: usize = 255;
/// Permission bits an entry may carry (`rwxrwxrwx` plus setuid, setgid, sticky).
pub const MODE_MASK: u32 = 0o7777;
/// Mode bits a receiver applies to what it makes (the entries and the
/// tree's own directory): setuid and setgid are dropped, as ownership is
/// not transferred.
pub const APPLY_MODE: u32 = 0o1777;

const TAG_ENTRY: u8 = 0x01;
const TAG_END: u8 = 0x02;

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A regular file whose `size` bytes are at `offset` in the virtual file.
    File {
        /// Length in bytes.
        size: u64,
        /// Where its bytes start in the virtual file.
        offset: u64,
    },
    /// A directory (declared before anything inside it).
    Dir,
    /// A symbolic link; the target is stored as is and never followed.
    Symlink {
        /// The link's contents.
        target: Vec<u8>,
    },
    /// Another name for an earlier [`Kind::File`] entry.
    HardLink {
        /// Path of that earlier file.
        target: Vec<u8>,
    },
}

impl Kind {
    fn code(&self) -> u8 {
        match self {
            Kind::File { .. } => 1,
            Kind::Dir => 2,
            Kind::Symlink { .. } => 3,
            Kind::HardLink { .. } => 4,
        }
    }
}

/// One manifest entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    /// Relative path, components separated by `/`; any bytes but `/` and NUL.
    pub path: Vec<u8>,
    /// What it is.
    pub kind: Kind,
    /// Permission bits (`& MODE_MASK`).
    pub mode: u32,
    /// Modification time, nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
}

/// Totals carried by the end record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    /// Number of entries.
    pub entries: u64,
    /// Length of the virtual file (sum of the file sizes).
    pub total: u64,
}

/// Bounds on what a peer may make us remember.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most entries in one manifest.
    pub max_entries: u64,
    /// Most path and link-target bytes, summed over all entries.
    pub max_path_bytes: u64,
    /// Longest virtual file.
    pub max_total: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_entries: 1 << 22, max_path_bytes: 256 << 20, max_total: 1 << 62 }
    }
}

/// What is wrong with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathProblem {
    /// No bytes at all.
    Empty,
    /// Starts with `/`.
    Absolute,
    /// `a//b` or a trailing `/`.
    EmptyComponent,
    /// A `.` or `..` component.
    DotComponent,
    /// A NUL byte.
    Nul,
    /// Longer than [`MAX_PATH`].
    TooLong,
    /// A component longer than [`MAX_NAME`].
    NameTooLong,
}

impl fmt::Display for PathProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathProblem::Empty => "empty path",
            PathProblem::Absolute => "absolute path",
            PathProblem::EmptyComponent => "empty path component",
            PathProblem::DotComponent => "`.` or `..` component",
            PathProblem::Nul => "NUL byte in path",
            PathProblem::TooLong => "path longer than 4095 bytes",
            PathProblem::NameTooLong => "name longer than 255 bytes",
        })
    }
}

/// Why a manifest was refused. Paths are shown with non-printable bytes escaped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// The stream does not start with `LPVF`.
    #[error("not a lightpath manifest (bad magic)")]
    BadMagic,
    /// A version we do not read.
    #[error("unsupported manifest version {0} (this build reads version {VERSION})")]
    UnsupportedVersion(u8),
    /// Header flags or reserved bytes set.
    #[error("unsupported manifest flags 0x{0:06x}")]
    BadFlags(u32),
    /// A record tag we do not know.
    #[error("unknown manifest record 0x{0:02x}")]
    UnknownRecord(u8),
    /// An entry kind we do not know.
    #[error("unknown entry kind {kind} for {path}")]
    UnknownKind {
        /// The entry.
        path: String,
        /// The kind byte.
        kind: u8,
    },
    /// A path (or hard-link target) that may not be used.
    #[error("bad path {path}: {problem}")]
    BadPath {
        /// The path.
        path: String,
        /// What is wrong.
        problem: PathProblem,
    },
    /// Mode bits outside [`MODE_MASK`].
    #[error("bad mode {mode:o} for {path}")]
    BadMode {
        /// The entry.
        path: String,
        /// The mode.
        mode: u32,
    },
    /// The same path twice.
    #[error("duplicate path {0}")]
    Duplicate(String),
    /// The parent was not declared as a directory earlier.
    #[error("parent of {0} is not a directory declared earlier in the manifest")]
    ParentNotDir(String),
    /// A file's data does not start where the previous one ended.
    #[error("data of {path} at offset {got}, expected {expected} (ranges must be contiguous)")]
    BadOffset {
        /// The entry.
        path: String,
        /// Where it had to start.
        expected: u64,
        /// Where it claims to start.
        got: u64,
    },
    /// The virtual file would exceed [`Limits::max_total`].
    #[error("virtual file too large at {0}")]
    TooLarge(String),
    /// A directory or link with a size, offset or misplaced link field.
    #[error("malformed {kind} entry {path}")]
    Malformed {
        /// The entry.
        path: String,
        /// What kind of entry it is.
        kind: &'static str,
    },
    /// A symlink target that is empty, too long or holds NUL.
    #[error("bad symlink target for {0}")]
    BadSymlink(String),
    /// A hard link to something that is not an earlier regular file.
    #[error("hard link {path} to {target}, which is not an earlier regular file")]
    BadHardLink {
        /// The entry.
        path: String,
        /// What it links to.
        target: String,
    },
    /// Past [`Limits::max_entries`] or [`Limits::max_path_bytes`].
    #[error("manifest exceeds the limit of {0}")]
    Limit(&'static str),
    /// The end record's totals disagree with the entries.
    #[error("end record says {claimed:?}, entries add up to {actual:?}")]
    EndMismatch {
        /// What the end record says.
        claimed: Summary,
        /// What the entries add up to.
        actual: Summary,
    },
    /// Bytes after the end record.
    #[error("data after the end of the manifest")]
    TrailingData,
    /// The stream stopped before its end record.
    #[error("manifest truncated (no end record)")]
    Truncated,
}

/// A path made printable for messages and logs (`\n`, non-UTF-8 bytes escaped).
pub fn show(path: &[u8]) -> String {
    path.escape_ascii().to_string()
}

/// Check one relative path against the rules of the format.
pub fn check_path(path: &[u8]) -> Result<(), PathProblem> {
    if path.is_empty() {
        return Err(PathProblem::Empty);
    }
    if path.len() > MAX_PATH {
        return Err(PathProblem::TooLong);
    }
    if path[0] == b'/' {
        return Err(PathProblem::Absolute);
    }
    if path.contains(&0) {
        return Err(PathProblem::Nul);
    }
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" => return Err(PathProblem::EmptyComponent),
            b"." | b".." => return Err(PathProblem::DotComponent),
            c if c.len() > MAX_NAME => return Err(PathProblem::NameTooLong),
            _ => {}
        }
    }
    Ok(())
}

/// The parent of a path (`None` for a top-level name).
pub fn parent(path: &[u8]) -> Option<&[u8]> {
    path.iter().rposition(|&b| b == b'/').map(|i| &path[..i])
}

/// Path and link-target bytes of an entry (what a receiver keeps).
fn name_bytes(e: &Entry) -> u64 {
    let link = match &e.kind {
        Kind::Symlink { target } | Kind::HardLink { target } => target.len(),
        _ => 0,
    };
    (e.path.len() + link) as u64
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Dir,
    File,
    Other,
}

/// The rules every entry must pass, in order. Shared by [`Encoder`] and
/// [`Decoder`]; usable on its own by code that builds entries.
#[derive(Debug, Default)]
pub struct Validator {
    limits: Limits,
    nodes: HashMap<Box<[u8]>, Node>,
    summary: Summary,
    path_bytes: u64,
}

impl Validator {
    /// A validator with these limits.
    pub fn new(limits: Limits) -> Self {
        Validator { limits, ..Default::default() }
    }

    /// Where the next file's data must start.
    pub fn next_offset(&self) -> u64 {
        self.summary.total
    }

    /// Entries accepted and virtual bytes so far.
    pub fn summary(&self) -> Summary {
        self.summary
    }

    /// Accept `e` as the next entry or say why not.
    pub fn check(&mut self, e: &Entry) -> Result<(), ManifestError> {
        let p = || show(&e.path);
        check_path(&e.path).map_err(|problem| ManifestError::BadPath { path: p(), problem })?;
        if e.mode & !MODE_MASK != 0 {
            return Err(ManifestError::BadMode { path: p(), mode: e.mode });
        }
        self.check_limits(e)?;
        if self.nodes.contains_key(e.path.as_slice()) {
            return Err(ManifestError::Duplicate(p()));
        }
        if let Some(dir) = parent(&e.path) {
            if self.nodes.get(dir) != Some(&Node::Dir) {
                return Err(ManifestError::ParentNotDir(p()));
            }
        }
        let node = self.check_kind(e)?;
        self.nodes.insert(e.path.clone().into_boxed_slice(), node);
        self.summary.entries += 1;
        self.path_bytes += name_bytes(e);
        Ok(())
    }

    fn check_limits(&self, e: &Entry) -> Result<(), ManifestError> {
        if self.summary.entries >= self.limits.max_entries {
            return Err(ManifestError::Limit("entries"));
        }
        if self.path_bytes + name_bytes(e) > self.limits.max_path_bytes {
            return Err(ManifestError::Limit("path bytes"));
        }
        Ok(())
    }

    fn check_kind(&mut self, e: &Entry) -> Result<Node, ManifestError> {
        let p = || show(&e.path);
        match &e.kind {
            Kind::File { size, offset } => {
                if *offset != self.summary.total {
                    return Err(ManifestError::BadOffset { path: p(), expected: self.summary.total, got: *offset });
                }
                let end = offset.checked_add(*size).filter(|&end| end <= self.limits.max_total);
                self.summary.total = end.ok_or_else(|| ManifestError::TooLarge(p()))?;
                Ok(Node::File)
            }
            Kind::Dir => Ok(Node::Dir),
            Kind::Symlink { target } => {
                if target.is_empty() || target.len() > MAX_PATH || target.contains(&0) {
                    return Err(ManifestError::BadSymlink(p()));
                }
                Ok(Node::Other)
            }
            Kind::HardLink { target } => {
                if self.nodes.get(target.as_slice()) != Some(&Node::File) {
                    return Err(ManifestError::BadHardLink { path: p(), target: show(target) });
                }
                Ok(Node::Other)
            }
        }
    }

    /// Check the end record against what was accepted.
    pub fn check_end(&self, claimed: Summary) -> Result<(), ManifestError> {
        if claimed != self.summary {
            return Err(ManifestError::EndMismatch { claimed, actual: self.summary });
        }
        Ok(())
    }
}

/// The stream header.
pub fn encode_header(out: &mut Vec<u8>) {
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[VERSION, 0, 0, 0]);
}

/// Encode one entry record without any check (for tests and fuzzing; use
/// [`Encoder`] to produce manifests).
pub fn encode_entry_unchecked(e: &Entry, out: &mut Vec<u8>) {
    let (size, offset, link): (u64, u64, &[u8]) = match &e.kind {
        Kind::File { size, offset } => (*size, *offset, b""),
        Kind::Dir => (0, 0, b""),
        Kind::Symlink { target } | Kind::HardLink { target } => (0, 0, target),
    };
    out.push(TAG_ENTRY);
    out.push(e.kind.code());
    out.extend_from_slice(&e.mode.to_be_bytes());
    out.extend_from_slice(&e.mtime_ns.to_be_bytes());
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&(e.path.len().min(0xffff) as u16).to_be_bytes());
    out.extend_from_slice(&(link.len().min(0xffff) as u16).to_be_bytes());
    out.extend_from_slice(&e.path[..e.path.len().min(0xffff)]);
    out.extend_from_slice(&link[..link.len().min(0xffff)]);
}

/// Encode the end record without any check.
pub fn encode_end_unchecked(s: Summary, out: &mut Vec<u8>) {
    out.push(TAG_END);
    out.extend_from_slice(&s.entries.to_be_bytes());
    out.extend_from_slice(&s.total.to_be_bytes());
}

/// Writes a manifest, entry by entry, refusing what a [`Decoder`] would refuse.
#[derive(Debug, Default)]
pub struct Encoder {
    v: Validator,
    started: bool,
    ended: bool,
}

impl Encoder {
    /// An encoder with these limits.
    pub fn new(limits: Limits) -> Self {
        Encoder { v: Validator::new(limits), started: false, ended: false }
    }

    /// Where the next file's data must start in the virtual file.
    pub fn next_offset(&self) -> u64 {
        self.v.next_offset()
    }

    /// Entries and virtual bytes so far.
    pub fn summary(&self) -> Summary {
        self.v.summary()
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if !self.started {
            encode_header(out);
            self.started = true;
        }
    }

    /// Append `e` (and the header, the first time) to `out`.
    pub fn entry(&mut self, e: &Entry, out: &mut Vec<u8>) -> Result<(), ManifestError> {
        if self.ended {
            return Err(ManifestError::TrailingData);
        }
        self.v.check(e)?;
        self.start(out);
        encode_entry_unchecked(e, out);
        Ok(())
    }

    /// Append the end record; no entry may follow.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<Summary, ManifestError> {
        if self.ended {
            return Err(ManifestError::TrailingData);
        }
        self.start(out);
        encode_end_unchecked(self.v.summary(), out);
        self.ended = true;
        Ok(self.v.summary())
    }
}

/// Big-endian reads from a byte slice; `None` means "need more bytes".
struct Rd<'a> {
    b: &'a [u8],
    p: usize,
}

impl<'a> Rd<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.p..self.p.checked_add(n)?)?;
        self.p += n;
        Some(s)
    }
    fn arr<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.arr::<1>()?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.arr()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.arr()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.arr()?))
    }
}

enum Record {
    Entry(Entry),
    End(Summary),
}

/// Reads a manifest from bytes fed in any chunking.
///
/// Call order: [`Decoder::handle_bytes`] with whatever arrived, then
/// [`Decoder::poll_entry`] until it gives `Ok(None)`; repeat. When the
/// stream ends, [`Decoder::finish`] says whether it was complete. Every
/// entry returned has passed the [`Validator`]. The first error is final:
/// later calls return it again.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    pos: usize,
    header: bool,
    end: Option<Summary>,
    error: Option<ManifestError>,
    v: Validator,
}

impl Decoder {
    /// A decoder with these limits.
    pub fn new(limits: Limits) -> Self {
        Decoder { v: Validator::new(limits), ..Default::default() }
    }

    /// Queue bytes from the peer. At most one record (≤ 8,224 bytes) stays
    /// buffered after [`Decoder::poll_entry`] returned `Ok(None)`.
    pub fn handle_bytes(&mut self, bytes: &[u8]) {
        if self.error.is_some() || bytes.is_empty() {
            return;
        }
        if self.end.is_some() {
            self.error = Some(ManifestError::TrailingData);
            return;
        }
        if self.pos > 0 && self.pos >= self.buf.len() / 2 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next entry, `Ok(None)` when more bytes are needed or the end
    /// record was read.
    pub fn poll_entry(&mut self) -> Result<Option<Entry>, ManifestError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        match self.step() {
            Ok(e) => Ok(e),
            Err(e) => {
                self.error = Some(e.clone());
                Err(e)
            }
        }
    }

    fn step(&mut self) -> Result<Option<Entry>, ManifestError> {
        if !self.header && !self.read_header()? {
            return Ok(None);
        }
        while self.end.is_none() {
            let mut rd = Rd { b: &self.buf[self.pos..], p: 0 };
            let Some(rec) = read_record(&mut rd)? else { return Ok(None) };
            self.pos += rd.p;
            match rec {
                Record::Entry(e) => {
                    self.v.check(&e)?;
                    return Ok(Some(e));
                }
                Record::End(s) => {
                    self.v.check_end(s)?;
                    self.end = Some(s);
                }
            }
        }
        if self.pos < self.buf.len() {
            return Err(ManifestError::TrailingData);
        }
        Ok(None)
    }

    fn read_header(&mut self) -> Result<bool, ManifestError> {
        let have = &self.buf[self.pos..];
        let n = have.len().min(MAGIC.len());
        if have[..n] != MAGIC[..n] {
            return Err(ManifestError::BadMagic);
        }
        if have.len() < HEADER_LEN {
            return Ok(false);
        }
        if have[4] != VERSION {
            return Err(ManifestError::UnsupportedVersion(have[4]));
        }
        let flags = u32::from_be_bytes([0, have[5], have[6], have[7]]);
        if flags != 0 {
            return Err(ManifestError::BadFlags(flags));
        }
        self.pos += HEADER_LEN;
        self.header = true;
        Ok(true)
    }

    /// Whether the end record has been read.
    pub fn is_finished(&self) -> bool {
        self.end.is_some()
    }

    /// Entries accepted and virtual bytes so far.
    pub fn summary(&self) -> Summary {
        self.v.summary()
    }

    /// The stream is over: the totals if it was a complete manifest.
    pub fn finish(&self) -> Result<Summary, ManifestError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if self.pos < self.buf.len() && self.end.is_some() {
            return Err(ManifestError::TrailingData);
        }
        self.end.ok_or(ManifestError::Truncated)
    }
}

fn read_record(rd: &mut Rd<'_>) -> Result<Option<Record>, ManifestError> {
    let Some(tag) = rd.u8() else { return Ok(None) };
    match tag {
        TAG_ENTRY => read_entry(rd),
        TAG_END => {
            let (Some(entries), Some(total)) = (rd.u64(), rd.u64()) else { return Ok(None) };
            Ok(Some(Record::End(Summary { entries, total })))
        }
        t => Err(ManifestError::UnknownRecord(t)),
    }
}

fn read_entry(rd: &mut Rd<'_>) -> Result<Option<Record>, ManifestError> {
    let fixed = (|| Some((rd.u8()?, rd.u32()?, rd.i64()?, rd.u64()?, rd.u64()?, rd.u16()?, rd.u16()?)))();
    let Some((kind, mode, mtime, size, offset, plen, llen)) = fixed else { return Ok(None) };
    let (plen, llen) = (usize::from(plen), usize::from(llen));
    if plen > MAX_PATH {
        return Err(ManifestError::BadPath { path: format!("({plen} bytes)"), problem: PathProblem::TooLong });
    }
    if llen > MAX_PATH {
        return Err(ManifestError::BadSymlink(format!("({plen}-byte path, {llen}-byte target)")));
    }
    let (Some(path), Some(link)) = (rd.take(plen), rd.take(llen)) else { return Ok(None) };
    let (path, link) = (path.to_vec(), link.to_vec());
    let malformed = |kind| ManifestError::Malformed { path: show(&path), kind };
    let no_data = size == 0 && offset == 0;
    let kind = match kind {
        1 if link.is_empty() => Kind::File { size, offset },
        1 => return Err(malformed("file")),
        2 if no_data && link.is_empty() => Kind::Dir,
        2 => return Err(malformed("directory")),
        3 if no_data => Kind::Symlink { target: link },
        3 => return Err(malformed("symlink")),
        4 if no_data => Kind::HardLink { target: link },
        4 => return Err(malformed("hard link")),
        k => return Err(ManifestError::UnknownKind { path: show(&path), kind: k }),
    };
    Ok(Some(Record::Entry(Entry { path, kind, mode, mtime_ns: mtime })))
}

#[cfg(test)]
mod tests;

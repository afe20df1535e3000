//! Resuming a download that failed midway (`cp --retries`): the file it
//! was writing stays open, unnamed, with the ranges that reached it, and
//! the next try asks the server for the rest only (MODE E `REST` with a
//! range list, as GFD.20's restart markers say what the receiver has).
//!
//! Only the ranges the engine reported as written ([`lightpath_engine::Control`])
//! count as received: a block claimed but not written when the transfer
//! broke is asked for again.
//!
//! An upload to a lightpath server resumes the same way round: the server
//! keeps a broken upload's partial file, its `111` markers say which
//! ranges it wrote, and the next try sends `REST` with them and only the
//! rest of the file, if the source is unchanged (same size and mtime). So
//! does a third-party copy of a large file to a lightpath server, the
//! source told the same `REST` ([`crate::thirdparty`]).

use crate::local::OpenTarget;
use crate::ClientError;
use lightpath_engine::checksum::checksum;
use lightpath_engine::FileSource;
use lightpath_proto::ranges::RangeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The most ranges a resumed try names in its `REST`.
const MAX_RANGES: usize = 64;

/// The slot one download keeps its partial file in between tries; the
/// caller that retries holds it across sessions. Dropping it drops the
/// file (a temporary one vanishes).
#[derive(Debug, Default)]
pub struct Resume(Mutex<Option<Kept>>, Mutex<Option<Sent>>, Noted);

/// Whether an upload's ranges came from an earlier run's note
/// ([`crate::partial::upload`]), and whether the server then refused them.
#[derive(Debug, Default)]
struct Noted {
    taken: AtomicBool,
    refused: AtomicBool,
}

/// A partial upload: the ranges the server confirmed, and the source as
/// it was (a changed source starts over).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sent {
    pub have: RangeSet,
    pub source: Stamp,
}

/// A source's size and modification time, compared between tries as they
/// are (a local file's in nanoseconds, a server's as its `MDTM` says).
pub(crate) type Stamp = (u64, Option<String>);

/// A partial download: its open target and the ranges it holds.
#[derive(Debug)]
pub(crate) struct Kept {
    pub target: OpenTarget,
    pub have: RangeSet,
}

impl Resume {
    /// An empty slot.
    pub fn new() -> Arc<Resume> {
        Arc::new(Resume::default())
    }

    fn slot(&self) -> MutexGuard<'_, Option<Kept>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The ranges kept from earlier tries (`None`: nothing kept).
    pub fn have(&self) -> Option<RangeSet> {
        self.slot().as_ref().map(|k| k.have.clone())
    }

    /// Whether nothing is kept: no file taken up or received into, no
    /// upload noted.
    pub fn is_empty(&self) -> bool {
        self.slot().is_none() && self.sent().is_none()
    }

    /// Bytes kept from earlier tries (a download's here, or an upload's
    /// on the server).
    pub fn kept_bytes(&self) -> u64 {
        let sent = self.sent().as_ref().map_or(0, |s| s.have.covered());
        self.slot().as_ref().map_or(sent, |k| k.have.covered())
    }

    fn sent(&self) -> MutexGuard<'_, Option<Sent>> {
        self.1.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The ranges of an upload of `source` the server confirmed in earlier
    /// tries (at most [`MAX_RANGES`], within its size), if the source is
    /// unchanged; else nothing (and what was kept is dropped).
    pub(crate) fn sent_of(&self, source: Stamp) -> Option<RangeSet> {
        let mut g = self.sent();
        match g.take() {
            Some(s) if s.source == source && !s.have.is_empty() => {
                *g = Some(s.clone());
                Some(s.have)
            }
            _ => None,
        }
    }

    /// What the server confirmed of an upload in earlier tries, if anything.
    pub(crate) fn sent_kept(&self) -> Option<Sent> {
        self.sent().clone()
    }

    /// [`Resume::keep_sent`] for ranges an earlier run noted.
    pub(crate) fn keep_noted(&self, have: RangeSet, source: Stamp) {
        self.keep_sent(have, source);
        self.2.taken.store(true, Ordering::Relaxed);
    }

    /// Whether the server refused (554) the ranges an earlier run noted;
    /// asked once.
    pub(crate) fn take_refused_note(&self) -> bool {
        self.2.refused.swap(false, Ordering::Relaxed)
    }

    /// Note what the server confirmed of an upload of `source` that
    /// failed (with what it had before: `have`).
    pub(crate) fn keep_sent(&self, have: RangeSet, source: Stamp) {
        let mut within = RangeSet::new();
        for (s, e) in have.iter() {
            if s < source.0 {
                within.insert(s, e.min(source.0));
            }
        }
        let have = first_ranges(within, MAX_RANGES);
        *self.sent() = (!have.is_empty()).then_some(Sent { have, source });
    }

    /// Keep only the first range (the bulk, from the start of the file:
    /// parallel streams leave a few blocks beyond it, fetched again), and
    /// give it as `(offset, len)`: the bytes compared with the server's
    /// file before resuming ([`crate::retry::check_kept`]).
    pub fn keep_first(&self) -> Option<(u64, u64)> {
        let mut g = self.slot();
        let k = g.as_mut()?;
        let &(start, end) = k.have.ranges().first()?;
        k.have = RangeSet::new();
        k.have.insert(start, end);
        Some((start, end - start))
    }

    /// The digest `alg` of `len` bytes at `off` of the kept file.
    pub(crate) fn digest(&self, alg: &str, off: u64, len: u64) -> std::io::Result<String> {
        let g = self.slot();
        let file = g.as_ref().and_then(|k| k.target.file()).ok_or_else(|| std::io::Error::other("nothing kept"))?;
        let src = FileSource::new(file.try_clone()?, false)?;
        checksum(&src, alg, off, Some(len))
    }

    /// Take what is kept (the next try writes into it).
    pub(crate) fn take(&self) -> Option<Kept> {
        self.slot().take()
    }

    /// Keep `target` holding `have` for the next try. A target with
    /// nothing in it is dropped: the next try starts afresh anyway.
    pub(crate) fn keep(&self, target: OpenTarget, have: RangeSet) {
        if have.is_empty() || !target.can_resume() {
            return;
        }
        let have = first_ranges(have, MAX_RANGES);
        *self.slot() = Some(Kept { target, have });
    }

    /// The end of a try of an upload or third-party copy of `source` that
    /// resumed from `kept` (if it did), the server having confirmed
    /// `confirmed` (its `111` markers): a done one keeps nothing; a failed
    /// one keeps what the server now holds for the next try; a restart the
    /// server refused (554: it kept nothing) keeps nothing and becomes a
    /// transient error saying `gone(code, reply)`, so the next try goes
    /// whole. A resumed try that succeeded is said in verbose output, as
    /// `what` whose rest the `holder` kept, and counts the kept bytes too.
    pub(crate) fn settle(
        &self,
        r: Result<u64, ClientError>,
        (kept, confirmed): (Option<RangeSet>, RangeSet),
        source: Stamp,
        (what, holder): (&str, &str),
        gone: impl FnOnce(u16, &str) -> String,
    ) -> Result<u64, ClientError> {
        match &r {
            Ok(n) => {
                self.clear();
                let Some(k) = kept else { return r };
                tracing::info!("resumed {what}: {} bytes kept by the {holder}, {n} sent", k.covered());
                // The file counts whole, as a resumed download does (what
                // moved is in the job's progress).
                return Ok(n + k.covered());
            }
            Err(ClientError::Refused { code: 554, reply, .. }) if kept.is_some() => {
                self.clear();
                if self.2.taken.swap(false, Ordering::Relaxed) {
                    self.2.refused.store(true, Ordering::Relaxed);
                }
                return Err(ClientError::Data { msg: gone(554, reply), transient: true });
            }
            Err(_) => self.keep_sent(kept.unwrap_or_default().union(&confirmed), source),
        }
        r
    }

    /// Drop what is kept.
    pub fn clear(&self) {
        self.slot().take();
        self.sent().take();
    }
}

/// The first `n` ranges of `have`: the `REST` line stays short, and the
/// ranges beyond are fetched again (they are few: parallel streams leave
/// holes only near where the transfer broke).
fn first_ranges(have: RangeSet, n: usize) -> RangeSet {
    if have.ranges().len() <= n {
        return have;
    }
    let mut out = RangeSet::new();
    have.ranges()[..n].iter().for_each(|&(s, e)| out.insert(s, e));
    out
}

/// The `REST` command that asks for everything but `have` (MODE E).
pub(crate) fn rest_cmd(have: &RangeSet) -> Vec<u8> {
    format!("REST {have}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(r: &[(u64, u64)]) -> RangeSet {
        let mut s = RangeSet::new();
        r.iter().for_each(|&(a, b)| s.insert(a, b));
        s
    }

    #[test]
    fn rest_names_the_ranges_held_end_exclusive() {
        assert_eq!(rest_cmd(&set(&[(0, 1000), (2000, 3000)])), b"REST 0-1000,2000-3000");
    }

    #[test]
    fn only_the_first_ranges_are_kept() {
        let many: Vec<(u64, u64)> = (0..100).map(|i| (i * 10, i * 10 + 5)).collect();
        let kept = first_ranges(set(&many), MAX_RANGES);
        assert_eq!(kept.ranges(), &many[..MAX_RANGES]);
        assert_eq!(first_ranges(set(&many[..3]), MAX_RANGES).ranges(), &many[..3]);
    }

    #[test]
    fn an_upload_resumes_only_from_an_unchanged_source_within_its_size() {
        let r = Resume::new();
        let t = || Some("20261126101112".to_string());
        r.keep_sent(set(&[(0, 100), (150, 400)]), (300, t()));
        assert_eq!(r.kept_bytes(), 250);
        assert_eq!(r.sent_of((300, t())), Some(set(&[(0, 100), (150, 300)])));
        assert_eq!(r.sent_of((300, t())), Some(set(&[(0, 100), (150, 300)])), "kept until cleared");
        assert_eq!(r.sent_of((301, t())), None, "another size");
        assert_eq!(r.sent_of((300, t())), None, "dropped with the change");
        r.keep_sent(set(&[(0, 100)]), (300, t()));
        assert_eq!(r.sent_of((300, Some("20261126101113".into()))), None, "another mtime");
        r.keep_sent(set(&[(0, 100)]), (300, t()));
        r.clear();
        assert_eq!(r.sent_of((300, t())), None);
        r.keep_sent(set(&[(500, 600)]), (300, t()));
        assert_eq!(r.sent_of((300, t())), None, "nothing within the file");
    }

    #[test]
    fn an_empty_slot_has_nothing() {
        assert!(Resume::new().keep_first().is_none());
        let r = Resume::new();
        assert!(r.have().is_none());
        assert_eq!(r.kept_bytes(), 0);
        assert!(r.take().is_none());
    }
}

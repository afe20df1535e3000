//! Trying a failed file again (`cp --retries`): a file that failed for a
//! transient reason ([`ClientError::is_transient`]: the network, a server
//! that went away or said "try later") goes again after a pause that
//! doubles each time. A download keeps what it received ([`Resume`]) and
//! asks only for the rest; an upload to a lightpath server sends only what
//! the server did not keep.

use crate::plan::{describe, Item};
use crate::resume::Resume;
use crate::session::Session;
use crate::ClientError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The pause before the first retry; each next one doubles, up to [`MAX_WAIT`].
pub const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest pause between tries.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// One file of a worker's, with its tries so far.
#[derive(Debug)]
pub(crate) struct Task {
    pub item: Item,
    /// Tries made (0 before the first).
    pub tries: u32,
    /// Where a download keeps its partial file between tries.
    pub resume: Arc<Resume>,
    /// The next try goes at once, without comparing what was kept: the
    /// first failure, of a data stream under a live session.
    pub at_once: bool,
    /// Drawn once for the file, the same for every try: the tag of the
    /// temporary name it is stored under on a server without lightpath's
    /// extensions ([`crate::job`]'s `publish`). Each try drew its own,
    /// and where a try's leftover could not be removed (the server was
    /// restarting) it stayed beside the file the next try published (a
    /// defect hunt's find); now the next try's STOR replaces it.
    pub tag: u64,
}

impl Task {
    pub fn new(item: Item) -> Task {
        Task { item, tries: 0, resume: Resume::new(), at_once: false, tag: rand::random() }
    }

    /// The pause before its next try.
    pub fn wait(&self) -> Duration {
        if self.at_once {
            Duration::ZERO
        } else {
            wait_after(self.tries)
        }
    }
}

/// The pause before try `n + 1` after `n` tries (`n >= 1`).
pub fn wait_after(n: u32) -> Duration {
    let doublings = n.saturating_sub(1).min(16);
    FIRST_WAIT.saturating_mul(1 << doublings).min(MAX_WAIT)
}

/// Whether `task`, having just failed with `e`, goes again: the error is
/// transient and fewer than `retries` retries were made. Says so, and how
/// much a download keeps. A first failure that left the session alive (a
/// data stream died; the server answered) goes again at once: the server
/// has not gone anywhere. A server that went away, or a second failure,
/// waits. Either way a download compares the kept bytes with the server's
/// file first ([`check_kept`]): it may have been rewritten in between, and
/// a server's own check of a file changed while sent is not reached when
/// a data stream dies (a review found two versions joined and published).
pub(crate) fn again(task: &mut Task, e: &ClientError, retries: u32) -> bool {
    if task.tries == 0 && task.resume.take_refused_note() {
        // What an earlier run noted is gone from the server (it restarted,
        // or the partial expired): no failure of this run's. The file goes
        // whole, at once, and the retry is not counted.
        task.at_once = true;
        tracing::warn!("{}: {e}; sending it whole now", describe(&task.item.src));
        return true;
    }
    task.tries += 1;
    if !e.is_transient() || task.tries > retries {
        return false;
    }
    task.at_once = at_once(task.tries, e);
    let kept = task.resume.kept_bytes();
    let keep = if kept > 0 { format!(", keeping the {kept} bytes moved") } else { String::new() };
    let when = when(task.wait());
    tracing::warn!("{}: {e}; trying again {when} (retry {} of {retries}{keep})", describe(&task.item.src), task.tries);
    true
}

/// Whether the retry after `tries` tries, the last failed with `e`, goes
/// at once: the first failure, under a live session (a data stream died;
/// the server answered). A server that went away is waited for.
pub(crate) fn at_once(tries: u32, e: &ClientError) -> bool {
    // A server that said "too many sessions, try again later" (421) is
    // waited for too: asked again at once, it said so again (a defect
    // hunt's find: a retry spent in 0.25 ms).
    tries == 1 && !matches!(e, ClientError::Control(..) | ClientError::Connect(..)) && !e.is_busy()
}

/// When a retry goes, for messages: "now" or "in 2s".
pub(crate) fn when(wait: Duration) -> String {
    if wait.is_zero() {
        "now".to_string()
    } else {
        format!("in {wait:?}")
    }
}

/// Before a download resumes from what `task` kept, the server's file
/// (`path`) must still hold those bytes: it has the size planned, and the
/// kept range has the same digest on both sides (`CKSM` with an offset and
/// a length), where the server computes one. Otherwise the kept bytes are
/// dropped and the file starts over: bytes of two versions of a file are
/// never joined. Comparing the whole kept range (not a sample) costs a
/// read of it at each end, far less than fetching it again over a long
/// path, and leaves nothing unchecked: what was not kept comes fresh. Only
/// a lost control connection is an error.
pub(crate) async fn check_kept(s: &mut Session, task: &Task, path: &[u8]) -> Result<(), ClientError> {
    let Some((off, len)) = task.resume.keep_first() else { return Ok(()) };
    let planned = task.item.size;
    // Asked afresh: the size the plan read (and the session kept) would
    // hide a file replaced since.
    s.forget_stat(path);
    let why = match s.stat(path).await {
        Ok((false, size)) if size == planned || planned == 0 => kept_differs(s, task, path, off, len).await?,
        Ok((_, size)) => Some(format!("it changed on the server: {size} bytes now, not {planned}")),
        Err(e @ ClientError::Control(..)) => return Err(e),
        Err(e) => Some(format!("it cannot be checked ({e})")),
    };
    if let Some(why) = why {
        tracing::warn!("{}: {why}; starting over", describe(&task.item.src));
        task.resume.clear();
    }
    Ok(())
}

/// The checksum compared before resuming: the fastest one the server
/// offers, ADLER32 where its FEAT names none (GCT computes it).
fn resume_checksum(s: &Session) -> Option<&'static str> {
    if s.feat.cksm.is_empty() {
        return Some("ADLER32");
    }
    ["CRC32C", "ADLER32", "MD5", "SHA256"].into_iter().find(|a| s.feat.has_cksm(a))
}

/// Why the kept bytes `[off, off + len)` differ from the server's, if
/// they do. A server that computes no digest we know leaves the size as
/// the only check.
async fn kept_differs(
    s: &mut Session,
    task: &Task,
    path: &[u8],
    off: u64,
    len: u64,
) -> Result<Option<String>, ClientError> {
    let Some(alg) = resume_checksum(s) else { return Ok(None) };
    tracing::info!("comparing the {len} bytes kept with the server's file ({alg})");
    let resume = task.resume.clone();
    let ours = tokio::task::spawn_blocking(move || resume.digest(alg, off, len));
    let theirs = match s.checksum_of(alg, off, Some(len), path).await {
        Ok(d) => d,
        Err(e @ ClientError::Control(..)) => return Err(e),
        Err(e) => {
            tracing::info!("no digest to compare before resuming ({e}); the size matches");
            return Ok(None);
        }
    };
    Ok(match ours.await.map_err(std::io::Error::other).and_then(|r| r) {
        Ok(ours) if ours == theirs => None,
        Ok(ours) => {
            Some(format!("it changed on the server: bytes {off}-{} differ ({alg} {theirs}, kept {ours})", off + len))
        }
        Err(e) => Some(format!("the kept bytes cannot be read ({e})")),
    })
}

/// Sleep for `d`, or until `cancel` is set (checked every 100 ms).
pub(crate) async fn pause(d: Duration, cancel: &AtomicBool) {
    pause_unless(d, cancel, || false).await;
}

/// [`pause`], ended early too once `done` holds (checked as often).
pub(crate) async fn pause_unless(d: Duration, cancel: &AtomicBool, done: impl Fn() -> bool) {
    let end = tokio::time::Instant::now() + d;
    while tokio::time::Instant::now() < end && !cancel.load(Ordering::Relaxed) && !done() {
        let left = end - tokio::time::Instant::now();
        tokio::time::sleep(left.min(Duration::from_millis(100))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DataEnd, Location};
    use lightpath_proto::ranges::RangeSet;

    fn task() -> Task {
        let l = Location::Local("/x".into());
        Task::new(Item { src: l.clone(), dst: l, size: 1, mode: None, mtime: None, unique: None })
    }

    fn reset() -> ClientError {
        ClientError::Data { msg: "connection reset".into(), transient: true }
    }

    #[test]
    fn pauses_double_up_to_the_cap() {
        let secs: Vec<u64> = (1..=7).map(|n| wait_after(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(wait_after(u32::MAX), MAX_WAIT);
    }

    #[test]
    fn a_transient_failure_goes_again_until_the_retries_are_spent() {
        let mut t = task();
        assert!(again(&mut t, &reset(), 2));
        assert!(again(&mut t, &reset(), 2));
        assert!(!again(&mut t, &reset(), 2));
        assert_eq!(t.tries, 3);
    }

    #[test]
    fn a_first_stream_failure_goes_again_at_once_and_a_lost_server_waits() {
        let mut t = task();
        assert!(again(&mut t, &reset(), 3));
        assert!(t.at_once && t.wait() == Duration::ZERO);
        assert!(again(&mut t, &reset(), 3));
        assert!(!t.at_once && t.wait() == Duration::from_secs(2));
        let mut t = task();
        assert!(again(&mut t, &ClientError::Control("s".into(), "closed".into()), 3));
        assert!(!t.at_once && t.wait() == FIRST_WAIT);
        // "Too many sessions; try again later" is waited for too.
        let busy = ClientError::Refused {
            server: "s".into(),
            cmd: "greeting".into(),
            reply: "Too many sessions (1) on this server; try again later.".into(),
            code: 421,
            here: crate::DataEnd::Fine,
        };
        let mut t = task();
        assert!(again(&mut t, &busy, 3));
        assert!(!t.at_once && t.wait() == FIRST_WAIT);
    }

    /// A first try that resumed from an earlier run's note, refused by the
    /// server (554), goes again whole at once, even with no retries; only
    /// once.
    #[test]
    fn a_refused_restart_an_earlier_run_noted_goes_again_uncounted() {
        let mut t = task();
        let stamp = (1000, Some("1".to_string()));
        let mut have = RangeSet::new();
        have.insert(0, 600);
        t.resume.keep_noted(have.clone(), stamp.clone());
        let refused = ClientError::Refused {
            server: "s".into(),
            cmd: "STOR x".into(),
            reply: "554 Restart refused".into(),
            code: 554,
            here: crate::DataEnd::Fine,
        };
        let gone = |_, _: &str| "gone".to_string();
        let e = t.resume.settle(Err(refused), (Some(have), RangeSet::new()), stamp, ("an upload", "server"), gone);
        let e = e.expect_err("refused");
        assert!(again(&mut t, &e, 0));
        assert!(t.at_once && t.tries == 0);
        assert!(!again(&mut t, &e, 0), "only once");
    }

    #[test]
    fn final_failures_and_zero_retries_do_not_go_again() {
        let refused = ClientError::Refused {
            server: "s".into(),
            cmd: "RETR x".into(),
            reply: "no".into(),
            code: 550,
            here: crate::DataEnd::Fine,
        };
        assert!(!again(&mut task(), &refused, 3));
        assert!(!again(&mut task(), &ClientError::Local("disk full".into()), 3));
        assert!(!again(&mut task(), &ClientError::Data { msg: "bad block".into(), transient: false }, 3));
        assert!(!again(&mut task(), &reset(), 0));
    }

    #[test]
    fn transient_refusals_are_4xx_but_not_those_that_blame_the_file() {
        let r = |code, here| ClientError::Refused {
            server: "s".into(),
            cmd: "RETR x".into(),
            reply: "r".into(),
            code,
            here,
        };
        let (fine, broke, failed) = (DataEnd::Fine, DataEnd::Broke, DataEnd::Failed);
        assert!(r(421, fine).is_transient() && r(426, fine).is_transient() && r(450, fine).is_transient());
        assert!(!r(451, fine).is_transient() && !r(452, fine).is_transient() && !r(550, fine).is_transient());
        // GCT's generic 500 as our data connection was reset: transient;
        // a refusal that blames the file stays final.
        assert!(!r(500, fine).is_transient() && r(500, broke).is_transient());
        assert!(!r(451, broke).is_transient() && !r(550, broke).is_transient());
        // Our own end failed (a source that shrank): final, whatever the code.
        assert!(!r(426, failed).is_transient());
        assert!(ClientError::Control("s".into(), "reset".into()).is_transient());
        assert!(ClientError::Connect("s".into(), "refused".into()).is_transient());
    }
}

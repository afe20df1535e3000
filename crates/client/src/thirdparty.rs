//! Third-party transfers: the client tells the destination to listen and
//! the source to connect, then watches both control channels. Data flows
//! server to server. The MODE E channel stays linked between files.
//!
//! A large file whose copy to a lightpath server broke resumes on its
//! next try: the destination kept what it wrote (its `111` markers said
//! which ranges), and both servers get `REST` with those ranges, so the
//! source sends only the rest ([`crate::resume`]). The source's size and
//! `MDTM`, asked before each try, must not have changed.

use crate::job::CopyOptions;
use crate::resume::{rest_cmd, Resume, Stamp};
use crate::session::{cancelled, path_cmd, Session};
use crate::{ClientError, Remote};
use lightpath_proto::held::TreeRoot;
use lightpath_proto::{hostport, PerfMarker, RangeSet, Reply};
use std::sync::atomic::{AtomicU64, Ordering};

/// Files at least this large can resume: their source's `MDTM` is asked
/// before each try (a round trip, nothing beside their transfer).
pub const RESUMABLE: u64 = 64 << 20;

/// Copy one file from `s` to `d` (`src` to `dst`). `linked` says whether
/// both servers still hold a MODE E channel between them from the
/// previous file; `resume` holds what the destination kept of an earlier
/// try.
pub async fn transfer(
    s: &mut Session,
    d: &mut Session,
    (src, dst): (&Remote, &Remote),
    (size, meta): (u64, Option<TreeRoot>),
    opts: &CopyOptions,
    linked: &mut bool,
    resume: &Resume,
) -> Result<u64, ClientError> {
    // A name one side cannot be sent fails before either side is set up.
    d.ctl.check(&path_cmd("STOR ", &dst.path))?;
    s.ctl.check(&path_cmd("RETR ", &src.path))?;
    let mode_e = s.can_mode_e() && d.can_mode_e();
    s.set_mode(mode_e).await?;
    d.set_mode(mode_e).await?;
    if mode_e {
        let n = if opts.streams > 0 { opts.streams } else { s.streams_between_servers() };
        s.set_parallelism(n, d.is_lightpath()).await?;
    }
    if !mode_e || !*linked {
        let addr = d.pasv().await?;
        let hp = hostport::format_port(addr)
            .map(|h| format!("PORT {h}"))
            .unwrap_or_else(|| format!("EPRT {}", hostport::format_eprt(addr)));
        s.ctl.ok(&hp).await?;
        *linked = mode_e;
    }
    let stamp = if mode_e && opts.part.is_none() { stamp_of(s, d, &src.path, size).await? } else { None };
    let (stor, retr) = match opts.part {
        Some((off, len)) => (format!("ESTO A {off} "), format!("ERET P {off} {len} ")),
        None => {
            // A lightpath server gives a file it makes the source's mode
            // and mtime (`OPTS STOR`); GCT's get them before their rename
            // (`job::publish`).
            let allo = format!("ALLO {size}");
            match meta.filter(|_| d.is_lightpath()) {
                Some(m) => d.ctl.ok_behind(&m.opts_for("STOR"), allo.as_bytes()).await?,
                None => d.ctl.ok(&allo).await?,
            };
            ("STOR ".to_string(), "RETR ".to_string())
        }
    };
    let kept = match &stamp {
        Some(st) => rest_both(s, d, resume.sent_of(st.clone())).await?,
        None => None,
    };
    let verbs = (retr.trim_end().to_string(), stor.trim_end().to_string());
    d.ctl.send(&path_cmd(&stor, &dst.path)).await?;
    s.ctl.send(&path_cmd(&retr, &src.path)).await?;
    s.settle().await?;
    d.settle().await?;
    let r = watch(s, d, (&verbs.0, &verbs.1), |_| {}).await.map(|(bytes, ..)| bytes);
    let r = match r {
        Ok(b) if opts.part.is_none() && !d.is_lightpath() => whole_at(d, &dst.path, size).await.map(|()| b),
        r => r,
    };
    settle_resume(d, resume, stamp, kept, r)
}

/// A destination that takes `ALLO` as a hint only (GCT, plain FTP) keeps
/// what arrived and answers 226 when the source sent less than planned
/// (its file shrank in between): its `SIZE` must reach the size planned,
/// as a download's end must ([`crate::session`]'s `check_whole`). A review
/// found such a short file published as copied. A lightpath destination
/// refuses it itself, by `ALLO`; one without `SIZE` cannot be checked.
async fn whole_at(d: &mut Session, path: &[u8], planned: u64) -> Result<(), ClientError> {
    match d.remote_size(path).await? {
        Some(n) if n < planned => {
            let name = String::from_utf8_lossy(path);
            let why = "(did the source change?); not kept";
            Err(ClientError::Local(format!("{name}: the destination holds {n} of the {planned} bytes planned {why}")))
        }
        _ => Ok(()),
    }
}

/// The source's size and stamp ([`Session::size_and_stamp`]: `MDTM`,
/// MLST's `Modify` and `Unique`) before a try that could resume (a large
/// whole file to a lightpath server, in MODE E); `None`: it cannot.
async fn stamp_of(s: &mut Session, d: &Session, path: &[u8], size: u64) -> Result<Option<Stamp>, ClientError> {
    if !d.is_lightpath() || size < RESUMABLE {
        return Ok(None);
    }
    // Without a time, nothing tells a source that changed between tries.
    Ok(match s.size_and_stamp(path).await? {
        (Some(now), Some(t)) => Some((now, Some(t))),
        _ => None,
    })
}

/// `REST` with the ranges the destination `kept` to both servers; the
/// ranges if both took them. If either refused, the other is told
/// `REST 0` and the file goes whole.
async fn rest_both(s: &mut Session, d: &mut Session, kept: Option<RangeSet>) -> Result<Option<RangeSet>, ClientError> {
    let Some(kept) = kept else { return Ok(None) };
    let rest = rest_cmd(&kept);
    // A refusal is an answer here, not a failure (`ok` made it one, and
    // the fallback below never ran: every retry sent the same REST).
    let (a, b) = (d.ctl.cmd(&rest).await?.code, s.ctl.cmd(&rest).await?.code);
    tracing::info!(kept = %kept, destination = a, source = b, "resuming a third-party copy");
    if a == 350 && b == 350 {
        return Ok(Some(kept));
    }
    for (side, code) in [(d, a), (s, b)] {
        if code == 350 {
            side.ctl.ok("REST 0").await?;
        }
    }
    Ok(None)
}

/// After a try ([`Resume::settle`]), if it could resume (`stamp`).
fn settle_resume(
    d: &mut Session,
    resume: &Resume,
    stamp: Option<Stamp>,
    kept: Option<RangeSet>,
    r: Result<u64, ClientError>,
) -> Result<u64, ClientError> {
    let confirmed = d.ctl.take_confirmed();
    let Some(stamp) = stamp else { return r };
    let gone = |_, reply: &str| format!("the destination no longer holds the partial copy ({reply})");
    resume.settle(r, (kept, confirmed), stamp, ("a third-party copy", "destination"), gone)
}

/// Read both control channels until both transfers end; returns the bytes
/// and the final replies of the source and the destination. `verbs` name
/// their transfer commands in errors. When one side fails, the other's
/// transfer is given up (waiting at most [`crate::session::ABORT_WAIT`]
/// for it) and the failure that came first, the cause, is the error.
/// `note` sees a failure reply of either side before it becomes the
/// error, and may take lines out of it ([`Reply::take_held`] from the
/// destination's, [`Reply::take_changed`] from the source's).
pub(crate) async fn watch(
    s: &mut Session,
    d: &mut Session,
    verbs: (&str, &str),
    note: impl FnMut(&mut Reply) + Send,
) -> Result<(u64, Reply, Reply), ClientError> {
    let r = watch_both(s, d, verbs, note).await;
    s.ctl.wait_at_least(std::time::Duration::ZERO);
    d.ctl.wait_at_least(std::time::Duration::ZERO);
    r
}

async fn watch_both(
    s: &mut Session,
    d: &mut Session,
    verbs: (&str, &str),
    mut note: impl FnMut(&mut Reply) + Send,
) -> Result<(u64, Reply, Reply), ClientError> {
    let (mut s_fin, mut d_fin): (Option<Reply>, Option<Reply>) = (None, None);
    let (mut seen, mut began) = (0u64, (false, false));
    let job = s.opts.control();
    let mut live = Liveness::new();
    while s_fin.is_none() || d_fin.is_none() {
        s.ctl.wait_at_least(live.stall_after());
        d.ctl.wait_at_least(live.stall_after());
        tokio::select! {
            biased;
            _ = cancelled(&job) => return Err(interrupted(s, d, s_fin.is_none(), d_fin.is_none()).await),
            _ = tokio::time::sleep_until(live.deadline()), if live.marker.is_some() => {
                let running = (s_fin.is_none(), d_fin.is_none());
                return Err(stalled((s, d), verbs, &live, running, &mut note).await);
            }
            r = s.ctl.reply(), if s_fin.is_none() => match r {
                Ok(r) => {
                    live.moved();
                    began.0 |= r.is_preliminary();
                    s_fin = (!r.is_preliminary()).then_some(r);
                }
                Err(e) => {
                    s.lost();
                    return Err(stop_other(d, verbs.1, d_fin.is_none(), e, &mut note).await);
                }
            },
            r = d.ctl.reply(), if d_fin.is_none() => match r {
                Ok(r) => {
                    live.heard(count_marker(&r, &s.opts.total, &mut seen));
                    began.1 |= r.is_preliminary();
                    d_fin = (!r.is_preliminary()).then_some(r);
                }
                Err(e) => {
                    d.lost();
                    return Err(stop_other(s, verbs.0, s_fin.is_none(), e, &mut |_| {}).await);
                }
            },
        }
        if let Some(r) = s_fin.as_mut().filter(|r| !r.is_ok()) {
            note(r);
            let e = under_way(s.ctl.unexpected(verbs.0, r), began.0);
            return Err(stop_other(d, verbs.1, d_fin.is_none(), e, &mut note).await);
        }
        if let Some(r) = d_fin.as_mut().filter(|r| !r.is_ok()) {
            note(r);
            let e = under_way(d.ctl.unexpected(verbs.1, r), began.1);
            return Err(stop_other(s, verbs.0, s_fin.is_none(), e, &mut |_| {}).await);
        }
    }
    let (sr, dr) = (s_fin.unwrap_or_else(|| Reply::new(0, "")), d_fin.unwrap_or_else(|| Reply::new(0, "")));
    Ok((seen, sr, dr))
}

/// A failure reply to a transfer that had begun (its 1xx came): GCT
/// reports a data connection that broke with its generic `500 Command
/// failed. : callback failed.`, which after the 1xx is no syntax error
/// but a broken transfer, retried as one ([`crate::DataEnd::Broke`]). It
/// was taken for a permanent refusal: a third-party copy with a GCT end
/// whose stream broke failed at once, where every two-party copy retried
/// (an interop hunt, 7 of 7 runs).
fn under_way(mut e: ClientError, began: bool) -> ClientError {
    if let ClientError::Refused { code: 500, here, .. } = &mut e {
        if began {
            *here = crate::DataEnd::Broke;
        }
    }
    e
}

/// Add what a destination's perf marker says it received to the job's count.
/// Whether `r` is a perf marker, and if so whether it says more bytes
/// arrived than `seen`.
fn count_marker(r: &Reply, total: &AtomicU64, seen: &mut u64) -> Option<bool> {
    let m = PerfMarker::from_reply(r)?;
    let more = m.bytes > *seen;
    total.fetch_add(m.bytes.saturating_sub(*seen), Ordering::Relaxed);
    *seen = (*seen).max(m.bytes);
    Some(more)
}

/// What a third-party transfer has shown of life: the source server says
/// nothing between its 1xx and its end, so once the destination sends
/// perf markers (every few seconds), `--reply-timeout` counts from its
/// last marker, and from the last one that showed data moving. A reply
/// wait begun afresh at each marker let a hung source outlast the
/// timeout (until the server's own idle limit, 120 s, or for good), and a
/// hung destination was blamed on the source (a defect hunt's find).
struct Liveness {
    /// When the destination's last perf marker came.
    marker: Option<tokio::time::Instant>,
    heard: tokio::time::Instant,
    moved: tokio::time::Instant,
    /// The longest wait seen between two perf markers (`None`: two not
    /// seen). From marker to marker: GCT sends its restart markers on a
    /// timer of their own, and a gap measured from one of those (a
    /// second before a perf marker) was far shorter than the markers'
    /// period (a review's find).
    gap: Option<std::time::Duration>,
}

impl Liveness {
    fn new() -> Liveness {
        let now = tokio::time::Instant::now();
        Liveness { marker: None, heard: now, moved: now, gap: None }
    }

    /// The destination said something: `Some(more)` a perf marker.
    fn heard(&mut self, marker: Option<bool>) {
        let now = tokio::time::Instant::now();
        self.heard = now;
        if let Some(more) = marker {
            if let Some(last) = self.marker {
                self.gap = Some(self.gap.unwrap_or_default().max(now - last));
            }
            self.marker = Some(now);
            if more {
                self.moved = now;
            }
        }
    }

    /// The longest gap between perf markers, 5 s (GCT's and serve's
    /// default) until two came; capped: a gap survived once must not
    /// stretch the limits for good (each longer one could double them).
    fn marker_gap(&self) -> std::time::Duration {
        self.gap.unwrap_or(std::time::Duration::from_secs(5)).min(std::time::Duration::from_secs(30))
    }

    /// The source said something (its 1xx or its end).
    fn moved(&mut self) {
        self.moved = tokio::time::Instant::now();
    }

    /// Whether the destination went silent: no word for one and a half
    /// of its marker gaps before the stall's deadline. One that speaks on
    /// without data shows the source stalled. Judged by `--reply-timeout`
    /// alone, a destination stopped between its first marker (0 bytes)
    /// and the next was taken for a stalled source: its silence began a
    /// moment after the source's 150 (a defect hunt). Judged at the
    /// deadline, not when the client woke: a late wake-up, replies still
    /// unread, made a speaking destination look silent (a review).
    fn silent(&self) -> bool {
        self.deadline().saturating_duration_since(self.heard) >= self.marker_gap().mul_f64(1.5)
    }

    fn deadline(&self) -> tokio::time::Instant {
        self.heard.min(self.moved) + self.stall_after()
    }

    /// How long the transfer may go without a word of progress:
    /// `--reply-timeout`, and never less than twice the longest wait
    /// between the destination's perf markers (5 s, GCT's and serve's
    /// default, until two came), which are all the client hears of the
    /// data. With `--reply-timeout 5` and markers every 5 s, a copy
    /// moving data was failed as stalled at the first marker a little
    /// late (a defect hunt's find).
    fn stall_after(&self) -> std::time::Duration {
        crate::control::reply_timeout().max(self.marker_gap() * 2)
    }
}

/// The transfer stalled past `--reply-timeout`: the destination went
/// silent (its markers stopped), or it speaks but no data reaches it (the
/// source, or the path from it, stalled). The side blamed is given up
/// (its session reopened on a retry), the other's transfer stopped.
async fn stalled(
    (s, d): (&mut Session, &mut Session),
    verbs: (&str, &str),
    live: &Liveness,
    running: (bool, bool),
    note: &mut (dyn FnMut(&mut Reply) + Send),
) -> ClientError {
    let secs = live.stall_after().as_secs();
    if live.silent() {
        d.lost();
        let why = format!("no reply for {secs} s after its perf markers: the transfer under way stalled ({})", verbs.1);
        return stop_other(s, verbs.0, running.0, ClientError::Control(d.ctl.name.clone(), why), &mut |_| {}).await;
    }
    s.lost();
    let why = format!(
        "no data reached the destination for {secs} s (its perf markers say so): the transfer under way stalled ({})",
        verbs.0
    );
    stop_other(d, verbs.1, running.1, ClientError::Control(s.ctl.name.clone(), why), note).await
}

/// Ctrl-C: both servers stop (the destination drops its temporary file).
/// The destination first: stopped after the source, it saw its data
/// connections close before its ABOR came, took that for a broken
/// transfer and kept the partial file for a resume (15 minutes of a
/// lightpath server's disk) that a third-party copy never makes, in 6 of
/// 6 runs from GCT (a defect hunt's find).
async fn interrupted(s: &mut Session, d: &mut Session, s_running: bool, d_running: bool) -> ClientError {
    if d_running {
        d.abort().await;
    }
    if s_running {
        s.abort().await;
    }
    ClientError::Local("interrupted".into())
}

/// One side failed with `first`: give up the `other` side's transfer
/// (`verb`) if it still runs, and say which failure is the cause. `note`
/// sees the other side's failure reply first.
async fn stop_other(
    other: &mut Session,
    verb: &str,
    running: bool,
    first: ClientError,
    note: &mut (dyn FnMut(&mut Reply) + Send),
) -> ClientError {
    if !running {
        return first;
    }
    let second = match other.abandon_transfer().await {
        Ok(mut r) if r.is_error() => {
            note(&mut r);
            Some(other.ctl.unexpected(verb, &r))
        }
        Ok(_) => None,
        Err(e) => Some(e),
    };
    cause(first, second)
}

/// The failure to report of two: the first read, unless only the second
/// is a permanent refusal (5xx), or the first is only a data connection
/// that failed (425, 426) and the second a refusal of another kind (a
/// source's 451 naming a path it cannot send). Both may be waiting when
/// the first is read, and a refused file is what makes the other side's
/// data connection fail, not the other way round.
fn cause(first: ClientError, second: Option<ClientError>) -> ClientError {
    let permanent = |e: &ClientError| matches!(e, ClientError::Refused { code, .. } if *code >= 500);
    let data = |e: &ClientError| matches!(e, ClientError::Refused { code: 425 | 426, .. });
    let refusal = |e: &ClientError| matches!(e, ClientError::Refused { .. }) && !data(e);
    match second {
        Some(e) if permanent(&e) && !permanent(&first) => e,
        Some(e) if data(&first) && refusal(&e) => e,
        _ => first,
    }
}

#[cfg(test)]
mod tests {
    use super::{cause, under_way, Liveness};
    use crate::ClientError;
    use std::time::Duration;

    async fn after(secs: f64) {
        tokio::time::advance(Duration::from_secs_f64(secs)).await;
    }

    /// Perf markers every 5 s with restart markers a second before each
    /// (GCT's two timers): the gap is 5 s, not 1.
    #[tokio::test(start_paused = true)]
    async fn the_marker_gap_runs_from_perf_marker_to_perf_marker() {
        let mut live = Liveness::new();
        for _ in 0..3 {
            after(4.0).await;
            live.heard(None);
            after(1.0).await;
            live.heard(Some(true));
        }
        assert_eq!(live.marker_gap(), Duration::from_secs(5));
    }

    /// A destination that stopped after its first marker (no data yet) is
    /// silent at the deadline; one that speaks on without data is not
    /// (the source stalled), whenever the client wakes.
    #[tokio::test(start_paused = true)]
    async fn a_silent_destination_is_told_from_a_stalled_source() {
        let mut stopped = Liveness::new();
        after(0.3).await;
        stopped.heard(Some(false));
        assert!(stopped.silent());
        let mut speaking = Liveness::new();
        speaking.heard(Some(true));
        for _ in 0..2 {
            after(1.0).await;
            speaking.heard(Some(true));
        }
        while tokio::time::Instant::now() < speaking.deadline() {
            after(1.0).await;
            speaking.heard(Some(false));
        }
        // Replies unread, the client woke late.
        after(7.0).await;
        assert!(!speaking.silent(), "judged at the deadline, however late the wake-up");
    }

    fn refused(code: u16) -> ClientError {
        ClientError::Refused {
            server: "h:1".into(),
            cmd: "STOR".into(),
            reply: format!("{code} x"),
            code,
            here: crate::DataEnd::Fine,
        }
    }

    #[test]
    fn the_first_failure_is_reported_unless_the_second_is_its_cause() {
        let lost = || ClientError::Control("h:1".into(), "server closed the control connection".into());
        let code = |e: ClientError| match e {
            ClientError::Refused { code, .. } => code,
            _ => 0,
        };
        assert_eq!(code(cause(refused(550), Some(refused(426)))), 550);
        assert_eq!(code(cause(refused(550), Some(lost()))), 550);
        assert_eq!(code(cause(refused(550), None)), 550);
        assert_eq!(code(cause(refused(551), Some(refused(550)))), 551);
        assert_eq!(code(cause(refused(426), Some(refused(550)))), 550);
        assert_eq!(code(cause(lost(), Some(refused(550)))), 550);
        assert_eq!(code(cause(refused(425), Some(refused(426)))), 425);
        assert_eq!(code(cause(refused(426), Some(refused(451)))), 451, "the source's reason");
        assert_eq!(code(cause(refused(451), Some(refused(426)))), 451);
        assert_eq!(code(cause(refused(426), Some(lost()))), 426);
    }

    /// GCT's `500 Command failed. : callback failed.` after the 1xx is a
    /// broken transfer, tried again; before it, or a file's 550, is not.
    #[test]
    fn a_500_under_way_is_a_broken_transfer() {
        assert!(under_way(refused(500), true).is_transient());
        assert!(!under_way(refused(500), false).is_transient());
        assert!(!under_way(refused(550), true).is_transient());
        assert!(under_way(refused(426), true).is_transient());
        // And it still wins over the other side's lost connection as the
        // cause, now retried.
        let lost = ClientError::Control("h:1".into(), "closed".into());
        assert!(cause(lost, Some(under_way(refused(500), true))).is_transient());
    }
}

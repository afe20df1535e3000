//! Running one data transfer for a session (on a blocking thread): open the
//! file or listing, get the data connections, move the bytes, and make an
//! upload visible under its name only when it is complete.

use crate::fsops::{io_reply, DEV_NULL, DEV_ZERO};
use crate::listing::held::Held;
use crate::listing::{facts, list_line, Rights};
use crate::partial::{self, Owner};
use crate::reserve::Reservation;
use lightpath_engine::dio::{file_sink, DirectFileSource};
use lightpath_engine::{
    Control, DataChannel, EngineError, FileSource, Growth, NullSink, RecvOpts, SendPlan, Sink, Source, ZeroSource,
    DEFAULT_BLOCK,
};
use lightpath_proto::{Mode, RangeSet, Reply, Restart, Transfer, TransferKind, VPath};
use lightpath_sys::root::{Allowed, FileType, Root, Stat, TempFile, WriteMode};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Largest file we accept (offset bound for hostile block headers).
pub const MAX_FILE: u64 = 1 << 50;

/// Sent once the data connection is ready: whether it is reused.
pub type Ready = oneshot::Sender<Result<bool, Reply>>;

enum Target {
    Temp(TempFile),
    InPlace(File),
    Null,
}

impl Target {
    fn file(&self) -> Option<&File> {
        match self {
            Target::Temp(t) => Some(t.file()),
            Target::InPlace(f) => Some(f),
            Target::Null => None,
        }
    }

    /// Where blocks are written: directly (`direct`, where the file system
    /// allows it) or through the page cache.
    fn sink(&self, direct: bool) -> Box<dyn Sink + '_> {
        match self.file() {
            Some(f) => file_sink(f, direct, "upload"),
            None => Box::new(NullSink),
        }
    }
}

/// What the session knows of the path to its client.
#[derive(Debug)]
pub struct ClientPath {
    /// The control connection's RTT (from the handshake).
    pub rtt: Duration,
    /// The client is on this host: its control connection comes from a
    /// loopback address.
    pub loopback: bool,
    /// The control connection (a duplicate) while its RTT is unknown: a
    /// client that logged in with TCP Fast Open sends an upload's STOR in
    /// its first flight, before the handshake's last ACK, which gives the
    /// first sample ([`ClientPath::learn_rtt`]).
    pub control: Option<OwnedFd>,
    /// Who the client is: a partial upload is only theirs to resume.
    pub owner: Owner,
}

/// Longest an upload waits for an unknown RTT ([`ClientPath::learn_rtt`]).
const RTT_WAIT: Duration = Duration::from_secs(2);

impl ClientPath {
    /// The RTT, waited for (at most [`RTT_WAIT`]) when the login left it
    /// unknown. Called with the 1xx reply out: the client's first bytes
    /// come after its handshake's last ACK, so the wait costs nothing.
    fn learn_rtt(&mut self) -> Duration {
        let Some(c) = self.control.take() else { return self.rtt };
        let until = Instant::now() + RTT_WAIT;
        while self.rtt.is_zero() && Instant::now() < until {
            match lightpath_sys::net::tcp_rtt(&c) {
                Ok(r) if r.is_zero() => std::thread::sleep(Duration::from_millis(1)),
                Ok(r) => self.rtt = r,
                Err(_) => break,
            }
        }
        self.rtt
    }
}

/// Run `t`. Returns bytes moved, or the error reply.
pub fn execute(
    ctx: &crate::ServerCtx,
    dc: &mut DataChannel,
    t: Transfer,
    ctl: &Control,
    ready: Ready,
    path: ClientPath,
) -> Result<u64, Reply> {
    let (root, cfg) = (&ctx.root, &ctx.cfg);
    if crate::fsops::is_upload_in_progress(&t.path) {
        return fail_early(ready, crate::fsops::in_progress(&t.path));
    }
    match t.kind {
        TransferKind::VfileRetr => return crate::vfile::send(root, dc, &t, ctl, ready),
        TransferKind::VfileStor => return crate::vfile::receive(ctx, dc, &t, ctl, ready, path),
        _ => {}
    }
    if t.kind.is_upload() {
        return upload(ctx, dc, t, ctl, ready, path);
    }
    match open_source(root, cfg, &t, ctl).and_then(|f| file_source(f, cfg.direct_io, path.loopback, &t)) {
        Ok(src) => {
            let sent = send(dc, &t, src.as_ref(), ctl, ready)?;
            unchanged(src.as_ref(), &t)?;
            Ok(sent)
        }
        Err(r) => fail_early(ready, r),
    }
}

/// A download is its file as it was when it began: one written to while
/// it was sent (grown, rewritten) fails naming it, as a shrunk one does
/// at the short read, instead of passing for a copy of the file. The
/// engine asks the source ([`Source::unchanged`]) before the data ends;
/// asked again here, a change in between still fails the reply. A tree's
/// files are checked so by the pack.
fn unchanged(src: &dyn Source, t: &Transfer) -> Result<(), Reply> {
    src.unchanged().map_err(|e| changed_reply(Some(&t.path), &e))
}

/// The reply to a download whose file changed while it was sent: `450`
/// (transient: the file is there, and a client that asks again gets it
/// whole), where a disk error is a `451`. Our client tries again so.
fn changed_reply(p: Option<&VPath>, why: &dyn std::fmt::Display) -> Reply {
    let at = p.map(|p| format!("{}: ", p.display())).unwrap_or_default();
    Reply::new(450, format!("{at}{why}; the copy is not whole, try again"))
}

/// An upload, and the ranges its `REST` said the server already has.
struct Upload {
    t: Transfer,
    claims: RangeSet,
}

/// A new file goes into a temporary one ([`open_target`]); a `STOR` after
/// `REST` resumes the partial upload kept from its earlier try
/// ([`crate::partial`]), or is refused.
fn upload(
    ctx: &crate::ServerCtx,
    dc: &mut DataChannel,
    mut t: Transfer,
    ctl: &Control,
    ready: Ready,
    path: ClientPath,
) -> Result<u64, Reply> {
    let Some(claims) = partial::claims(&t) else {
        let why = "only a MODE E upload kept here resumes, from the ranges its 111 markers named; send the whole file";
        return fail_early(ready, Reply::new(554, format!("{}: Restart refused: {why}.", t.path.display())));
    };
    let opened = if claims.is_empty() {
        if t.kind == TransferKind::Stor {
            t.restart = None; // REST 0: a whole upload
        }
        // A whole upload replaces what an earlier try of it left kept:
        // a later restart resumed that older try's bytes, then the new
        // ones, published with 226 (a defect hunt).
        drop(ctx.partials.take(Instant::now(), &path.owner, t.path.as_bytes()));
        open_target(&ctx.root, ctx.cfg.memory_paths, &t)
    } else {
        take_partial(ctx, &mut t, &claims, &path.owner).map(|f| (Target::Temp(f), None))
    };
    // A reservation ALLO made lasts as long as the transfer.
    match opened {
        Ok((target, _reserved)) => receive(ctx, dc, &Upload { t, claims }, target, ctl, ready, path),
        Err(r) => fail_early(ready, r),
    }
}

/// The partial upload `t` resumes, if the server kept one that holds
/// `claims` ([`partial::check`]). Its size, if its first try announced
/// one (ALLO), is the resumed upload's too: without ALLO, a resume that
/// sent less was published at that size, the rest zeros (a defect hunt).
fn take_partial(ctx: &crate::ServerCtx, t: &mut Transfer, claims: &RangeSet, who: &Owner) -> Result<TempFile, Reply> {
    let (p, expired) = ctx.partials.take(Instant::now(), who, t.path.as_bytes());
    drop(expired);
    partial::check(t, claims, p.as_ref())?;
    let p = p.expect("checked");
    t.allo = t.allo.or(p.size);
    tracing::info!(path = %t.path.display(), have = %p.have, claims = %claims, "resuming a partial upload");
    Ok(p.file)
}

/// A MODE E `STOR` whose data or control connection broke (not a disk,
/// not an `ABOR`) keeps what it wrote, if that is worth a restart
/// ([`partial::MIN_KEPT`]), for the client's next try ([`crate::partial`]).
fn keep_partial(ctx: &crate::ServerCtx, up: &Upload, target: Target, ctl: &Control, who: &Owner, e: &EngineError) {
    let Target::Temp(tmp) = target else { return };
    let broke = e.is_transient() || (matches!(e, EngineError::Aborted) && ctl.is_lost());
    let (stor, mode) = (up.t.kind == TransferKind::Stor, up.t.settings.mode);
    if !(stor && mode == Mode::Extended && broke) {
        return;
    }
    let have = up.claims.clone().union(&ctl.written());
    if have.covered() < partial::MIN_KEPT {
        return;
    }
    tracing::info!(path = %up.t.path.display(), have = %have, "partial upload kept for a restart");
    // Its ALLO reservation ends with this transfer: the space allocated
    // for what did not arrive goes back too. Kept whole, a client that
    // broke uploads after 1 MiB held half the free space each time.
    if let Some(size) = up.t.allo {
        for (a, b) in have.missing(size).ranges() {
            if let Err(e) = lightpath_sys::file::punch_hole(tmp.file(), a, b - a) {
                tracing::debug!("partial upload: space past what arrived not given back: {e}");
                break;
            }
        }
    }
    let dropped = ctx.partials.keep(Instant::now(), (who.clone(), up.t.path.as_bytes()), tmp, have, &up.t);
    drop(dropped);
}

/// Report a failure before any data moved (the session sends `r` instead of 150).
pub(crate) fn fail_early(ready: Ready, r: Reply) -> Result<u64, Reply> {
    let _ = ready.send(Err(r));
    Err(Reply::new(0, ""))
}

fn is_mem(memory: bool, p: &VPath, name: &[u8]) -> bool {
    memory && p.as_bytes() == name
}

/// What a download reads: a listing, memory, or the file (see [`file_source`]).
enum Opened {
    Ready(Box<dyn Source>),
    File(File),
}

/// A listing's names left out go to `ctl` ([`listing`]).
fn open_source(root: &Root, cfg: &crate::ServerConfig, t: &Transfer, ctl: &Control) -> Result<Opened, Reply> {
    let memory = cfg.memory_paths;
    match t.kind {
        TransferKind::Mlsd | TransferKind::List | TransferKind::Nlst => {
            return listing(root, t.may_write, t).map(|(b, left_out)| {
                ctl.set_skipped(left_out);
                Opened::Ready(Box::new(b))
            })
        }
        _ => {}
    }
    if is_mem(memory, &t.path, DEV_ZERO) {
        return match t.kind {
            TransferKind::Eret { offset, len } => {
                Ok(Opened::Ready(Box::new(ZeroSource::new(offset.saturating_add(len)))))
            }
            _ => Err(Reply::new(501, "/dev/zero needs ERET with a length")),
        };
    }
    root.open_read(t.path.relative()).map(Opened::File).map_err(|e| io_reply(&t.path, &e))
}

/// The source for a file to send: `sendfile` from the page cache, or
/// direct reads into the engine's buffers ([`lightpath_plan::direct_read_for`]).
fn file_source(
    o: Opened,
    mode: lightpath_plan::DirectIo,
    loopback: bool,
    t: &Transfer,
) -> Result<Box<dyn Source>, Reply> {
    let f = match o {
        Opened::Ready(s) => return Ok(s),
        Opened::File(f) => f,
    };
    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut cached = None;
    let probe = || {
        cached = cached_estimate(&f, size);
        cached
    };
    if lightpath_plan::direct_read_for(mode, loopback, size, probe) {
        let src = DirectFileSource::new(f, false).map_err(|e| io_reply(&t.path, &e))?;
        tracing::info!(size, ?cached, mode = %src.mode(), "download read directly, not with sendfile");
        return Ok(Box::new(src));
    }
    tracing::info!(size, ?cached, "download sent with sendfile (zero copy from the page cache)");
    Ok(Box::new(FileSource::new(f, true).map_err(|e| io_reply(&t.path, &e))?))
}

/// Bytes of `f` in the page cache, estimated from [`CACHE_PROBES`] probes,
/// one at a varying place in each equal part of its `size` bytes (a probe
/// may read ahead around itself, so the same places would soon all look
/// cached); `None` if the kernel cannot say.
fn cached_estimate(f: &File, size: u64) -> Option<u64> {
    let part = size / CACHE_PROBES;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    let within = u64::from(nanos).wrapping_mul(0x9E37_79B9_7F4A_7C15) % part.max(1);
    let mut hits = 0;
    for i in 0..CACHE_PROBES {
        hits += u64::from(lightpath_sys::file::is_cached_at(f, part * i + within)?);
    }
    Some(part * hits)
}

/// Probes of [`cached_estimate`]: each costs a system call and may start
/// a small readahead.
const CACHE_PROBES: u64 = 4;

fn open_target(root: &Root, memory: bool, t: &Transfer) -> Result<(Target, Option<Reservation>), Reply> {
    if is_mem(memory, &t.path, DEV_NULL) {
        return Ok((Target::Null, None));
    }
    let rel = t.path.relative();
    let in_place = matches!(t.kind, TransferKind::Esto { .. } | TransferKind::Appe) || t.restart.is_some();
    let r = if in_place {
        root.open_write(rel, WriteMode::InPlace).map(|f| (Target::InPlace(f), None))
    } else {
        // Refused if the server could not write the old file in place.
        // A file made new gets the mode `OPTS STOR` gave, one replaced
        // keeps its own.
        let new_mode = t.meta.map(|m| m.applied_mode());
        root.create_temp_replacing(rel, new_mode).and_then(|tmp| {
            // Full size at once: a STOR with ALLO must cover it all
            // (`check_complete`), or the temporary file is removed.
            let held = crate::reserve::size_upload(&tmp, t.allo.unwrap_or(0))?;
            Ok((Target::Temp(tmp), held))
        })
    };
    r.map_err(|e| match e.kind() {
        std::io::ErrorKind::StorageFull => Reply::new(552, format!("{}: {e}", t.path.display())),
        _ => io_reply(&t.path, &e),
    })
}

/// File ranges to send and the wire offset base.
fn send_ranges(t: &Transfer, len: u64) -> (Vec<(u64, u64)>, u64) {
    match (&t.kind, &t.restart) {
        (TransferKind::Eret { offset, len: l }, _) => {
            let start = (*offset).min(len);
            (vec![(start, offset.saturating_add(*l).min(len))], *offset)
        }
        (_, Some(Restart::Offset(o))) => (vec![((*o).min(len), len)], 0),
        (_, Some(Restart::Ranges(have))) => (have.missing(len).ranges().to_vec(), 0),
        _ => (vec![(0, len)], 0),
    }
}

fn send(dc: &mut DataChannel, t: &Transfer, src: &dyn Source, ctl: &Control, ready: Ready) -> Result<u64, Reply> {
    let (ranges, wire_base) = send_ranges(t, src.len());
    if t.settings.mode == Mode::Stream {
        let _ = ready.send(Ok(false));
        let conn = dc.open_stream().map_err(data_reply)?;
        let (s, e) = ranges.first().copied().unwrap_or((0, 0));
        return dc.send_s(conn, src, s, e, ctl).map_err(file_reply(&t.path));
    }
    let reused = match dc.prepare_send(t.settings.parallelism) {
        Ok(r) => r,
        Err(e) => return fail_early(ready, Reply::new(425, format!("Can't open data connection: {e}"))),
    };
    let _ = ready.send(Ok(reused));
    // A receiver that asked for bigger blocks (a lightpath client) gets
    // them while much is left; GCT never asks.
    let grow =
        t.settings.block_size.filter(|&b| b > DEFAULT_BLOCK).map(|max| Growth { max, streams: t.settings.parallelism });
    let plan = SendPlan { ranges, wire_base, block: DEFAULT_BLOCK, grow };
    dc.send_e(src, &plan, ctl).map_err(file_reply(&t.path))
}

fn receive(
    ctx: &crate::ServerCtx,
    dc: &mut DataChannel,
    up: &Upload,
    target: Target,
    ctl: &Control,
    ready: Ready,
    mut path: ClientPath,
) -> Result<u64, Reply> {
    let (t, cfg) = (&up.t, &ctx.cfg);
    let base = upload_base(t, &target);
    let moved = if t.settings.mode == Mode::Stream {
        let _ = ready.send(Ok(false));
        let direct = upload_io(dc, cfg, &mut path, t);
        let conn = dc.open_stream().map_err(data_reply)?;
        let sink = target.sink(direct);
        let n =
            dc.recv_s(conn, sink.as_ref(), base, MAX_FILE - base.min(MAX_FILE), ctl).map_err(file_reply(&t.path))?;
        if t.allo.is_none() && client_went_away(ctl) {
            tracing::info!(path = %t.path.display(), n, "stream upload ended with its client's control connection: not kept");
            return Err(Reply::new(426, "Connection closed: the client went away as the data ended; file not kept."));
        }
        n
    } else {
        let reused = match dc.prepare_recv() {
            Ok(r) => r,
            Err(e) => return fail_early(ready, Reply::new(425, format!("Can't open data connection: {e}"))),
        };
        let _ = ready.send(Ok(reused));
        let direct = upload_io(dc, cfg, &mut path, t);
        let opts = RecvOpts { base, max_offset: MAX_FILE, idle: dc.idle };
        let r = dc.recv_e(target.sink(direct).as_ref(), &opts, ctl);
        let got = match r {
            Ok(got) => got,
            Err(e) => {
                tracing::debug!(path = %t.path.display(), error = %e, lost = ctl.is_lost(), "upload failed");
                keep_partial(ctx, up, target, ctl, &path.owner, &e);
                return Err(file_reply(&t.path)(e));
            }
        };
        let moved = got.covered();
        if let Err(r) = check_complete(t, &got.union(&up.claims)) {
            tracing::debug!(path = %t.path.display(), reply = %r.text(), "upload incomplete");
            return Err(r);
        }
        moved
    };
    // A whole file stored (STOR) must be the size it announced; ESTO and
    // APPE write into a file in place, and GCT takes their ALLO as a hint
    // (`globus-url-copy -len` past the end of its source announces the
    // length it asked for, then sends what there is).
    let whole = t.kind == TransferKind::Stor && t.restart.is_none();
    if let Some(n) = t.allo.filter(|_| whole && t.settings.mode == Mode::Stream) {
        if moved != n {
            return Err(Reply::new(451, format!("Transfer incomplete: got {moved} of {n} bytes announced by ALLO.")));
        }
    }
    finish(target, t, cfg.fsync)?;
    Ok(moved)
}

/// How long a stream-mode upload without `ALLO` waits, once its data
/// connection closed, to see whether the control connection closes too
/// (it comes within a millisecond or two on loopback; the margin is for
/// a loaded machine). Each such upload's 226 waits this long: GCT's
/// client sends `ALLO`, and lightpath's uploads to us in MODE E.
const STREAM_END_GRACE: Duration = Duration::from_millis(50);

/// In MODE S the close of the data connection is the end of the file:
/// without `ALLO` the size is not known, and a client killed mid-upload
/// (its kernel closes both connections at once) looked like one that
/// finished. A client that did finish keeps its control connection open
/// for the 226; one whose control connection ends within
/// [`STREAM_END_GRACE`] of the data went away, and its file is not kept.
fn client_went_away(ctl: &Control) -> bool {
    ctl.peer_closed_within(STREAM_END_GRACE)
}

/// Where an upload's bytes start in the file.
fn upload_base(t: &Transfer, target: &Target) -> u64 {
    match (&t.kind, &t.restart) {
        (TransferKind::Esto { offset }, _) => *offset,
        (_, Some(Restart::Offset(o))) => *o,
        (TransferKind::Appe, _) => match target {
            Target::InPlace(f) => f.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        },
        _ => 0,
    }
}

/// With an upload's 1xx out: an RTT the login left unknown is learned
/// ([`ClientPath::learn_rtt`]), and the data connections get the start
/// receive window of it. Returns the RTT in µs, and whether it was learned.
pub(crate) fn learn_path(dc: &mut DataChannel, cfg: &crate::ServerConfig, path: &mut ClientPath) -> (u64, bool) {
    let unknown = path.rtt.is_zero();
    let rtt_us = path.learn_rtt().as_micros() as u64;
    if unknown && rtt_us > 0 {
        crate::session::retune(dc, cfg.congestion.as_deref(), path.rtt);
    }
    (rtt_us, unknown)
}

/// How an upload is written, decided with its 1xx out ([`learn_path`]):
/// whether with direct I/O ([`lightpath_plan::direct_io_for`]).
fn upload_io(dc: &mut DataChannel, cfg: &crate::ServerConfig, path: &mut ClientPath, t: &Transfer) -> bool {
    let (rtt_us, unknown) = learn_path(dc, cfg, path);
    let size = t.allo.unwrap_or(0);
    let direct = lightpath_plan::direct_io_for(cfg.direct_io, rtt_us, size, cfg.fsync);
    if direct {
        tracing::info!(rtt_us, size, learned = unknown, "upload written with direct I/O");
    }
    direct
}

/// In MODE E the sender says when it is done. A new upload, or a resumed
/// one with what it had (`got`), must be one range from 0 (blocks are
/// placed by offset, so a sender that skipped one would leave a hole of
/// zeros); with ALLO we also know its size.
fn check_complete(t: &Transfer, got: &RangeSet) -> Result<(), Reply> {
    if t.kind != TransferKind::Stor {
        return Ok(());
    }
    if let Some(n) = t.allo.filter(|&n| n > 0 && !got.contains_range(0, n)) {
        return Err(Reply::new(451, format!("Transfer incomplete: ranges {got} of {n} bytes announced by ALLO.")));
    }
    if !got.is_contiguous_from(0) {
        return Err(Reply::new(451, format!("Transfer incomplete: the blocks received ({got}) leave holes.")));
    }
    Ok(())
}

/// Publish a complete upload; with `--fsync` its data reaches the disk first.
/// A STOR that `OPTS STOR` gave a `Modify` gets that mtime first.
fn finish(target: Target, t: &Transfer, fsync: bool) -> Result<(), Reply> {
    let p = &t.path;
    let mtime = t.meta.and_then(|m| m.mtime_ns).map(lightpath_engine::vfile::system_time);
    if let (Some(f), Some(mtime)) = (target.file(), mtime) {
        f.set_modified(mtime).map_err(|e| io_reply(p, &e))?;
    }
    let sync = |f: &File| if fsync { f.sync_data().map_err(|e| io_reply(p, &e)) } else { Ok(()) };
    match target {
        Target::Temp(tmp) => {
            sync(tmp.file())?;
            tmp.commit().map_err(|e| io_reply(p, &e))
        }
        Target::InPlace(f) => sync(&f),
        Target::Null => Ok(()),
    }
}

pub(crate) fn data_reply(e: EngineError) -> Reply {
    data_reply_at(None, e)
}

/// [`data_reply`] for the transfer of one file: the engine does not know
/// its name ("writing data: No space left on device"), the reply names it.
fn file_reply(p: &VPath) -> impl Fn(EngineError) -> Reply + '_ {
    move |e| data_reply_at(Some(p), e)
}

fn data_reply_at(p: Option<&VPath>, e: EngineError) -> Reply {
    let at = p.map(|p| format!("{}: ", p.display())).unwrap_or_default();
    match e {
        EngineError::Io { ref source, .. } if e.source_changed() => changed_reply(p, source),
        EngineError::Setup(_) => Reply::new(425, format!("Can't open data connection: {e}")),
        EngineError::Aborted => Reply::new(426, "Transfer aborted."),
        // Other transfers hold what this one needs: transient, not the file's.
        EngineError::Io { ref source, .. } if source.kind() == std::io::ErrorKind::ResourceBusy => {
            Reply::new(450, format!("Server busy: {at}{e}"))
        }
        // "Local" in RFC 959's sense (the server's own), which a client's
        // user read as their own disk: said as the server's.
        EngineError::Io { ref context, .. } if context.starts_with("writing") || context.starts_with("reading") => {
            Reply::new(451, format!("Error on the server's disk: {at}{e}"))
        }
        _ => Reply::new(426, format!("Data connection failed: {at}{e}")),
    }
}

/// A listing of `t.path`, and how many names it left out (a line break in
/// them), for the final reply ([`Reply::with_names_left_out`]).
fn listing(root: &Root, writable: bool, t: &Transfer) -> Result<(Held, u64), Reply> {
    let (out, left_out) = {
        let Some(_turn) = crate::listing::held::build_slot(crate::listing::held::SLOT_WAIT) else {
            return Err(Reply::new(450, "Server busy: other listings are being built; try again"));
        };
        build_listing(root, writable, t)?
    };
    let busy = |held: usize| {
        let mib = held >> 20;
        Reply::new(450, format!("Server busy: listings of other sessions hold {mib} MiB not yet read; try again"))
    };
    Ok((Held::take(out).map_err(busy)?, left_out))
}

/// [`listing`]'s bytes.
fn build_listing(root: &Root, writable: bool, t: &Transfer) -> Result<(Vec<u8>, u64), Reply> {
    let p = &t.path;
    let (st, own, parent) = root.stat_allowed(p.relative()).map_err(|e| io_reply(p, &e))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return match t.kind {
            TransferKind::Mlsd => Err(Reply::new(501, format!("{}: Not a directory", p.display()))),
            TransferKind::List => Ok((list_line(&st, p.file_name()), 0)),
            _ => Ok(([p.file_name(), b"\r\n"].concat(), 0)),
        };
    }
    let mut out = Vec::new();
    if t.kind == TransferKind::Mlsd {
        out.extend_from_slice(format!("{} .\r\n", facts(&st, b".", Rights { own, parent, writable })).as_bytes());
    }
    // The entries' names are in this directory: it decides DELE and RNFR.
    let (here, mut left_out) = (Some(own), 0);
    for (name, lst, allowed) in entries(root, t).map_err(|e| io_reply(p, &e))? {
        if name.iter().any(|&b| b == b'\r' || b == b'\n') {
            // A listing line per name: this one would end early and make its
            // tail a forged entry of its own, so it is not listed; the
            // final reply says how many were not.
            let shown = lightpath_proto::manifest::show(&name);
            tracing::warn!("{}: not listing a name with a line break: \"{shown}\"", p.display());
            left_out += 1;
            continue;
        }
        if lightpath_sys::root::is_temp_name(&name) {
            continue; // an upload in progress (`fsops::is_upload_in_progress`)
        }
        let child = [p.relative(), b"/", &name].concat();
        let link = FileType::from_raw_mode(lst.st_mode) == FileType::Symlink;
        let (st, own) = if link {
            match root.stat_allowed(&child) {
                Ok((st, own, _)) => (st, own),
                Err(_) => continue, // dangling or leaving the root: not shown
            }
        } else {
            (lst, allowed)
        };
        let slink = link.then(|| slink_fact(root, &child));
        entry_line(&mut out, t.kind.clone(), (&st, slink), &name, Rights { own, parent: here, writable });
    }
    Ok((out, left_out))
}

/// A directory's entries, with the rights MLSD shows (LIST and NLST do not
/// need them).
fn entries(root: &Root, t: &Transfer) -> std::io::Result<Vec<(Vec<u8>, Stat, Allowed)>> {
    if t.kind == TransferKind::Mlsd {
        return root.read_dir_allowed(t.path.relative());
    }
    Ok(root.read_dir(t.path.relative())?.into_iter().map(|(n, st)| (n, st, Allowed::default())).collect())
}

/// MLSD's `UNIX.slink=<target>;` fact (GCT's) for a symlink shown as what
/// it points to: a client walking the tree knows it for a link, and does
/// not go down a link to a directory (`self -> .` looped). A target that
/// a fact cannot hold (`;`, a space, a line break, non-UTF-8) is left
/// empty: the fact still says it is a link.
fn slink_fact(root: &Root, rel: &[u8]) -> String {
    let target = root.read_link(rel).unwrap_or_default();
    let plain = std::str::from_utf8(&target).ok().filter(|t| !t.contains([';', ' ', '\r', '\n']));
    format!("UNIX.slink={};", plain.unwrap_or(""))
}

fn entry_line(out: &mut Vec<u8>, kind: TransferKind, (st, slink): (&Stat, Option<String>), name: &[u8], r: Rights) {
    match kind {
        TransferKind::Mlsd => {
            out.extend_from_slice(facts(st, name, r).as_bytes());
            out.extend_from_slice(slink.unwrap_or_default().as_bytes());
            out.push(b' ');
            out.extend_from_slice(name);
            out.extend_from_slice(b"\r\n");
        }
        TransferKind::List => out.extend_from_slice(&list_line(st, name)),
        _ => {
            out.extend_from_slice(name);
            out.extend_from_slice(b"\r\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn path(rtt: Duration, control: Option<OwnedFd>) -> ClientPath {
        let owner = crate::partial::Owner { user: "u".into(), ip: None };
        ClientPath { rtt, loopback: true, control, owner }
    }

    /// A tree that failed because every tree together held the room is
    /// told to try again (450), not blamed on its data (451, final).
    #[test]
    fn a_busy_receiver_answers_450() {
        let busy = std::io::Error::from(lightpath_engine::vfile::VfileError::Busy(8192));
        assert_eq!(data_reply(EngineError::io("writing data", busy)).code, 450);
        let full = std::io::Error::from(std::io::ErrorKind::StorageFull);
        let r = data_reply(EngineError::io("writing data", full));
        assert_eq!(r.code, 451);
        assert!(r.text().starts_with("Error on the server's disk"), "not the client's: {}", r.text());
        // A download's file that shrank while sent: ask again (450).
        let short = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        assert_eq!(data_reply(EngineError::sending("data connection 1", short)).code, 450);
    }

    #[test]
    fn an_unknown_rtt_is_learned_from_the_control_connection() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (accepted, _) = l.accept().unwrap();
        let dup = accepted.as_fd().try_clone_to_owned().unwrap();
        let mut p = path(Duration::ZERO, Some(dup));
        assert!(!p.learn_rtt().is_zero(), "the handshake gave a sample");
        assert!(p.control.is_none(), "asked once");
        // Known already, or nothing to ask: as it was.
        let known = Duration::from_millis(95);
        assert_eq!(path(known, None).learn_rtt(), known);
        assert_eq!(path(Duration::ZERO, None).learn_rtt(), Duration::ZERO);
        // Not a TCP socket: no wait, still unknown.
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let started = Instant::now();
        let mut p = path(Duration::ZERO, Some(udp.as_fd().try_clone_to_owned().unwrap()));
        assert_eq!(p.learn_rtt(), Duration::ZERO);
        assert!(started.elapsed() < RTT_WAIT / 2);
    }
}

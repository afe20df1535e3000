//! Pure planning for the data mover: which bytes go in which block. No I/O,
//! no clock, no locks: the engine wraps a [`BlockCursor`] in whatever
//! synchronisation its threads need.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod placement;

/// What a sender must send: absolute file ranges (half-open, in order) and
/// the base subtracted from file offsets on the wire (ERET sends its part
/// as a new virtual file starting at 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendPlan {
    /// File ranges `[start, end)` to send, in order.
    pub ranges: Vec<(u64, u64)>,
    /// Subtracted from file offsets on the wire.
    pub wire_base: u64,
    /// Largest block (the only size unless `grow` says otherwise).
    pub block: u64,
    /// Bigger blocks while much is left to send.
    pub grow: Option<Growth>,
}

/// Blocks bigger than the plan's `block` while much is left: each is the
/// bytes left divided by [`GROWTH_TAPER`] blocks per stream, rounded down
/// to whole `block`s, within `[block, max]` (guided self-scheduling). A
/// block costs the sender a header, a `sendfile` and a hand-over between
/// threads, and the receiver a header read: 1 MiB blocks cut the server's
/// CPU for a 1 GiB download over 8 streams from 0.125 to 0.092 s (6 hand
/// runs each, interleaved). Near the end they shrink back to `block`, so the
/// last blocks, which each stream carries at its share of the path, end
/// together: a 1 MiB block on one of 32 streams sharing 1 Gbit/s takes
/// 0.28 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Growth {
    /// Largest block.
    pub max: u64,
    /// Streams that share the blocks.
    pub streams: u32,
}

/// Blocks per stream that the bytes left are cut into at least (see [`Growth`]).
pub const GROWTH_TAPER: u64 = 4;

impl Growth {
    /// The block length for `left` bytes still to hand out, with `block`
    /// the plan's base size.
    pub fn block_for(&self, left: u64, block: u64) -> u64 {
        let share = left / (u64::from(self.streams.max(1)) * GROWTH_TAPER);
        (share / block * block).clamp(block, self.max.max(block))
    }
}

impl SendPlan {
    /// Bytes the plan sends.
    pub fn bytes(&self) -> u64 {
        self.ranges.iter().map(|(s, e)| e.saturating_sub(*s)).sum()
    }
}

/// One block: file offset and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Absolute file offset.
    pub offset: u64,
    /// Length (at most the plan's block size, never 0).
    pub len: u64,
}

/// Hands out the blocks of a plan one at a time, in file order. Every byte
/// of every range is in exactly one block; no block crosses a range end.
#[derive(Debug, Clone, Default)]
pub struct BlockCursor {
    idx: usize,
    pos: u64,
    /// Bytes not yet handed out (known from the first block on).
    left: Option<u64>,
}

impl BlockCursor {
    /// A cursor at the start of a plan.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next block, `None` when the plan is exhausted.
    pub fn next_block(&mut self, plan: &SendPlan) -> Option<Block> {
        let base = plan.block.max(1);
        let left = *self.left.get_or_insert_with(|| plan.bytes());
        let block = plan.grow.map_or(base, |g| g.block_for(left, base));
        while self.idx < plan.ranges.len() {
            let (s, e) = plan.ranges[self.idx];
            let start = s.max(self.pos);
            if start < e {
                let len = (e - start).min(block);
                self.pos = start + len;
                self.left = Some(left.saturating_sub(len));
                return Some(Block { offset: start, len });
            }
            self.idx += 1;
        }
        None
    }
}

/// Parallel TCP streams for a path: enough that `streams * window / rtt`
/// reaches `target_bps`, where `window` is the largest TCP window the
/// kernel allows one connection (tcp_rmem/tcp_wmem maxima). Clamped to
/// `[min, max]`. One stream cannot fill a 95 ms path with a 4 MiB window
/// (4 MiB / 95 ms = 353 Mbit/s); eight can fill 2.8 Gbit/s.
pub fn auto_streams(rtt_us: u64, window: u64, target_bps: u64, min: u32, max: u32) -> u32 {
    let per_stream_bps = (window.max(1) as u128 * 8 * 1_000_000) / u128::from(rtt_us.max(1));
    let need = u128::from(target_bps).div_ceil(per_stream_bps.max(1));
    need.clamp(u128::from(min.max(1)), u128::from(max.max(min.max(1)))) as u32
}

/// The fewest streams worth opening on a path with this RTT. Every stream
/// starts small: the sender's initial window is 10 segments, and the
/// receiver's first window is at most 64 KiB (a SYN's window field is not
/// scaled, and Linux grows the window only as data arrives). So n streams
/// carry about n x 64 KiB in their first round trip and leave slow start
/// log2(n) round trips sooner; on a long path that is most of a short
/// transfer. Measured on the emulated 1 Gbit/s, 95 ms path (5000 files,
/// 480 MB as one virtual file): 4 streams 5.0-5.7 s, 8 streams 5.3 s, 16
/// streams 4.8 s. With 32 streams the first round trip of a 1 GiB download
/// carried 2.1 MB (32 x 64 KiB) and the line was full after 3.3 round
/// trips; with 64, 4.2 MB and 1.4 round trips. That once made 64 the
/// choice (1 GiB: 8.95 s against 9.07 s with 32, medians of 7), but each
/// freed buffer then gave all 64 connections a turn and every 256 KiB
/// piece took about ten wake-ups. Since receivers turn only paused
/// connections and sleep until a piece is queued, 32 streams are as fast
/// and cheaper, and steadier: interleaved hand runs on that path, 1 GiB
/// 8.92-8.96 s (median 8.94 s, 7 runs) against 8.90-9.09 s (8.98 s) with
/// 64, with 0.94-1.12 s of client CPU against 1.04-1.22 s into a file;
/// 5000 files 4.23 s against 4.26 s (medians of 6); 30 x 15 MB 3.93-3.99 s
/// against 4.02-4.35 s (3 each). 16 streams took 9.01-9.07 s for 1 GiB.
/// The BBR senders of either count overflow the path's one-BDP drop-tail
/// queue all along: a copy of ~120 thousand segments retransmitted 15-21
/// thousand with 32 streams, 14-26 thousand with 64 (12.9-13.6 thousand
/// with 16). The drops happen before the line, so they cost CPU, not line
/// time. 96 and 128 streams were slower (9.25 s, 9.34 s): past DCON's 64
/// connections (`lightpath_proto::ahead::MAX_COUNT`) the data connections
/// are opened after login, a round trip later.
pub fn min_streams_for_rtt(rtt_us: u64) -> u32 {
    match rtt_us {
        50_000.. => 32,
        20_000.. => 8,
        _ => 4,
    }
}

/// The most streams chosen without `-p`.
pub const MAX_AUTO_STREAMS: u32 = 64;

/// A copy's sessions at once (files in flight) without `--cc`.
pub const DEFAULT_CC: usize = 4;
/// Sessions at once without `--cc` for many files copied file by file:
/// each file costs its session part of a round trip (its commands are
/// pipelined, but GCT's server answers them one after another). The
/// git-like tree (5000 files, 480 MB) from GCT's server over the emulated
/// 1 Gbit/s, 95 ms path took 12.8 s with 4 sessions, 5.8 s with 16, 5.8-5.9
/// s with 32 and 5.9 s with 64 (hand runs, caches dropped).
pub const MANY_FILES_CC: usize = 16;
/// Sessions at once without `--cc` for many files stored file by file
/// (an upload, or a third-party copy, to a server without lightpath's
/// virtual file). A file's data may leave only once the server accepted
/// its `STOR` (data sent ahead of a refused STOR would be written into
/// the next file), so each file costs its session a whole round trip and
/// sessions are the only lever. The git-like tree to GCT's server over
/// the emulated 1 Gbit/s, 95 ms path: 38.3 s with 16 sessions, 20.3 s
/// with 32, 11.8 s with 64, 10.7 s with 128 (hand runs, one each, caches
/// dropped); GCT's processes then held 665 MB and 1.3 GB. A server
/// that takes fewer sessions turns the rest away, and the copy goes on
/// with those it took.
pub const MANY_STORES_CC: usize = 64;
/// More files than this are "many".
pub const MANY_FILES: usize = 64;

/// Sessions for `files` files: `cc`, or without it (0) [`DEFAULT_CC`] or,
/// for many, [`MANY_FILES_CC`] ([`MANY_STORES_CC`] when they are stored
/// on a server: `stores`); never more than the files.
pub fn sessions_for(cc: usize, files: usize, stores: bool) -> usize {
    let many = if stores { MANY_STORES_CC } else { MANY_FILES_CC };
    let auto = if files > MANY_FILES { many } else { DEFAULT_CC };
    (if cc == 0 { auto } else { cc }).min(files.max(1))
}

/// The most streams the automatic count gives the sessions of one job
/// together (`cp --cc N`: N sessions at once). Each session of a long path
/// would otherwise open [`min_streams_for_rtt`]'s 32, and every file then
/// ends on all of them: the git-like tree (5000 files, 480 MB) from GCT's
/// server over the emulated 1 Gbit/s, 95 ms path with `--cc 32` took
/// 10.0 s at 32 streams a session (1024 in all), 5.8-6.2 s at 8, 5.7 s at
/// 4, 5.9-6.2 s at 2 and 6.7 s at 1 (hand runs, one each, caches dropped).
pub const MAX_JOB_STREAMS: u32 = 128;

/// One session's streams when `sessions` of a job run at once: `n` (the
/// count for one), held to its share of [`MAX_JOB_STREAMS`], at least 1.
/// The default four sessions keep 32 each.
pub fn session_share(n: u32, sessions: u32) -> u32 {
    n.min(MAX_JOB_STREAMS.div_ceil(sessions.max(1))).max(1)
}

/// Descriptors a copy keeps for what is not a session's: the runtime's
/// own, the directories a tree keeps open (32) and some of the files it
/// writes at once. A tree of many files partly written at once may need
/// more (up to 2048 of them); under a small limit it then fails, saying
/// "Too many open files".
pub const FILES_RESERVE: u64 = 128;
/// Descriptors a session holds besides its data connections: its control
/// connection, its data listener and one spare.
const SESSION_FILES: u64 = 3;
/// Descriptors a data connection holds while it carries a transfer: its
/// own and the network thread's duplicate (`iothreads::dup_nonblocking`).
const STREAM_FILES: u64 = 2;

/// The descriptors a copy's sessions may hold under a soft limit of
/// `limit` open files (`None`: unlimited): all but [`FILES_RESERVE`], and
/// at least half.
fn session_files(limit: Option<u64>) -> Option<u64> {
    limit.map(|l| l.saturating_sub(FILES_RESERVE).max(l / 2))
}

/// Sessions at once under a limit of `limit` open files: `n`, or as many
/// as can each hold a data connection. Past it, connections failed with
/// "Too many open files" and the copy with them.
pub fn sessions_within_files(n: usize, limit: Option<u64>) -> usize {
    match session_files(limit) {
        Some(b) => n.min((b / (SESSION_FILES + STREAM_FILES)).max(1) as usize),
        None => n,
    }
}

/// One session's streams when `sessions` run at once under a limit of
/// `limit` open files: `n`, or their share of the descriptors, at least 1.
pub fn streams_within_files(n: u32, sessions: u32, limit: Option<u64>) -> u32 {
    match session_files(limit) {
        Some(b) => {
            let share = (b / u64::from(sessions.max(1))).saturating_sub(SESSION_FILES) / STREAM_FILES;
            n.min(u32::try_from(share).unwrap_or(u32::MAX)).max(1)
        }
        None => n,
    }
}

/// The rate a receiver plans for when it is not told one (the client's
/// `--rate-hint` default): 10 Gbit/s.
pub const DEFAULT_TARGET_BPS: u64 = 10_000_000_000;

/// Smallest start window worth asking for: the kernel's default receive
/// buffer (tcp_rmem's middle value, 128 KiB) already holds this much.
const START_WINDOW_MIN: u64 = 256 << 10;
/// Largest start window one stream asks for.
const START_WINDOW_MAX: u64 = 32 << 20;

/// The receive window each of `streams` streams should have from its first
/// round trip: its share of the bandwidth-delay product at `target_bps`.
/// The kernel's autotuning gets there too, but it sizes the buffer from
/// what the last round trip carried, so during slow start the window trails
/// the sender: 1 GiB over the emulated 1 Gbit/s, 95 ms path, 16 streams,
/// spent a quarter of their start-up receive-window-limited. `None` where
/// the default buffer is enough (short paths).
pub fn start_recv_window(rtt_us: u64, target_bps: u64, streams: u32) -> Option<usize> {
    let bdp = u128::from(target_bps) * u128::from(rtt_us) / 8 / 1_000_000;
    let share = (bdp / u128::from(streams.max(1))).min(u128::from(START_WINDOW_MAX)) as u64;
    (share >= START_WINDOW_MIN).then_some(share as usize)
}

/// When a received file is written with direct I/O (`O_DIRECT`, bypassing
/// the page cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DirectIo {
    /// Large files over long paths ([`direct_io_for`]).
    #[default]
    Auto,
    /// Every file the file system allows.
    Always,
    /// Never.
    Never,
}

/// Smallest file [`DirectIo::Auto`] writes directly: small files are done
/// before the page cache's copy costs anything worth saving.
pub const DIRECT_MIN_BYTES: u64 = 64 << 20;
/// Shortest RTT (us) at which [`DirectIo::Auto`] writes directly.
pub const DIRECT_MIN_RTT_US: u64 = 10_000;

/// Whether to write a received file of `size` bytes (0: unknown) directly,
/// over a path with this RTT; `fsync`: the file must reach the disk before
/// it is published.
///
/// Over a long path the network, not the disk, sets the rate, and the copy
/// into the page cache is most of the receiver's CPU. Measured on the
/// emulated 1 Gbit/s, 95 ms path, 1 GiB, receiving client: 2.3-2.4 s of
/// system time buffered against 1.2-1.4 s direct, at the same wall time
/// (9.44-9.51 s against 9.37-9.40 s).
///
/// Near the disk (loopback, LAN) the page cache stays, unless the file must
/// reach the disk anyway (`--fsync`): then the page cache only adds a copy.
/// 3 GiB over loopback with `--fsync`, bench
/// `bench/results/2026-11-22-session10-sized`: 4.04 s (3.81-4.13) direct
/// against 4.51 s (4.37-6.30) buffered, fio 3.50 s. (Session 6 measured the
/// other way, 5.76 s direct against 4.17 s, while the temporary file was
/// kept at size 0: on ext4 a direct write that extends a file takes the
/// inode lock exclusively and waits for itself, so one file's writes went
/// one at a time; `sys::file::preallocate_sized` ended that.) Later runs
/// disagree: with the server reading directly (`direct_read_for`), bench
/// `2026-11-22-session12-loopback-file` gave 5.28 s direct against 4.28 s
/// buffered, `2026-11-22-session12-loopback` 5.05 s against 5.18 s, and 4
/// interleaved hand runs 3.25 s against 6.80 s; the rule stays. Without
/// `--fsync`, loopback copies end with their last writes in the page cache,
/// which direct I/O cannot beat.
pub fn direct_io_for(mode: DirectIo, rtt_us: u64, size: u64, fsync: bool) -> bool {
    match mode {
        DirectIo::Always => true,
        DirectIo::Never => false,
        DirectIo::Auto => (fsync || rtt_us >= DIRECT_MIN_RTT_US) && size >= DIRECT_MIN_BYTES,
    }
}

/// Whether a server reads a file of `size` bytes it sends with direct I/O
/// into its buffers instead of `sendfile` from the page cache; `loopback`:
/// the client is on the same host; `cached`: how many of its bytes are in
/// the page cache (`None`: unknown), asked only when the answer decides.
///
/// Over loopback the receiver copies every byte out of the pages the
/// sender hands it, so `sendfile` saves nothing there, and copying pages
/// the disk has just filled into the page cache cost this VM far more than
/// copying from the sender's long-lived buffers. 3 GiB over loopback,
/// caches dropped, interleaved hand runs: with `--fsync` (4 pairs) 4.36 s
/// (3.24-5.05) with direct reads against 7.61 s (7.44-8.26) with
/// `sendfile`, the receiving client's CPU 0.90-1.17 s against 8.9-10.2 s;
/// without (3 pairs) 3.94 s against 11.08 s, client CPU 1.4-1.9 s against
/// 10.7-11.2 s. A file mostly in the page cache keeps `sendfile` (it is
/// not read from the disk at all), and so does any other path: over the
/// emulated 95 ms path, 1 GiB, 5 pairs, the wall time was the same
/// (9.01 s) and the server's CPU 0.93 s against 0.61 s.
pub fn direct_read_for(mode: DirectIo, loopback: bool, size: u64, cached: impl FnOnce() -> Option<u64>) -> bool {
    match mode {
        DirectIo::Always => true,
        DirectIo::Never => false,
        DirectIo::Auto => loopback && size >= DIRECT_MIN_BYTES && cached().is_some_and(|c| c < size / 2),
    }
}

/// How much of its own sending a data stream may hold unsent, once the
/// kernel paces it, in milliseconds (see [`notsent_bound`]).
pub const NOTSENT_MS: u64 = 100;
/// Bounds of [`notsent_bound`], bytes.
pub const NOTSENT_MIN: u32 = 128 << 10;
/// See [`NOTSENT_MIN`].
pub const NOTSENT_MAX: u32 = 4 << 20;

/// The `TCP_NOTSENT_LOWAT` for a stream the kernel paces at `rate`
/// bytes/s: [`NOTSENT_MS`] of its own rate, within [`NOTSENT_MIN`] and
/// [`NOTSENT_MAX`]. `None` when `current` is within 1/8 of it (not worth
/// a system call).
///
/// Parallel streams take blocks from one queue, but what a stream holds
/// unsent only it can send. At the end of a 1 GiB download over the 95 ms
/// path, 32 BBR streams paced at 23-86 Mbit/s each held about 1 MiB (one
/// bound for all), so the slowest drained 0.1-0.15 s after the others. With
/// the bound fitted to each stream's rate, two sets of 11 interleaved hand
/// runs gave medians of 9.01 and 9.05 s against 9.08 and 9.07 s, fewer slow
/// runs above all; the bench's median (`2026-11-22-session10-lowat`) stayed
/// at 9.08 s.
pub fn notsent_bound(rate: u64, current: u32) -> Option<u32> {
    let want = rate.saturating_mul(NOTSENT_MS) / 1000;
    let want = want.clamp(u64::from(NOTSENT_MIN), u64::from(NOTSENT_MAX)) as u32;
    (want.abs_diff(current) > current / 8).then_some(want)
}

/// In a send's endgame (no block left to hand out), a stream whose unsent
/// bytes would take longer than this to leave at its pacing rate has its
/// congestion control started afresh ([`restart_in_endgame`]).
pub const ENDGAME_UNSENT: std::time::Duration = std::time::Duration::from_millis(500);
/// Least time between two restarts of one stream's congestion control.
pub const ENDGAME_AGAIN: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether a stream holding `unsent` (time to leave at its pacing rate)
/// in a send's endgame, restarted `since` ago if ever, should have its
/// congestion control (BBR) started afresh.
///
/// With 32 BBR streams overflowing a one-BDP drop-tail queue, a stream's
/// bandwidth estimate can collapse: one went from 156 to 3.6 Mbit/s while
/// it held 3.6 MB it had taken at the higher rate. Once the others were
/// done it still paced at 3.6 Mbit/s, as BBR probes only 25 % higher every
/// eight round trips: the Linux tree took 15.3 s instead of 12
/// (`docs/measurements/2026-11-28-endgame-restart.md`). A fresh STARTUP
/// doubles its rate each round trip into the path the others left.
pub fn restart_in_endgame(unsent: std::time::Duration, since: Option<std::time::Duration>) -> bool {
    unsent > ENDGAME_UNSENT && since.is_none_or(|t| t >= ENDGAME_AGAIN)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_a_stream_long_behind_is_restarted_and_not_twice_in_a_second() {
        use std::time::Duration;
        let ms = Duration::from_millis;
        assert!(!restart_in_endgame(ms(100), None), "a stream about to finish");
        assert!(!restart_in_endgame(ENDGAME_UNSENT, None));
        assert!(restart_in_endgame(ms(1250), None), "3.6 Mbit/s with 557 kB unsent");
        assert!(!restart_in_endgame(ms(1250), Some(ms(400))), "restarted 0.4 s ago");
        assert!(restart_in_endgame(ms(1250), Some(ENDGAME_AGAIN)));
    }

    #[test]
    fn a_streams_unsent_bound_is_a_tenth_of_a_second_of_its_rate() {
        // 31.25 Mbit/s (1 Gbit/s over 32 streams) = 3.9 MB/s -> 390 kB.
        assert_eq!(notsent_bound(3_906_250, 1 << 20), Some(390_625));
        // Within an eighth of the current bound: unchanged.
        assert_eq!(notsent_bound(3_906_250, 400_000), None);
        assert_eq!(notsent_bound(4_000_000, 390_625), None);
        // Clamped at both ends, also for absurd rates.
        assert_eq!(notsent_bound(10_000, 1 << 20), Some(NOTSENT_MIN));
        assert_eq!(notsent_bound(u64::MAX, 1 << 20), Some(NOTSENT_MAX));
        assert_eq!(notsent_bound(u64::MAX, NOTSENT_MAX), None);
    }

    #[test]
    fn start_window_is_a_streams_share_of_the_bdp() {
        // 10 Gbit/s x 95 ms = 118.75 MB, over 16 streams.
        assert_eq!(start_recv_window(95_000, DEFAULT_TARGET_BPS, 16), Some(7_421_875));
        // One stream at 100 Gbit/s would want more than the cap.
        assert_eq!(start_recv_window(95_000, 100_000_000_000, 1), Some(32 << 20));
        // Short paths and no target: the default buffer is enough.
        assert_eq!(start_recv_window(100, DEFAULT_TARGET_BPS, 4), None);
        assert_eq!(start_recv_window(95_000, 0, 16), None);
        assert_eq!(start_recv_window(95_000, DEFAULT_TARGET_BPS, 0), Some(32 << 20));
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn direct_io_for_large_files_over_long_paths_or_flushed() {
        let gib = 1 << 30;
        assert!(direct_io_for(DirectIo::Auto, 95_000, gib, false));
        assert!(direct_io_for(DirectIo::Auto, DIRECT_MIN_RTT_US, DIRECT_MIN_BYTES, false));
        assert!(!direct_io_for(DirectIo::Auto, 200, gib, false), "loopback stays buffered");
        assert!(direct_io_for(DirectIo::Auto, 200, gib, true), "unless the file must reach the disk");
        assert!(!direct_io_for(DirectIo::Auto, 200, DIRECT_MIN_BYTES - 1, true), "small file");
        assert!(!direct_io_for(DirectIo::Auto, 95_000, DIRECT_MIN_BYTES - 1, false), "small file");
        assert!(!direct_io_for(DirectIo::Auto, 95_000, 0, true), "unknown size");
        assert!(direct_io_for(DirectIo::Always, 200, 1, false));
        assert!(!direct_io_for(DirectIo::Never, 95_000, gib, true));
    }

    #[test]
    fn direct_reads_for_large_uncached_files_sent_over_loopback() {
        let gib = 1 << 30;
        let half = DIRECT_MIN_BYTES / 2 - 1;
        let unasked = || -> Option<u64> { panic!("the page cache was probed where it decides nothing") };
        assert!(direct_read_for(DirectIo::Auto, true, gib, || Some(0)));
        assert!(direct_read_for(DirectIo::Auto, true, DIRECT_MIN_BYTES, || Some(half)));
        assert!(!direct_read_for(DirectIo::Auto, true, gib, || Some(gib / 2)), "half cached: sendfile");
        assert!(!direct_read_for(DirectIo::Auto, true, gib, || None), "cache unknown: sendfile");
        assert!(!direct_read_for(DirectIo::Auto, false, gib, unasked), "over a network: sendfile");
        assert!(!direct_read_for(DirectIo::Auto, true, DIRECT_MIN_BYTES - 1, unasked), "small file");
        assert!(direct_read_for(DirectIo::Always, false, 1, unasked));
        assert!(!direct_read_for(DirectIo::Never, true, gib, unasked));
    }

    fn ranges() -> impl Strategy<Value = Vec<(u64, u64)>> {
        proptest::collection::vec((0u64..5000, 0u64..3000), 0..8).prop_map(|v| {
            let mut pos = 0;
            v.into_iter()
                .map(|(gap, len)| {
                    let s = pos + gap;
                    pos = s + len;
                    (s, s + len)
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn every_byte_in_exactly_one_block(
            r in ranges(),
            block in 1u64..4096,
            grow in proptest::option::of((1u64..20_000, 0u32..40)),
        ) {
            let grow = grow.map(|(max, streams)| Growth { max, streams });
            let plan = SendPlan { ranges: r.clone(), wire_base: 0, block, grow };
            let largest = grow.map_or(block, |g| g.max.max(block));
            let mut cur = BlockCursor::new();
            let mut seen = Vec::new();
            while let Some(b) = cur.next_block(&plan) {
                prop_assert!(b.len > 0 && b.len <= largest);
                prop_assert!(r.iter().any(|&(s, e)| b.offset >= s && b.offset + b.len <= e), "block crosses a range");
                seen.push(b);
            }
            for w in seen.windows(2) {
                prop_assert!(w[0].offset + w[0].len <= w[1].offset, "blocks overlap or go backwards");
            }
            prop_assert_eq!(seen.iter().map(|b| b.len).sum::<u64>(), plan.bytes());
        }
    }

    #[test]
    fn many_files_copied_file_by_file_get_more_sessions() {
        assert_eq!(sessions_for(0, 1, true), 1);
        for stores in [false, true] {
            assert_eq!(sessions_for(0, 30, stores), DEFAULT_CC);
            assert_eq!(sessions_for(0, MANY_FILES, stores), DEFAULT_CC);
            assert_eq!(sessions_for(2, 5000, stores), 2, "as asked");
            assert_eq!(sessions_for(32, 3, stores), 3, "never more than the files");
            assert_eq!(sessions_for(0, 0, stores), 1);
        }
        assert_eq!(sessions_for(0, MANY_FILES + 1, false), MANY_FILES_CC);
        assert_eq!(sessions_for(0, MANY_FILES + 1, true), MANY_STORES_CC);
    }

    #[test]
    fn sessions_and_streams_fit_the_open_files_limit() {
        assert_eq!(streams_within_files(64, 4, None), 64);
        assert_eq!(streams_within_files(64, 4, Some(1 << 20)), 64);
        // 128 of 256 for the sessions: 32 each, 3 of them not streams,
        // two for each stream.
        assert_eq!(streams_within_files(64, 4, Some(256)), 14);
        assert_eq!(streams_within_files(64, 1, Some(128)), 30, "half of a small limit");
        assert_eq!(streams_within_files(8, 64, Some(128)), 1);
        assert_eq!(streams_within_files(8, 0, Some(0)), 1);
        assert_eq!(sessions_within_files(64, Some(128)), 12);
        assert_eq!(sessions_within_files(4, Some(128)), 4);
        assert_eq!(sessions_within_files(64, None), 64);
        assert_eq!(sessions_within_files(64, Some(0)), 1);
        for limit in [32, 100, 256, 1000, 4096] {
            for cc in [1, 4, 16, 64, 128] {
                let n = sessions_within_files(cc, Some(limit));
                let p = streams_within_files(128, n as u32, Some(limit));
                let held = n as u64 * (u64::from(p) * STREAM_FILES + SESSION_FILES);
                assert!(held <= session_files(Some(limit)).unwrap().max(5), "{limit} {cc}: {n} x {p}");
            }
        }
    }

    #[test]
    fn concurrent_sessions_share_the_job_streams() {
        assert_eq!(session_share(32, 1), 32);
        assert_eq!(session_share(32, 4), 32);
        assert_eq!(session_share(32, 8), 16);
        assert_eq!(session_share(32, 32), 4);
        assert_eq!(session_share(32, 500), 1);
        assert_eq!(session_share(2, 32), 2, "never more than one session alone would have");
        assert_eq!(session_share(0, 0), 1);
    }

    #[test]
    fn stream_count_follows_bdp() {
        // 1 Gbit/s at 95 ms with 4 MiB windows: 353 Mbit/s per stream -> 3.
        assert_eq!(auto_streams(95_000, 4 << 20, 1_000_000_000, 1, 64), 3);
        // 10 Gbit/s needs 29 such streams (capped at 16 here).
        assert_eq!(auto_streams(95_000, 4 << 20, 10_000_000_000, 1, 16), 16);
        assert_eq!(auto_streams(95_000, 4 << 20, 10_000_000_000, 1, 32), 29);
        // Loopback: the floor.
        assert_eq!(auto_streams(30, 4 << 20, 10_000_000_000, 4, 16), 4);
        assert_eq!(auto_streams(0, 0, 0, 0, 0), 1);
    }

    #[test]
    fn zero_block_size_still_progresses() {
        let plan = SendPlan { ranges: vec![(0, 3)], wire_base: 0, block: 0, grow: None };
        let mut c = BlockCursor::new();
        assert_eq!(c.next_block(&plan), Some(Block { offset: 0, len: 1 }));
    }

    #[test]
    fn grown_blocks_shrink_back_for_the_last_bytes() {
        const K: u64 = 1024;
        let grow = Some(Growth { max: 1024 * K, streams: 8 });
        let plan = SendPlan { ranges: vec![(0, 1 << 30)], wire_base: 0, block: 256 * K, grow };
        let mut c = BlockCursor::new();
        let lens: Vec<u64> = std::iter::from_fn(|| c.next_block(&plan)).map(|b| b.len).collect();
        assert_eq!(lens.iter().sum::<u64>(), 1 << 30);
        assert_eq!(lens[0], 1024 * K, "1 GiB over 8 streams starts with the largest blocks");
        assert!(lens.iter().all(|l| l % (256 * K) == 0), "whole base blocks: the pieces stay aligned");
        assert!(lens.windows(2).all(|w| w[0] >= w[1]), "never growing again");
        // The last 8 MiB (a base block per stream and taper) go in base blocks.
        let tail: Vec<u64> = lens
            .iter()
            .rev()
            .scan(0, |acc, &l| {
                *acc += l;
                Some((*acc, l))
            })
            .take_while(|&(acc, _)| acc <= 8 << 20)
            .map(|(_, l)| l)
            .collect();
        assert!(tail.len() >= 32 && tail.iter().all(|&l| l == 256 * K), "{tail:?}");
        // Small plans never grow.
        let small = SendPlan { ranges: vec![(0, 5 << 20)], ..plan.clone() };
        let mut c = BlockCursor::new();
        assert!(std::iter::from_fn(|| c.next_block(&small)).all(|b| b.len <= 256 * K));
    }

    #[test]
    fn longer_paths_open_more_streams() {
        assert_eq!(min_streams_for_rtt(100), 4);
        assert_eq!(min_streams_for_rtt(25_000), 8);
        assert_eq!(min_streams_for_rtt(95_000), 32);
        let mut last = 0;
        for rtt in (0..300_000).step_by(1000) {
            let n = min_streams_for_rtt(rtt);
            assert!(n >= last, "never fewer streams for a longer path");
            last = n;
        }
    }
}

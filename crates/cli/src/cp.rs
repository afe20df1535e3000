//! `lightpath cp`, `ls`, `sum`.

use crate::units::{parse_block, parse_rate, parse_size, WEEK};
use anyhow::Context;
use clap::builder::BoolishValueParser;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use lightpath_client::{copy, ClientError, CopyOptions, Location, Progress, Session, SessionOpts};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options of `lightpath cp`.
#[derive(Debug, Args)]
pub struct CpArgs {
    /// Sources (ftp://[user[:password]@]host[:port]/path, local paths, or file:///path with %XX decoded),
    /// then the destination. A user without a password takes LIGHTPATH_PASSWORD's (out of the process list).
    #[arg(required = true, num_args = 2..)]
    pub paths: Vec<std::ffi::OsString>,
    /// Parallel MODE E streams per transfer, 1 to 128 (default: chosen from
    /// the measured round-trip time and the kernel's TCP window limits to
    /// reach --rate-hint).
    #[arg(short = 'p', long = "parallel", env = "LIGHTPATH_PARALLEL", value_parser = clap::value_parser!(u32).range(1..=MAX_PARALLEL))]
    pub parallel: Option<u32>,
    /// Rate the automatic stream count aims for, in bits/s (e.g. 1G, 10G).
    #[arg(long, default_value = "10G", value_parser = parse_rate, env = "LIGHTPATH_RATE_HINT")]
    pub rate_hint: u64,
    /// Files in flight, each over its own control session (0: automatic,
    /// 4; for more than 64 files copied file by file, as from or to a
    /// server without lightpath's virtual file, 16, or 64 when a server
    /// stores them: each file's data waits for its STOR's acceptance).
    #[arg(long, default_value_t = 0, env = "LIGHTPATH_CC")]
    pub cc: usize,
    /// Copy directories recursively.
    #[arg(short, long)]
    pub recursive: bool,
    /// Commands kept in flight per session (1 = no pipelining).
    #[arg(long, default_value_t = 16, env = "LIGHTPATH_PIPELINE")]
    pub pipeline: usize,
    /// MODE E block size this client sends in (e.g. 256K, 1M; 4K to
    /// 64M): uploads and trees it sends. Downloads and third-party copies
    /// take the sending server's (a lightpath server's grow to 1M).
    #[arg(long, default_value = "256K", value_parser = parse_block)]
    pub block: u64,
    /// Partial copy: start offset (alone: to the end of the file, one file).
    #[arg(long, value_parser = parse_size)]
    pub off: Option<u64>,
    /// Partial copy: length (alone: from offset 0).
    #[arg(long, value_parser = parse_size)]
    pub len: Option<u64>,
    /// Verify each file afterwards with this checksum (MD5, ADLER32, CRC32C, SHA256...).
    #[arg(long, value_name = "ALG")]
    pub verify: Option<String>,
    /// Flush each received local file to disk before it appears under its name.
    #[arg(long, env = "LIGHTPATH_FSYNC", value_parser = BoolishValueParser::new())]
    pub fsync: bool,
    /// Write downloads with direct I/O (O_DIRECT): auto (files of 64 MiB
    /// and more over paths of 10 ms RTT and more), always, or never.
    #[arg(long, value_enum, default_value = "auto", env = "LIGHTPATH_DIRECT_IO")]
    pub direct_io: DirectIoArg,
    /// Do not open data connections ahead to lightpath servers met before
    /// (they save a round trip; the book of servers is
    /// $XDG_STATE_HOME/lightpath/peers, else ~/.local/state/lightpath/peers, or LIGHTPATH_PEERS).
    #[arg(long, env = "LIGHTPATH_NO_CONNECT_AHEAD", value_parser = BoolishValueParser::new())]
    pub no_connect_ahead: bool,
    /// Do not use TCP Fast Open (with it, a first connection asks the
    /// server for a cookie and later ones send the login in the SYN, where
    /// the server's kernel allows: net.ipv4.tcp_fastopen with bit 2).
    #[arg(long, env = "LIGHTPATH_NO_FASTOPEN", value_parser = BoolishValueParser::new())]
    pub no_fastopen: bool,
    /// List a remote tree directory by directory (MLSD) even where the
    /// server offers MLSR, which lists it in one command (GCT's servers).
    #[arg(long, env = "LIGHTPATH_NO_MLSR", value_parser = BoolishValueParser::new())]
    pub no_mlsr: bool,
    /// TCP congestion control for the data connections this client opens
    /// or accepts (default bbr where the kernel allows it; `kernel` keeps
    /// the system default). One that the kernel lacks or does not allow
    /// this user stops the copy before it starts.
    #[arg(long, env = "LIGHTPATH_CONGESTION")]
    pub congestion: Option<String>,
    /// Take data connections to this client's listeners (downloads in
    /// MODE E, where the server connects) from any host. By default only
    /// the server's control address may connect: anyone else who reached
    /// the port could forge or add to the data. For a server whose data
    /// leaves from another interface or host.
    #[arg(long, env = "LIGHTPATH_DATA_FROM_ANY", value_parser = BoolishValueParser::new())]
    pub data_from_any: bool,
    /// Times a file that failed for a transient reason (a broken
    /// connection, a server that went away or answered 4xx) is tried
    /// again, after 1 s, 2 s, 4 s... (at most 30 s); a download resumes
    /// from the bytes it received. A tree copied as one virtual file is
    /// also tried again when one of its files changes while it is read
    /// (not counted here: the file is read once more, then left out). 0:
    /// fail at once.
    #[arg(long, default_value_t = 3, env = "LIGHTPATH_RETRIES")]
    pub retries: u32,
    /// Keep a download that fails for good (its retries spent) or is
    /// interrupted as `.NAME.lightpath-partial` next to its destination,
    /// and resume a file kept so by an earlier run: its kept bytes are
    /// compared with the server's file, and only the rest is fetched. An
    /// upload to a lightpath server that fails so is noted (the server
    /// keeps what it received for a while: `serve --keep-partial`), and
    /// the next run sends only the rest if the file is unchanged. With
    /// `-r`, a tree downloaded or uploaded as one virtual file notes how
    /// far its complete files go; the next run of the same command checks
    /// them (path, size, mtime, mode) on both sides and sends only the rest, or
    /// the whole tree if either side changed.
    #[arg(long, env = "LIGHTPATH_PARTIAL", value_parser = BoolishValueParser::new())]
    pub partial: bool,
    #[command(flatten)]
    pub timeouts: Timeouts,
    /// No progress bar, and nothing said of a copy that succeeds (no
    /// summary); failures are still reported, with the summary.
    #[arg(short, long)]
    pub quiet: bool,
}

/// `--direct-io` (1 and 0 still mean always and never, as the environment
/// variable did before there was a flag).
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum DirectIoArg {
    /// Large files over long paths.
    Auto,
    /// Every file.
    #[value(alias = "1")]
    Always,
    /// Never.
    #[value(alias = "0")]
    Never,
}

impl From<DirectIoArg> for lightpath_plan::DirectIo {
    fn from(a: DirectIoArg) -> Self {
        match a {
            DirectIoArg::Auto => Self::Auto,
            DirectIoArg::Always => Self::Always,
            DirectIoArg::Never => Self::Never,
        }
    }
}

/// How a copy ended.
enum Outcome {
    Done,
    Failed,
    Interrupted,
}

/// Run a copy; exit code 0 only when every file arrived complete, 1 when
/// some failed (or the copy failed before its first file: see
/// [`start_failure_code`]), 130 when interrupted, 2 for a usage error.
pub fn run(a: CpArgs) -> ExitCode {
    match run_inner(a) {
        Ok(Outcome::Done) => ExitCode::SUCCESS,
        Ok(Outcome::Failed) => ExitCode::from(1),
        // 128 + SIGINT, as shells report an interrupted command.
        Ok(Outcome::Interrupted) => ExitCode::from(130),
        Err(e) => {
            crate::log::say(&format!("lightpath: {}", crate::term::message(&format!("{e:#}"))));
            ExitCode::from(start_failure_code(&e))
        }
    }
}

/// The exit code of a copy that ended before its first file: 2 when the
/// arguments, or the local files they name, cannot be copied as asked (a
/// usage error, as clap's own), 1 when a server could not be reached, or
/// refused the login or a command, as a file that fails once running
/// (a download from a server that is down exited 2, an upload 1).
fn start_failure_code(e: &anyhow::Error) -> u8 {
    match e.chain().find_map(|c| c.downcast_ref::<ClientError>()) {
        Some(ClientError::Usage(_) | ClientError::Local(_)) | None => 2,
        Some(_) => 1,
    }
}

fn run_inner(mut a: CpArgs) -> anyhow::Result<Outcome> {
    a.timeouts.apply()?;
    lightpath_client::location::one_env_password(&a.paths).map_err(|e| ClientError::Usage(e.to_string()))?;
    let dst = Location::parse_os(&a.paths.pop().unwrap_or_default())?;
    let srcs = a.paths.iter().map(|s| Location::parse_os(s)).collect::<Result<Vec<_>, _>>()?;
    let part = match (a.off, a.len) {
        (off, Some(len)) => Some((off.unwrap_or(0), len)),
        (Some(off), None) => Some((off, lightpath_client::job::TO_END)),
        (None, None) => None,
    };
    not_a_directory(&a, &srcs, &dst)?;
    if a.partial && !lightpath_client::partial::notes_possible() {
        crate::log::say(
            "lightpath: neither XDG_STATE_HOME nor HOME is set: --partial keeps downloaded files, but notes no upload or tree for a later run",
        );
    }
    let opts = copy_options(&a, part)?;
    // Data will move through this process: its I/O threads and buffer pool
    // start while the control connection logs in.
    let third_party = !matches!(dst, Location::Local(_)) && srcs.iter().all(|s| matches!(s, Location::Remote(_)));
    if !third_party {
        lightpath_engine::iothreads::start_in_background();
    }
    let progress = Arc::new(Progress::default());
    let bar = (!a.quiet).then(|| start_bar(progress.clone()));
    let started = Instant::now();
    let rt = tokio::runtime::Runtime::new()?;
    let results = rt.block_on(until_interrupted(copy(srcs, dst, opts, progress.clone()), &progress.cancel));
    if let Some((pb, stop)) = bar {
        stop.store(true, Ordering::Relaxed);
        crate::log::set_bar(None);
        pb.finish_and_clear();
    }
    // Transfers still running after the grace period (a server that does
    // not answer) are left behind; the process is about to end.
    rt.shutdown_timeout(Duration::from_millis(100));
    let Some(results) = results? else {
        // Temporary names of transfers the grace period cut short, where
        // files are named from the start (NFS); a file kept for --partial
        // already has its kept name. Bounded: a hung file system (FUSE,
        // hard NFS) kept a second Ctrl-C from quitting.
        let answered = lightpath_sys::root::remove_temp_files_within(TEMP_REMOVAL).is_some();
        // --partial keeps what a download or an upload left; a third-party
        // copy (no local end) is resumed within its run only.
        let unfinished = match (a.partial, third_party) {
            // Each file kept was named as it was (`partial::keep`); a
            // server without lightpath's partial uploads keeps none.
            (true, false) => "unfinished files removed but for those said kept above (for --partial)",
            (true, true) => {
                "unfinished files will not be resumed (--partial resumes downloads and uploads, not third-party copies)"
            }
            (false, _) => "unfinished files removed",
        };
        // The removal gave up on a file system that did not answer: its
        // temporary names may be left, and saying "removed" would be false.
        let hung = if answered { "" } else { " (the file system did not answer: temporary files may be left)" };
        crate::log::say(&format!("lightpath: interrupted: transfers stopped; {unfinished}, finished ones kept{hung}"));
        return Ok(Outcome::Interrupted);
    };
    Ok(report(&a, &results, &progress, started.elapsed()))
}

/// The client's options from `cp`'s arguments and the part (`--off`,
/// `--len`) asked for.
fn copy_options(a: &CpArgs, part: Option<(u64, u64)>) -> anyhow::Result<CopyOptions> {
    Ok(CopyOptions {
        streams: a.parallel.unwrap_or(0),
        target_bps: a.rate_hint,
        cc: a.cc,
        recursive: a.recursive,
        pipeline: a.pipeline,
        block: a.block,
        part,
        verify: a.verify.clone(),
        fsync: a.fsync,
        direct_io: a.direct_io.into(),
        connect_ahead: !a.no_connect_ahead,
        fastopen: !a.no_fastopen,
        congestion: crate::congestion::check(a.congestion.as_deref())?,
        data_from_any: a.data_from_any,
        retries: a.retries,
        partial: a.partial,
        mlsr: !a.no_mlsr,
        quiet: a.quiet,
    })
}

/// Several files into a local target that is not a directory, refused as
/// `cp` does, before anything is asked: each file failed alone with "No
/// such file or directory", after its data had moved.
fn not_a_directory(a: &CpArgs, srcs: &[Location], dst: &Location) -> anyhow::Result<()> {
    if let (false, true, Location::Local(d)) = (a.recursive, srcs.len() > 1, dst) {
        if !d.is_dir() {
            let n = srcs.len();
            let why = format!("target {} is not a directory (copying {n} files needs one that exists)", d.display());
            return Err(ClientError::Usage(why).into());
        }
    }
    Ok(())
}

/// Say what failed, then (unless `-q` and nothing failed: a quiet copy
/// that succeeds prints nothing) the summary, the bytes kept from earlier
/// tries and a `--verify` that passed.
fn report(a: &CpArgs, results: &[lightpath_client::FileResult], progress: &Progress, t: Duration) -> Outcome {
    let failed: Vec<_> = results.iter().filter(|r| r.result.is_err()).collect();
    for f in &failed {
        let why = f.result.as_ref().err().map(|e| e.to_string()).unwrap_or_default();
        let (src, dst) = (crate::term::name(&f.src.to_string()), crate::term::name(&f.dst.to_string()));
        crate::log::say(&format!("lightpath: FAILED {src} -> {dst}: {}", crate::term::message(&why)));
    }
    if a.quiet && failed.is_empty() {
        return Outcome::Done;
    }
    let bytes: u64 = results.iter().filter_map(|r| r.result.as_ref().ok()).sum();
    let ok: Vec<_> = results.iter().filter(|r| r.result.is_ok()).collect();
    let files = ok.iter().filter_map(|r| r.files).sum::<u64>();
    let what = match ok.iter().filter(|r| r.files.is_none()).count() {
        0 => format!("{files} file(s)"),
        n => format!("{files} file(s) and {n} tree(s) whose server did not count their files"),
    };
    // A failure may stand for several files (those a tree's sender could
    // not read, beyond the ones it named).
    let failures = failed.iter().map(|r| r.files.unwrap_or(1)).sum::<u64>();
    summary(&what, failures, bytes, t);
    let moved = progress.bytes.load(Ordering::Relaxed);
    kept_note(bytes.saturating_sub(moved), bytes, t);
    if !failed.is_empty() && moved > 0 {
        // The summary counts the files copied: a copy that failed after
        // moving gigabytes read "0 bytes".
        let rate = moved as f64 / t.as_secs_f64().max(1e-9) / 1e6;
        crate::log::say(&format!(
            "lightpath: {moved} bytes moved in all, with those of the files that failed ({rate:.1} MB/s)"
        ));
    }
    if let (Some(alg), false) = (&a.verify, ok.is_empty()) {
        // It said nothing of a check that passed (a UX audit).
        crate::log::say(&format!("lightpath: --verify {alg}: the checksums of the {what} copied match their sources'"));
    }
    if failed.is_empty() {
        Outcome::Done
    } else {
        Outcome::Failed
    }
}

/// Resumed files count whole in the summary: say how many of its `bytes`
/// were `kept` from earlier tries, and the rate of what moved.
fn kept_note(kept: u64, bytes: u64, t: Duration) {
    if kept == 0 {
        return;
    }
    let moved = bytes - kept;
    let rate = moved as f64 / t.as_secs_f64().max(1e-9);
    crate::log::say(&format!(
        "lightpath: {kept} of those bytes were kept from earlier tries; {moved} moved ({:.1} MB/s)",
        rate / 1e6
    ));
}

/// How long the removal of temporary names may take once the process is
/// to end ([`lightpath_sys::root::remove_temp_files_within`]).
pub const TEMP_REMOVAL: Duration = Duration::from_secs(2);

/// How long an interrupted copy has to stop its transfers and remove
/// their temporary files before the process ends anyway.
const GRACE: Duration = Duration::from_secs(10);

/// Run `job` until it ends or a signal comes. On Ctrl-C or SIGTERM, set
/// `cancel`: every transfer fails, which removes what it wrote under a
/// temporary name (`.part` files, a tree's unfinished files), and no file
/// is started; a second signal, or [`GRACE`], ends the wait. `None`: interrupted.
async fn until_interrupted<T>(
    job: impl std::future::Future<Output = Result<T, ClientError>>,
    cancel: &std::sync::atomic::AtomicBool,
) -> anyhow::Result<Option<T>> {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut int, mut term) = (signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?);
    // A closed terminal or ssh session: as Ctrl-C (rsync's way). It
    // killed the copy, and files named from the start stayed, hidden,
    // and --partial kept nothing (a defect hunt's find).
    // Under `nohup` (SIGHUP ignored) it is left alone.
    let mut hup = match lightpath_sys::privs::hangup_ignored() {
        false => Some(signal(SignalKind::hangup())?),
        true => None,
    };
    let hung_up = async {
        match hup.as_mut() {
            Some(h) => drop(h.recv().await),
            None => std::future::pending().await,
        }
    };
    tokio::pin!(job);
    tokio::select! {
        r = &mut job => return Ok(Some(r?)),
        _ = int.recv() => {}
        _ = term.recv() => {}
        _ = hung_up => {}
    }
    cancel.store(true, Ordering::Relaxed);
    crate::log::say("\nlightpath: interrupted: stopping the transfers (Ctrl-C again to quit at once)");
    tokio::select! {
        _ = &mut job => {}
        _ = int.recv() => {}
        _ = term.recv() => {}
        _ = tokio::time::sleep(GRACE) => {}
    }
    Ok(None)
}

fn start_bar(p: Arc<Progress>) -> (ProgressBar, Arc<std::sync::atomic::AtomicBool>) {
    let pb = ProgressBar::new(0);
    pb.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] [{wide_bar}] {decimal_bytes}/{decimal_total_bytes} {decimal_bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    crate::log::set_bar(Some(pb.clone()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (pb2, stop2) = (pb.clone(), stop.clone());
    std::thread::spawn(move || {
        while !stop2.load(Ordering::Relaxed) {
            pb2.set_length(p.planned.load(Ordering::Relaxed));
            pb2.set_position(p.bytes.load(Ordering::Relaxed));
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    (pb, stop)
}

/// Print the throughput summary.
pub fn summary(ok: &str, failed: u64, bytes: u64, t: Duration) {
    let secs = t.as_secs_f64().max(1e-9);
    crate::log::say(&format!(
        "lightpath: {ok} copied, {failed} failed, {bytes} bytes in {secs:.2} s = {:.1} MB/s ({:.2} Gbit/s)",
        bytes as f64 / secs / 1e6,
        bytes as f64 * 8.0 / secs / 1e9
    ));
}

/// Most streams `-p` takes. A listener's queue holds 128 connections
/// that are not yet accepted, and a GridFTP server opens every stream of
/// a download before it answers 150 (after which the client accepts):
/// past that, streams waited 30 s and the copy failed, "connection timed
/// out"; far past it, the server refused the `OPTS`, and the copy
/// retried that (a UX audit).
const MAX_PARALLEL: i64 = 128;

/// Options of `lightpath ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Directory URL.
    pub url: String,
    #[command(flatten)]
    pub timeouts: Timeouts,
}

/// How long a server may take, for `cp`, `ls` and `sum` alike.
#[derive(Debug, Args)]
pub struct Timeouts {
    /// Seconds a server may take to begin and finish a reply before its
    /// session is given up (cp tries the file again, with --retries). A
    /// third-party copy waits at least twice the gap between the
    /// destination's perf markers (10 s until two came, at most 60 s).
    #[arg(long, value_name = "SECS", default_value_t = 300, env = "LIGHTPATH_REPLY_TIMEOUT",
          value_parser = clap::value_parser!(u64).range(1..=WEEK))]
    pub reply_timeout: u64,
    /// Seconds a server may take to answer the connect of a control
    /// connection with its greeting before the attempt fails (cp tries
    /// again, with --retries). Of a host's several addresses, each but the
    /// last is given at most 5 s of it.
    #[arg(long, value_name = "SECS", default_value_t = 30, env = "LIGHTPATH_CONNECT_TIMEOUT",
          value_parser = clap::value_parser!(u64).range(1..=WEEK))]
    pub connect_timeout: u64,
}

impl Timeouts {
    /// Make them the client's; a malformed `LIGHTPATH_DATA_PORTS` (or
    /// `GLOBUS_TCP_PORT_RANGE`), which every command's data listener reads,
    /// is refused here.
    fn apply(&self) -> anyhow::Result<()> {
        lightpath_client::control::REPLY_TIMEOUT.set(Duration::from_secs(self.reply_timeout));
        lightpath_client::control::CONNECT_TIMEOUT.set(Duration::from_secs(self.connect_timeout));
        lightpath_engine::ports::range_from_env("LIGHTPATH_DATA_PORTS").map_err(anyhow::Error::msg)?;
        Ok(())
    }
}

/// Options of `lightpath sum`.
#[derive(Debug, Args)]
pub struct SumArgs {
    /// File URL.
    pub url: String,
    /// Algorithm (MD5, ADLER32, CRC32C, SHA1, SHA256, SHA512).
    #[arg(long, default_value = "MD5")]
    pub alg: String,
    #[command(flatten)]
    pub timeouts: Timeouts,
}

/// The server and path `url` names, for `ls` and `sum`; a usage error
/// (exit status 2, as for clap's own and `cp`'s) for any other argument.
fn remote_arg(url: &str) -> Result<lightpath_client::Remote, ClientError> {
    match Location::parse(url) {
        Ok(Location::Remote(r)) => Ok(r),
        Ok(Location::Local(_)) => {
            Err(ClientError::Usage(format!("{url}: not an ftp:// URL (ls and sum ask a server)")))
        }
        Err(e) => Err(ClientError::Usage(e.to_string())),
    }
}

fn open(url: &str) -> anyhow::Result<(tokio::runtime::Runtime, Session, Vec<u8>)> {
    let r = remote_arg(url)?;
    let rt = tokio::runtime::Runtime::new()?;
    let opts = SessionOpts {
        streams: 1,
        target_bps: 0,
        block: lightpath_engine::DEFAULT_BLOCK,
        pipeline: 1,
        total: Arc::default(),
        cancel: Arc::default(),
        direct_io: lightpath_plan::DirectIo::Never,
        connect_ahead: false,
        fastopen: false,
        congestion: None,
        data_from_any: false,
        keep_interrupted: false,
        mlsr: true,
        quiet: true,
        sessions: 1,
    };
    let s = rt.block_on(Session::open(&r, opts)).context("opening session")?;
    Ok((rt, s, r.path))
}

/// List a remote directory. A reader that stops early (`| head`) ends
/// the listing quietly, as for any Unix tool, not with a panic.
pub fn ls(a: LsArgs) -> anyhow::Result<()> {
    use std::io::Write;
    a.timeouts.apply()?;
    let (rt, mut s, path) = open(&a.url)?;
    let mut out = std::io::stdout().lock();
    let entries: Vec<(char, u64, Vec<u8>)> = match rt.block_on(s.list(&path)) {
        Ok(entries) => {
            let kind = |d: bool| if d { 'd' } else { '-' };
            let listed = entries.into_iter().map(|e| (kind(e.is_dir), e.size, e.name));
            // FIFOs, devices and sockets too (they were not shown).
            listed.chain(s.others.drain(..).map(|(name, t)| (other_kind(&t), 0, name))).collect()
        }
        // A file: RFC 3659's MLSD refuses it (501, as lightpath's server
        // does; GCT's lists it): MLST says what it is, as `ls FILE` does.
        Err(e @ lightpath_client::ClientError::Refused { .. }) => match rt.block_on(s.stat(&path)) {
            Ok((false, size)) if s.listed(&path) => {
                vec![('-', size, path.rsplit(|&b| b == b'/').next().unwrap_or(&path).to_vec())]
            }
            _ => return Err(e.into()),
        },
        Err(e) => return Err(e.into()),
    };
    for (kind, size, name) in entries {
        let line = writeln!(out, "{kind} {size:>14} {}", crate::term::name(&String::from_utf8_lossy(&name)));
        match line {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => break,
            r => r.context("writing the listing")?,
        }
    }
    let left_out = s.names_left_out;
    rt.block_on(s.quit());
    anyhow::ensure!(left_out == 0, "{left_out} name(s) with a line break were left out of the server's listing");
    Ok(())
}

/// The `ls -l` letter of an MLSD `type` fact other than a file's or a
/// directory's: `p` for `OS.unix=pipe`, `c`, `b`, `s`; `?` for what the
/// server does not name (`OS.unix=other`: a socket).
fn other_kind(t: &str) -> char {
    match t.strip_prefix("os.unix=").unwrap_or(t) {
        "pipe" | "fifo" => 'p',
        "chr" | "char" => 'c',
        "blk" | "block" => 'b',
        "socket" | "sock" => 's',
        "slink" => 'l',
        _ => '?',
    }
}

/// How many hex digits a digest of `alg` has: a 32-bit checksum's may
/// come without its leading zeros; unknown algorithms up to SHA-512's.
fn digest_digits(alg: &str) -> std::ops::RangeInclusive<usize> {
    match alg.to_ascii_uppercase().as_str() {
        "MD5" => 32..=32,
        "SHA1" => 40..=40,
        "SHA224" => 56..=56,
        "SHA256" => 64..=64,
        "SHA384" => 96..=96,
        "SHA512" => 128..=128,
        "ADLER32" | "CRC32" | "CRC32C" => 1..=8,
        _ => 1..=128,
    }
}

/// Print a server-side checksum.
pub fn sum(a: SumArgs) -> anyhow::Result<()> {
    a.timeouts.apply()?;
    let (rt, mut s, path) = open(&a.url)?;
    s.computes("--alg", &a.alg)?;
    let sum = rt.block_on(s.checksum(&a.alg.to_ascii_uppercase(), &path))?;
    // A digest is hex digits, as many as its algorithm gives; anything
    // else is not one, whatever the reply code (`213 a` printed as an MD5).
    let hex = !sum.is_empty() && sum.bytes().all(|b| b.is_ascii_hexdigit());
    let fits = digest_digits(&a.alg).contains(&sum.len());
    anyhow::ensure!(hex && fits, "the server's CKSM reply is not a {} digest: {:.80}", a.alg, crate::term::name(&sum));
    // A closed pipe (`sum URL | true`) is no failure of the sum's; it
    // panicked, exit 101 (a defect hunt's find).
    let line = format!("{sum}  {}\n", lightpath_client::location::without_password(&a.url));
    match std::io::Write::write_all(&mut std::io::stdout(), line.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        r => r.context("writing the checksum")?,
    }
    rt.block_on(s.quit());
    Ok(())
}

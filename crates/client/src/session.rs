//! A logged-in client session with one server: mode and data-channel state,
//! listings, and the two-party transfers with pipelined commands over a
//! reused MODE E channel: GET in the `get` submodule, PUT in `put`.

mod batch;
mod end;
pub(crate) mod fs;
mod get;
mod login;
mod put;

pub(crate) use fs::path_cmd;

pub use fs::{parse_listing, Entry, Facts};

use crate::ahead::AheadConns;
use crate::control::ControlConn;
use crate::local::LocalTarget;
use crate::peers::{Peer, PeerBook};
use crate::{ClientError, Remote};
use lightpath_engine::{Control, DataChannel, DEFAULT_BLOCK, GROWN_BLOCK};
use lightpath_proto::held::TreeRoot;
use lightpath_proto::{hostport, Features, Reply};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

/// Settings every session of a job shares.
#[derive(Debug, Clone)]
pub struct SessionOpts {
    /// Parallel MODE E streams; 0 chooses from the RTT and the kernel's window limits.
    pub streams: u32,
    /// Rate the automatic stream count aims for (bits/s).
    pub target_bps: u64,
    /// MODE E block size.
    pub block: u64,
    /// Commands kept in flight.
    pub pipeline: usize,
    /// Job-wide byte counter for progress.
    pub total: Arc<AtomicU64>,
    /// Set to stop every transfer of the job (Ctrl-C): they fail, and
    /// remove what they had written under temporary names.
    pub cancel: Arc<AtomicBool>,
    /// When downloads bypass the page cache.
    pub direct_io: lightpath_plan::DirectIo,
    /// Open data connections ahead to servers the peer book knows
    /// ([`crate::peers`]), and keep the book.
    pub connect_ahead: bool,
    /// Open control connections (and those opened ahead) with TCP Fast
    /// Open: to a server that gave a cookie before, the login flight
    /// travels in the SYN; to others, the SYN asks for one
    /// ([`ControlConn::connect`]).
    pub fastopen: bool,
    /// TCP congestion control of our data connections (`None`: BBR where
    /// the kernel allows it; `kernel`: the system's).
    pub congestion: Option<String>,
    /// Data connections to our listeners are taken from any host, not
    /// only from the server's control address (`cp --data-from-any`: a
    /// server whose data leaves from another interface or host).
    pub data_from_any: bool,
    /// An interrupted transfer is broken off rather than aborted with
    /// `ABOR` (`cp --partial`): a server keeps what it received of an
    /// upload whose connections broke, not of one aborted
    /// ([`crate::partial::upload`]).
    pub keep_interrupted: bool,
    /// List a remote tree with one `MLSR` where the server offers it
    /// (otherwise directory by directory with MLSD).
    pub mlsr: bool,
    /// Say nothing of how a copy that succeeds went ([`crate::job::CopyOptions::quiet`]).
    pub quiet: bool,
    /// Sessions of the job that transfer at once (`cp --cc`): they share
    /// the target rate and the job's streams.
    pub sessions: u32,
}

impl SessionOpts {
    /// This session's share of the rate the job aims for.
    pub fn target_share(&self) -> u64 {
        self.target_bps / u64::from(self.sessions.max(1))
    }

    /// The control block of one transfer of the job.
    pub fn control(&self) -> Arc<Control> {
        Arc::new(Control::for_job(self.total.clone(), self.cancel.clone()))
    }
}

/// A GET or PUT of one file.
#[derive(Debug)]
pub struct FileOp {
    /// Path on the server.
    pub remote: Vec<u8>,
    /// Partial transfer: offset and length.
    pub part: Option<(u64, u64)>,
    /// An upload's place for what the server kept of it between tries
    /// (a resumed one sends only the rest: [`crate::resume`]).
    pub resume: Option<std::sync::Arc<crate::resume::Resume>>,
}

/// What a session sends with its login, before the server has answered
/// (see [`Session::open_speculating`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speculation<'a> {
    /// Nothing.
    None,
    /// `VRET tree/`: a remote tree to a local directory.
    Tree(&'a [u8]),
    /// `RETR file`: one remote file to a local path.
    File(&'a [u8]),
    /// Uploads follow: data connections are opened ahead (to a server in
    /// the peer book) for the first STOR or VSTO. With a file (its remote
    /// path and size), its `ALLO` and `STOR` go with them; only with them,
    /// so only to a lightpath server, whose STOR writes a temporary file
    /// (an upload that is then not made leaves nothing).
    /// The file's mode and mtime go ahead of its STOR (`OPTS STOR`).
    Upload(Option<(&'a [u8], u64, Option<TreeRoot>)>),
    /// `VSTO tree`: the same for a local tree to this remote path, after
    /// `OPTS VSTO` with the mode and mtime of its own directory.
    UploadTree(&'a [u8], Option<TreeRoot>),
}

/// A logged-in control session and its data channel.
#[derive(Debug)]
pub struct Session {
    /// Control connection.
    pub ctl: ControlConn,
    /// What the server offers.
    pub feat: Features,
    /// Where the session points.
    pub remote: Remote,
    dc: Option<DataChannel>,
    mode_e: Option<bool>,
    parallelism: u32,
    /// The `BlockSize=` sent with the stream count ([`Session::set_parallelism`]).
    asked_block: Option<u64>,
    /// MLST/SIZE answers (those fetched with the login too), by path.
    stats: std::collections::HashMap<Vec<u8>, fs::RemoteStat>,
    /// The tree path of a `VRET path/` sent with the login whose reply is
    /// not read yet (see [`Session::open_speculating`]).
    spec_vret: Option<Vec<u8>>,
    /// The path of a `RETR` sent with the login whose replies are not read
    /// yet; [`Session::get_many`] takes it over.
    spec_retr: Option<Vec<u8>>,
    /// The path of a `STOR` sent with the login whose replies are not read
    /// yet; [`Session::put_many`] takes it over.
    /// Names the last listing's server left out (a line break in them:
    /// [`lightpath_proto::Reply::names_left_out`]).
    pub names_left_out: u64,
    /// Whether `OPTS CKSM markers=N;` went ([`Session::ask_cksm_markers`]).
    pub(crate) cksm_markers: bool,
    /// The last MLSD's entries that are neither files, directories nor
    /// symlinks (FIFOs, devices, sockets), with their `type` fact: what a
    /// copy skips and `ls` shows.
    pub others: Vec<(Vec<u8>, String)>,
    /// With its size and the mode and mtime its `OPTS STOR` gave.
    pub(crate) spec_stor: Option<(Vec<u8>, u64, Option<TreeRoot>)>,
    /// The tree path of a `VSTO` sent with the login whose replies are not
    /// read yet; [`crate::vfile::put_tree`] takes it over.
    pub(crate) spec_vsto: Option<Vec<u8>>,
    /// Receive window our data connections start with
    /// ([`lightpath_plan::start_recv_window`]).
    recv_window: Option<usize>,
    /// The control connection was closed or lost mid-transfer: the
    /// session must be reopened before its next command
    /// ([`Session::abandon_transfer`], [`Session::lost`]).
    out_of_step: bool,
    /// The last transfer failed once begun, and its data channel with it:
    /// the next needs a new PORT or PASV ([`Session::keep_channel`]).
    data_lost: bool,
    /// The server's failure reply to the last transfer broken off when
    /// interrupted ([`Session::break_off`]), if it came in time: for
    /// what it says the server holds.
    broken_off: Option<Reply>,
    /// The port this session's data connections opened ahead went to.
    ahead_to: Option<u16>,
    /// Shared options.
    pub opts: SessionOpts,
}

impl Session {
    /// MODE E (with streams and PORT, the fallback, for a download), then
    /// `DCON` for `a`, whose connections become the cached channel of the
    /// first transfer. The server's refusal drops them again
    /// ([`Session::settle`]); an upload then asks PASV.
    async fn offer_ahead(&mut self, a: AheadConns, get: bool) -> Result<(), ClientError> {
        if get {
            self.prepare_get().await?;
        } else {
            self.set_mode(true).await?;
        }
        let n = a.conns.len();
        self.ctl.queue_optional(&format!("DCON {} {n}", a.token.to_hex())).await?;
        self.dc().adopt(a.conns);
        self.ahead_to = Some(a.port);
        tracing::info!(server = %self.ctl.name, n, "data connections opened ahead (DCON)");
        Ok(())
    }

    async fn speculate_retr(&mut self, path: &[u8]) -> Result<(), ClientError> {
        if crate::control::check_line(path).is_err() {
            return Ok(()); // reported as that file's failure by get_many
        }
        self.prepare_get().await?;
        self.ctl.send(&retr_cmd(&FileOp { remote: path.to_vec(), part: None, resume: None })).await?;
        self.spec_retr = Some(path.to_vec());
        Ok(())
    }

    async fn speculate_vret(&mut self, tree: &[u8]) -> Result<(), ClientError> {
        self.send_vret(tree, true).await?;
        self.spec_vret = Some(tree.to_vec());
        Ok(())
    }

    /// MODE E, streams and PORT (queued), then `VRET tree` (`tree/` when
    /// `dir_only`: the server refuses a file). The replies are read later.
    pub(crate) async fn send_vret(&mut self, tree: &[u8], dir_only: bool) -> Result<(), ClientError> {
        self.prepare_get().await?;
        // We take each manifest chunk twice (on two streams); a server
        // that does not know the option sends it once.
        let copies = lightpath_proto::manifest::MAX_COPIES;
        self.ctl.queue_optional(lightpath_proto::command::opts_vret_copies(copies)).await?;
        let t = tree.strip_suffix(b"/").filter(|t| !t.is_empty()).unwrap_or(tree);
        let mut cmd = b"VRET ".to_vec();
        cmd.extend_from_slice(t);
        if dir_only && !t.ends_with(b"/") {
            cmd.push(b'/');
        }
        self.ctl.send(&cmd).await
    }

    /// Whether a speculative `VRET` of `tree` is in flight (and now taken
    /// over by the caller, who reads its replies).
    pub(crate) fn take_speculation(&mut self, tree: &[u8]) -> bool {
        let hit = self.spec_vret.as_deref() == Some(tree);
        if hit {
            self.spec_vret = None;
        }
        hit
    }

    /// Read the replies of a speculative `VRET` nobody took over: the
    /// setup's, then the refusal. A server that accepted it after all is
    /// a session that cannot go on.
    pub async fn drop_speculation(&mut self) -> Result<(), ClientError> {
        let Some(tree) = self.spec_vret.take() else { return Ok(()) };
        let _ = self.ctl.flush().await; // MODE E/OPTS/PORT: a plain peer may refuse some
        let _ = self.ctl.take_refused_optional("OPTS VRET Copies"); // nothing to say
        let r = self.ctl.reply().await?;
        tracing::debug!(tree = %String::from_utf8_lossy(&tree), code = r.code, "speculative VRET refused");
        if r.is_preliminary() {
            return Err(self.ctl.unexpected("VRET (sent with the login, not wanted)", &r));
        }
        Ok(())
    }

    /// Streams for this session's transfers: as asked, or enough for
    /// `target_bps` at the measured RTT with the kernel's largest window.
    pub fn streams(&self) -> u32 {
        let rtt_us = self.ctl.rtt.as_micros() as u64;
        let n = crate::plan::stream_count(&self.opts, rtt_us);
        self.say_streams(n, rtt_us);
        n
    }

    /// Streams between two servers (third party): the client holds none
    /// of their data connections, so its open files limit does not count.
    pub fn streams_between_servers(&self) -> u32 {
        let rtt_us = self.ctl.rtt.as_micros() as u64;
        let n = crate::plan::wanted_streams(&self.opts, rtt_us);
        self.say_streams(n, rtt_us);
        n
    }

    fn say_streams(&self, n: u32, rtt_us: u64) {
        if self.opts.streams == 0 {
            tracing::info!(server = %self.ctl.name, n, rtt_us, "automatic stream count (from the measured RTT)");
        }
    }

    /// Whether MODE E is available (taken from FEAT, never assumed).
    pub fn can_mode_e(&self) -> bool {
        self.feat.parallel
    }

    /// Put the server in MODE E (true) or S. Queued: checked by the next flush.
    pub async fn set_mode(&mut self, e: bool) -> Result<(), ClientError> {
        if self.mode_e != Some(e) {
            self.ctl.queue(if e { "MODE E" } else { "MODE S" }).await?;
            self.mode_e = Some(e);
        }
        Ok(())
    }

    /// Whether FEAT said the server is lightpath.
    pub fn is_lightpath(&self) -> bool {
        self.feat.lightpath.is_some()
    }

    /// Ask the server for `n` streams on RETR and, when the receiver is
    /// lightpath (`lightpath_receiver`: we are, or the other server of a
    /// third-party copy is), for blocks of up to [`GROWN_BLOCK`]. Any
    /// server is asked, even before FEAT: GCT takes the option and goes on
    /// sending 256 KiB blocks (it reads `BlockSize` for striped layouts).
    /// Queued. With verbose output on, it also asks for perf markers on
    /// RETR (GCT's `markers=N;`), whose `Data Path:` says how the server
    /// sends ([`ControlConn`] logs it).
    pub async fn set_parallelism(&mut self, n: u32, lightpath_receiver: bool) -> Result<(), ClientError> {
        let block = lightpath_receiver.then_some(GROWN_BLOCK);
        if self.parallelism != n || self.asked_block != block {
            let markers = if tracing::enabled!(tracing::Level::INFO) { "markers=5;" } else { "" };
            // A server keeps an option until it is set again: back to
            // 256 KiB blocks (a session that downloaded, then feeds GCT).
            let size = match (block, self.asked_block) {
                (Some(b), _) => format!("BlockSize={b};"),
                (None, Some(_)) => format!("BlockSize={DEFAULT_BLOCK};"),
                (None, None) => String::new(),
            };
            self.ctl.queue(&format!("OPTS RETR Parallelism={n},{n},{n};{size}{markers}")).await?;
            (self.parallelism, self.asked_block) = (n, block);
        }
        Ok(())
    }

    fn dc(&mut self) -> &mut DataChannel {
        if self.dc.is_none() {
            self.dc = Some(self.new_dc());
        }
        self.dc.as_mut().expect("just set")
    }

    /// A fresh data channel with this session's settings: data connections
    /// to our listeners come from the server's control address only
    /// (unless [`SessionOpts::data_from_any`]).
    fn new_dc(&self) -> DataChannel {
        let from = self.ctl.peer_addr().ok().map(|a| a.ip()).filter(|_| !self.opts.data_from_any);
        data_channel(self.recv_window, self.opts.congestion.as_deref(), from)
    }

    /// PASV: the server listens; returns its address. Over IPv6, EPSV
    /// (PASV has no form for an IPv6 address; RFC 2428).
    pub async fn pasv(&mut self) -> Result<SocketAddr, ClientError> {
        let peer = self.ctl.peer_addr().ok().map(|p| p.ip().to_canonical());
        if let Some(ip @ std::net::IpAddr::V6(_)) = peer {
            let r = self.ctl.ok("EPSV").await?;
            return hostport::parse_epsv_reply(r.text(), ip)
                .map_err(|e| self.ctl.unexpected(&format!("EPSV ({e})"), &r));
        }
        let r = self.ctl.ok("PASV").await?;
        let a = hostport::parse_pasv_reply(r.text()).map_err(|e| self.ctl.unexpected(&format!("PASV ({e})"), &r))?;
        Ok(data_address(a, peer))
    }

    /// Make sure the server has a way to reach our listener (GET in MODE E).
    async fn ready_for_get(&mut self) -> Result<(), ClientError> {
        if self.dc().cached(lightpath_engine::Direction::Recv) > 0 {
            return Ok(());
        }
        let ip = self.ctl.local_addr().map_err(|e| ClientError::Local(e.to_string()))?.ip();
        self.dc().close(); // its port first (a small LIGHTPATH_DATA_PORTS range)
        let l = lightpath_engine::ports::listen_in(ip, data_ports()).map_err(|e| {
            let msg = format!("listening for data: {e}");
            // Every port of the range in use: others' transfers end, and
            // the file is tried again (`--retries`).
            match e.kind() {
                std::io::ErrorKind::AddrInUse => ClientError::Data { msg, transient: true },
                _ => ClientError::Local(msg),
            }
        })?;
        let addr = l.local_addr().map_err(|e| ClientError::Local(e.to_string()))?;
        self.dc().listen(l);
        let cmd = match hostport::format_port(addr) {
            Some(hp) => format!("PORT {hp}"),
            None => format!("EPRT {}", hostport::format_eprt(addr)),
        };
        self.ctl.queue(&cmd).await
    }

    /// Read the replies of queued setup commands before a transfer's own
    /// reply. A failure here leaves the transfer's reply unread, so it is a
    /// control-channel error: the session is given up.
    /// A refused `DCON` is no error: its connections are dropped, and the
    /// server connects to our PORT as usual.
    pub async fn settle(&mut self) -> Result<(), ClientError> {
        let r = self.ctl.flush().await;
        if let Some(why) = self.ctl.take_refused_optional("DCON") {
            tracing::info!(server = %self.ctl.name, "data connections opened ahead refused ({why}); using PORT");
            if self.dc().is_ahead() {
                self.dc().drop_cache();
            }
            if why.starts_with("425") {
                self.ahead_unreachable();
            }
        }
        r.map_err(|e| ClientError::Control(self.ctl.name.clone(), format!("setup refused: {e}")))
    }

    /// The server took `DCON` but our connections never reached it: with
    /// TCP Fast Open they look open at once, so only the server can tell.
    /// The book stops opening them ahead to this server.
    /// Unless the server now announces another DCON port than the one
    /// they went to: the book has that one from FEAT already
    /// ([`Session::write_in`]). A server restarted on another port, its
    /// old one taken by another program, lost connections ahead for good
    /// (a defect hunt's find).
    fn ahead_unreachable(&self) {
        if !self.opts.connect_ahead || !out_of_reach(self.feat.dcon, self.ahead_to) {
            return;
        }
        tracing::info!(server = %self.ctl.name, "its DCON port is out of reach: no more data connections ahead to it");
        let peer = Peer { ahead_port: 0, rtt_us: self.ctl.rtt.as_micros() as u64 };
        PeerBook::default().remember(&self.remote.host, self.remote.port, Some(peer));
    }

    async fn prepare_get(&mut self) -> Result<(), ClientError> {
        self.set_mode(true).await?;
        // Once set it is this session's stream count, which cannot change
        // (the options and the RTT are fixed): not read from /proc again.
        if self.parallelism == 0 {
            let n = self.streams();
            self.set_parallelism(n, true).await?;
        }
        self.ready_for_get().await
    }

    /// `target`, written directly or through the page cache as the
    /// options and this session's RTT say ([`lightpath_plan::direct_io_for`]).
    fn choose_io(&self, target: LocalTarget) -> LocalTarget {
        let rtt_us = self.ctl.rtt.as_micros() as u64;
        let direct = lightpath_plan::direct_io_for(self.opts.direct_io, rtt_us, target.size(), target.fsync());
        if direct {
            tracing::info!(rtt_us, size = target.size(), "download written with direct I/O");
        }
        target.direct(direct)
    }

    /// MODE S download (servers without PARALLEL).
    async fn get_stream(&mut self, op: FileOp, target: LocalTarget) -> Result<u64, ClientError> {
        self.set_mode(false).await?;
        let addr = self.pasv().await?;
        self.ctl.send(&retr_cmd(&op)).await?;
        let mut dc = self.dc.take().unwrap_or_default();
        dc.connect_to(vec![addr]);
        self.recv_stream(dc, &op, target).await
    }

    /// Receive a MODE S file whose RETR was sent, on `dc`'s endpoint.
    async fn recv_stream(&mut self, mut dc: DataChannel, op: &FileOp, target: LocalTarget) -> Result<u64, ClientError> {
        let target = self.choose_io(target);
        let announced = target.size();
        let ctl = self.opts.control();
        let c2 = ctl.clone();
        let base = op.part.map(|p| p.0).unwrap_or(0);
        let job = tokio::task::spawn_blocking(move || {
            let mut recv = |sink: &dyn lightpath_engine::Sink| {
                let c = dc.open_stream()?;
                dc.recv_s(c, sink, base, u64::MAX >> 1, &c2)
            };
            let r = match target.open() {
                Ok(w) => {
                    let got = recv(w.sink().as_ref());
                    got.map(|n| (w, n)).map_err(ClientError::from)
                }
                // A large one's connection is taken and closed at once, which
                // fails the server's send (as in MODE E, `get::DRAIN_AT_MOST`).
                Err(e) if announced > get::DRAIN_AT_MOST => {
                    drop(dc.open_stream());
                    Err(e)
                }
                // Still received (into nothing): a server waits for our data
                // connection, and answers only once the file has gone.
                Err(e) => Err(recv(&lightpath_engine::NullSink).map_or_else(ClientError::from, |_| e)),
            };
            (dc, r)
        });
        self.finish_stream_job(job, &ctl, "RETR").await.and_then(|(w, n)| {
            if op.part.is_none() {
                check_whole(op, true, n, announced)?;
            }
            w.finish(op.part.is_none().then_some(n))?;
            Ok(n)
        })
    }

    /// Take `dc` back after a transfer that began. Unless it ended well
    /// (`ok`), its cached connections are dropped and the channel is
    /// marked lost: a server drops its own (GCT also forgets the PORT or
    /// PASV), so the next transfer needs a new PORT or PASV
    /// ([`Session::prepare_get`], `prepare_put`).
    pub(crate) fn keep_channel(&mut self, mut dc: DataChannel, ok: bool) {
        if !ok {
            dc.drop_cache();
            self.data_lost = true;
        }
        self.dc = Some(dc);
    }

    /// Abort the upload command `cmd` (sent with the login) that the server
    /// took (`r`, a 1xx) although nothing will be sent for it; the data
    /// channel is dropped (the next transfer asks PASV).
    pub(crate) async fn abort_taken(&mut self, cmd: &str, r: &lightpath_proto::Reply) -> ClientError {
        self.abort().await;
        self.dc().drop_cache();
        self.ctl.unexpected(&format!("{cmd} (aborted)"), r)
    }

    /// Take the data channel for a blocking job (give it back with [`Session::put_dc`]).
    pub(crate) fn take_dc(&mut self) -> DataChannel {
        self.dc.take().unwrap_or_default()
    }

    /// Give the data channel back.
    pub(crate) fn put_dc(&mut self, dc: DataChannel) {
        self.dc = Some(dc);
    }

    /// ABOR the running transfer, reading its reply and ABOR's (426 and
    /// 226) for at most [`ABORT_WAIT`].
    pub(crate) async fn abort(&mut self) {
        let _ = tokio::time::timeout(ABORT_WAIT, async {
            self.ctl.send(b"ABOR").await?;
            self.ctl.final_reply().await?;
            self.ctl.final_reply().await
        })
        .await;
    }

    /// Give up the transfer running here because the other server of a
    /// third-party copy failed: close the control connection, as
    /// globus-url-copy does, and read what the server still says for at
    /// most [`ABORT_WAIT`]. Both servers stop the transfer when the
    /// connection ends; an ABOR instead left a Globus server's session
    /// process hung (no reply, never exits) in 2 to 4 copies of 10 whose
    /// STOR waited for its data connection. The session is reopened before
    /// its next command ([`Session::reopen_if_out_of_step`]).
    pub(crate) async fn abandon_transfer(&mut self) -> Result<lightpath_proto::Reply, ClientError> {
        self.out_of_step = true;
        self.ctl.shutdown().await;
        match tokio::time::timeout(ABORT_WAIT, self.ctl.final_reply()).await {
            Ok(r) => r,
            Err(_) => Err(ClientError::Control(self.ctl.name.clone(), "no reply after closing".into())),
        }
    }

    /// The control connection failed (or a reply never came) in the
    /// middle of a transfer, whose error may be reported as another's (the
    /// other server's of a third-party copy, the data channel's): the
    /// session is reopened before its next command.
    pub(crate) fn lost(&mut self) {
        self.out_of_step = true;
    }

    /// A new login in place of a session left out of step
    /// ([`Session::abandon_transfer`], [`Session::lost`]); nothing for any other.
    /// Not cancelled by Ctrl-C: an interrupted upload to GCT logs in again
    /// to remove its temporary file.
    pub(crate) async fn reopen_if_out_of_step(&mut self) -> Result<(), ClientError> {
        if self.out_of_step {
            let again = Self::log_in(&self.remote, self.opts.clone(), &[], Speculation::None).await?;
            let old = std::mem::replace(self, again);
            old.quit().await;
        }
        Ok(())
    }

    /// Send QUIT and close without waiting for the reply (as
    /// globus-url-copy does): nothing is pending once a copy has ended.
    pub async fn quit(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), self.ctl.send(b"QUIT")).await;
    }
}

/// How long a client waits for a server to answer its ABOR (Ctrl-C), or
/// for the last words of one whose transfer it gives up.
pub(crate) const ABORT_WAIT: Duration = Duration::from_secs(2);

/// The ports this client listens on for a download's data connections
/// (`LIGHTPATH_DATA_PORTS`, else `GLOBUS_TCP_PORT_RANGE`: a client behind
/// a firewall), read once; a malformed value is refused by `cp` at start.
fn data_ports() -> Option<lightpath_engine::ports::PortRange> {
    static PORTS: std::sync::OnceLock<Option<lightpath_engine::ports::PortRange>> = std::sync::OnceLock::new();
    *PORTS.get_or_init(|| lightpath_engine::ports::range_from_env("LIGHTPATH_DATA_PORTS").ok().flatten())
}

/// Resolves once `ctl` is cancelled (checked every 50 ms).
pub(crate) async fn cancelled(ctl: &Control) {
    while !ctl.is_cancelled() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Report `e` for every file of an `n`-file batch that has no result yet.
fn fill_err<T>(mut out: Vec<Result<T, ClientError>>, n: usize, e: ClientError) -> Vec<Result<T, ClientError>> {
    while out.len() < n {
        out.push(Err(e.clone()));
    }
    out
}

/// A whole file is published only as one range from 0 that reaches the
/// size the server announced (0: not known). A server that skipped a block
/// would leave a hole of zeros, and one whose file shrank between its SIZE
/// and the RETR a short file: either fails the copy instead.
fn check_whole(op: &FileOp, contiguous: bool, end: u64, announced: u64) -> Result<(), ClientError> {
    let name = String::from_utf8_lossy(&op.remote);
    if !contiguous {
        return Err(ClientError::Local(format!("{name}: the server's blocks left holes; not kept")));
    }
    if end < announced {
        let why = "(did the file change on the server?); not kept";
        return Err(ClientError::Local(format!("{name}: got {end} of the {announced} bytes announced {why}")));
    }
    Ok(())
}

fn retr_cmd(op: &FileOp) -> Vec<u8> {
    let mut c = match op.part {
        Some((off, len)) => format!("ERET P {off} {len} ").into_bytes(),
        None => b"RETR ".to_vec(),
    };
    c.extend_from_slice(&op.remote);
    c
}

/// A data channel whose connections start with a receive window of
/// `window`, ask for congestion control `cc` (`None`: the default, BBR;
/// `kernel`: the system's) and are accepted from `from` only (`None`: any
/// host).
fn data_channel(window: Option<usize>, cc: Option<&str>, from: Option<IpAddr>) -> DataChannel {
    let mut dc = DataChannel::new();
    dc.opts.recv_window = window;
    dc.opts.congestion = lightpath_engine::congestion_choice(cc);
    dc.opts.accept_from = from;
    dc.opts.accept_hint = lightpath_sys::net::AcceptHint::Client;
    dc
}

/// Where to reach a PASV port a server announced at `a`, its control
/// connection being to `peer`: `a`, unless the control connection does not
/// vouch for it. A server behind NAT announces its inside address, and a
/// hostile one could aim the client at hosts inside the client's own
/// network (or its loopback); an address that is inside when the control
/// peer is not, a loopback one when the peer is not on this host, and
/// unspecified, broadcast or multicast ones are replaced by the control
/// peer's. A distinct public address (a DTN's data interface) is kept.
fn data_address(a: SocketAddr, peer: Option<IpAddr>) -> SocketAddr {
    let Some(peer) = peer.map(|p| p.to_canonical()) else { return a };
    let ip = a.ip().to_canonical();
    let broadcast = matches!(ip, IpAddr::V4(v) if v.is_broadcast());
    let odd = ip.is_unspecified() || ip.is_multicast() || broadcast;
    if ip != peer && (odd || hostport::unvouched(ip, peer)) {
        SocketAddr::new(peer, a.port())
    } else {
        a
    }
}

/// Whether a refused DCON (425: none of its connections arrived) shows
/// the server's DCON port out of reach: they went to the port it
/// announces (`announced`, from FEAT), not to an older one from the book.
fn out_of_reach(announced: Option<u16>, went_to: Option<u16>) -> bool {
    announced.is_none() || announced == went_to
}

#[cfg(test)]
mod tests {
    use super::login::follow_flight;
    use super::{data_address, data_channel, out_of_reach, Speculation};

    #[test]
    fn a_dcon_port_is_out_of_reach_only_where_the_connections_went() {
        assert!(out_of_reach(Some(2001), Some(2001)));
        assert!(!out_of_reach(Some(2002), Some(2001)), "the server moved: FEAT's port is tried next");
        assert!(out_of_reach(None, Some(2001)), "no port announced: nothing to try");
    }

    #[test]
    fn no_speculation_on_a_path_held_out_of_the_login_flight() {
        let (a, b) = (b"a".to_vec(), b"b\xff".to_vec());
        let flight = [&a];
        assert_eq!(follow_flight(Speculation::File(b"a"), &flight), Speculation::File(b"a"));
        assert_eq!(follow_flight(Speculation::File(&b), &flight), Speculation::None);
        assert_eq!(follow_flight(Speculation::Tree(&b), &flight), Speculation::None);
        let up = Speculation::Upload(Some((&b, 1, None)));
        assert_eq!(follow_flight(up, &flight), up);
    }

    #[test]
    fn a_pasv_address_is_kept_only_where_the_control_peer_vouches_for_it() {
        let at = |a: &str, peer: &str| data_address(format!("{a}:5000").parse().unwrap(), peer.parse().ok());
        let (public, other_public) = ("192.0.2.7", "198.51.100.9");
        assert_eq!(at(other_public, public).ip().to_string(), other_public, "a data interface");
        assert_eq!(at("10.1.2.3", "10.9.9.9").ip().to_string(), "10.1.2.3", "inside the same site");
        assert_eq!(at("127.0.0.2", "127.0.0.1").ip().to_string(), "127.0.0.2", "this host");
        for hostile in ["10.255.255.1", "192.168.0.1", "127.0.0.1", "169.254.1.1", "0.0.0.0", "224.0.0.1"] {
            assert_eq!(at(hostile, public).ip().to_string(), public, "{hostile} behind a public peer");
        }
        assert_eq!(at("10.255.255.1", "127.0.0.1").ip().to_string(), "127.0.0.1", "a peer on this host");
        assert_eq!(at("255.255.255.255", "10.0.0.1").ip().to_string(), "10.0.0.1");
        assert_eq!(at(other_public, "").ip().to_string(), other_public, "no peer known");
    }

    #[test]
    fn data_channels_ask_for_the_congestion_control_chosen() {
        let cc = |asked| data_channel(None, asked, None).opts.congestion;
        assert_eq!(cc(None).as_deref(), Some(lightpath_engine::DEFAULT_CONGESTION));
        assert_eq!(cc(Some("reno")).as_deref(), Some("reno"));
        assert_eq!(cc(Some("kernel")), None);
        assert_eq!(data_channel(Some(1 << 20), None, None).opts.recv_window, Some(1 << 20));
    }
}

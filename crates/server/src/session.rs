//! One control connection: a reader task frames lines (and acts on ABOR at
//! once), the session loop feeds them in order to the sans-IO [`ServerPi`]
//! and performs the actions it asks for. Pipelined commands wait in the
//! queue while a transfer runs, so replies always come in order.

use crate::fsops;
use crate::partial::Owner;
use crate::transfer;
use crate::ServerCtx;
use lightpath_engine::{Control, DataChannel};
use lightpath_proto::{
    Action, Line, LineBuffer, Output, PassiveKind, PerfMarker, Reply, RestartMarker, ServerPi, Transfer, TransferKind,
};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Failed logins a connection may make before it is closed.
const LOGIN_TRIES: u32 = 3;
/// How long after its check began a failed login is answered.
const FAILED_LOGIN_WAIT: Duration = Duration::from_millis(500);
/// How long `DCON` waits for its connections, beyond two RTTs.
const ADOPT_WAIT: Duration = Duration::from_secs(3);
/// Reply bytes held for one write at most (see [`Session::hold`]).
const HOLD_MAX: usize = 64 << 10;
/// Pipelined commands queued at most (back-pressure beyond).
const QUEUE: usize = 64;

type Current = Arc<Mutex<Running>>;

/// The transfer running now, if any, as the reader task sees it.
#[derive(Debug, Default)]
struct Running {
    ctl: Option<Arc<Control>>,
    /// The control connection is gone: a transfer the session loop starts
    /// from a command still queued is lost at once. Without it, a STOR
    /// read together with the client's close waited for a data connection
    /// that would never come (a third-party client that gave the transfer
    /// up waited 2 s for the reply, then went on).
    gone: bool,
    /// ABORs the reader has read. One read but not yet handled by the
    /// session ([`Session::aborts_seen`]) came after the line of a transfer
    /// that starts now: that transfer starts cancelled (as does every
    /// transfer queued before that ABOR: it aborts what came before it). A pipelined
    /// `STOR f` + `ABOR` (both read before the STOR started) left the STOR
    /// waiting 120 s for a data connection, and a MODE S RETR sent whole.
    aborts_read: u64,
}

struct Session {
    ctx: Arc<ServerCtx>,
    pi: ServerPi,
    out: OwnedWriteHalf,
    dc: DataChannel,
    local: SocketAddr,
    peer: Option<SocketAddr>,
    current: Current,
    /// ABORs the session has taken from the queue ([`Running::aborts_read`]).
    aborts_seen: u64,
    /// The control connection's RTT as the handshake measured it (later
    /// samples can include the client's delayed ACKs).
    rtt: std::time::Duration,
    /// Replies held back while more pipelined commands wait (see [`Session::hold`]).
    held: Vec<u8>,
    /// When the connection was accepted (it must log in within the limits' `login_wait`).
    since: tokio::time::Instant,
    /// Failed logins that count: all of the connection's but those before
    /// its first login.
    failed_logins: u32,
    /// The connection has changed user after a login at least once.
    changed_user: bool,
}

/// The data connection options of a session whose control connection has
/// this RTT: the congestion control asked for (`kernel`: the system's), and
/// a start receive window for uploads sized as a client sizes its own
/// ([`lightpath_plan::start_recv_window`] at the default target, over the
/// streams a client opens at this RTT).
fn configure(dc: &mut DataChannel, congestion: Option<&str>, rtt: Duration) {
    dc.opts.congestion = lightpath_engine::congestion_choice(congestion);
    let rtt_us = rtt.as_micros() as u64;
    let streams = lightpath_plan::min_streams_for_rtt(rtt_us);
    dc.opts.recv_window = lightpath_plan::start_recv_window(rtt_us, lightpath_plan::DEFAULT_TARGET_BPS, streams);
}

/// [`configure`] for an RTT just learned, applied again to the listener
/// and the connections already there (a login flight's DCON or PASV, or
/// an upload's adopted connections, may have come before it).
pub(crate) fn retune(dc: &mut DataChannel, congestion: Option<&str>, rtt: Duration) {
    configure(dc, congestion, rtt);
    dc.retune();
}

/// A session's data channel, before any endpoint: configured for the
/// control connection's RTT, and taking connections only from the client
/// when the server says so (`--data-peers`).
fn new_channel(ctx: &ServerCtx, peer: Option<SocketAddr>, rtt: Duration) -> DataChannel {
    let mut dc = DataChannel::new();
    configure(&mut dc, ctx.cfg.congestion.as_deref(), rtt);
    dc.opts.accept_from = ctx.data_peer(peer.map(|p| p.ip()));
    dc
}

/// The fixed socket buffer SBUF / SITE BUFSIZE asked for (0: none, the
/// kernel autotunes).
fn fixed_buffer(n: u64) -> Option<usize> {
    (n > 0).then_some(n as usize)
}

/// Serve one control connection to the end, holding its `_ticket`.
pub async fn run(stream: TcpStream, ctx: Arc<ServerCtx>, _ticket: crate::admission::Ticket) {
    let peer = stream.peer_addr().ok();
    let Ok(local) = stream.local_addr() else { return };
    // The urgent byte of an abort (`IAC IP IAC DM ABOR`, RFC 959 4.1.3;
    // clients send the DM or the IAC before it as TCP urgent data) stays
    // in the stream, where the line buffer takes the Telnet commands out.
    if let Err(e) = lightpath_sys::net::set_oobinline(&stream) {
        tracing::debug!(?peer, "SO_OOBINLINE: {e}");
    }
    // Unknown (0) means buffered uploads.
    let rtt = lightpath_sys::net::tcp_rtt(&stream).unwrap_or_default();
    let (rd, out) = stream.into_split();
    let current: Current = Arc::default();
    let (tx, rx) = mpsc::channel(QUEUE);
    let reader = tokio::spawn(read_lines(rd, tx, current.clone()));
    let dc = new_channel(&ctx, peer, rtt);
    let pi = ServerPi::new(ctx.pi_config(peer.map(|p| p.ip())));
    let since = tokio::time::Instant::now();
    let mut s = Session {
        ctx,
        pi,
        out,
        dc,
        local,
        peer,
        current,
        aborts_seen: 0,
        rtt,
        held: Vec::new(),
        since,
        failed_logins: 0,
        changed_user: false,
    };
    tracing::info!(?peer, "session start");
    if let Err(e) = s.drive(rx).await {
        tracing::info!(?peer, "session ended: {e}");
        // A session that ends on a failed write may leave its transfer
        // running: the read half, aborted below, would not stop it.
        stop(&s.current, Control::lose);
    }
    // The read half keeps the socket open until the client closes it.
    reader.abort();
    tracing::info!(?peer, user = s.pi.user(), "session end");
}

async fn read_lines(mut rd: tokio::net::tcp::OwnedReadHalf, tx: mpsc::Sender<Line>, current: Current) {
    let mut lb = LineBuffer::telnet();
    let mut buf = vec![0u8; 16 * 1024];
    'reading: loop {
        let n = match rd.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        lb.handle_bytes(&buf[..n]);
        if !forward(&mut lb, &tx, &current).await {
            return;
        }
        loop {
            match lightpath_sys::net::recv_now(rd.as_ref(), &mut buf) {
                Some(0) => break 'reading,
                Some(n) => lb.handle_bytes(&buf[..n]),
                None => break,
            }
            if !forward(&mut lb, &tx, &current).await {
                return;
            }
        }
    }
    // The control connection is gone: stop whatever transfer runs (an
    // upload may keep what it wrote: `crate::partial`), and any that
    // starts from a command read before.
    current.lock().unwrap_or_else(|e| e.into_inner()).gone = true;
    stop(&current, Control::lose);
}

/// Hand the complete lines on, cancelling the running transfer at an
/// ABOR. Returns false when the session is gone.
async fn forward(lb: &mut LineBuffer, tx: &mpsc::Sender<Line>, current: &Current) -> bool {
    while let Some(line) = lb.poll_line() {
        if is_abor(&line) {
            current.lock().unwrap_or_else(|e| e.into_inner()).aborts_read += 1;
            stop(current, Control::cancel);
        }
        if tx.send(line).await.is_err() {
            return false;
        }
    }
    true
}

/// Stop the running transfer, if any, the way `how` says: cancelled at
/// an ABOR, lost with the control connection.
fn stop(current: &Current, how: fn(&Control)) {
    if let Some(c) = current.lock().unwrap_or_else(|e| e.into_inner()).ctl.as_ref() {
        how(c);
    }
}

/// `ABOR` itself (any case, blanks around it): not any line that starts
/// with the letters, as `ABORTIVE` did, which stopped the transfer and
/// was then refused as unknown (a defect hunt).
fn is_abor(line: &Line) -> bool {
    matches!(line, Line::Text(t) if t.trim_ascii().eq_ignore_ascii_case(b"ABOR"))
}

impl Session {
    async fn drive(&mut self, mut rx: mpsc::Receiver<Line>) -> std::io::Result<()> {
        loop {
            if self.flush().await? {
                return self.write_held().await;
            }
            if let Some(why) = self.must_close() {
                return self.send(&Reply::new(421, why)).await;
            }
            // A client that sends without reading must meet back pressure.
            if self.held.len() >= HOLD_MAX {
                self.write_held().await?;
            }
            // Pipelined commands that have arrived are answered together:
            // the replies go out when the queue is empty.
            let mut next = rx.try_recv();
            if matches!(next, Err(mpsc::error::TryRecvError::Empty)) {
                // The reader may be framing the rest of a flight right now.
                tokio::task::yield_now().await;
                next = rx.try_recv();
            }
            let line = match next {
                Ok(l) => l,
                Err(mpsc::error::TryRecvError::Disconnected) => return self.write_held().await,
                Err(mpsc::error::TryRecvError::Empty) => {
                    self.write_held().await?;
                    match tokio::time::timeout_at(self.deadline(), rx.recv()).await {
                        Ok(Some(l)) => l,
                        Ok(None) => return Ok(()),
                        Err(_) if self.pi.user().is_none() => continue, // must_close says why
                        Err(_) => {
                            self.send(&Reply::new(421, "Idle timeout, closing control connection.")).await?;
                            return Ok(());
                        }
                    }
                }
            };
            self.aborts_seen += u64::from(is_abor(&line));
            let was_in = self.pi.user().is_some();
            self.pi.handle_line(line);
            if was_in && self.pi.user().is_none() {
                // A USER after a login (a change of user) starts a login
                // of its own: the timeout counted from the accept, and the
                // first login's failures, refused it (a defect hunt's find).
                // Only the first login forgives: forgiving every one let a
                // user guess another's password without end, logging in
                // again as itself after each two (a security hunt's find).
                self.since = tokio::time::Instant::now();
                if !std::mem::replace(&mut self.changed_user, true) {
                    self.failed_logins = 0;
                }
            }
        }
    }

    /// Why the session must close now, if it must: it has not logged in in
    /// time, or has failed to too often.
    fn must_close(&self) -> Option<&'static str> {
        if self.pi.user().is_some() {
            return None;
        }
        if self.failed_logins >= LOGIN_TRIES {
            return Some("Too many failed logins, closing control connection.");
        }
        (self.since.elapsed() >= self.ctx.cfg.limits.login_wait).then_some("Login timeout, closing control connection.")
    }

    /// How long to wait for the next command: the idle limit, or until the login
    /// deadline before login.
    fn deadline(&self) -> tokio::time::Instant {
        let idle = tokio::time::Instant::now() + self.ctx.cfg.limits.idle;
        match self.pi.user() {
            Some(_) => idle,
            None => idle.min(self.since + self.ctx.cfg.limits.login_wait),
        }
    }

    /// A control connection accepted with TCP Fast Open has no RTT sample
    /// at accept (the handshake was not done): take the kernel's as soon as
    /// it has one, and size the data connections with it.
    fn measure_rtt(&mut self) {
        if !self.rtt.is_zero() {
            return;
        }
        if let Ok(rtt) = lightpath_sys::net::tcp_rtt(self.out.as_ref()) {
            self.rtt = rtt;
            let congestion = self.ctx.cfg.congestion.as_deref();
            if rtt.is_zero() {
                configure(&mut self.dc, congestion, rtt);
            } else {
                retune(&mut self.dc, congestion, rtt);
            }
        }
    }

    /// Drain the PI. Returns true when the session must close.
    async fn flush(&mut self) -> std::io::Result<bool> {
        while let Some(o) = self.pi.poll_output() {
            match o {
                Output::Reply(r) => self.hold(&r),
                Output::Action(a) => {
                    self.measure_rtt();
                    self.act(a).await?
                }
                Output::Close => return Ok(true),
            }
        }
        Ok(false)
    }

    /// Queue a reply to go out with the next write. A client's login flight
    /// is a dozen commands, and a dozen replies written one by one (the
    /// socket has TCP_NODELAY) are a dozen segments: a new connection's
    /// first window holds ten, so the last replies, among them the
    /// transfer's 1xx, would wait a round trip for ACKs.
    fn hold(&mut self, r: &Reply) {
        self.held.extend_from_slice(&r.encode());
    }

    async fn write_held(&mut self) -> std::io::Result<()> {
        if self.held.is_empty() {
            return Ok(());
        }
        let out = std::mem::take(&mut self.held);
        let wait = self.ctx.cfg.limits.reply_wait;
        let mut rest = &out[..];
        // Each write must make progress within `wait`: a client reading
        // slowly but steadily is not dropped, one reading nothing is.
        // Before a login, no write outlasts the login's time: a client
        // that sent commands and read no reply kept its session (and
        // megabytes of socket buffer) for the whole `wait` (a security
        // hunt's find).
        while !rest.is_empty() {
            let login_left = self.pi.user().is_none().then(|| self.deadline());
            let until = tokio::time::Instant::now() + wait;
            match tokio::time::timeout_at(login_left.map_or(until, |d| d.min(until)), self.out.write(rest)).await {
                Ok(Ok(0)) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(Ok(n)) => rest = &rest[n..],
                Ok(Err(e)) => return Err(e),
                Err(_) if self.must_close().is_some() => {
                    let why = "the client did not log in in time and took none of its replies";
                    return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, why));
                }
                Err(_) => {
                    let why = format!("the client took none of its replies for {} s", wait.as_secs());
                    return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, why));
                }
            }
        }
        Ok(())
    }

    /// Send a reply now, after any held ones.
    async fn send(&mut self, r: &Reply) -> std::io::Result<()> {
        self.hold(r);
        self.write_held().await
    }

    async fn act(&mut self, a: Action) -> std::io::Result<()> {
        match a {
            Action::Login { user, pass } => self.login(user, pass).await,
            Action::Passive(kind) => self.passive(kind).await?,
            Action::Active(addrs) => self.dc.connect_to(addrs),
            Action::Adopt(a) => self.adopt(a).await?,
            Action::Transfer(t) => self.transfer(*t).await?,
            Action::Fs(op) => {
                let (ctx, memory, writable) = (self.ctx.clone(), self.ctx.cfg.memory_paths, self.pi.may_write());
                // A CKSM reads a whole file, which may take hours: ABOR
                // and the client's leaving stop it, as they stop a transfer.
                let ctl = self.start_running();
                let every = match &op {
                    lightpath_proto::FsOp::Cksm { markers, .. } => *markers,
                    _ => None,
                };
                let c2 = ctl.clone();
                let job = tokio::task::spawn_blocking(move || fsops::run(&ctx.root, memory, writable, op, &c2));
                let (reply, cwd) = self
                    .status_markers(job, every, &ctl)
                    .await?
                    .unwrap_or_else(|_| (Reply::new(451, "Internal error."), None));
                self.stop_running();
                match cwd {
                    Some(fsops::Effect::Cwd(c)) => self.pi.set_cwd(c),
                    Some(fsops::Effect::RenameFrom(p)) => self.pi.set_rename_from(p),
                    None => {}
                }
                self.hold(&reply);
            }
            Action::Abort => self.dc.drop_cache(),
        }
        Ok(())
    }

    async fn login(&mut self, user: String, pass: String) {
        let mut checked = tokio::time::Instant::now();
        let ok = if self.pi.is_anonymous_user(&user) {
            true
        } else if let Some(users) = self.ctx.users() {
            // One check per CPU at once, however many connections guess.
            let Ok(_turn) = self.ctx.login_checks.acquire().await else { return };
            let u = user.clone();
            checked = tokio::time::Instant::now();
            tokio::task::spawn_blocking(move || users.verify(&u, &pass)).await.unwrap_or(false)
        } else {
            false
        };
        // The server's record of who came (`-v`), and of who was refused.
        if ok {
            tracing::info!(peer = ?self.peer, %user, "login");
        } else {
            tracing::warn!(peer = ?self.peer, %user, "login refused");
        }
        if !ok {
            self.failed_logins += 1;
            // Slow down guessing, and answer every failure as long after
            // its check began: a wrong password for a SHA-512 crypt user
            // (a few ms to check) came 32 ms before one for a name not
            // in the file (an argon2 decoy), telling which names exist.
            tokio::time::sleep_until(checked + FAILED_LOGIN_WAIT).await;
        }
        self.pi.handle_login(&user, ok);
    }

    /// `DCON`: take the data connections opened ahead as the cached channel.
    async fn adopt(&mut self, a: lightpath_proto::ahead::DconArgs) -> std::io::Result<()> {
        let (Some((ahead, _)), Some(peer)) = (self.ctx.ahead.clone(), self.peer) else {
            return self.send(&Reply::new(502, "DCON is not enabled on this server.")).await;
        };
        // The hellos left before the DCON line; allow for a lost segment.
        let wait = ADOPT_WAIT + 2 * self.rtt;
        let reply = match ahead.claim(a, peer.ip(), wait).await {
            Ok(conns) => {
                tracing::debug!(n = conns.len(), "adopted data connections opened ahead");
                self.dc.adopt(conns);
                Reply::new(200, format!("DCON: {} data connections adopted.", a.count))
            }
            // Not 425: the client takes that for a port it cannot reach.
            Err(why @ crate::ahead::ClaimError::Busy) => Reply::new(450, format!("DCON: {why}; use PORT or PASV.")),
            Err(why) => Reply::new(425, format!("DCON: {why}.")),
        };
        self.send(&reply).await
    }

    async fn passive(&mut self, kind: PassiveKind) -> std::io::Result<()> {
        // An IPv4 client of a dual-stack listener (`[::]`) is at a mapped
        // address (`::ffff:a.b.c.d`): PASV gives it as IPv4. A public
        // address of the other family is not this session's to give.
        let local = self.local.ip().to_canonical();
        let ip = self.ctx.cfg.public_ip.filter(|p| p.is_ipv4() == local.is_ipv4()).unwrap_or(local);
        // The session's last listener goes first: in a small port range
        // (`--data-ports`) it held a port, and its own next PASV found none.
        self.dc.close();
        let l = match lightpath_engine::ports::listen_in(self.local.ip(), self.ctx.cfg.data_ports) {
            Ok(l) => l,
            Err(e) => return self.send(&Reply::new(425, format!("Cannot listen for data: {e}"))).await,
        };
        let port = l.local_addr()?.port();
        let addr = SocketAddr::new(ip, port);
        let hp = lightpath_proto::hostport::format_port(addr);
        let reply = match (kind, hp) {
            (PassiveKind::Pasv, Some(hp)) => Reply::new(227, format!("Entering Passive Mode ({hp})")),
            // Over IPv6 the stripe goes as `|2|addr|port|`, as GCT gives it.
            (PassiveKind::Spas, hp) => {
                let line = hp.unwrap_or_else(|| lightpath_proto::hostport::format_eprt(addr));
                Reply::multi(229, "Entering Striped Passive Mode.", vec![line])
            }
            (PassiveKind::Epsv, _) => Reply::new(229, format!("Entering Extended Passive Mode (|||{port}|)")),
            (PassiveKind::Pasv, None) => Reply::new(522, "IPv6 control connection: use EPSV"),
        };
        // SBUF / SITE BUFSIZE before PASV: the listener takes the size, so
        // that the window scale the handshake offers fits it (set after the
        // accept, a small buffer left a window below one segment).
        self.dc.opts.buffer = fixed_buffer(self.pi.settings().tcp_buffer);
        self.dc.listen(l);
        self.send(&reply).await
    }

    async fn transfer(&mut self, t: Transfer) -> std::io::Result<()> {
        // The replies so far go now; the data channel may take a round trip.
        self.write_held().await?;
        let ctl = self.start_running();
        let r = self.run_transfer(t, ctl).await;
        self.stop_running();
        r
    }

    /// The [`Control`] of a long job starting now (a transfer, a `CKSM`),
    /// which an `ABOR` cancels and the control connection's loss stops:
    /// one read before it started already did.
    fn start_running(&mut self) -> Arc<Control> {
        let ctl = Arc::new(Control::new());
        // Asked directly whether the client closed it: the reader task
        // that sets `lose` may run too late under load (a flaky-test
        // hunt's find: a stream upload whose client went away was kept).
        match std::os::fd::AsFd::as_fd(self.out.as_ref()).try_clone_to_owned() {
            Ok(conn) => ctl.watch_peer(conn),
            Err(e) => tracing::debug!("control connection not watched: {e}"),
        }
        let mut running = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if running.gone {
            ctl.lose();
        }
        if running.aborts_read > self.aborts_seen {
            ctl.cancel();
        }
        running.ctl = Some(ctl.clone());
        ctl
    }

    fn stop_running(&mut self) {
        self.current.lock().unwrap_or_else(|e| e.into_inner()).ctl = None;
    }

    async fn run_transfer(&mut self, t: Transfer, ctl: Arc<Control>) -> std::io::Result<()> {
        let (kind, file, start) = (format!("{:?}", t.kind), t.path.display(), std::time::Instant::now());
        // A listing's `Control::skipped` counts the names it left out.
        let listing = matches!(t.kind, TransferKind::Mlsd | TransferKind::List | TransferKind::Nlst);
        let every = marker_interval(&t, self.ctx.cfg.marker_interval);
        let markers = every.is_some();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let mut dc = std::mem::take(&mut self.dc);
        dc.watch = Some(ctl.clone());
        // SBUF / SITE BUFSIZE: a fixed socket buffer only when asked (it disables autotuning).
        dc.opts.buffer = fixed_buffer(t.settings.tcp_buffer);
        let (ctx, c2) = (self.ctx.clone(), ctl.clone());
        let upload = t.kind.is_upload();
        let path = self.client_path(upload);
        let mut job = tokio::task::spawn_blocking(move || {
            let r = transfer::execute(&ctx, &mut dc, t, &c2, ready_tx, path);
            (dc, r)
        });
        let ready = ready_rx.await.unwrap_or_else(|_| Err(Reply::new(451, "Internal error.")));
        let started = self.announce(ready).await?;
        if started && markers {
            self.send(&perf(0, &ctl)).await?;
        }
        let mut tick = tokio::time::interval(Duration::from_secs(u64::from(every.unwrap_or(5))));
        tick.tick().await;
        let (dc, result) = loop {
            tokio::select! {
                done = &mut job => break done.unwrap_or_else(|_| (new_channel(&self.ctx, self.peer, self.rtt), Err(Reply::new(451, "Internal error.")))),
                _ = tick.tick(), if started && markers => self.markers(&ctl).await?,
            }
        };
        self.dc = dc;
        self.dc.watch = None;
        configure(&mut self.dc, self.ctx.cfg.congestion.as_deref(), self.rtt);
        if !started {
            return Ok(());
        }
        self.log_outcome(&result, &ctl, &kind, &file, start);
        self.send_outcome(result.map(|_| ()), &ctl, markers, listing, upload).await
    }

    /// What the transfer knows of the client's side of the path: an upload
    /// waits for an unknown RTT (`ClientPath::learn_rtt`) on the control
    /// connection.
    fn client_path(&self, upload: bool) -> transfer::ClientPath {
        let loopback = self.peer.is_some_and(|p| p.ip().is_loopback());
        let unknown = self.rtt.is_zero() && upload;
        let control = unknown.then(|| self.out.as_ref().as_fd().try_clone_to_owned().ok()).flatten();
        let owner = Owner { user: self.pi.user().unwrap_or_default().to_string(), ip: self.peer.map(|p| p.ip()) };
        transfer::ClientPath { rtt: self.rtt, loopback, control, owner }
    }

    /// Send 150 (or 125 on a reused data connection), or the transfer's
    /// refusal; whether it started.
    async fn announce(&mut self, ready: Result<bool, Reply>) -> std::io::Result<bool> {
        Ok(match ready {
            Ok(reused) => {
                let text = if reused {
                    "Beginning transfer; reusing existing data connection."
                } else {
                    "Beginning transfer."
                };
                self.send(&Reply::new(if reused { 125 } else { 150 }, text)).await?;
                true
            }
            Err(r) => {
                self.send(&r).await?;
                false
            }
        })
    }

    /// The transfer's line in the server's log.
    fn log_outcome<T>(
        &self,
        result: &Result<T, Reply>,
        ctl: &Control,
        kind: &str,
        file: &dyn std::fmt::Display,
        start: std::time::Instant,
    ) {
        let (user, secs) = (self.pi.user().unwrap_or_default().to_string(), start.elapsed().as_secs_f64());
        match result {
            Ok(_) => tracing::info!(peer = ?self.peer, %user, %kind, %file, bytes = ctl.bytes(), secs, "transfer done"),
            Err(r) => tracing::warn!(peer = ?self.peer, %user, %kind, %file, reply = %r.text(), "transfer failed"),
        }
    }

    /// The transfer's final reply (`markers`: perf and restart markers were
    /// asked for): 226 with the tree's counts, or the failure, after the
    /// restart marker of what a failed upload wrote.
    async fn send_outcome(
        &mut self,
        result: Result<(), Reply>,
        ctl: &Control,
        markers: bool,
        listing: bool,
        upload: bool,
    ) -> std::io::Result<()> {
        match result {
            Ok(_) => {
                if markers {
                    self.markers(ctl).await?;
                }
                // A virtual file's tree: the file count (lightpath clients
                // show it for third-party trees, which only servers see),
                // the special files its walk left out, and those it could
                // not read.
                let done = if listing {
                    Reply::transfer_complete(None).with_names_left_out(ctl.skipped())
                } else {
                    Reply::tree_complete(ctl.files(), ctl.skipped()).with_data_bytes(ctl.data_bytes())
                };
                self.send(&done.with_unreadable(&ctl.unreadable())).await
            }
            Err(r) => {
                // What a failed upload wrote (and may have kept for a
                // restart: `crate::partial`) is told first.
                let fresh = if markers && upload { ctl.take_written() } else { Default::default() };
                if !fresh.is_empty() {
                    self.send(&RestartMarker(fresh).to_reply()).await?;
                }
                self.send(&r).await
            }
        }
    }

    /// Await `job`, sending a `113` status marker of the bytes `ctl` counts
    /// `every` so many seconds meanwhile (a CKSM after `OPTS CKSM
    /// markers=N;`, as GCT does): a client's reply timeout otherwise ran
    /// out during a checksum of a large file (500 MB/s: 150 GB in the
    /// default 300 s), and `--verify` copied the file again (a defect hunt).
    async fn status_markers<T>(
        &mut self,
        mut job: tokio::task::JoinHandle<T>,
        every: Option<u32>,
        ctl: &Control,
    ) -> std::io::Result<Result<T, tokio::task::JoinError>> {
        let Some(secs) = every else { return Ok(job.await) };
        let mut tick = tokio::time::interval(Duration::from_secs(u64::from(secs)));
        tick.tick().await;
        loop {
            tokio::select! {
                done = &mut job => return Ok(done),
                _ = tick.tick() => {
                    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                    self.send(&lightpath_proto::markers::status_marker(now.as_secs_f64(), ctl.bytes())).await?;
                }
            }
        }
    }

    async fn markers(&mut self, ctl: &Control) -> std::io::Result<()> {
        self.send(&perf(ctl.bytes(), ctl)).await?;
        let fresh = ctl.take_written();
        if !fresh.is_empty() {
            self.send(&RestartMarker(fresh).to_reply()).await?;
        }
        Ok(())
    }
}

/// Seconds between markers, if `t` sends them (MODE E only, as GCT): a
/// receiving server always (111 and 112, GFD.20), every `receiving`
/// seconds (`serve --marker-interval`); a sending one only the 112s, and
/// only after `OPTS RETR markers=N;`.
fn marker_interval(t: &Transfer, receiving: u32) -> Option<u32> {
    use TransferKind as K;
    let s = &t.settings;
    if s.mode != lightpath_proto::Mode::Extended {
        return None;
    }
    match t.kind {
        _ if t.kind.is_upload() => Some(receiving.max(1)),
        K::Retr | K::Eret { .. } | K::VfileRetr => s.retr_markers.filter(|&n| n > 0),
        _ => None,
    }
}

/// A 112 marker: bytes moved so far, and how they move once the engine
/// has chosen (`Data Path:`, our own fact). A tree being received adds
/// what it holds complete so far ([`Reply::with_held`]), so that a client
/// killed before the failure reply still knows where to resume.
fn perf(bytes: u64, ctl: &Control) -> Reply {
    let ts = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    let data_path = ctl.data_path().map(|p| p.to_string());
    let r = PerfMarker { timestamp: ts, stripe_index: 0, bytes, total_stripes: 1, data_path }.to_reply();
    match ctl.held() {
        Some(h) => r.with_held(&h),
        None => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_connections_are_configured_the_same_before_and_after_transfers() {
        let wan = Duration::from_millis(95);
        let mut dc = DataChannel::new();
        for _ in 0..2 {
            configure(&mut dc, None, wan);
            assert_eq!(dc.opts.congestion.as_deref(), Some(lightpath_engine::DEFAULT_CONGESTION));
            assert!(dc.opts.recv_window.is_some_and(|w| w > 1 << 20));
        }
        configure(&mut dc, Some("kernel"), Duration::from_micros(50));
        assert_eq!((dc.opts.congestion.as_deref(), dc.opts.recv_window), (None, None));
        configure(&mut dc, Some("cubic"), wan);
        assert_eq!(dc.opts.congestion.as_deref(), Some("cubic"));
    }

    #[test]
    fn only_abor_itself_stops_a_transfer() {
        let text = |t: &[u8]| Line::Text(t.to_vec());
        for yes in [&b"ABOR"[..], b"abor", b" ABOR ", b"Abor\t"] {
            assert!(is_abor(&text(yes)), "{:?}", String::from_utf8_lossy(yes));
        }
        for no in [&b"ABORTIVE-NOT-A-COMMAND"[..], b"ABOR x", b"ABO", b"", b"XABOR"] {
            assert!(!is_abor(&text(no)), "{:?}", String::from_utf8_lossy(no));
        }
        assert!(!is_abor(&Line::TooLong));
    }
}

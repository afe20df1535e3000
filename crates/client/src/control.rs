//! The client's control connection: send commands, read replies (framed by
//! `lightpath-proto`), log in, learn FEAT.

use crate::ClientError;
use lightpath_proto::held::Held;
use lightpath_proto::{Features, Line, LineBuffer, PerfMarker, RangeSet, Reply, ReplyParser, RestartMarker};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connect to the first address of `host` that answers; with `fastopen`,
/// as a TCP Fast Open client (see [`lightpath_sys::net::fastopen_connect`]).
pub(crate) async fn open(host: &str, port: u16, fastopen: bool) -> std::io::Result<TcpStream> {
    open_with(host, port, |sock| {
        if fastopen {
            if let Err(e) = lightpath_sys::net::fastopen_connect(sock) {
                tracing::debug!("TCP Fast Open: {e}");
            }
        }
    })
    .await
}

/// The longest an address that is not a host's last may take to answer
/// before the next is tried: a healthy handshake, even with a SYN lost
/// twice, is done within about 3 s.
const NEXT_ADDRESS_AFTER: Duration = Duration::from_secs(5);

/// Connect to the first address of `host` that answers, `prepare` applied
/// to each socket before its SYN. Each address but the last gets at most
/// [`NEXT_ADDRESS_AFTER`] of the [`connect_timeout`]: one that dropped
/// every SYN (an AAAA record of a broken IPv6 path) took all of it, and
/// the next address, which worked, was never tried (a defect hunt's find).
/// (A Fast Open connect to a server whose cookie is known returns at once,
/// its SYN going with the first write: a dead first address then shows as
/// a reply that never comes, and the next is not tried.)
pub(crate) async fn open_with(
    host: &str,
    port: u16,
    prepare: impl Fn(&tokio::net::TcpSocket),
) -> std::io::Result<TcpStream> {
    let deadline = tokio::time::Instant::now() + connect_timeout();
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port)).await.map_err(no_such_host)?.collect();
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, format!("{host} has no address"));
    for (i, &addr) in addrs.iter().enumerate() {
        let sock = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() }?;
        prepare(&sock);
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        // At most 5 s, and no more than an equal part of what is left, so
        // that a short --connect-timeout leaves the last address its part.
        let rest = (addrs.len() - i) as u32;
        let share = if i + 1 < addrs.len() { left.min(NEXT_ADDRESS_AFTER).min(left / rest) } else { left };
        // Named when the host has several (the error already names it).
        let at = if addrs.len() > 1 { format!("{addr}: ") } else { String::new() };
        match tokio::time::timeout(share, sock.connect(addr)).await {
            Ok(Ok(c)) => return Ok(c),
            Ok(Err(e)) => last = std::io::Error::new(e.kind(), format!("{at}{e}")),
            Err(_) => last = std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{at}timed out")),
        }
    }
    Err(last)
}

/// A failed lookup of a host: `NotFound` when the name has no address
/// (getaddrinfo's EAI_NONAME and EAI_NODATA, which std gives only as
/// text), the error as it was otherwise (EAI_AGAIN, a resolver down for a
/// moment, is worth another try).
fn no_such_host(e: std::io::Error) -> std::io::Error {
    let text = e.to_string();
    let gone = ["Name or service not known", "No address associated with hostname"].iter().any(|m| text.contains(m));
    if gone {
        return std::io::Error::new(std::io::ErrorKind::NotFound, format!("no such host ({text})"));
    }
    e
}

/// Where a control connection's RTT came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RttSource {
    /// The timed handshake, or the kernel's once the greeting came.
    Handshake,
    /// The peer book's, while a Fast Open handshake is under way.
    Book,
    /// None yet: a Fast Open handshake under way to a server the book does
    /// not know.
    Unknown,
}

/// A timeout that a command-line option sets, or else an environment
/// variable (whole seconds, read once), or else a default.
pub struct Timeout {
    value: std::sync::OnceLock<Duration>,
    var: &'static str,
    default: Duration,
}

impl Timeout {
    const fn new(var: &'static str, default: Duration) -> Timeout {
        Timeout { value: std::sync::OnceLock::new(), var, default }
    }

    /// Set it before any session opens; no effect once one has read it.
    pub fn set(&self, d: Duration) {
        let _ = self.value.set(d);
    }

    /// What was set, or the variable's seconds if set (and above 0), or
    /// the default.
    pub fn get(&self) -> Duration {
        *self.value.get_or_init(|| {
            let secs = std::env::var(self.var).ok().and_then(|v| v.trim().parse::<u64>().ok());
            secs.filter(|&s| s > 0).map_or(self.default, Duration::from_secs)
        })
    }
}

/// How long to wait for a reply to begin, and then for the whole of it to
/// arrive (a server trickling one line of a reply every few seconds must
/// not keep the client waiting forever): 300 s, `LIGHTPATH_REPLY_TIMEOUT`
/// or `cp --reply-timeout`.
pub static REPLY_TIMEOUT: Timeout = Timeout::new("LIGHTPATH_REPLY_TIMEOUT", Duration::from_secs(300));

/// How long the TCP connect of a control connection may take: 30 s,
/// `LIGHTPATH_CONNECT_TIMEOUT` or `cp --connect-timeout`. With TCP Fast
/// Open and a cookie the kernel defers the SYN and `connect` returns at
/// once: then the greeting must come within it (a host that is down
/// would otherwise be waited for through every SYN retry of the kernel,
/// about two minutes).
pub static CONNECT_TIMEOUT: Timeout = Timeout::new("LIGHTPATH_CONNECT_TIMEOUT", Duration::from_secs(30));

/// [`REPLY_TIMEOUT`] in force.
pub fn reply_timeout() -> Duration {
    REPLY_TIMEOUT.get()
}

/// [`CONNECT_TIMEOUT`] in force.
pub fn connect_timeout() -> Duration {
    CONNECT_TIMEOUT.get()
}

/// One control connection.
#[derive(Debug)]
pub struct ControlConn {
    stream: TcpStream,
    lines: LineBuffer,
    parser: ReplyParser,
    /// Commands sent with [`ControlConn::queue`] whose replies are unread,
    /// and whether their refusal is no error ([`ControlConn::queue_optional`]).
    pending: std::collections::VecDeque<(String, bool)>,
    /// Optional commands refused: the command and the reply.
    refused_optional: Vec<(String, String)>,
    /// Commands held back by [`ControlConn::cork`], written in one piece.
    corked: Option<Vec<u8>>,
    /// Round-trip time: the TCP handshake of the control connection (with
    /// Fast Open, the book's or none until the greeting arrives, then the
    /// kernel's).
    pub rtt: Duration,
    /// Where `rtt` came from.
    rtt_source: RttSource,
    /// When the greeting must have come: [`connect_timeout`] after the
    /// connect began (with a Fast Open connect the kernel deferred, the
    /// handshake itself is under way until then; a server that takes the
    /// connection and says nothing is not waited for either). `None`
    /// once a reply came.
    handshake_by: Option<tokio::time::Instant>,
    /// Server name for messages.
    pub name: String,
    /// The data path the server's last perf marker named (logged on change).
    server_path: Option<String>,
    /// Ranges the server's `111` markers said it wrote, since the last
    /// [`ControlConn::take_confirmed`] (what an upload may resume from).
    confirmed: RangeSet,
    /// When the reply being read began to arrive (a line or part of one),
    /// while it is unfinished: the whole reply must come by
    /// [`reply_timeout`] after it.
    reply_started: Option<tokio::time::Instant>,
    /// The least a reply is waited for, past `--reply-timeout`
    /// ([`ControlConn::wait_at_least`]).
    min_wait: Duration,
    /// The last command sent (redacted), and the last reply read, for
    /// saying what a timeout waited for.
    last_sent: String,
    last_reply: Option<u16>,
    /// Whether the server reads a doubled 0xFF (`IAC IAC`) back as one
    /// byte of a name: lightpath does; others, once FEAT has said what the
    /// server is, are not sent such a name ([`ControlConn::send`]);
    /// `None` until then (the login flight).
    iac_names: Option<bool>,
    /// Whether the server drops bytes outside printable ASCII (but TAB)
    /// from the names in its commands: globus-gridftp-server (13.24,
    /// checked: `SIZE p\xc3\xa9` and `SIZE q\x1b` answered for `p` and
    /// `q`, and percent-encoding is not read), which says `UTF8` in FEAT
    /// all the same. Such a name is not sent ([`ControlConn::check`]).
    ascii_names: bool,
    /// What a tree's receiving server last said in its perf markers that
    /// it holds ([`Reply::take_held`]), since the last
    /// [`ControlConn::take_marked_held`], and who is told as each comes.
    marked_held: Option<Held>,
    on_held: Option<HeldHook>,
}

/// Called with each [`Held`] a perf marker carries
/// ([`ControlConn::watch_held`]).
pub(crate) struct HeldHook(pub Box<dyn FnMut(&Held) + Send + Sync>);

impl std::fmt::Debug for HeldHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeldHook")
    }
}

impl ControlConn {
    /// Connect (the 220 greeting is read by [`ControlConn::login`], so that
    /// the login can travel before it arrives). With `fastopen`, the
    /// connection uses TCP Fast Open. Holding a cookie from an earlier
    /// connection, the kernel sends no SYN yet: `connect` returns at once,
    /// the first write (the whole corked login flight) travels in the SYN,
    /// and `book_rtt` (the RTT a past visit measured), if any, stands in
    /// for the handshake's. Without a cookie the SYN asks for one (a server
    /// without Fast Open ignores the request) and the handshake is timed as
    /// usual: a first visit earns the next one its saved round trip.
    pub async fn connect(
        host: &str,
        port: u16,
        fastopen: bool,
        book_rtt: Option<Duration>,
    ) -> Result<ControlConn, ClientError> {
        let name = crate::location::host_port(host, port);
        let started = tokio::time::Instant::now();
        let fut = open(host, port, fastopen);
        // A second more than `open` takes at most, so that its error (which
        // names the address) is the one said; this one covers the lookup.
        let stream = tokio::time::timeout(connect_timeout() + Duration::from_secs(1), fut)
            .await
            .map_err(|_| ClientError::Connect(name.clone(), "timed out".into()))?
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => ClientError::NotThere(name.clone(), e.to_string()),
                _ => ClientError::Connect(name.clone(), e.to_string()),
            })?;
        let _ = stream.set_nodelay(true);
        let deferred = fastopen && !lightpath_sys::net::tcp_handshake_done(&stream).unwrap_or(true);
        // The kernel's sample of the handshake where it has one: the time
        // `open` took counts the name's lookup, an address that dropped
        // our SYN, and a SYN sent again (a lossy 2 ms path measured 2 s,
        // and took 64 streams).
        let kernel = lightpath_sys::net::tcp_rtt(&stream).ok().filter(|d| !d.is_zero());
        let (rtt, rtt_source) = match (deferred, book_rtt) {
            (false, _) => (kernel.unwrap_or_else(|| started.elapsed()), RttSource::Handshake),
            (true, Some(b)) => (b, RttSource::Book),
            (true, None) => (Duration::ZERO, RttSource::Unknown),
        };
        let c = ControlConn {
            stream,
            lines: LineBuffer::new(),
            parser: ReplyParser::new(),
            pending: Default::default(),
            refused_optional: Vec::new(),
            corked: None,
            rtt,
            rtt_source,
            handshake_by: Some(started + connect_timeout()),
            name,
            server_path: None,
            confirmed: RangeSet::new(),
            reply_started: None,
            min_wait: Duration::ZERO,
            last_sent: "(none yet: the greeting)".into(),
            last_reply: None,
            iac_names: None,
            ascii_names: false,
            marked_held: None,
            on_held: None,
        };
        Ok(c)
    }

    /// With Fast Open, the handshake is done once the greeting is here: take
    /// the kernel's RTT of it over the book's (which would never change) or
    /// none.
    fn measure_rtt(&mut self) {
        if std::mem::replace(&mut self.rtt_source, RttSource::Handshake) == RttSource::Handshake {
            return;
        }
        match lightpath_sys::net::tcp_rtt(&self.stream) {
            Ok(rtt) if !rtt.is_zero() => self.rtt = rtt,
            _ => {}
        }
    }

    /// Whether `rtt` is known: false only between a Fast Open connect to a
    /// server the book does not know and the greeting (nothing that
    /// depends on the RTT, such as the stream count, can be sent before).
    pub fn rtt_known(&self) -> bool {
        self.rtt_source != RttSource::Unknown
    }

    /// Whether the server took the login flight from the SYN (Fast Open
    /// saved the handshake's round trip); known once it has answered.
    pub fn fastopen_used(&self) -> bool {
        lightpath_sys::net::syn_data_acked(&self.stream).unwrap_or(false)
    }

    /// Local address of the control connection (our address for PORT).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.stream.local_addr()
    }

    /// Peer address (host for EPSV replies).
    pub fn peer_addr(&self) -> std::io::Result<SocketAddr> {
        self.stream.peer_addr()
    }

    /// Send one command line (or hold it back while corked), a 0xFF byte
    /// in it doubled ([`lightpath_proto::command::wire_line`]).
    pub async fn send(&mut self, cmd: &[u8]) -> Result<(), ClientError> {
        tracing::debug!(server = %self.name, "> {}", redact(cmd));
        self.check(cmd)?;
        self.last_sent = redact(cmd);
        let line = lightpath_proto::command::wire_line(cmd);
        if let Some(out) = &mut self.corked {
            out.extend_from_slice(&line);
            return Ok(());
        }
        self.stream.write_all(&line).await.map_err(|e| self.io_err(e))
    }

    /// Close our half of the connection: the server reads its end and ends
    /// the session, stopping any transfer. Replies it still sends can be read.
    pub async fn shutdown(&mut self) {
        let _ = self.uncork().await;
        let _ = self.stream.shutdown().await;
    }

    /// Hold commands back until [`ControlConn::uncork`] (or the next read of
    /// a reply) writes them in one piece. A flight of a dozen commands
    /// written one by one (with TCP_NODELAY) is a dozen segments, and a new
    /// connection's first window holds ten: the last ones would wait a
    /// round trip.
    pub fn cork(&mut self) {
        self.corked.get_or_insert_with(Vec::new);
    }

    /// Write the commands held back by [`ControlConn::cork`].
    pub async fn uncork(&mut self) -> Result<(), ClientError> {
        let Some(out) = self.corked.take() else { return Ok(()) };
        self.stream.write_all(&out).await.map_err(|e| self.io_err(e))
    }

    /// Read the next reply (preliminary ones included). A reply must begin
    /// within [`reply_timeout`] and, once begun, end within it too.
    /// Cancel-safe (third-party copies select over two of these): what has
    /// arrived, and when the reply began, stay in `self`.
    pub async fn reply(&mut self) -> Result<Reply, ClientError> {
        self.reply_alive(None).await
    }

    /// The final reply of a transfer whose data job reports the bytes it
    /// `moved`: while they grow, the server's silence is no stall. A
    /// server sends perf markers only when asked (`-v` asks), or not at
    /// all, or less often than the reply timeout: every download and
    /// upload that took longer than `--reply-timeout` (300 s) failed as
    /// "stalled" with its data flowing (a defect hunt).
    pub async fn final_reply_alive(&mut self, moved: &(dyn Fn() -> u64 + Sync)) -> Result<Reply, ClientError> {
        self.final_reply_with(Some(moved)).await
    }

    async fn reply_alive(&mut self, moved: Option<&(dyn Fn() -> u64 + Sync)>) -> Result<Reply, ClientError> {
        self.uncork().await?;
        let mut buf = [0u8; 8192];
        loop {
            if let Some(r) = self.parse_buffered()? {
                return Ok(r);
            }
            let n = self.read_some(&mut buf, moved).await?;
            self.lines.handle_bytes(&buf[..n]);
        }
    }

    /// The next complete reply among the lines already received.
    fn parse_buffered(&mut self) -> Result<Option<Reply>, ClientError> {
        while let Some(line) = self.lines.poll_line() {
            let Line::Text(t) = line else { continue };
            let text = String::from_utf8_lossy(&t);
            let parsed = self.parser.handle_line(&text).map_err(|e| self.limit_err(&e))?;
            if let Some(r) = parsed {
                tracing::debug!(server = %self.name, "< {} {}", r.code, r.full_text());
                self.reply_started = None;
                self.handshake_by = None;
                self.last_reply = Some(r.code);
                self.note_data_path(&r);
                if let Some(m) = RestartMarker::from_reply(&r) {
                    self.confirmed = std::mem::take(&mut self.confirmed).union(&m.0);
                }
                return Ok(Some(self.note_held(r)));
            }
        }
        Ok(None)
    }

    /// Read more of the control connection, by the reply's deadline; with
    /// `moved`, a deadline passed while no reply has begun is moved on as
    /// long as the bytes it counts grew since the last one.
    async fn read_some(
        &mut self,
        buf: &mut [u8],
        moved: Option<&(dyn Fn() -> u64 + Sync)>,
    ) -> Result<usize, ClientError> {
        let mut seen = moved.map(|m| m());
        let n = loop {
            let deadline = self.handshake_by.map_or(self.deadline(), |by| by.min(self.deadline()));
            match tokio::time::timeout_at(deadline, self.stream.read(buf)).await {
                Ok(r) => break r.map_err(|e| self.io_err(e))?,
                Err(_) => {
                    let now = moved.map(|m| m());
                    let waiting = self.reply_started.is_none() && self.handshake_by.is_none();
                    if !(waiting && now > seen) {
                        return Err(self.timeout_err());
                    }
                    seen = now;
                }
            }
        };
        if n == 0 {
            return Err(ClientError::Control(self.name.clone(), "server closed the control connection".into()));
        }
        Ok(n)
    }

    /// When the reply being waited for must have come: [`reply_timeout`]
    /// from now if none has begun, else from when it began (so a trickle
    /// of lines cannot stretch it).
    fn deadline(&mut self) -> tokio::time::Instant {
        let now = tokio::time::Instant::now();
        let wait = reply_timeout().max(self.min_wait);
        if !(self.parser.in_progress() || self.lines.pending() > 0) {
            self.reply_started = None;
            return now + wait;
        }
        *self.reply_started.get_or_insert(now) + wait
    }

    /// Wait at least `d` for a reply from now on: a third-party transfer's
    /// servers are silent between their perf markers, which come every few
    /// seconds whatever `--reply-timeout` says.
    pub fn wait_at_least(&mut self, d: Duration) {
        self.min_wait = d;
    }

    /// The error for a reply that did not come (or not whole) in time,
    /// saying what was waited for.
    fn timeout_err(&self) -> ClientError {
        if self.handshake_by.is_some_and(|by| by <= tokio::time::Instant::now()) {
            let secs = connect_timeout().as_secs();
            let why = if lightpath_sys::net::tcp_handshake_done(&self.stream).unwrap_or(true) {
                format!("timed out: no greeting within {secs} s (the server took the connection and said nothing)")
            } else {
                format!("timed out: no answer to the SYN (TCP Fast Open) within {secs} s")
            };
            return ClientError::Connect(self.name.clone(), why);
        }
        let secs = reply_timeout().as_secs();
        let cmd = &self.last_sent;
        let why = if self.reply_started.is_some() {
            let lines = self.parser.pending_lines();
            format!("reply not finished {secs} s after it began ({lines} lines so far; last command sent: {cmd})")
        } else if self.last_reply.is_some_and(|c| c / 100 == 1) {
            let code = self.last_reply.unwrap_or(0);
            format!("no reply for {secs} s after {code}: the transfer under way stalled (last command sent: {cmd})")
        } else {
            format!("no reply within {secs} s (last command sent: {cmd})")
        };
        ClientError::Control(self.name.clone(), why)
    }

    /// The error for a failed read or write: before anything came from the
    /// server, the connection may not be up yet (a Fast Open connect
    /// returns before its handshake), so it is the connect's.
    fn io_err(&self, e: std::io::Error) -> ClientError {
        if self.last_reply.is_none() && self.lines.pending() == 0 {
            return ClientError::Connect(self.name.clone(), e.to_string());
        }
        ClientError::Control(self.name.clone(), e.to_string())
    }

    /// The error for a reply over the parser's bounds.
    fn limit_err(&self, e: &lightpath_proto::reply::ReplyError) -> ClientError {
        if let lightpath_proto::reply::ReplyError::NotFtp(_) = e {
            return ClientError::NotThere(self.name.clone(), e.to_string());
        }
        ClientError::Limit { server: self.name.clone(), what: format!("{e} (last command sent: {})", self.last_sent) }
    }

    /// Take what a perf marker says the server holds of the tree under way
    /// out of it: kept, and given to the hook of [`ControlConn::watch_held`].
    fn note_held(&mut self, mut r: Reply) -> Reply {
        if r.code == 112 {
            if let Some(h) = r.take_held() {
                if let Some(hook) = &mut self.on_held {
                    (hook.0)(&h);
                }
                self.marked_held = Some(h);
            }
        }
        r
    }

    /// Call `hook` with what each perf marker says the receiving server
    /// holds of the tree under way (`None`: stop).
    pub(crate) fn watch_held(&mut self, hook: Option<HeldHook>) {
        self.on_held = hook;
    }

    /// What the perf markers last said the server holds, since the last call.
    pub(crate) fn take_marked_held(&mut self) -> Option<Held> {
        self.marked_held.take()
    }

    /// The ranges the server's `111` markers named since the last call.
    pub fn take_confirmed(&mut self) -> RangeSet {
        std::mem::take(&mut self.confirmed)
    }

    /// Say in verbose output how the server moves the bytes, as its perf
    /// markers tell (`Data Path:`), each time that changes.
    fn note_data_path(&mut self, r: &Reply) {
        let Some(path) = PerfMarker::from_reply(r).and_then(|m| m.data_path) else { return };
        if self.server_path.as_deref() != Some(path.as_str()) {
            tracing::info!(server = %self.name, path = %path, "server data path");
            self.server_path = Some(path);
        }
    }

    /// Read replies until a final (non-1xx) one.
    pub async fn final_reply(&mut self) -> Result<Reply, ClientError> {
        self.final_reply_with(None).await
    }

    async fn final_reply_with(&mut self, moved: Option<&(dyn Fn() -> u64 + Sync)>) -> Result<Reply, ClientError> {
        loop {
            let r = self.reply_alive(moved).await?;
            if !r.is_preliminary() {
                return Ok(r);
            }
        }
    }

    /// Whether `cmd` can be sent to this server: no line break or NUL in
    /// it ([`check_line`]), no 0xFF byte unless the server is lightpath
    /// (or not known yet: the login flight), and only printable ASCII (and
    /// TAB) and paths of at most [`GCT_PATH_MAX`] bytes to
    /// globus-gridftp-server (`ascii_names`). A batch checks each file's
    /// command with this first, so that one such name fails alone.
    pub fn check(&self, cmd: &[u8]) -> Result<(), ClientError> {
        check_line(cmd)?;
        if self.iac_names == Some(false) && cmd.contains(&0xFF) {
            return Err(iac_refused(cmd));
        }
        if self.ascii_names && path_of(cmd).len() > GCT_PATH_MAX {
            return Err(ClientError::Usage(format!(
                "cannot send {:.120}...: its path is {} bytes; globus-gridftp-server cuts paths to {GCT_PATH_MAX} \
                 bytes and would act on another file",
                redact(cmd).escape_debug(),
                path_of(cmd).len()
            )));
        }
        if self.ascii_names && !printable(cmd) {
            let shown = redact(cmd).escape_debug().to_string();
            return Err(ClientError::Usage(format!(
                "cannot send {shown}: globus-gridftp-server drops the bytes of a name outside printable ASCII \
                 (accented letters, control characters) and would act on another file"
            )));
        }
        Ok(())
    }

    /// Send a command without waiting: its reply is checked by the next
    /// [`ControlConn::flush`] (pipelining saves a round trip per command).
    pub async fn queue(&mut self, cmd: impl AsRef<[u8]>) -> Result<(), ClientError> {
        self.queue_as(cmd.as_ref(), false).await
    }

    /// [`ControlConn::queue`] a command whose refusal is no error: the next
    /// flush notes it for [`ControlConn::take_refused_optional`].
    pub async fn queue_optional(&mut self, cmd: impl AsRef<[u8]>) -> Result<(), ClientError> {
        self.queue_as(cmd.as_ref(), true).await
    }

    async fn queue_as(&mut self, cmd: &[u8], optional: bool) -> Result<(), ClientError> {
        self.send(cmd).await?;
        self.pending.push_back((redact(cmd), optional));
        Ok(())
    }

    /// The reply that refused the optional command starting with `verb`.
    pub fn take_refused_optional(&mut self, verb: &str) -> Option<String> {
        let i = self.refused_optional.iter().position(|(c, _)| c.starts_with(verb))?;
        Some(self.refused_optional.remove(i).1)
    }

    /// Read the replies of queued commands; the first failure is returned.
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        let mut first_err = None;
        while let Some((cmd, optional)) = self.pending.pop_front() {
            let r = self.final_reply().await?;
            if r.is_error() && optional {
                self.refused_optional.push((cmd, format!("{} {}", r.code, r.full_text())));
            } else if r.is_error() && first_err.is_none() {
                first_err = Some(self.refused(cmd, &r));
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Send a command (any bytes: names need not be UTF-8) and return its
    /// final reply.
    pub async fn cmd(&mut self, cmd: impl AsRef<[u8]>) -> Result<Reply, ClientError> {
        self.flush().await?;
        self.send(cmd.as_ref()).await?;
        self.final_reply().await
    }

    /// Send a command that must succeed (2yz, or 3yz where that is progress).
    pub async fn ok(&mut self, cmd: impl AsRef<[u8]>) -> Result<Reply, ClientError> {
        let cmd = cmd.as_ref();
        let r = self.cmd(cmd).await?;
        if r.is_error() {
            return Err(self.refused(redact(cmd), &r));
        }
        Ok(r)
    }

    /// [`ControlConn::ok`] of `cmd` sent right behind `first`, an advisory
    /// command whose reply is read but not checked (`OPTS STOR`, which an
    /// older server refuses): one round trip for both.
    pub async fn ok_behind(&mut self, first: &[u8], cmd: &[u8]) -> Result<Reply, ClientError> {
        self.flush().await?;
        self.send(first).await?;
        self.send(cmd).await?;
        let _ = self.final_reply().await?;
        let r = self.final_reply().await?;
        if r.is_error() {
            return Err(self.refused(redact(cmd), &r));
        }
        Ok(r)
    }

    /// USER/PASS, FEAT, TYPE I, SITE CLIENTINFO and `extra` commands, all
    /// sent at once without waiting for the greeting: the whole login takes
    /// the round trip the greeting needs anyway. Returns the features and
    /// the final replies to `extra`, in order.
    ///
    /// RFC 959 lets a client send before the greeting arrives (the server
    /// reads commands after it); the Globus server and ours both do.
    pub async fn login(
        &mut self,
        user: &str,
        pass: &str,
        extra: &[Vec<u8>],
    ) -> Result<(Features, Vec<Reply>), ClientError> {
        self.login_send(user, pass, extra).await?;
        self.login_read(extra.len()).await
    }

    /// The sending half of [`ControlConn::login`]: more commands may follow
    /// in the same flight before [`ControlConn::login_read`].
    /// The flight is corked: it leaves with the first read of a reply.
    pub async fn login_send(&mut self, user: &str, pass: &str, extra: &[Vec<u8>]) -> Result<(), ClientError> {
        self.cork();
        self.send(format!("USER {user}").as_bytes()).await?;
        self.send(format!("PASS {pass}").as_bytes()).await?;
        self.send(b"FEAT").await?;
        self.send(b"TYPE I").await?;
        self.send(b"SITE CLIENTINFO appname=\"lightpath\";appver=\"0.1\";").await?;
        for cmd in extra {
            self.send(cmd).await?;
        }
        Ok(())
    }

    /// The reading half of [`ControlConn::login`], for `extra` commands.
    pub async fn login_read(&mut self, extra: usize) -> Result<(Features, Vec<Reply>), ClientError> {
        let hello = self.reply().await?;
        if hello.code != 220 {
            return Err(self.unexpected("greeting", &hello));
        }
        self.measure_rtt();
        let r = self.final_reply().await?;
        let p = self.final_reply().await?;
        let logged_in = (r.code == 331 && p.is_ok()) || (r.is_ok() && p.code == 503);
        if !logged_in {
            let why = if r.code == 331 { p.full_text() } else { r.full_text() };
            return Err(ClientError::Login(self.name.clone(), why));
        }
        let feat = self.final_reply().await?;
        let ty = self.final_reply().await?;
        if ty.is_error() {
            return Err(self.unexpected("TYPE I", &ty));
        }
        let _ = self.final_reply().await?; // CLIENTINFO: optional, errors ignored
        let mut replies = Vec::with_capacity(extra);
        for _ in 0..extra {
            replies.push(self.final_reply().await?);
        }
        let feat = Features::from_reply(&feat);
        self.iac_names = Some(feat.lightpath.is_some());
        self.ascii_names = feat.dsi && feat.lightpath.is_none();
        Ok((feat, replies))
    }

    /// The error for a reply we did not expect.
    pub fn unexpected(&self, what: &str, r: &Reply) -> ClientError {
        self.refused(what.into(), r)
    }

    /// This server's refusal `r` of `cmd` (as shown: a password redacted).
    fn refused(&self, cmd: String, r: &Reply) -> ClientError {
        let (reply, code) = (r.full_text(), r.code);
        ClientError::Refused { server: self.name.clone(), cmd, reply, code, here: crate::DataEnd::Fine }
    }
}

/// A command is one line: a name with a line break in it would end the
/// command there and make the rest a second one (`STOR a<LF>DELE b`), and
/// a NUL ends it for many servers. Such names cannot travel by FTP
/// commands at all, so they are refused before anything is sent.
pub(crate) fn check_line(cmd: &[u8]) -> Result<(), ClientError> {
    if cmd.iter().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
        let shown = redact(cmd).escape_debug().to_string();
        return Err(ClientError::Usage(format!(
            "cannot send {shown}: a name with a line break or NUL byte cannot travel in an FTP command"
        )));
    }
    Ok(())
}

/// Whether every server reads `name` as it is sent: printable ASCII and
/// TAB only, and no longer than [`GCT_PATH_MAX`] ([`ControlConn::check`]
/// holds other names back from GCT once FEAT has said what the server is).
pub(crate) fn any_server_reads(name: &[u8]) -> bool {
    printable(name) && name.len() <= GCT_PATH_MAX
}

/// Printable ASCII and TAB only.
fn printable(name: &[u8]) -> bool {
    name.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
}

/// The longest path globus-gridftp-server takes whole: longer ones it cuts
/// to this length, silently (13.24, checked: two uploads whose 4096-byte
/// paths differed in the last byte both went to one 4095-byte name, the
/// second replacing the first, and both were reported copied).
const GCT_PATH_MAX: usize = 4095;

/// The path a command names: what follows its verb and the arguments that
/// come before the path (`CKSM alg off len path`, `ERET P off len path`,
/// `ESTO A off path`, `MFMT time path`, `SITE CHMOD mode path`).
fn path_of(cmd: &[u8]) -> &[u8] {
    let verb_end = cmd.iter().position(|&b| b == b' ').unwrap_or(cmd.len());
    let before = match cmd[..verb_end].to_ascii_uppercase().as_slice() {
        b"CKSM" | b"ERET" => 3,
        b"ESTO" | b"SITE" => 2,
        b"MFMT" => 1,
        _ => 0,
    };
    let mut rest = cmd.get(verb_end + 1..).unwrap_or_default();
    for _ in 0..before {
        let end = rest.iter().position(|&b| b == b' ').map_or(rest.len(), |i| i + 1);
        rest = &rest[end..];
    }
    rest
}

/// The refusal of a command naming a path with a 0xFF byte to a server
/// that is not lightpath. 0xFF is Telnet's IAC on the control channel:
/// globus-gridftp-server (13.24, checked) drops it with the byte after it
/// (`STOR r\xff\xfbz` made `r`, doubled or not) or refuses the line, so
/// the command would act on another name, or fail unclearly.
fn iac_refused(cmd: &[u8]) -> ClientError {
    let shown = redact(cmd).escape_debug().to_string();
    ClientError::Usage(format!(
        "cannot send {shown}: the name has a 0xFF byte, which the FTP control channel reads as a Telnet \
         command (IAC); this server is not lightpath, and GridFTP servers such as Globus drop or refuse it"
    ))
}

fn redact(cmd: &[u8]) -> String {
    if cmd.len() >= 4 && cmd[..4].eq_ignore_ascii_case(b"PASS") {
        return "PASS ****".into();
    }
    String::from_utf8_lossy(cmd).into_owned()
}

//! The data channel of one control session: where connections come from
//! (a listener after PASV/SPAS, addresses after PORT/SPOR) and the cache of
//! MODE E connections kept between transfers (GFD.20 data channel reuse:
//! `125` instead of `150`). A new endpoint drops the cache, as in GCT.

use crate::error::{EngineError, Result};
use crate::io::{Sink, Source};
use crate::modee::{self, RecvOpts, SendPlan};
use crate::progress::Control;
use crate::stream;
use lightpath_proto::RangeSet;
use lightpath_sys::net::{tune, wait_readable, SockOpts};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// Which way the cached connections carry data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// We send (we connected).
    Send,
    /// We receive (the peer connected).
    Recv,
}

#[derive(Debug)]
enum Endpoint {
    Listen(TcpListener),
    Connect(Vec<SocketAddr>),
}

/// Data connections of one session.
#[derive(Debug)]
pub struct DataChannel {
    endpoint: Option<Endpoint>,
    cached: Vec<TcpStream>,
    cached_dir: Option<Direction>,
    /// The cached connections were opened ahead and carried nothing yet:
    /// they fit the first transfer either way (see [`DataChannel::adopt`]).
    ahead: bool,
    /// Socket options for new data connections.
    pub opts: SockOpts,
    /// How long to wait for connections and for bytes.
    pub idle: Duration,
    /// The transfer under way, whose ABOR stops a MODE S wait for the
    /// peer's connection.
    pub watch: Option<std::sync::Arc<Control>>,
}

impl Default for DataChannel {
    fn default() -> Self {
        DataChannel {
            endpoint: None,
            cached: Vec::new(),
            cached_dir: None,
            ahead: false,
            opts: SockOpts {
                notsent_lowat: notsent_lowat_default(),
                congestion: Some(DEFAULT_CONGESTION.into()),
                ..SockOpts::default()
            },
            idle: Duration::from_secs(120),
            watch: None,
        }
    }
}

/// Congestion control asked for on data connections: BBR paces its sends
/// and does not halve its rate on every random loss, which is what long
/// fat paths need. Where the kernel refuses it, the system default stays
/// (see [`lightpath_sys::net::tune`]'s notes).
pub const DEFAULT_CONGESTION: &str = "bbr";

/// What data sockets ask for, from a `--congestion` choice: `None` is
/// [`DEFAULT_CONGESTION`], `kernel` asks for nothing (the system's default
/// stays), any other name is asked for as it is.
pub fn congestion_choice(asked: Option<&str>) -> Option<String> {
    match asked {
        Some("kernel") => None,
        Some(cc) => Some(cc.to_string()),
        None => Some(DEFAULT_CONGESTION.into()),
    }
}

/// Unsent bytes a data socket may hold until its pacing rate is known;
/// a sending stream then holds [`lightpath_plan::notsent_bound`] of its
/// own rate. `LIGHTPATH_NOTSENT_LOWAT` (bytes) fixes one bound for all
/// streams instead, and 0 turns it off. See [`SockOpts::notsent_lowat`].
pub const NOTSENT_LOWAT: u32 = 1 << 20;

/// Threads a MODE E sender connects its streams with at most. It was one
/// per stream: a client asking for 1024 streams to a port that drops SYNs
/// had the server start 1024 threads, each blocked 30 s (a review's find).
const CONNECTORS: usize = 64;

fn notsent_lowat_env() -> Option<u32> {
    std::env::var("LIGHTPATH_NOTSENT_LOWAT").ok().and_then(|v| v.parse().ok())
}

fn notsent_lowat_default() -> Option<u32> {
    Some(notsent_lowat_env().unwrap_or(NOTSENT_LOWAT)).filter(|&n| n > 0)
}

/// Whether sending streams fit their unsent bound to their pacing rate:
/// unless `LIGHTPATH_NOTSENT_LOWAT` fixed it (read once).
pub(crate) fn notsent_fitted() -> bool {
    static FITTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FITTED.get_or_init(|| notsent_lowat_env().is_none())
}

/// Whether a listener with `opts` keeps a data connection from `peer`
/// ([`SockOpts::accept_from`]); a refusal is logged.
pub(crate) fn admitted(opts: &SockOpts, peer: SocketAddr) -> bool {
    let ok = opts.admits(peer);
    if !ok {
        tracing::warn!(%peer, "data connection refused: {}", opts.accept_hint.why());
    }
    ok
}

/// Apply `opts` to `sock` ([`tune`]), logging at debug level, under
/// `what`, each option the kernel refused.
pub(crate) fn tune_logged(sock: &impl AsFd, opts: &SockOpts, what: &str) {
    for note in tune(sock, opts) {
        tracing::debug!("{what}: {note}");
    }
}

impl DataChannel {
    /// A channel with no endpoint yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Listen on `l` for the next transfers (PASV/SPAS, or a client's PORT).
    /// The connections it accepts inherit its [`SockOpts`] (the start
    /// receive window among them) before their first byte.
    pub fn listen(&mut self, l: TcpListener) {
        self.drop_cache();
        tune_logged(&l, &self.opts, "data listener");
        self.endpoint = Some(Endpoint::Listen(l));
    }

    /// Connect to `addrs` for the next transfers (PORT/SPOR, or a client's PASV).
    pub fn connect_to(&mut self, addrs: Vec<SocketAddr>) {
        self.drop_cache();
        self.endpoint = Some(Endpoint::Connect(addrs));
    }

    /// How many connections are cached (prepared for the next transfer).
    pub fn cached_count(&self) -> usize {
        self.cached.len()
    }

    /// Forget cached connections (after errors, or on a new endpoint).
    pub fn drop_cache(&mut self) {
        self.cached.clear();
        self.cached_dir = None;
        self.ahead = false;
    }

    /// Close the cached connections and the endpoint (a listener): a peer
    /// sending on them, or about to connect, fails at once. The next
    /// transfer needs a new PORT or PASV.
    pub fn close(&mut self) {
        self.drop_cache();
        self.endpoint = None;
    }

    /// Take `conns`, opened ahead of the first transfer (lightpath's `DCON`,
    /// see `lightpath_proto::ahead`), as the cached MODE E connections. They
    /// carry the next transfer whichever way it goes, then that way only.
    /// The endpoint stays: it is the fallback if the peer refuses them.
    pub fn adopt(&mut self, conns: Vec<TcpStream>) {
        self.drop_cache();
        for c in &conns {
            let _ = c.set_nonblocking(false);
            self.prepare_socket(c);
        }
        self.ahead = !conns.is_empty();
        self.cached = conns;
    }

    /// Apply the options again to the listener and the cached connections,
    /// after they changed. A server learns the RTT of a client that logged
    /// in with TCP Fast Open, and so the start receive window its uploads
    /// need, a round trip after the login flight's `DCON` took the
    /// connections opened ahead: without this they started at the kernel's
    /// window, and an upload's streams spent 0.4 s of 9.3 window-limited.
    /// Options only grow a window, so connections keep what they have.
    pub fn retune(&mut self) {
        if let Some(Endpoint::Listen(l)) = &self.endpoint {
            tune_logged(l, &self.opts, "data listener");
        }
        for c in &self.cached {
            self.prepare_socket(c);
        }
    }

    /// Whether the cached connections were opened ahead and are unused.
    pub fn is_ahead(&self) -> bool {
        self.ahead
    }

    /// Cached connections available for a transfer in `dir`.
    pub fn cached(&self, dir: Direction) -> usize {
        if self.cached_dir == Some(dir) || self.ahead {
            self.cached.len()
        } else {
            0
        }
    }

    /// Get MODE E connections ready to send on `n` streams (stream `i`
    /// to `addrs[i % addrs.len()]`). Returns whether
    /// cached connections are reused (reply 125) or new ones opened (150).
    pub fn prepare_send(&mut self, n: u32) -> Result<bool> {
        if self.cached(Direction::Send) > 0 {
            return Ok(true);
        }
        self.drop_cache();
        let addrs = match &self.endpoint {
            Some(Endpoint::Connect(a)) => a.clone(),
            Some(Endpoint::Listen(_)) => {
                return Err(EngineError::Setup("MODE E sender must connect: send PORT/SPOR, not PASV".into()))
            }
            None => return Err(EngineError::Setup("no data connection set up: send PORT or PASV first".into())),
        };
        self.cached = self.connect_all(&addrs, n.max(1) as usize)?;
        self.cached_dir = Some(Direction::Send);
        Ok(false)
    }

    /// Get ready to receive in MODE E. Returns whether cached connections are reused.
    pub fn prepare_recv(&mut self) -> Result<bool> {
        if self.cached(Direction::Recv) > 0 {
            return Ok(true);
        }
        self.drop_cache();
        match &self.endpoint {
            Some(Endpoint::Listen(_)) => Ok(false),
            Some(Endpoint::Connect(_)) => {
                Err(EngineError::Setup("MODE E receiver must listen: send PASV/SPAS, not PORT".into()))
            }
            None => Err(EngineError::Setup("no data connection set up: send PORT or PASV first".into())),
        }
    }

    /// Send in MODE E on the prepared connections.
    pub fn send_e(&mut self, src: &dyn Source, plan: &SendPlan, ctl: &Control) -> Result<u64> {
        ctl.set_data_path(src.data_path());
        let r = modee::send(&mut self.cached, src, plan, ctl);
        self.keep_if_ok(&r, Direction::Send);
        r
    }

    /// Send blocks from `supplier` in MODE E on the prepared connections.
    pub fn send_blocks_e(&mut self, supplier: &modee::Supplier, ctl: &Control) -> Result<u64> {
        let r = modee::send_blocks(&mut self.cached, supplier, ctl);
        self.keep_if_ok(&r, Direction::Send);
        r
    }

    /// Receive in MODE E on cached connections and new ones from the listener.
    /// The listener takes the current [`SockOpts`] first (SBUF may come
    /// after PASV), so that connections still to arrive inherit them.
    pub fn recv_e(&mut self, sink: &dyn Sink, opts: &RecvOpts, ctl: &Control) -> Result<RangeSet> {
        let listener = match &self.endpoint {
            Some(Endpoint::Listen(l)) => {
                tune_logged(l, &self.opts, "data listener");
                Some((l, &self.opts))
            }
            _ => None,
        };
        let r = modee::recv(&mut self.cached, listener, sink, opts, ctl);
        for c in &self.cached {
            let _ = c.set_read_timeout(None);
        }
        self.keep_if_ok(&r, Direction::Recv);
        r
    }

    fn keep_if_ok<T>(&mut self, r: &Result<T>, dir: Direction) {
        if r.is_ok() && !self.cached.is_empty() {
            self.cached_dir = Some(dir);
            self.ahead = false;
        } else {
            self.drop_cache();
        }
    }

    /// Open the single MODE S connection (accept or connect).
    pub fn open_stream(&mut self) -> Result<TcpStream> {
        self.drop_cache();
        match &self.endpoint {
            Some(Endpoint::Listen(l)) => self.accept(l),
            Some(Endpoint::Connect(a)) => self.connect(a[0]),
            None => Err(EngineError::Setup("no data connection set up: send PORT or PASV first".into())),
        }
    }

    /// MODE S send of `[start, end)`.
    pub fn send_s(&mut self, conn: TcpStream, src: &dyn Source, start: u64, end: u64, ctl: &Control) -> Result<u64> {
        ctl.set_data_path(src.data_path());
        stream::send(conn, src, (start, end), self.idle, ctl)
    }

    /// MODE S receive from `base` on, at most `max` bytes.
    pub fn recv_s(&mut self, conn: TcpStream, sink: &dyn Sink, base: u64, max: u64, ctl: &Control) -> Result<u64> {
        ctl.set_data_path(sink.data_path());
        stream::recv(conn, sink, base, max, self.idle, ctl)
    }

    /// `n` connections, stream `i` to `addrs[i % addrs.len()]`, made
    /// [`CONNECTORS`] at a time: one round trip for up to that many. The
    /// first failure (or a cancel) stops the rest: with one thread per
    /// connector going on past failures, 1024 streams to a port that
    /// drops SYNs took 16 timeouts in a row (a review's find).
    fn connect_all(&self, addrs: &[SocketAddr], n: usize) -> Result<Vec<TcpStream>> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let threads = n.min(CONNECTORS);
        let stop = AtomicBool::new(false);
        let halted = || stop.load(Ordering::Relaxed) || self.watch.as_ref().is_some_and(|c| c.is_cancelled());
        let one = |i: usize| {
            let r = self.connect(addrs[i % addrs.len()]);
            stop.fetch_or(r.is_err(), Ordering::Relaxed);
            (i, r)
        };
        let conns: Vec<(usize, Result<TcpStream>)> = std::thread::scope(|s| {
            let (one, halted) = (&one, &halted);
            let hs: Vec<_> = (0..threads)
                .map(|t| s.spawn(move || (t..n).step_by(threads).take_while(|_| !halted()).map(one).collect()))
                .collect();
            let panicked = || vec![(0, Err(EngineError::Setup("connect thread panicked".into())))];
            hs.into_iter().flat_map(|h| h.join().unwrap_or_else(|_| panicked())).collect::<Vec<_>>()
        });
        let (mut made, failed): (Vec<_>, Vec<_>) = conns.into_iter().partition(|c| c.1.is_ok());
        if let Some((_, Err(e))) = failed.into_iter().next() {
            return Err(e);
        }
        if made.len() < n {
            return Err(EngineError::Aborted);
        }
        made.sort_by_key(|c| c.0);
        Ok(made.into_iter().filter_map(|c| c.1.ok()).collect())
    }

    fn connect(&self, addr: SocketAddr) -> Result<TcpStream> {
        let c = TcpStream::connect_timeout(&addr, Duration::from_secs(30))
            .map_err(|e| EngineError::io(format!("connecting data channel to {addr}"), e))?;
        self.prepare_socket(&c);
        Ok(c)
    }

    fn accept(&self, l: &TcpListener) -> Result<TcpStream> {
        let start = Instant::now();
        while start.elapsed() < self.idle {
            if self.watch.as_ref().is_some_and(|c| c.is_cancelled()) {
                return Err(EngineError::Aborted);
            }
            if wait_readable(l, Duration::from_millis(200)).map_err(|e| EngineError::io("data listener", e))? {
                let (c, peer) = l.accept().map_err(|e| EngineError::io("accepting data connection", e))?;
                if !admitted(&self.opts, peer) {
                    continue;
                }
                self.prepare_socket(&c);
                return Ok(c);
            }
        }
        Err(EngineError::Idle(self.idle))
    }

    fn prepare_socket(&self, c: &TcpStream) {
        tune_logged(c, &self.opts, "data socket");
        let _ = c.set_write_timeout(Some(self.idle));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{BytesSource, MemorySink};

    /// A connected sender: two MODE E streams to `addr`.
    fn sender(addr: std::net::SocketAddr) -> DataChannel {
        let mut tx = DataChannel::new();
        tx.connect_to(vec![addr]);
        tx.prepare_send(2).unwrap();
        tx
    }

    /// 100 kB from `tx` into `rx`, checked; `rx` keeps both connections.
    fn transfer(rx: &mut DataChannel, mut tx: DataChannel) {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let sent = data.clone();
        let sending = std::thread::spawn(move || {
            let plan = SendPlan { ranges: vec![(0, sent.len() as u64)], wire_base: 0, block: 16 << 10, grow: None };
            tx.send_e(&BytesSource(sent), &plan, &Control::new()).unwrap();
        });
        let sink = MemorySink::new(1 << 20);
        let opts = RecvOpts { base: 0, max_offset: 1 << 20, idle: Duration::from_secs(10) };
        rx.recv_e(&sink, &opts, &Control::new()).unwrap();
        sending.join().unwrap();
        assert_eq!(sink.into_inner(), data);
        assert_eq!(rx.cached.len(), 2);
    }

    /// MODE E connections accepted inside the engine start with the
    /// listener's receive window.
    #[test]
    fn mode_e_connections_inherit_the_listeners_start_window() {
        let window = 3 << 20;
        let mut rx = DataChannel::new();
        rx.opts.recv_window = Some(window);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        rx.listen(l);
        assert!(!rx.prepare_recv().unwrap());
        transfer(&mut rx, sender(addr));
        for c in &rx.cached {
            let got = socket2::SockRef::from(c).recv_buffer_size().unwrap();
            assert!(got >= window, "accepted socket's buffer {got} < {window}");
        }
    }

    /// Connections adopted before the start window was known get it when
    /// the channel is retuned.
    #[test]
    fn adopted_connections_get_a_start_window_set_later() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (accepted, _) = l.accept().unwrap();
        let mut dc = DataChannel::new();
        dc.adopt(vec![accepted]);
        let window = 1 << 20;
        let before = socket2::SockRef::from(&dc.cached[0]).recv_buffer_size().unwrap();
        assert!(before < window, "the kernel's default buffer {before} already holds {window}");
        dc.opts.recv_window = Some(window);
        dc.retune();
        let after = socket2::SockRef::from(&dc.cached[0]).recv_buffer_size().unwrap();
        assert!(after >= window, "retuned buffer {after} < {window}");
        drop(client);
    }

    /// SBUF comes after PASV, and a client may connect before STOR: MODE E
    /// connections already waiting to be accepted get the options too.
    #[test]
    fn mode_e_connections_accepted_in_the_engine_get_the_options_set_after_listen() {
        let mut rx = DataChannel::new();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        rx.listen(l);
        assert!(!rx.prepare_recv().unwrap());
        let tx = sender(addr);
        let buffer = 48 << 10;
        rx.opts.buffer = Some(buffer);
        rx.opts.congestion = Some("reno".into());
        transfer(&mut rx, tx);
        for c in &rx.cached {
            let s = socket2::SockRef::from(c);
            // The kernel doubles what it is given, for its bookkeeping.
            assert_eq!(s.recv_buffer_size().unwrap(), 2 * buffer);
            let cc = s.tcp_congestion().unwrap();
            assert_eq!(cc.split(|&b| b == 0).next(), Some(&b"reno"[..]));
        }
    }
}

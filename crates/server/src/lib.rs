//! The lightpath GridFTP server: listener, authentication, sessions, and
//! confinement of every path to the served root.
#![forbid(unsafe_code)]

pub mod admission;
pub mod ahead;
pub mod fsops;
pub mod listing;
pub mod partial;
pub mod reserve;
pub mod session;
pub mod transfer;
pub mod users;
pub mod vfile;

use lightpath_proto::PiConfig;
use lightpath_sys::root::Root;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use users::Users;

/// Server errors at start-up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The served root cannot be opened.
    #[error("cannot open served root {0}: {1}")]
    Root(PathBuf, std::io::Error),
    /// The listen address cannot be bound.
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    /// The users file is wrong.
    #[error(transparent)]
    Users(#[from] users::UsersError),
    /// Neither anonymous access nor a users file.
    #[error("no way to log in: give --anonymous and/or --users FILE")]
    NoAuth,
}

/// Pending TCP Fast Open requests a listener holds.
const FASTOPEN_QUEUE: u16 = 256;

/// Accept TCP Fast Open on the control and DCON listeners: a lightpath
/// client that has a cookie sends its login flight (and its data
/// connections' hellos) in the SYN, and the transfer starts a round trip
/// sooner. Only where the kernel lets servers do it.
fn fastopen(control: &std::net::TcpListener, ahead: Option<&std::net::TcpListener>) {
    if !lightpath_sys::net::fastopen_server_allowed() {
        tracing::info!("TCP Fast Open not offered: net.ipv4.tcp_fastopen lacks bit 2 (server)");
        return;
    }
    for l in std::iter::once(control).chain(ahead) {
        if let Err(e) = lightpath_sys::net::fastopen_listen(l, FASTOPEN_QUEUE) {
            tracing::info!("TCP Fast Open not offered: {e}");
            return;
        }
    }
    tracing::info!("TCP Fast Open offered");
}

/// How the server is set up.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Control-channel address.
    pub listen: SocketAddr,
    /// The served root.
    pub root: PathBuf,
    /// Allow `anonymous`/`ftp` logins.
    pub anonymous: bool,
    /// Let anonymous sessions write (else they may only read).
    pub anonymous_writes: bool,
    /// Refuse writes.
    pub read_only: bool,
    /// Users file.
    pub users: Option<PathBuf>,
    /// Expose /dev/zero and /dev/null for memory-to-memory runs.
    pub memory_paths: bool,
    /// Address to announce in PASV replies (behind NAT).
    pub public_ip: Option<IpAddr>,
    /// Ports the PASV/SPAS/EPSV listeners take (a firewall's opening);
    /// `None`: any.
    pub data_ports: Option<lightpath_engine::ports::PortRange>,
    /// TCP congestion control for data connections (`None`: BBR where
    /// allowed; "kernel": the system default).
    pub congestion: Option<String>,
    /// Flush uploads to disk before publishing them under their names.
    pub fsync: bool,
    /// When uploads bypass the page cache (`plan::direct_io_for`, with the
    /// control connection's RTT, the size ALLO announced and `fsync`), and
    /// downloads (`plan::direct_read_for`).
    pub direct_io: lightpath_plan::DirectIo,
    /// Where data connections opened ahead (`DCON`) go.
    pub ahead: ahead::AheadPort,
    /// Sessions at once, overall and per address.
    pub limits: admission::Limits,
    /// Whom data connections may come from and go to.
    pub data_peers: DataPeers,
    /// How long an upload whose data connections broke keeps its partial
    /// file for a restart (zero: none is kept; [`partial`]).
    pub keep_partial: std::time::Duration,
    /// Seconds between the 112 and 111 markers sent while receiving
    /// (`serve --marker-interval`; the 5 of globus-gridftp-server by
    /// default). A tree's markers say what it holds so far, so this is
    /// also how stale a killed client's note of an upload can be.
    pub marker_interval: u32,
}

/// Whom a session's data connections may come from (PASV) and go to
/// (PORT). GridFTP without GSI has no data-channel authentication: a
/// PASV port takes the first connection that comes, and PORT can name any
/// host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DataPeers {
    /// The session's client only (its control connection's address).
    #[default]
    Client,
    /// Any host: what third-party transfers between hosts need.
    Any,
}

/// Shared by all sessions.
#[derive(Debug)]
pub struct ServerCtx {
    /// Configuration.
    pub cfg: ServerConfig,
    /// The confined root.
    pub root: Root,
    /// Users, if a users file was given (read again on SIGHUP:
    /// [`Server::users_reload`]).
    pub users: std::sync::RwLock<Option<Arc<Users>>>,
    /// Data connections opened ahead, and their port, if offered.
    pub ahead: Option<(Arc<ahead::Ahead>, u16)>,
    /// Password checks running at once: one per CPU. Each argon2 check
    /// takes 19 MiB and tens of milliseconds of CPU, and guesses from many
    /// connections at once must queue, not take the machine.
    pub login_checks: tokio::sync::Semaphore,
    /// Uploads whose data connections broke, kept for a restart.
    pub partials: partial::Partials<lightpath_sys::root::TempFile>,
    /// Trees being written by VSTO (one run per tree at a time).
    pub trees: vfile::TreeClaims,
}

impl ServerCtx {
    /// The users in force (the file as last read), if there is a file.
    pub fn users(&self) -> Option<Arc<Users>> {
        self.users.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Protocol configuration of a session whose client is at `peer`.
    pub fn pi_config(&self, peer: Option<IpAddr>) -> PiConfig {
        let data_peer = self.data_peer(peer);
        // The host's addresses matter only where PORT may name any host:
        // not read for every session of a server that connects only to
        // its clients.
        let (host, host_data_ports) = match data_peer {
            None => (own_addresses(), self.host_data_ports()),
            Some(_) => (Vec::new(), Vec::new()),
        };
        PiConfig {
            banner: format!("lightpath GridFTP Server {}", env!("CARGO_PKG_VERSION")),
            anonymous: self.cfg.anonymous,
            read_only: self.cfg.read_only,
            anonymous_writes: self.cfg.anonymous_writes,
            version: env!("CARGO_PKG_VERSION").to_string(),
            cksum_algs: lightpath_engine::checksum::ALGORITHMS.iter().map(|s| s.to_string()).collect(),
            dcon_port: self.ahead.as_ref().map(|a| a.1),
            data_peer,
            client: peer,
            host,
            host_data_ports,
        }
    }

    /// Where data listeners of this host bind: the kernel's ephemeral
    /// ports, and `--data-ports` if given.
    fn host_data_ports(&self) -> Vec<(u16, u16)> {
        let configured = self.cfg.data_ports.map(|r| (r.low, r.high));
        lightpath_sys::net::ephemeral_ports().into_iter().chain(configured).collect()
    }

    /// The only address data connections of a session whose client is at
    /// `peer` may come from and go to, if there is one.
    pub fn data_peer(&self, peer: Option<IpAddr>) -> Option<IpAddr> {
        match self.cfg.data_peers {
            DataPeers::Client => peer,
            DataPeers::Any => None,
        }
    }
}

/// This host's addresses, read per session (they change); none, said,
/// where the kernel will not list them.
fn own_addresses() -> Vec<IpAddr> {
    lightpath_sys::topo::host_addresses().unwrap_or_else(|e| {
        tracing::warn!("cannot list this host's addresses ({e}): PORT to them is not refused");
        Vec::new()
    })
}

/// A bound server.
/// Reads a running server's users file again (`serve` does on SIGHUP):
/// logins from then on check the new one; a file that does not load
/// leaves the old one in force.
#[derive(Clone)]
pub struct UsersReload(Arc<ServerCtx>);

impl UsersReload {
    /// Read the users file again: how many users it has (`None`: the
    /// server has no users file).
    pub fn reload(&self) -> Result<Option<usize>, ServerError> {
        let Some(p) = &self.0.cfg.users else { return Ok(None) };
        let users = Users::load(p)?;
        let n = users.len();
        *self.0.users.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(users));
        Ok(Some(n))
    }
}

pub struct Server {
    listener: tokio::net::TcpListener,
    ahead: Option<tokio::net::TcpListener>,
    ctx: Arc<ServerCtx>,
}

impl Server {
    /// Bind from already bound std listeners (bound before privileges were
    /// dropped): the control port and, if offered, the port of data
    /// connections opened ahead ([`ahead::bind`]). Call within a runtime.
    pub fn from_std(
        cfg: ServerConfig,
        l: std::net::TcpListener,
        ahead: Option<std::net::TcpListener>,
    ) -> Result<Server, ServerError> {
        let users = Self::load_users(&cfg)?;
        Self::with_users(cfg, users, l, ahead)
    }

    /// Read `cfg`'s users file, if it names one. `serve --run-as` reads it
    /// before it drops root, as sshd reads its keys: a users file only
    /// root may read stopped the server once it ran as the other user.
    pub fn load_users(cfg: &ServerConfig) -> Result<Option<Users>, ServerError> {
        Ok(cfg.users.as_deref().map(Users::load).transpose()?)
    }

    /// [`Server::from_std`] with the users already read
    /// ([`Server::load_users`]).
    pub fn with_users(
        cfg: ServerConfig,
        users: Option<Users>,
        l: std::net::TcpListener,
        ahead: Option<std::net::TcpListener>,
    ) -> Result<Server, ServerError> {
        let mut ctx = Self::context(cfg, users)?;
        fastopen(&l, ahead.as_ref());
        let at = ctx.cfg.listen;
        let tokio_listener = |l: std::net::TcpListener| {
            l.set_nonblocking(true)
                .and_then(|_| tokio::net::TcpListener::from_std(l))
                .map_err(|e| ServerError::Bind(at, e))
        };
        let listener = tokio_listener(l)?;
        let ahead = ahead.map(tokio_listener).transpose()?;
        if let Some(a) = &ahead {
            let port = a.local_addr().map_err(|e| ServerError::Bind(at, e))?.port();
            ctx.ahead = Some((Arc::default(), port));
        }
        Ok(Server { listener, ahead, ctx: Arc::new(ctx) })
    }

    fn context(cfg: ServerConfig, users: Option<Users>) -> Result<ServerCtx, ServerError> {
        if !cfg.anonymous && cfg.users.is_none() {
            return Err(ServerError::NoAuth);
        }
        let root = Root::open(&cfg.root).map_err(|e| ServerError::Root(cfg.root.clone(), e))?;
        let users = users.map(Arc::new);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let login_checks = tokio::sync::Semaphore::new(cpus);
        let partials = partial::Partials::new(cfg.keep_partial);
        let users = std::sync::RwLock::new(users);
        Ok(ServerCtx { cfg, root, users, ahead: None, login_checks, partials, trees: Default::default() })
    }

    /// Check the configuration and bind the control port.
    pub async fn bind(cfg: ServerConfig) -> Result<Server, ServerError> {
        let at = cfg.listen;
        let l = std::net::TcpListener::bind(at).map_err(|e| ServerError::Bind(at, e))?;
        let bound = l.local_addr().map_err(|e| ServerError::Bind(at, e))?;
        let ahead = ahead::bind(cfg.ahead, bound).map_err(|e| ServerError::Bind(at, e))?;
        Self::from_std(cfg, l, ahead)
    }

    /// The port of data connections opened ahead, if offered.
    pub fn ahead_port(&self) -> Option<u16> {
        self.ctx.ahead.as_ref().map(|a| a.1)
    }

    /// What reads the users file again into the running server.
    pub fn users_reload(&self) -> UsersReload {
        UsersReload(self.ctx.clone())
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accept sessions forever (a failed accept is logged and retried).
    pub async fn run(self) -> std::io::Result<()> {
        if let (Some(l), Some((a, _))) = (self.ahead, &self.ctx.ahead) {
            tokio::spawn(a.clone().serve(l));
        }
        tokio::spawn(sweep_partials(self.ctx.clone()));
        let admission = admission::Admission::new(self.ctx.cfg.limits);
        loop {
            let (stream, peer) = match self.listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors and the like: sessions that end
                    // give them back, so wait and go on.
                    tracing::warn!("accepting control connections: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            match admission.admit(peer.ip()) {
                Ok(ticket) => tokio::spawn(session::run(stream, self.ctx.clone(), ticket)),
                Err(why) => tokio::spawn(refuse(stream, why)),
            };
        }
    }
}

/// Remove expired partial uploads ([`partial`]) every [`SWEEP_EVERY`],
/// so that one nobody resumes frees its disk space on time, and close
/// the data connections opened ahead that no session claimed.
async fn sweep_partials(ctx: Arc<ServerCtx>) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    loop {
        tick.tick().await;
        if let Some((a, _)) = &ctx.ahead {
            a.sweep();
        }
        let gone = ctx.partials.sweep(std::time::Instant::now());
        if !gone.is_empty() {
            tracing::info!(count = gone.len(), "expired partial uploads removed");
            let _ = tokio::task::spawn_blocking(move || drop(gone)).await;
        }
    }
}

/// How often expired partial uploads (and unclaimed connections opened
/// ahead) are looked for.
pub(crate) const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// Wait after a failed accept.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// Turn a connection away with `421`.
async fn refuse(mut stream: tokio::net::TcpStream, why: admission::Refusal) {
    use tokio::io::AsyncWriteExt;
    tracing::info!(peer = ?stream.peer_addr().ok(), "session refused: {why}");
    let line = lightpath_proto::Reply::new(421, why.to_string()).encode();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), stream.write_all(&line)).await;
}

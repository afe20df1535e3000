//! `lightpath serve`.

use anyhow::Context;
use clap::builder::BoolishValueParser;
use clap::Args;
use lightpath_engine::iothreads::{self, IoConfig};
use lightpath_server::ahead::{self, AheadPort};
use lightpath_server::{Server, ServerConfig};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// Options of `lightpath serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Control-channel address.
    #[arg(long, default_value = "0.0.0.0:2811", env = "LIGHTPATH_LISTEN")]
    pub listen: SocketAddr,
    /// Directory served as `/`; no path leaves it.
    #[arg(long, env = "LIGHTPATH_ROOT")]
    pub root: PathBuf,
    /// Allow `anonymous` logins, which may only read (see --anonymous-write).
    #[arg(long, env = "LIGHTPATH_ANONYMOUS", value_parser = BoolishValueParser::new())]
    pub anonymous: bool,
    /// Allow `anonymous` logins that may also write, delete and rename
    /// anywhere under --root (implies --anonymous): for closed networks and
    /// tests only.
    #[arg(long, env = "LIGHTPATH_ANONYMOUS_WRITE", value_parser = BoolishValueParser::new())]
    pub anonymous_write: bool,
    /// Refuse every write.
    #[arg(long, env = "LIGHTPATH_READ_ONLY", value_parser = BoolishValueParser::new())]
    pub read_only: bool,
    /// Users file: `name:hash` lines (argon2 or SHA-512 crypt; see `lightpath passwd`).
    /// Read at start (before `--run-as`) and again on SIGHUP.
    #[arg(long, env = "LIGHTPATH_USERS")]
    pub users: Option<PathBuf>,
    /// Expose /dev/zero and /dev/null for memory-to-memory transfers.
    #[arg(long, env = "LIGHTPATH_MEMORY_PATHS", value_parser = BoolishValueParser::new())]
    pub memory_paths: bool,
    /// Address announced in PASV replies (a server behind NAT); to clients
    /// of its address family only.
    #[arg(long, env = "LIGHTPATH_PUBLIC_IP")]
    pub public_ip: Option<IpAddr>,
    /// Ports for data connections a client opens (PASV, EPSV, SPAS), as a
    /// firewall lets them through: LOW-HIGH [default: GLOBUS_TCP_PORT_RANGE
    /// if set (LOW,HIGH, as Globus's tools read it), else any]
    #[arg(long, env = "LIGHTPATH_DATA_PORTS")]
    pub data_ports: Option<lightpath_engine::ports::PortRange>,
    /// TCP congestion control for data connections (default bbr where the
    /// kernel allows it; `kernel` keeps the system default). One that the
    /// kernel lacks or does not allow this user stops the server.
    #[arg(long, env = "LIGHTPATH_CONGESTION")]
    pub congestion: Option<String>,
    /// Flush each upload to disk before it appears under its name (durable
    /// across power loss; costs the disk's write-back time per file).
    #[arg(long, env = "LIGHTPATH_FSYNC", value_parser = BoolishValueParser::new())]
    pub fsync: bool,
    /// Direct I/O (O_DIRECT): auto writes uploads of 64 MiB and more (as
    /// ALLO announces) over paths of 10 ms RTT and more directly, and reads
    /// downloads of 64 MiB and more directly for clients on this host when
    /// the file is mostly not in the page cache; always or never for all.
    #[arg(long, value_enum, default_value = "auto", env = "LIGHTPATH_DIRECT_IO")]
    pub direct_io: crate::cp::DirectIoArg,
    /// Port for data connections a lightpath client opens ahead, while it
    /// logs in (saves a round trip before the first byte; FEAT `DCON`):
    /// auto (the control port + 1 if free, else any), off, or a number.
    #[arg(long, default_value = "auto", value_parser = parse_ahead_port, env = "LIGHTPATH_AHEAD_PORT")]
    pub ahead_port: AheadPort,
    /// Control sessions at once; more connections get `421` and are closed.
    #[arg(long, default_value_t = lightpath_server::admission::Limits::default().sessions, env = "LIGHTPATH_MAX_SESSIONS", value_parser = at_least_one)]
    pub max_sessions: usize,
    /// Control sessions at once from one address.
    #[arg(long, default_value_t = lightpath_server::admission::Limits::default().per_ip, env = "LIGHTPATH_MAX_SESSIONS_PER_IP", value_parser = at_least_one)]
    pub max_sessions_per_ip: usize,
    /// Whom data connections may come from (PASV) and go to (PORT): the
    /// session's client only, or any host (needed by servers that take
    /// part in third-party transfers between hosts).
    #[arg(long, value_enum, default_value = "client", env = "LIGHTPATH_DATA_PEERS")]
    pub data_peers: DataPeersArg,
    /// Seconds an upload whose data or control connection broke keeps its
    /// partial file (unnamed where the file system allows) for the client's restart
    /// (`REST` with the ranges the server's markers named, then `STOR`);
    /// 0 keeps none.
    #[arg(long, default_value_t = lightpath_server::partial::KEEP_FOR.as_secs(), env = "LIGHTPATH_KEEP_PARTIAL",
          value_parser = clap::value_parser!(u64).range(0..=crate::units::WEEK))]
    pub keep_partial: u64,
    /// Seconds between the perf (112) and restart (111) markers sent while
    /// receiving. A tree upload's markers say which files are complete so
    /// far: a client killed before the failure reply resumes from the
    /// last one it read (`cp -r --partial`).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=3600), env = "LIGHTPATH_MARKER_INTERVAL")]
    pub marker_interval: u32,
    /// Seconds a connection has to log in before it is closed.
    #[arg(long, default_value_t = 60, env = "LIGHTPATH_LOGIN_TIMEOUT",
          value_parser = clap::value_parser!(u64).range(1..=crate::units::WEEK))]
    pub login_timeout: u64,
    /// Seconds a logged-in session may send no command (no transfer
    /// running) before it is closed with 421 (GCT's -control-idle-timeout).
    #[arg(long, default_value_t = 900, env = "LIGHTPATH_IDLE_TIMEOUT",
          value_parser = clap::value_parser!(u64).range(1..=crate::units::WEEK))]
    pub idle_timeout: u64,
    /// Seconds a client may take none of a reply (its socket full) before
    /// its session, and any transfer of it, ends.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=crate::units::WEEK), env = "LIGHTPATH_REPLY_TIMEOUT")]
    pub reply_timeout: u64,
    /// When started as root: bind, read the users file, then run as this
    /// user (recommended).
    #[arg(long, env = "LIGHTPATH_RUN_AS")]
    pub run_as: Option<String>,
    /// Network I/O threads shared by all sessions (fixed for the server).
    #[arg(long, default_value_t = IoConfig::default().net_threads, env = "LIGHTPATH_NET_THREADS")]
    pub net_threads: usize,
    /// Disk I/O threads per storage device, shared by all sessions
    /// [default: what each disk's capacity calls for (`-v` shows it), or 4
    /// when the disks cannot be found]
    #[arg(long, env = "LIGHTPATH_DISK_THREADS")]
    pub disk_threads: Option<usize>,
    /// A TOML file declaring devices by hand (`[[device]]` entries: name, kind = "nic"
    /// or "disk", node, threads, speed_mbit, media), e.g. on VMs whose sysfs
    /// does not tell the NUMA node.
    #[arg(long, env = "LIGHTPATH_DEVICES")]
    pub devices: Option<PathBuf>,
}

impl ServeArgs {
    /// Who may log in and do what, for the line that says the server is up.
    fn access(&self) -> String {
        let anonymous = match (self.anonymous_write && !self.read_only, self.anonymous || self.anonymous_write) {
            (true, _) => Some("anonymous may read, write, delete and rename"),
            (false, true) => Some("anonymous may read"),
            (false, false) => None,
        };
        let users = self.users.as_ref().map(|u| format!("users of {}", u.display()));
        let mut who: Vec<String> = anonymous.map(String::from).into_iter().chain(users).collect();
        if self.read_only {
            who.push("read-only".into());
        }
        who.join("; ")
    }

    fn config(&self) -> ServerConfig {
        ServerConfig {
            listen: self.listen,
            root: self.root.clone(),
            anonymous: self.anonymous || self.anonymous_write,
            anonymous_writes: self.anonymous_write,
            read_only: self.read_only,
            users: self.users.clone(),
            memory_paths: self.memory_paths,
            public_ip: self.public_ip,
            data_ports: self.data_ports,
            congestion: self.congestion.clone(),
            fsync: self.fsync,
            direct_io: self.direct_io.into(),
            ahead: self.ahead_port,
            limits: lightpath_server::admission::Limits {
                sessions: self.max_sessions,
                per_ip: self.max_sessions_per_ip,
                login_wait: std::time::Duration::from_secs(self.login_timeout),
                reply_wait: std::time::Duration::from_secs(self.reply_timeout),
                idle: std::time::Duration::from_secs(self.idle_timeout),
            },
            data_peers: match self.data_peers {
                DataPeersArg::Client => lightpath_server::DataPeers::Client,
                DataPeersArg::Any => lightpath_server::DataPeers::Any,
            },
            keep_partial: std::time::Duration::from_secs(self.keep_partial),
            marker_interval: self.marker_interval,
        }
    }
}

/// `--data-peers`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum DataPeersArg {
    /// The session's client only.
    Client,
    /// Any host.
    Any,
}

/// A count of at least 1: a limit of 0 sessions started a server that
/// turned everyone away (a defect hunt's find).
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("expected a number of at least 1".into()),
    }
}

fn parse_ahead_port(s: &str) -> Result<AheadPort, String> {
    match s {
        "auto" => Ok(AheadPort::Auto),
        "off" => Ok(AheadPort::Off),
        n => match n.parse::<u16>() {
            Ok(p) if p > 0 => Ok(AheadPort::Port(p)),
            _ => Err("expected auto, off or a port number (1-65535)".into()),
        },
    }
}

type Listeners = (std::net::TcpListener, Option<std::net::TcpListener>, Option<lightpath_server::users::Users>);

/// Bind, read the users file, drop privileges if asked, and return the
/// listeners and the users. Runs before any thread exists, so the uid
/// change covers the whole process.
fn bind_and_drop(args: &ServeArgs) -> anyhow::Result<Listeners> {
    let users = Server::load_users(&args.config())?;
    let l = std::net::TcpListener::bind(args.listen).map_err(|e| listen_error(args.listen, e))?;
    let ahead = ahead::bind(args.ahead_port, l.local_addr()?).with_context(|| match args.ahead_port {
        AheadPort::Port(p) => format!("cannot listen for data connections opened ahead on port {p} (--ahead-port)"),
        _ => "cannot listen for data connections opened ahead (--ahead-port)".to_string(),
    })?;
    match (&args.run_as, lightpath_sys::privs::euid()) {
        (Some(user), 0) => {
            let (uid, gid) = lightpath_sys::privs::lookup_user(user)?;
            lightpath_sys::privs::drop_to(uid, gid).with_context(|| format!("dropping privileges to {user}"))?;
        }
        (Some(_), _) => anyhow::bail!("--run-as needs to start as root"),
        (None, 0) => tracing::warn!("running as root: consider --run-as USER"),
        (None, _) => {}
    }
    Ok((l, ahead, users))
}

/// Why the control port cannot be bound. A port in use may be taken by a
/// lightpath server on the port below it: `--ahead-port auto` takes the
/// control port + 1 too, which surprises whoever starts servers on
/// adjacent ports.
fn listen_error(at: std::net::SocketAddr, e: std::io::Error) -> anyhow::Error {
    let hint = if e.kind() == std::io::ErrorKind::AddrInUse && at.port() > 1 {
        format!(
            " (if a lightpath server runs on port {}: it also takes {} for data connections opened ahead, unless started with --ahead-port)",
            at.port() - 1,
            at.port()
        )
    } else {
        String::new()
    };
    anyhow::Error::new(e).context(format!("cannot listen on {at}{hint}"))
}

/// The data ports from `GLOBUS_TCP_PORT_RANGE` where `--data-ports` is
/// not given; a `--public-ip` that no client of `--listen` could use (the
/// other address family) is refused: its PASV replies said "use EPSV" to
/// IPv4 clients.
fn check_addresses(args: &mut ServeArgs) -> anyhow::Result<()> {
    if args.data_ports.is_none() {
        args.data_ports =
            lightpath_engine::ports::range_from_env("LIGHTPATH_DATA_PORTS").map_err(anyhow::Error::msg)?;
    }
    if let Some(r) = args.data_ports {
        tracing::info!("data connections to this server come to ports {r}");
    }
    // `[::]` takes IPv4 clients too; `0.0.0.0` only IPv4 ones.
    let listen = args.listen.ip();
    let dual = listen.is_ipv6() && listen.is_unspecified();
    if let Some(p) = args.public_ip.filter(|p| !dual && p.is_ipv4() != listen.is_ipv4()) {
        anyhow::bail!("--public-ip {p} is of another address family than --listen {}", args.listen);
    }
    Ok(())
}

/// The users file against the options: one naming nobody is said; one
/// naming a user as anonymous logins are named (who would log in with
/// any password) is refused where anonymous logins are on.
fn check_users(args: &ServeArgs, users: Option<&lightpath_server::users::Users>) -> anyhow::Result<()> {
    if users.is_some_and(|u| u.is_empty()) {
        tracing::warn!("the users file names nobody: no user can log in");
    }
    let anon = |n: &&str| lightpath_proto::server_pi::is_anonymous_name(n);
    if let (true, Some(n)) = (args.anonymous || args.anonymous_write, users.iter().flat_map(|u| u.names()).find(anon)) {
        anyhow::bail!("the users file names {n:?}, a name anonymous logins take (any password); rename the user or drop --anonymous");
    }
    Ok(())
}

/// Pin the I/O threads and place their buffers by the hardware's
/// topology (`--devices` when given, which must then work); the CPUs
/// left for management work.
fn place_io_threads(args: &ServeArgs, net_threads: usize) -> anyhow::Result<Vec<u32>> {
    match crate::placement::plan(args.listen.ip(), &args.root, args.devices.as_deref(), net_threads, args.disk_threads)
    {
        Ok(p) => {
            p.lines.iter().for_each(|l| tracing::info!("placement: {l}"));
            iothreads::set_pins(p.pins);
            iothreads::set_devices(p.disks);
            if let Some(n) = p.nice {
                iothreads::set_io_nice(n);
            }
            if let Some(n) = p.buffer_node {
                iothreads::set_buffer_node(n);
            }
            Ok(p.management)
        }
        Err(e) if args.devices.is_some() => Err(e),
        Err(e) => {
            tracing::info!("placement: none ({e:#}); I/O threads unpinned");
            Ok(Vec::new())
        }
    }
}

/// Where data connections opened ahead are taken. A port other than the
/// control port plus one (taken) is said by default, not only at -v: a
/// firewall opened for that one, as README says, stops them.
fn say_ahead_port(port: Option<u16>, asked: AheadPort, control: u16) {
    match port {
        Some(p) if asked == AheadPort::Auto && Some(p) != control.checked_add(1) => {
            tracing::warn!(
                "data connections opened ahead: port {p} (the control port + 1 was taken; give --ahead-port to choose)"
            )
        }
        Some(p) => tracing::info!("data connections opened ahead: port {p}"),
        None => {}
    }
}

/// Run the server until killed.
pub fn run(mut args: ServeArgs) -> anyhow::Result<()> {
    check_addresses(&mut args)?;
    let (l, ahead, users) = bind_and_drop(&args)?;
    check_users(&args, users.as_ref())?;
    // After the uid change: what this process may set is what counts.
    args.congestion = crate::congestion::check(args.congestion.as_deref())?;
    let disk_threads = args.disk_threads.unwrap_or(IoConfig::default().disk_threads);
    let io = IoConfig { net_threads: args.net_threads, disk_threads };
    let management = place_io_threads(&args, io.net_threads)?;
    iothreads::configure(io).context("starting the I/O threads")?;
    let rt = runtime(management, blocking_threads(args.max_sessions))?;
    rt.block_on(async {
        let root = args.root.display().to_string();
        let server = Server::with_users(args.config(), users, l, ahead)?;
        let addr = server.local_addr()?;
        say_ahead_port(server.ahead_port(), args.ahead_port, addr.port());
        // Handlers in place before the server says it serves: a signal
        // right after that line killed it (a defect hunt's find).
        use tokio::signal::unix::{signal, SignalKind};
        let reload = reload_on_hangup(server.users_reload(), args.run_as.is_some())?;
        let (mut int, mut term) = (signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?);
        crate::log::say(&format!("lightpath: serving {root} on {addr} ({})", args.access()));
        tokio::select! {
            r = server.run() => r.context("accepting connections"),
            _ = int.recv() => stop("interrupted", 130),
            _ = term.recv() => stop("stopped (SIGTERM)", 0),
            _ = reload => Ok(()),
        }
    })
}

/// Ctrl-C (SIGINT, exit 130) and SIGTERM (exit 0, a service's stop): the
/// server ends at once. It returned from `run`, and the runtime then
/// waited for the transfers under way, which went on without their
/// control connections: a MODE S upload whose client then closed its data
/// connection was published truncated, a trickling download kept the
/// server up, a second Ctrl-C did nothing, and it exited 0 (a defect
/// hunt's find). Uploads under way are unnamed files or temporary names:
/// none is published, and the temporary names are removed first (SIGTERM
/// killed the server and left them, hidden, for ever).
fn stop(why: &str, code: i32) -> ! {
    let names = match lightpath_sys::root::remove_temp_files_within(crate::cp::TEMP_REMOVAL) {
        Some(0) => String::new(),
        Some(n) => format!(" ({n} temporary file(s) removed)"),
        None => " (the file system did not answer: temporary files may be left)".to_string(),
    };
    crate::log::say(&format!(
        "lightpath: {why}: the server stops; transfers under way are dropped, none published{names}"
    ));
    std::process::exit(code)
}

/// SIGHUP reads the users file again (it ended the server, silently:
/// a UX audit); a file that does not load leaves the old one in force.
/// The future never ends.
fn reload_on_hangup(
    reload: lightpath_server::UsersReload,
    run_as: bool,
) -> std::io::Result<impl std::future::Future<Output = ()>> {
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    Ok(async move {
        while hup.recv().await.is_some() {
            match reload.reload() {
                Ok(Some(n)) => crate::log::say(&format!("lightpath: SIGHUP: users file read again ({n} users)")),
                Ok(None) => crate::log::say("lightpath: SIGHUP: no users file to read again; still serving"),
                Err(e) => crate::log::say(&format!(
                    "lightpath: SIGHUP: users file not read again, the old one stays in force: {e}{}",
                    if run_as && denied(&e) {
                        " (read at start as root; after --run-as, the file must be readable by that user to be read again)"
                    } else {
                        ""
                    }
                )),
            }
        }
        std::future::pending::<()>().await
    })
}

/// Whether the users file could not be read for want of permission.
fn denied(e: &lightpath_server::ServerError) -> bool {
    use lightpath_server::{users::UsersError, ServerError};
    matches!(e, ServerError::Users(UsersError::Io(_, io)) if io.kind() == std::io::ErrorKind::PermissionDenied)
}

/// The blocking threads the runtime may have for `max_sessions` sessions:
/// a session's transfer waits on one for as long as it runs (its bytes
/// move on the fixed I/O threads), and a file command (SIZE, MLSD, ...)
/// may take another meanwhile. With tokio's default cap (512), as many
/// stalled transfers (peers that stop reading) left every other session's
/// file commands waiting for a thread; two per session, and a few for the
/// server's own work, cannot run out. Idle ones exit after 10 s.
fn blocking_threads(max_sessions: usize) -> usize {
    max_sessions.saturating_mul(2).saturating_add(16)
}

/// The runtime of the control sessions and of the transfers' management,
/// with at most `blocking` blocking threads ([`blocking_threads`]).
/// Its threads, workers and blocking ones alike, run on the management
/// cpus (`cpus`; none: anywhere), away from the I/O threads' cpus where
/// the placement found cpus free of them.
fn runtime(cpus: Vec<u32>, blocking: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.enable_all().max_blocking_threads(blocking);
    if !cpus.is_empty() {
        b.on_thread_start(move || {
            if let Err(e) = lightpath_sys::topo::pin_current_thread(&cpus) {
                tracing::debug!("runtime thread not pinned to the management cpus: {e}");
            }
        });
    }
    b.build()
}

#[cfg(test)]
mod tests {
    /// This thread's `Cpus_allowed_list`.
    fn allowed() -> String {
        let status = std::fs::read_to_string("/proc/thread-self/status").expect("status");
        let line = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")).expect("line");
        line.split_whitespace().nth(1).expect("value").to_string()
    }

    /// Every session of a full server can have a transfer and a file
    /// command waiting on blocking threads at once, more than tokio's
    /// default 512: all of them run together (a smaller cap deadlocks
    /// here, each waiting for the others at the barrier).
    #[test]
    fn every_session_gets_its_blocking_threads() {
        let sessions = 300;
        let n = 2 * sessions;
        assert!(super::blocking_threads(sessions) >= n && n > 512);
        let rt = super::runtime(Vec::new(), super::blocking_threads(sessions)).expect("runtime");
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(n + 1));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn({
            let barrier = barrier.clone();
            move || {
                barrier.wait();
                let _ = tx.send(());
            }
        });
        rt.block_on(async {
            for _ in 0..n {
                let b = barrier.clone();
                drop(tokio::task::spawn_blocking(move || b.wait()));
            }
        });
        let ran = rx.recv_timeout(std::time::Duration::from_secs(20)).is_ok();
        rt.shutdown_background(); // threads stuck at the barrier are not waited for
        assert!(ran, "the blocking threads ran out");
    }

    #[test]
    fn runtime_threads_run_on_the_management_cpus() {
        let rt = super::runtime(vec![0], 16).expect("runtime");
        let (worker, blocking) = rt.block_on(async {
            let w = tokio::spawn(async { allowed() }).await.expect("task");
            let b = tokio::task::spawn_blocking(allowed).await.expect("blocking");
            (w, b)
        });
        assert_eq!((worker.as_str(), blocking.as_str()), ("0", "0"));
        // No management cpus: threads keep the process's mask.
        let rt = super::runtime(Vec::new(), 16).expect("runtime");
        let free = rt.block_on(async { tokio::spawn(async { allowed() }).await.expect("task") });
        assert_eq!(free, allowed());
    }
}

//! The server protocol interpreter (RFC 959 "server-PI"), sans-IO.
//!
//! Call order: [`ServerPi::new`] queues the 220 greeting; feed every framed
//! control line to [`ServerPi::handle_line`]; drain [`ServerPi::poll_output`]
//! until `None` after every input. Pure commands are answered here. Commands
//! that need the file system, sockets or credentials come out as an
//! [`Action`]; the driver performs it, answers with the reply builders in
//! this crate, and reports state changes back (`handle_login`, `set_cwd`).
//! Commands are processed strictly in arrival order, so pipelined commands
//! are answered in order.

use crate::command::{CksumArgs, Command, CommandError, Opts, Restart, Site};
use crate::feat::{DCON_FEAT, LIGHTPATH_FEAT, LPVF_COPIES_FEAT, LPVF_FEAT};
use crate::line::Line;
use crate::reply::Reply;
use crate::vpath::VPath;
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};

mod action;
pub use action::{Action, FsOp, Output};

/// Static configuration of a server session.
#[derive(Debug, Clone)]
pub struct PiConfig {
    /// Text after `220 `.
    pub banner: String,
    /// Whether `USER anonymous`/`ftp` logs in with any password.
    pub anonymous: bool,
    /// Refuse every command that writes.
    pub read_only: bool,
    /// Let anonymous sessions write (else they may only read).
    pub anonymous_writes: bool,
    /// Version string for `SITE VERSION` and FEAT.
    pub version: String,
    /// Checksum algorithms the driver implements (upper case).
    pub cksum_algs: Vec<String>,
    /// The port data connections opened ahead go to (FEAT `DCON`), if any.
    pub dcon_port: Option<u16>,
    /// The only address PORT may name (the client's), if the server
    /// connects to no one else: otherwise a client could have it send a
    /// file's bytes to any host and port (an FTP bounce).
    pub data_peer: Option<IpAddr>,
    /// The client's address (the control connection's peer), if known.
    /// Where PORT may name any host, it still may not name one inside
    /// this server's host or site ([`crate::hostport::inside`]) unless the
    /// client is there too: a client elsewhere would reach the server's
    /// loopback or private network through it.
    pub client: Option<IpAddr>,
    /// This server's own addresses (all its interfaces'). Where PORT may
    /// name any host, it still may not name one of these for a client
    /// elsewhere: the connection would come from the host itself, into
    /// services that trust it or that a firewall keeps from outside.
    pub host: Vec<IpAddr>,
    /// Ports of the host's own addresses PORT may name all the same: where
    /// data listeners bind (the kernel's ephemeral range, a configured
    /// data port range), so that a third-party copy between two servers
    /// of one host still works; services listen on fixed ports outside.
    pub host_data_ports: Vec<(u16, u16)>,
}

/// Transfer mode (RFC 959 3.4, GFD.20 MODE E).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Stream mode: one connection, EOF by close.
    Stream,
    /// Extended block mode: parallel streams, 17-byte headers.
    Extended,
}

/// The most files one VRET is asked to leave out (`OPTS VRET Skip=`).
pub const MAX_VRET_SKIP: usize = 64;

/// Per-session transfer settings that apply to the next transfer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferSettings {
    /// MODE S or E.
    pub mode: Mode,
    /// Streams the server opens for RETR in MODE E.
    pub parallelism: u32,
    /// TCP buffer size asked for with SBUF / SITE BUFSIZE (0 = autotune).
    pub tcp_buffer: u64,
    /// Seconds between perf markers on RETR (`OPTS RETR markers=N;`), if asked.
    pub retr_markers: Option<u32>,
    /// Seconds between 113 status markers of a CKSM (`OPTS CKSM markers=N;`).
    pub cksm_markers: Option<u32>,
    /// Largest MODE E block the receiver asked for on RETR
    /// (`OPTS RETR BlockSize=N;`), if it did.
    pub block_size: Option<u64>,
    /// `OPTS VRET After=`: where the next VRET resumes, consumed by the
    /// next transfer as REST is.
    pub vret_after: Option<crate::held::TreeResume>,
    /// `OPTS VRET Skip=`: files the next VRET leaves out (at most
    /// [`MAX_VRET_SKIP`]), consumed by the next transfer.
    pub vret_skip: Vec<Vec<u8>>,
    /// `OPTS VRET Copies=`: how many times the next VRET may send each
    /// manifest chunk (1 unless asked), consumed by the next transfer.
    pub vret_copies: u8,
    /// `OPTS VSTO Mode=`: the tree's own directory, for the next VSTO,
    /// consumed by the next transfer.
    pub vsto_root: Option<crate::held::TreeRoot>,
    /// `OPTS VSTO After=;Check=`: the next VSTO resumes a tree an
    /// earlier run left, consumed by the next transfer.
    pub vsto_after: Option<crate::held::TreeResume>,
}

impl Default for TransferSettings {
    fn default() -> Self {
        TransferSettings {
            mode: Mode::Stream,
            parallelism: 1,
            tcp_buffer: 0,
            retr_markers: None,
            cksm_markers: None,
            block_size: None,
            vret_after: None,
            vret_skip: Vec::new(),
            vret_copies: 1,
            vsto_root: None,
            vsto_after: None,
        }
    }
}

/// How the server should listen for data connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassiveKind {
    /// PASV: reply 227 with h1,..,p2.
    Pasv,
    /// EPSV: reply 229 (|||port|).
    Epsv,
    /// SPAS: multi-line 229 with one h1,..,p2 per stripe.
    Spas,
}

/// What a transfer command asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransferKind {
    /// RETR (whole file, or the parts REST leaves).
    Retr,
    /// STOR (replace).
    Stor,
    /// APPE (append).
    Appe,
    /// ERET P: a part of the file, sent as a new virtual file.
    Eret {
        /// Start of the part.
        offset: u64,
        /// Length of the part.
        len: u64,
    },
    /// ESTO A: block offset 0 lands at file offset `offset`.
    Esto {
        /// Where block offset 0 is written.
        offset: u64,
    },
    /// MLSD listing over the data channel.
    Mlsd,
    /// LIST listing.
    List,
    /// NLST listing.
    Nlst,
    /// VRET: the tree at `path` as one virtual file (manifest + data).
    VfileRetr,
    /// VSTO: rebuild a virtual file's tree under `path`.
    VfileStor,
}

impl TransferKind {
    /// Whether the server receives data (and so must send 111/112 markers).
    pub fn is_upload(&self) -> bool {
        matches!(self, TransferKind::Stor | TransferKind::Appe | TransferKind::Esto { .. } | TransferKind::VfileStor)
    }
}

/// A data transfer to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    /// What to do.
    pub kind: TransferKind,
    /// Which file or directory.
    pub path: VPath,
    /// REST given before the command, consumed by it.
    pub restart: Option<Restart>,
    /// Size announced by ALLO, if any.
    pub allo: Option<u64>,
    /// The mode and mtime `OPTS STOR` gave for a STOR that creates its
    /// file (the permission bits only are applied: [`crate::held::TreeRoot::applied_mode`]).
    pub meta: Option<crate::held::TreeRoot>,
    /// Settings in force.
    pub settings: TransferSettings,
    /// The path was written with a trailing `/`: it must be a directory
    /// (POSIX path semantics; a client may send `VRET dir/` before it knows
    /// what `dir` is, and a file must then be refused, not sent).
    pub dir_only: bool,
    /// The session may write ([`ServerPi::may_write`]): what listings'
    /// `Perm` facts say.
    pub may_write: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Auth {
    AwaitUser,
    AwaitPass(String),
    Checking,
    LoggedIn(String),
}

/// Server protocol interpreter for one control connection.
#[derive(Debug)]
pub struct ServerPi {
    cfg: PiConfig,
    auth: Auth,
    settings: TransferSettings,
    cwd: VPath,
    restart: Option<Restart>,
    allo: Option<u64>,
    /// `OPTS STOR`'s mode and mtime for the next STOR ([`Transfer::meta`]).
    stor_meta: Option<crate::held::TreeRoot>,
    rnfr: Option<VPath>,
    /// EPSV ALL was given (RFC 2428 section 3): EPSV is the only data
    /// connection setup command left for this session.
    epsv_all: bool,
    out: VecDeque<Output>,
}

impl ServerPi {
    /// A new session; the 220 greeting is queued.
    pub fn new(cfg: PiConfig) -> ServerPi {
        let mut pi = ServerPi {
            auth: Auth::AwaitUser,
            settings: TransferSettings::default(),
            cwd: VPath::root(),
            restart: None,
            allo: None,
            stor_meta: None,
            rnfr: None,
            epsv_all: false,
            out: VecDeque::new(),
            cfg,
        };
        let banner = format!("{} ready.", pi.cfg.banner);
        pi.reply(220, banner);
        pi
    }

    /// Next output, `None` when there is nothing to do.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// The logged-in user, if any.
    pub fn user(&self) -> Option<&str> {
        match &self.auth {
            Auth::LoggedIn(u) => Some(u),
            _ => None,
        }
    }

    /// Current working directory.
    pub fn cwd(&self) -> &VPath {
        &self.cwd
    }

    /// Settings for the next transfer.
    pub fn settings(&self) -> &TransferSettings {
        &self.settings
    }

    /// Result of an [`Action::Login`].
    pub fn handle_login(&mut self, user: &str, ok: bool) {
        if ok {
            self.auth = Auth::LoggedIn(user.to_string());
            self.reply(230, format!("User {user} logged in."));
        } else {
            self.auth = Auth::AwaitUser;
            self.reply(530, "Login incorrect.");
        }
    }

    /// The driver checked an [`FsOp::Cwd`] target: make it the cwd.
    pub fn set_cwd(&mut self, dir: VPath) {
        self.cwd = dir;
    }

    /// The driver checked an [`FsOp::RenameFrom`] name (and answered 350):
    /// an RNTO that comes next renames it.
    pub fn set_rename_from(&mut self, from: VPath) {
        self.rnfr = Some(from);
    }

    /// Feed one framed control line.
    pub fn handle_line(&mut self, line: Line) {
        let bytes = match line {
            Line::TooLong => {
                self.rnfr = None;
                return self.reply(500, "Command line too long.");
            }
            Line::Endless => {
                self.reply(421, "Command line without end, closing control connection.");
                return self.out.push_back(Output::Close);
            }
            Line::Text(b) => b,
        };
        let cmd = Command::parse(&bytes);
        // RFC 959 4.1.3: RNTO must come right after its RNFR; any other
        // command in between (NOOP too) cancels the rename.
        if !matches!(cmd, Ok(Command::Rnto(_))) {
            self.rnfr = None;
        }
        match cmd {
            Ok(cmd) => self.handle_command(cmd),
            Err(e) => {
                let verb = bytes.split(|&b| b == b' ').next().unwrap_or_default();
                if TRANSFER_VERBS.iter().any(|v| v.as_bytes().eq_ignore_ascii_case(verb)) {
                    self.forget_transfer_setup();
                }
                self.reply_error(&e)
            }
        }
    }

    /// A transfer command was refused: the `REST` and `ALLO` sent for it
    /// are used up with it. They were kept, and shaped the next transfer
    /// (a RETR from offset 1000 after a refused `REST 1000`, `STOR`).
    fn forget_transfer_setup(&mut self) {
        self.restart = None;
        self.allo = None;
        self.stor_meta = None;
    }

    fn reply(&mut self, code: u16, text: impl Into<String>) {
        self.out.push_back(Output::Reply(Reply::new(code, text)));
    }

    fn action(&mut self, a: Action) {
        self.out.push_back(Output::Action(a));
    }

    fn reply_error(&mut self, e: &CommandError) {
        self.reply(e.code(), e.to_string());
    }

    fn handle_command(&mut self, cmd: Command) {
        if self.handle_always(&cmd) {
            return;
        }
        if let Some((code, text)) = self.refusal(&cmd) {
            if TRANSFER_VERBS.contains(&cmd.verb()) {
                self.forget_transfer_setup();
            }
            return self.reply(code, text);
        }
        self.handle_logged_in(cmd);
    }

    /// Why `cmd` may not run now (not logged in, a write where writes are
    /// refused, data set-up after EPSV ALL), if it may not.
    fn refusal(&self, cmd: &Command) -> Option<(u16, String)> {
        if self.user().is_none() {
            return Some((530, "Please login with USER and PASS.".into()));
        }
        if self.cfg.read_only && writes(cmd) {
            return Some((550, "Permission denied: this server is read-only.".into()));
        }
        if !self.may_write() && writes(cmd) {
            return Some((550, "Permission denied: anonymous sessions may only read on this server.".into()));
        }
        if self.epsv_all && sets_up_data(cmd) {
            let verb = cmd.verb();
            return Some((503, format!("{verb} refused after EPSV ALL (RFC 2428): use EPSV.")));
        }
        None
    }

    /// Commands allowed before login. Returns whether `cmd` was handled.
    fn handle_always(&mut self, cmd: &Command) -> bool {
        match cmd {
            Command::User(u) => self.handle_user(u),
            Command::Pass(p) => self.handle_pass(p),
            Command::Feat => self.out.push_back(Output::Reply(self.feat())),
            Command::Syst => self.reply(215, "UNIX Type: L8"),
            Command::Noop => self.reply(200, "NOOP command successful."),
            Command::Help => self.out.push_back(Output::Reply(site_help(214))),
            Command::Lang(_) => self.reply(200, "lang set to EN."),
            Command::Quit => {
                self.reply(221, "Goodbye.");
                self.out.push_back(Output::Close);
            }
            _ => return false,
        }
        true
    }

    fn handle_user(&mut self, user: &str) {
        if user.is_empty() || user.len() > 256 {
            return self.reply(501, "Bad user name.");
        }
        self.auth = Auth::AwaitPass(user.to_string());
        self.reply(331, format!("Password required for {user}."));
    }

    fn handle_pass(&mut self, pass: &str) {
        match std::mem::replace(&mut self.auth, Auth::Checking) {
            Auth::AwaitPass(user) => self.action(Action::Login { user, pass: pass.to_string() }),
            Auth::LoggedIn(u) => {
                self.auth = Auth::LoggedIn(u);
                self.reply(503, "Already logged in.");
            }
            other => {
                self.auth = if other == Auth::Checking { Auth::Checking } else { Auth::AwaitUser };
                self.reply(503, "Login with USER first.");
            }
        }
    }

    /// Whether this session may write: the server is not read-only, and
    /// its user is not anonymous unless anonymous sessions may write.
    pub fn may_write(&self) -> bool {
        let anonymous = self.user().is_some_and(|u| self.is_anonymous_user(u));
        !self.cfg.read_only && (self.cfg.anonymous_writes || !anonymous)
    }

    /// Whether the config lets `user` in without a password check.
    pub fn is_anonymous_user(&self, user: &str) -> bool {
        self.cfg.anonymous && is_anonymous_name(user)
    }

    fn feat(&self) -> Reply {
        let algs: String = self.cfg.cksum_algs.iter().map(|a| format!("{a}:10;")).collect();
        let mut lines = vec![
            format!("CKSM {algs}"),
            "PARALLEL".into(),
            "ERET".into(),
            "ESTO".into(),
            "SPAS".into(),
            "SPOR".into(),
            "REST STREAM".into(),
            "SIZE".into(),
            "MDTM".into(),
            "MFMT".into(),
            "MLST Type*;Size*;Modify*;Perm*;UNIX.mode*;Unique*;".into(),
            "UTF8".into(),
            "LANG EN".into(),
        ];
        lines.push(format!("{LIGHTPATH_FEAT} {}", self.cfg.version));
        lines.push(format!("{LPVF_FEAT} {}", crate::manifest::VERSION));
        lines.push(format!("{LPVF_COPIES_FEAT} {}", crate::manifest::MAX_COPIES));
        if let Some(port) = self.cfg.dcon_port {
            lines.push(format!("{DCON_FEAT} {port}"));
        }
        Reply::multi(211, "Extensions supported", lines)
    }

    fn handle_logged_in(&mut self, cmd: Command) {
        match cmd {
            Command::Type(c) => self.reply(200, format!("Type set to {c}.")),
            Command::Mode(c) => self.handle_mode(c),
            Command::Stru(_) => self.reply(200, "STRU F ok."),
            Command::Opts(o) => self.handle_opts(o),
            Command::Rest(r) => {
                self.restart = Some(r);
                self.reply(350, "Restart Marker OK. Send STORE or RETR to initiate transfer.");
            }
            Command::Allo(n) => {
                self.allo = Some(n);
                self.reply(200, "ALLO command successful.");
            }
            Command::Sbuf(n) => self.set_buffer(n, "SBUF Command Successful."),
            Command::Site(s) => self.handle_site(s),
            Command::Pwd => {
                let cwd = self.cwd.display().replace('"', "\"\"");
                self.reply(257, format!("\"{cwd}\" is current directory."));
            }
            Command::Pasv => self.action(Action::Passive(PassiveKind::Pasv)),
            Command::Epsv(arg) => self.handle_epsv(arg),
            Command::Spas => self.action(Action::Passive(PassiveKind::Spas)),
            Command::Port(a) | Command::Eprt(a) => self.set_active(vec![a]),
            Command::Spor(addrs) => self.set_active(addrs),
            Command::Dcon(a) if self.cfg.dcon_port.is_some() => self.action(Action::Adopt(a)),
            Command::Dcon(_) => self.reply(502, "DCON is not enabled on this server."),
            Command::Dcau(m) => self.handle_dcau(&m),
            Command::Pbsz(n) => self.reply(200, format!("PBSZ={n}")),
            Command::Prot(c) => self.handle_prot(c),
            Command::Trev(_) => self.reply(200, "Command Successful."),
            Command::Abor => {
                self.reply(226, "Abort successful");
                self.action(Action::Abort);
            }
            other => self.handle_path_command(other),
        }
    }

    fn handle_mode(&mut self, c: char) {
        self.settings.mode = if c == 'E' { Mode::Extended } else { Mode::Stream };
        self.reply(200, format!("Mode set to {c}."));
    }

    fn handle_epsv(&mut self, arg: Option<String>) {
        match arg.as_deref().map(str::trim) {
            Some(a) if a.eq_ignore_ascii_case("ALL") => {
                self.epsv_all = true;
                self.reply(229, "EPSV ALL Successful.")
            }
            // The listener is of the control connection's family: the
            // other one is not supported on this session (RFC 2428 §3).
            Some(p @ ("1" | "2")) if self.session_family().is_some_and(|f| f != p) => {
                let f = self.session_family().unwrap_or("1,2");
                self.reply(522, format!("Network protocol not supported, use ({f})"))
            }
            None | Some("1") | Some("2") => self.action(Action::Passive(PassiveKind::Epsv)),
            Some(_) => self.reply(522, "Network protocol not supported, use (1,2)"),
        }
    }

    /// RFC 2428's number of the control connection's address family (an
    /// IPv4-mapped client is IPv4), if the client's address is known.
    fn session_family(&self) -> Option<&'static str> {
        self.cfg.client.map(|c| if c.to_canonical().is_ipv4() { "1" } else { "2" })
    }

    fn handle_dcau(&mut self, m: &str) {
        if m.trim().eq_ignore_ascii_case("N") {
            self.reply(200, "DCAU N.");
        } else {
            self.reply(504, "Only DCAU N is supported without GSI.");
        }
    }

    fn handle_prot(&mut self, c: char) {
        if c == 'C' {
            self.reply(200, "Protection level set to C.");
        } else {
            self.reply(536, format!("{c} protection level not supported."));
        }
    }

    fn set_active(&mut self, addrs: Vec<SocketAddr>) {
        if let Some(why) = addrs.iter().find_map(|a| self.refuse_active(*a)) {
            return self.reply(501, why);
        }
        self.reply(200, "PORT Command successful.");
        self.action(Action::Active(addrs));
    }

    /// Why the server must not connect to `ip`, if it must not.
    fn refuse_active(&self, a: SocketAddr) -> Option<String> {
        let ip = a.ip().to_canonical();
        let broadcast = matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
        if ip.is_unspecified() || ip.is_multicast() || broadcast {
            return Some(format!("PORT to {ip}: not a host address."));
        }
        match self.cfg.data_peer.map(|p| p.to_canonical()) {
            Some(p) if p != ip => Some(format!(
                "PORT to {ip}: this server connects only to its client ({p}); `serve --data-peers any` allows third-party transfers."
            )),
            Some(_) => None,
            None => self.cfg.client.filter(|&c| self.reaches_in((ip, a.port()), c.to_canonical())).map(|c| {
                format!("PORT to {ip}: an address inside this server's host or network, named by a client at {c}.")
            }),
        }
    }

    /// Whether `ip`, named by a client at `client`, reaches into this
    /// server's host or site from outside it (canonical addresses).
    fn reaches_in(&self, (ip, port): (IpAddr, u16), client: IpAddr) -> bool {
        let own = |a: IpAddr| self.cfg.host.iter().any(|h| h.to_canonical() == a);
        let data_port = self.cfg.host_data_ports.iter().any(|&(low, high)| (low..=high).contains(&port));
        crate::hostport::reaches_inside(ip, client) || (own(ip) && !own(client) && !client.is_loopback() && !data_port)
    }

    fn set_buffer(&mut self, n: u64, text: &str) {
        self.settings.tcp_buffer = n.min(1 << 30);
        self.reply(200, text.to_string());
    }

    fn handle_opts(&mut self, o: Opts) {
        match o {
            Opts::Retr { parallelism, markers, block_size } => {
                if let Some(p) = parallelism {
                    self.settings.parallelism = p;
                }
                if block_size.is_some() {
                    self.settings.block_size = block_size;
                }
                if markers.is_some() {
                    self.settings.retr_markers = markers;
                }
                self.reply(200, "OPTS Command Successful.");
            }
            Opts::Vsto(root) => {
                self.settings.vsto_root = Some(root);
                self.reply(200, "OPTS Command Successful.");
            }
            Opts::Vret(resume) => {
                self.settings.vret_after = Some(resume);
                self.reply(200, "OPTS Command Successful.");
            }
            Opts::VretSkip(path) if self.settings.vret_skip.len() >= MAX_VRET_SKIP => self.reply(
                501,
                format!("OPTS VRET: at most {MAX_VRET_SKIP} files skipped; {} refused.", crate::manifest::show(&path)),
            ),
            Opts::VretSkip(path) => {
                self.settings.vret_skip.push(path);
                self.reply(200, "OPTS Command Successful.");
            }
            Opts::VretCopies(n) => {
                self.settings.vret_copies = n;
                self.reply(200, "OPTS Command Successful.");
            }
            Opts::VstoResume(resume) => {
                self.settings.vsto_after = Some(resume);
                self.reply(200, "OPTS Command Successful.");
            }
            Opts::Stor(meta) => {
                self.stor_meta = Some(meta);
                self.reply(200, "OPTS STOR Command Successful.");
            }
            Opts::Mlst(_) => self.reply(200, "OPTS Command Successful."),
            Opts::Cksm(n) => {
                self.settings.cksm_markers = n.filter(|&n| n > 0);
                self.reply(200, "OPTS Command Successful.");
            }
            Opts::Other(_) => self.reply(500, "OPTS failed."),
        }
    }

    fn handle_site(&mut self, s: Site) {
        match s {
            Site::Help => self.out.push_back(Output::Reply(site_help(214))),
            Site::BufSize(n) => self.set_buffer(n, "Site Command Successful."),
            Site::ClientInfo(_) => self.reply(250, "OK."),
            Site::Version => self.reply(200, format!("lightpath {}", self.cfg.version)),
            Site::Whoami => {
                let u = self.user().unwrap_or("").to_string();
                self.reply(200, u)
            }
            Site::Chmod(mode, p) => self.with_path(&p, |path| Action::Fs(FsOp::Chmod { mode, path })),
            Site::Other(name) => self.reply(500, format!("SITE {name}: command not understood.")),
        }
    }

    fn with_path(&mut self, raw: &[u8], make: impl FnOnce(VPath) -> Action) {
        match self.cwd.join(raw) {
            Ok(p) => self.action(make(p)),
            Err(e) => self.reply(553, format!("Bad path: {e}.")),
        }
    }

    fn handle_path_command(&mut self, cmd: Command) {
        use Command as C;
        let cwd = self.cwd.clone();
        let opt = move |p: Option<Vec<u8>>| p.unwrap_or_else(|| cwd.as_bytes().to_vec());
        match cmd {
            C::Retr(p) => self.transfer(&p, TransferKind::Retr),
            C::Stor(p) => self.transfer(&p, TransferKind::Stor),
            C::Appe(p) => self.transfer(&p, TransferKind::Appe),
            C::Eret { offset, len, path } => self.transfer(&path, TransferKind::Eret { offset, len }),
            C::Esto { offset, path } => self.transfer(&path, TransferKind::Esto { offset }),
            C::Mlsd(p) => self.transfer(&opt(p), TransferKind::Mlsd),
            C::Vret(p) => self.transfer(&p, TransferKind::VfileRetr),
            C::Vsto(p) => self.transfer(&p, TransferKind::VfileStor),
            C::List(p) => self.transfer(&opt(p), TransferKind::List),
            C::Nlst(p) => self.transfer(&opt(p), TransferKind::Nlst),
            C::Size(p) => self.with_path(&p, |p| Action::Fs(FsOp::Size(p))),
            C::Mdtm(p) => self.with_path(&p, |p| Action::Fs(FsOp::Mdtm(p))),
            C::Mlst(p) => self.with_path(&opt(p), |p| Action::Fs(FsOp::Mlst(p))),
            C::Stat(p) => self.handle_stat(p),
            C::Cwd(p) => self.with_path(&p, |p| Action::Fs(FsOp::Cwd(p))),
            C::Cdup => self.with_path(b"..", |p| Action::Fs(FsOp::Cwd(p))),
            C::Mkd(p) => self.with_path(&p, |p| Action::Fs(FsOp::Mkd(p))),
            C::Rmd(p) => self.with_path(&p, |p| Action::Fs(FsOp::Rmd(p))),
            C::Dele(p) => self.with_path(&p, |p| Action::Fs(FsOp::Dele(p))),
            C::Rnfr(p) => self.handle_rnfr(&p),
            C::Rnto(p) => self.handle_rnto(&p),
            C::Cksm(a) => self.handle_cksm(a),
            C::Mfmt { mtime, path } => self.with_path(&path, |path| Action::Fs(FsOp::Mfmt { mtime, path })),
            other => self.reply(502, format!("{} not implemented.", other.verb())),
        }
    }

    fn handle_stat(&mut self, p: Option<Vec<u8>>) {
        match p {
            None => self.reply(212, "lightpath server status."),
            Some(p) => self.with_path(&p, |p| Action::Fs(FsOp::Stat(p))),
        }
    }

    fn handle_rnfr(&mut self, raw: &[u8]) {
        self.with_path(raw, |p| Action::Fs(FsOp::RenameFrom(p)));
    }

    fn handle_rnto(&mut self, raw: &[u8]) {
        let Some(from) = self.rnfr.take() else {
            return self.reply(503, "RNTO without RNFR.");
        };
        self.with_path(raw, |to| Action::Fs(FsOp::Rename { from, to }));
    }

    fn handle_cksm(&mut self, a: CksumArgs) {
        if !self.cfg.cksum_algs.contains(&a.alg) {
            return self.reply(504, "Unknown checksum algorithm requested.");
        }
        let CksumArgs { alg, offset, len, path } = a;
        let markers = self.settings.cksm_markers;
        self.with_path(&path, |path| Action::Fs(FsOp::Cksm { alg, offset, len, path, markers }));
    }

    fn transfer(&mut self, raw: &[u8], kind: TransferKind) {
        let restart = self.restart.take();
        let allo = self.allo.take();
        let meta = self.stor_meta.take().filter(|_| kind == TransferKind::Stor);
        if let (Some(Restart::Ranges(_)), Mode::Stream) = (&restart, self.settings.mode) {
            return self.reply(501, "Range restart markers need MODE E.");
        }
        let mut settings = self.settings.clone();
        settings.vret_after = self.settings.vret_after.take().filter(|_| kind == TransferKind::VfileRetr);
        settings.vret_skip = std::mem::take(&mut self.settings.vret_skip);
        settings.vret_copies = std::mem::replace(&mut self.settings.vret_copies, 1);
        if kind != TransferKind::VfileRetr {
            settings.vret_skip.clear();
            settings.vret_copies = 1;
        }
        settings.vsto_root = self.settings.vsto_root.take().filter(|_| kind == TransferKind::VfileStor);
        settings.vsto_after = self.settings.vsto_after.take().filter(|_| kind == TransferKind::VfileStor);
        let dir_only = raw.len() > 1 && raw.ends_with(b"/");
        let may_write = self.may_write();
        self.with_path(raw, |path| {
            Action::Transfer(Box::new(Transfer { kind, path, restart, allo, meta, settings, dir_only, may_write }))
        });
    }
}

/// The names an anonymous login gives (`anonymous`, `ftp`, any case).
pub fn is_anonymous_name(user: &str) -> bool {
    user.eq_ignore_ascii_case("anonymous") || user.eq_ignore_ascii_case("ftp")
}

fn writes(cmd: &Command) -> bool {
    use Command as C;
    matches!(
        cmd,
        C::Stor(_)
            | C::Appe(_)
            | C::Esto { .. }
            | C::Vsto(_)
            | C::Mkd(_)
            | C::Rmd(_)
            | C::Dele(_)
            | C::Rnfr(_)
            | C::Rnto(_)
    ) || matches!(cmd, C::Site(Site::Chmod(..)) | C::Mfmt { .. })
}

/// The verbs that start a transfer, using up `REST` and `ALLO`.
const TRANSFER_VERBS: [&str; 10] = ["RETR", "STOR", "APPE", "ERET", "ESTO", "MLSD", "VRET", "VSTO", "LIST", "NLST"];

/// Data connection setup commands other than EPSV (RFC 2428 section 3:
/// "EPRT, PORT, PASV, et al."; SPAS, SPOR and DCON are GridFTP's).
fn sets_up_data(cmd: &Command) -> bool {
    use Command as C;
    matches!(cmd, C::Pasv | C::Spas | C::Port(_) | C::Eprt(_) | C::Spor(_) | C::Dcon(_))
}

fn site_help(code: u16) -> Reply {
    let lines = [
        "ALLO    APPE    REST    CWD     CDUP    DCAU    EPSV    FEAT",
        "ERET    MDTM    STAT    ESTO    HELP    LIST    MODE    NLST",
        "MLSD    PASV    RNFR    MLST    NOOP    OPTS    STOR    PASS",
        "PBSZ    PORT    PROT    SITE    EPRT    RETR    SPOR    TREV",
        "PWD     QUIT    SBUF    SIZE    SPAS    STRU    SYST    RNTO",
        "TYPE    USER    LANG    MKD     RMD     DELE    CKSM    ABOR",
        "MFMT",
        "SITE HELP, SITE BUFSIZE, SITE RETRBUFSIZE, SITE STORBUFSIZE, SITE SBUF,",
        "SITE CLIENTINFO, SITE VERSION, SITE WHOAMI, SITE CHMOD",
    ];
    Reply::multi(code, "The following commands are recognized:", lines.map(String::from))
}

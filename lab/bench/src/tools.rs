//! Tool adapters: the command lines of each tool's servers and client for a
//! mode and a data set. Data always flows from side A to side B.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Result};
use serde::Serialize;

use crate::dataset::Dataset;
use crate::netpath::Side;
use crate::scenario::{Mode, ServerKind, ToolKind, ToolSpec};

/// The unprivileged user servers run as (anonymous sessions map to it).
pub const SERVER_USER: &str = "gftp";

/// Where each program is.
#[derive(Clone, Debug, Serialize)]
pub struct Programs {
    pub lightpath: PathBuf,
    pub guc: PathBuf,
    pub guc_server: PathBuf,
    pub iperf3: PathBuf,
    pub fio: PathBuf,
}

/// A server to start before the client.
#[derive(Clone, Debug, Serialize)]
pub struct ServerCmd {
    pub role: String,
    #[serde(skip)]
    pub side: Side,
    pub port: u16,
    pub argv: Vec<String>,
    /// Set in the server's environment.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<(String, String)>,
}

/// Everything one run executes.
#[derive(Clone, Debug, Serialize)]
pub struct Invocation {
    pub servers: Vec<ServerCmd>,
    #[serde(skip)]
    pub client_side: Side,
    pub client: Vec<String>,
}

/// What a command line needs to know about the run.
pub struct Ctx<'a> {
    pub mode: Mode,
    pub ds: &'a Dataset,
    pub a: Ipv4Addr,
    pub b: Ipv4Addr,
    /// Where the data lands (client-local for downloads, served root otherwise).
    pub dest: &'a Path,
    /// Per-run directory for server logs.
    pub logs: &'a Path,
}

impl Ctx<'_> {
    pub(crate) fn is_memory(&self) -> bool {
        self.ds.kind == crate::scenario::DatasetKind::Memory
    }
    pub(crate) fn src_root(&self) -> PathBuf {
        self.ds.root.clone().unwrap_or_else(|| "/".into())
    }
    /// Client side and the roles (side, root) of the servers.
    fn layout(&self) -> (Side, Vec<(&'static str, Side, PathBuf)>) {
        let src = ("server", Side::A, self.src_root());
        let dst = ("server", Side::B, self.dest.to_path_buf());
        match self.mode {
            Mode::Download => (Side::B, vec![src]),
            Mode::Upload => (Side::A, vec![dst]),
            Mode::ThirdParty => (Side::A, vec![("src-server", src.1, src.2), ("dst-server", dst.1, dst.2)]),
        }
    }
}

fn s<T: ToString>(v: T) -> String {
    v.to_string()
}

/// Builds the command lines of one tool configuration.
pub fn invocation(spec: &ToolSpec, progs: &Programs, ctx: &Ctx) -> Result<Invocation> {
    match spec.tool {
        ToolKind::Iperf3 => Ok(iperf3(spec, progs, ctx)),
        ToolKind::GlobusUrlCopy => Ok(guc(spec, progs, ctx)),
        ToolKind::Lightpath => lightpath(spec, progs, ctx),
        ToolKind::Fio => crate::fio::invocation(spec, progs, ctx),
    }
}

/// iperf3 is the line-rate reference: server on B, client on A sending the
/// data set's byte count, whatever the mode.
fn iperf3(spec: &ToolSpec, progs: &Programs, ctx: &Ctx) -> Invocation {
    let bin = s(progs.iperf3.display());
    let mut server = vec![bin.clone(), "-s".into(), "-1".into(), "-p".into(), "5201".into()];
    server.extend(spec.server_args.iter().cloned());
    let mut client = vec![bin, "-c".into(), s(ctx.b), "-p".into(), "5201".into()];
    client.extend(["-n".into(), s(ctx.ds.bytes), "-J".into()]);
    if let Some(p) = spec.parallel {
        client.extend(["-P".into(), s(p)]);
    }
    client.extend(spec.extra_args.iter().cloned());
    let srv = ServerCmd { role: "server".into(), side: Side::B, port: 5201, argv: server, env: Vec::new() };
    Invocation { servers: vec![srv], client_side: Side::A, client }
}

/// guc's URL of the data set on `side` (a local `file://` one if `local`).
fn guc_url(ctx: &Ctx, side: Side, root: &Path, local: bool, server: ServerKind) -> String {
    let entry = if ctx.is_memory() {
        if side == Side::A { "dev/zero" } else { "dev/null" }.to_string()
    } else {
        let slash = if ctx.ds.is_dir { "/" } else { "" };
        format!("{}{slash}", ctx.ds.entry)
    };
    match local {
        true if ctx.is_memory() => format!("file:///{entry}"),
        true => format!("file://{}/{entry}", root.display()),
        false => remote_url(server, ctx, side, root, &entry),
    }
}

/// The URL of `entry` (the data set's, or `dev/zero` and `dev/null`) on
/// side `side`'s server of `kind`, whose files are under `root`. Our
/// server serves its root (and `/dev/zero` with `--memory-paths`): paths
/// are relative to it. GCT's paths are the file system's.
fn remote_url(kind: ServerKind, ctx: &Ctx, side: Side, root: &Path, entry: &str) -> String {
    let (host, port) = server_addr(kind, ctx, side);
    if kind == ServerKind::GlobusGridftpServer && !ctx.is_memory() {
        return format!("ftp://{host}:{port}{}/{entry}", root.display());
    }
    format!("ftp://{host}:{port}/{entry}")
}

fn guc(spec: &ToolSpec, progs: &Programs, ctx: &Ctx) -> Invocation {
    let (client_side, _) = ctx.layout();
    let servers = gridftp_servers(spec, progs, ctx);
    let mut client = vec![s(progs.guc.display())];
    client.extend(guc_flags(spec, ctx));
    let src_local = ctx.mode == Mode::Upload;
    let dst_local = ctx.mode == Mode::Download;
    client.push(guc_url(ctx, Side::A, &ctx.src_root(), src_local, spec.server_kind()));
    client.push(guc_url(ctx, Side::B, ctx.dest, dst_local, spec.server_kind()));
    Invocation { servers, client_side, client }
}

/// The GridFTP servers of a run (one per role of the mode), of the kind
/// the configuration talks to.
fn gridftp_servers(spec: &ToolSpec, progs: &Programs, ctx: &Ctx) -> Vec<ServerCmd> {
    let (_, roles) = ctx.layout();
    let one = |(role, side, root): (&str, Side, PathBuf)| match spec.server_kind() {
        ServerKind::Lightpath => lightpath_server(spec, progs, ctx, role, side, &root),
        ServerKind::GlobusGridftpServer => gct_server(spec, progs, ctx, role, side, &root),
    };
    roles.into_iter().map(one).collect()
}

/// Where side `side`'s server of `kind` listens.
fn server_addr(kind: ServerKind, ctx: &Ctx, side: Side) -> (Ipv4Addr, u16) {
    match kind {
        ServerKind::Lightpath => lightpath_addr(ctx, side),
        ServerKind::GlobusGridftpServer if side == Side::A => (ctx.a, 2811),
        ServerKind::GlobusGridftpServer => (ctx.b, 2812),
    }
}

fn gct_server(spec: &ToolSpec, progs: &Programs, ctx: &Ctx, role: &str, side: Side, root: &Path) -> ServerCmd {
    let (addr, port) = server_addr(ServerKind::GlobusGridftpServer, ctx, side);
    let log = ctx.logs.join(format!("gridftp-{role}.log"));
    let mut argv = vec![s(progs.guc_server.display()), "-c".into(), "/dev/null".into()];
    argv.extend(["-aa", "-anonymous-user", SERVER_USER, "-p"].map(String::from));
    argv.extend([s(port), "-control-interface".into(), s(addr)]);
    argv.extend(["-home-dir".into(), s(root.display()), "-l".into(), s(log.display())]);
    argv.extend(["-log-level".into(), "ERROR,WARN".into()]);
    // No usage statistics: older servers send a UDP report to Globus
    // (resolving its name first) unless told not to; 13.x accepts and
    // ignores the option, reports being gone.
    argv.push("-disable-usage-stats".into());
    argv.extend(spec.server_args.iter().cloned());
    let env = vec![("GLOBUS_USAGE_OPTOUT".into(), "1".into())];
    ServerCmd { role: s(role), side, port, argv, env }
}

fn guc_flags(spec: &ToolSpec, ctx: &Ctx) -> Vec<String> {
    let mut f = Vec::new();
    if let Some(p) = spec.parallel {
        f.extend(["-p".into(), s(p)]);
    }
    if let Some(c) = spec.concurrency {
        f.extend(["-cc".into(), s(c)]);
    }
    if spec.pipeline {
        f.push("-pp".into());
    }
    if spec.fast {
        f.push("-fast".into());
    }
    if let Some(b) = spec.tcp_buffer {
        f.extend(["-tcp-bs".into(), s(b.0)]);
    }
    if let Some(b) = spec.block_size {
        f.extend(["-bs".into(), s(b.0)]);
    }
    if ctx.is_memory() {
        f.extend(["-len".into(), s(ctx.ds.bytes)]);
    } else if ctx.ds.is_dir {
        f.extend(["-r".into(), "-cd".into()]);
    }
    f.extend(spec.extra_args.iter().cloned());
    f
}

/// lightpath's control ports on sides A and B. Not adjacent: a server
/// takes its control port + 1 for the connections clients open ahead
/// (`serve --ahead-port auto`), and on loopback both sides share one
/// address, so B on 2912 found its port taken by A's.
const LIGHTPATH_PORTS: (u16, u16) = (2911, 2921);

/// Where side `side`'s lightpath server listens.
fn lightpath_addr(ctx: &Ctx, side: Side) -> (Ipv4Addr, u16) {
    if side == Side::A {
        (ctx.a, LIGHTPATH_PORTS.0)
    } else {
        (ctx.b, LIGHTPATH_PORTS.1)
    }
}

fn lightpath(spec: &ToolSpec, progs: &Programs, ctx: &Ctx) -> Result<Invocation> {
    let (client_side, _) = ctx.layout();
    let servers = gridftp_servers(spec, progs, ctx);
    let mut client = vec![s(progs.lightpath.display()), "cp".into(), "-q".into()];
    client.extend(lightpath_flags(spec, ctx));
    let (src, dst) = lightpath_endpoints(ctx, spec.server_kind())?;
    client.extend([src, dst]);
    Ok(Invocation { servers, client_side, client })
}

fn lightpath_server(spec: &ToolSpec, progs: &Programs, ctx: &Ctx, role: &str, side: Side, root: &Path) -> ServerCmd {
    let (addr, port) = lightpath_addr(ctx, side);
    let mut argv =
        ["setpriv", "--reuid", SERVER_USER, "--regid", SERVER_USER, "--clear-groups"].map(String::from).to_vec();
    argv.extend([s(progs.lightpath.display()), "serve".into(), "--listen".into(), format!("{addr}:{port}")]);
    argv.extend(["--root".into(), s(root.display()), "--anonymous-write".into()]);
    if ctx.is_memory() {
        argv.push("--memory-paths".into());
    }
    if ctx.mode == Mode::ThirdParty {
        // The data goes between the servers, not to the client.
        argv.extend(["--data-peers".into(), "any".into()]);
    }
    argv.extend(spec.server_args.iter().cloned());
    ServerCmd { role: s(role), side, port, argv, env: Vec::new() }
}

fn lightpath_flags(spec: &ToolSpec, ctx: &Ctx) -> Vec<String> {
    let mut f = Vec::new();
    if let Some(p) = spec.parallel {
        f.extend(["-p".into(), s(p)]);
    }
    if let Some(c) = spec.concurrency {
        f.extend(["--cc".into(), s(c)]);
    }
    if ctx.is_memory() {
        f.extend(["--off".into(), "0".into(), "--len".into(), s(ctx.ds.bytes)]);
    } else if ctx.ds.is_dir {
        f.push("-r".into());
    }
    f.extend(spec.extra_args.iter().cloned());
    f
}

fn lightpath_endpoints(ctx: &Ctx, server: ServerKind) -> Result<(String, String)> {
    let remote = |side: Side, path: &str| {
        let root = if side == Side::A { ctx.src_root() } else { ctx.dest.to_path_buf() };
        remote_url(server, ctx, side, &root, path)
    };
    let (src_entry, dst_entry) = if ctx.is_memory() {
        ("dev/zero".to_string(), "dev/null".to_string())
    } else {
        (ctx.ds.entry.clone(), ctx.ds.entry.clone())
    };
    let local_src = if ctx.is_memory() { "/dev/zero".into() } else { s(ctx.src_root().join(&src_entry).display()) };
    let local_dst = if ctx.is_memory() { "/dev/null".into() } else { s(ctx.dest.join(&dst_entry).display()) };
    Ok(match ctx.mode {
        Mode::Download => (remote(Side::A, &src_entry), local_dst),
        Mode::Upload => (local_src, remote(Side::B, &dst_entry)),
        Mode::ThirdParty => (remote(Side::A, &src_entry), remote(Side::B, &dst_entry)),
    })
}

/// Finds `name` on PATH (or checks an explicit path).
pub fn which(name: &Path) -> Option<PathBuf> {
    if name.components().count() > 1 {
        return name.is_file().then(|| name.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let extra = ["/usr/sbin", "/sbin"].map(PathBuf::from);
    std::env::split_paths(&path).chain(extra).map(|d| d.join(name)).find(|p| p.is_file())
}

/// The programs a tool configuration needs (its client and the servers it
/// talks to), or a clear error naming the missing one.
pub fn check_programs(spec: &ToolSpec, progs: &Programs) -> Result<()> {
    let kind = spec.tool;
    let mut needed: Vec<(&Path, &str)> = match kind {
        ToolKind::Iperf3 => vec![(&progs.iperf3, "apt-get install iperf3")],
        ToolKind::Fio => vec![(&progs.fio, "apt-get install fio")],
        ToolKind::GlobusUrlCopy => vec![(&progs.guc, "apt-get install globus-gass-copy-progs")],
        ToolKind::Lightpath => vec![(&progs.lightpath, LIGHTPATH_HINT)],
    };
    if matches!(kind, ToolKind::Lightpath | ToolKind::GlobusUrlCopy) {
        let servers: Vec<(&Path, &str)> = match spec.server_kind() {
            ServerKind::GlobusGridftpServer => vec![(&progs.guc_server, "apt-get install globus-gridftp-server-progs")],
            ServerKind::Lightpath => {
                vec![(&progs.lightpath, LIGHTPATH_HINT), (Path::new("setpriv"), "apt-get install util-linux")]
            }
        };
        needed.extend(servers);
    }
    for (prog, hint) in needed {
        if which(prog).is_none() {
            bail!("{} needs `{}`, which is not installed ({hint})", spec.label(), prog.display());
        }
    }
    Ok(())
}

const LIGHTPATH_HINT: &str = "build it: cargo build --release -p lightpath-cli, or pass --lightpath PATH";

/// The version line of a tool configuration: the client's, and the
/// server's for the GridFTP tools.
pub fn version(spec: &ToolSpec, progs: &Programs) -> String {
    let kind = spec.tool;
    let (prog, flag) = match kind {
        ToolKind::Iperf3 => (&progs.iperf3, "--version"),
        ToolKind::Fio => (&progs.fio, "--version"),
        ToolKind::GlobusUrlCopy => (&progs.guc, "-version"),
        ToolKind::Lightpath => (&progs.lightpath, "--version"),
    };
    let mut v = first_line(prog, flag);
    match (kind, spec.server_kind()) {
        (ToolKind::GlobusUrlCopy | ToolKind::Lightpath, ServerKind::GlobusGridftpServer) => {
            v += &format!("; server {}", first_line(&progs.guc_server, "-version"));
        }
        (ToolKind::GlobusUrlCopy, ServerKind::Lightpath) => {
            v += &format!("; server {}", first_line(&progs.lightpath, "--version"));
        }
        _ => {}
    }
    v
}

fn first_line(prog: &Path, flag: &str) -> String {
    match Command::new(prog).arg(flag).output() {
        Ok(o) => {
            let text = [o.stdout, o.stderr].concat();
            let text = String::from_utf8_lossy(&text);
            text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string()
        }
        Err(e) => format!("unknown ({e})"),
    }
}

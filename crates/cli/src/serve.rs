//! `lightpath serve`.

use anyhow::Context;
use clap::Args;
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
    /// Allow `anonymous` logins.
    #[arg(long, env = "LIGHTPATH_ANONYMOUS")]
    pub anonymous: bool,
    /// Refuse every write.
    #[arg(long, env = "LIGHTPATH_READ_ONLY")]
    pub read_only: bool,
    /// Users file: `name:hash` lines (argon2 or SHA-512 crypt; see `lightpath passwd`).
    #[arg(long, env = "LIGHTPATH_USERS")]
    pub users: Option<PathBuf>,
    /// Expose /dev/zero and /dev/null for memory-to-memory transfers.
    #[arg(long, env = "LIGHTPATH_MEMORY_PATHS")]
    pub memory_paths: bool,
    /// Address announced in PASV replies.
    #[arg(long, env = "LIGHTPATH_PUBLIC_IP")]
    pub public_ip: Option<IpAddr>,
    /// TCP congestion control for data connections (e.g. bbr, cubic).
    #[arg(long, env = "LIGHTPATH_CONGESTION")]
    pub congestion: Option<String>,
}

impl ServeArgs {
    fn config(self) -> ServerConfig {
        ServerConfig {
            listen: self.listen,
            root: self.root,
            anonymous: self.anonymous,
            read_only: self.read_only,
            users: self.users,
            memory_paths: self.memory_paths,
            public_ip: self.public_ip,
            congestion: self.congestion,
        }
    }
}

/// Run the server until killed.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let root = args.root.display().to_string();
        let server = Server::bind(args.config()).await?;
        let addr = server.local_addr()?;
        eprintln!("lightpath: serving {root} on {addr}");
        tokio::select! {
            r = server.run() => r.context("accepting connections"),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })
}

//! `lightpath`: GridFTP server, client, demo, WAN lab and benchmarks in one binary.
#![forbid(unsafe_code)]

mod congestion;
mod cp;
mod demo;
mod log;
mod placement;
mod serve;
mod term;
mod units;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Bulk data mover for long fat networks, speaking GridFTP.
#[derive(Debug, Parser)]
#[command(name = "lightpath", version, about, propagate_version = true)]
struct Cli {
    /// More output (-v: info, -vv: debug); LIGHTPATH_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the GridFTP server (DTN daemon).
    Serve(serve::ServeArgs),
    /// Copy files and trees: local <-> remote, remote -> remote (third party).
    Cp(cp::CpArgs),
    /// List a remote directory.
    Ls(cp::LsArgs),
    /// Server-side checksum of a remote file.
    Sum(cp::SumArgs),
    /// The embedded default: a local server and a real multi-stream transfer.
    Demo(demo::DemoArgs),
    /// Hash a password for `serve --users FILE` (reads it from stdin).
    Passwd {
        /// User name written before the hash.
        user: String,
    },
    /// WAN emulator between network namespaces.
    Lab(lightpath_wan::LabArgs),
    /// Benchmark scenarios: lightpath and the real peers, side by side.
    Bench(lightpath_bench::BenchArgs),
}

fn init_logging(verbose: u8, serve: bool) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("LIGHTPATH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    // Colours only for a terminal: logs redirected to files or read by tests
    // stay plain text. A server's never have them, so that what comes from
    // the network is shown without its control characters ([`log`]).
    let ansi = !serve && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let writer = move || log::LogWriter::new(!ansi);
    let fmt = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(ansi);
    // A client's warnings at its default level are for its user: no
    // timestamp or module path (`-v` and a server's log keep them).
    if serve || verbose > 0 {
        fmt.init();
    } else {
        fmt.without_time().with_target(false).init();
    }
}

/// Raise the soft limit of open files to the hard one, for the server and
/// the client alike: each MODE E stream is a descriptor at both ends, and
/// a client with `-p 128 --cc 4` under a soft limit of 256 (or `--cc 16`
/// under the usual 1024) ran out of them and stalled for minutes (a
/// defect hunt's find; only the server raised it). Done before a server's
/// port listens.
fn raise_files_limit() {
    let show = |n: Option<u64>| n.map_or("unlimited".to_string(), |n| n.to_string());
    match lightpath_sys::privs::raise_open_files_limit() {
        Ok((from, to)) if from != to => tracing::info!("open files limit raised from {} to {}", show(from), show(to)),
        Ok((n, _)) => tracing::info!("open files limit {}", show(n)),
        Err(e) => tracing::warn!("open files limit not raised: {e}"),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose, matches!(cli.cmd, Cmd::Serve(_)));
    if matches!(cli.cmd, Cmd::Serve(_) | Cmd::Cp(_) | Cmd::Ls(_) | Cmd::Sum(_) | Cmd::Demo(_)) {
        raise_files_limit();
    }
    let r = match cli.cmd {
        Cmd::Serve(a) => serve::run(a),
        Cmd::Cp(a) => return cp::run(a),
        Cmd::Ls(a) => cp::ls(a),
        Cmd::Sum(a) => cp::sum(a),
        Cmd::Demo(a) => demo::run(a),
        Cmd::Passwd { user } => passwd(&user),
        Cmd::Lab(a) => lightpath_wan::run(a),
        Cmd::Bench(a) => lightpath_bench::run(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::say(&format!("lightpath: {}", term::message(&format!("{e:#}"))));
            // A usage error exits 2, as clap's own do; a failure, 1.
            let usage = matches!(e.downcast_ref(), Some(lightpath_client::ClientError::Usage(_)));
            ExitCode::from(if usage { 2 } else { 1 })
        }
    }
}

/// A users-file line for `user`, its password read from standard input
/// (asked for, without echo, on a terminal). A name the file cannot hold
/// (`:`, blanks, control characters) or that a login cannot give is
/// refused: it made a line that never matched.
fn passwd(user: &str) -> anyhow::Result<()> {
    lightpath_server::users::name_ok(user).map_err(anyhow::Error::msg)?;
    let pass = lightpath_sys::tty::read_secret(&format!("password for {user}: "))?;
    anyhow::ensure!(!pass.is_empty(), "empty password on stdin");
    // A hash of a longer one would never let anyone in: serve refuses it.
    let max = lightpath_server::users::MAX_PASSWORD;
    anyhow::ensure!(pass.len() <= max, "password of {} bytes: serve takes at most {max}", pass.len());
    println!("{user}:{}", lightpath_server::users::hash_password(&pass));
    Ok(())
}

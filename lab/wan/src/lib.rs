//! `lightpath lab`: a WAN emulator between two network namespaces.
//!
//! No netem on our kernels, so the delay line runs in user space: each side
//! gets a TUN device, and one thread per direction holds every packet for the
//! one-way delay behind a rate-limited drop-tail queue, with optional random
//! loss, bit corruption, reordering and outages. See README.md.
#![forbid(unsafe_code)]

mod cli;
mod counters;
mod gso;
mod impair;
mod lab;
mod line;
mod link;
pub mod netns;
pub mod parse;
mod ring;
mod spec;
pub mod validate;

pub use cli::{run, LabArgs};
pub use counters::{Counters, DirCounters};
pub use lab::{cleanup_prefix, Lab};
pub use spec::{capacity_bps, check_spec, check_values, PathSpec, MAX_RATE_BPS, NO_CAPACITY_CHECK_ENV};

/// One end of the emulated path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// Namespace `<prefix>-a`, address 10.77.N.1.
    A,
    /// Namespace `<prefix>-b`, address 10.77.N.2.
    B,
}

impl Side {
    fn index(self) -> usize {
        match self {
            Side::A => 0,
            Side::B => 1,
        }
    }
}

/// Errors of the lab.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LabError {
    /// The path cannot be emulated as asked.
    #[error("cannot emulate this path: {0}")]
    Spec(String),
    /// A command-line value did not parse.
    #[error("{0}")]
    Parse(String),
    /// Not running as root.
    #[error("the lab needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN): run it with sudo")]
    NotRoot,
    /// The TUN driver is not usable.
    #[error("no TUN device: {0} (load the tun module: modprobe tun)")]
    NoTun(String),
    /// A program the lab runs is missing.
    #[error("missing program: {0}")]
    MissingTool(String),
    /// The prefix is not usable as a namespace name.
    #[error("bad prefix {0:?}: use 1-24 characters from a-z, A-Z, 0-9, '-' and '_'")]
    BadPrefix(String),
    /// A lab with this prefix exists already.
    #[error("namespace {0} exists already: another lab runs with this prefix, or a crashed one left it (remove it with `lightpath lab down --prefix {1}`)")]
    Exists(String, String),
    /// An `ip` command failed.
    #[error("`{cmd}` failed: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// Entering or using a namespace failed.
    #[error("namespace {ns}: {source}")]
    Netns {
        /// Namespace name.
        ns: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Another I/O error.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

//! The lightpath GridFTP client: URLs, sessions, two-party and third-party
//! copies of files and trees with parallel streams, concurrency and
//! pipelining. Works with any GridFTP server: features come from FEAT.

pub mod ahead;
pub mod control;
pub mod job;
pub mod local;
pub mod location;
pub mod peers;
pub mod plan;
pub mod session;
pub mod thirdparty;
pub mod vfile;

pub use job::{copy, CopyOptions, FileResult, Progress};
pub use location::{Location, Remote};
pub use session::{Session, SessionOpts, Speculation};

/// Client errors; `Clone` so one failure can be reported for every file it affects.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Bad arguments.
    #[error("{0}")]
    Usage(String),
    /// Could not reach the server.
    #[error("connecting to {0}: {1}")]
    Connect(String, String),
    /// Control connection failed.
    #[error("control connection to {0}: {1}")]
    Control(String, String),
    /// Login refused.
    #[error("login to {0} refused: {1}")]
    Login(String, String),
    /// The server refused a command.
    #[error("{server}: {cmd} refused: {reply}")]
    Refused {
        /// Server.
        server: String,
        /// Command (password redacted).
        cmd: String,
        /// Reply text.
        reply: String,
        /// Reply code.
        code: u16,
    },
    /// A server's answer went past a bound that keeps the client's memory
    /// (or time) in check: an over-long reply, a listing too large or deep.
    #[error("{server}: {what}")]
    Limit {
        /// Server (or the tree's URL).
        server: String,
        /// What went past which bound.
        what: String,
    },
    /// Local file or data-channel trouble.
    #[error("{0}")]
    Local(String),
    /// Data moved but the checksums differ.
    #[error("{alg} checksum mismatch: {local} != {remote}")]
    Checksum {
        /// Algorithm.
        alg: String,
        /// One side.
        local: String,
        /// Other side.
        remote: String,
    },
    /// A copy failed `--verify` (a [`ClientError::Checksum`] mismatch)
    /// and was dealt with so that it does not pose as a good copy:
    /// `outcome` says whether it was removed.
    #[error("{alg} checksum mismatch: {local} != {remote}; {outcome}")]
    VerifyFailed {
        /// Algorithm.
        alg: String,
        /// One side's digest.
        local: String,
        /// The other side's digest.
        remote: String,
        /// What became of the copy: removed, or why not.
        outcome: String,
    },
}

impl From<lightpath_engine::EngineError> for ClientError {
    fn from(e: lightpath_engine::EngineError) -> Self {
        ClientError::Local(format!("data channel: {e}"))
    }
}

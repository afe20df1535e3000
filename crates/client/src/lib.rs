//! The lightpath GridFTP client: URLs, sessions, two-party and third-party
//! copies of files and trees with parallel streams, concurrency and
//! pipelining. Works with any GridFTP server: features come from FEAT.
#![forbid(unsafe_code)]

/// `eprintln!` that ignores a failed write: a closed stderr (`cp ... 2>&1
/// | tee log`, the `tee` gone with the Ctrl-C) panicked the copy, exit
/// 101, and lost the file `--partial` was keeping (a defect hunt's find).
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

pub mod ahead;
pub mod control;
pub mod job;
pub mod local;
pub mod location;
pub mod partial;
pub mod peers;
pub mod plan;
pub mod resume;
pub mod retry;
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
    /// Reached something that will not be a server of ours: a name with
    /// no address, or a port that speaks another protocol. Not tried
    /// again: each retry met the same (7 s of warnings for a typo).
    #[error("connecting to {0}: {1}")]
    NotThere(String, String),
    /// Control connection failed.
    #[error("control connection to {0}: {1}")]
    Control(String, String),
    /// Login refused.
    #[error("login to {0} refused: {1}")]
    Login(String, String),
    /// The server refused a command (or, 426, broke off its transfer).
    #[error("{server}: {cmd} {}: {reply}", if *code == 426 { "failed" } else { "refused" })]
    Refused {
        /// Server.
        server: String,
        /// Command (password redacted).
        cmd: String,
        /// Reply text.
        reply: String,
        /// Reply code.
        code: u16,
        /// What our end of the transfer's data channel had seen when
        /// this reply came.
        here: DataEnd,
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
    /// Local file trouble (or data-channel trouble of our own making).
    #[error("{0}")]
    Local(String),
    /// The data channel failed ([`lightpath_engine::EngineError`]).
    #[error("data channel: {msg}")]
    Data {
        /// What failed.
        msg: String,
        /// Whether trying again may succeed (the network failed, not a
        /// disk or the protocol's rules).
        transient: bool,
    },
    /// Our end of the data channel failed by itself (a local disk, a source
    /// file, a peer that broke the rules), and the server's refusal (or a
    /// control connection without a reply) followed from it: the local
    /// cause comes first, since it is why the transfer failed.
    #[error("{local} (then {then})")]
    HereFailed {
        /// What our end saw.
        local: String,
        /// What the server said, or why it said nothing.
        then: Box<ClientError>,
    },
    /// A file of a tree this client sends changed (was written to,
    /// replaced or removed) while it was read: the tree is tried again,
    /// and the file left out of the try after a second change
    /// ([`crate::vfile::TreeHeld`]).
    #[error("{0}")]
    SourceChanged(String),
    /// A tree's sender could not read this file or directory (permission
    /// denied) and left it out; the rest of the tree was copied.
    #[error("not copied: {0}")]
    LeftOut(String),
    /// Data moved but the checksums differ (said as the source's and the
    /// copy's: "a != b" left the user to guess which was which).
    #[error("{alg} checksum mismatch: the source's is {local}, the copy's {remote}")]
    Checksum {
        /// Algorithm.
        alg: String,
        /// The source's.
        local: String,
        /// The copy's.
        remote: String,
    },
    /// A copy failed `--verify` (a [`ClientError::Checksum`] mismatch)
    /// and was dealt with so that it does not pose as a good copy:
    /// `outcome` says whether it was removed.
    #[error("{alg} checksum mismatch: the source's is {local}, the copy's {remote}; {outcome}")]
    VerifyFailed {
        /// Algorithm.
        alg: String,
        /// The source's digest.
        local: String,
        /// The copy's digest.
        remote: String,
        /// What became of the copy: removed, or why not.
        outcome: String,
    },
    /// A copy `--verify` could not check (a checksum refused or not
    /// computed): said so, with what became of it. Reported only as the
    /// refused `CKSM`, a download kept under its name, over the old file,
    /// read as not copied at all (a defect hunt's find).
    #[error("--verify {alg} could not check it: {why}; {outcome}")]
    NotVerified {
        /// Algorithm.
        alg: String,
        /// Why not.
        why: String,
        /// What became of the copy.
        outcome: String,
    },
}

/// Whether a reply's text names a cause that another try in seconds will
/// meet again: a full disk or quota, no permission, a read-only file
/// system. GCT answers such a write failure with its generic `500 Command
/// failed` and the system's message (`globus_xio: System error in write:
/// No space left on device`), and resets the data connections, which
/// alone would make the refusal look like a broken network (a defect hunt
/// saw a full disk tried three times over 7 s). The messages are the C
/// library's `strerror` texts, which GCT quotes as they are.
fn names_a_lasting_cause(reply: &str) -> bool {
    const LASTING: [&str; 5] = [
        "No space left on device",
        "Disk quota exceeded",
        "Permission denied",
        "Read-only file system",
        "File too large",
    ];
    LASTING.iter().any(|m| reply.contains(m))
}

/// What our end of a transfer's data channel had seen when the server's
/// refusal came ([`ClientError::Refused`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataEnd {
    /// Nothing wrong (or nothing known).
    Fine,
    /// The network failed under it: a reset, a stall, a peer gone (GCT
    /// answers such a failure with its generic 500).
    Broke,
    /// It failed by itself: a local disk or source file, or the peer broke
    /// the protocol's rules.
    Failed,
}

impl From<lightpath_engine::EngineError> for ClientError {
    fn from(e: lightpath_engine::EngineError) -> Self {
        ClientError::Data { msg: e.to_string(), transient: e.is_transient() }
    }
}

impl ClientError {
    /// Whether the same copy, tried again, may succeed (`cp --retries`):
    /// the server was unreachable or went away, a connection broke, or the
    /// server answered with a transient (4xx) refusal other than 451 and
    /// 452 (its own local error, such as a file that shrank, and no
    /// room). A refusal that came as our data channel broke is transient
    /// unless it blames the file (451, 452, 550-553); one that came as our
    /// end failed by itself (a disk, a source file) is final. Other
    /// refusals, bad logins, local trouble, checksum mismatches and bounds
    /// are final.
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Connect(..) | ClientError::Control(..) => true,
            ClientError::Refused { code, here, reply, .. } => {
                let blames_file = matches!(code, 451 | 452 | 550..=553) || names_a_lasting_cause(reply);
                match here {
                    DataEnd::Failed => false,
                    DataEnd::Broke => !blames_file,
                    DataEnd::Fine => !blames_file && (400..500).contains(code),
                }
            }
            ClientError::Data { transient, .. } => *transient,
            ClientError::SourceChanged(_) => true,
            _ => false,
        }
    }

    /// Whether a server turned this session away for want of room: a
    /// `421` greeting (GCT's `connections_max`, our `--max-sessions`,
    /// vsftpd's `max_clients`), which says nothing of the files.
    pub fn is_busy(&self) -> bool {
        matches!(self, ClientError::Refused { code: 421, cmd, .. } if cmd == "greeting")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16, reply: &str, here: DataEnd) -> ClientError {
        ClientError::Refused { server: "s".into(), cmd: "STOR /x".into(), reply: reply.into(), code, here }
    }

    /// GCT's answer to a full disk (a 500 with the system's message, the
    /// data connections reset) is final; its answer to a broken network
    /// (the same 500 without such a message) is tried again.
    #[test]
    fn a_full_disk_behind_a_generic_500_is_not_tried_again() {
        let full =
            "Command failed. : callback failed.\nglobus_xio: System error in write: No space left on device\nEnd.";
        assert!(!refused(500, full, DataEnd::Broke).is_transient());
        assert!(!refused(451, "x: Permission denied", DataEnd::Fine).is_transient());
        assert!(refused(500, "Command failed. : callback failed.", DataEnd::Broke).is_transient());
        assert!(refused(426, "Transfer aborted.", DataEnd::Broke).is_transient());
    }

    /// A 426 ends a transfer that began: it failed, it was not refused.
    #[test]
    fn a_transfer_broken_off_failed_rather_than_was_refused() {
        assert_eq!(refused(426, "broken", DataEnd::Broke).to_string(), "s: STOR /x failed: broken");
        assert_eq!(refused(550, "no such file", DataEnd::Fine).to_string(), "s: STOR /x refused: no such file");
    }
}

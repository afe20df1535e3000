//! Errors of the data mover.

use std::io;
use std::time::Duration;

/// Why a data transfer failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// An I/O error with what we were doing.
    #[error("{context}: {source}")]
    Io {
        /// What failed ("data connection 2", "writing file").
        context: String,
        /// The OS error.
        source: io::Error,
    },
    /// The peer broke the MODE E / MODE S rules.
    #[error("protocol error on data channel: {0}")]
    Protocol(String),
    /// Cancelled (ABOR, or the control connection went away).
    #[error("transfer aborted")]
    Aborted,
    /// No byte moved for too long.
    #[error("data channel idle for {0:?}")]
    Idle(Duration),
    /// No usable data connection setup (e.g. MODE E upload after PORT).
    #[error("{0}")]
    Setup(String),
}

impl EngineError {
    /// Wrap an I/O error with context.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        EngineError::Io { context: context.into(), source }
    }

    /// An error of a zero-copy send (`sendfile`, `splice`) on the
    /// connection that `context` names. Such a call fails for the file's
    /// sake too: when the file ended early (it shrank), the error is the
    /// source's ("reading source", a local error), not the connection's.
    pub fn sending(context: impl Into<String>, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::UnexpectedEof {
            return EngineError::io("reading source", source);
        }
        EngineError::io(context, source)
    }
}

/// Shorthand.
pub type Result<T> = std::result::Result<T, EngineError>;

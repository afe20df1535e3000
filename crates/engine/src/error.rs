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
    /// The peer closed a data connection before its EOD: it stopped (or
    /// was stopped) midway.
    #[error("peer closed a data connection before EOD")]
    PeerClosed,
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

    /// Whether trying again may succeed: the network failed (a reset, a
    /// timeout, a peer that went away midway, a stalled channel), not a
    /// disk, a file or the rules of the protocol.
    pub fn is_transient(&self) -> bool {
        use io::ErrorKind as K;
        match self {
            EngineError::Io { source, .. } => matches!(
                source.kind(),
                K::ConnectionReset
                    | K::ConnectionAborted
                    | K::ConnectionRefused
                    | K::BrokenPipe
                    | K::TimedOut
                    | K::NotConnected
                    | K::HostUnreachable
                    | K::NetworkUnreachable
                    | K::NetworkDown
            ),
            EngineError::PeerClosed | EngineError::Idle(_) => true,
            EngineError::Protocol(_) | EngineError::Aborted | EngineError::Setup(_) => false,
        }
    }

    /// Whether the source file changed while it was read: it shrank (a
    /// short read), or grew or was written to ([`crate::io::SourceChanged`]).
    /// The copy is not whole, but the file is there: reading it again may
    /// give a whole one, so a server says "try again" (`450`), not "failed".
    pub fn source_changed(&self) -> bool {
        match self {
            EngineError::Io { context, source } => {
                context == "reading source"
                    && (source.kind() == io::ErrorKind::UnexpectedEof
                        || source.get_ref().is_some_and(|e| e.is::<crate::io::SourceChanged>()))
            }
            _ => false,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_failures_are_transient_and_local_ones_are_not() {
        let io = |k: io::ErrorKind| EngineError::io("data connection 1", io::Error::from(k));
        assert!(io(io::ErrorKind::ConnectionReset).is_transient());
        assert!(io(io::ErrorKind::TimedOut).is_transient());
        assert!(EngineError::PeerClosed.is_transient());
        assert!(EngineError::Idle(Duration::from_secs(60)).is_transient());
        assert!(!io(io::ErrorKind::StorageFull).is_transient());
        assert!(
            !EngineError::sending("data connection 1", io::Error::from(io::ErrorKind::UnexpectedEof)).is_transient()
        );
        assert!(!EngineError::Protocol("overlapping block".into()).is_transient());
        // A source that shrank or was written to: the file's change, not
        // a disk's failure; a short read elsewhere is not one.
        let eof = || io::Error::from(io::ErrorKind::UnexpectedEof);
        assert!(EngineError::sending("data connection 1", eof()).source_changed());
        let rewritten = crate::io::SourceChanged("written to".into());
        assert!(EngineError::io("reading source", io::Error::other(rewritten)).source_changed());
        assert!(!EngineError::io("reading source", io::Error::from(io::ErrorKind::InvalidData)).source_changed());
        assert!(!EngineError::io("data connection 1", eof()).source_changed());
        assert!(!EngineError::Aborted.is_transient());
        // A tree's data that ran ahead of the manifest chunk a stalled
        // stream held: tried again; a tree that broke the rules is not.
        let tree = |e: crate::vfile::VfileError| EngineError::io("writing data", io::Error::from(e));
        assert!(tree(crate::vfile::VfileError::ParkLimit(512 << 20)).is_transient());
        let short = crate::vfile::VfileError::Incomplete { count: 1, path: "a".into(), got: 1, size: 2 };
        assert!(!tree(short).is_transient());
    }
}

//! What the server-PI asks of its driver: [`Output`]s, the [`Action`]s
//! among them, and the file-system requests ([`FsOp`]).

use super::{PassiveKind, Transfer};
use crate::reply::Reply;
use crate::vpath::VPath;
use std::net::SocketAddr;

/// File-system requests.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum FsOp {
    Size(VPath),
    Mdtm(VPath),
    Mlst(VPath),
    Stat(VPath),
    Cwd(VPath),
    Mkd(VPath),
    Rmd(VPath),
    Dele(VPath),
    /// RNFR: check that the name exists (not following a final symlink),
    /// answer 350 and call [`super::ServerPi::set_rename_from`], or answer 550.
    RenameFrom(VPath),
    Rename {
        from: VPath,
        to: VPath,
    },
    Cksm {
        alg: String,
        offset: u64,
        len: Option<u64>,
        path: VPath,
        /// Seconds between 113 status markers while it runs.
        markers: Option<u32>,
    },
    Chmod {
        mode: u32,
        path: VPath,
    },
    /// MFMT: seconds and nanoseconds since the epoch.
    Mfmt {
        mtime: (i64, u32),
        path: VPath,
    },
}

/// Work for the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Check credentials, then call [`super::ServerPi::handle_login`].
    Login {
        /// User name.
        user: String,
        /// Password (never log it).
        pass: String,
    },
    /// Open a listener and reply with its address.
    Passive(PassiveKind),
    /// Connect to these addresses for the next transfer (already answered).
    Active(Vec<SocketAddr>),
    /// Adopt the data connections opened ahead with this token as the
    /// cached MODE E channel; reply 200 or 425 (see [`crate::ahead`]).
    Adopt(crate::ahead::DconArgs),
    /// Run a data transfer; reply 150/125 ... 226.
    Transfer(Box<Transfer>),
    /// A file-system request; reply with its result.
    Fs(FsOp),
    /// ABOR with no transfer running (already answered).
    Abort,
}

/// What the driver must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send this reply.
    Reply(Reply),
    /// Perform this action.
    Action(Action),
    /// Close the control connection (after sending queued replies).
    Close,
}

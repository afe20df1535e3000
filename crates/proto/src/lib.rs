//! GridFTP wire protocol, sans-IO: no sockets, no clock. Control-channel
//! framing, commands, replies, FEAT, MODE E headers, restart and performance
//! markers, range sets, virtual paths, and the server protocol interpreter.
//!
//! Spec references: RFC 959 (FTP), RFC 2389 (FEAT/OPTS), RFC 2428
//! (EPRT/EPSV), RFC 3659 (SIZE/MDTM/MLST/REST STREAM), GFD.20 (GridFTP).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ahead;
pub mod command;
pub mod feat;
pub mod ftptime;
pub mod held;
pub mod hostport;
pub mod line;
pub mod manifest;
pub mod markers;
pub mod modee;
pub mod ranges;
pub mod reply;
pub mod server_pi;
pub mod unreadable;
pub mod vpath;

pub use command::{Command, CommandError, Restart};
pub use feat::Features;
pub use line::{Line, LineBuffer};
pub use markers::{PerfMarker, RestartMarker};
pub use modee::{BlockHeader, Descriptor};
pub use ranges::RangeSet;
pub use reply::{Reply, ReplyParser};
pub use server_pi::{
    Action, FsOp, Mode, Output, PassiveKind, PiConfig, ServerPi, Transfer, TransferKind, TransferSettings,
};
pub use vpath::VPath;

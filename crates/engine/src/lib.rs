//! The data mover: the one place where files and sockets meet.
//!
//! MODE E over parallel TCP connections (any stream carries any block),
//! MODE S, zero-copy sends from files (`sendfile`), the per-session data
//! channel with connection reuse, and checksums.

pub mod checksum;
pub mod datachan;
pub mod error;
pub mod io;
pub mod modee;
pub mod progress;
pub mod stream;
pub mod vfile;

pub use datachan::{DataChannel, Direction};
pub use error::{EngineError, Result};
pub use io::{BytesSource, FileSink, FileSource, MemorySink, NullSink, Sink, Source, ZeroSource};
pub use modee::{RecvOpts, SendPlan};
pub use progress::Control;

/// Default MODE E block size (GCT uses 256 KiB; larger blocks cost nothing
/// with zero-copy sends and halve the header work).
pub const DEFAULT_BLOCK: u64 = 1 << 20;

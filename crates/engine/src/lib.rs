//! The data mover: the one place where files and sockets meet.
//!
//! MODE E over parallel TCP connections (any stream carries any block),
//! MODE S, zero-copy sends from files (`sendfile`), the per-session data
//! channel with connection reuse, and checksums.
#![forbid(unsafe_code)]

pub mod checksum;
pub mod datachan;
pub mod dio;
pub mod error;
pub mod io;
pub mod iothreads;
pub mod modee;
pub mod pool;
pub mod ports;
pub mod progress;
pub mod stream;
pub mod vfile;
pub mod vfile_chan;

pub use datachan::{congestion_choice, DataChannel, Direction, DEFAULT_CONGESTION};
pub use error::{EngineError, Result};
pub use io::{BytesSource, DataPath, FileSink, FileSource, MemorySink, NullSink, Sink, Source, ZeroSource};
pub use modee::{Growth, RecvOpts, SendPlan};
pub use progress::Control;

/// Largest single write to a file when receiving. Measured on this VM's
/// ext4 (2 GiB, sequential pwrite): 256 KiB pieces 0.45 s, 1 MiB pieces
/// 1.1-2.2 s; receiving in 1 MiB pieces made file-to-file copies 4x slower.
pub const WRITE_CHUNK: usize = 256 << 10;

/// Default MODE E block size: 256 KiB, as GCT. Receivers write a block in
/// one piece, and 1 MiB writes are slow on ext4 here (see WRITE_CHUNK):
/// globus-url-copy took 5.7 s for 2 GiB from us with 1 MiB blocks.
pub const DEFAULT_BLOCK: u64 = 256 << 10;

/// The largest block a lightpath receiver asks its sender for (`OPTS RETR
/// BlockSize=`): a lightpath sender grows its blocks to it while much is
/// left ([`Growth`]); GCT takes the option and keeps 256 KiB. The receiver
/// still writes 256 KiB pieces ([`WRITE_CHUNK`]).
pub const GROWN_BLOCK: u64 = 1 << 20;

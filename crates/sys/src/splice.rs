//! Zero copy through a pipe with `splice(2)`: socket -> file (the receive
//! side, which `sendfile` cannot do) and file -> socket.
//!
//! A [`Pipe`] belongs to one thread at a time (it is `Send`, not `Sync`):
//! the bytes in flight sit in it between the two halves of a move.

use std::cell::Cell;
use std::fs::File;
use std::io;
use std::net::TcpStream;
use std::os::fd::{AsFd, OwnedFd};

use rustix::io::Errno;
use rustix::pipe::SpliceFlags;

/// Pipe size asked for by [`Pipe::new`] (the default `pipe-max-size`):
/// 256 slots, so a socket full of MTU-sized segments still moves ~370 KB per
/// call.
pub const DEFAULT_PIPE: usize = 1 << 20;

/// A pipe reused for many splices. After an error in the middle of a move
/// it may hold bytes and is "poisoned": further moves fail; make a new one.
#[derive(Debug)]
pub struct Pipe {
    rx: OwnedFd,
    tx: OwnedFd,
    size: usize,
    poisoned: Cell<bool>,
}

impl Pipe {
    /// A pipe of [`DEFAULT_PIPE`] bytes, or as large as the kernel allows.
    pub fn new() -> io::Result<Pipe> {
        Pipe::with_size(DEFAULT_PIPE)
    }

    /// A pipe of `size` bytes if the kernel allows it (`F_SETPIPE_SZ`),
    /// otherwise of the kernel's default size.
    pub fn with_size(size: usize) -> io::Result<Pipe> {
        let (rx, tx) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let size = match rustix::pipe::fcntl_setpipe_size(&tx, size) {
            Ok(n) => n,
            Err(_) => rustix::pipe::fcntl_getpipe_size(&tx)?,
        };
        Ok(Pipe { rx, tx, size, poisoned: Cell::new(false) })
    }

    /// The pipe's capacity in bytes: the most one socket splice moves.
    pub fn capacity(&self) -> usize {
        self.size
    }

    fn check(&self) -> io::Result<()> {
        if self.poisoned.get() {
            return Err(io::Error::other("pipe holds bytes from a failed splice; use a new pipe"));
        }
        Ok(())
    }

    /// Move exactly `n` bytes from the pipe to `out` (at `*off` if given).
    /// Any failure poisons the pipe (bytes may be left in it).
    fn drain_to(&self, out: &impl AsFd, mut off: Option<&mut u64>, n: usize, more: bool) -> io::Result<()> {
        let mut left = n;
        let flags = if more { SpliceFlags::MOVE | SpliceFlags::MORE } else { SpliceFlags::MOVE };
        while left > 0 {
            match rustix::pipe::splice(&self.rx, None, out, off.as_deref_mut(), left, flags) {
                Ok(0) => {
                    self.poisoned.set(true);
                    return Err(io::Error::new(io::ErrorKind::WriteZero, "splice out of the pipe moved nothing"));
                }
                Ok(k) => left -= k,
                Err(Errno::INTR) => {}
                Err(e) => {
                    self.poisoned.set(true);
                    return Err(match e {
                        Errno::AGAIN => io::Error::new(io::ErrorKind::TimedOut, "send timed out"),
                        e => e.into(),
                    });
                }
            }
        }
        Ok(())
    }
}

impl Pipe {
    /// Move up to `len` bytes from a non-blocking socket into the pipe
    /// without waiting on either side: `Ok(0)` when the peer closed,
    /// `WouldBlock` when the socket has nothing or the pipe no free slot.
    /// For the receive path of an event loop, which queues the pipe to a
    /// disk thread that then calls [`Pipe::drain_to_file`].
    pub fn fill_from(&self, sock: &impl AsFd, len: usize) -> io::Result<usize> {
        self.check()?;
        let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
        loop {
            match rustix::pipe::splice(sock, None, &self.tx, None, len, flags) {
                Ok(n) => return Ok(n),
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => return Err(io::ErrorKind::WouldBlock.into()),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Move exactly `n` bytes, all put in by [`Pipe::fill_from`], into
    /// `file` at `offset`. On failure the pipe is poisoned: drop it.
    pub fn drain_to_file(&self, file: &File, offset: u64, n: usize) -> io::Result<()> {
        self.check()?;
        let mut off = offset;
        self.drain_to(file, Some(&mut off), n, false)
    }
}

/// Move up to `len` bytes from `sock` into `file` at `offset` (socket ->
/// pipe -> file), with the semantics of one `read` on a blocking socket
/// with a read timeout: `Ok(n)` with `n > 0` bytes written to the file
/// (all of what was taken from the socket), `Ok(0)` when the peer closed
/// (or `len` is 0), `Err` of kind `WouldBlock` when the timeout passed with
/// nothing received, `Interrupted` on a signal. Call it in a loop, as
/// `read`.
pub fn splice_to_file(sock: &TcpStream, pipe: &Pipe, file: &File, offset: u64, len: u64) -> io::Result<usize> {
    pipe.check()?;
    let want = len.min(pipe.size as u64) as usize;
    if want == 0 {
        return Ok(0);
    }
    let n = match rustix::pipe::splice(sock, None, &pipe.tx, None, want, SpliceFlags::MOVE) {
        Ok(n) => n,
        Err(Errno::AGAIN) => return Err(io::ErrorKind::WouldBlock.into()),
        Err(e) => return Err(e.into()),
    };
    let mut off = offset;
    pipe.drain_to(file, Some(&mut off), n, false)?;
    Ok(n)
}

/// Move exactly `len` bytes from `sock` into `file` at `offset`, like
/// `read_exact`: a timeout is an error of kind `WouldBlock` (bytes moved
/// before it are in the file), a close before `len` is `UnexpectedEof`.
pub fn splice_to_file_exact(sock: &TcpStream, pipe: &Pipe, file: &File, offset: u64, len: u64) -> io::Result<()> {
    let mut done = 0u64;
    while done < len {
        match splice_to_file(sock, pipe, file, offset + done, len - done) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed the connection")),
            Ok(n) => done += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Send `len` bytes of `file` from `offset` to `sock` through `pipe` (the
/// `splice` equivalent of [`crate::net::sendfile_all`]). A send timeout is
/// `TimedOut` and poisons the pipe; a file shorter than asked is
/// `UnexpectedEof`.
pub fn splice_from_file(file: &File, pipe: &Pipe, sock: &TcpStream, offset: u64, len: u64) -> io::Result<()> {
    pipe.check()?;
    let end = offset.checked_add(len).ok_or(io::ErrorKind::InvalidInput)?;
    let mut off = offset;
    while off < end {
        let want = (end - off).min(pipe.size as u64) as usize;
        let n = match rustix::pipe::splice(file, Some(&mut off), &pipe.tx, None, want, SpliceFlags::MOVE) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while being sent")),
            Ok(n) => n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        pipe.drain_to(sock, None, n, off < end)?;
    }
    Ok(())
}

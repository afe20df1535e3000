//! MODE S (RFC 959 stream mode): one connection, end of file = close.

use crate::error::{EngineError, Result};
use crate::io::{Sink, Source};
use crate::progress::Control;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// Send `[start, end)` of `src`, then close the connection.
///
/// In MODE S the end of the file is the close, so a send that fails
/// (the source shrank or could not be read, ABOR) resets the connection
/// instead: a receiver must not take a truncated file for a whole one.
/// A receiver that takes nothing for `idle` fails the send.
pub fn send(
    mut conn: TcpStream,
    src: &dyn Source,
    (start, end): (u64, u64),
    idle: Duration,
    ctl: &Control,
) -> Result<u64> {
    let r = send_range(&mut conn, src, (start, end), idle, ctl);
    if r.is_err() {
        // Failing to set the option leaves the ordinary close: nothing
        // more can be done, and the control reply still says what failed.
        let _ = lightpath_sys::net::reset_on_close(&conn);
    }
    r
}

/// How long one send may block before ABOR and idleness are looked at.
const SEND_TICK: Duration = Duration::from_millis(100);

/// The sending loop. A send blocks at most [`SEND_TICK`], so an ABOR
/// (or a lost control connection) is seen within it, and only a receiver
/// that takes nothing for `idle` fails the send. A send blocked for the
/// whole write timeout (120 s), which every trickle a receiver took
/// started again, held an aborted session and its slot for minutes (a
/// defect hunt).
fn send_range(
    conn: &mut TcpStream,
    src: &dyn Source,
    (start, end): (u64, u64),
    idle: Duration,
    ctl: &Control,
) -> Result<u64> {
    let ctx = |e| EngineError::io("data connection", e);
    conn.set_write_timeout(Some(SEND_TICK)).map_err(ctx)?;
    let (mut pos, mut last) = (start, Instant::now());
    let mut chunk = Chunk { data: vec![0u8; 1 << 20], at: start, len: 0 };
    while pos < end {
        if ctl.is_cancelled() {
            return Err(EngineError::Aborted);
        }
        let want = (end - pos).min(chunk.data.len() as u64) as usize;
        match send_some(conn, src, &mut chunk, pos, want)? {
            Some(n) => {
                ctl.add(n as u64);
                (pos, last) = (pos + n as u64, Instant::now());
            }
            None if last.elapsed() > idle => return Err(EngineError::Idle(idle)),
            None => {}
        }
    }
    // The close ends the data: a source that changed meanwhile fails the
    // send first (the connection is then reset, not closed).
    src.unchanged().map_err(|e| EngineError::io("reading source", e))?;
    conn.flush().map_err(ctx)?;
    conn.shutdown(Shutdown::Write).map_err(ctx)?;
    Ok(pos - start)
}

/// One send of up to `want` bytes at `pos`: `sendfile` from a file, else
/// from `chunk` (read from `src` when it does not hold `pos`). `None`:
/// the receiver took nothing within [`SEND_TICK`].
fn send_some(conn: &TcpStream, src: &dyn Source, chunk: &mut Chunk, pos: u64, want: usize) -> Result<Option<usize>> {
    let sent = match src.file() {
        Some(f) => lightpath_sys::net::sendfile_some(conn, f, pos, want),
        None => (&*conn).write(chunk.holding(src, pos, want)?),
    };
    match sent {
        Ok(0) => Err(EngineError::sending(
            "data connection",
            std::io::Error::new(ErrorKind::UnexpectedEof, "file shrank while being sent"),
        )),
        Ok(n) => Ok(Some(n)),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => Ok(None),
        Err(e) => Err(EngineError::sending("data connection", e)),
    }
}

/// Bytes of a source that is not a file, read for sending: `len` bytes
/// from offset `at`.
struct Chunk {
    data: Vec<u8>,
    at: u64,
    len: usize,
}

impl Chunk {
    /// The bytes from `pos` on, read first (`want` of them) unless held.
    fn holding(&mut self, src: &dyn Source, pos: u64, want: usize) -> Result<&[u8]> {
        if !(self.at <= pos && pos < self.at + self.len as u64) {
            let b = &mut self.data[..want];
            src.read_exact_at(b, pos).map_err(|e| EngineError::io("reading source", e))?;
            (self.at, self.len) = (pos, want);
        }
        Ok(&self.data[(pos - self.at) as usize..self.len])
    }
}

/// Receive until the peer closes, writing from `base` on. At most `max`
/// bytes are accepted.
pub fn recv(mut conn: TcpStream, sink: &dyn Sink, base: u64, max: u64, idle: Duration, ctl: &Control) -> Result<u64> {
    conn.set_read_timeout(Some(Duration::from_millis(100))).map_err(|e| EngineError::io("data connection", e))?;
    let mut buf = vec![0u8; crate::WRITE_CHUNK];
    let mut got = 0u64;
    let mut last = Instant::now();
    loop {
        if ctl.is_cancelled() {
            return Err(EngineError::Aborted);
        }
        match conn.read(&mut buf) {
            Ok(0) => return Ok(got),
            Ok(k) => {
                if got + k as u64 > max {
                    return Err(EngineError::Protocol("more data than allowed".into()));
                }
                sink.write_all_at(&buf[..k], base + got).map_err(|e| EngineError::io("writing data", e))?;
                ctl.add_written(got, got + k as u64);
                got += k as u64;
                last = Instant::now();
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                if last.elapsed() > idle {
                    return Err(EngineError::Idle(idle));
                }
            }
            Err(e) => return Err(EngineError::io("data connection", e)),
        }
    }
}

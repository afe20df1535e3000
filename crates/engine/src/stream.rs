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
pub fn send(mut conn: TcpStream, src: &dyn Source, start: u64, end: u64, ctl: &Control) -> Result<u64> {
    let r = send_range(&mut conn, src, start, end, ctl);
    if r.is_err() {
        // Failing to set the option leaves the ordinary close: nothing
        // more can be done, and the control reply still says what failed.
        let _ = lightpath_sys::net::reset_on_close(&conn);
    }
    r
}

fn send_range(conn: &mut TcpStream, src: &dyn Source, start: u64, end: u64, ctl: &Control) -> Result<u64> {
    let ctx = |e| EngineError::io("data connection", e);
    let mut pos = start;
    let mut buf = vec![0u8; 1 << 20];
    while pos < end {
        if ctl.is_cancelled() {
            return Err(EngineError::Aborted);
        }
        let len = (end - pos).min(buf.len() as u64);
        if let Some(f) = src.file() {
            lightpath_sys::net::sendfile_all(conn, f, pos, len)
                .map_err(|e| EngineError::sending("data connection", e))?;
        } else {
            let b = &mut buf[..len as usize];
            src.read_exact_at(b, pos).map_err(|e| EngineError::io("reading source", e))?;
            conn.write_all(b).map_err(ctx)?;
        }
        ctl.add(len);
        pos += len;
    }
    // The close ends the data: a source that changed meanwhile fails the
    // send first (the connection is then reset, not closed).
    src.unchanged().map_err(|e| EngineError::io("reading source", e))?;
    conn.flush().map_err(ctx)?;
    conn.shutdown(Shutdown::Write).map_err(ctx)?;
    Ok(pos - start)
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

//! Disk space reserved for uploads that announced their size (ALLO).
//!
//! A STOR after ALLO `fallocate`s its whole size before any byte arrives:
//! a full disk fails at once, and the file is laid out in one piece. But
//! the client may then send nothing (or an empty MODE E block now and
//! then, which keeps the transfer from going idle) and hold that space for
//! as long as it likes, from as many sessions as it may open.
//!
//! So reservations are bounded, per file system and across the whole
//! server: all the ALLO reservations together never take more than half of
//! the space that would be available without them, and each one ends with
//! its transfer (the file is then published, or removed). Half, because
//! it needs no setting and leaves uploads without ALLO, other sessions and
//! the rest of the host at least as much as the reservations hold. An
//! upload that gets no reservation still runs: ALLO is advisory (RFC 959
//! 4.1.3: a server that needs no reservation treats it as NOOP), its file
//! gets the announced size without blocks (the writes then never extend
//! it), and the size is still checked at the end. An ALLO beyond all the
//! space available is refused before the transfer starts (552, "exceeded
//! storage allocation").

use lightpath_sys::root::TempFile;
use std::collections::HashMap;
use std::io;
use std::sync::Mutex;

/// Bytes reserved by ALLO, per file system (`st_dev`), in this process.
static HELD: Mutex<Option<HashMap<u64, u64>>> = Mutex::new(None);

/// Space held for one upload until dropped.
#[derive(Debug)]
pub struct Reservation {
    dev: u64,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_or_insert_with(HashMap::new).get_mut(&self.dev) {
            *n = n.saturating_sub(self.bytes);
        }
    }
}

/// What an ALLO of `n` bytes gets.
#[derive(Debug)]
pub enum Grant {
    /// Reserve them (the reservation is counted until dropped).
    Held(Reservation),
    /// Do not reserve: the other reservations hold enough.
    Unreserved,
    /// More than all the space available.
    TooBig,
}

/// Whether `n` more bytes may be reserved where `avail` bytes are
/// available now and `held` are reserved already (and no longer counted in
/// `avail`): all reservations together stay within half of `avail + held`.
pub fn may_reserve(avail: u64, held: u64, n: u64) -> bool {
    n <= avail.saturating_sub(held) / 2
}

/// Ask for `n` bytes on the file system `dev`, where `avail` are available.
pub fn ask(dev: u64, avail: u64, n: u64) -> Grant {
    if n > avail {
        return Grant::TooBig;
    }
    let mut map = HELD.lock().unwrap_or_else(|e| e.into_inner());
    let held = map.get_or_insert_with(HashMap::new).entry(dev).or_insert(0);
    if !may_reserve(avail, *held, n) {
        return Grant::Unreserved;
    }
    *held += n;
    Grant::Held(Reservation { dev, bytes: n })
}

/// Give the new upload `tmp` its announced size `n`: reserved when
/// [`ask`] allows it, else without blocks. `StorageFull` when `n` is more
/// than the space available.
pub fn size_upload(tmp: &TempFile, n: u64) -> io::Result<Option<Reservation>> {
    if n == 0 {
        return Ok(None);
    }
    let (dev, avail) = tmp.space()?;
    match ask(dev, avail, n) {
        Grant::Held(r) => {
            lightpath_sys::file::preallocate_sized(tmp.file(), n)?;
            Ok(Some(r))
        }
        Grant::Unreserved => {
            tracing::info!(n, avail, "ALLO: not reserved (reservations hold half the free space)");
            tmp.file().set_len(n)?;
            Ok(None)
        }
        Grant::TooBig => Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!("No space left on device (ALLO {n}, {avail} bytes available)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_hold_at_most_half_of_the_free_space() {
        let dev = u64::MAX - 7; // no real file system
        assert!(matches!(ask(dev, 100, 101), Grant::TooBig));
        assert!(matches!(ask(dev, 100, 51), Grant::Unreserved));
        let a = match ask(dev, 100, 30) {
            Grant::Held(r) => r,
            other => panic!("{other:?}"),
        };
        // 30 are fallocated: 70 left, of which 20 more may be reserved.
        assert!(matches!(ask(dev, 70, 21), Grant::Unreserved));
        let b = match ask(dev, 70, 20) {
            Grant::Held(r) => r,
            other => panic!("{other:?}"),
        };
        assert!(matches!(ask(dev, 50, 1), Grant::Unreserved), "half is held");
        assert!(matches!(ask(dev + 1, 50, 25), Grant::Held(_)), "other file systems are apart");
        drop((a, b));
        assert!(matches!(ask(dev, 100, 50), Grant::Held(_)), "released with their transfers");
    }
}

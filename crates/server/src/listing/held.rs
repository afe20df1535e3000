//! What listings may hold of the server's memory. A listing (MLSD, LIST,
//! NLST) is built whole before its data leaves (its length goes first
//! into MODE E's offsets), and stays held until the client has read it: a
//! security hunt had 30 anonymous sessions list a 300 000-entry directory
//! without reading, and the server grew to 3.3 GB. So listings are built
//! a few at a time ([`build_slot`]: the entries' status, about 200 bytes
//! each, is held while a listing is built; a turn is waited for at most
//! [`SLOT_WAIT`], so listings stuck on a hung file system do not stop
//! every other), and the large listings held together are limited
//! ([`MAX_HELD`]); past it a large listing is refused as a busy server's,
//! to be asked for again. Listings under [`SMALL`] always go: one client
//! holding a huge listing unread refused every other listing (a review's
//! find).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

/// Bytes of built listings held at once, beyond the first.
pub const MAX_HELD: usize = 256 << 20;

/// A listing this small is never refused for what others hold.
pub const SMALL: usize = 1 << 20;

/// Longest wait for a turn to build a listing.
pub const SLOT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Bytes of the listings built and not yet dropped.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Listings being built at once, and the wait for a turn.
static BUILDING: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// A turn to build a listing; the next waiting one goes on when it drops.
pub struct BuildSlot(());

/// Wait for a turn to build a listing, one per CPU at once: `None` if
/// none came within `wait`.
pub fn build_slot(wait: std::time::Duration) -> Option<BuildSlot> {
    let most = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (lock, turn) = &BUILDING;
    let until = std::time::Instant::now() + wait;
    let mut now = lock.lock().unwrap_or_else(|e| e.into_inner());
    while *now >= most {
        let left = until.checked_duration_since(std::time::Instant::now()).filter(|d| !d.is_zero())?;
        now = turn.wait_timeout(now, left).unwrap_or_else(|e| e.into_inner()).0;
    }
    *now += 1;
    Some(BuildSlot(()))
}

impl Drop for BuildSlot {
    fn drop(&mut self) {
        let (lock, turn) = &BUILDING;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        turn.notify_one();
    }
}

/// A built listing's bytes, counted in [`HELD`] while it lives.
#[derive(Debug)]
pub struct Held {
    bytes: Vec<u8>,
    all: &'static AtomicUsize,
}

impl Held {
    /// Hold `bytes`, unless the listings held already take [`MAX_HELD`]:
    /// then how much they hold. A listing held alone is always taken,
    /// however large, and one under [`SMALL`] whatever others hold.
    pub fn take(bytes: Vec<u8>) -> Result<Held, usize> {
        Held::take_in(bytes, &HELD, MAX_HELD)
    }

    fn take_in(bytes: Vec<u8>, all: &'static AtomicUsize, most: usize) -> Result<Held, usize> {
        let before = all.fetch_add(bytes.len(), Ordering::Relaxed);
        if before > 0 && bytes.len() >= SMALL.min(most) && before + bytes.len() > most {
            all.fetch_sub(bytes.len(), Ordering::Relaxed);
            return Err(before);
        }
        Ok(Held { bytes, all })
    }

    /// The listing.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.all.fetch_sub(self.bytes.len(), Ordering::Relaxed);
    }
}

impl lightpath_engine::Source for Held {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| std::io::ErrorKind::UnexpectedEof)?;
        let end = start.checked_add(buf.len()).ok_or(std::io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(self.bytes.get(start..end).ok_or(std::io::ErrorKind::UnexpectedEof)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_held_together_are_limited_and_given_back() {
        static ALL: AtomicUsize = AtomicUsize::new(0);
        let most = 3 * SMALL;
        let alone = Held::take_in(vec![0; 4 * SMALL], &ALL, most).expect("a listing held alone is taken");
        assert_eq!(Held::take_in(vec![0; SMALL], &ALL, most).unwrap_err(), 4 * SMALL);
        let small = Held::take_in(vec![0; SMALL - 1], &ALL, most).expect("a small one goes whatever is held");
        drop((alone, small));
        let a = Held::take_in(vec![0; 2 * SMALL], &ALL, most).unwrap();
        let b = Held::take_in(vec![0; SMALL], &ALL, most).unwrap();
        assert_eq!(Held::take_in(vec![0; SMALL], &ALL, most).unwrap_err(), 3 * SMALL);
        assert_eq!(ALL.load(Ordering::Relaxed), 3 * SMALL, "a refused one is not counted");
        drop((a, b));
        assert_eq!(ALL.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn builds_wait_for_a_turn() {
        let most = std::thread::available_parallelism().map_or(1, |n| n.get());
        let long = std::time::Duration::from_secs(30);
        let slots: Vec<BuildSlot> = (0..most).map(|_| build_slot(long).unwrap()).collect();
        assert!(build_slot(std::time::Duration::from_millis(50)).is_none(), "a bounded wait gives up");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(build_slot(long).is_some()).unwrap());
        assert!(rx.recv_timeout(std::time::Duration::from_millis(200)).is_err(), "no turn while all are taken");
        drop(slots);
        assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(10)), Ok(true), "a turn once one is given back");
    }
}

//! What listings may hold of the server's memory. A listing (MLSD, LIST,
//! NLST) is built whole before its data leaves (its length goes first
//! into MODE E's offsets), and stays held until the client has read it: a
//! security hunt had 30 anonymous sessions list a 300 000-entry directory
//! without reading, and the server grew to 3.3 GB. So listings are built
//! a few at a time ([`build_slot`]: the entries' status, about 200 bytes
//! each, is held while a listing is built), and those held together are
//! limited ([`MAX_HELD`]); past it a listing is refused as a busy
//! server's, to be asked for again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

/// Bytes of built listings held at once, beyond the first.
pub const MAX_HELD: usize = 256 << 20;

/// Bytes of the listings built and not yet dropped.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Listings being built at once, and the wait for a turn.
static BUILDING: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// A turn to build a listing; the next waiting one goes on when it drops.
pub struct BuildSlot(());

/// Wait for a turn to build a listing: one per CPU at once.
pub fn build_slot() -> BuildSlot {
    let most = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (lock, turn) = &BUILDING;
    let mut now = lock.lock().unwrap_or_else(|e| e.into_inner());
    while *now >= most {
        now = turn.wait(now).unwrap_or_else(|e| e.into_inner());
    }
    *now += 1;
    BuildSlot(())
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
    /// however large.
    pub fn take(bytes: Vec<u8>) -> Result<Held, usize> {
        Held::take_in(bytes, &HELD, MAX_HELD)
    }

    fn take_in(bytes: Vec<u8>, all: &'static AtomicUsize, most: usize) -> Result<Held, usize> {
        let before = all.fetch_add(bytes.len(), Ordering::Relaxed);
        if before > 0 && before + bytes.len() > most {
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
        let alone = Held::take_in(vec![0; 300], &ALL, 100).expect("a listing held alone is taken");
        assert_eq!(Held::take_in(vec![0; 1], &ALL, 100).unwrap_err(), 300);
        drop(alone);
        let a = Held::take_in(vec![0; 60], &ALL, 100).unwrap();
        let b = Held::take_in(vec![0; 40], &ALL, 100).unwrap();
        assert_eq!(Held::take_in(vec![0; 1], &ALL, 100).unwrap_err(), 100);
        assert_eq!(ALL.load(Ordering::Relaxed), 100, "a refused one is not counted");
        drop((a, b));
        assert_eq!(ALL.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn builds_wait_for_a_turn() {
        let most = std::thread::available_parallelism().map_or(1, |n| n.get());
        let slots: Vec<BuildSlot> = (0..most).map(|_| build_slot()).collect();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(build_slot()).unwrap());
        assert!(rx.recv_timeout(std::time::Duration::from_millis(200)).is_err(), "no turn while all are taken");
        drop(slots);
        assert!(rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok(), "a turn once one is given back");
    }
}

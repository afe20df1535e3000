//! Copies of received blocks for the writer threads, in buffers used again.
//!
//! A block whose files are small is copied for the writers (the network
//! side's buffer goes back at once). Copied into fresh heap memory, every
//! copy faulted in and cleared new pages: `perf` on a 5000-file download
//! over the 95 ms lab put ~9 % of the client's samples in that copy and its
//! page faults. A copy now takes a buffer that an earlier one gave back.

use std::ops::Deref;
use std::sync::{Arc, Mutex};

/// Buffers kept for reuse by one unpacker: at most this many, of at most
/// [`KEEP_BYTES`] each (received pieces are at most 256 KiB: 16 MiB).
const KEEP: usize = 64;

/// Larger buffers (from a sink fed bigger writes) are freed, not kept.
const KEEP_BYTES: usize = 1 << 20;

/// The free buffers of one unpacker.
#[derive(Debug, Default)]
pub(crate) struct Spares(Mutex<Vec<Vec<u8>>>);

impl Spares {
    /// `data` copied into a spare buffer (or a new one).
    pub(crate) fn copy(self: &Arc<Self>, data: &[u8]) -> Chunk {
        let mut buf = self.lock().pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(data);
        Chunk { buf, home: Some(self.clone()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Buffers waiting for reuse.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// Bytes of a received block; the buffer goes back to its [`Spares`] when
/// the last piece that shares it is written.
#[derive(Debug)]
pub(crate) struct Chunk {
    buf: Vec<u8>,
    home: Option<Arc<Spares>>,
}

impl Chunk {
    /// No bytes (an empty file's piece).
    pub(crate) fn empty() -> Chunk {
        Chunk { buf: Vec::new(), home: None }
    }
}

impl Deref for Chunk {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        let Some(home) = &self.home else { return };
        let mut free = home.lock();
        if free.len() < KEEP && (1..=KEEP_BYTES).contains(&self.buf.capacity()) {
            free.push(std::mem::take(&mut self.buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_holds_its_bytes_and_its_buffer_is_used_again() {
        let spares = Arc::new(Spares::default());
        let a = spares.copy(&[7; 1000]);
        assert_eq!(&a[..], &[7; 1000][..]);
        let ptr = a.as_ptr();
        drop(a);
        assert_eq!(spares.len(), 1);
        let b = spares.copy(&[9; 10]);
        assert_eq!((&b[..], b.as_ptr()), (&[9; 10][..], ptr), "the same buffer, holding only the new bytes");
        assert_eq!(spares.len(), 0);
        let many: Vec<Chunk> = (0..KEEP + 5).map(|_| spares.copy(&[1; 64])).collect();
        drop(many);
        assert_eq!(spares.len(), KEEP, "at most KEEP are kept");
        let spares = Arc::new(Spares::default());
        drop(spares.copy(&vec![0; KEEP_BYTES + 1]));
        assert_eq!(spares.len(), 0, "a buffer over KEEP_BYTES is freed");
        assert!(Chunk::empty().is_empty());
    }
}

//! The workers of a file-by-file copy, as a server sees them: a server
//! that limits sessions (GCT's `connections_max`, our `--max-sessions`)
//! answers the ones past its limit with a `421` greeting. That says
//! nothing of the files: while other workers hold sessions, a worker
//! turned away hands its files back to them and asks again later, and
//! the copy goes on with the sessions the server took. Only when no
//! worker holds one does the refusal count as a failed try.

use super::Queue;
use crate::retry::{self, Task};
use crate::ClientError;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Workers holding sessions, and whether a refusal was reported.
#[derive(Debug, Default)]
pub(super) struct Crew {
    live: AtomicUsize,
    said: AtomicBool,
}

impl Crew {
    /// A crew of which `live` workers start with sessions.
    pub(super) fn new(live: usize) -> Crew {
        Crew { live: AtomicUsize::new(live), said: AtomicBool::new(false) }
    }

    /// A worker's sessions came (`true`) or went.
    pub(super) fn holds(&self, now: bool, counted: &mut bool) {
        match (now, *counted) {
            (true, false) => self.live.fetch_add(1, Ordering::Relaxed),
            (false, true) => self.live.fetch_sub(1, Ordering::Relaxed),
            _ => return,
        };
        *counted = now;
    }

    /// Whether `e`, met opening the sessions for fresh files (never
    /// tried, nothing kept from an earlier run: handed back, they lose
    /// nothing), is a server's refusal of more sessions while other
    /// workers hold some: then the files go back to them. Said once per
    /// copy.
    pub(super) fn turned_away(&self, e: &ClientError, batch: &[Task]) -> bool {
        let live = self.live.load(Ordering::Relaxed);
        let fresh = batch.iter().all(|t| t.tries == 0 && t.resume.is_empty());
        if !e.is_busy() || live == 0 || !fresh {
            return false;
        }
        if !self.said.swap(true, Ordering::Relaxed) {
            tracing::warn!("{e}; going on with the sessions it took");
        } else {
            tracing::debug!("{e}; files handed back");
        }
        true
    }
}

/// Put `batch` (fresh files) back at the front of the queue.
pub(super) fn give_back(q: &Queue, batch: Vec<Task>) {
    let mut q = q.lock().unwrap_or_else(|e| e.into_inner());
    for item in batch.into_iter().rev().map(|t| t.item) {
        q.push_front(item);
    }
}

/// Wait before asking a server that turned a session away again: the
/// `n`th time, as long as a retry's `n`th pause ([`retry::wait_after`]),
/// but no longer than files are queued (the copy may be ending).
pub(super) async fn wait_turned_away(q: &Queue, n: u32, cancel: &AtomicBool) {
    retry::pause_unless(retry::wait_after(n), cancel, || queue_empty(q)).await;
}

fn queue_empty(q: &Queue) -> bool {
    q.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
}

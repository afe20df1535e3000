//! The workers of a file-by-file copy, as a server sees them: a server
//! that limits sessions (GCT's `connections_max`, our `--max-sessions`)
//! answers the ones past its limit with a `421` greeting. That says
//! nothing of the files: while other workers hold sessions, a worker
//! turned away hands its files back to them and asks again later, and
//! the copy goes on with the sessions the server took. Only when no
//! worker holds one does the refusal count as a failed try. So that
//! files handed back find a session, a worker that holds one and finds
//! the queue empty stays while other workers' batches are out
//! ([`Crew::wait_for_more`]).

use super::{Item, Queue};
use crate::retry::{self, Task};
use crate::ClientError;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Workers holding sessions, batches out, and whether a refusal was
/// reported.
#[derive(Debug, Default)]
pub(super) struct Crew {
    live: AtomicUsize,
    said: AtomicBool,
    /// Batches taken from the queue and not yet settled or handed back.
    out: AtomicUsize,
    /// Told when a batch is settled or handed back.
    settled: tokio::sync::Notify,
    /// The server could not be reached through a file's every retry: the
    /// files after it fail with the same error, untried.
    unreachable: std::sync::Mutex<Option<ClientError>>,
}

impl Crew {
    /// A crew of which `live` workers start with sessions.
    pub(super) fn new(live: usize) -> Crew {
        Crew { live: AtomicUsize::new(live), ..Crew::default() }
    }

    /// A worker took a batch (under the queue's lock): out until the
    /// guard is dropped (settled or handed back; also if the worker
    /// panics, so no other waits on it).
    fn took(&self) -> BatchOut<'_> {
        self.out.fetch_add(1, Ordering::Relaxed);
        BatchOut(self)
    }

    /// For a worker holding sessions that found the queue empty: whether
    /// to look again, after waiting until a batch is settled or handed
    /// back (at most 100 ms, so none is missed), because other workers'
    /// batches are out: one of them, turned away by the server while
    /// this worker's session was the only one counted, or before its own
    /// was, may hand its files back. Without it, the worker holding the
    /// planning session could end first, and the files handed back went
    /// through retries, as if no session were held.
    pub(super) async fn wait_for_more(&self) -> bool {
        let notified = self.settled.notified();
        if self.out.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let _ = tokio::time::timeout(std::time::Duration::from_millis(100), notified).await;
        true
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

    /// Whether `e`, met opening the sessions for files that keep nothing
    /// (handed back, they lose nothing), is a server's refusal of more
    /// sessions while other workers hold some: then the files go back to
    /// them. Said once per copy. Files tried before count too: a batch
    /// refused once while no worker held a session (the others still
    /// logging in) spent its retries on refusals while the copy went on
    /// beside it, and failed (a defect hunt's find: 16 of 4000 files).
    pub(super) fn turned_away(&self, e: &ClientError, batch: &[Task]) -> bool {
        let live = self.live.load(Ordering::Relaxed);
        let fresh = batch.iter().all(|t| t.resume.is_empty());
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

impl Crew {
    /// A worker's batch could not reach the server (`e`, a connection
    /// that failed or a server that never greeted) on its files' last
    /// try: every later batch fails with it at once. Each batch ran a
    /// whole cycle of connect timeouts and retries (about 127 s with the
    /// defaults), so a stopped server took hours to fail a copy of
    /// thousands of files (a defect hunt's find).
    pub(super) fn give_up_on(&self, e: &ClientError) {
        self.unreachable.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(|| e.clone());
    }

    /// What [`Crew::give_up_on`] recorded.
    pub(super) fn unreachable(&self) -> Option<ClientError> {
        self.unreachable.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A batch out ([`Crew::took`]).
pub(super) struct BatchOut<'a>(&'a Crew);

impl Drop for BatchOut<'_> {
    fn drop(&mut self) {
        self.0.out.fetch_sub(1, Ordering::Relaxed);
        self.0.settled.notify_waiters();
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

/// The files to try next and their count out in `crew` (`None`: there
/// are none): those going again with theirs, else a new batch of `n`.
pub(super) fn next_batch<'c>(
    q: &Queue,
    (again, again_out): (&mut Vec<Task>, Option<BatchOut<'c>>),
    n: usize,
    crew: &'c Crew,
) -> (Vec<Task>, Option<BatchOut<'c>>) {
    if !again.is_empty() {
        return (std::mem::take(again), again_out.or_else(|| Some(crew.took())));
    }
    let (items, out) = take_batch(q, n, crew);
    (items.into_iter().map(Task::new).collect(), out)
}

/// Up to `n` files from `q`, counted out in `crew` under the queue's
/// lock: no worker finds the queue empty and no batch out between the two
/// and ends while this batch may yet be handed back (a worker that ended
/// so, its `QUIT` not yet seen, made the server turn this one away as if
/// no session were held, and the files paused for a retry).
fn take_batch<'c>(q: &Queue, n: usize, crew: &'c Crew) -> (Vec<Item>, Option<BatchOut<'c>>) {
    let mut q = q.lock().unwrap_or_else(|e| e.into_inner());
    let k = n.min(q.len());
    let out = (k > 0).then(|| crew.took());
    (q.drain(..k).collect(), out)
}

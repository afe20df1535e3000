//! A fixed pool of worker threads running *scoped* jobs: closures that
//! borrow the caller's stack, as `std::thread::scope` allows, but on
//! long-lived threads. The engine's disk threads are one such pool.
//!
//! Why not rayon: its idle workers spin (32 rounds of `sched_yield`) before
//! they sleep. For I/O jobs that arrive a few thousand times a second that
//! spinning was 40 % of a receiving client's CPU on the emulated 1 Gbit/s
//! path (perf, 1 GiB to /dev/null). Here idle workers block on a condition
//! variable, and the one queue is FIFO across callers.
//!
//! The lifetime erasure below is the one `unsafe` piece; it is sound for the
//! reason `std::thread::scope` is: [`FixedPool::in_place_scope`] does not
//! return, nor unwind, before every job spawned in it has finished.

use std::any::Any;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct Queue {
    jobs: Mutex<(VecDeque<Job>, bool)>,
    ready: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fixed set of named worker threads. Dropping the pool lets them finish
/// the queued jobs and exit.
pub struct FixedPool {
    q: Arc<Queue>,
    threads: usize,
}

impl std::fmt::Debug for FixedPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FixedPool").field("threads", &self.threads).finish_non_exhaustive()
    }
}

impl FixedPool {
    /// Start `threads` workers named `name(i)`; each runs `start(i)` first
    /// (e.g. to pin itself to its CPUs).
    pub fn new(
        threads: usize,
        name: impl Fn(usize) -> String,
        start: impl Fn(usize) + Send + Sync + 'static,
    ) -> std::io::Result<FixedPool> {
        let q = Arc::new(Queue::default());
        let start = Arc::new(start);
        for i in 0..threads {
            let (q, start) = (q.clone(), start.clone());
            std::thread::Builder::new().name(name(i)).spawn(move || {
                start(i);
                work(&q)
            })?;
        }
        Ok(FixedPool { q, threads })
    }

    /// Number of worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    fn push(&self, job: Job) {
        lock(&self.q.jobs).0.push_back(job);
        self.q.ready.notify_one();
    }

    /// Run `f` on this thread; jobs it spawns run on the workers and may
    /// borrow anything that outlives this call. Returns once they all
    /// finished; a panic in `f` or in a job is resumed here after that.
    pub fn in_place_scope<'env, F, T>(&self, f: F) -> T
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
    {
        let scope =
            Scope { pool: self, state: Arc::new(ScopeState::default()), _scope: PhantomData, _env: PhantomData };
        let r = catch_unwind(AssertUnwindSafe(|| f(&scope)));
        scope.wait();
        if let Some(p) = lock(&scope.state.panic).take() {
            resume_unwind(p);
        }
        r.unwrap_or_else(|p| resume_unwind(p))
    }
}

impl Drop for FixedPool {
    fn drop(&mut self) {
        lock(&self.q.jobs).1 = true;
        self.q.ready.notify_all();
    }
}

fn work(q: &Queue) {
    loop {
        let job = {
            let mut g = lock(&q.jobs);
            loop {
                if let Some(j) = g.0.pop_front() {
                    break j;
                }
                if g.1 {
                    return;
                }
                g = q.ready.wait(g).unwrap_or_else(|e| e.into_inner());
            }
        };
        job();
    }
}

#[derive(Default)]
struct ScopeState {
    pending: Mutex<usize>,
    done: Condvar,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

/// Spawns jobs that may borrow for `'scope` (see [`FixedPool::in_place_scope`]).
pub struct Scope<'scope, 'env: 'scope> {
    pool: &'scope FixedPool,
    state: Arc<ScopeState>,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Queue `f` on the pool (FIFO with every other caller's jobs).
    pub fn spawn<F>(&'scope self, f: F)
    where
        F: FnOnce() + Send + 'scope,
    {
        *lock(&self.state.pending) += 1;
        let state = self.state.clone();
        let job: Box<dyn FnOnce() + Send + 'scope> = Box::new(move || {
            if let Err(p) = catch_unwind(AssertUnwindSafe(f)) {
                lock(&state.panic).get_or_insert(p);
            }
            let mut n = lock(&state.pending);
            *n -= 1;
            if *n == 0 {
                state.done.notify_all();
            }
        });
        // SAFETY: only the lifetime changes. `in_place_scope` waits (in
        // `wait`, also when `f` panicked) until `pending` is back to zero,
        // i.e. until this job has run to its end, before anything it
        // borrows for 'scope can go out of scope; the job touches only its
        // own `Arc` after the decrement.
        let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + 'scope>, Job>(job) };
        self.pool.push(job);
    }

    fn wait(&self) {
        let mut n = lock(&self.state.pending);
        while *n > 0 {
            n = self.state.done.wait(n).unwrap_or_else(|e| e.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn jobs_borrow_the_callers_stack_and_all_finish() {
        let pool = FixedPool::new(3, |i| format!("t-{i}"), |_| {}).unwrap();
        let data: Vec<usize> = (0..1000).collect();
        let sum = AtomicUsize::new(0);
        pool.in_place_scope(|s| {
            for chunk in data.chunks(7) {
                let sum = &sum;
                s.spawn(move || {
                    std::thread::sleep(std::time::Duration::from_micros(50));
                    sum.fetch_add(chunk.iter().sum(), Ordering::Relaxed);
                });
            }
        });
        assert_eq!(sum.load(Ordering::Relaxed), 999 * 1000 / 2, "every job ran before the scope returned");
    }

    #[test]
    fn a_panicking_job_is_resumed_after_the_others_finish() {
        let pool = FixedPool::new(2, |i| format!("p-{i}"), |_| {}).unwrap();
        let done = AtomicUsize::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.in_place_scope(|s| {
                s.spawn(|| panic!("boom"));
                for _ in 0..10 {
                    s.spawn(|| {
                        std::thread::sleep(std::time::Duration::from_millis(2));
                        done.fetch_add(1, Ordering::Relaxed);
                    });
                }
            })
        }));
        assert!(r.is_err(), "the panic reaches the caller");
        assert_eq!(done.load(Ordering::Relaxed), 10, "the other jobs finished first");
        pool.in_place_scope(|s| s.spawn(|| {}));
    }

    #[test]
    fn the_thread_count_is_fixed_and_start_runs_on_each() {
        let started = Arc::new(AtomicUsize::new(0));
        let s2 = started.clone();
        let pool = FixedPool::new(
            4,
            |i| format!("f-{i}"),
            move |_| {
                s2.fetch_add(1, Ordering::Relaxed);
            },
        )
        .unwrap();
        for _ in 0..50 {
            pool.in_place_scope(|s| (0..8).for_each(|_| s.spawn(|| {})));
        }
        assert_eq!(pool.threads(), 4);
        let t = std::time::Instant::now();
        while started.load(Ordering::Relaxed) < 4 && t.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(started.load(Ordering::Relaxed), 4, "each worker ran its start hook once");
    }
}

//! Jobs tried in the background until they are done: the purge of deleted images
//! (`delete::purge`) and the removal of partial images (`transfer::janitor`).
//!
//! Each try of a job is short, and a job that cannot go on now says when to try it again: the
//! scheduler's threads take whichever job is due first, so one that keeps failing (a client
//! holds its image open, a close waits on an absent cluster) never delays the others. No job is
//! dropped: should no thread start, it waits in the queue for the next one's, and a WARNING says
//! so; a try that panics loses that job (its image and mark stay, for the sweep), never a
//! thread. The threads never call into Python: their records wait for the log pump.

use std::sync::{Condvar, Mutex};
use std::time::Instant;

use crate::sync;
use crate::transfer::background;

/// A queue of jobs of type `T`, each tried by `attempt`, which returns it with the time of its
/// next try, or None once it is done (or given up).
pub(crate) struct Scheduler<T> {
    /// Its threads' names, numbered.
    name: &'static str,
    /// What its jobs do, for its records ("remove partial images").
    what: &'static str,
    workers: usize,
    attempt: fn(T) -> Option<(T, Instant)>,
    queue: Mutex<Option<Queue<T>>>,
    due: Condvar,
}

/// The jobs of this process, by pid: a child of `fork()` inherits the parent's but not the
/// threads that run them, so it forgets them (the parent goes on with them) and starts its own.
struct Queue<T> {
    pid: u32,
    pending: Vec<(Instant, T)>,
    workers: usize,
}

impl<T: Send + 'static> Scheduler<T> {
    pub(crate) const fn new(
        name: &'static str,
        what: &'static str,
        workers: usize,
        attempt: fn(T) -> Option<(T, Instant)>,
    ) -> Self {
        Scheduler {
            name,
            what,
            workers,
            attempt,
            queue: Mutex::new(None),
            due: Condvar::new(),
        }
    }

    /// Queues `job`, to be tried at `due`.
    pub(crate) fn queue(&'static self, job: T, due: Instant) {
        let pid = std::process::id();
        let mut guard = sync::lock(&self.queue);
        if let Some(inherited) = guard.take_if(|queue| queue.pid != pid) {
            // The parent's jobs: its threads, in the parent, go on with them.
            std::mem::forget(inherited);
        }
        let queue = guard.get_or_insert_with(|| Queue {
            pid,
            pending: Vec::new(),
            workers: 0,
        });
        queue.pending.push((due, job));
        let mut failed = None;
        while queue.workers < self.workers {
            let name = format!("{}-{}", self.name, queue.workers);
            match background::spawn(name, move || self.run()) {
                Ok(_) => queue.workers += 1,
                Err(err) => {
                    failed = Some((err, queue.pending.len()));
                    break;
                }
            }
        }
        drop(guard);
        self.due.notify_one();
        // Logged without the lock: from a Python thread, a record goes into Python.
        if let Some((err, waiting)) = failed {
            log::warn!(
                "could not start a thread to {} ({err}): {waiting} wait for the next one to \
                 start a thread",
                self.what
            );
        }
    }

    /// The jobs queued in this process, and its threads.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (usize, usize) {
        let pid = std::process::id();
        sync::lock(&self.queue)
            .as_ref()
            .filter(|queue| queue.pid == pid)
            .map_or((0, 0), |queue| (queue.pending.len(), queue.workers))
    }

    fn run(&'static self) {
        let pid = std::process::id();
        let mut guard = sync::lock(&self.queue);
        loop {
            let Some(queue) = guard.as_mut().filter(|queue| queue.pid == pid) else {
                return;
            };
            let now = Instant::now();
            let first = (0..queue.pending.len()).min_by_key(|&i| queue.pending[i].0);
            match first {
                Some(i) if queue.pending[i].0 <= now => {
                    let (_, job) = queue.pending.swap_remove(i);
                    drop(guard);
                    let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        (self.attempt)(job)
                    }))
                    .unwrap_or_else(|_| {
                        log::error!(
                            "a try to {} panicked: that one is left to `glance-rbd-native \
                             sweep`",
                            self.what
                        );
                        None
                    });
                    guard = sync::lock(&self.queue);
                    if let (Some((job, due)), Some(queue)) = (again, guard.as_mut()) {
                        queue.pending.push((due, job));
                        self.due.notify_one();
                    }
                }
                Some(i) => {
                    let wait = queue.pending[i].0 - now;
                    guard = sync::wait_timeout(&self.due, guard, wait).0;
                }
                None => guard = sync::wait(&self.due, guard),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// A job: its name, the times it is tried again after a failed try, and how long each
    /// try takes (as a close that waits on an absent cluster does).
    struct Job {
        name: &'static str,
        failures: u32,
        retry: Duration,
        takes: Duration,
    }

    static DONE: Mutex<Vec<(&'static str, Instant)>> = Mutex::new(Vec::new());
    static TRIES: AtomicUsize = AtomicUsize::new(0);

    fn attempt(mut job: Job) -> Option<(Job, Instant)> {
        TRIES.fetch_add(1, Ordering::SeqCst);
        if job.name == "panics" {
            panic!("a try that panics");
        }
        std::thread::sleep(job.takes);
        if job.failures > 0 {
            job.failures -= 1;
            let due = Instant::now() + job.retry;
            return Some((job, due));
        }
        sync::lock(&DONE).push((job.name, Instant::now()));
        None
    }

    static JOBS: Scheduler<Job> = Scheduler::new("test-job", "run test jobs", 2, attempt);

    fn done_at(name: &str, within: Duration) -> Instant {
        let deadline = Instant::now() + within;
        loop {
            if let Some(&(_, at)) = sync::lock(&DONE).iter().find(|(n, _)| *n == name) {
                return at;
            }
            assert!(
                Instant::now() < deadline,
                "{name} not done within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn job(name: &'static str, failures: u32, retry_ms: u64, takes_ms: u64) -> Job {
        Job {
            name,
            failures,
            retry: Duration::from_millis(retry_ms),
            takes: Duration::from_millis(takes_ms),
        }
    }

    // One test: the scheduler is a static, as the purge's and the janitor's are.
    #[test]
    fn a_slow_failing_or_panicking_job_never_delays_the_others_and_each_is_retried_when_due() {
        let now = Instant::now();
        JOBS.queue(job("panics", 0, 0, 0), now);
        // A try that takes 1.5 s holds one thread: the other goes on with the rest.
        JOBS.queue(job("slow", 0, 0, 1500), now);
        // Failing tries put their job back: each is tried again 300 ms after each failure.
        for name in ["held-1", "held-2"] {
            JOBS.queue(job(name, 3, 300, 0), now);
        }
        for name in ["a", "b", "c"] {
            JOBS.queue(job(name, 0, 0, 0), now);
        }
        // Not tried before it is due.
        JOBS.queue(job("later", 0, 0, 0), now + Duration::from_millis(600));
        let slow = done_at("slow", Duration::from_secs(10));
        for name in ["a", "b", "c"] {
            assert!(done_at(name, Duration::from_secs(10)) < slow, "{name}");
        }
        for name in ["held-1", "held-2"] {
            let at = done_at(name, Duration::from_secs(10));
            assert!(at - now >= Duration::from_millis(900), "{name}");
        }
        assert!(done_at("later", Duration::from_secs(10)) - now >= Duration::from_millis(600));
        // The panic lost its job, not a thread: both still run, and the queue is empty.
        assert_eq!(JOBS.counts(), (0, 2));
        JOBS.queue(job("after", 1, 10, 0), Instant::now());
        done_at("after", Duration::from_secs(10));
        assert_eq!(TRIES.load(Ordering::SeqCst), 1 + 1 + 2 * 4 + 3 + 1 + 2);
    }
}

//! Removing the data of the images `delete` moved to the trash, in the background. The Ceph
//! manager's task queue takes it where the user's caps allow (`rbd task add trash remove`, as
//! `mgr 'profile rbd pool=...'` does): the removal then goes on whatever becomes of this process.
//! Otherwise this process removes it. Either way the deletion's mark is cleared once the entry
//! is gone.
//!
//! Each job is a few steps (glance's snapshot, then the data, then, if the manager took it,
//! a look whether it is gone), and each try of a step is short: a job that cannot go on now
//! (a client holds the entry open, the cluster is away) is put back with a time to try again,
//! and `WORKERS` threads take whichever job is due first (`schedule`), so one held entry never
//! delays the others. A fenced connection is replaced, not retried. A job is tried for
//! `GIVE_UP_AFTER` or `MAX_TRIES`, whichever comes first; then its mark says it was given up,
//! and `glance-rbd-native sweep --remove` finishes it. What will not fix itself is a WARNING:
//! a fence or a refusal at once, a removal still failing `WARN_AFTER` after its delete, a job
//! given up. Tries run on a connection whose operations time out (`TRY_TIMEOUT`, where glance
//! sets no `rados_connect_timeout`): a try never waits on an absent cluster for longer.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Op};
use crate::io::Pool;
use crate::schedule::Scheduler;
use crate::sync;
use crate::transfer::mark::unix_now;

/// Removals this process runs at once: each keeps up to librbd's `rbd_concurrent_management_ops`
/// object removals in flight.
const WORKERS: usize = 2;
// (`cargo test`'s in-memory cluster answers at once: shorter waits and bounds there.)
const FIRST_RETRY: Duration = Duration::from_millis(if cfg!(test) { 20 } else { 1000 });
/// The longest wait between two tries: an entry let go is removed within it.
const LAST_RETRY: Duration = Duration::from_millis(if cfg!(test) { 100 } else { 10_000 });
/// A job still failing this long after its delete is said as a WARNING: within a minute, since
/// tries are `LAST_RETRY` apart at most (a try may wait `MANAGER_WAIT` for the manager first),
/// and the log pump (python/glance_rbd_native/log_pump.py) emits background records every 2 s.
const WARN_AFTER: Duration = Duration::from_millis(if cfg!(test) { 300 } else { 30_000 });
/// How long the manager may be at a removal before that is said as a WARNING: it removes about
/// 5 GiB a second on a test OSD, so an image of hundreds of GiB takes minutes.
const MANAGER_WARN_AFTER: Duration = Duration::from_millis(if cfg!(test) { 1000 } else { 300_000 });
/// The operation timeout, in seconds, of the connection the tries run on where glance sets none:
/// a try the cluster does not answer fails after it, and the job is tried again later, so that
/// the threads are never all waiting on OSDs that are away while other jobs could go on.
pub(crate) const TRY_TIMEOUT: u32 = 30;
/// How long a job is tried from its delete, and how many times, before it is given up.
const GIVE_UP_AFTER: Duration = Duration::from_millis(if cfg!(test) { 3000 } else { 900_000 });
const MAX_TRIES: u32 = 500;

/// One image in the trash whose data is to be removed.
pub(crate) struct Job {
    /// Its pool, through the connection of its delete; then through one with operation
    /// timeouts (`TRY_TIMEOUT`), or a new one once that was fenced.
    pub(crate) pool: Arc<dyn Pool>,
    pub(crate) name: String,
    pub(crate) id: String,
    /// glance's snapshot, unprotected, moved to the trash with the image: removed first.
    pub(crate) snapshot: Option<String>,
    /// The deletion's mark, as written; None if it could not be.
    pub(crate) mark: Option<String>,
    /// When the image moved to the trash.
    pub(crate) deleted: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    /// Removing glance's snapshot.
    Snapshot,
    /// Handing the data's removal to the manager, or removing it here.
    Remove,
    /// The manager took it: until the entry is gone.
    Manager,
}

/// A job, where it is, and when it is next tried.
struct Pending {
    job: Job,
    step: Step,
    due: Instant,
    delay: Duration,
    tries: u32,
    /// Whether its failing was said as a WARNING; whether its client was fenced; whether its
    /// pool's operations time out.
    warned: bool,
    fenced: bool,
    bounded: bool,
}

impl Pending {
    /// Its next try after its delay, which doubles up to `LAST_RETRY`.
    fn back_off(&mut self) {
        self.due = Instant::now() + self.delay;
        self.delay = (self.delay * 2).min(LAST_RETRY);
    }
}

/// What a try of one step came to.
enum Tried {
    Next(Step),
    /// The entry is gone, removed by whom.
    Gone(&'static str),
    /// Not now: try again later (the entry is busy, the manager is still at it).
    Later,
    Failed(Error),
}

/// The purges of this process.
static PURGES: Scheduler<Pending> = Scheduler::new(
    "rbd-purge",
    "remove the data of deleted images",
    WORKERS,
    attempt,
);

/// The users (cephx entities, by cluster: "fsid/entity") the manager refused a task: their caps do
/// not allow it, and it is not asked again for them.
static MANAGER_REFUSED: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// The users the manager last left unanswered, and when: not asked again for `SILENT_FOR`,
/// so that a cluster without an active manager does not cost every purge `MANAGER_WAIT` and a
/// connection.
static MANAGER_SILENT: Mutex<Vec<(String, Instant)>> = Mutex::new(Vec::new());
/// How long the manager may take to answer before this process removes the data itself: the
/// bound of the connect and of the command.
const MANAGER_WAIT: Duration = Duration::from_secs(10);
const SILENT_FOR: Duration = Duration::from_secs(60);

/// Queues `job`, to be tried at once.
pub(crate) fn queue(job: Job) {
    PURGES.queue(
        Pending {
            job,
            // Passed at once where there is no snapshot.
            step: Step::Snapshot,
            due: Instant::now(),
            delay: FIRST_RETRY,
            tries: 0,
            warned: false,
            fenced: false,
            bounded: false,
        },
        Instant::now(),
    );
}

/// Tries `pending`'s step once: the job back with the time of its next try, or None once it is
/// done or given up.
fn attempt(pending: Pending) -> Option<(Pending, Instant)> {
    try_step(pending).map(|pending| {
        let due = pending.due;
        (pending, due)
    })
}

fn try_step(mut pending: Pending) -> Option<Pending> {
    pending.tries += 1;
    let tried = match bound(&mut pending) {
        Err(err) => Tried::Failed(err),
        Ok(()) => match pending.step {
            Step::Snapshot => remove_snapshot(&pending.job),
            Step::Remove if by_manager(&pending.job) => Tried::Next(Step::Manager),
            Step::Remove => remove_here(&pending.job),
            Step::Manager => removed_by_manager(&pending.job),
        },
    };
    let job = &pending.job;
    let target = job.pool.target(&job.name);
    match tried {
        Tried::Gone(by) => {
            if let Some(mark) = &job.mark {
                super::unmark(&*job.pool, &job.name, &job.id, mark);
            }
            log::info!(
                "the data of deleted {target} (trash id {}) is removed, by {by}, {:.1} s after \
                 its delete",
                job.id,
                job.deleted.elapsed().as_secs_f64()
            );
            return None;
        }
        Tried::Next(step) => {
            pending.step = step;
            // The manager's removal is looked at after a while; the next step of this
            // process's own, at once.
            pending.delay = FIRST_RETRY;
            pending.due = Instant::now()
                + if step == Step::Manager {
                    FIRST_RETRY
                } else {
                    Duration::ZERO
                };
        }
        Tried::Later => {
            if !pending.warned && job.deleted.elapsed() >= WARN_AFTER && held_open(job) {
                pending.warned = true;
                log::warn!(
                    "the data of deleted {target} (trash id {}) is not removed yet, {:.0} s \
                     after its delete: a client has it open (`rados -p {} listwatchers \
                     rbd_header.{}` names it); the Ceph manager removes it once let go",
                    job.id,
                    job.deleted.elapsed().as_secs_f64(),
                    target.pool,
                    job.id
                );
            } else if !pending.warned && job.deleted.elapsed() >= MANAGER_WARN_AFTER {
                pending.warned = true;
                log::warn!(
                    "the Ceph manager has not removed the data of deleted {target} (trash id {}) \
                     yet, {:.0} s after its delete: a client may have it open, or its queue is \
                     long (`ceph rbd task list` shows its tasks); waiting until {} min after the \
                     delete, then `glance-rbd-native sweep --remove` removes it",
                    job.id,
                    job.deleted.elapsed().as_secs_f64(),
                    GIVE_UP_AFTER.as_secs() / 60
                );
            }
            pending.back_off();
        }
        Tried::Failed(err) => {
            let now_or_never = matches!(err.errno(), Some(libc::EPERM | libc::EACCES));
            if err.errno() == Some(libc::ESHUTDOWN) {
                let again = std::mem::replace(&mut pending.fenced, true);
                if again {
                    log::debug!("{err}: connecting again");
                } else {
                    log::warn!(
                        "the Ceph client ({}) removing the data of deleted {target} (trash id \
                         {}) was fenced, blocklisted by the cluster (`ceph osd blocklist ls` \
                         lists it): connecting again",
                        job.pool.user().0,
                        job.id
                    );
                }
                if let Some(pool) = reconnect(job) {
                    pending.job.pool = pool;
                    // The first time, at once; a new client fenced again (its host's address
                    // blocklisted) waits its turn, as any failure.
                    if again {
                        pending.back_off();
                    } else {
                        pending.due = Instant::now();
                    }
                    return give_up_if_due(pending);
                }
            } else if !pending.warned && (now_or_never || job.deleted.elapsed() >= WARN_AFTER) {
                pending.warned = true;
                log::warn!(
                    "the data of deleted {target} (trash id {}) is not removed yet, {:.0} s \
                     after its delete: {err}{}; trying again until {} min after the delete, then \
                     `glance-rbd-native sweep --remove` removes it",
                    job.id,
                    job.deleted.elapsed().as_secs_f64(),
                    if err.errno() == Some(libc::EBUSY) {
                        " (a client has it open: it goes once let go)"
                    } else {
                        ""
                    },
                    GIVE_UP_AFTER.as_secs() / 60
                );
            } else {
                log::debug!("{err}; trying again in {} s", pending.delay.as_secs());
            }
            job.pool.forget_if_refused(&err);
            // The delete's connection, glance's, is never replaced for a timeout: the job moves
            // to one with timeouts of its own first (`bound`).
            if err.errno() == Some(libc::ETIMEDOUT) && pending.bounded {
                // No answer: the OSDs may be away, or this client fenced without being told
                // (it then waits on answers that never come). The next try, on a new
                // connection, sees either.
                if let Some(pool) = reconnect(&pending.job) {
                    pending.job.pool = pool;
                }
            }
            pending.back_off();
        }
    }
    give_up_if_due(pending)
}

/// `pending`, unless its tries are over: then its mark is changed to say so (the sweep then
/// removes the entry while this process runs), and a WARNING says what is left.
fn give_up_if_due(pending: Pending) -> Option<Pending> {
    let job = &pending.job;
    if pending.tries < MAX_TRIES && job.deleted.elapsed() < GIVE_UP_AFTER {
        return Some(pending);
    }
    let left = match job.mark.as_deref() {
        None => "without a mark `glance-rbd-native sweep` would know; `rbd trash rm` removes it",
        Some(mark) if super::give_up(&*job.pool, &job.name, &job.id, mark, unix_now()) => {
            "its mark saying so; `glance-rbd-native sweep --remove` removes it"
        }
        Some(_) => "`glance-rbd-native sweep --remove` removes it once this process is gone",
    };
    log::warn!(
        "gave up removing the data of deleted {} (trash id {}) after {} tries in {:.0} s: it \
         stays in the pool's trash, {left}",
        job.pool.target(&job.name),
        job.id,
        pending.tries,
        job.deleted.elapsed().as_secs_f64(),
    );
    None
}

/// Moves the job onto a connection whose operations time out, before its first try: the
/// delete's waits for the cluster as long as glance's settings say (for ever, by default).
fn bound(pending: &mut Pending) -> Result<(), Error> {
    if !pending.bounded {
        pending.job.pool = pending.job.pool.bounded(TRY_TIMEOUT)?;
        pending.bounded = true;
    }
    Ok(())
}

/// The job's pool through a new connection, in place of its fenced one.
fn reconnect(job: &Job) -> Option<Arc<dyn Pool>> {
    match job.pool.reconnect() {
        Ok(pool) => Some(pool),
        Err(err) => {
            log::debug!("{err}: removing the data of trash entry {} later", job.id);
            None
        }
    }
}

/// Removes glance's snapshot of the image in the trash: its data cannot go with snapshots left.
fn remove_snapshot(job: &Job) -> Tried {
    let Some(snap) = &job.snapshot else {
        return Tried::Next(Step::Remove);
    };
    match job.pool.trash_snap_remove(&job.name, &job.id, snap) {
        Ok(()) => Tried::Next(Step::Remove),
        Err(err) if err.errno() == Some(libc::ENOENT) => Tried::Next(Step::Remove),
        Err(err) => Tried::Failed(err),
    }
}

/// Removes the entry's data here: a client that had the image open when it was moved keeps it
/// until it closes (EBUSY).
fn remove_here(job: &Job) -> Tried {
    match job.pool.trash_remove(&job.name, &job.id) {
        Ok(()) => Tried::Gone("this process"),
        Err(err) if err.errno() == Some(libc::ENOENT) => Tried::Gone("this process"),
        Err(err) => Tried::Failed(err),
    }
}

/// Whether the manager has removed the entry: only librbd's answer that there is none (ENOENT)
/// says so; no answer (a timeout, a fenced client) is no proof, and the mark stays until one.
fn removed_by_manager(job: &Job) -> Tried {
    match job.pool.in_trash(&job.id) {
        Ok(false) => Tried::Gone("the Ceph manager"),
        Ok(true) => Tried::Later,
        Err(errno) => Tried::Failed(Error::ceph(
            Op::Purge,
            &job.pool.target(&job.name),
            i64::from(errno),
        )),
    }
}

/// Whether the manager's removal of the job's entry waits for a client that has it open, as
/// the manager says (its own removal of a large image holds it open too, and is no such wait).
fn held_open(job: &Job) -> bool {
    job.pool.manager_says_busy(&job.id, MANAGER_WAIT)
}

/// Hands the removal to the manager's task queue; false if the manager refused it, or gave no
/// answer within `MANAGER_WAIT` (is one active?).
fn by_manager(job: &Job) -> bool {
    let (entity, fsid) = job.pool.user();
    let user = format!("{fsid}/{entity}");
    if sync::lock(&MANAGER_REFUSED).contains(&user) {
        return false;
    }
    let mut silent = sync::lock(&MANAGER_SILENT);
    silent.retain(|(_, since)| since.elapsed() < SILENT_FOR);
    if silent.iter().any(|(u, _)| *u == user) {
        return false;
    }
    drop(silent);
    log::debug!(
        "asking the Ceph manager, as {entity}, to remove the data of trash entry {}",
        job.id
    );
    match job.pool.manager_trash_remove(&job.id, MANAGER_WAIT) {
        Ok(()) => true,
        Err((errno, status)) if errno == -libc::EACCES || errno == -libc::EPERM => {
            let mut refused = sync::lock(&MANAGER_REFUSED);
            if !refused.contains(&user) {
                refused.push(user);
                log::info!(
                    "the Ceph manager refused `rbd task add trash remove` to {entity} \
                     ({status}): this process removes the data of deleted images itself (the \
                     manager would with mgr 'profile rbd pool={}' in the user's caps)",
                    job.pool.target(&job.name).pool
                );
            }
            false
        }
        Err((errno, status)) => {
            sync::lock(&MANAGER_SILENT).push((user, Instant::now()));
            log::info!(
                "the Ceph manager did not take the removal of trash entry {} from {entity} \
                 (errno {}{}{status}): this process removes its data itself, and the manager is \
                 not asked again for {} s",
                job.id,
                -errno,
                if status.is_empty() { "" } else { ": " },
                SILENT_FOR.as_secs()
            );
            false
        }
    }
}

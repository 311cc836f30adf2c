//! Removing partial images that could not be removed at once (the cluster was away, a timeout),
//! in the background, by the rules of the purge of deleted images (`delete::purge`): each
//! leftover is a job of short tries (`schedule`), so one whose removal waits on the cluster
//! never delays the others; its close, which waits on the cluster too (it releases the
//! exclusive lock), runs on a thread of its own, and the tries look whether it is done. Tries
//! run on a connection whose operations time out (`purge::TRY_TIMEOUT`, where glance sets no
//! `rados_connect_timeout`); a fenced connection, or one that timed out, is replaced, not
//! retried; a removal still failing `WARN_AFTER` after the failed upload, or refused, is a
//! WARNING; after `GIVE_UP_AFTER` or `MAX_TRIES` (the close's tries count) the job is given up,
//! its mark saying so, and `glance-rbd-native sweep --remove` removes the image while this
//! process runs.
//!
//! Removal acts on the image's id: much later, the name may be another image's (glance retried
//! the upload), which is left alone.

use std::fmt;
use std::sync::mpsc::{Receiver, TryRecvError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::background;
use super::mark::{Mark, unix_now};
use crate::delete::purge::TRY_TIMEOUT;
use crate::error::Error;
use crate::io::{Image, Pool};
use crate::schedule::Scheduler;
use crate::sync;

/// Leftovers tried at once: a try may wait one librados timeout while the cluster is away.
const WORKERS: usize = 2;
// (`cargo test`'s in-memory cluster comes back at once: shorter waits and bounds there.)
const FIRST_RETRY: Duration = Duration::from_millis(if cfg!(test) { 20 } else { 2000 });
/// The longest wait between two tries: once the cluster is back, the image goes within it.
const LAST_RETRY: Duration = Duration::from_millis(if cfg!(test) { 100 } else { 10_000 });
/// A removal still failing this long after the failed upload is a WARNING: within a minute,
/// with the log pump's 2 s (python/glance_rbd_native/log_pump.py).
const WARN_AFTER: Duration = Duration::from_millis(if cfg!(test) { 300 } else { 30_000 });
/// How long a leftover is tried from its upload's failure, and how many times, before it is
/// given up.
const GIVE_UP_AFTER: Duration = Duration::from_millis(if cfg!(test) { 1000 } else { 900_000 });
const MAX_TRIES: u32 = 500;

/// The janitor of this process.
static LEFTOVERS: Scheduler<Leftover> =
    Scheduler::new("rbd-janitor", "remove partial images", WORKERS, attempt);

struct Leftover {
    /// Still open: closing releases the exclusive lock, which waits on the cluster too.
    open: Option<Box<dyn Image>>,
    /// Its close, on a thread of its own: it says when it is done.
    closing: Option<Receiver<()>>,
    /// The connection it is removed through: the upload's, then one whose operations time out
    /// (`bounded`), or a new one once that was fenced or timed out.
    pool: Arc<dyn Pool>,
    /// The upload's client (its global id): the owner of a lock its close could not release.
    owner: u64,
    /// The upload's mark: it names the image, and is cleared once the image goes.
    mark: Mark,
    id: String,
    snapshot: Option<String>,
    failed: Instant,
    delay: Duration,
    tries: u32,
    /// Whether its failing was said as a WARNING; whether its client was fenced; whether its
    /// pool's operations time out.
    warned: bool,
    fenced: bool,
    bounded: bool,
}

/// What kept a try from removing the leftover.
enum Failure {
    /// Its close has not returned: the cluster does not answer it.
    Closing,
    Failed(Error),
}

/// Queues the image of `mark` (of id `id`) for removal in the background, closing `open` first
/// if given; `reason` says why it was not removed at once.
pub(crate) fn remove_later(
    open: Option<Box<dyn Image>>,
    mark: Mark,
    id: &str,
    snapshot: Option<&str>,
    reason: &dyn fmt::Display,
) {
    log::warn!(
        "could not remove {} ({reason}); retrying in the background",
        mark.pool().target(mark.image())
    );
    // Closed at once, if open; removed after `FIRST_RETRY`: the cluster has just failed it.
    let due = if open.is_some() {
        Instant::now()
    } else {
        Instant::now() + FIRST_RETRY
    };
    let pool = Arc::clone(mark.pool());
    LEFTOVERS.queue(
        Leftover {
            open,
            closing: None,
            owner: pool.client().0,
            pool,
            mark,
            id: id.to_owned(),
            snapshot: snapshot.map(str::to_owned),
            failed: Instant::now(),
            delay: FIRST_RETRY,
            tries: 0,
            warned: false,
            fenced: false,
            bounded: false,
        },
        due,
    );
}

/// Tries once to remove the leftover (closed first): the leftover back with the time of its
/// next try, or None once it is gone or given up.
fn attempt(mut leftover: Leftover) -> Option<(Leftover, Instant)> {
    leftover.tries += 1;
    let failure = try_once(&mut leftover)?;
    let due = failed(&mut leftover, failure);
    leftover.delay = (leftover.delay * 2).min(LAST_RETRY);
    if leftover.tries < MAX_TRIES && leftover.failed.elapsed() < GIVE_UP_AFTER {
        return Some((leftover, due));
    }
    give_up(leftover);
    None
}

/// One try: None once the image is gone (or its name another image's).
fn try_once(leftover: &mut Leftover) -> Option<Failure> {
    // The close first (it starts at once), then the connection the rest goes through: the
    // mark's give-up too.
    let closed = closed(leftover);
    if !leftover.bounded {
        match leftover.pool.bounded(TRY_TIMEOUT) {
            Ok(pool) => (leftover.pool, leftover.bounded) = (pool, true),
            Err(err) => return Some(Failure::Failed(err)),
        }
    }
    if !closed {
        return Some(Failure::Closing);
    }
    let pool = Arc::clone(&leftover.pool);
    let target = pool.target(leftover.mark.image());
    // Its own handle is closed: a lock of the upload's client on it is one that close could not
    // release (the cluster was away), which would refuse the removal for good.
    let broken = pool.break_locks_of(&leftover.id, leftover.owner);
    match &broken {
        Ok(0) => {}
        Ok(broken) => log::info!(
            "broke {broken} lock of this process's own on partial {target}, left by a close \
             while the cluster was away"
        ),
        Err(err) => log::debug!("{err}"),
    }
    let removed = pool.remove(
        leftover.mark.image(),
        &leftover.id,
        leftover.snapshot.as_deref(),
    );
    match removed {
        Ok(()) => log::info!("removed partial {target} after an earlier failure"),
        Err(Error::Ceph {
            errno: libc::ENOENT,
            ..
        }) => {}
        Err(Error::Ceph {
            errno: libc::ESTALE,
            ..
        }) => log::info!(
            "partial {target} (id {}) is already gone: the name is another image's now, left \
             alone",
            leftover.id
        ),
        // Busy with a lock that could not be broken: why it could not is the failure.
        Err(err) if err.errno() == Some(libc::EBUSY) => {
            return Some(Failure::Failed(broken.err().unwrap_or(err)));
        }
        Err(err) => return Some(Failure::Failed(err)),
    }
    leftover.mark.clear_through(&*pool);
    None
}

/// Whether the leftover's handle is closed. Its close starts at its first try, on a thread of
/// its own: a worker never waits on a cluster that does not answer it.
fn closed(leftover: &mut Leftover) -> bool {
    if let Some(open) = leftover.open.take() {
        match close_apart(open) {
            Ok(closing) => leftover.closing = Some(closing),
            Err(open) => {
                leftover.open = Some(open);
                return false;
            }
        }
    }
    let done = match &leftover.closing {
        None => true,
        Some(closing) => !matches!(closing.try_recv(), Err(TryRecvError::Empty)),
    };
    if done {
        leftover.closing = None;
    }
    done
}

/// Closes `open` on a thread of its own, which says when it is done; `open` back if no thread
/// can start.
fn close_apart(open: Box<dyn Image>) -> Result<Receiver<()>, Box<dyn Image>> {
    let (send, closing) = channel();
    let held = Arc::new(Mutex::new(Some(open)));
    let inner = Arc::clone(&held);
    let spawned = background::spawn("rbd-janitor-close".into(), move || {
        drop(sync::lock(&inner).take());
        let _ = send.send(());
    });
    match spawned {
        Ok(_) => Ok(closing),
        Err(err) => {
            log::debug!("cannot start a thread to close a partial image: {err}");
            // The closure went without running: the image is still here.
            sync::lock(&held).take().map_or(Ok(closing), Err)
        }
    }
}

/// Says what a failed try comes to, and replaces the connection where that helps: the time of
/// the next try.
fn failed(leftover: &mut Leftover, failure: Failure) -> Instant {
    let pool = Arc::clone(&leftover.pool);
    let target = pool.target(leftover.mark.image());
    let mut due = Instant::now() + leftover.delay;
    let err = match failure {
        Failure::Failed(err) => err,
        Failure::Closing => {
            if !leftover.warned && leftover.failed.elapsed() >= WARN_AFTER {
                leftover.warned = true;
                log::warn!(
                    "partial {target} (id {}) is not removed yet, {:.0} s after its upload \
                     failed: its close still waits on the cluster (to release its exclusive \
                     lock); trying again until {} min after, then `glance-rbd-native sweep \
                     --remove` removes it",
                    leftover.id,
                    leftover.failed.elapsed().as_secs_f64(),
                    GIVE_UP_AFTER.as_secs() / 60
                );
            }
            return due;
        }
    };
    if err.errno() == Some(libc::ESHUTDOWN) {
        let again = std::mem::replace(&mut leftover.fenced, true);
        if !again {
            log::warn!(
                "the Ceph client removing partial {target} (id {}) was fenced, blocklisted by \
                 the cluster (`ceph osd blocklist ls` lists it): connecting again",
                leftover.id
            );
        }
        match pool.reconnect() {
            Ok(new) => {
                leftover.pool = new;
                // The first time, at once; a new client fenced again waits its turn.
                if !again {
                    due = Instant::now();
                }
            }
            Err(err) => log::debug!("{err}: removing partial {target} later"),
        }
        return due;
    }
    if !leftover.warned
        && (matches!(err.errno(), Some(libc::EPERM | libc::EACCES))
            || leftover.failed.elapsed() >= WARN_AFTER)
    {
        leftover.warned = true;
        log::warn!(
            "partial {target} (id {}) is not removed yet, {:.0} s after its upload failed: \
             {err}; trying again until {} min after, then `glance-rbd-native sweep --remove` \
             removes it",
            leftover.id,
            leftover.failed.elapsed().as_secs_f64(),
            GIVE_UP_AFTER.as_secs() / 60
        );
    } else {
        log::debug!(
            "still cannot remove {target}: {err}; trying again in {:.0} s",
            leftover.delay.as_secs_f64()
        );
    }
    pool.forget_if_refused(&err);
    if err.errno() == Some(libc::ETIMEDOUT) && leftover.bounded {
        // No answer: the OSDs may be away, or this client fenced without being told. The next
        // try, on a new connection of its own, sees either. (The upload's connection, glance's,
        // is never replaced for a timeout: a new one with timeouts is made first.)
        if let Ok(new) = pool.reconnect() {
            leftover.pool = new;
        }
    }
    due
}

/// Ends the leftover's tries: its mark says so, for the sweep, and a WARNING says what is left.
fn give_up(mut leftover: Leftover) {
    let pool = Arc::clone(&leftover.pool);
    let left = if let Some(snap) = &leftover.snapshot {
        // The sweep never touches an image with a snapshot: an operator removes it.
        format!(
            "with its snapshot {snap}, which `glance-rbd-native sweep` never touches: `rbd snap \
             unprotect`, `rbd snap rm` and `rbd rm` of that image remove it"
        )
    } else if !leftover.mark.is_written() {
        "without a mark of this process's: `glance-rbd-native sweep --include-unmarked` lists it"
            .to_owned()
    } else if leftover.mark.give_up(&*pool, unix_now()) {
        "its mark saying so; `glance-rbd-native sweep --remove` removes it".to_owned()
    } else {
        "`glance-rbd-native sweep --remove` removes it once this process is gone".to_owned()
    };
    log::warn!(
        "gave up removing partial {} (id {}) after {} tries in {:.0} s: it stays in the pool, \
         {left}",
        pool.target(leftover.mark.image()),
        leftover.id,
        leftover.tries,
        leftover.failed.elapsed().as_secs_f64()
    );
}

//! Removing partial images that could not be removed at once (the cluster was down, a timeout):
//! one background thread closes them if still open, then retries each removal, with backoff,
//! until it goes through. Removal acts on the image's id: much later, the name may be another
//! image's (glance retried the upload), which is left alone.

use std::fmt;
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use super::background;
use super::mark::Mark;
use crate::error::Error;
use crate::io::Image;
use crate::sync;

const FIRST_RETRY: Duration = Duration::from_millis(if cfg!(test) { 20 } else { 2000 });
/// The longest wait between two tries: once the cluster is back, the image goes within it. A
/// try costs one round trip (or one librados timeout while the cluster is away).
/// (`cargo test`'s in-memory cluster comes back at once: shorter waits there.)
const LAST_RETRY: Duration = Duration::from_millis(if cfg!(test) { 100 } else { 10_000 });

struct Leftover {
    /// Still open: closing releases the exclusive lock, which waits on the cluster too.
    open: Option<Box<dyn Image>>,
    /// The upload's mark: it names the pool and the image, and is cleared once the image goes.
    mark: Mark,
    id: String,
    snapshot: Option<String>,
    next_try: Instant,
    delay: Duration,
}

/// The janitor of this process, by pid: a child of `fork()` inherits the sender but not the
/// thread, so it starts its own.
static QUEUE: Mutex<Option<(u32, Sender<Leftover>)>> = Mutex::new(None);

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
    let leftover = Leftover {
        open,
        mark,
        id: id.to_owned(),
        snapshot: snapshot.map(str::to_owned),
        next_try: Instant::now() + FIRST_RETRY,
        delay: FIRST_RETRY,
    };
    let pid = std::process::id();
    let mut queue = sync::lock(&QUEUE);
    if queue.as_ref().is_none_or(|(owner, _)| *owner != pid) {
        let (sender, receiver) = channel();
        background::spawn("rbd-janitor".into(), move || run(receiver))
            .expect("spawning the janitor thread");
        // The parent's sender, if inherited, is forgotten: its receiver is not in this process.
        if let Some(inherited) = queue.replace((pid, sender)) {
            std::mem::forget(inherited);
        }
    }
    if let Some((_, sender)) = queue.as_ref() {
        let _ = sender.send(leftover);
    }
}

fn run(queue: Receiver<Leftover>) {
    let mut pending: Vec<Leftover> = Vec::new();
    loop {
        let wait = pending
            .iter()
            .map(|l| l.next_try.saturating_duration_since(Instant::now()))
            .min()
            .unwrap_or(LAST_RETRY);
        match queue.recv_timeout(wait) {
            Ok(mut leftover) => {
                drop(leftover.open.take());
                pending.push(leftover);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        let now = Instant::now();
        pending.retain_mut(|leftover| {
            if leftover.next_try > now {
                return true;
            }
            let (pool, name) = (leftover.mark.pool(), leftover.mark.image());
            let target = pool.target(name);
            let snapshot = leftover.snapshot.as_deref();
            // Its own handle is closed: a lock of this client's on it is one that close could
            // not release (the cluster was away), which would refuse the removal for good.
            match pool.break_own_locks(&leftover.id) {
                Ok(0) => {}
                Ok(broken) => log::info!(
                    "broke {broken} lock of this process's own on partial {target}, left by a \
                     close while the cluster was away"
                ),
                Err(err) => log::debug!("{err}"),
            }
            let removed = pool.remove(name, &leftover.id, snapshot);
            match removed {
                Ok(()) => {
                    leftover.mark.clear();
                    log::info!("removed partial {target} after an earlier failure");
                    false
                }
                Err(Error::Ceph {
                    errno: libc::ENOENT,
                    ..
                }) => {
                    leftover.mark.clear();
                    false
                }
                Err(Error::Ceph {
                    errno: libc::ESTALE,
                    ..
                }) => {
                    log::info!(
                        "partial {target} (id {}) is already gone: the name is another \
                         image's now, left alone",
                        leftover.id
                    );
                    leftover.mark.clear();
                    false
                }
                Err(err) => {
                    log::debug!("still cannot remove {target}: {err}");
                    leftover.delay = (leftover.delay * 2).min(LAST_RETRY);
                    leftover.next_try = Instant::now() + leftover.delay;
                    true
                }
            }
        });
    }
}

//! Removing partial images that could not be removed at once (the cluster was down, a timeout):
//! one background thread closes them if still open, then retries each removal, with backoff,
//! until it goes through.

use std::fmt;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::background;
use super::mark;
use crate::error::Error;
use crate::rbd::cluster::IoCtx;
use crate::rbd::image::{self, Image};

const FIRST_RETRY: Duration = Duration::from_secs(2);
/// The longest wait between two tries: once the cluster is back, the image goes within it. A
/// try costs one round trip (or one librados timeout while the cluster is away).
const LAST_RETRY: Duration = Duration::from_secs(10);

struct Leftover {
    /// Still open: closing releases the exclusive lock, which waits on the cluster too.
    open: Option<Image>,
    ioctx: Arc<IoCtx>,
    image: String,
    snapshot: Option<String>,
    next_try: Instant,
    delay: Duration,
}

/// The janitor of this process, by pid: a child of `fork()` inherits the sender but not the
/// thread, so it starts its own.
static QUEUE: Mutex<Option<(u32, Sender<Leftover>)>> = Mutex::new(None);

/// Queues `image` for removal in the background, closing `open` first if given; `reason` says
/// why it was not removed at once.
pub(crate) fn remove_later(
    open: Option<Image>,
    ioctx: Arc<IoCtx>,
    image: &str,
    snapshot: Option<&str>,
    reason: &dyn fmt::Display,
) {
    log::warn!(
        "could not remove {} ({reason}); retrying in the background",
        ioctx.target(image)
    );
    let leftover = Leftover {
        open,
        ioctx,
        image: image.to_owned(),
        snapshot: snapshot.map(str::to_owned),
        next_try: Instant::now() + FIRST_RETRY,
        delay: FIRST_RETRY,
    };
    let pid = std::process::id();
    let mut queue = QUEUE.lock().unwrap_or_else(PoisonError::into_inner);
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
            let target = leftover.ioctx.target(&leftover.image);
            let snapshot = leftover.snapshot.as_deref();
            match image::remove_with_snapshot(&leftover.ioctx, &leftover.image, snapshot) {
                Ok(()) => {
                    mark::unmark(&leftover.ioctx, &leftover.image);
                    log::info!("removed partial {target} after an earlier failure");
                    false
                }
                Err(Error::Ceph {
                    errno: libc::ENOENT,
                    ..
                }) => {
                    mark::unmark(&leftover.ioctx, &leftover.image);
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

//! Telling, while a transfer waits on librbd, that it waits for nothing: its client was fenced
//! (blocklisted, by `glance-rbd-native sweep --remove` or an operator) or its image removed by
//! another process. librbd does not say so: the writes of a fenced client can stay queued
//! behind an exclusive lock it can never take back, and the transfer would wait forever.
//!
//! A wait that has seen no completion for `PROBE_AFTER` asks the cluster, on a thread of its
//! own, for the image's header object (`rbd_header.ID`) through the transfer's own I/O context:
//! the OSDs answer a blocklisted client with EBLOCKLISTED (ESHUTDOWN here), and a removed image
//! has no header (ENOENT). Any other answer, or none yet, proves nothing, and the wait goes on;
//! one probe runs at a time, so a cluster that does not answer holds one thread per stalled
//! transfer, not more.

use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::background;
use crate::error::{Error, Result, Target};
use crate::io::Pool;
use crate::sync;
use crate::wait::{POLL_INTERVAL, Poll};

/// How long a wait goes without a completion before the first probe, and between probes.
/// (The in-memory cluster of `cargo test` answers at once: its tests need not wait as long.)
const PROBE_AFTER: Duration = Duration::from_millis(if cfg!(test) { 300 } else { 3000 });

pub(crate) struct Fence {
    pool: Arc<dyn Pool>,
    /// The image whose header is probed; None before an image is open (its open, a delete's
    /// steps): the pool's directory is, and only the client's fencing is proved.
    image_id: Option<String>,
    target: Target,
    /// Whether stalls are probed at all (`client`).
    probing: bool,
    /// When the current wait began, if it has not seen progress since.
    stalled_since: Option<Instant>,
    /// The probe running, and its answer once it comes.
    probe: Option<Receiver<i32>>,
    next_probe: Option<Instant>,
}

impl Fence {
    /// A watch on the transfer of image `target` (of id `image_id`) through `pool`.
    pub(crate) fn new(pool: Arc<dyn Pool>, image_id: &str, target: Target) -> Fence {
        Fence::watching(pool, Some(image_id.to_owned()), target)
    }

    /// A watch on calls about image `target` made before it is open (`guarded`). On a
    /// connection whose operations time out, the calls end by themselves, and nothing is
    /// probed: a probe a cluster leaves unanswered (Ceph 20 leaves a user without osd caps so)
    /// would keep the connection, and its threads, after the call failed and let it go.
    pub(crate) fn client(pool: Arc<dyn Pool>, target: Target) -> Fence {
        let mut fence = Fence::watching(Arc::clone(&pool), None, target);
        fence.probing = !pool.times_out();
        fence
    }

    fn watching(pool: Arc<dyn Pool>, image_id: Option<String>, target: Target) -> Fence {
        Fence {
            pool,
            image_id,
            target,
            probing: true,
            stalled_since: None,
            probe: None,
            next_probe: None,
        }
    }

    /// The transfer moved: the next stall counts from now.
    pub(crate) fn moved(&mut self) {
        self.stalled_since = None;
        self.next_probe = None;
    }

    /// Called while a wait is blocked (every `POLL_INTERVAL`): the fencing or removal proved,
    /// if it is.
    pub(crate) fn check(&mut self) -> Result<()> {
        if !self.probing {
            return Ok(());
        }
        let now = Instant::now();
        let since = *self.stalled_since.get_or_insert(now);
        if let Some(answer) = &self.probe {
            match answer.try_recv() {
                Ok(ret) => {
                    self.probe = None;
                    return self.verdict(ret);
                }
                Err(TryRecvError::Empty) => return Ok(()),
                Err(TryRecvError::Disconnected) => self.probe = None,
            }
        }
        let due = self.next_probe.unwrap_or(since + PROBE_AFTER);
        if now < due {
            return Ok(());
        }
        self.next_probe = Some(now + PROBE_AFTER);
        let (send, answer) = channel();
        let (pool, id) = (Arc::clone(&self.pool), self.image_id.clone());
        let spawned = background::spawn("rbd-fence-probe".into(), move || {
            let _ = send.send(pool.probe(id.as_deref()));
        });
        if spawned.is_ok() {
            self.probe = Some(answer);
        }
        Ok(())
    }

    fn verdict(&self, ret: i32) -> Result<()> {
        match -ret {
            // Without an image, a pool with no directory yet proves nothing.
            libc::ENOENT if self.image_id.is_none() => Ok(()),
            errno @ (libc::ESHUTDOWN | libc::ENOENT) => {
                log::debug!("probe of {}: errno {errno}", self.target);
                Err(Error::Fenced {
                    target: self.target.clone(),
                    errno,
                })
            }
            _ => Ok(()),
        }
    }
}

/// Runs `call`, librbd work that a fenced client may wait on for good (an image's open, a
/// delete's steps), on a thread of its own, and waits for it, as for a write: once `fence`'s
/// probe proves the client fenced, or `poll` ends the wait (an interrupt), the wait ends with
/// that error, and the call is left to its thread, which drops what it comes to. Its records
/// are the background's (python's logging is never called from there).
pub(crate) fn guarded<T: Send + 'static>(
    fence: &mut Fence,
    mut poll: Option<Poll<'_>>,
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    let (send, answer) = channel();
    background::spawn("rbd-sync-call".into(), move || {
        let _ = send.send(call());
    })
    .map_err(|err| Error::Internal(format!("cannot start a thread: {err}")))?;
    fence.moved();
    loop {
        match answer.recv_timeout(POLL_INTERVAL) {
            Ok(done) => {
                fence.moved();
                return Ok(done);
            }
            Err(RecvTimeoutError::Timeout) => {
                let ended = match poll.as_mut() {
                    Some(poll) => poll().and_then(|()| fence.check()),
                    None => fence.check(),
                };
                if let Err(err) = ended {
                    // Answered meanwhile: what the call did stands (a retry would repeat it).
                    return answer.try_recv().map_err(|_| err);
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Error::Internal("a librbd call's thread ended".into()));
            }
        }
    }
}

/// Whether `err` says the transfer can never complete (fenced, or its image removed), so that
/// waiting for its operations in flight would wait forever.
pub(crate) fn is_fenced(err: &Error) -> bool {
    matches!(err, Error::Fenced { .. })
        || matches!(
            err,
            Error::Ceph {
                errno: libc::ESHUTDOWN,
                ..
            }
        )
}

/// Leaves `pending` (operations librbd may still complete, and what they need until then) to a
/// thread of its own, which drops them, then `keep` (the open image): a fenced client's
/// operations may take long, or forever, to come back. Leaked if no thread can start.
pub(crate) fn abandon<P: Send + 'static, K: Send + 'static>(pending: P, keep: K, what: &str) {
    let held = Arc::new(Mutex::new(Some((pending, keep))));
    let inner = Arc::clone(&held);
    let spawned = background::spawn("rbd-abandon".into(), move || {
        let taken = sync::lock(&inner).take();
        drop(taken);
    });
    if let Err(err) = spawned {
        // The closure went without running: what it held is still here, and is leaked.
        if let Some(leaked) = sync::lock(&held).take() {
            std::mem::forget(leaked);
        }
        log::error!("could not start a thread to abandon {what} ({err}): leaked instead");
    }
}

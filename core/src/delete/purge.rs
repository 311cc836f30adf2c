//! Removing the data of the images `delete` moved to the trash, in the background. The Ceph
//! manager's task queue takes it where the user's caps allow (`rbd task add trash remove`, as
//! `mgr 'profile rbd pool=...'` does): the removal then goes on whatever becomes of this process.
//! Otherwise this process removes it, `WORKERS` images at a time, retrying while a client still
//! has one open. Either way the deletion's mark is cleared once the entry is gone. These threads
//! never call into Python: their records wait for the next native call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::rbd::cluster::{Daemon, IoCtx, cstring};
use crate::rbd::image;
use crate::sync;
use crate::transfer::background;

/// Removals this process runs at once: each keeps up to librbd's `rbd_concurrent_management_ops`
/// object removals in flight.
const WORKERS: usize = 2;
const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(10);

/// One image in the trash whose data is to be removed.
pub(crate) struct Job {
    pub(crate) ioctx: Arc<IoCtx>,
    pub(crate) name: String,
    pub(crate) id: String,
    /// The deletion's mark, as written; None if it could not be.
    pub(crate) mark: Option<String>,
}

/// The queue of this process, by pid: a child of `fork()` inherits the sender but not the
/// threads, so it starts its own.
static QUEUE: Mutex<Option<(u32, Sender<Job>)>> = Mutex::new(None);

/// Set once the manager refused a task to this process's user: its caps do not allow it.
static MANAGER_REFUSED: AtomicBool = AtomicBool::new(false);

pub(crate) fn queue(job: Job) {
    let pid = std::process::id();
    let mut queue = sync::lock(&QUEUE);
    if queue.as_ref().is_none_or(|(owner, _)| *owner != pid) {
        let (sender, receiver) = channel();
        let receiver = Arc::new(Mutex::new(receiver));
        for worker in 0..WORKERS {
            let receiver = Arc::clone(&receiver);
            background::spawn(format!("rbd-purge-{worker}"), move || run(&receiver))
                .expect("spawning a purge thread");
        }
        // The parent's sender, if inherited, is forgotten: its receivers are not in this process.
        if let Some(inherited) = queue.replace((pid, sender)) {
            std::mem::forget(inherited);
        }
    }
    if let Some((_, sender)) = queue.as_ref() {
        let _ = sender.send(job);
    }
}

fn run(queue: &Mutex<Receiver<Job>>) {
    loop {
        let Ok(job) = sync::lock(queue).recv() else {
            return;
        };
        purge(&job);
    }
}

fn purge(job: &Job) {
    let started = Instant::now();
    let target = job.ioctx.target(&job.name);
    let by = if by_manager(job) {
        wait_until_gone(job);
        "the Ceph manager"
    } else {
        remove_here(job);
        "this process"
    };
    if let Some(mark) = &job.mark {
        super::unmark(&job.ioctx, &job.name, &job.id, mark);
    }
    log::info!(
        "the data of deleted {target} (trash id {}) is removed, by {by}, {:.1} s after its delete",
        job.id,
        started.elapsed().as_secs_f64()
    );
}

/// Hands the removal to the manager's task queue; false if there is no manager, or it refused.
fn by_manager(job: &Job) -> bool {
    if MANAGER_REFUSED.load(Ordering::Relaxed) {
        return false;
    }
    let cluster = job.ioctx.cluster();
    // Without an active manager, a manager command would wait for one.
    match cluster.command(Daemon::Monitors, r#"{"prefix":"mgr stat","format":"json"}"#) {
        Ok(stat) if stat.replace(' ', "").contains("\"available\":true") => {}
        Ok(_) => return false,
        Err((errno, status)) => {
            log::debug!(
                "asking the monitors for the manager failed (errno {}): {status}",
                -errno
            );
            return false;
        }
    }
    let spec = format!("{}/{}", job.ioctx.pool(), job.id);
    let command = format!(
        r#"{{"prefix":"rbd task add trash remove","image_id_spec":{},"format":"json"}}"#,
        crate::transfer::mark::json_string(&spec)
    );
    match cluster.command(Daemon::Manager, &command) {
        Ok(_) => true,
        Err((errno, status)) if errno == -libc::EACCES || errno == -libc::EPERM => {
            if !MANAGER_REFUSED.swap(true, Ordering::Relaxed) {
                log::info!(
                    "the Ceph manager refused `rbd task add trash remove` to {} ({status}): this \
                     process removes the data of deleted images itself (the manager would with \
                     mgr 'profile rbd pool={}' in the user's caps)",
                    cluster.entity(),
                    job.ioctx.pool()
                );
            }
            false
        }
        Err((errno, status)) => {
            log::debug!(
                "the Ceph manager did not take the removal of trash entry {} (errno {}): {status}",
                job.id,
                -errno
            );
            false
        }
    }
}

/// Waits for the manager to have removed the entry.
fn wait_until_gone(job: &Job) {
    let Ok(id) = cstring(&job.id) else { return };
    let mut delay = FIRST_RETRY;
    while image::trash_name(&job.ioctx, &id).is_some() {
        std::thread::sleep(delay);
        delay = (delay * 2).min(LAST_RETRY);
    }
}

/// Removes the entry's data here, retrying (a reader that had the image open when it was moved
/// keeps it until it closes, the cluster may be away) until it is gone.
fn remove_here(job: &Job) {
    let mut delay = FIRST_RETRY;
    loop {
        match image::trash_remove(&job.ioctx, &job.name, &job.id) {
            Ok(()) => return,
            Err(err) if err.errno() == Some(libc::ENOENT) => return,
            Err(err) => {
                log::debug!("{err}; retrying in {} s", delay.as_secs());
                std::thread::sleep(delay);
                delay = (delay * 2).min(LAST_RETRY);
            }
        }
    }
}

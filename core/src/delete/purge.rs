//! Removing the data of the images `delete` moved to the trash, in the background. The Ceph
//! manager's task queue takes it where the user's caps allow (`rbd task add trash remove`, as
//! `mgr 'profile rbd pool=...'` does): the removal then goes on whatever becomes of this process.
//! Otherwise this process removes it, `WORKERS` images at a time, retrying while a client still
//! has one open. Either way the deletion's mark is cleared once the entry is gone. These threads
//! never call into Python: their records wait for the next native call.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::rbd::cluster::{IoCtx, cstring};
use crate::rbd::image::{self, Image};
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
    /// glance's snapshot, unprotected, moved to the trash with the image: removed first.
    pub(crate) snapshot: Option<String>,
    /// The deletion's mark, as written; None if it could not be.
    pub(crate) mark: Option<String>,
    /// When the image moved to the trash.
    pub(crate) deleted: Instant,
}

/// The queue of this process, by pid: a child of `fork()` inherits the sender but not the
/// threads, so it starts its own.
static QUEUE: Mutex<Option<(u32, Sender<Job>)>> = Mutex::new(None);

/// The users (cephx entities, by cluster: `user_key`) the manager refused a task: their caps do
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
    let target = job.ioctx.target(&job.name);
    if let Some(snap) = &job.snapshot {
        remove_snapshot(job, snap);
    }
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
        job.deleted.elapsed().as_secs_f64()
    );
}

/// Hands the removal to the manager's task queue; false if the manager refused it, or gave no
/// answer within `MANAGER_WAIT` (is one active?).
fn by_manager(job: &Job) -> bool {
    let cluster = job.ioctx.cluster();
    let entity = cluster.entity();
    let user = format!("{}/{entity}", cluster.fsid());
    if sync::lock(&MANAGER_REFUSED).contains(&user) {
        return false;
    }
    let mut silent = sync::lock(&MANAGER_SILENT);
    silent.retain(|(_, since)| since.elapsed() < SILENT_FOR);
    if silent.iter().any(|(u, _)| *u == user) {
        return false;
    }
    drop(silent);
    let spec = format!("{}/{}", job.ioctx.pool(), job.id);
    let command = format!(
        r#"{{"prefix":"rbd task add trash remove","image_id_spec":{},"format":"json"}}"#,
        crate::transfer::mark::json_string(&spec)
    );
    match cluster.mgr_command(&command, MANAGER_WAIT) {
        Ok(_) => true,
        Err((errno, status)) if errno == -libc::EACCES || errno == -libc::EPERM => {
            let mut refused = sync::lock(&MANAGER_REFUSED);
            if !refused.contains(&user) {
                refused.push(user);
                log::info!(
                    "the Ceph manager refused `rbd task add trash remove` to {entity} \
                     ({status}): this process removes the data of deleted images itself (the \
                     manager would with mgr 'profile rbd pool={}' in the user's caps)",
                    job.ioctx.pool()
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

/// Waits for the manager to have removed the entry: until librbd answers that there is none
/// (ENOENT). No answer (a timeout, a fenced client) is no proof, and the mark stays until one.
fn wait_until_gone(job: &Job) {
    let Ok(id) = cstring(&job.id) else { return };
    let mut delay = FIRST_RETRY;
    loop {
        match image::trash_get(&job.ioctx, &id) {
            Ok(None) => return,
            Ok(Some(_)) => {}
            Err(errno) => log::debug!(
                "the trash entry {} could not be read (errno {errno}); asking again in {} s",
                job.id,
                delay.as_secs()
            ),
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(LAST_RETRY);
    }
}

/// Removes glance's snapshot of the image in the trash (its data cannot go with snapshots left),
/// retrying until it is gone or the image is.
fn remove_snapshot(job: &Job, snap: &str) {
    let mut delay = FIRST_RETRY;
    loop {
        let removed = Image::open_by_id(Arc::clone(&job.ioctx), &job.id, &job.name)
            .and_then(|image| super::remove_snapshot(&image, snap));
        match removed {
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

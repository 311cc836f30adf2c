//! The uploads and downloads running in this process, for the progress lines of glance's log.
//!
//! Each transfer registers at its start and leaves at its end, and keeps its bytes, the moment
//! it last made progress and what it waits on up to date with atomics alone: nothing is locked
//! or allocated per chunk. Logging is Python's, from a thread of its own that reads `snapshot`
//! every second (`glance_rbd_native.progress`): native threads never call into Python, and a
//! timer here would have to.

use crate::sync;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Upload,
    Download,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Upload => "upload",
            Kind::Download => "download",
        }
    }

    /// What a transfer of this kind waits on between the calls its user makes.
    fn between_calls(self) -> Wait {
        match self {
            Kind::Upload => Wait::Source,
            Kind::Download => Wait::Consumer,
        }
    }
}

/// What a transfer waits on at a given moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Wait {
    /// An upload between two `write()` calls: its data has not come yet.
    Source = 0,
    /// A download between two chunks: its consumer has not taken the next one.
    Consumer = 1,
    /// Inside a call: librbd's writes or reads in flight, or another librbd call.
    Cluster = 2,
    /// Room in its share of the process's in-flight bound (`shares`).
    Share = 3,
}

impl Wait {
    pub fn name(self) -> &'static str {
        match self {
            Wait::Source => "source",
            Wait::Consumer => "consumer",
            Wait::Cluster => "cluster",
            Wait::Share => "share",
        }
    }

    fn from_u8(value: u8) -> Wait {
        match value {
            0 => Wait::Source,
            1 => Wait::Consumer,
            2 => Wait::Cluster,
            _ => Wait::Share,
        }
    }
}

struct Entry {
    id: u64,
    /// A child of `fork()` inherits the registry without the threads that run its transfers.
    pid: u32,
    kind: Kind,
    pool: String,
    image: String,
    /// Declared or known size; 0 when unknown.
    size: u64,
    started: Instant,
    /// Bytes accepted by `write()` (upload) or handed out (download).
    bytes: AtomicU64,
    /// Nanoseconds from `started` to the last progress: bytes accepted or handed out, or a
    /// write completed.
    progressed: AtomicU64,
    waiting: AtomicU8,
    ended: AtomicBool,
}

impl Entry {
    fn touch(&self) {
        let nanos = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.progressed.store(nanos, Ordering::Relaxed);
    }
}

/// Weak: a transfer dropped without ending (a panic, say) leaves no entry behind.
static RUNNING: Mutex<Vec<Weak<Entry>>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn registry() -> MutexGuard<'static, Vec<Weak<Entry>>> {
    sync::lock(&RUNNING)
}

/// One transfer's entry in the registry. Clones share it (the writes in flight of an upload
/// mark its progress too).
#[derive(Clone)]
pub(crate) struct Progress {
    entry: Arc<Entry>,
}

impl Progress {
    /// Registers a transfer that starts now, waiting on its user (the source or the consumer).
    pub(crate) fn register(kind: Kind, pool: &str, image: &str, size: u64) -> Progress {
        let entry = Arc::new(Entry {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            pid: std::process::id(),
            kind,
            pool: pool.to_owned(),
            image: image.to_owned(),
            size,
            started: Instant::now(),
            bytes: AtomicU64::new(0),
            progressed: AtomicU64::new(0),
            waiting: AtomicU8::new(kind.between_calls() as u8),
            ended: AtomicBool::new(false),
        });
        let mut registry = registry();
        registry.retain(|weak| weak.strong_count() > 0);
        registry.push(Arc::downgrade(&entry));
        Progress { entry }
    }

    /// `bytes` so far, a step forward.
    pub(crate) fn advance(&self, bytes: u64) {
        self.entry.bytes.store(bytes, Ordering::Relaxed);
        self.entry.touch();
    }

    /// A step forward that adds no bytes (a write completed).
    pub(crate) fn moved(&self) {
        self.entry.touch();
    }

    /// A call of the transfer's user (write, finish, abort, the next chunk) until the guard
    /// drops: meanwhile it waits on the cluster unless `waiting` says otherwise, and after it
    /// on its user again.
    pub(crate) fn call(&self) -> Waiting {
        self.set(Wait::Cluster);
        Waiting {
            entry: Arc::clone(&self.entry),
            then: self.entry.kind.between_calls(),
        }
    }

    /// Waits on `wait` until the guard drops, then on what it waited on before.
    pub(crate) fn waiting(&self, wait: Wait) -> Waiting {
        Waiting {
            then: self.set(wait),
            entry: Arc::clone(&self.entry),
        }
    }

    fn set(&self, wait: Wait) -> Wait {
        Wait::from_u8(self.entry.waiting.swap(wait as u8, Ordering::Relaxed))
    }

    /// The transfer finished or was given up: it leaves the registry. Idempotent.
    pub(crate) fn end(&self) {
        if !self.entry.ended.swap(true, Ordering::Relaxed) {
            let this = Arc::as_ptr(&self.entry);
            registry().retain(|weak| weak.strong_count() > 0 && weak.as_ptr() != this);
        }
    }
}

/// Restores what the transfer waits on when dropped (`Progress::call`, `Progress::waiting`).
pub(crate) struct Waiting {
    entry: Arc<Entry>,
    then: Wait,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.entry.waiting.store(self.then as u8, Ordering::Relaxed);
    }
}

/// One running transfer, as `snapshot` saw it.
#[derive(Debug, Clone)]
pub struct Running {
    /// Unique in the process, in start order.
    pub id: u64,
    pub kind: Kind,
    pub pool: String,
    pub image: String,
    pub size: u64,
    pub bytes: u64,
    /// Since its start.
    pub elapsed: Duration,
    /// From its start to its last progress.
    pub progressed: Duration,
    pub waiting: Wait,
}

/// The transfers of this process running now, oldest first.
pub fn snapshot() -> Vec<Running> {
    let pid = std::process::id();
    let entries: Vec<Arc<Entry>> = registry().iter().filter_map(Weak::upgrade).collect();
    entries
        .iter()
        .filter(|entry| entry.pid == pid && !entry.ended.load(Ordering::Relaxed))
        .map(|entry| {
            // The last progress first: read after it, the time elapsed is never the shorter.
            let progressed = Duration::from_nanos(entry.progressed.load(Ordering::Relaxed));
            Running {
                id: entry.id,
                kind: entry.kind,
                pool: entry.pool.clone(),
                image: entry.image.clone(),
                size: entry.size,
                bytes: entry.bytes.load(Ordering::Relaxed),
                progressed,
                elapsed: entry.started.elapsed(),
                waiting: Wait::from_u8(entry.waiting.load(Ordering::Relaxed)),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test's transfer in the snapshot (tests run at once, in one registry).
    fn seen(progress: &Progress) -> Option<Running> {
        snapshot().into_iter().find(|r| r.id == progress.entry.id)
    }

    #[test]
    fn a_transfer_is_seen_from_its_start_to_its_end() {
        let progress = Progress::register(Kind::Upload, "images", "a", 10);
        let running = seen(&progress).expect("registered");
        assert_eq!(
            (running.kind, running.pool.as_str(), running.image.as_str()),
            (Kind::Upload, "images", "a")
        );
        assert_eq!((running.size, running.bytes), (10, 0));
        assert_eq!(running.waiting, Wait::Source);
        progress.end();
        progress.end();
        assert!(seen(&progress).is_none());
    }

    #[test]
    fn bytes_and_the_last_progress_move_forward() {
        let progress = Progress::register(Kind::Download, "images", "b", 0);
        std::thread::sleep(Duration::from_millis(20));
        let before = seen(&progress).unwrap();
        assert_eq!(before.progressed, Duration::ZERO);
        assert!(before.elapsed >= Duration::from_millis(20));
        progress.advance(4096);
        let after = seen(&progress).unwrap();
        assert_eq!(after.bytes, 4096);
        assert!(after.progressed >= Duration::from_millis(20));
        std::thread::sleep(Duration::from_millis(5));
        progress.moved();
        assert!(seen(&progress).unwrap().progressed > after.progressed);
    }

    #[test]
    fn waits_nest_and_calls_end_waiting_on_the_user() {
        let upload = Progress::register(Kind::Upload, "images", "c", 0);
        {
            let _call = upload.call();
            assert_eq!(seen(&upload).unwrap().waiting, Wait::Cluster);
            {
                let _share = upload.waiting(Wait::Share);
                assert_eq!(seen(&upload).unwrap().waiting, Wait::Share);
            }
            assert_eq!(seen(&upload).unwrap().waiting, Wait::Cluster);
        }
        assert_eq!(seen(&upload).unwrap().waiting, Wait::Source);
        let download = Progress::register(Kind::Download, "images", "d", 0);
        assert_eq!(seen(&download).unwrap().waiting, Wait::Consumer);
        drop(download.call());
        assert_eq!(seen(&download).unwrap().waiting, Wait::Consumer);
    }

    #[test]
    fn a_transfer_dropped_without_ending_leaves_no_entry() {
        let progress = Progress::register(Kind::Upload, "images", "e", 0);
        let id = progress.entry.id;
        let clone = progress.clone();
        drop(progress);
        assert!(snapshot().iter().any(|r| r.id == id));
        drop(clone);
        assert!(!snapshot().iter().any(|r| r.id == id));
    }

    #[test]
    fn snapshots_are_in_start_order() {
        let first = Progress::register(Kind::Upload, "images", "f", 0);
        let second = Progress::register(Kind::Download, "images", "g", 0);
        let ids: Vec<u64> = snapshot()
            .iter()
            .map(|r| r.id)
            .filter(|id| [first.entry.id, second.entry.id].contains(id))
            .collect();
        assert_eq!(ids, [first.entry.id, second.entry.id]);
    }
}

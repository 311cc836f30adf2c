//! An in-memory cluster for `cargo test`: the image I/O of the transfer core and the deletes
//! (`io`) with the faults a test chooses, so that uploads, downloads, the bound, every abort
//! path, deletes and their purge run in seconds, with no Ceph. The real cluster stays the proof
//! (tests/, against a throwaway one); this is the loop.
//!
//! What it models of librbd and librados, and no more: images with ids, sizes and snapshots
//! (protected, with clones), removal by id (ESTALE for a name taken by another image), the
//! trash (an entry a client holds open refuses its removal), the manager's task queue (which
//! takes a removal, refuses it, or does not answer), conditional omap entries, one
//! client per connection (a new one after `fence`), and operations in flight that complete at
//! once, after a delay, with an error, or not at all until released. A fenced client's
//! operations go unanswered, as they do behind an exclusive lock it cannot take back; its probe
//! hears ESHUTDOWN (Ceph's EBLOCKLISTED).

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Op, Result, Target};
use crate::io::{self, Image, OmapChange, OmapWrite, Pool};
use crate::sync;
use crate::wait::{Poll, wait_until};

/// What goes wrong, and when. Operations are counted from the cluster's start, 1 first.
#[derive(Default)]
pub(crate) struct Faults {
    /// The nth write completes with this errno (ENOSPC, ETIMEDOUT, ...), writing nothing.
    /// ESHUTDOWN (EBLOCKLISTED) fences the writer's client too: OSDs answer only a blocklisted
    /// client so.
    pub(crate) write_error: Option<(usize, i32)>,
    /// From the nth write on, writes are not answered until `Memory::release`.
    pub(crate) held_from: Option<usize>,
    /// Every write and read completes after this long, on a thread of its own.
    pub(crate) delay: Option<Duration>,
    /// The nth read completes with this errno.
    pub(crate) read_error: Option<(usize, i32)>,
    pub(crate) resize_error: Option<i32>,
    pub(crate) flush_error: Option<i32>,
    pub(crate) snapshot_error: Option<i32>,
    /// The next removals fail with these, in turn.
    pub(crate) remove_errors: Vec<i32>,
    /// The Ceph manager's answer to a removal handed to it: None takes it, and removes the
    /// entry `manager_takes` later once no client has it open; an errno does not (ETIMEDOUT:
    /// no manager answers; EACCES: the user's caps do not allow it).
    pub(crate) manager_error: Option<i32>,
    pub(crate) manager_takes: Duration,
    /// A connection with operation timeouts (`Pool::bounded`) fails to connect with this.
    pub(crate) bounded_error: Option<i32>,
    /// glance sets rados_connect_timeout: `Pool::bounded` is the connection itself.
    pub(crate) timeouts_set: bool,
    /// Creations, opens, inspections and unprotects go unanswered until `release`, as librbd's
    /// wait on OSDs that do not answer; with the client fenced meanwhile (`fence`), as a client
    /// fenced without being told: its probes hear ESHUTDOWN, its calls once answered too.
    pub(crate) calls_held: bool,
    /// Closing an image handle waits until `release`, as librbd's close waits on an OSD that
    /// does not answer the release of its exclusive lock.
    pub(crate) close_held: bool,
}

/// What the operations did, for the tests' assertions.
#[derive(Default, Clone, Copy, Debug)]
pub(crate) struct Counts {
    pub(crate) writes: usize,
    pub(crate) reads: usize,
    pub(crate) resizes: usize,
    /// The most bytes written and not yet answered at any moment.
    pub(crate) most_in_flight: usize,
    /// Removals asked of the manager, taken or not; trash entries removed by the process.
    pub(crate) manager_asked: usize,
    pub(crate) trash_removals: usize,
    /// Connections with operation timeouts asked for (`Pool::bounded`).
    pub(crate) bounded_asked: usize,
    /// Calls answered after they were held (`Faults::calls_held`).
    pub(crate) held_answered: usize,
}

struct Stored {
    id: String,
    size: u64,
    data: Vec<u8>,
    /// name -> (size at the snapshot, its data, protected)
    snapshots: HashMap<String, (u64, Vec<u8>, bool)>,
    /// The clients of the handles open on it (a fenced client's do not hold it: its watch is
    /// gone).
    open: Vec<u64>,
}

/// A write not answered yet: its data lands, and it completes, when it is released.
struct Held {
    slot: Arc<Slot>,
    image: String,
    offset: u64,
    data: Vec<u8>,
}

#[derive(Default)]
struct State {
    /// Which cluster: the fsid of its users.
    fsid: String,
    images: HashMap<String, Stored>,
    /// id -> (name, image): what a delete moved to the trash.
    trash: HashMap<String, (String, Stored)>,
    /// (image, snapshot) of the snapshots that have clones.
    clones: Vec<(String, String)>,
    /// The removals the manager took: (trash id, when it removes it).
    manager_tasks: Vec<(String, Instant)>,
    next_id: u64,
    /// (object, key) -> value
    omap: HashMap<(String, String), String>,
    faults: Faults,
    counts: Counts,
    in_flight: usize,
    held: Vec<Held>,
    /// The connection now, and those fenced before it.
    client: u64,
    fenced: Vec<u64>,
}

impl State {
    /// Runs the manager's removals that are due, unless a client has their entry open.
    fn run_manager_tasks(&mut self) {
        let now = Instant::now();
        let (trash, fenced) = (&mut self.trash, &self.fenced);
        self.manager_tasks.retain(|(id, due)| {
            let Some((_, image)) = trash.get(id) else {
                return false;
            };
            if *due > now || image.open.iter().any(|c| !fenced.contains(c)) {
                return true;
            }
            trash.remove(id);
            false
        });
    }

    /// Blocklists `client`; the next connection is a new client.
    fn fence_client(&mut self, client: u64) {
        if !self.fenced.contains(&client) {
            self.fenced.push(client);
        }
        if self.client == client {
            self.client += 1;
        }
    }
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Woken when held operations are released (what a fenced client's calls wait for).
    released: Condvar,
}

/// One in-memory cluster; its pools are views of it.
#[derive(Clone, Default)]
pub(crate) struct Memory {
    shared: Arc<Shared>,
}

impl Memory {
    pub(crate) fn new() -> Memory {
        static CLUSTERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let memory = Memory::default();
        let mut state = memory.state();
        state.client = 1;
        let n = CLUSTERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        state.fsid = format!("memory-{n}");
        drop(state);
        memory
    }

    /// Marks snapshot `snap` of image `name` as having a clone.
    pub(crate) fn clone_from(&self, name: &str, snap: &str) {
        self.state().clones.push((name.to_owned(), snap.to_owned()));
    }

    /// The ids in the trash, sorted.
    pub(crate) fn trash(&self) -> Vec<String> {
        let mut state = self.state();
        state.run_manager_tasks();
        let mut ids: Vec<String> = state.trash.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Trash entry `id` opened by another client (a reader that had it open when it moved), or
    /// let go.
    pub(crate) fn hold(&self, id: &str, held: bool) {
        const READER: u64 = u64::MAX;
        let mut state = self.state();
        let (_, image) = state.trash.get_mut(id).expect("a trash entry");
        image.open.retain(|&client| client != READER);
        if held {
            image.open.push(READER);
        }
    }

    /// Adds snapshot `snap` to image `name`, `protected` or not.
    pub(crate) fn snapshot(&self, name: &str, snap: &str, protected: bool) {
        let mut state = self.state();
        let image = state.images.get_mut(name).expect("an image");
        let copy = (image.size, image.data.clone(), protected);
        image.snapshots.insert(snap.to_owned(), copy);
    }

    /// Pool `name` through the current connection.
    pub(crate) fn pool(&self, name: &str) -> Arc<dyn Pool> {
        let client = self.state().client;
        Arc::new(MemoryPool {
            memory: self.clone(),
            name: name.to_owned(),
            client,
        })
    }

    pub(crate) fn faults(&self, change: impl FnOnce(&mut Faults)) {
        change(&mut self.state().faults);
    }

    pub(crate) fn counts(&self) -> Counts {
        self.state().counts
    }

    /// Blocklists the current connection: its operations go unanswered, its probes hear
    /// ESHUTDOWN; the next connection is a new client.
    pub(crate) fn fence(&self) {
        self.fence_and(|_| {});
    }

    /// Pool `name` of a client fenced without being told: its calls held until `release`
    /// (`Faults::calls_held`), its probes hearing ESHUTDOWN.
    pub(crate) fn silently_fenced(&self, name: &str) -> Arc<dyn Pool> {
        let pool = self.pool(name);
        self.fence_and(|f| f.calls_held = true);
        pool
    }

    /// Answers the calls held, and waits until the first of them has gone on from its answer.
    pub(crate) fn release_held_calls(&self) {
        self.release();
        wait_for("a held call answered", Duration::from_secs(1), || {
            self.counts().held_answered > 0
        });
        // What the call does with its answer, on its thread.
        std::thread::sleep(Duration::from_millis(50));
    }

    /// `fence`, and `change` to the faults at the same moment: no operation runs in between.
    pub(crate) fn fence_and(&self, change: impl FnOnce(&mut Faults)) {
        let mut state = self.state();
        let current = state.client;
        state.fence_client(current);
        change(&mut state.faults);
    }

    /// Answers the writes and the calls held so far: their data lands, and they complete.
    pub(crate) fn release(&self) {
        let mut state = self.state();
        state.faults.calls_held = false;
        state.faults.close_held = false;
        for held in std::mem::take(&mut state.held) {
            let len = held.data.len();
            if let Some(image) = state.images.get_mut(&held.image) {
                put(&mut image.data, held.offset, &held.data);
            }
            state.in_flight -= len;
            held.slot.complete(len as isize);
        }
        self.shared.released.notify_all();
    }

    /// The names of the images, sorted.
    pub(crate) fn images(&self) -> Vec<String> {
        let mut names: Vec<String> = self.state().images.keys().cloned().collect();
        names.sort();
        names
    }

    /// Image `name`'s bytes at its head (its size, zeros where never written), and its snapshots.
    pub(crate) fn image(&self, name: &str) -> Option<(Vec<u8>, Vec<String>)> {
        let state = self.state();
        let image = state.images.get(name)?;
        let mut snaps: Vec<String> = image.snapshots.keys().cloned().collect();
        snaps.sort();
        Some((head(image.size, &image.data), snaps))
    }

    /// The omap entries of `object`, as key -> value.
    pub(crate) fn omap(&self, object: &str) -> HashMap<String, String> {
        let state = self.state();
        state
            .omap
            .iter()
            .filter(|((o, _), _)| o == object)
            .map(|((_, key), value)| (key.clone(), value.clone()))
            .collect()
    }

    /// Removes image `name` as another process would (`sweep --remove`, an operator).
    pub(crate) fn remove_behind(&self, name: &str) {
        self.state().images.remove(name);
    }

    /// Completes `slot` with `result` now, or after `delay` on a thread of its own; `written`
    /// bytes are in flight until then.
    fn answer(
        &self,
        slot: Arc<Slot>,
        result: isize,
        delay: Option<Duration>,
        written: usize,
    ) -> Operation {
        let memory = self.clone();
        let complete = move |slot: &Slot| {
            memory.state().in_flight -= written;
            slot.complete(result);
        };
        match delay {
            None => complete(&slot),
            Some(delay) => {
                let later = Arc::clone(&slot);
                std::thread::spawn(move || {
                    std::thread::sleep(delay);
                    complete(&later);
                });
            }
        }
        Operation(slot)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        sync::lock(&self.shared.state)
    }
}

/// Asserts that `err` is the end of a wait on a fenced client (its probe heard ESHUTDOWN),
/// `started` less than 2 s before (the probe's first look comes after 300 ms under test).
pub(crate) fn assert_fenced_within_seconds(err: &Error, started: Instant) {
    assert_fenced_within(err, started, Duration::from_secs(2));
}

/// Asserts that `err` is the end of a wait on a fenced client, `started` less than `bound`
/// before.
pub(crate) fn assert_fenced_within(err: &Error, started: Instant, bound: Duration) {
    assert!(
        matches!(
            err,
            Error::Fenced {
                errno: libc::ESHUTDOWN,
                ..
            }
        ),
        "{err}"
    );
    let took = started.elapsed();
    assert!(took < bound, "{took:?}");
}

/// Waits until `done`, polling: a test fails naming `what` after `within`.
pub(crate) fn wait_for(what: &str, within: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Bytes `0..size` of an image whose data was written up to `data.len()`.
fn head(size: u64, data: &[u8]) -> Vec<u8> {
    let mut bytes = data.to_vec();
    bytes.resize(size as usize, 0);
    bytes
}

fn put(data: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let (start, end) = (offset as usize, offset as usize + bytes.len());
    if data.len() < end {
        data.resize(end, 0);
    }
    data[start..end].copy_from_slice(bytes);
}

struct MemoryPool {
    memory: Memory,
    name: String,
    /// The connection this pool is of.
    client: u64,
}

impl MemoryPool {
    fn fenced(&self, state: &State) -> bool {
        state.fenced.contains(&self.client)
    }

    /// The state, once a call is answered: not while calls are held (`Faults::calls_held`).
    fn answered(&self) -> std::sync::MutexGuard<'_, State> {
        let mut state = self.memory.state();
        let held = state.faults.calls_held;
        while state.faults.calls_held {
            state = sync::wait(&self.memory.shared.released, state);
        }
        state.counts.held_answered += usize::from(held);
        state
    }

    fn error(&self, op: Op, image: &str, errno: i32) -> Error {
        Error::ceph(op, &self.target(image), -i64::from(errno))
    }
}

impl Pool for MemoryPool {
    fn target(&self, image: &str) -> Target {
        Target::image(&self.name, image)
    }

    fn create(&self, name: &str, size: u64, _order: u8) -> Result<()> {
        let mut state = self.answered();
        if self.fenced(&state) {
            return Err(self.error(Op::Create, name, libc::ESHUTDOWN));
        }
        if state.images.contains_key(name) {
            return Err(self.error(Op::Create, name, libc::EEXIST));
        }
        state.next_id += 1;
        let id = format!("{:x}", 0xabc0 + state.next_id);
        state.images.insert(
            name.to_owned(),
            Stored {
                id,
                size,
                data: Vec::new(),
                snapshots: HashMap::new(),
                open: Vec::new(),
            },
        );
        Ok(())
    }

    fn open(&self, name: &str, snapshot: Option<&str>) -> Result<Box<dyn Image>> {
        let mut state = self.answered();
        if self.fenced(&state) {
            return Err(self.error(Op::Open, name, libc::ESHUTDOWN));
        }
        let Some(image) = state.images.get_mut(name) else {
            return Err(self.error(Op::Open, name, libc::ENOENT));
        };
        if snapshot.is_some_and(|snap| !image.snapshots.contains_key(snap)) {
            return Err(self.error(Op::Open, name, libc::ENOENT));
        }
        image.open.push(self.client);
        Ok(Box::new(MemoryImage {
            memory: self.memory.clone(),
            client: self.client,
            name: name.to_owned(),
            id: image.id.clone(),
            snapshot: snapshot.map(str::to_owned),
            target: self.target(name),
        }))
    }

    fn image_id(&self, name: &str) -> Result<String> {
        let state = self.memory.state();
        match state.images.get(name) {
            Some(image) => Ok(image.id.clone()),
            None => Err(self.error(Op::Open, name, libc::ENOENT)),
        }
    }

    fn remove(&self, name: &str, id: &str, snapshot: Option<&str>) -> Result<()> {
        let mut state = self.memory.state();
        if !state.faults.remove_errors.is_empty() {
            let errno = state.faults.remove_errors.remove(0);
            return Err(self.error(Op::Remove, name, errno));
        }
        if self.fenced(&state) {
            return Err(self.error(Op::Remove, name, libc::ESHUTDOWN));
        }
        let Some(image) = state.images.get_mut(name) else {
            return Err(self.error(Op::Remove, name, libc::ENOENT));
        };
        if image.id != id {
            return Err(self.error(Op::Remove, name, libc::ESTALE));
        }
        if let Some(snap) = snapshot {
            image.snapshots.remove(snap);
        }
        if !image.snapshots.is_empty() {
            return Err(self.error(Op::Remove, name, libc::ENOTEMPTY));
        }
        let fenced = &state.fenced;
        let image = &state.images[name];
        if image.open.iter().any(|client| !fenced.contains(client)) {
            return Err(self.error(Op::Remove, name, libc::EBUSY));
        }
        state.images.remove(name);
        Ok(())
    }

    fn probe(&self, id: Option<&str>) -> i32 {
        let state = self.memory.state();
        if self.fenced(&state) {
            -libc::ESHUTDOWN
        } else if id.is_none_or(|id| state.images.values().any(|image| image.id == id)) {
            0
        } else {
            -libc::ENOENT
        }
    }

    fn omap_write(&self, write: &OmapWrite<'_>) -> Result<()> {
        let mut state = self.memory.state();
        let entry = (write.object.to_owned(), write.key.to_owned());
        let refused = if self.fenced(&state) {
            Some(libc::ESHUTDOWN)
        } else if write.expect.is_some()
            && state.omap.get(&entry).map(String::as_str) != write.expect
        {
            Some(libc::ECANCELED)
        } else {
            None
        };
        if let Some(errno) = refused {
            return Err(Error::ceph(write.op, write.target, -i64::from(errno)));
        }
        match write.change {
            OmapChange::Set(value) => state.omap.insert(entry, value.to_owned()),
            OmapChange::Remove => state.omap.remove(&entry),
        };
        Ok(())
    }

    fn client(&self) -> (u64, Option<String>) {
        (self.client, Some(format!("127.0.0.1:0/{}", self.client)))
    }

    fn forget_if_refused(&self, _err: &Error) {}

    fn forget_fenced(&self) {}

    fn reconnect(&self) -> Result<Arc<dyn Pool>> {
        Ok(self.memory.pool(&self.name))
    }

    fn bounded(&self, _seconds: u32) -> Result<Arc<dyn Pool>> {
        let mut state = self.memory.state();
        state.counts.bounded_asked += 1;
        if let Some(errno) = state.faults.bounded_error {
            return Err(self.error(Op::Purge, &self.name, errno));
        }
        let same = state.faults.timeouts_set;
        drop(state);
        if same {
            return Ok(Arc::new(MemoryPool {
                memory: self.memory.clone(),
                name: self.name.clone(),
                client: self.client,
            }));
        }
        Ok(self.memory.pool(&self.name))
    }

    fn snap_unprotect(&self, name: &str, snap: &str, _clones_first: bool) -> Result<()> {
        let mut state = self.answered();
        if self.fenced(&state) {
            return Err(self.error(Op::UnprotectSnapshot, name, libc::ESHUTDOWN));
        }
        let cloned = state.clones.contains(&(name.to_owned(), snap.to_owned()));
        let Some(image) = state.images.get_mut(name) else {
            return Err(self.error(Op::Open, name, libc::ENOENT));
        };
        let errno = match image.snapshots.get_mut(snap) {
            None => libc::ENOENT,
            Some(_) if cloned => libc::EBUSY,
            Some((_, _, protected)) if !*protected => libc::EINVAL,
            Some((_, _, protected)) => {
                *protected = false;
                return Ok(());
            }
        };
        Err(self.error(Op::UnprotectSnapshot, name, errno))
    }

    fn snap_remove(&self, name: &str, snap: &str) -> Result<()> {
        let mut state = self.memory.state();
        if self.fenced(&state) {
            return Err(self.error(Op::RemoveSnapshot, name, libc::ESHUTDOWN));
        }
        let Some(image) = state.images.get_mut(name) else {
            return Err(self.error(Op::Open, name, libc::ENOENT));
        };
        let errno = match image.snapshots.get(snap) {
            None => libc::ENOENT,
            Some((_, _, true)) => libc::EBUSY,
            Some(_) => {
                image.snapshots.remove(snap);
                return Ok(());
            }
        };
        Err(self.error(Op::RemoveSnapshot, name, errno))
    }

    fn inspect(&self, name: &str) -> Result<io::Inspected> {
        let state = self.answered();
        if self.fenced(&state) {
            return Err(self.error(Op::Open, name, libc::ESHUTDOWN));
        }
        let Some(image) = state.images.get(name) else {
            return Err(self.error(Op::Open, name, libc::ENOENT));
        };
        Ok(io::Inspected {
            id: image.id.clone(),
            snapshots: image.snapshots.len(),
            watchers: image
                .open
                .iter()
                .filter(|client| !state.fenced.contains(client))
                .count(),
        })
    }

    fn trash_move(&self, name: &str) -> Result<()> {
        let mut state = self.memory.state();
        if self.fenced(&state) {
            return Err(self.error(Op::MoveToTrash, name, libc::ESHUTDOWN));
        }
        let Some(image) = state.images.remove(name) else {
            return Err(self.error(Op::MoveToTrash, name, libc::ENOENT));
        };
        state
            .trash
            .insert(image.id.clone(), (name.to_owned(), image));
        Ok(())
    }

    fn trash_snap_remove(&self, name: &str, id: &str, snap: &str) -> Result<()> {
        let mut state = self.memory.state();
        if self.fenced(&state) {
            return Err(self.error(Op::RemoveSnapshot, name, libc::ESHUTDOWN));
        }
        let removed = state
            .trash
            .get_mut(id)
            .and_then(|(_, image)| image.snapshots.remove(snap));
        match removed {
            Some(_) => Ok(()),
            None => Err(self.error(Op::RemoveSnapshot, name, libc::ENOENT)),
        }
    }

    fn trash_remove(&self, name: &str, id: &str) -> Result<()> {
        let mut state = self.memory.state();
        if self.fenced(&state) {
            return Err(self.error(Op::Purge, name, libc::ESHUTDOWN));
        }
        let fenced = state.fenced.clone();
        let Some((_, image)) = state.trash.get(id) else {
            return Err(self.error(Op::Purge, name, libc::ENOENT));
        };
        if !image.snapshots.is_empty() {
            return Err(self.error(Op::Purge, name, libc::ENOTEMPTY));
        }
        if image.open.iter().any(|client| !fenced.contains(client)) {
            return Err(self.error(Op::Purge, name, libc::EBUSY));
        }
        state.trash.remove(id);
        state.counts.trash_removals += 1;
        Ok(())
    }

    fn in_trash(&self, id: &str) -> std::result::Result<bool, i32> {
        let mut state = self.memory.state();
        if self.fenced(&state) {
            return Err(-libc::ESHUTDOWN);
        }
        state.run_manager_tasks();
        Ok(state.trash.contains_key(id))
    }

    fn manager_says_busy(&self, id: &str, _wait: Duration) -> bool {
        let state = self.memory.state();
        let fenced = &state.fenced;
        state.manager_tasks.iter().any(|(task, _)| task == id)
            && state
                .trash
                .get(id)
                .is_some_and(|(_, image)| image.open.iter().any(|client| !fenced.contains(client)))
    }

    fn manager_trash_remove(
        &self,
        id: &str,
        _wait: Duration,
    ) -> std::result::Result<(), (i32, String)> {
        let mut state = self.memory.state();
        if self.fenced(&state) {
            return Err((-libc::ESHUTDOWN, String::new()));
        }
        state.counts.manager_asked += 1;
        if let Some(errno) = state.faults.manager_error {
            return Err((
                -errno,
                format!("[errno {errno}] the manager did not take it"),
            ));
        }
        let due = Instant::now() + state.faults.manager_takes;
        state.manager_tasks.push((id.to_owned(), due));
        Ok(())
    }

    fn user(&self) -> (String, String) {
        ("client.admin".to_owned(), self.memory.state().fsid.clone())
    }
}

struct MemoryImage {
    memory: Memory,
    client: u64,
    name: String,
    id: String,
    snapshot: Option<String>,
    target: Target,
}

impl MemoryImage {
    /// A synchronous call: refused at a snapshot, failed by `fault`, or, from a fenced client,
    /// unanswered until the held operations are released (then ESHUTDOWN).
    fn call(
        &self,
        op: Op,
        fault: impl FnOnce(&Faults) -> Option<i32>,
        body: impl FnOnce(&mut Stored),
    ) -> Result<()> {
        let mut state = self.memory.state();
        if state.fenced.contains(&self.client) {
            let _held = sync::wait(&self.memory.shared.released, state);
            return Err(self.error(op, libc::ESHUTDOWN));
        }
        if self.snapshot.is_some() {
            return Err(self.error(op, libc::EROFS));
        }
        if let Some(errno) = fault(&state.faults) {
            return Err(self.error(op, errno));
        }
        match state.images.get_mut(&self.name) {
            Some(image) if image.id == self.id => {
                body(image);
                Ok(())
            }
            _ => Err(self.error(op, libc::ENOENT)),
        }
    }

    fn error(&self, op: Op, errno: i32) -> Error {
        Error::ceph(op, &self.target, -i64::from(errno))
    }
}

impl Image for MemoryImage {
    fn target(&self) -> &Target {
        &self.target
    }

    fn id(&self) -> Result<String> {
        Ok(self.id.clone())
    }

    fn size(&self) -> Result<u64> {
        let state = self.memory.state();
        let image = state
            .images
            .get(&self.name)
            .ok_or_else(|| self.error(Op::ReadSize, libc::ENOENT))?;
        Ok(match &self.snapshot {
            Some(snap) => image.snapshots.get(snap).map_or(0, |(size, _, _)| *size),
            None => image.size,
        })
    }

    fn resize(&self, size: u64) -> Result<()> {
        self.memory.state().counts.resizes += 1;
        self.call(
            Op::Resize,
            |faults| faults.resize_error,
            |image| {
                image.size = size;
                image.data.truncate(size as usize);
            },
        )
    }

    fn flush(&self) -> Result<()> {
        self.call(Op::Flush, |faults| faults.flush_error, |_| {})
    }

    fn snap_create(&self, snap: &str) -> Result<()> {
        self.call(
            Op::CreateSnapshot,
            |faults| faults.snapshot_error,
            |image| {
                let data = head(image.size, &image.data);
                image
                    .snapshots
                    .insert(snap.to_owned(), (image.size, data, false));
            },
        )
    }

    fn snap_protect(&self, snap: &str) -> Result<()> {
        self.call(
            Op::ProtectSnapshot,
            |_| None,
            |image| {
                if let Some(entry) = image.snapshots.get_mut(snap) {
                    entry.2 = true;
                }
            },
        )
    }

    unsafe fn write(&self, offset: u64, data: &[u8]) -> Result<Box<dyn io::Pending>> {
        let slot = Arc::new(Slot::default());
        let mut state = self.memory.state();
        state.counts.writes += 1;
        let nth = state.counts.writes;
        state.in_flight += data.len();
        state.counts.most_in_flight = state.counts.most_in_flight.max(state.in_flight);
        let fenced = state.fenced.contains(&self.client);
        if fenced || state.faults.held_from.is_some_and(|from| nth >= from) {
            state.held.push(Held {
                slot: Arc::clone(&slot),
                image: self.name.clone(),
                offset,
                data: if fenced { Vec::new() } else { data.to_vec() },
            });
            return Ok(Box::new(Operation(slot)));
        }
        let result = match state.faults.write_error {
            Some((at, errno)) if at == nth => {
                if errno == libc::ESHUTDOWN {
                    state.fence_client(self.client);
                }
                -(errno as isize)
            }
            _ => match state.images.get_mut(&self.name) {
                Some(image) if image.id == self.id && offset + data.len() as u64 <= image.size => {
                    put(&mut image.data, offset, data);
                    data.len() as isize
                }
                Some(image) if image.id == self.id => -(libc::EINVAL as isize),
                _ => -(libc::ENOENT as isize),
            },
        };
        let delay = state.faults.delay;
        drop(state);
        let written = data.len();
        Ok(Box::new(self.memory.answer(slot, result, delay, written)))
    }

    unsafe fn read(&self, offset: u64, into: *mut u8, len: usize) -> Result<Box<dyn io::Pending>> {
        let slot = Arc::new(Slot::default());
        let mut state = self.memory.state();
        state.counts.reads += 1;
        let nth = state.counts.reads;
        let result = match (state.faults.read_error, state.images.get(&self.name)) {
            (Some((at, errno)), _) if at == nth => -(errno as isize),
            (_, Some(image)) if image.id == self.id => {
                let bytes = match &self.snapshot {
                    Some(snap) => image
                        .snapshots
                        .get(snap)
                        .map(|(size, data, _)| head(*size, data))
                        .unwrap_or_default(),
                    None => head(image.size, &image.data),
                };
                let start = (offset as usize).min(bytes.len());
                let end = (offset as usize + len).min(bytes.len());
                // SAFETY: `into` is `len` writable bytes (the caller's contract), and
                // end - start <= len.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes[start..].as_ptr(), into, end - start)
                };
                (end - start) as isize
            }
            _ => -(libc::ENOENT as isize),
        };
        if state.fenced.contains(&self.client) {
            // A fenced client's read goes unanswered, whatever it would have read.
            state.held.push(Held {
                slot: Arc::clone(&slot),
                image: self.name.clone(),
                offset,
                data: Vec::new(),
            });
            return Ok(Box::new(Operation(slot)));
        }
        let delay = state.faults.delay;
        drop(state);
        Ok(Box::new(self.memory.answer(slot, result, delay, 0)))
    }
}

impl Drop for MemoryImage {
    fn drop(&mut self) {
        let mut state = self.memory.state();
        while state.faults.close_held {
            state = sync::wait(&self.memory.shared.released, state);
        }
        if let Some(image) = state.images.get_mut(&self.name) {
            if let Some(at) = image.open.iter().position(|client| *client == self.client) {
                image.open.remove(at);
            }
        }
    }
}

#[derive(Default)]
struct Slot {
    result: Mutex<Option<isize>>,
    done: Condvar,
}

impl Slot {
    fn complete(&self, result: isize) {
        *sync::lock(&self.result) = Some(result);
        self.done.notify_all();
    }
}

/// One operation in flight. Its data was copied when it started, so dropping it need not wait.
struct Operation(Arc<Slot>);

impl io::Pending for Operation {
    fn is_done(&self) -> bool {
        sync::lock(&self.0.result).is_some()
    }

    fn wait(&self, poll: Poll) -> Result<isize> {
        let result = wait_until(&self.0.result, &self.0.done, Option::is_some, poll)?;
        Ok(result.expect("waited for it"))
    }
}

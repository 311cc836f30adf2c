//! The image I/O the transfers and the deletes run on: a pool of images and its trash (`Pool`),
//! an image open for writing or reading (`Image`), and an operation in flight on it
//! (`Pending`). librbd is one implementation (`rbd::pool`); an in-memory one, whose faults a
//! test chooses (`memory`), is the other, so that uploads, downloads, the bound, every abort
//! path, deletes and their purge run in `cargo test`.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Op, Result, Target};
use crate::wait::Poll;

/// One pool of one cluster connection, as a transfer uses it.
pub trait Pool: Send + Sync + 'static {
    /// `image` in this pool, acted on as this connection's entity: what errors name.
    fn target(&self, image: &str) -> Target;

    /// Creates image `name` of `size` bytes and `2^order`-byte objects, with the cluster's
    /// default features; EEXIST if there is one.
    fn create(&self, name: &str, size: u64, order: u8) -> Result<()>;

    /// Opens `name` at `snapshot` (read only), or at its writable head.
    fn open(&self, name: &str, snapshot: Option<&str>) -> Result<Box<dyn Image>>;

    /// The id of image `name`, without opening it.
    fn image_id(&self, name: &str) -> Result<String>;

    /// Removes image `name`, and first its `snapshot` if given, if it is still the image of id
    /// `id` (ESTALE if the name is another image's now; ENOENT if there is none).
    fn remove(&self, name: &str, id: &str, snapshot: Option<&str>) -> Result<()>;

    /// Breaks the locks on the header of image `id` that client `owner` (its global id, as
    /// `client` gives it) holds, and only those: left by a close of this process's that could
    /// not release them while the cluster was away, they would refuse its removal for as long
    /// as that client lives (librbd takes a lock's owner for alive while any watch of its
    /// address is there). How many it broke.
    fn break_locks_of(&self, _id: &str, _owner: u64) -> Result<usize> {
        Ok(0)
    }

    /// Asks the cluster for the header of image `id` (None: for the pool's directory of
    /// images), blocking: 0, or the negative errno of the answer (a fenced client hears
    /// ESHUTDOWN, a removed image has none: ENOENT).
    fn probe(&self, id: Option<&str>) -> i32;

    /// Sets or removes one key of an object's omap, conditionally (`OmapWrite`).
    fn omap_write(&self, write: &OmapWrite<'_>) -> Result<()>;

    /// This connection's client: its global id (which names its watches), and its address
    /// (which fencing blocklists) when known.
    fn client(&self) -> (u64, Option<String>);

    /// Drops the connection from the process's cache if `err` says the cluster refused it, so
    /// that the next transfer connects again.
    fn forget_if_refused(&self, err: &Error);

    /// Drops the connection, which was fenced (blocklisted), from the process's cache.
    fn forget_fenced(&self);

    /// The same pool through a new connection, in place of this one, which was fenced: for the
    /// clean-up of its transfer.
    fn reconnect(&self) -> Result<Arc<dyn Pool>>;

    /// The same pool through a connection whose operations time out after `seconds`, or this
    /// one if its own do: for work in the background, which must not wait on an absent cluster
    /// for ever (glance sets no timeout by default).
    fn bounded(&self, seconds: u32) -> Result<Arc<dyn Pool>>;

    // Images as a delete uses them (`delete`).

    /// Unprotects snapshot `snap` of image `name`: EBUSY if it has clones, and with
    /// `clones_first` before trying (as glance_store up to 4.3.1 does); EINVAL if it is not
    /// protected; ENOENT if there is no such snapshot, or no such image.
    fn snap_unprotect(&self, name: &str, snap: &str, clones_first: bool) -> Result<()>;

    /// Removes snapshot `snap` (unprotected) of image `name`: ENOENT if there is none.
    fn snap_remove(&self, name: &str, snap: &str) -> Result<()>;

    /// Image `name` as a delete judges it, looked at without a watch of its own.
    fn inspect(&self, name: &str) -> Result<Inspected>;

    /// Moves image `name` to the pool's trash, removable at once.
    fn trash_move(&self, name: &str) -> Result<()>;

    // The pool's trash, as the purge of a delete uses it (`delete::purge`).

    /// Removes snapshot `snap` of trash entry `id` (image `name`): its data cannot go with
    /// snapshots left. ENOENT if it has no such snapshot, or there is no such entry.
    fn trash_snap_remove(&self, name: &str, id: &str, snap: &str) -> Result<()>;

    /// Removes trash entry `id` (image `name`) and its data: EBUSY while a client still has it
    /// open, ENOENT once it is gone.
    fn trash_remove(&self, name: &str, id: &str) -> Result<()>;

    /// Whether trash entry `id` is there: false only on the answer that there is none; no
    /// answer (a timeout, a fenced client) is its negative errno, no proof either way.
    fn in_trash(&self, id: &str) -> std::result::Result<bool, i32>;

    /// Whether the Ceph manager's task removing trash entry `id` last failed because a client
    /// has the entry open (EBUSY, in `rbd task list`): false while it has not failed so, and
    /// where no manager answers within `wait`.
    fn manager_says_busy(&self, id: &str, wait: Duration) -> bool;

    /// Hands the removal of trash entry `id` to the Ceph manager's task queue (`rbd task add
    /// trash remove`), waiting `wait` at most for its answer: if it did not take it, the
    /// negative errno and the status text it (or the connect) gave.
    fn manager_trash_remove(
        &self,
        id: &str,
        wait: Duration,
    ) -> std::result::Result<(), (i32, String)>;

    /// This connection's user: its entity (`client.glance`), and the cluster's fsid with it
    /// (what names one user across connections).
    fn user(&self) -> (String, String);

    /// Whether this connection's operations time out: a call on it ends by itself.
    fn times_out(&self) -> bool {
        false
    }
}

/// An image as a delete judges it (`Pool::inspect`).
pub struct Inspected {
    pub id: String,
    /// Its snapshots (the users', in librbd's default namespace).
    pub snapshots: usize,
    /// The clients that watch it: its readers and writers.
    pub watchers: usize,
}

/// A change of `key` in the omap of `object` (`Pool::omap_write`).
pub struct OmapWrite<'a> {
    pub object: &'a str,
    pub key: &'a str,
    pub change: OmapChange<'a>,
    /// Only if the key holds exactly this, else ECANCELED and nothing changes.
    pub expect: Option<&'a str>,
    /// What a failure is reported as, and on what.
    pub op: Op,
    pub target: &'a Target,
}

#[derive(Clone, Copy, Debug)]
pub enum OmapChange<'a> {
    Set(&'a str),
    Remove,
}

/// An open image. Closed when dropped: its exclusive lock goes with it.
pub trait Image: Send + 'static {
    fn target(&self) -> &Target;

    /// Its id: unlike its name, never given to another image.
    fn id(&self) -> Result<String>;

    /// Its size, or that of the snapshot it was opened at.
    fn size(&self) -> Result<u64>;

    fn resize(&self, size: u64) -> Result<()>;

    fn flush(&self) -> Result<()>;

    fn snap_create(&self, snap: &str) -> Result<()>;

    fn snap_protect(&self, snap: &str) -> Result<()>;

    /// Starts writing `data` at `offset`.
    ///
    /// # Safety
    ///
    /// `data` must stay valid and unchanged until the operation returned has completed: waited
    /// for, or dropped (dropping waits for it).
    unsafe fn write(&self, offset: u64, data: &[u8]) -> Result<Box<dyn Pending>>;

    /// Starts reading `len` bytes at `offset` into `into`.
    ///
    /// # Safety
    ///
    /// `into` must point to `len` writable bytes that nothing else reads or writes, and that
    /// stay in place, until the operation returned has completed: waited for, or dropped.
    unsafe fn read(&self, offset: u64, into: *mut u8, len: usize) -> Result<Box<dyn Pending>>;
}

/// An operation in flight. Dropping it waits for it to end: its buffer may be in use until then.
pub trait Pending: Send {
    fn is_done(&self) -> bool;

    /// Waits for the operation, calling `poll` every `POLL_INTERVAL` while it blocks (its error
    /// ends the wait): bytes done, or a negative errno.
    fn wait(&self, poll: Poll) -> Result<isize>;
}

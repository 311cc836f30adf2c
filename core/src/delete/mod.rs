//! glance's delete of an image, returning before its data is gone: the image moves to the pool's
//! trash, and its snapshot and data objects are removed in the background (`purge`).
//!
//! The steps and refusals are the stock driver's (glance_store's `_delete_image`), whose
//! releases differ in two places (`Rules`). Stock then calls `rbd remove`, which returns only
//! once every data object is gone; here, the checks that removal makes before it touches data
//! (snapshots left: ENOTEMPTY; a client with the image open: EBUSY) come first, then the move.
//!
//! A deletion is marked in the pool's index object `INDEX` (keyed by image id: who deletes, which
//! image) before the move, and the mark cleared once the data is gone, so that a trash entry a
//! killed process left can be told from another tool's (`glance-rbd-native status` and `sweep`).

pub(crate) mod purge;
#[cfg(test)]
mod scenarios;

use std::fmt::Write as _;
use std::sync::Arc;

use crate::error::{Error, Op, Result};
use crate::io::{OmapChange, OmapWrite, Pool};
use crate::json::json_string;
use crate::rbd::cluster::Cluster;
use crate::rbd::pool::RbdPool;
use crate::transfer::fence::{self, Fence};
use crate::transfer::mark::{given_up, identity, unix_now};
use crate::wait::Poll;

/// The index object of deletions in progress, one per pool. Its format is read by
/// python/glance_rbd_native/leftovers.
pub const INDEX: &str = "glance_rbd_native.deletes";

/// Where the stock driver's releases differ (python/glance_rbd_native/compat.py reads them off
/// the installed one).
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    /// Up to 4.3.1: a snapshot with clones is refused (EBUSY) before it is unprotected.
    pub refuse_clones_first: bool,
    /// 4.3.2 on: an image with other snapshots left moves to the trash as it is, and stays there
    /// (its data is kept for them). Before: refused (ENOTEMPTY).
    pub trash_with_snapshots: bool,
}

/// What a delete did.
#[derive(Debug)]
pub enum Deleted {
    /// The image is in the trash as `id`; its data is being removed in the background.
    Purging { id: String },
    /// The image had other snapshots: it is in the trash as `id`, with them, as stock leaves it.
    KeptInTrash { id: String },
}

/// Deletes image `name` of `pool`, and first its `snapshot`, as the stock driver does.
///
/// Removing a snapshot waits for the monitors to commit a new map of the pool (its snap id is
/// released), the slowest step by far (70-150 ms on the test cluster, against 10-30 for the move
/// to the trash). So when the image is to be purged, glance's snapshot is only unprotected here
/// (which refuses one with clones, as stock's delete does) and moves to the trash with the
/// image; the purge removes it first. Where the delete stops short (a client has the image
/// open, other snapshots are left), the snapshot is removed before it returns, as stock's is.
///
/// The steps are guarded as an upload's librbd calls are (`fence::guarded`): a fenced client's
/// delete fails (and the caller connects again), and `poll` ends it.
pub fn delete(
    cluster: &Arc<Cluster>,
    pool: &str,
    name: &str,
    snapshot: Option<&str>,
    rules: Rules,
    poll: Poll,
) -> Result<Deleted> {
    guarded(RbdPool::open(cluster, pool)?, name, snapshot, rules, poll)
}

/// `delete_in` on a thread of its own, watched for the client's fencing.
fn guarded(
    pool: Arc<dyn Pool>,
    name: &str,
    snapshot: Option<&str>,
    rules: Rules,
    poll: Poll,
) -> Result<Deleted> {
    let mut watch = Fence::client(Arc::clone(&pool), pool.target(name));
    let (name, snapshot) = (name.to_owned(), snapshot.map(str::to_owned));
    fence::guarded(&mut watch, Some(poll), move || {
        delete_in(pool, &name, snapshot.as_deref(), rules)
    })?
}

/// `delete`, in `pool`.
fn delete_in(
    pool: Arc<dyn Pool>,
    name: &str,
    snapshot: Option<&str>,
    rules: Rules,
) -> Result<Deleted> {
    // glance's snapshot, if there is one: unprotected, still to be removed.
    let snapshot = match snapshot {
        Some(snap) => unprotect(&*pool, name, snap, rules)?.then_some(snap),
        None => None,
    };
    let image = pool.inspect(name)?;
    let id = image.id;
    let target = pool.target(name);
    let others = image
        .snapshots
        .saturating_sub(usize::from(snapshot.is_some()));
    // `rbd remove` refuses an image that a client has open, a reader or a writer: so does this,
    // rather than move it from under them.
    let busy = others == 0 && image.watchers > 0;
    if others > 0 || busy {
        if let Some(snap) = snapshot {
            remove_snapshot(&*pool, name, snap)?;
        }
    }
    if others > 0 {
        if !rules.trash_with_snapshots {
            return Err(Error::ceph(
                Op::Remove,
                &target,
                -i64::from(libc::ENOTEMPTY),
            ));
        }
        pool.trash_move(name)?;
        return Ok(Deleted::KeptInTrash { id });
    }
    if busy {
        return Err(Error::ceph(Op::Remove, &target, -i64::from(libc::EBUSY)));
    }
    let mark = mark(&*pool, name, &id, snapshot);
    if let Err(err) = pool.trash_move(name) {
        if let Some(snap) = snapshot {
            remove_snapshot(&*pool, name, snap).unwrap_or_else(|err| log::warn!("{err}"));
        }
        if let Some(mark) = &mark {
            unmark(&*pool, name, &id, mark);
        }
        return Err(err);
    }
    purge::queue(purge::Job {
        pool,
        name: name.to_owned(),
        id: id.clone(),
        snapshot: snapshot.map(str::to_owned),
        mark,
        deleted: std::time::Instant::now(),
    });
    Ok(Deleted::Purging { id })
}

/// Unprotects `snap` of image `name`, as stock does before removing it: one with clones is
/// refused (EBUSY, from librbd's unprotect, or first under `refuse_clones_first`). Whether it
/// is there.
fn unprotect(pool: &dyn Pool, name: &str, snap: &str, rules: Rules) -> Result<bool> {
    match pool.snap_unprotect(name, snap, rules.refuse_clones_first) {
        // EINVAL: not protected.
        Err(err) if err.errno() == Some(libc::EINVAL) => Ok(true),
        // No such snapshot; no such image is an error of the open.
        Err(Error::Ceph {
            op,
            errno: libc::ENOENT,
            ..
        }) if op != Op::Open => Ok(false),
        other => other.map(|()| true),
    }
}

/// Removes `snap` (unprotected) of image `name`; one that is not there is fine.
fn remove_snapshot(pool: &dyn Pool, name: &str, snap: &str) -> Result<()> {
    match pool.snap_remove(name, snap) {
        Err(err) if err.errno() == Some(libc::ENOENT) => Ok(()),
        other => other,
    }
}

/// Marks the deletion of image `id`, before its move to the trash, with glance's `snapshot` if
/// it moves with the image: the JSON written, or None if it could not be (the delete goes on:
/// without a mark, a process killed before the data is gone leaves an entry that `sweep` does
/// not know as its own, as stock leaves one).
fn mark(pool: &dyn Pool, name: &str, id: &str, snapshot: Option<&str>) -> Option<String> {
    let (client, address) = pool.client();
    let mut value = identity(client, address.as_deref());
    if let Some(snap) = snapshot {
        let _ = write!(value, "\"snapshot\":{},", json_string(snap));
    }
    let _ = write!(
        value,
        "\"image\":{},\"image_id\":{},\"started\":{:.3}}}",
        json_string(name),
        json_string(id),
        unix_now()
    );
    let written = pool.omap_write(&OmapWrite {
        object: INDEX,
        key: id,
        change: OmapChange::Set(&value),
        expect: None,
        op: Op::MarkDelete,
        target: &pool.target(name),
    });
    match written {
        Ok(()) => Some(value),
        Err(err) => {
            log::warn!(
                "{err}: should this process die before its data is removed, `glance-rbd-native \
                 sweep` will not know the trash entry {id} as its own"
            );
            None
        }
    }
}

/// Says in the mark of image `id` (if it still holds `value`) that this process gave up removing
/// its data, at `when` (seconds since the epoch): `glance-rbd-native sweep --remove` then removes
/// it while this process runs. Whether the mark says so now.
pub(crate) fn give_up(pool: &dyn Pool, name: &str, id: &str, value: &str, when: f64) -> bool {
    let Some(given_up) = given_up(value, when) else {
        return false;
    };
    match pool.omap_write(&OmapWrite {
        object: INDEX,
        key: id,
        change: OmapChange::Set(&given_up),
        expect: Some(value),
        op: Op::MarkDelete,
        target: &pool.target(name),
    }) {
        Ok(()) => true,
        Err(err) => {
            log::warn!("{err}");
            false
        }
    }
}

/// Clears the mark of image `id`, if it still holds `value`.
pub(crate) fn unmark(pool: &dyn Pool, name: &str, id: &str, value: &str) {
    let target = pool.target(name);
    match pool.omap_write(&OmapWrite {
        object: INDEX,
        key: id,
        change: OmapChange::Remove,
        expect: Some(value),
        op: Op::MarkDelete,
        target: &target,
    }) {
        Ok(()) => {}
        Err(err) if err.errno() == Some(libc::ECANCELED) => log::info!(
            "the deletion mark of {target} (id {id}) was changed or removed by another process \
             (`glance-rbd-native sweep`): left as it is"
        ),
        Err(err) => log::warn!("{err}"),
    }
}

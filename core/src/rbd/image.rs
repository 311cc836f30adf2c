//! An open librbd image and the image-level calls of an upload (create, resize, snapshot,
//! remove) and of a download (open at a snapshot, size).

use std::ffi::CString;
use std::ptr;
use std::sync::Arc;

use super::cluster::{IoCtx, cstring};
use super::ffi;
use crate::error::{Error, Op, Result, Target, check};

/// Creates a format-2 image, as `rbd.RBD().create(..., old_format=False)` does for glance.
pub(crate) fn create(ioctx: &IoCtx, name: &str, size: u64, features: u64, order: u8) -> Result<()> {
    let name_c = cstring(name)?;
    let mut order = i32::from(order);
    // SAFETY: the ioctx is live; order is an in/out parameter librbd may adjust.
    let ret =
        unsafe { ffi::rbd_create2(ioctx.handle(), name_c.as_ptr(), size, features, &mut order) };
    check(ret.into(), Op::Create, &ioctx.target(name))?;
    Ok(())
}

/// Removes image `name` if it is still the image of id `id`, and was closed. The name may have
/// gone to a new image since (glance retries an upload under the same image id), so this acts
/// on the id: the image goes to the trash by name, and out of it only if that trash entry is
/// `id`; an entry of another id is put back under its name, and this fails with ESTALE. An
/// image that is not there is an error (ENOENT).
pub(crate) fn remove(ioctx: &IoCtx, name: &str, id: &str) -> Result<()> {
    let target = ioctx.target(name);
    let (name_c, id_c) = (cstring(name)?, cstring(id)?);
    // Moved by an earlier attempt, whose removal from the trash failed: resumed there.
    if trash_name(ioctx, &id_c).as_deref() != Some(name) {
        // The name of another image now: left alone, without a trip through the trash (librbd
        // moves even an open image there, taking its exclusive lock from its writer).
        if id_of(ioctx, name)? != id {
            return Err(Error::ceph(Op::Remove, &target, -i64::from(libc::ESTALE)));
        }
        // SAFETY: the ioctx is live; name_c is NUL-terminated. No delay: removable at once.
        let ret = unsafe { ffi::rbd_trash_move(ioctx.handle(), name_c.as_ptr(), 0) };
        check(ret.into(), Op::Remove, &target)?;
        if trash_name(ioctx, &id_c).as_deref() != Some(name) {
            restore_other(ioctx, name, id);
            return Err(Error::ceph(Op::Remove, &target, -i64::from(libc::ESTALE)));
        }
    }
    // SAFETY: the ioctx is live; id_c is NUL-terminated. Forced: the delay of 0 has passed.
    let ret = unsafe { ffi::rbd_trash_remove(ioctx.handle(), id_c.as_ptr(), true) };
    if ret == -libc::EBUSY || ret == -libc::ENOTEMPTY {
        // A client has it open, or it has a snapshot: it goes back under its name, as it was.
        // SAFETY: as above; both strings are NUL-terminated.
        let back =
            unsafe { ffi::rbd_trash_restore(ioctx.handle(), id_c.as_ptr(), name_c.as_ptr()) };
        if back < 0 {
            log::error!(
                "{target} is left in the pool's trash as id {id}: removing it failed (errno \
                 {}), and restoring it failed (errno {}); `rbd trash restore --image-id {id}` \
                 brings it back",
                -ret,
                -back
            );
        }
    }
    if ret == -libc::ENOENT {
        return Ok(());
    }
    check(ret.into(), Op::Remove, &target).map(drop)
}

/// Breaks the locks librbd's exclusive lock (`rbd_lock`) holds on the header of image `id` for
/// client `owner` (`client.<its instance id>`), never another's; how many.
pub(crate) fn break_locks_of(ioctx: &IoCtx, id: &str, owner: u64) -> Result<usize> {
    let target = ioctx.target(id);
    let object = cstring(&format!("rbd_header.{id}"))?;
    let lock = cstring("rbd_lock")?;
    let own = format!("client.{owner}");
    let mut lens = [256usize; 4];
    let (clients, cookies) = loop {
        let mut bufs = lens.map(|len| vec![0u8; len]);
        let mut exclusive = 0;
        let [tag, clients, cookies, addrs] = &mut bufs;
        let [tag_len, clients_len, cookies_len, addrs_len] = &mut lens;
        // SAFETY: the ioctx is live; object and lock are NUL-terminated; each buffer is
        // writable for the length given with it, which librados sets to what it used or needs.
        let ret = unsafe {
            ceph::rados::rados_list_lockers(
                ioctx.handle(),
                object.as_ptr(),
                lock.as_ptr(),
                &mut exclusive,
                tag.as_mut_ptr().cast(),
                tag_len,
                clients.as_mut_ptr().cast(),
                clients_len,
                cookies.as_mut_ptr().cast(),
                cookies_len,
                addrs.as_mut_ptr().cast(),
                addrs_len,
            )
        };
        if ret == -(libc::ERANGE as isize) {
            continue; // lens now say what is needed
        }
        if ret == -(libc::ENOENT as isize) {
            return Ok(0);
        }
        check(ret as i64, Op::Remove, &target)?;
        let [_, clients, cookies, _] = bufs;
        break (clients, cookies);
    };
    let strings = |buf: &[u8]| -> Vec<CString> {
        buf.split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .filter_map(|s| CString::new(s).ok())
            .collect()
    };
    let mut broken = 0;
    for (client, cookie) in strings(&clients).iter().zip(strings(&cookies).iter()) {
        if client.as_bytes() != own.as_bytes() {
            continue;
        }
        // SAFETY: as above; client and cookie are NUL-terminated.
        let ret = unsafe {
            ceph::rados::rados_break_lock(
                ioctx.handle(),
                object.as_ptr(),
                lock.as_ptr(),
                client.as_ptr(),
                cookie.as_ptr(),
            )
        };
        if ret != -libc::ENOENT {
            check(ret.into(), Op::Remove, &target)?;
            broken += 1;
        }
    }
    Ok(broken)
}

/// Moves image `name` to the pool's trash, removable at once (no deferment).
pub(crate) fn trash_move(ioctx: &IoCtx, name: &str) -> Result<()> {
    let name_c = cstring(name)?;
    // SAFETY: the ioctx is live; name_c is NUL-terminated.
    let ret = unsafe { ffi::rbd_trash_move(ioctx.handle(), name_c.as_ptr(), 0) };
    check(ret.into(), Op::MoveToTrash, &ioctx.target(name)).map(drop)
}

/// Removes trash entry `id`, its data objects one by one: what takes the time of a delete.
/// ENOENT once it is gone; EBUSY while a client still has it open.
pub(crate) fn trash_remove(ioctx: &IoCtx, name: &str, id: &str) -> Result<()> {
    let id_c = cstring(id)?;
    // SAFETY: the ioctx is live; id_c is NUL-terminated. Not forced: an entry whose deferment
    // has not ended is another's (EPERM).
    let ret = unsafe { ffi::rbd_trash_remove(ioctx.handle(), id_c.as_ptr(), false) };
    check(ret.into(), Op::Purge, &ioctx.target(name)).map(drop)
}

/// The id of image `name`, read from its id object (`rbd_id.NAME`, a Ceph-encoded string),
/// without opening it.
pub fn id_of(ioctx: &IoCtx, name: &str) -> Result<String> {
    let target = ioctx.target(name);
    let object = cstring(&format!("rbd_id.{name}"))?;
    let mut buf = [0u8; 132];
    // SAFETY: the ioctx is live; object is NUL-terminated; buf is writable for its length.
    let ret = unsafe {
        ceph::rados::rados_read(
            ioctx.handle(),
            object.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            0,
        )
    };
    let read = usize::try_from(check(ret.into(), Op::Open, &target)?).unwrap_or(0);
    let length = buf
        .get(..4)
        .filter(|_| read >= 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .filter(|length| 4 + length <= read)
        .ok_or_else(|| Error::Internal(format!("the id object of {target} is not an id")))?;
    Ok(String::from_utf8_lossy(&buf[4..4 + length]).into_owned())
}

/// The name of trash entry `id`, None if there is none or it could not be read.
pub(crate) fn trash_name(ioctx: &IoCtx, id: &CString) -> Option<String> {
    trash_get(ioctx, id).ok().flatten()
}

/// The name of trash entry `id`: None only if librbd answered that there is none (ENOENT);
/// any other answer (a timeout, a fenced client) is the errno, not a proof of absence.
pub(crate) fn trash_get(ioctx: &IoCtx, id: &CString) -> std::result::Result<Option<String>, i32> {
    // SAFETY: all-zero is a valid empty info (null pointers, zero times).
    let mut info: ffi::RbdTrashImageInfo = unsafe { std::mem::zeroed() };
    // SAFETY: the ioctx is live; id is NUL-terminated; info is filled by librbd and cleaned up
    // below.
    let ret = unsafe { ffi::rbd_trash_get(ioctx.handle(), id.as_ptr(), &mut info) };
    if ret == -libc::ENOENT {
        return Ok(None);
    }
    if ret < 0 {
        return Err(-ret);
    }
    // SAFETY: on success librbd set name to a NUL-terminated string it owns until the cleanup.
    let name = unsafe { std::ffi::CStr::from_ptr(info.name) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: info was filled by rbd_trash_get, and is cleaned up once.
    unsafe { ffi::rbd_trash_get_cleanup(&mut info) };
    Ok(Some(name))
}

/// Puts back under `name` the trash entries of that name other than `id`: moved to the trash
/// by mistake, a moment ago.
fn restore_other(ioctx: &IoCtx, name: &str, id: &str) {
    let mut entries: Vec<ffi::RbdTrashImageInfo> = Vec::new();
    let mut count = 0usize;
    loop {
        // SAFETY: entries is writable for `count` entries; librbd sets count to what it needs.
        let ret = unsafe { ffi::rbd_trash_list(ioctx.handle(), entries.as_mut_ptr(), &mut count) };
        if ret == -libc::ERANGE && count > entries.capacity() {
            entries = Vec::with_capacity(count);
            continue;
        }
        if ret < 0 {
            log::error!(
                "listing the trash of {} failed (errno {})",
                ioctx.target(name),
                -ret
            );
            return;
        }
        // SAFETY: librbd filled `ret` entries (count is their number).
        unsafe { entries.set_len(count) };
        break;
    }
    for entry in &entries {
        // SAFETY: names and ids of the entries librbd filled are NUL-terminated until cleanup.
        let (entry_name, entry_id) = unsafe {
            (
                std::ffi::CStr::from_ptr(entry.name),
                std::ffi::CStr::from_ptr(entry.id),
            )
        };
        if entry_name.to_bytes() == name.as_bytes() && entry_id.to_bytes() != id.as_bytes() {
            // SAFETY: the ioctx is live; both strings are NUL-terminated.
            let ret = unsafe { ffi::rbd_trash_restore(ioctx.handle(), entry.id, entry.name) };
            if ret < 0 {
                log::error!(
                    "{} went to the trash by mistake, and restoring it failed (errno {}): \
                     `rbd trash restore --image-id {}` brings it back",
                    ioctx.target(name),
                    -ret,
                    entry_id.to_string_lossy()
                );
            }
        }
    }
    // SAFETY: the entries librbd filled, cleaned up once.
    unsafe { ffi::rbd_trash_list_cleanup(entries.as_mut_ptr(), entries.len()) };
}

/// Removes an image of id `id` and, first, its snapshot (unprotecting it). A snapshot that is
/// not there or not protected is fine; an image that is not there is an error (ENOENT).
pub fn remove_with_snapshot(
    ioctx: &Arc<IoCtx>,
    name: &str,
    id: &str,
    snapshot: Option<&str>,
) -> Result<()> {
    if let Some(snap) = snapshot {
        let image = Image::open(Arc::clone(ioctx), name, None)?;
        if image.id()? != id {
            return Err(Error::ceph(
                Op::Remove,
                image.target(),
                -i64::from(libc::ESTALE),
            ));
        }
        // EINVAL: never protected; ENOENT: never created. Both leave nothing to undo.
        let _ = image.snap_unprotect(snap);
        match image.snap_remove(snap) {
            Err(Error::Ceph {
                errno: libc::ENOENT,
                ..
            })
            | Ok(()) => {}
            Err(err) => return Err(err),
        }
    }
    remove(ioctx, name, id)
}

/// An open image handle. Closing it releases the exclusive lock, so removal can follow.
pub(crate) struct Image {
    handle: ffi::RbdImage,
    target: Target,
    /// Kept alive while the image is open: librbd uses the ioctx until the image closes.
    ioctx: Arc<IoCtx>,
}

// SAFETY: librbd image handles may be used from any thread; librbd serialises internally. This
// crate calls them from one thread at a time anyway (the owner holds a lock).
unsafe impl Send for Image {}

impl Image {
    /// Opens `name` at `snapshot` (where writes are refused), or at its writable head. Reads
    /// use it too, rather than librbd's read-only open: with that, opening and closing images
    /// at a snapshot in quick succession crashes librbd 16.2.15 (a freed mutex, under CPU
    /// load: 4 runs of 200 cycles out of 4 with Python's rbd module too, none of 6 with this
    /// open). This open also watches the header, so the image cannot be removed while read.
    pub(crate) fn open(ioctx: Arc<IoCtx>, name: &str, snapshot: Option<&str>) -> Result<Image> {
        let target = ioctx.target(name);
        Self::opened_by(ffi::rbd_open, ioctx, name, snapshot, target)
    }

    /// Opens the image of id `id` at its head, as `open` does: an image in the trash too.
    /// `name` is its name, for errors.
    pub(crate) fn open_by_id(ioctx: Arc<IoCtx>, id: &str, name: &str) -> Result<Image> {
        let target = ioctx.target(name);
        Self::opened_by(ffi::rbd_open_by_id, ioctx, id, None, target)
    }

    /// Opens `name` at its head without watching it: to look at it (snapshots, watchers)
    /// without being one of its watchers. Not for reading data (see `open`).
    pub(crate) fn inspect(ioctx: Arc<IoCtx>, name: &str) -> Result<Image> {
        let target = ioctx.target(name);
        Self::opened_by(ffi::rbd_open_read_only, ioctx, name, None, target)
    }

    /// Opens image `key` (its name or id, as `open` takes it) at `snapshot` (or its head) with
    /// librbd's `open` call; `target` names it in errors.
    fn opened_by(
        open: ffi::RbdOpen,
        ioctx: Arc<IoCtx>,
        key: &str,
        snapshot: Option<&str>,
        target: Target,
    ) -> Result<Image> {
        let name_c = cstring(key)?;
        let snap_c = snapshot.map(cstring).transpose()?;
        let mut handle: ffi::RbdImage = ptr::null_mut();
        // SAFETY: `open` is one of librbd's opens; the ioctx is live; the names are
        // NUL-terminated and outlive the call; a null snapshot name opens the head.
        let ret = unsafe {
            open(
                ioctx.handle(),
                name_c.as_ptr(),
                &mut handle,
                snap_c.as_ref().map_or(ptr::null(), |s| s.as_ptr()),
            )
        };
        check(ret.into(), Op::Open, &target)?;
        Ok(Image {
            handle,
            target,
            ioctx,
        })
    }

    /// How many snapshots the image has (those a user made, in librbd's default namespace).
    pub(crate) fn snapshot_count(&self) -> Result<usize> {
        let mut snaps: Vec<ffi::RbdSnapInfo> = Vec::new();
        let mut max: std::os::raw::c_int = 0;
        loop {
            // SAFETY: snaps is writable for `max` entries; librbd sets max to what it needs.
            let ret = unsafe { ffi::rbd_snap_list(self.handle, snaps.as_mut_ptr(), &mut max) };
            if ret == -libc::ERANGE {
                snaps = Vec::with_capacity(usize::try_from(max).unwrap_or(0) + 1);
                max = i32::try_from(snaps.capacity()).unwrap_or(i32::MAX);
                continue;
            }
            let count = check(ret.into(), Op::ListSnapshots, &self.target)?;
            if count > 0 {
                // SAFETY: librbd filled `count` entries, ended by one it cleans up with them.
                unsafe { ffi::rbd_snap_list_end(snaps.as_mut_ptr()) };
            }
            return Ok(usize::try_from(count).unwrap_or(0));
        }
    }

    /// How many clients watch the image's header: its readers and writers (this handle,
    /// opened by `inspect`, is not one of them).
    pub(crate) fn watcher_count(&self) -> Result<usize> {
        let mut watchers: Vec<ffi::RbdImageWatcher> = Vec::new();
        let mut max = 0usize;
        loop {
            // SAFETY: watchers is writable for `max` entries; librbd sets max to what it needs.
            let ret =
                unsafe { ffi::rbd_watchers_list(self.handle, watchers.as_mut_ptr(), &mut max) };
            if ret == -libc::ERANGE {
                watchers = Vec::with_capacity(max + 1);
                max = watchers.capacity();
                continue;
            }
            check(ret.into(), Op::ListWatchers, &self.target)?;
            // SAFETY: librbd filled `max` entries, cleaned up once.
            unsafe { ffi::rbd_watchers_list_cleanup(watchers.as_mut_ptr(), max) };
            return Ok(max);
        }
    }

    /// True when snapshot `snap` has clones (ENOENT if there is no such snapshot).
    pub(crate) fn has_clones(&self, snap: &str) -> Result<bool> {
        self.snap_call(snap, Op::ListClones, ffi::rbd_snap_set)?;
        let mut children: Vec<ffi::RbdLinkedImageSpec> = Vec::new();
        let mut max = 0usize;
        let listed = loop {
            // SAFETY: children is writable for `max` entries; librbd sets max to what it needs.
            let ret =
                unsafe { ffi::rbd_list_children3(self.handle, children.as_mut_ptr(), &mut max) };
            if ret == -libc::ERANGE {
                children = Vec::with_capacity(max + 1);
                max = children.capacity();
                continue;
            }
            break check(ret.into(), Op::ListClones, &self.target).map(|_| max);
        };
        if let Ok(count) = listed {
            // SAFETY: librbd filled `count` entries, cleaned up once.
            unsafe { ffi::rbd_linked_image_spec_list_cleanup(children.as_mut_ptr(), count) };
        }
        // SAFETY: the handle is open; a null name sets it back to the head.
        unsafe { ffi::rbd_snap_set(self.handle, ptr::null()) };
        Ok(listed? > 0)
    }

    /// The image's id: unlike its name, never given to another image.
    pub(crate) fn id(&self) -> Result<String> {
        let mut buf = [0 as std::os::raw::c_char; 128];
        // SAFETY: the handle is open; buf is writable for its length, NUL-terminated on success.
        let ret = unsafe { ffi::rbd_get_id(self.handle, buf.as_mut_ptr(), buf.len()) };
        check(ret.into(), Op::Open, &self.target)?;
        // SAFETY: NUL-terminated by librbd within buf.
        let id = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
        Ok(id.to_string_lossy().into_owned())
    }

    /// The size of the image, or of the snapshot it was opened at.
    pub(crate) fn size(&self) -> Result<u64> {
        let mut size = 0;
        // SAFETY: the handle is open for the lifetime of self; size is an out-parameter.
        let ret = unsafe { ffi::rbd_get_size(self.handle, &mut size) };
        check(ret.into(), Op::ReadSize, &self.target)?;
        Ok(size)
    }

    pub(crate) fn handle(&self) -> ffi::RbdImage {
        self.handle
    }

    pub(crate) fn target(&self) -> &Target {
        &self.target
    }

    pub(crate) fn resize(&self, size: u64) -> Result<()> {
        // SAFETY: the handle is open for the lifetime of self.
        let ret = unsafe { ffi::rbd_resize(self.handle, size) };
        check(ret.into(), Op::Resize, &self.target).map(drop)
    }

    pub(crate) fn flush(&self) -> Result<()> {
        // SAFETY: the handle is open for the lifetime of self.
        let ret = unsafe { ffi::rbd_flush(self.handle) };
        check(ret.into(), Op::Flush, &self.target).map(drop)
    }

    pub(crate) fn snap_create(&self, snap: &str) -> Result<()> {
        self.snap_call(snap, Op::CreateSnapshot, ffi::rbd_snap_create)
    }

    pub(crate) fn snap_protect(&self, snap: &str) -> Result<()> {
        self.snap_call(snap, Op::ProtectSnapshot, ffi::rbd_snap_protect)
    }

    pub(crate) fn snap_unprotect(&self, snap: &str) -> Result<()> {
        self.snap_call(snap, Op::UnprotectSnapshot, ffi::rbd_snap_unprotect)
    }

    pub(crate) fn snap_remove(&self, snap: &str) -> Result<()> {
        self.snap_call(snap, Op::RemoveSnapshot, ffi::rbd_snap_remove)
    }

    fn snap_call(
        &self,
        snap: &str,
        op: Op,
        call: unsafe extern "C" fn(ffi::RbdImage, *const std::os::raw::c_char) -> i32,
    ) -> Result<()> {
        let snap_c: CString = cstring(snap)?;
        // SAFETY: the handle is open; snap_c is NUL-terminated and outlives the call.
        let ret = unsafe { call(self.handle, snap_c.as_ptr()) };
        check(ret.into(), op, &self.target).map(drop)
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        if !self.ioctx.cluster().is_own() {
            return; // inherited over a fork (`Cluster::is_own`)
        }
        // SAFETY: owned handle, closed once. Operations in flight on it are drained by the
        // Upload or Download before it lets go of the image.
        let ret = unsafe { ffi::rbd_close(self.handle) };
        if ret < 0 {
            log::warn!("closing {} failed (errno {})", self.target, -ret);
        }
    }
}

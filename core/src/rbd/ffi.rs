//! The librbd and librados calls this crate needs, declared by hand against Ceph 16 (Pacific).
//!
//! No published crate binds librbd against Ceph 16, and the `ceph` crate lacks the full-try calls,
//! so the few entry points used here are declared directly from `rbd/librbd.h` and
//! `rados/librados.h`. Everything else of librados comes from `ceph::rados`.

use std::os::raw::{c_char, c_int, c_void};

pub(crate) use ceph::rados::rados_ioctx_t;

pub(crate) type RbdImage = *mut c_void;
pub(crate) type RbdCompletion = *mut c_void;
pub(crate) type RbdCallback = unsafe extern "C" fn(completion: RbdCompletion, arg: *mut c_void);
/// `rbd_open`, `rbd_open_by_id` and `rbd_open_read_only`.
pub(crate) type RbdOpen = unsafe extern "C" fn(
    io: rados_ioctx_t,
    name: *const c_char,
    image: *mut RbdImage,
    snap_name: *const c_char,
) -> c_int;

#[link(name = "rbd")]
unsafe extern "C" {
    /// librbd's version: 1, then (from Ceph 12 on) the Ceph release its minor number names.
    pub(crate) fn rbd_version(major: *mut c_int, minor: *mut c_int, extra: *mut c_int);
    pub(crate) fn rbd_create2(
        io: rados_ioctx_t,
        name: *const c_char,
        size: u64,
        features: u64,
        order: *mut c_int,
    ) -> c_int;
    pub(crate) fn rbd_open(
        io: rados_ioctx_t,
        name: *const c_char,
        image: *mut RbdImage,
        snap_name: *const c_char,
    ) -> c_int;
    pub(crate) fn rbd_open_by_id(
        io: rados_ioctx_t,
        id: *const c_char,
        image: *mut RbdImage,
        snap_name: *const c_char,
    ) -> c_int;
    pub(crate) fn rbd_open_read_only(
        io: rados_ioctx_t,
        name: *const c_char,
        image: *mut RbdImage,
        snap_name: *const c_char,
    ) -> c_int;
    pub(crate) fn rbd_close(image: RbdImage) -> c_int;
    pub(crate) fn rbd_get_size(image: RbdImage, size: *mut u64) -> c_int;
    pub(crate) fn rbd_resize(image: RbdImage, size: u64) -> c_int;
    pub(crate) fn rbd_flush(image: RbdImage) -> c_int;
    pub(crate) fn rbd_snap_create(image: RbdImage, snap_name: *const c_char) -> c_int;
    pub(crate) fn rbd_snap_protect(image: RbdImage, snap_name: *const c_char) -> c_int;
    pub(crate) fn rbd_snap_unprotect(image: RbdImage, snap_name: *const c_char) -> c_int;
    pub(crate) fn rbd_snap_remove(image: RbdImage, snap_name: *const c_char) -> c_int;
    pub(crate) fn rbd_snap_set(image: RbdImage, snap_name: *const c_char) -> c_int;
    pub(crate) fn rbd_snap_list(
        image: RbdImage,
        snaps: *mut RbdSnapInfo,
        max_snaps: *mut c_int,
    ) -> c_int;
    pub(crate) fn rbd_snap_list_end(snaps: *mut RbdSnapInfo);
    pub(crate) fn rbd_list_children3(
        image: RbdImage,
        images: *mut RbdLinkedImageSpec,
        max_images: *mut usize,
    ) -> c_int;
    pub(crate) fn rbd_linked_image_spec_list_cleanup(
        images: *mut RbdLinkedImageSpec,
        num_images: usize,
    );
    pub(crate) fn rbd_watchers_list(
        image: RbdImage,
        watchers: *mut RbdImageWatcher,
        max_watchers: *mut usize,
    ) -> c_int;
    pub(crate) fn rbd_watchers_list_cleanup(watchers: *mut RbdImageWatcher, num_watchers: usize);
    pub(crate) fn rbd_get_id(image: RbdImage, id: *mut c_char, id_len: usize) -> c_int;
    pub(crate) fn rbd_trash_move(io: rados_ioctx_t, name: *const c_char, delay: u64) -> c_int;
    pub(crate) fn rbd_trash_get(
        io: rados_ioctx_t,
        id: *const c_char,
        info: *mut RbdTrashImageInfo,
    ) -> c_int;
    pub(crate) fn rbd_trash_get_cleanup(info: *mut RbdTrashImageInfo);
    pub(crate) fn rbd_trash_list(
        io: rados_ioctx_t,
        entries: *mut RbdTrashImageInfo,
        num_entries: *mut usize,
    ) -> c_int;
    pub(crate) fn rbd_trash_list_cleanup(entries: *mut RbdTrashImageInfo, num_entries: usize);
    pub(crate) fn rbd_trash_remove(io: rados_ioctx_t, id: *const c_char, force: bool) -> c_int;
    pub(crate) fn rbd_trash_restore(
        io: rados_ioctx_t,
        id: *const c_char,
        name: *const c_char,
    ) -> c_int;

    pub(crate) fn rbd_aio_create_completion(
        cb_arg: *mut c_void,
        complete_cb: RbdCallback,
        completion: *mut RbdCompletion,
    ) -> c_int;
    pub(crate) fn rbd_aio_write(
        image: RbdImage,
        off: u64,
        len: usize,
        buf: *const c_char,
        completion: RbdCompletion,
    ) -> c_int;
    pub(crate) fn rbd_aio_read(
        image: RbdImage,
        off: u64,
        len: usize,
        buf: *mut c_char,
        completion: RbdCompletion,
    ) -> c_int;
    pub(crate) fn rbd_aio_wait_for_complete(completion: RbdCompletion) -> c_int;
    pub(crate) fn rbd_aio_get_return_value(completion: RbdCompletion) -> isize;
    pub(crate) fn rbd_aio_release(completion: RbdCompletion);
}

/// `rbd_trash_image_info_t`: one entry of the pool's trash.
#[repr(C)]
pub(crate) struct RbdTrashImageInfo {
    pub(crate) id: *mut c_char,
    pub(crate) name: *mut c_char,
    pub(crate) source: c_int,
    pub(crate) deletion_time: libc::time_t,
    pub(crate) deferment_end_time: libc::time_t,
}

/// `rbd_snap_info_t`: one snapshot of an image.
#[repr(C)]
pub(crate) struct RbdSnapInfo {
    pub(crate) id: u64,
    pub(crate) size: u64,
    pub(crate) name: *const c_char,
}

/// `rbd_linked_image_spec_t`: one clone of a snapshot.
#[repr(C)]
pub(crate) struct RbdLinkedImageSpec {
    pub(crate) pool_id: i64,
    pub(crate) pool_name: *mut c_char,
    pub(crate) pool_namespace: *mut c_char,
    pub(crate) image_id: *mut c_char,
    pub(crate) image_name: *mut c_char,
    pub(crate) trash: bool,
}

/// `rbd_image_watcher_t`: one client watching an image's header.
#[repr(C)]
pub(crate) struct RbdImageWatcher {
    pub(crate) addr: *mut c_char,
    pub(crate) id: i64,
    pub(crate) cookie: u64,
}

#[link(name = "rados")]
unsafe extern "C" {
    /// The client's addresses, in a buffer freed with `rados_buffer_free`.
    pub(crate) fn rados_getaddrs(cluster: ceph::rados::rados_t, addrs: *mut *mut c_char) -> c_int;
    /// Lets operations on this ioctx proceed on a full pool: removing a partial image must work
    /// exactly when the pool has filled up.
    pub(crate) fn rados_set_pool_full_try(io: rados_ioctx_t);
    /// A command to the active manager, as JSON; its output and status in buffers freed with
    /// `rados_buffer_free`.
    pub(crate) fn rados_mgr_command(
        cluster: ceph::rados::rados_t,
        cmd: *mut *const c_char,
        cmdlen: usize,
        inbuf: *const c_char,
        inbuflen: usize,
        outbuf: *mut *mut c_char,
        outbuflen: *mut usize,
        outs: *mut *mut c_char,
        outslen: *mut usize,
    ) -> c_int;
}

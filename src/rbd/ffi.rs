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

#[link(name = "rbd")]
unsafe extern "C" {
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
    pub(crate) fn rbd_close(image: RbdImage) -> c_int;
    pub(crate) fn rbd_get_size(image: RbdImage, size: *mut u64) -> c_int;
    pub(crate) fn rbd_remove(io: rados_ioctx_t, name: *const c_char) -> c_int;
    pub(crate) fn rbd_resize(image: RbdImage, size: u64) -> c_int;
    pub(crate) fn rbd_flush(image: RbdImage) -> c_int;
    pub(crate) fn rbd_snap_create(image: RbdImage, snap_name: *const c_char) -> c_int;
    pub(crate) fn rbd_snap_protect(image: RbdImage, snap_name: *const c_char) -> c_int;
    pub(crate) fn rbd_snap_unprotect(image: RbdImage, snap_name: *const c_char) -> c_int;
    pub(crate) fn rbd_snap_remove(image: RbdImage, snap_name: *const c_char) -> c_int;

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

#[link(name = "rados")]
unsafe extern "C" {
    /// Lets operations on this ioctx proceed on a full pool: removing a partial image must work
    /// exactly when the pool has filled up.
    pub(crate) fn rados_set_pool_full_try(io: rados_ioctx_t);
}

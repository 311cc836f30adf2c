//! Keys of an object's omap, each set or removed in one librados write operation.

use std::ffi::CStr;
use std::ptr;

use ceph::rados;

use super::cluster::{IoCtx, cstring};
use crate::error::{Error, Op, Result, Target, check};

/// Sets `key` to `value` in the omap of `object`, creating the object if needed. A failure is
/// reported as `op` on `target`, what the key stands for.
pub(crate) fn set(
    ioctx: &IoCtx,
    object: &str,
    key: &str,
    value: &str,
    op: Op,
    target: &Target,
) -> Result<()> {
    let (object_c, key_c) = (cstring(object)?, cstring(key)?);
    let keys = [key_c.as_ptr()];
    let values = [value.as_ptr().cast()];
    let lens = [value.len()];
    operate(ioctx, &object_c, op, target, |write| {
        // SAFETY: the op is live; keys, values and lens hold one entry each, alive until the op
        // has run.
        unsafe {
            rados::rados_write_op_omap_set(write, keys.as_ptr(), values.as_ptr(), lens.as_ptr(), 1);
        }
    })
}

/// Removes `key` from the omap of `object`; a key or an object that is not there is fine.
pub(crate) fn remove(
    ioctx: &IoCtx,
    object: &str,
    key: &str,
    op: Op,
    target: &Target,
) -> Result<()> {
    let (object_c, key_c) = (cstring(object)?, cstring(key)?);
    let keys = [key_c.as_ptr()];
    let removed = operate(ioctx, &object_c, op, target, |write| {
        // SAFETY: the op is live; keys holds one NUL-terminated key, alive until the op has run.
        unsafe { rados::rados_write_op_omap_rm_keys(write, keys.as_ptr(), 1) }
    });
    match removed {
        Err(Error::Ceph {
            errno: libc::ENOENT,
            ..
        }) => Ok(()),
        other => other,
    }
}

fn operate(
    ioctx: &IoCtx,
    object: &CStr,
    op: Op,
    target: &Target,
    build: impl FnOnce(rados::rados_write_op_t),
) -> Result<()> {
    // SAFETY: a fresh write op, released below once it has run.
    let write = unsafe { rados::rados_create_write_op() };
    if write.is_null() {
        return Err(Error::Internal(
            "librados could not allocate a write operation".into(),
        ));
    }
    build(write);
    // SAFETY: the op and the ioctx are live; the name is NUL-terminated; no mtime, no flags.
    let ret = unsafe {
        rados::rados_write_op_operate(write, ioctx.handle(), object.as_ptr(), ptr::null_mut(), 0)
    };
    // SAFETY: the op has run and is not used again.
    unsafe { rados::rados_release_write_op(write) };
    check(ret.into(), op, target).map(drop)
}

//! Keys of an object's omap, each set or removed in one librados write operation, optionally
//! only if the key still holds what the caller last wrote (so a process never overwrites or
//! removes an entry that another one has written since).

use std::ffi::CStr;
use std::ptr;

use ceph::rados;

use super::cluster::{IoCtx, cstring};
use crate::error::{Error, Op, Result, Target, check};

/// librados' comparison "equal" (`LIBRADOS_CMPXATTR_OP_EQ`).
const EQUAL: u8 = 1;

/// Sets `key` to `value` in the omap of `object`, creating the object if needed; with
/// `expect`, only if the key holds exactly that (else ECANCELED, and nothing is written). A
/// failure is reported as `op` on `target`, what the key stands for.
pub(crate) fn set(
    ioctx: &IoCtx,
    object: &str,
    key: &str,
    value: &str,
    expect: Option<&str>,
    op: Op,
    target: &Target,
) -> Result<()> {
    let (object_c, key_c) = (cstring(object)?, cstring(key)?);
    let keys = [key_c.as_ptr()];
    let values = [value.as_ptr().cast()];
    let lens = [value.len()];
    operate(ioctx, &object_c, op, target, |write| {
        compare(write, &key_c, expect);
        // SAFETY: the op is live; keys, values and lens hold one entry each, alive until the op
        // has run.
        unsafe {
            rados::rados_write_op_omap_set(write, keys.as_ptr(), values.as_ptr(), lens.as_ptr(), 1);
        }
    })
}

/// Removes `key` from the omap of `object`; with `expect`, only if it holds exactly that
/// (else ECANCELED). A key or an object that is not there is fine without `expect`.
pub(crate) fn remove(
    ioctx: &IoCtx,
    object: &str,
    key: &str,
    expect: Option<&str>,
    op: Op,
    target: &Target,
) -> Result<()> {
    let (object_c, key_c) = (cstring(object)?, cstring(key)?);
    let keys = [key_c.as_ptr()];
    let removed = operate(ioctx, &object_c, op, target, |write| {
        compare(write, &key_c, expect);
        // SAFETY: the op is live; keys holds one NUL-terminated key, alive until the op has run.
        unsafe { rados::rados_write_op_omap_rm_keys(write, keys.as_ptr(), 1) }
    });
    match removed {
        Err(Error::Ceph {
            errno: libc::ENOENT,
            ..
        }) if expect.is_none() => Ok(()),
        other => other,
    }
}

/// Makes the op conditional on `key` holding `expect`, if given: a key that differs or is
/// missing fails the whole op with ECANCELED.
fn compare(write: rados::rados_write_op_t, key: &CStr, expect: Option<&str>) {
    if let Some(expect) = expect {
        // SAFETY: the op is live; key and expect outlive the op's run (the callers hold them);
        // no per-op return value is asked for.
        unsafe {
            rados::rados_write_op_omap_cmp(
                write,
                key.as_ptr(),
                EQUAL,
                expect.as_ptr().cast(),
                expect.len(),
                ptr::null_mut(),
            );
        }
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

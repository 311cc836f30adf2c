//! Keys of an object's omap, each set or removed in one librados write operation, optionally
//! only if the key still holds what the caller last wrote (so a process never overwrites or
//! removes an entry that another one has written since).

use std::os::raw::c_char;
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
    entry: Entry<'_>,
    value: &str,
    expect: Option<&str>,
    op: Op,
    target: &Target,
) -> Result<()> {
    let values = [value.as_ptr().cast()];
    let lens = [value.len()];
    operate(entry, expect, op, target, |write, keys| {
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
    entry: Entry<'_>,
    expect: Option<&str>,
    op: Op,
    target: &Target,
) -> Result<()> {
    let removed = operate(entry, expect, op, target, |write, keys| {
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

/// One key of one object's omap, in the pool of `ioctx`.
#[derive(Clone, Copy)]
pub(crate) struct Entry<'a> {
    pub(crate) ioctx: &'a IoCtx,
    pub(crate) object: &'a str,
    pub(crate) key: &'a str,
}

/// Runs one write op on `entry`'s object, made by `build` (given the op and the key, as an
/// array of one), conditional on the key holding `expect` if given: a key that differs or is
/// missing fails the whole op with ECANCELED.
fn operate(
    entry: Entry<'_>,
    expect: Option<&str>,
    op: Op,
    target: &Target,
    build: impl FnOnce(rados::rados_write_op_t, &[*const c_char; 1]),
) -> Result<()> {
    let (object, key) = (cstring(entry.object)?, cstring(entry.key)?);
    let keys = [key.as_ptr()];
    // SAFETY: a fresh write op, released below once it has run.
    let write = unsafe { rados::rados_create_write_op() };
    if write.is_null() {
        return Err(Error::Internal(
            "librados could not allocate a write operation".into(),
        ));
    }
    if let Some(expect) = expect {
        // SAFETY: the op is live; key and expect outlive the op's run; no per-op return value
        // is asked for.
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
    build(write, &keys);
    // SAFETY: the op and the ioctx are live; the name is NUL-terminated; no mtime, no flags.
    let ret = unsafe {
        rados::rados_write_op_operate(
            write,
            entry.ioctx.handle(),
            object.as_ptr(),
            ptr::null_mut(),
            0,
        )
    };
    // SAFETY: the op has run and is not used again.
    unsafe { rados::rados_release_write_op(write) };
    check(ret.into(), op, target).map(drop)
}

//! One asynchronous librbd operation (`Completion`).
//!
//! Completion callbacks run on librbd's threads: they only store the result and wake the waiter.
//! They never log, allocate or touch Python.

use std::os::raw::c_void;
use std::ptr;
use std::sync::{Arc, Condvar, Mutex};

use super::ffi;
use super::image::Image;
use crate::error::{Error, Op, Result};
use crate::sync;
use crate::wait::{Poll, wait_until};

/// One operation's result, filled in by the completion callback.
#[derive(Default)]
struct Slot {
    result: Mutex<Option<isize>>,
    done: Condvar,
}

/// One asynchronous librbd operation. Dropping it waits for the operation to end (librbd may
/// still be using its buffer until then) and releases it.
pub(crate) struct Completion {
    handle: ffi::RbdCompletion,
    slot: Arc<Slot>,
    /// Whether librbd took the operation, and so will call back.
    started: bool,
}

// SAFETY: completions are plain handles that librbd lets any thread wait on and release.
unsafe impl Send for Completion {}

impl Completion {
    /// A completion for one operation on `image`; `op` names it in errors.
    pub(crate) fn new(image: &Image, op: Op) -> Result<Completion> {
        let slot = Arc::new(Slot::default());
        let arg = Arc::into_raw(Arc::clone(&slot)).cast_mut().cast::<c_void>();
        let mut handle: ffi::RbdCompletion = ptr::null_mut();
        // SAFETY: arg stays valid until on_complete takes it back; handle is an out-pointer.
        let ret = unsafe { ffi::rbd_aio_create_completion(arg, on_complete, &mut handle) };
        if ret < 0 {
            // SAFETY: no callback will run, so the reference given to it comes back here.
            drop(unsafe { Arc::from_raw(arg.cast::<Slot>()) });
            return Err(Error::ceph(op, image.target(), ret.into()));
        }
        Ok(Completion {
            handle,
            slot,
            started: false,
        })
    }

    pub(crate) fn handle(&self) -> ffi::RbdCompletion {
        self.handle
    }

    /// Records librbd's answer to the submission: a refusal is the operation's error, and
    /// means no callback will come.
    pub(crate) fn submitted(&mut self, ret: i32, op: Op, image: &Image) -> Result<()> {
        if ret < 0 {
            return Err(Error::ceph(op, image.target(), ret.into()));
        }
        self.started = true;
        Ok(())
    }

    pub(crate) fn is_done(&self) -> bool {
        sync::lock(&self.slot.result).is_some()
    }

    /// Waits for the operation; librbd's return value (bytes, or a negative errno).
    pub(crate) fn wait(&self, poll: Poll) -> Result<isize> {
        let result = wait_until(&self.slot.result, &self.slot.done, Option::is_some, poll)?;
        Ok(result.expect("waited for it"))
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if self.started {
            let _ = self.wait(&mut || Ok(()));
            // SAFETY: the callback has run, so librbd only has the short tail of its
            // completion path left; waiting for it makes release safe.
            unsafe { ffi::rbd_aio_wait_for_complete(self.handle) };
        } else {
            // SAFETY: librbd refused the operation (or it was never submitted), so no callback
            // will take back the reference given to it at creation: it comes back here.
            drop(unsafe { Arc::from_raw(Arc::as_ptr(&self.slot)) });
        }
        // SAFETY: released exactly once, after librbd is done with it.
        unsafe { ffi::rbd_aio_release(self.handle) };
    }
}

unsafe extern "C" fn on_complete(completion: ffi::RbdCompletion, arg: *mut c_void) {
    // SAFETY: arg came from Arc::into_raw in `Completion::new`, and librbd calls this exactly
    // once per completion, so this takes back exactly the one reference given away.
    let slot = unsafe { Arc::from_raw(arg.cast::<Slot>()) };
    // SAFETY: the completion is live until the waiter releases it, which needs this result first.
    let ret = unsafe { ffi::rbd_aio_get_return_value(completion) };
    let mut result = sync::lock(&slot.result);
    *result = Some(ret);
    slot.done.notify_all();
}

//! Asynchronous librbd operations: one `Completion` per operation, and the writes of an upload
//! with a bound on the bytes in flight. Waits can be cut short.
//!
//! Completion callbacks run on librbd's threads: they only store the result and wake the waiter.
//! They never log, allocate or touch Python.

use std::collections::VecDeque;
use std::ops::Range;
use std::os::raw::c_void;
use std::ptr;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use crate::error::{Error, Result, check};
use crate::ffi;
use crate::image::Image;

/// Bytes that stay readable until librbd is done with them.
pub type Buffer = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Called while a wait blocks, every `POLL_INTERVAL`: an error ends the wait (a signal, say).
pub type Poll<'a> = &'a mut dyn FnMut() -> Result<()>;

/// How often a blocked wait asks its `Poll` whether to give up.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// One operation's result, filled in by the completion callback.
#[derive(Default)]
struct Slot {
    result: Mutex<Option<isize>>,
    done: Condvar,
}

/// One asynchronous librbd operation. Dropping it waits for the operation to end (librbd may
/// still be using its buffer until then) and releases it.
pub struct Completion {
    handle: ffi::RbdCompletion,
    slot: Arc<Slot>,
    /// Whether librbd took the operation, and so will call back.
    started: bool,
}

// SAFETY: completions are plain handles that librbd lets any thread wait on and release.
unsafe impl Send for Completion {}

impl Completion {
    /// A completion for one operation on `image`; `op` names it in errors.
    pub fn new(image: &Image, op: &'static str) -> Result<Completion> {
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

    pub fn handle(&self) -> ffi::RbdCompletion {
        self.handle
    }

    /// Records librbd's answer to the submission: a refusal is the operation's error, and
    /// means no callback will come.
    pub fn submitted(&mut self, ret: i32, op: &'static str, image: &Image) -> Result<()> {
        if ret < 0 {
            return Err(Error::ceph(op, image.target(), ret.into()));
        }
        self.started = true;
        Ok(())
    }

    pub fn is_done(&self) -> bool {
        self.slot
            .result
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Waits for the operation; librbd's return value (bytes, or a negative errno).
    pub fn wait(&self, poll: Poll) -> Result<isize> {
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

/// Fields drop in order: the completion waits for the write before the buffer goes.
struct Pending {
    completion: Completion,
    offset: u64,
    len: usize,
    // Kept alive until the write completes: librbd reads from it until then.
    _buffer: Buffer,
}

/// The writes submitted to one image and not yet reaped, oldest first.
pub struct InFlight {
    queue: VecDeque<Pending>,
    bytes: usize,
    limit: usize,
}

unsafe extern "C" fn on_complete(completion: ffi::RbdCompletion, arg: *mut c_void) {
    // SAFETY: arg came from Arc::into_raw in `submit`, and librbd calls this exactly once per
    // completion, so this takes back exactly the one reference given away.
    let slot = unsafe { Arc::from_raw(arg.cast::<Slot>()) };
    // SAFETY: the completion is live until the waiter releases it, which needs this result first.
    let ret = unsafe { ffi::rbd_aio_get_return_value(completion) };
    let mut result = slot.result.lock().unwrap_or_else(PoisonError::into_inner);
    *result = Some(ret);
    slot.done.notify_all();
}

impl InFlight {
    pub fn new(limit: usize) -> Self {
        InFlight {
            queue: VecDeque::new(),
            bytes: 0,
            limit: limit.max(1),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Releases the writes at the front that have completed, without waiting.
    pub fn reap_completed(&mut self, image: &Image) -> Result<()> {
        while let Some(oldest) = self.queue.front() {
            if !oldest.completion.is_done() {
                break;
            }
            self.reap_oldest(image, &mut || Ok(()))?;
        }
        Ok(())
    }

    /// Starts writing `buffer[range]` at `offset`, first waiting until it fits under the bound.
    /// A write larger than the bound is sent alone, with nothing else in flight.
    pub fn submit(
        &mut self,
        image: &Image,
        offset: u64,
        buffer: &Buffer,
        range: Range<usize>,
        poll: Poll,
    ) -> Result<()> {
        let len = range.len();
        while !self.queue.is_empty() && self.bytes + len > self.limit {
            self.reap_oldest(image, poll)?;
        }
        let mut completion = Completion::new(image, "starting a write to")?;
        let data = &(**buffer).as_ref()[range];
        // SAFETY: the image is open; data stays alive in `Pending` until the write completes.
        let ret = unsafe {
            ffi::rbd_aio_write(
                image.handle(),
                offset,
                len,
                data.as_ptr().cast(),
                completion.handle(),
            )
        };
        completion.submitted(ret, "starting a write to", image)?;
        self.queue.push_back(Pending {
            completion,
            offset,
            len,
            _buffer: Arc::clone(buffer),
        });
        self.bytes += len;
        Ok(())
    }

    /// Waits for every write in flight; the first failure is returned once all are done.
    pub fn drain(&mut self, image: &Image, poll: Poll) -> Result<()> {
        let mut first_error = None;
        while !self.queue.is_empty() {
            match self.reap_oldest(image, poll) {
                Ok(()) => {}
                Err(Error::Interrupted) => return Err(Error::Interrupted),
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Waits for the oldest write and releases it; its error, if it failed.
    pub fn reap_oldest(&mut self, image: &Image, poll: Poll) -> Result<()> {
        let Some(oldest) = self.queue.front() else {
            return Ok(());
        };
        let ret = oldest.completion.wait(poll)?;
        let pending = self.queue.pop_front().expect("front exists");
        self.bytes -= pending.len;
        let ret = check(ret as i64, "writing to", image.target());
        ret.map_err(|err| {
            log::debug!(
                "write of {} bytes at {} failed: {err}",
                pending.len,
                pending.offset
            );
            err
        })
        .map(drop)
    }
}

impl Drop for InFlight {
    /// Buffers must outlive librbd's use of them, whatever path dropped the queue: the oldest
    /// goes first, each completion waiting for its write before its buffer is dropped.
    fn drop(&mut self) {
        while let Some(pending) = self.queue.pop_front() {
            drop(pending);
        }
    }
}

/// Waits on `signal` until `ready(value)` holds, calling `poll` every `POLL_INTERVAL` with the
/// lock released; `poll`'s error ends the wait. The one blocking wait of this crate.
pub fn wait_until<T: Copy>(
    value: &Mutex<T>,
    signal: &Condvar,
    ready: impl Fn(&T) -> bool,
    poll: Poll,
) -> Result<T> {
    let mut guard = value.lock().unwrap_or_else(PoisonError::into_inner);
    while !ready(&guard) {
        let (next, timeout) = signal
            .wait_timeout(guard, POLL_INTERVAL)
            .unwrap_or_else(PoisonError::into_inner);
        guard = next;
        if timeout.timed_out() && !ready(&guard) {
            drop(guard);
            poll()?;
            guard = value.lock().unwrap_or_else(PoisonError::into_inner);
        }
    }
    Ok(*guard)
}

//! Asynchronous librbd writes, with a bound on the bytes in flight and waits that can be cut short.
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

/// One write's result, filled in by the completion callback.
#[derive(Default)]
struct Slot {
    result: Mutex<Option<isize>>,
    done: Condvar,
}

struct Pending {
    completion: ffi::RbdCompletion,
    slot: Arc<Slot>,
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

// SAFETY: completions are plain handles that librbd lets any thread wait on and release; the
// buffers are Send + Sync.
unsafe impl Send for InFlight {}

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
            if oldest
                .slot
                .result
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_none()
            {
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
        let slot = Arc::new(Slot::default());
        let arg = Arc::into_raw(Arc::clone(&slot)).cast_mut().cast::<c_void>();
        let mut completion: ffi::RbdCompletion = ptr::null_mut();
        // SAFETY: arg stays valid until on_complete takes it back; completion is an out-pointer.
        let ret = unsafe { ffi::rbd_aio_create_completion(arg, on_complete, &mut completion) };
        if ret < 0 {
            // SAFETY: no callback will run, so the reference given to it comes back here.
            drop(unsafe { Arc::from_raw(arg.cast::<Slot>()) });
            return Err(Error::ceph(
                "starting a write to",
                image.target(),
                ret.into(),
            ));
        }
        let data = &(**buffer).as_ref()[range];
        // SAFETY: the image is open; data stays alive in `Pending` until the write completes.
        let ret = unsafe {
            ffi::rbd_aio_write(
                image.handle(),
                offset,
                len,
                data.as_ptr().cast(),
                completion,
            )
        };
        if ret < 0 {
            // SAFETY: the write was refused, so librbd will not call back: take the reference
            // back and release the unused completion.
            unsafe {
                drop(Arc::from_raw(arg.cast::<Slot>()));
                ffi::rbd_aio_release(completion);
            }
            return Err(Error::ceph(
                "starting a write to",
                image.target(),
                ret.into(),
            ));
        }
        self.queue.push_back(Pending {
            completion,
            slot,
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
        let ret = wait(&oldest.slot, poll)?;
        let pending = self.queue.pop_front().expect("front exists");
        self.bytes -= pending.len;
        release(pending.completion);
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
    /// Buffers must outlive librbd's use of them, whatever path dropped the queue.
    fn drop(&mut self) {
        for pending in self.queue.drain(..) {
            let _ = wait(&pending.slot, &mut || Ok(()));
            release(pending.completion);
        }
    }
}

fn wait(slot: &Slot, poll: Poll) -> Result<isize> {
    let result = wait_until(&slot.result, &slot.done, Option::is_some, poll)?;
    Ok(result.expect("waited for it"))
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

fn release(completion: ffi::RbdCompletion) {
    // SAFETY: the callback has run, so librbd only has the short tail of its completion path
    // left; waiting for it makes release safe, and release happens exactly once per completion.
    unsafe {
        ffi::rbd_aio_wait_for_complete(completion);
        ffi::rbd_aio_release(completion);
    }
}

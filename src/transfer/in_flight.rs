//! The writes of an upload that librbd has not finished yet, with a bound on their bytes.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use super::progress::Progress;
use crate::error::{Error, Op, Result, check};
use crate::rbd::completion::{Completion, Poll};
use crate::rbd::ffi;
use crate::rbd::image::Image;

/// Bytes that stay readable until librbd is done with them.
pub type Buffer = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Fields drop in order: the completion waits for the write before the buffer goes.
struct Pending {
    completion: Completion,
    offset: u64,
    len: usize,
    // Kept alive until the write completes: librbd reads from it until then.
    _buffer: Buffer,
}

/// The writes submitted to one image and not yet reaped, oldest first.
pub(crate) struct InFlight {
    queue: VecDeque<Pending>,
    bytes: usize,
    /// Each write completed is progress of the upload, even where no new data is accepted
    /// (finish draining the writes of a slow cluster).
    progress: Progress,
}

impl InFlight {
    pub(crate) fn new(progress: Progress) -> Self {
        InFlight {
            queue: VecDeque::new(),
            bytes: 0,
            progress,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Bytes submitted and not yet reaped.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Releases the writes at the front that have completed, without waiting.
    pub(crate) fn reap_completed(&mut self, image: &Image) -> Result<()> {
        while let Some(oldest) = self.queue.front() {
            if !oldest.completion.is_done() {
                break;
            }
            self.reap_oldest(image, &mut || Ok(()))?;
        }
        Ok(())
    }

    /// Starts writing `buffer[range]` at `offset`, first waiting until it fits under `limit`
    /// bytes in flight. A write larger than that is sent alone, with nothing else in flight.
    pub(crate) fn submit(
        &mut self,
        image: &Image,
        offset: u64,
        buffer: &Buffer,
        range: Range<usize>,
        limit: usize,
        poll: Poll,
    ) -> Result<()> {
        let len = range.len();
        while !self.queue.is_empty() && self.bytes + len > limit {
            self.reap_oldest(image, poll)?;
        }
        let mut completion = Completion::new(image, Op::StartWrite)?;
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
        completion.submitted(ret, Op::StartWrite, image)?;
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
    pub(crate) fn drain(&mut self, image: &Image, poll: Poll) -> Result<()> {
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
    pub(crate) fn reap_oldest(&mut self, image: &Image, poll: Poll) -> Result<()> {
        let Some(oldest) = self.queue.front() else {
            return Ok(());
        };
        let ret = oldest.completion.wait(poll)?;
        let pending = self.queue.pop_front().expect("front exists");
        self.bytes -= pending.len;
        self.progress.moved();
        let ret = check(ret as i64, Op::Write, image.target());
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

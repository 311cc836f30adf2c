//! The writes of an upload that librbd has not finished yet, with a bound on their bytes.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use super::fence::{self, Fence};
use super::progress::Progress;
use crate::error::{Error, Op, Result, check};
use crate::io::{self, Image};
use crate::sync;
use crate::wait::Poll;

/// Bytes that stay readable until librbd is done with them.
pub type Buffer = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Fields drop in order: the operation waits for the write before the buffer goes.
struct Pending {
    write: Box<dyn io::Pending>,
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
    /// Whether a wait that sees no completion waits for nothing (a fenced client).
    fence: Fence,
}

impl InFlight {
    pub(crate) fn new(progress: Progress, fence: Fence) -> Self {
        InFlight {
            queue: VecDeque::new(),
            bytes: 0,
            progress,
            fence,
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
    pub(crate) fn reap_completed(&mut self, image: &dyn Image) -> Result<()> {
        while let Some(oldest) = self.queue.front() {
            if !oldest.write.is_done() {
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
        image: &dyn Image,
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
        let data = &(**buffer).as_ref()[range];
        // SAFETY: data stays alive, unchanged, in `Pending` until the write completes: the
        // buffer is held there, and dropping a `Pending` waits for its write first.
        let write = unsafe { image.write(offset, data)? };
        self.queue.push_back(Pending {
            write,
            offset,
            len,
            _buffer: Arc::clone(buffer),
        });
        self.bytes += len;
        Ok(())
    }

    /// Waits for every write in flight; the first failure is returned once all are done. A
    /// fenced client's is returned at once, the rest left in flight (`abandon`).
    pub(crate) fn drain(&mut self, image: &dyn Image, poll: Poll) -> Result<()> {
        let mut first_error = None;
        while !self.queue.is_empty() {
            match self.reap_oldest(image, poll) {
                Ok(()) => {}
                Err(Error::Interrupted) => return Err(Error::Interrupted),
                Err(err) if fence::is_fenced(&err) => return Err(err),
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Leaves the writes still in flight, and `image` after them, to a thread that waits for
    /// them: the client was fenced, and they may never complete.
    pub(crate) fn abandon(&mut self, image: Option<Box<dyn Image>>) {
        let pending = std::mem::take(&mut self.queue);
        if !pending.is_empty() {
            log::debug!(
                "leaving {} writes ({} bytes) in flight to librbd",
                pending.len(),
                self.bytes
            );
        }
        self.bytes = 0;
        fence::abandon(pending, image, "the writes in flight");
    }

    /// Runs `call`, a synchronous librbd call on the image (a resize, the flush, the snapshot),
    /// on a thread of its own, and waits for it as for a write, but uninterruptibly: it cannot
    /// be stopped half-way. A fenced client's call can block inside librbd for good, so once
    /// the probe proves the client fenced, the wait ends with that error and the call keeps the
    /// image on its thread (`None` comes back). Otherwise the image comes back with the result.
    pub(crate) fn guarded<T: Send + 'static>(
        &mut self,
        image: Box<dyn Image>,
        call: impl FnOnce(&dyn Image) -> Result<T> + Send + 'static,
    ) -> (Option<Box<dyn Image>>, Result<T>) {
        let held = Arc::new(std::sync::Mutex::new(Some(image)));
        let inner = Arc::clone(&held);
        let done = fence::guarded(&mut self.fence, None, move || {
            let image = sync::lock(&inner).take()?;
            let result = call(&*image);
            Some((image, result))
        });
        match done {
            Ok(Some((image, result))) => (Some(image), result),
            // The image stays here where the call never took it (no thread could start).
            Err(err) => (sync::lock(&held).take(), Err(err)),
            Ok(None) => (
                None,
                Err(Error::Internal("a librbd call found no image".into())),
            ),
        }
    }

    /// Waits for the oldest write and releases it; its error, if it failed.
    pub(crate) fn reap_oldest(&mut self, image: &dyn Image, poll: Poll) -> Result<()> {
        let Some(oldest) = self.queue.front() else {
            return Ok(());
        };
        let fence = &mut self.fence;
        let ret = oldest.write.wait(&mut || {
            poll()?;
            fence.check()
        })?;
        self.fence.moved();
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
    /// goes first, each operation waiting for its write before its buffer is dropped.
    fn drop(&mut self) {
        while let Some(pending) = self.queue.pop_front() {
            drop(pending);
        }
    }
}

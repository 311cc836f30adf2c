//! The memory bound of an upload: bytes of chunks still held by writes in flight or by digests
//! not yet computed, within the upload's share of the process bound (`shares`). A chunk counts
//! until the last of its users lets go of it.

use std::sync::{Arc, Condvar, Mutex};

use super::in_flight::Buffer;
use super::shares::Share;
use crate::error::Result;
use crate::sync;
use crate::wait::{Poll, wait_until};

pub(crate) struct Budget {
    held: Mutex<usize>,
    released: Condvar,
    share: Share,
}

/// A chunk counted against a budget until it is dropped.
struct Tracked {
    buffer: Buffer,
    budget: Arc<Budget>,
}

impl AsRef<[u8]> for Tracked {
    fn as_ref(&self) -> &[u8] {
        (*self.buffer).as_ref()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        let mut held = sync::lock(&self.budget.held);
        let len = (*self.buffer).as_ref().len();
        *held -= len;
        self.budget.share.sub(len);
        self.budget.released.notify_all();
    }
}

impl Budget {
    pub(crate) fn new(share: Share) -> Arc<Budget> {
        Arc::new(Budget {
            held: Mutex::new(0),
            released: Condvar::new(),
            share,
        })
    }

    /// Counts `buffer` until every clone of the returned handle is dropped.
    pub(crate) fn track(self: &Arc<Self>, buffer: Buffer) -> Buffer {
        let len = (*buffer).as_ref().len();
        *sync::lock(&self.held) += len;
        self.share.add(len);
        Arc::new(Tracked {
            buffer,
            budget: Arc::clone(self),
        })
    }

    pub(crate) fn held(&self) -> usize {
        *sync::lock(&self.held)
    }

    /// The bytes the upload may hold now: its share of the process bound.
    pub(crate) fn limit(&self) -> usize {
        self.share.limit()
    }

    /// Whether `len` more bytes fit. A chunk larger than the limit fits once nothing is held.
    pub(crate) fn fits(&self, len: usize) -> bool {
        self.share.fits(self.held(), len)
    }

    /// Waits until `len` more bytes fit, while only other threads can release (digests).
    pub(crate) fn wait_until_fits(&self, len: usize, poll: Poll) -> Result<()> {
        let fitting = |held: &usize| self.share.fits(*held, len);
        wait_until(&self.held, &self.released, fitting, poll).map(drop)
    }

    /// The upload ended: its share goes back to the other transfers of the process.
    pub(crate) fn leave(&self) {
        self.share.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transfer::shares::Process;

    fn budget(limit: usize) -> Arc<Budget> {
        let process: &'static Process = Box::leak(Box::new(Process::new(limit)));
        Budget::new(process.join(None))
    }

    #[test]
    fn counts_until_the_last_clone_is_dropped() {
        let budget = budget(10);
        let chunk = budget.track(Arc::new(vec![1u8; 6]));
        let clone = Arc::clone(&chunk);
        assert_eq!(budget.held(), 6);
        assert!(!budget.fits(5));
        assert!(budget.fits(4));
        drop(chunk);
        assert_eq!(budget.held(), 6);
        drop(clone);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn oversized_chunk_fits_an_empty_budget() {
        let budget = budget(10);
        assert!(budget.fits(100));
        let _held = budget.track(Arc::new(vec![0u8; 1]));
        assert!(!budget.fits(100));
    }

    #[test]
    fn wait_returns_when_another_thread_releases() {
        let budget = budget(10);
        let chunk = budget.track(Arc::new(vec![0u8; 8]));
        let releaser = std::thread::spawn(move || drop(chunk));
        budget.wait_until_fits(8, &mut || Ok(())).unwrap();
        releaser.join().unwrap();
        assert_eq!(budget.held(), 0);
    }
}

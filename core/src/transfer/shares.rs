//! The in-flight bound of the process, shared by all its uploads and downloads.
//!
//! Each running transfer holds a `Share`. Its bound is the process bound divided evenly among
//! the transfers running (capped by the transfer's own bound, if it has one): transfers share
//! fairly, and one alone has all of it. Beyond its first chunk a transfer adds bytes only within
//! its share and while the process as a whole is within the bound. A transfer may always have
//! one chunk, whatever the others hold, and it only ever waits on its own writes, reads and
//! digests: none starves, none waits on another, so none deadlocks.
//!
//! A download counts each byte in flight twice (`download::HELD_PER_BYTE`): librbd receives a
//! read into buffers of its own before it copies it into the chunk. Its one chunk holds two.
//!
//! So the process holds at most the bound plus one chunk per transfer, and that only for as long
//! as the chunks in flight when new transfers joined take to complete (reads and writes are
//! never taken back): then at most the larger of the bound and one chunk per transfer.
//!
//! When the last transfer of the process ends, the memory malloc keeps free goes back to the
//! system (`release_memory_if_idle`): the chunks of a burst are freed on many threads, into
//! many arenas, and glibc would otherwise keep much of it. While transfers run, `rss` keeps the
//! process's RSS within the bound and a headroom of its level at the start.

use crate::error::{Error, Result};
use crate::sync;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The process bound by default: eight 8 MiB chunks, what keeps a transfer alone at full speed
/// on a small cluster (the bench's "at once" rows show what more would buy).
pub const DEFAULT_BOUND: usize = 64 << 20;

/// The bound of this process, shared by every transfer in it.
pub static PROCESS: Process = Process::new(DEFAULT_BOUND);

/// A bound of `bytes` (the process's, or a transfer's own), refused when it holds nothing.
pub fn check_bound(bytes: usize) -> Result<()> {
    if bytes == 0 {
        return Err(Error::Usage("max_in_flight must be at least 1 byte".into()));
    }
    Ok(())
}

/// A bound and the transfers sharing it.
pub struct Process {
    state: Mutex<State>,
    /// Bytes held by all its transfers: in flight, or waiting for a digest.
    held: AtomicUsize,
    /// The bound, as `state` has it, for a reader that must not take its lock (`rss`, called
    /// while it may be held).
    bound: AtomicUsize,
}

struct State {
    bound: usize,
    transfers: usize,
}

impl Process {
    pub(crate) const fn new(bound: usize) -> Process {
        Process {
            state: Mutex::new(State {
                bound,
                transfers: 0,
            }),
            held: AtomicUsize::new(0),
            bound: AtomicUsize::new(bound),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        sync::lock(&self.state)
    }

    /// Sets the bound; transfers running take it up at their next chunk.
    pub fn set_bound(&self, bytes: usize) {
        let mut state = self.state();
        state.bound = bytes.max(1);
        self.bound.store(state.bound, Ordering::Relaxed);
    }

    /// (bound, transfers running, bytes held), at this moment.
    pub fn snapshot(&self) -> (usize, usize, usize) {
        let state = self.state();
        (
            state.bound,
            state.transfers,
            self.held.load(Ordering::Relaxed),
        )
    }

    /// A share for one more transfer; `cap` is its own bound, if it has one.
    pub(crate) fn join(&'static self, cap: Option<usize>) -> Share {
        let mut state = self.state();
        state.transfers += 1;
        if state.transfers == 1 {
            super::rss::first_started();
        }
        drop(state);
        Share {
            process: self,
            cap: cap.unwrap_or(usize::MAX).max(1),
            held: AtomicUsize::new(0),
            running: AtomicBool::new(true),
        }
    }

    /// Gives malloc's free memory back to the system once no transfer runs; called after a
    /// transfer's chunks are freed. A no-op while any transfer runs, and off glibc.
    pub fn release_memory_if_idle(&self) {
        if self.state().transfers > 0 {
            return;
        }
        super::rss::trim();
    }
}

/// One transfer's part of a process bound, from `Process::join` until `leave` (or drop).
pub(crate) struct Share {
    process: &'static Process,
    cap: usize,
    held: AtomicUsize,
    running: AtomicBool,
}

impl Share {
    /// The bytes this transfer may hold now, besides the one chunk it always may (`fits`).
    pub(crate) fn limit(&self) -> usize {
        self.limit_in(&self.process.state())
    }

    fn limit_in(&self, state: &State) -> usize {
        (state.bound / state.transfers.max(1)).min(self.cap).max(1)
    }

    /// Bytes the process may still take before it reaches its bound (0 when over it).
    pub(crate) fn process_room(&self) -> usize {
        self.room_in(&self.process.state())
    }

    fn room_in(&self, state: &State) -> usize {
        state
            .bound
            .saturating_sub(self.process.held.load(Ordering::Relaxed))
    }

    /// Whether `len` more bytes fit next to the `held` ones: within the share and the process
    /// bound, or as the one chunk held.
    pub(crate) fn fits(&self, held: usize, len: usize) -> bool {
        if held == 0 {
            return true;
        }
        held + len <= self.limit() && len <= self.process_room()
    }

    pub(crate) fn add(&self, len: usize) {
        self.held.fetch_add(len, Ordering::Relaxed);
        self.process.held.fetch_add(len, Ordering::Relaxed);
        super::rss::moved(len, self.process.bound.load(Ordering::Relaxed));
    }

    pub(crate) fn sub(&self, len: usize) {
        self.held.fetch_sub(len, Ordering::Relaxed);
        self.process.held.fetch_sub(len, Ordering::Relaxed);
        super::rss::moved(len, self.process.bound.load(Ordering::Relaxed));
    }

    /// Takes what `plan` returns, planned from this share's limit and the process's room, in
    /// one step under the process lock: transfers planning at once cannot each count the same
    /// room. Each byte planned holds `per_byte` bytes of memory (`plan` sees the limit and the
    /// room divided by it). Returns the lengths planned; their bytes are held from now on.
    pub(crate) fn reserve(
        &self,
        per_byte: usize,
        plan: impl FnOnce(usize, usize) -> Vec<usize>,
    ) -> Vec<usize> {
        let state = self.process.state();
        let lengths = plan(
            self.limit_in(&state) / per_byte,
            self.room_in(&state) / per_byte,
        );
        self.add(per_byte * lengths.iter().sum::<usize>());
        lengths
    }

    /// The transfer ended: the others share the bound without it. Idempotent.
    pub(crate) fn leave(&self) {
        if self.running.swap(false, Ordering::AcqRel) {
            self.process.state().transfers -= 1;
        }
    }
}

impl Drop for Share {
    /// Its bytes go before it leaves, so that the process never counts them without it.
    fn drop(&mut self) {
        let held = *self.held.get_mut();
        self.process.held.fetch_sub(held, Ordering::Relaxed);
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(bound: usize) -> &'static Process {
        Box::leak(Box::new(Process::new(bound)))
    }

    #[test]
    fn one_transfer_alone_has_the_whole_bound() {
        let process = process(64);
        assert_eq!(process.join(None).limit(), 64);
        assert_eq!(process.join(Some(16)).limit(), 16);
    }

    #[test]
    fn transfers_share_evenly_and_a_capped_one_takes_no_more_than_its_cap() {
        let process = process(64);
        let (a, b, capped) = (
            process.join(None),
            process.join(None),
            process.join(Some(4)),
        );
        assert_eq!(process.snapshot().1, 3);
        assert_eq!((a.limit(), b.limit(), capped.limit()), (21, 21, 4));
        drop(capped);
        assert_eq!(a.limit(), 32);
    }

    #[test]
    fn one_chunk_always_fits_more_only_within_the_share() {
        let process = process(16);
        let shares: Vec<_> = (0..8).map(|_| process.join(None)).collect();
        assert_eq!(shares[0].limit(), 2);
        assert!(shares[0].fits(0, 1000));
        assert!(shares[0].fits(1, 1));
        assert!(!shares[0].fits(1, 2));
    }

    #[test]
    fn beyond_the_first_chunk_the_process_must_be_within_the_bound() {
        let process = process(16);
        let (early, late) = (process.join(None), process.join(None));
        // `early` read ahead alone (16) before `late` joined; `late` still gets its one chunk.
        early.add(16);
        assert!(late.fits(0, 4));
        late.add(4);
        // Within its share of 8, but not while the process is over the bound.
        assert!(!late.fits(4, 2));
        early.sub(14);
        assert!(late.fits(4, 2));
    }

    #[test]
    fn a_reservation_takes_the_room_it_planned_from() {
        let process = process(64);
        let (a, b) = (process.join(None), process.join(None));
        let planned = a.reserve(1, |limit, room| {
            assert_eq!((limit, room), (32, 64));
            vec![16, 16]
        });
        assert_eq!(planned, vec![16, 16]);
        // `b` plans after `a` and sees what is left, not the room `a` saw.
        b.reserve(1, |_, room| {
            assert_eq!(room, 32);
            vec![]
        });
        assert_eq!(process.snapshot(), (64, 2, 32));
    }

    #[test]
    fn a_reservation_of_bytes_held_twice_plans_from_half_the_room() {
        let process = process(64);
        let a = process.join(None);
        let planned = a.reserve(2, |limit, room| {
            assert_eq!((limit, room), (32, 32));
            vec![16, 16]
        });
        assert_eq!(planned, vec![16, 16]);
        assert_eq!(process.snapshot(), (64, 1, 64));
    }

    #[test]
    fn held_bytes_are_counted_for_the_process_until_the_share_goes() {
        let process = process(64);
        let (a, b) = (process.join(None), process.join(None));
        a.add(10);
        b.add(5);
        b.sub(5);
        assert_eq!(process.snapshot(), (64, 2, 10));
        a.leave();
        a.leave();
        assert_eq!(process.snapshot().1, 1);
        drop(a);
        assert_eq!(process.snapshot(), (64, 1, 0));
        process.set_bound(8);
        assert_eq!(b.limit(), 8);
    }
}

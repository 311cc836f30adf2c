//! Reading one image in order, chunk by chunk, with reads in flight ahead of the consumer within
//! the download's share of the process bound (`shares`): the consumer takes each chunk as soon
//! as it has arrived, while the next ones are already on their way.
//!
//! Where each chunk lands is the caller's choice (`Destination`): the Python reader hands
//! librbd the storage of a fresh `bytes` object, so a chunk is never copied.

use std::collections::VecDeque;
use std::sync::Arc;

use super::fence::{self, Fence};
use super::progress::{Kind, Progress};
use super::shares::{PROCESS, Share};
use crate::error::{Error, Op, Result, check};
use crate::io::{self, Image, Pool};
use crate::wait::Poll;

/// Bytes of memory a byte in flight holds: its destination, and librbd's buffers, which receive
/// a read before librbd copies it there and go once it completes. Counted once, a process read
/// with 64 MiB in flight peaked 129-141 MiB over its RSS before it; counted twice, 99-104 MiB,
/// at the same speed (docs/performance.md, "Memory").
const HELD_PER_BYTE: usize = 2;

/// Memory librbd reads a chunk into.
///
/// # Safety
///
/// `as_mut_ptr` must point to `size()` bytes that nothing else reads or writes, and that stay
/// where they are, until the value is dropped: librbd writes there from its own threads after
/// `Download::start` has taken the value.
pub unsafe trait Destination: Send + 'static {
    fn as_mut_ptr(&mut self) -> *mut u8;
    /// How many bytes to read into it.
    fn size(&self) -> usize;
}

// SAFETY: a vector's bytes are on the heap, so moving the vector does not move them, and
// nothing resizes or touches it while a `Download` holds it.
unsafe impl Destination for Vec<u8> {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        Vec::as_mut_ptr(self)
    }

    fn size(&self) -> usize {
        self.len()
    }
}

pub struct DownloadOptions {
    pub pool: String,
    pub image: String,
    pub snapshot: Option<String>,
    pub chunk_size: usize,
    /// This download's own bound on the bytes in flight ahead of the consumer, besides its
    /// share of the process bound; None: the share alone. One chunk always is in flight.
    pub max_in_flight: Option<usize>,
}

/// Fields drop in order: the operation waits for the read before its destination goes.
struct Pending<D> {
    read: Box<dyn io::Pending>,
    offset: u64,
    destination: D,
}

/// One image read in order; see the module doc.
pub struct Download<D: Destination> {
    pool: Arc<dyn Pool>,
    /// None once abandoned: its client was fenced, and its reads left to librbd.
    image: Option<Box<dyn Image>>,
    fence: Fence,
    size: u64,
    chunk_size: usize,
    share: Share,
    progress: Progress,
    /// Where the next read starts.
    next: u64,
    /// Bytes handed to the consumer.
    delivered: u64,
    queue: VecDeque<Pending<D>>,
    in_flight: usize,
    /// Bytes `wanted` planned and reserved in the share that `start` has not yet taken.
    reserved: usize,
}

impl<D: Destination> Download<D> {
    /// Opens the image in `pool` (`options.pool`), at the snapshot if one is named; nothing is
    /// read yet. The open is guarded as the reads are (`fence::guarded`): a fenced client's
    /// fails, and `poll` ends it.
    pub fn open(pool: Arc<dyn Pool>, options: &DownloadOptions, poll: Poll) -> Result<Self> {
        if options.chunk_size == 0 {
            return Err(Error::Usage("chunk_size must be at least 1 byte".into()));
        }
        let mut watch = Fence::client(Arc::clone(&pool), pool.target(&options.image));
        let (opener, name, snapshot) = (
            Arc::clone(&pool),
            options.image.clone(),
            options.snapshot.clone(),
        );
        let (image, size, id) = fence::guarded(&mut watch, Some(poll), move || {
            let image = opener.open(&name, snapshot.as_deref())?;
            let (size, id) = (image.size()?, image.id()?);
            Ok::<_, Error>((image, size, id))
        })??;
        let fence = Fence::new(Arc::clone(&pool), &id, image.target().clone());
        Ok(Download {
            pool,
            image: Some(image),
            fence,
            size,
            chunk_size: options.chunk_size,
            share: PROCESS.join(options.max_in_flight),
            progress: Progress::register(Kind::Download, &options.pool, &options.image, size),
            next: 0,
            delivered: 0,
            queue: VecDeque::new(),
            in_flight: 0,
            reserved: 0,
        })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// The lengths of the reads to start now to fill the bound, in order: the caller makes a
    /// destination of each length and hands them to `start`. Their bytes are reserved in the
    /// share at once, since the caller allocates them before starting (a reservation not
    /// started by the next call is given back then).
    pub fn wanted(&mut self) -> Vec<usize> {
        self.share
            .sub(HELD_PER_BYTE * std::mem::take(&mut self.reserved));
        let (next, size, chunk, in_flight) =
            (self.next, self.size, self.chunk_size, self.in_flight);
        let lengths = self.share.reserve(HELD_PER_BYTE, |limit, room| {
            plan(next, size, chunk, in_flight, limit, room)
        });
        self.reserved = lengths.iter().sum();
        lengths
    }

    /// Starts reading the next `destination.size()` bytes into `destination`.
    pub fn start(&mut self, mut destination: D) -> Result<()> {
        let len = destination.size();
        if len == 0 || len > self.reserved || self.next + len as u64 > self.size {
            // `wanted` never plans such a read: the caller did not follow it.
            return Err(Error::Internal(format!(
                "a read of {len} bytes at {} was not planned ({} reserved, image of {} bytes)",
                self.next, self.reserved, self.size
            )));
        }
        let image = self.image.as_deref().ok_or_else(abandoned)?;
        // SAFETY: the destination is `len` writable bytes that stay in place in `Pending` until
        // the read has completed (`Destination`'s contract), and `Pending` drops (and so waits
        // for) the read first.
        let read = unsafe { image.read(self.next, destination.as_mut_ptr(), len)? };
        self.queue.push_back(Pending {
            read,
            offset: self.next,
            destination,
        });
        self.next += len as u64;
        self.in_flight += len;
        self.reserved -= len;
        Ok(())
    }

    /// The next chunk, in order, once it has arrived; None at the end of the image.
    pub fn next_chunk(&mut self, poll: Poll) -> Result<Option<D>> {
        self.read_next(poll)
            .inspect_err(|err| self.pool.forget_if_refused(err))
    }

    fn read_next(&mut self, poll: Poll) -> Result<Option<D>> {
        let _call = self.progress.call();
        let Some(oldest) = self.queue.front() else {
            self.share.leave();
            self.progress.end();
            return Ok(None);
        };
        let fence = &mut self.fence;
        let waited = oldest.read.wait(&mut || {
            poll()?;
            fence.check()
        });
        let ret = match waited {
            Err(err) if fence::is_fenced(&err) => return Err(self.abandon(err)),
            other => other?,
        };
        self.fence.moved();
        let pending = self.queue.pop_front().expect("front exists");
        let len = pending.destination.size();
        self.in_flight -= len;
        self.share.sub(HELD_PER_BYTE * len);
        let target = self.image.as_ref().ok_or_else(abandoned)?.target().clone();
        let read = check(ret as i64, Op::Read, &target);
        let read = match read {
            Err(err) if fence::is_fenced(&err) => return Err(self.abandon(err)),
            other => other?,
        };
        if read != len as i64 {
            // The image shrank under the reader: what was asked for is not there any more.
            log::debug!("read of {len} bytes at {} returned {read}", pending.offset);
            return Err(Error::ceph(Op::ShortRead, &target, -libc::EIO as i64));
        }
        self.delivered += len as u64;
        self.progress.advance(self.delivered);
        Ok(Some(pending.destination))
    }

    /// Leaves the reads in flight, and the image after them, to a thread that waits for them:
    /// the client was fenced, and they may never complete. The connection is dropped from the
    /// cache, so that the next transfer connects again. Returns `why`.
    fn abandon(&mut self, why: Error) -> Error {
        log::info!("abandoning the download: {why}");
        let pending = std::mem::take(&mut self.queue);
        let image = self.image.take();
        if why.errno() == Some(libc::ESHUTDOWN) {
            self.pool.forget_fenced();
        }
        self.stop();
        fence::abandon(pending, image, "the reads in flight");
        why
    }

    /// Reads no more: gives the share back and ends the progress.
    fn stop(&mut self) {
        self.share
            .sub(HELD_PER_BYTE * (self.in_flight + self.reserved));
        self.share.leave();
        self.progress.end();
        self.in_flight = 0;
        self.reserved = 0;
        self.next = self.size;
    }

    /// Waits for the reads still in flight and gives their destinations back, unread: for a
    /// consumer that stops early. The image closes when the Download is dropped.
    pub fn drain(&mut self) -> Vec<D> {
        self.stop();
        self.queue
            .drain(..)
            .map(|pending| {
                let Pending {
                    read, destination, ..
                } = pending;
                drop(read); // waits for the read
                destination
            })
            .collect()
    }
}

fn abandoned() -> Error {
    Error::Usage("the download was abandoned: its client was fenced".into())
}

/// The reads to start from `next` in an image of `size` bytes, chunk by chunk, while the bytes
/// in flight stay within `limit` (the share) and the new ones within `room` (what the process
/// may still take); with nothing in flight, one read goes whatever its size.
fn plan(
    mut next: u64,
    size: u64,
    chunk: usize,
    mut in_flight: usize,
    limit: usize,
    mut room: usize,
) -> Vec<usize> {
    let mut lengths = Vec::new();
    while next < size {
        let len = usize::try_from(size - next).map_or(chunk, |left| left.min(chunk));
        if in_flight > 0 && (in_flight + len > limit || len > room) {
            break;
        }
        lengths.push(len);
        next += len as u64;
        in_flight += len;
        room = room.saturating_sub(len);
    }
    lengths
}

impl<D: Destination> Drop for Download<D> {
    /// Destinations must outlive librbd's use of them, and reads the image: drained first.
    fn drop(&mut self) {
        drop(self.drain());
    }
}

#[cfg(test)]
mod tests {
    use super::plan;

    const MIB: usize = 1 << 20;

    #[test]
    fn fills_the_bound_in_chunks() {
        assert_eq!(
            plan(0, 100 * MIB as u64, 8 * MIB, 0, 64 * MIB, usize::MAX),
            vec![8 * MIB; 8]
        );
    }

    #[test]
    fn tops_up_as_chunks_are_taken() {
        assert_eq!(
            plan(
                64 * MIB as u64,
                100 * MIB as u64,
                8 * MIB,
                56 * MIB,
                64 * MIB,
                usize::MAX
            ),
            vec![8 * MIB]
        );
        assert!(
            plan(
                64 * MIB as u64,
                100 * MIB as u64,
                8 * MIB,
                60 * MIB,
                64 * MIB,
                usize::MAX
            )
            .is_empty()
        );
    }

    #[test]
    fn the_last_chunk_is_short_and_nothing_follows_the_end() {
        assert_eq!(
            plan(0, 10 * MIB as u64 + 5, 8 * MIB, 0, 64 * MIB, usize::MAX),
            vec![8 * MIB, 2 * MIB + 5]
        );
        assert!(plan(7, 7, 8 * MIB, 0, 64 * MIB, usize::MAX).is_empty());
        assert!(plan(0, 0, 8 * MIB, 0, 64 * MIB, usize::MAX).is_empty());
    }

    #[test]
    fn reads_stop_where_the_process_runs_out_of_room() {
        let (size, chunk, limit) = (100 * MIB as u64, 8 * MIB, 64 * MIB);
        assert_eq!(plan(0, size, chunk, 0, limit, 20 * MIB), vec![chunk; 2]);
        // The first read goes even when the process has no room left.
        assert_eq!(plan(0, size, chunk, 0, limit, 0), vec![chunk]);
        assert!(plan(chunk as u64, size, chunk, chunk, limit, 0).is_empty());
    }

    #[test]
    fn one_read_goes_even_over_a_small_bound() {
        assert_eq!(
            plan(0, 32 * MIB as u64, 8 * MIB, 0, MIB, usize::MAX),
            vec![8 * MIB]
        );
        assert!(
            plan(
                8 * MIB as u64,
                32 * MIB as u64,
                8 * MIB,
                8 * MIB,
                MIB,
                usize::MAX
            )
            .is_empty()
        );
    }
}

//! One image upload: create the image, stream chunks with writes in flight, grow it when the size
//! is unknown, then finish (trim, snapshot) or abort (remove everything it made).

use std::sync::Arc;
use std::time::Instant;

use super::budget::Budget;
use super::digest::Digests;
use super::fence::{self, Fence};
use super::in_flight::{Buffer, InFlight};
use super::janitor;
use super::mark::Mark;
use super::progress::{Kind, Progress, Wait};
use super::shares::PROCESS;
use super::zeros;
use crate::error::{Error, Result, Target};
use crate::io::{Image, Pool};
use crate::wait::Poll;

/// librbd keeps sizes as signed 64-bit in places; larger sizes wrap instead of failing.
const MAX_IMAGE_SIZE: u64 = i64::MAX as u64;

/// Unknown-size images grow by their current size, within these bounds: few resizes for large
/// uploads (each one waits for the writes in flight), little to trim for small ones.
const MIN_GROWTH: u64 = 64 << 20;
const MAX_GROWTH: u64 = 8 << 30;

#[derive(Debug, Clone)]
pub struct UploadOptions {
    pub pool: String,
    pub image: String,
    /// Final size in bytes, or 0 when unknown (the image then grows as data arrives).
    pub size: u64,
    /// log2 of the object size.
    pub order: u8,
    /// Skip writing all-zero blocks: the image reads back the same, with less allocated.
    pub thin: bool,
    /// This upload's own bound on the chunk bytes it holds (in flight or being hashed), besides
    /// its share of the process bound (`shares`); None: the share alone.
    pub max_in_flight: Option<usize>,
    /// Snapshot to create and protect on finish, as glance does for copy-on-write clones.
    pub snapshot: Option<String>,
    /// hashlib names of the digests to compute over the data, on threads of their own.
    pub digests: Vec<String>,
}

/// What a finished upload did, for logs and benchmarks.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub bytes_written: u64,
    pub resizes: u32,
    pub trim_seconds: f64,
    /// (hashlib name, hex digest) for each requested digest.
    pub digests: Vec<(String, String)>,
}

/// The size an unknown-size image grows to so that `needed` bytes fit.
fn grown_size(current: u64, needed: u64, object_size: u64) -> u64 {
    let step = current.clamp(MIN_GROWTH, MAX_GROWTH);
    let target = needed.max(current.saturating_add(step));
    target.div_ceil(object_size).saturating_mul(object_size)
}

/// One image being written; see the module doc.
pub struct Upload {
    options: UploadOptions,
    pool: Arc<dyn Pool>,
    /// Open while the upload runs; None once finished or aborted.
    image: Option<Box<dyn Image>>,
    /// What removal acts on: the name may go to another image.
    image_id: String,
    in_flight: InFlight,
    digests: Digests,
    budget: Arc<Budget>,
    /// Who writes, in the pool's index, while the upload runs.
    mark: Mark,
    progress: Progress,
    written: u64,
    image_size: u64,
    snapshot_made: bool,
    /// A wait was interrupted mid-write: the data may be partly written, so only abort is left.
    interrupted: bool,
    /// Abort hands removal to the janitor instead of trying at once (the cluster timed out).
    remove_later: bool,
    summary: Summary,
}

impl Upload {
    /// Creates and opens the image in `pool` (`options.pool`). An image that already exists is
    /// left untouched. Guarded as the writes are (`fence::guarded`): a fenced client's start
    /// fails, and `poll` ends it; an upload its caller no longer waits for is dropped on its
    /// thread, which removes its image.
    pub fn start(pool: Arc<dyn Pool>, options: UploadOptions, poll: Poll) -> Result<Upload> {
        let target = Target::image(&options.pool, &options.image);
        let mut watch = Fence::client(Arc::clone(&pool), target);
        fence::guarded(&mut watch, Some(poll), move || {
            Upload::create(pool, options)
        })?
    }

    fn create(pool: Arc<dyn Pool>, options: UploadOptions) -> Result<Upload> {
        if options.size > MAX_IMAGE_SIZE {
            return Err(Error::Usage(format!(
                "size {} is larger than any RBD image can be ({MAX_IMAGE_SIZE} bytes)",
                options.size
            )));
        }
        if !(12..=25).contains(&options.order) {
            return Err(Error::Usage(format!(
                "order must be between 12 (4 KiB objects) and 25 (32 MiB), got {}",
                options.order
            )));
        }
        let digests = Digests::start(&options.digests)?;
        pool.create(&options.image, options.size, options.order)?;
        // The image exists from here on: failing to open it must not leave it behind.
        let image = match pool.open(&options.image, None) {
            Ok(image) => image,
            Err(err) => {
                let removed = pool
                    .image_id(&options.image)
                    .and_then(|id| pool.remove(&options.image, &id, None));
                if let Err(cleanup) = removed {
                    log::warn!("could not remove the new image after a failed open: {cleanup}");
                }
                return Err(err);
            }
        };
        // Removal acts on the id: the name may be given to another image meanwhile.
        let image_id = match image.id() {
            Ok(id) => id,
            Err(err) => {
                drop(image);
                let _ = pool
                    .image_id(&options.image)
                    .and_then(|id| pool.remove(&options.image, &id, None));
                return Err(err);
            }
        };
        // Open first: a marked image always has its writer's watch while the writer lives.
        let mark = Mark::set(Arc::clone(&pool), &options.image, &image_id, options.size);
        let progress =
            Progress::register(Kind::Upload, &options.pool, &options.image, options.size);
        Ok(Upload {
            in_flight: InFlight::new(
                progress.clone(),
                Fence::new(Arc::clone(&pool), &image_id, image.target().clone()),
            ),
            digests,
            budget: Budget::new(PROCESS.join(options.max_in_flight)),
            mark,
            progress,
            image_size: options.size,
            options,
            pool,
            image: Some(image),
            image_id,
            written: 0,
            snapshot_made: false,
            interrupted: false,
            remove_later: false,
            summary: Summary::default(),
        })
    }

    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    pub fn resizes(&self) -> u32 {
        self.summary.resizes
    }

    /// What the upload did; complete once finished.
    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    pub fn is_open(&self) -> bool {
        self.image.is_some()
    }

    pub fn target(&self) -> Target {
        Target::image(&self.options.pool, &self.options.image)
    }

    /// Appends `buffer` to the image. Returns once the bytes in flight are back under the bound.
    /// Any failure aborts the upload before it is returned.
    pub fn write(&mut self, buffer: Buffer, poll: Poll) -> Result<()> {
        let _call = self.progress.call();
        self.check_not_interrupted()?;
        let len = (*buffer).as_ref().len() as u64;
        let end = self.written + len;
        if self.options.size != 0 && end > self.options.size {
            let err = Error::Usage(format!(
                "writing {len} bytes at offset {} would pass the end of {} ({} bytes)",
                self.written,
                self.target(),
                self.options.size
            ));
            return Err(self.fail(err));
        }
        let result = self.write_at(buffer, poll);
        result.map_err(|err| self.fail(err))
    }

    fn write_at(&mut self, buffer: Buffer, poll: Poll) -> Result<()> {
        let image = self.image.as_deref().ok_or_else(closed)?;
        let len = (*buffer).as_ref().len();
        // Room first: the writes reaped here and the digests finished elsewhere free it.
        loop {
            self.in_flight.reap_completed(image)?;
            if self.budget.fits(len) {
                break;
            }
            if self.in_flight.is_empty() {
                let _share = self.progress.waiting(Wait::Share);
                self.budget.wait_until_fits(len, poll)?;
            } else {
                self.in_flight.reap_oldest(image, poll)?;
            }
        }
        let buffer = self.budget.track(buffer);
        let data = (*buffer).as_ref();
        let offset = self.written;
        let end = offset + data.len() as u64;
        if end > self.image_size {
            // Growing waits for the writes in flight inside librbd; large steps keep that rare.
            let object_size = 1u64 << self.options.order;
            let new_size = grown_size(self.image_size, end, object_size);
            log::debug!("growing {} to {new_size} bytes", self.target());
            self.sync_call(move |image| image.resize(new_size))?;
            self.image_size = new_size;
            self.summary.resizes += 1;
        }
        let image = self.image.as_deref().ok_or_else(closed)?;
        let ranges = if self.options.thin {
            zeros::data_ranges(data, offset)
        } else {
            std::iter::once(0..data.len()).collect()
        };
        let limit = self.budget.limit();
        for range in ranges {
            // Split so a chunk larger than the bound still keeps at most that much in flight.
            let mut start = range.start;
            while start < range.end {
                let stop = range.end.min(start + limit);
                let piece = start..stop;
                self.in_flight
                    .submit(image, offset + start as u64, &buffer, piece, limit, poll)?;
                start = stop;
            }
        }
        // Hashing runs on its own threads while the writes just submitted are on the wire.
        self.digests.feed(&buffer)?;
        self.written = end;
        self.mark
            .refresh(self.written - self.in_flight.bytes() as u64);
        self.progress.advance(end);
        Ok(())
    }

    /// Waits for every write, flushes, trims an unknown-size image to the bytes written, then
    /// creates and protects the snapshot. Any failure aborts the upload before it is returned.
    pub fn finish(&mut self, poll: Poll) -> Result<Summary> {
        let _call = self.progress.call();
        self.check_not_interrupted()?;
        let result = self.finish_inner(poll);
        result.map_err(|err| self.fail(err))
    }

    fn finish_inner(&mut self, poll: Poll) -> Result<Summary> {
        let image = self.image.as_deref().ok_or_else(closed)?;
        self.in_flight.drain(image, poll)?;
        self.summary.digests = self.digests.finish()?;
        self.sync_call(|image| image.flush())?;
        if self.options.size == 0 && self.image_size != self.written {
            let started = Instant::now();
            let written = self.written;
            self.sync_call(move |image| image.resize(written))?;
            self.summary.trim_seconds = started.elapsed().as_secs_f64();
            self.image_size = self.written;
        }
        if let Some(snap) = self.options.snapshot.clone() {
            let made = self.sync_call({
                let snap = snap.clone();
                move |image| image.snap_create(&snap)
            });
            self.snapshot_made = made.is_ok();
            made?;
            self.sync_call(move |image| image.snap_protect(&snap))?;
        }
        self.image = None;
        self.mark.clear();
        self.budget.leave();
        self.progress.end();
        self.summary.bytes_written = self.written;
        log::debug!(
            "finished {}: {} bytes, {} resizes, trim {:.3}s",
            self.target(),
            self.written,
            self.summary.resizes,
            self.summary.trim_seconds
        );
        Ok(self.summary.clone())
    }

    /// Drains the writes in flight, then removes the snapshot and the image. Idempotent.
    /// An interrupted drain leaves the upload open with its writes still tracked, so buffers
    /// outlive librbd's use of them; calling abort again picks up where it stopped.
    pub fn abort(&mut self, poll: Poll) -> Result<()> {
        let _call = self.progress.call();
        let Some(image) = self.image.as_deref() else {
            return Ok(());
        };
        match self.in_flight.drain(image, poll) {
            Err(Error::Interrupted) => return Err(Error::Interrupted),
            Err(err) if fence::is_fenced(&err) => {
                self.abandon(&err);
                return Ok(());
            }
            Err(err) => log::debug!("write failed while aborting {}: {err}", self.target()),
            Ok(()) => {}
        }
        let image = self.image.take();
        self.budget.leave();
        self.progress.end();
        self.digests.stop();
        let snapshot = self
            .options
            .snapshot
            .as_deref()
            .filter(|_| self.snapshot_made);
        let name = &self.options.image;
        if self.remove_later {
            // Closing would wait on the timed-out cluster as well: the janitor does both, and
            // clears the mark after.
            let mark = self.mark.hand_over();
            janitor::remove_later(
                image,
                mark,
                &self.image_id,
                snapshot,
                &"the cluster timed out",
            );
            return Ok(());
        }
        // Closed first: the exclusive lock goes with it, so removal can follow.
        drop(image);
        match self.pool.remove(name, &self.image_id, snapshot) {
            // Closed, the image may be swept by `glance-rbd-native sweep` before this removal
            // (ENOENT), and its name given to a new image (ESTALE, which is left alone).
            Ok(())
            | Err(Error::Ceph {
                errno: libc::ENOENT | libc::ESTALE,
                ..
            }) => {}
            Err(err) => {
                let mark = self.mark.hand_over();
                janitor::remove_later(None, mark, &self.image_id, snapshot, &err);
                return Err(err);
            }
        }
        self.mark.clear();
        log::info!("removed partial {}", self.target());
        Ok(())
    }

    /// Ends an upload whose client was fenced, or whose image was removed, without waiting
    /// for what it has in flight: that is left to librbd on a thread of its own, with the
    /// image. Its clean-up goes through a new connection, which the cache keeps for the
    /// transfers that follow: the image, if it is still the one this upload created, and the
    /// mark, if it is still this writer's.
    fn abandon(&mut self, why: &Error) {
        log::info!("abandoning the upload to {}: {why}", self.target());
        let image = self.image.take();
        self.in_flight.abandon(image);
        self.budget.leave();
        self.progress.end();
        self.digests.stop();
        let name = self.options.image.clone();
        let connection = if why.errno() == Some(libc::ESHUTDOWN) {
            self.pool.reconnect()
        } else {
            Ok(Arc::clone(&self.pool))
        };
        let cleaned = connection.and_then(|pool| {
            let snapshot = self
                .options
                .snapshot
                .as_deref()
                .filter(|_| self.snapshot_made);
            let removed = match why.errno() {
                Some(libc::ENOENT) => Ok(()), // removed by whoever fenced it
                _ => pool.remove(&name, &self.image_id, snapshot),
            };
            self.mark.clear_through(&*pool);
            removed
        });
        match cleaned {
            Ok(())
            | Err(Error::Ceph {
                errno: libc::ENOENT | libc::ESTALE,
                ..
            }) => log::info!("removed partial {}", self.target()),
            Err(err) => log::warn!(
                "could not remove partial {} after its client was fenced: {err}; \
                 `glance-rbd-native sweep` lists it",
                self.target()
            ),
        }
    }

    /// A synchronous librbd call on the open image, which a fenced client's wait cannot hold
    /// for good (`InFlight::guarded`). Fenced, the image stays with the call.
    fn sync_call<T: Send + 'static>(
        &mut self,
        call: impl FnOnce(&dyn Image) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let image = self.image.take().ok_or_else(closed)?;
        let (back, result) = self.in_flight.guarded(image, call);
        self.image = back;
        result
    }

    fn check_not_interrupted(&self) -> Result<()> {
        if self.interrupted && self.is_open() {
            return Err(Error::Usage(format!(
                "the upload to {} was interrupted and may be partly written: abort it",
                self.target()
            )));
        }
        Ok(())
    }

    /// Aborts after `err`, keeping `err` as what the caller sees. An interrupted wait is not a
    /// failure of the upload: it stays open (refusing more data), and the caller aborts it.
    fn fail(&mut self, err: Error) -> Error {
        if matches!(err, Error::Interrupted) {
            self.interrupted = true;
            return err;
        }
        self.pool.forget_if_refused(&err);
        if fence::is_fenced(&err) {
            self.abandon(&err);
            return err;
        }
        // A timed-out cluster would time out the removal too (several round trips): leave it to
        // the janitor, so the caller hears of the failure after one timeout, not five.
        if err.errno() == Some(libc::ETIMEDOUT) {
            self.remove_later = true;
        }
        // Uninterruptible here: librados' timeouts bound the wait for the writes in flight.
        if let Err(cleanup) = self.abort(&mut || Ok(())) {
            log::error!(
                "could not remove {} after a failure: {cleanup}",
                self.target()
            );
        }
        err
    }
}

impl Drop for Upload {
    /// An upload dropped while open was never finished: remove what it wrote.
    fn drop(&mut self) {
        if self.is_open() {
            if let Err(err) = self.abort(&mut || Ok(())) {
                log::error!("could not remove unfinished {}: {err}", self.target());
            }
        }
    }
}

fn closed() -> Error {
    Error::Usage("the writer is closed: it was finished or aborted".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OBJ: u64 = 8 << 20;

    #[test]
    fn first_growth_is_at_least_the_minimum_step() {
        assert_eq!(grown_size(0, 1, OBJ), MIN_GROWTH);
        assert_eq!(grown_size(0, OBJ, OBJ), MIN_GROWTH);
    }

    #[test]
    fn growth_fits_a_chunk_larger_than_the_step() {
        let needed = MIN_GROWTH + 3 * OBJ + 1;
        let size = grown_size(0, needed, OBJ);
        assert!(size >= needed);
        assert_eq!(size % OBJ, 0);
    }

    #[test]
    fn growth_doubles_then_caps() {
        assert_eq!(grown_size(1 << 30, (1 << 30) + 1, OBJ), 2 << 30);
        assert_eq!(grown_size(64 << 30, (64 << 30) + 1, OBJ), 72 << 30);
    }

    #[test]
    fn resizes_for_a_large_upload_stay_few() {
        let (mut size, mut resizes) = (0u64, 0);
        let total = 200u64 << 30;
        let mut written = 0;
        while written < total {
            written += OBJ;
            if written > size {
                size = grown_size(size, written, OBJ);
                resizes += 1;
            }
        }
        assert!(resizes <= 32, "{resizes} resizes for 200 GiB");
        assert!(size - written <= MAX_GROWTH);
    }
}

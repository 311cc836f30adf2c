//! librbd and librados as the transfer core's image I/O (`io::Pool`, `io::Image`,
//! `io::Pending`): a pool of a shared cluster connection, its images, their operations.

use std::ffi::CString;
use std::sync::Arc;
use std::time::Duration;

use super::cluster::{Cluster, IoCtx, cstring};
use super::completion::Completion;
use super::image::{self, Image};
use super::omap::{self, Entry};
use super::{ffi, manager};
use crate::error::{Error, Op, Result, Target};
use crate::io::{self, OmapChange, OmapWrite};
use crate::wait::Poll;

/// librbd's `RBD_FEATURE_LAYERING`, used when the cluster sets no default features (as glance does).
const FEATURE_LAYERING: u64 = 1;

/// One pool of a cluster connection.
pub struct RbdPool {
    ioctx: Arc<IoCtx>,
}

impl RbdPool {
    /// `pool` on `cluster`, as a transfer's image I/O.
    pub fn open(cluster: &Arc<Cluster>, pool: &str) -> Result<Arc<dyn io::Pool>> {
        Ok(RbdPool::of(Arc::new(cluster.pool(pool)?)))
    }

    /// The pool of `ioctx`, as image I/O.
    pub fn of(ioctx: Arc<IoCtx>) -> Arc<dyn io::Pool> {
        Arc::new(RbdPool { ioctx })
    }

    /// The cluster's `rbd_default_features`, as glance reads them; layering when unset or zero.
    fn default_features(&self) -> u64 {
        match self
            .ioctx
            .cluster()
            .conf_get("rbd_default_features")
            .map(|v| v.trim().parse::<u64>())
        {
            Ok(Ok(features)) if features != 0 => features,
            _ => FEATURE_LAYERING,
        }
    }
}

impl io::Pool for RbdPool {
    fn target(&self, image: &str) -> Target {
        self.ioctx.target(image)
    }

    fn create(&self, name: &str, size: u64, order: u8) -> Result<()> {
        let features = self.default_features();
        log::debug!(
            "creating {} with order {order}, size {size} and features {features}",
            self.target(name)
        );
        image::create(&self.ioctx, name, size, features, order)
    }

    fn open(&self, name: &str, snapshot: Option<&str>) -> Result<Box<dyn io::Image>> {
        Ok(Box::new(Image::open(
            Arc::clone(&self.ioctx),
            name,
            snapshot,
        )?))
    }

    fn image_id(&self, name: &str) -> Result<String> {
        image::id_of(&self.ioctx, name)
    }

    fn remove(&self, name: &str, id: &str, snapshot: Option<&str>) -> Result<()> {
        image::remove_with_snapshot(&self.ioctx, name, id, snapshot)
    }

    fn break_locks_of(&self, id: &str, owner: u64) -> Result<usize> {
        image::break_locks_of(&self.ioctx, id, owner)
    }

    fn probe(&self, id: Option<&str>) -> i32 {
        let object = id.map_or_else(
            || "rbd_directory".to_owned(),
            |id| format!("rbd_header.{id}"),
        );
        let Ok(header) = CString::new(object) else {
            return 0;
        };
        let (mut size, mut mtime) = (0u64, 0 as libc::time_t);
        // SAFETY: the ioctx is live; header is NUL-terminated; size and mtime are
        // out-parameters on this stack.
        unsafe {
            ceph::rados::rados_stat(self.ioctx.handle(), header.as_ptr(), &mut size, &mut mtime)
        }
    }

    fn omap_write(&self, write: &OmapWrite<'_>) -> Result<()> {
        let entry = Entry {
            ioctx: &self.ioctx,
            object: write.object,
            key: write.key,
        };
        let (expect, op, target) = (write.expect, write.op, write.target);
        match write.change {
            OmapChange::Set(value) => omap::set(entry, value, expect, op, target),
            OmapChange::Remove => omap::remove(entry, expect, op, target),
        }
    }

    fn client(&self) -> (u64, Option<String>) {
        let cluster = self.ioctx.cluster();
        (cluster.instance_id(), cluster.address())
    }

    fn forget_if_refused(&self, err: &Error) {
        self.ioctx.cluster().forget_if_refused(err);
    }

    fn forget_fenced(&self) {
        self.ioctx.cluster().forget_fenced();
    }

    fn reconnect(&self) -> Result<Arc<dyn io::Pool>> {
        let cluster = self.ioctx.cluster().replace_fenced()?;
        RbdPool::open(&cluster, self.ioctx.pool())
    }

    fn bounded(&self, seconds: u32) -> Result<Arc<dyn io::Pool>> {
        match self.ioctx.cluster().bounded(seconds)? {
            None => Ok(RbdPool::of(Arc::clone(&self.ioctx))),
            Some(cluster) => RbdPool::open(&cluster, self.ioctx.pool()),
        }
    }

    fn snap_unprotect(&self, name: &str, snap: &str, clones_first: bool) -> Result<()> {
        let image = Image::open(Arc::clone(&self.ioctx), name, None)?;
        if clones_first && image.has_clones(snap)? {
            return Err(Error::ceph(
                Op::UnprotectSnapshot,
                image.target(),
                -i64::from(libc::EBUSY),
            ));
        }
        image.snap_unprotect(snap)
    }

    fn snap_remove(&self, name: &str, snap: &str) -> Result<()> {
        Image::open(Arc::clone(&self.ioctx), name, None)?.snap_remove(snap)
    }

    fn inspect(&self, name: &str) -> Result<io::Inspected> {
        let image = Image::inspect(Arc::clone(&self.ioctx), name)?;
        Ok(io::Inspected {
            id: image.id()?,
            snapshots: image.snapshot_count()?,
            watchers: image.watcher_count()?,
        })
    }

    fn trash_move(&self, name: &str) -> Result<()> {
        image::trash_move(&self.ioctx, name)
    }

    fn trash_snap_remove(&self, name: &str, id: &str, snap: &str) -> Result<()> {
        Image::open_by_id(Arc::clone(&self.ioctx), id, name)?.snap_remove(snap)
    }

    fn trash_remove(&self, name: &str, id: &str) -> Result<()> {
        image::trash_remove(&self.ioctx, name, id)
    }

    fn in_trash(&self, id: &str) -> std::result::Result<bool, i32> {
        let id = cstring(id).map_err(|_| -libc::EINVAL)?;
        image::trash_get(&self.ioctx, &id)
            .map(|entry| entry.is_some())
            .map_err(|errno| -errno)
    }

    fn manager_says_busy(&self, id: &str, wait: Duration) -> bool {
        let list = r#"{"prefix":"rbd task list","format":"json"}"#;
        match self.ioctx.cluster().mgr_command(list, wait) {
            Ok(tasks) => manager::busy(&tasks, self.ioctx.pool(), id),
            Err((errno, status)) => {
                log::debug!("`rbd task list`: errno {}: {status}", -errno);
                false
            }
        }
    }

    fn manager_trash_remove(
        &self,
        id: &str,
        wait: Duration,
    ) -> std::result::Result<(), (i32, String)> {
        let spec = format!("{}/{id}", self.ioctx.pool());
        let command = format!(
            r#"{{"prefix":"rbd task add trash remove","image_id_spec":{},"format":"json"}}"#,
            crate::json::json_string(&spec)
        );
        self.ioctx.cluster().mgr_command(&command, wait).map(drop)
    }

    fn times_out(&self) -> bool {
        self.ioctx.cluster().times_out()
    }

    fn user(&self) -> (String, String) {
        let cluster = self.ioctx.cluster();
        (cluster.entity().to_owned(), cluster.fsid().to_owned())
    }
}

impl io::Image for Image {
    fn target(&self) -> &Target {
        Image::target(self)
    }

    fn id(&self) -> Result<String> {
        Image::id(self)
    }

    fn size(&self) -> Result<u64> {
        Image::size(self)
    }

    fn resize(&self, size: u64) -> Result<()> {
        Image::resize(self, size)
    }

    fn flush(&self) -> Result<()> {
        Image::flush(self)
    }

    fn snap_create(&self, snap: &str) -> Result<()> {
        Image::snap_create(self, snap)
    }

    fn snap_protect(&self, snap: &str) -> Result<()> {
        Image::snap_protect(self, snap)
    }

    unsafe fn write(&self, offset: u64, data: &[u8]) -> Result<Box<dyn io::Pending>> {
        let mut completion = Completion::new(self, Op::StartWrite)?;
        // SAFETY: the image is open; data stays valid until the completion has completed (the
        // caller's contract), and the completion waits for it when dropped.
        let ret = unsafe {
            ffi::rbd_aio_write(
                self.handle(),
                offset,
                data.len(),
                data.as_ptr().cast(),
                completion.handle(),
            )
        };
        completion.submitted(ret, Op::StartWrite, self)?;
        Ok(Box::new(completion))
    }

    unsafe fn read(&self, offset: u64, into: *mut u8, len: usize) -> Result<Box<dyn io::Pending>> {
        let mut completion = Completion::new(self, Op::StartRead)?;
        // SAFETY: the image is open; `into` is `len` writable bytes that stay in place until
        // the completion has completed (the caller's contract), which dropping it waits for.
        let ret = unsafe {
            ffi::rbd_aio_read(self.handle(), offset, len, into.cast(), completion.handle())
        };
        completion.submitted(ret, Op::StartRead, self)?;
        Ok(Box::new(completion))
    }
}

impl io::Pending for Completion {
    fn is_done(&self) -> bool {
        Completion::is_done(self)
    }

    fn wait(&self, poll: Poll) -> Result<isize> {
        Completion::wait(self, poll)
    }
}

//! `RbdWriter`, the Python face of an upload.
//!
//! GIL rule (`detach`): never block while attached to the interpreter.

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::exceptions::{OrRaise, to_python};
use crate::{buffer, detach, logbridge, process};
use glance_rbd_core::error::{Error, Result};
use glance_rbd_core::rbd::cluster::{Cluster, ConnectOptions};
use glance_rbd_core::rbd::pool::RbdPool;
use glance_rbd_core::sync;
use glance_rbd_core::transfer::upload::{Summary, Upload, UploadOptions};
use glance_rbd_core::transfer::{check_arguments, digest};

/// Streams one image into an RBD pool with asynchronous writes, bounded in flight by its share
/// of the process bound (`set_max_in_flight`), and by `max_in_flight` if given.
#[pyclass(frozen, module = "glance_rbd_native._native")]
pub(crate) struct RbdWriter {
    upload: Mutex<Upload>,
    #[pyo3(get)]
    fsid: String,
    #[pyo3(get)]
    pool: String,
    #[pyo3(get)]
    image: String,
    /// The size declared at creation; 0 when unknown.
    #[pyo3(get)]
    size: u64,
}

#[pymethods]
impl RbdWriter {
    #[new]
    #[pyo3(signature = (
        pool, image, size = 0, *, conffile = None, user = None, order = 23,
        thin_provisioning = false, snapshot = None, connect_timeout = None,
        max_in_flight = None, digests = Vec::new(),
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        pool: String,
        image: String,
        size: u64,
        conffile: Option<String>,
        user: Option<String>,
        order: u8,
        thin_provisioning: bool,
        snapshot: Option<String>,
        connect_timeout: Option<u32>,
        max_in_flight: Option<usize>,
        digests: Vec<String>,
    ) -> PyResult<Self> {
        logbridge::operation_starts();
        check_arguments(&image, max_in_flight).or_raise()?;
        let connect = ConnectOptions::new(conffile, user, connect_timeout);
        let options = UploadOptions {
            pool: pool.clone(),
            image: image.clone(),
            size,
            order,
            thin: thin_provisioning,
            max_in_flight,
            snapshot,
            digests,
        };
        let (upload, fsid) = detach::run(py, |poll| -> Result<_> {
            let cluster = Cluster::shared(&connect)?;
            let upload = cluster.start_transfer(|cluster| {
                Upload::start(
                    RbdPool::open(cluster, &options.pool)?,
                    options.clone(),
                    poll,
                )
            })?;
            Ok((upload, cluster.fsid().to_owned()))
        })?;
        Ok(RbdWriter {
            upload: Mutex::new(upload),
            fsid,
            pool,
            image,
            size,
        })
    }

    /// Appends `data` (bytes, bytearray, memoryview or numpy uint8 array) to the image.
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let buffer = buffer::extract(data)?;
        self.run(py, |upload, poll| upload.write(buffer, poll))
    }

    /// Waits for all writes, trims, snapshots; returns the bytes written.
    fn finish(&self, py: Python<'_>) -> PyResult<u64> {
        let summary = self.run(py, |upload, poll| upload.finish(poll));
        process::transfer_ended(py);
        summary.map(|summary: Summary| summary.bytes_written)
    }

    /// Drains the writes in flight and removes the snapshot and image. Safe to call twice; a
    /// signal (Ctrl-C) interrupts the wait, and calling abort again resumes it.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        let aborted = self.run(py, |upload, poll| upload.abort(poll));
        process::transfer_ended(py);
        aborted
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Finishes on a clean exit and aborts on an exception; never swallows the exception, and
    /// never replaces it with the abort's own failure (logged instead).
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyType>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_some() {
            if let Err(err) = self.abort(py) {
                log::warn!("could not remove the partial image after a failure: {err}");
            }
        } else if !self.closed(py) {
            self.finish(py)?;
        }
        Ok(false)
    }

    #[getter]
    fn bytes_written(&self, py: Python<'_>) -> u64 {
        self.with_upload(py, |u| u.bytes_written())
    }

    /// {hashlib name: hex digest} of the data, for the digests asked for; set by finish().
    #[getter]
    fn hexdigests(&self, py: Python<'_>) -> PyResult<std::collections::HashMap<String, String>> {
        let (open, digests) = self.with_upload(py, |u| (u.is_open(), u.summary().digests.clone()));
        if open {
            return Err(to_python(Error::Usage(
                "digests are known once the writer is finished".into(),
            )));
        }
        Ok(digests.into_iter().collect())
    }

    /// Seconds the final trim of an unknown-size image took.
    #[getter]
    fn trim_seconds(&self, py: Python<'_>) -> f64 {
        self.with_upload(py, |u| u.summary().trim_seconds)
    }

    /// How many times the image was grown (unknown size only).
    #[getter]
    fn resizes(&self, py: Python<'_>) -> u32 {
        self.with_upload(py, |u| u.resizes())
    }

    /// True once finished or aborted.
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        self.with_upload(py, |u| !u.is_open())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "<RbdWriter {}/{} {} bytes written{}>",
            self.pool,
            self.image,
            self.bytes_written(py),
            if self.closed(py) { ", closed" } else { "" }
        )
    }
}

impl RbdWriter {
    /// Runs `op` on the upload with the interpreter detached (`detach::run`).
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        op: impl FnOnce(&mut Upload, &mut dyn FnMut() -> Result<()>) -> Result<T> + Send,
    ) -> PyResult<T> {
        detach::run(py, |poll| op(&mut sync::lock(&self.upload), poll))
    }

    fn with_upload<T: Send>(&self, py: Python<'_>, read: impl FnOnce(&Upload) -> T + Send) -> T {
        py.detach(|| read(&sync::lock(&self.upload)))
    }
}

impl Drop for RbdWriter {
    /// A writer collected unfinished removes its image; the waits run detached so other
    /// threads go on. At interpreter shutdown, `Upload`'s own drop does the same, attached.
    fn drop(&mut self) {
        let upload = sync::get_mut(&mut self.upload);
        if upload.is_open() {
            Python::try_attach(|py| {
                py.detach(|| {
                    if let Err(err) = upload.abort(&mut || Ok(())) {
                        log::error!("could not remove unfinished {}: {err}", upload.target());
                    }
                })
            });
        }
    }
}

/// The hashlib algorithm names `RbdWriter(digests=...)` can compute natively.
#[pyfunction]
pub(crate) fn native_digests() -> Vec<&'static str> {
    digest::available()
}

/// Cluster connections currently cached (one per conf file, user and timeout).
#[pyfunction]
pub(crate) fn connection_count() -> usize {
    Cluster::shared_count()
}

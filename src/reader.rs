//! `RbdReader`, the Python face of a download: an iterator of `bytes`, one per chunk, in order.
//!
//! Each chunk is read by librbd straight into a fresh `bytes` object, made (attached) before
//! its read starts and handed to Python only once the read is done: nothing else can see it
//! meanwhile, and nothing is copied. GIL rule (`detach`): never block while attached.

use std::ptr::NonNull;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyType};

use crate::exceptions::{OrRaise, to_python};
use crate::{detach, logbridge, process};
use glance_rbd_core::error::Error;
use glance_rbd_core::rbd::cluster::{Cluster, ConnectOptions};
use glance_rbd_core::rbd::pool::RbdPool;
use glance_rbd_core::sync;
use glance_rbd_core::transfer::check_arguments;
use glance_rbd_core::transfer::download::{Destination, Download, DownloadOptions};

/// glance_store's rbd chunk size, the stock driver's READ_CHUNKSIZE.
const DEFAULT_CHUNK_SIZE: usize = 8 << 20;

/// A new `bytes` object whose storage librbd fills.
struct NewBytes {
    object: Py<PyBytes>,
    storage: NonNull<u8>,
    len: usize,
}

// SAFETY: the object is reachable from this value alone until the read into it is done, so
// its storage may be written from librbd's threads; `Py` itself is Send.
unsafe impl Send for NewBytes {}

impl NewBytes {
    fn new(py: Python<'_>, len: usize) -> PyResult<NewBytes> {
        // A null source gives an uninitialised object of that length; never the shared empty
        // or one-byte objects (those are only returned for size 0, or with a source).
        let size = isize::try_from(len).map_err(|_| {
            to_python(Error::Internal(format!(
                "a chunk of {len} bytes is too large"
            )))
        })?;
        assert!(len > 0, "reads are never empty");
        // SAFETY: plain object creation with the interpreter attached.
        let object = unsafe {
            Bound::from_owned_ptr_or_err(
                py,
                pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), size),
            )?
        };
        // SAFETY: the object is a bytes object, alive as long as `object`.
        let storage = unsafe { pyo3::ffi::PyBytes_AsString(object.as_ptr()) };
        Ok(NewBytes {
            object: object.cast_into::<PyBytes>()?.unbind(),
            storage: NonNull::new(storage.cast()).expect("bytes storage"),
            len,
        })
    }
}

// SAFETY: `storage` is the `len` bytes of an object that only this value can reach (see
// `NewBytes`), and a bytes object's storage never moves.
unsafe impl Destination for NewBytes {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.storage.as_ptr()
    }

    fn size(&self) -> usize {
        self.len
    }
}

/// Reads one image (or a snapshot of it) in order, chunk by chunk, with asynchronous reads in
/// flight ahead of the consumer, bounded by its share of the process bound
/// (`set_max_in_flight`), and by `max_in_flight` if given.
#[pyclass(frozen, module = "glance_rbd_native._native")]
pub(crate) struct RbdReader {
    download: Mutex<Option<Download<NewBytes>>>,
    /// The size of the image (or of its snapshot), read when it was opened.
    #[pyo3(get)]
    size: u64,
    #[pyo3(get)]
    pool: String,
    #[pyo3(get)]
    image: String,
    #[pyo3(get)]
    snapshot: Option<String>,
}

#[pymethods]
impl RbdReader {
    #[new]
    #[pyo3(signature = (
        pool, image, *, snapshot = None, conffile = None, user = None, connect_timeout = None,
        chunk_size = DEFAULT_CHUNK_SIZE, max_in_flight = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        pool: String,
        image: String,
        snapshot: Option<String>,
        conffile: Option<String>,
        user: Option<String>,
        connect_timeout: Option<u32>,
        chunk_size: usize,
        max_in_flight: Option<usize>,
    ) -> PyResult<Self> {
        logbridge::operation_starts();
        check_arguments(&image, max_in_flight).or_raise()?;
        let connect = ConnectOptions::new(conffile, user, connect_timeout);
        let options = DownloadOptions {
            pool: pool.clone(),
            image: image.clone(),
            snapshot: snapshot.clone(),
            chunk_size,
            max_in_flight,
        };
        let download = detach::run(py, |poll| {
            Cluster::shared(&connect)?.start_transfer(|cluster| {
                Download::open(RbdPool::open(cluster, &options.pool)?, &options, poll)
            })
        })?;
        Ok(RbdReader {
            size: download.size(),
            download: Mutex::new(Some(download)),
            pool,
            image,
            snapshot,
        })
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next chunk as `bytes`; StopIteration at the end, and once closed.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyBytes>>> {
        // Attached: make the objects the next reads land in.
        let wanted = self.with_download(py, |d| d.map(Download::wanted).unwrap_or_default());
        let destinations = wanted
            .into_iter()
            .map(|len| NewBytes::new(py, len))
            .collect::<PyResult<Vec<_>>>()?;
        let chunk = detach::run(py, |poll| {
            let mut guard = sync::lock(&self.download);
            let Some(download) = guard.as_mut() else {
                return Ok(None);
            };
            for destination in destinations {
                download.start(destination)?;
            }
            download.next_chunk(poll)
        });
        match chunk {
            Ok(Some(bytes)) => Ok(Some(bytes.object)),
            Ok(None) => {
                self.close(py);
                Ok(None)
            }
            Err(err) => {
                // A failed read ends the download: drained and closed, then raised.
                self.close(py);
                Err(err)
            }
        }
    }

    /// Stops reading: waits for the reads in flight, closes the image. Safe to call again.
    fn close(&self, py: Python<'_>) {
        let unread = py.detach(|| {
            let download = sync::lock(&self.download).take();
            download.map(|mut d| d.drain()).unwrap_or_default()
        });
        drop(unread); // attached: the unread objects go at once
        process::transfer_ended(py);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyType>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        self.close(py);
        false
    }

    /// Bytes handed out so far.
    #[getter]
    fn bytes_read(&self, py: Python<'_>) -> u64 {
        self.with_download(py, |d| d.map_or(self.size, |d| d.delivered()))
    }

    /// True once every chunk has been handed out, or after close().
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        self.with_download(py, |d| d.is_none())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "<RbdReader {}/{}{} {} of {} bytes read{}>",
            self.pool,
            self.image,
            self.snapshot
                .as_deref()
                .map_or_else(String::new, |s| format!("@{s}")),
            self.bytes_read(py),
            self.size,
            if self.closed(py) { ", closed" } else { "" }
        )
    }
}

impl RbdReader {
    fn with_download<T: Send>(
        &self,
        py: Python<'_>,
        read: impl FnOnce(Option<&mut Download<NewBytes>>) -> T + Send,
    ) -> T {
        py.detach(|| read(sync::lock(&self.download).as_mut()))
    }
}

impl Drop for RbdReader {
    /// A reader collected mid-stream drains its reads with the interpreter detached, so other
    /// threads go on; at interpreter shutdown, `Download`'s own drop does the same, attached.
    fn drop(&mut self) {
        let download = sync::get_mut(&mut self.download).take();
        if let Some(download) = download {
            Python::try_attach(|py| {
                let unread = py.detach(move || {
                    let mut download = download;
                    download.drain()
                });
                drop(unread);
                process::transfer_ended(py);
            });
        }
    }
}

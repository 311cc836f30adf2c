//! Records from the `log` macros to Python's `logging`, only ever from threads Python started.
//!
//! Threads the native layer starts itself (`transfer::background`: the janitor, the digest
//! workers, a delete's purge) never call into Python. Under eventlet the locks of `logging` are
//! green: a native thread that takes one can hang the hub or crash the process. Their records
//! wait in a bounded queue instead, and the next record, or the next call into the module, from
//! a Python thread emits them first, in order, as records of no request (that thread serves
//! another).
//!
//! Whether a level is on is answered from pyo3-log's cache of Python's levels, which a thread
//! of ours can read without Python. Each operation (an upload, a read, a delete) starts by
//! clearing it, so that a level changed at run time (oslo.log's mutable `debug`, reloaded on
//! SIGHUP) holds from the next operation on.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use log::{Level, Log, Metadata, Record};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use glance_rbd_core::sync;
use glance_rbd_core::transfer::background::is_background_thread;

/// Records a background thread may queue before the oldest are dropped (and counted).
const CAPACITY: usize = 1000;

struct Queued {
    level: Level,
    target: String,
    message: String,
}

static QUEUED: Mutex<VecDeque<Queued>> = Mutex::new(VecDeque::new());
static DROPPED: AtomicUsize = AtomicUsize::new(0);
/// Clears the bridge's cache of Python's loggers and levels.
static LEVELS: OnceLock<pyo3_log::ResetHandle> = OnceLock::new();

/// Installs the bridge as the `log` crate's logger, once per process.
pub(crate) fn install(py: Python<'_>) -> PyResult<()> {
    let python = pyo3_log::Logger::new(py, pyo3_log::Caching::LoggersAndLevels)?;
    let levels = python.reset_handle();
    if log::set_boxed_logger(Box::new(Bridge { python })).is_ok() {
        log::set_max_level(log::LevelFilter::Debug);
        let _ = LEVELS.set(levels);
    }
    Ok(())
}

/// At the start of an operation, from its Python thread: Python's levels are looked up afresh
/// from now on, and what background threads queued is emitted.
pub(crate) fn operation_starts() {
    if let Some(levels) = LEVELS.get() {
        levels.reset();
    }
    flush();
}

/// Emits what background threads queued; a no-op on a background thread.
pub(crate) fn flush() {
    if !is_background_thread() {
        log::logger().flush();
    }
}

/// Makes the calling thread queue its records, as the module's own threads do: for threads of
/// eventlet's pool, which run native calls while logging's locks belong to the hub's thread.
#[pyfunction(name = "_queue_logs_here")]
pub(crate) fn queue_logs_here() {
    glance_rbd_core::transfer::background::mark_current();
}

/// Emits the records queued by background threads, from this (Python) thread.
#[pyfunction(name = "_flush_logs")]
pub(crate) fn flush_logs() {
    flush();
}

struct Bridge {
    python: pyo3_log::Logger,
}

impl Bridge {
    /// Emits what background threads queued, from this Python thread. They are not records of
    /// what this thread serves: `context=None` on each keeps oslo.log from stamping them with its
    /// request's id (glance's format would show another request's id on a purge's line).
    fn emit_queued(&self) {
        let queued = std::mem::take(&mut *sync::lock(&QUEUED));
        let dropped = DROPPED.swap(0, Ordering::Relaxed);
        if queued.is_empty() && dropped == 0 {
            return;
        }
        let dropped = (dropped > 0).then(|| Queued {
            level: Level::Warn,
            target: python_target(module_path!()).into_owned(),
            message: format!("{dropped} log records of background threads were dropped"),
        });
        Python::attach(|py| {
            // An exception already set stays the one the caller sees.
            let pending = PyErr::take(py);
            if let Err(err) = emit_without_context(py, dropped.iter().chain(&queued)) {
                err.write_unraisable(py, None);
            }
            if let Some(pending) = pending {
                pending.restore(py);
            }
        });
    }
}

fn emit_without_context<'a>(
    py: Python<'_>,
    records: impl Iterator<Item = &'a Queued>,
) -> PyResult<()> {
    let get_logger = py.import("logging")?.getattr("getLogger")?;
    let extra = PyDict::new(py);
    extra.set_item("context", py.None())?;
    for record in records {
        let name = record.target.replace("::", ".");
        let level = python_level(record.level);
        let logger = get_logger.call1((&name,))?;
        if !logger.call_method1("isEnabledFor", (level,))?.is_truthy()? {
            continue;
        }
        let made = logger.call_method1(
            "makeRecord",
            (
                name,
                level,
                "(native background thread)",
                0,
                &record.message,
                PyTuple::empty(py),
                py.None(),
                py.None(),
                &extra,
            ),
        )?;
        logger.call_method1("handle", (made,))?;
    }
    Ok(())
}

/// Python's number for a level, as pyo3-log maps them.
fn python_level(level: Level) -> u32 {
    match level {
        Level::Error => 40,
        Level::Warn => 30,
        Level::Info => 20,
        Level::Debug => 10,
        Level::Trace => 5,
    }
}

/// The Python logger of a record's target: the core crate's records go to the package's logger,
/// as the extension's do (`glance_rbd_core::transfer::janitor` to
/// `glance_rbd_native.transfer.janitor`), so that glance's logging configuration of
/// `glance_rbd_native` covers them all.
fn python_target(target: &str) -> Cow<'_, str> {
    match target.strip_prefix("glance_rbd_core") {
        Some(rest) => Cow::Owned(format!("glance_rbd_native{rest}")),
        None => Cow::Borrowed(target),
    }
}

impl Log for Bridge {
    fn enabled(&self, metadata: &Metadata) -> bool {
        let target = python_target(metadata.target());
        let metadata = Metadata::builder()
            .level(metadata.level())
            .target(&target)
            .build();
        // pyo3-log answers from its cache of levels, without calling into Python.
        self.python.enabled(&metadata)
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let target = python_target(record.target());
        if is_background_thread() {
            let mut queued = sync::lock(&QUEUED);
            if queued.len() == CAPACITY {
                queued.pop_front();
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
            queued.push_back(Queued {
                level: record.level(),
                target: target.into_owned(),
                message: record.args().to_string(),
            });
            return;
        }
        self.emit_queued();
        self.python.log(
            &Record::builder()
                .level(record.level())
                .target(&target)
                .args(*record.args())
                .module_path(record.module_path())
                .file(record.file())
                .line(record.line())
                .build(),
        );
    }

    fn flush(&self) {
        if !is_background_thread() {
            self.emit_queued();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::python_target;

    #[test]
    fn the_core_logs_under_the_package() {
        assert_eq!(
            python_target("glance_rbd_core::transfer::janitor"),
            "glance_rbd_native::transfer::janitor"
        );
        assert_eq!(python_target("glance_rbd_core"), "glance_rbd_native");
        assert_eq!(
            python_target("glance_rbd_native::writer"),
            "glance_rbd_native::writer"
        );
        assert_eq!(python_target("pyo3"), "pyo3");
    }
}

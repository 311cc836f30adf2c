//! Records from the `log` macros to Python's `logging`, only ever from threads Python started.
//!
//! Threads the native layer starts itself (`transfer::background`: the janitor, the digest
//! workers) never call into Python. Under eventlet the locks of `logging` are green: a native
//! thread that takes one can hang the hub or crash the process. Their records wait in a bounded
//! queue instead, and the next record, or the next call into the module, from a Python thread
//! emits them first, in order.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use log::{Level, Log, Metadata, Record};
use pyo3::prelude::*;

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

/// Installs the bridge as the `log` crate's logger, once per process.
pub(crate) fn install(py: Python<'_>) -> PyResult<()> {
    let python = pyo3_log::Logger::new(py, pyo3_log::Caching::LoggersAndLevels)?;
    if log::set_boxed_logger(Box::new(Bridge { python })).is_ok() {
        log::set_max_level(log::LevelFilter::Debug);
    }
    Ok(())
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
    fn emit_queued(&self) {
        let queued = std::mem::take(&mut *sync::lock(&QUEUED));
        let dropped = DROPPED.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            self.python.log(
                &Record::builder()
                    .level(Level::Warn)
                    .target(module_path!())
                    .args(format_args!(
                        "{dropped} log records of background threads were dropped"
                    ))
                    .build(),
            );
        }
        for record in queued {
            self.python.log(
                &Record::builder()
                    .level(record.level)
                    .target(&record.target)
                    .args(format_args!("{}", record.message))
                    .build(),
            );
        }
    }
}

impl Log for Bridge {
    fn enabled(&self, metadata: &Metadata) -> bool {
        // pyo3-log answers from its cache of levels, without calling into Python.
        self.python.enabled(metadata)
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        if is_background_thread() {
            let mut queued = sync::lock(&QUEUED);
            if queued.len() == CAPACITY {
                queued.pop_front();
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
            queued.push_back(Queued {
                level: record.level(),
                target: record.target().to_owned(),
                message: record.args().to_string(),
            });
            return;
        }
        self.emit_queued();
        self.python.log(record);
    }

    fn flush(&self) {
        if !is_background_thread() {
            self.emit_queued();
        }
    }
}

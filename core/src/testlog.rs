//! (cargo test) The records of the `log` macros, kept for the scenarios' assertions: what an
//! operator would read in glance's log.

use std::sync::{Mutex, Once};

use log::{Level, LevelFilter, Log, Metadata, Record};

use crate::sync;

static RECORDS: Mutex<Vec<(Level, String)>> = Mutex::new(Vec::new());

struct Kept;

impl Log for Kept {
    fn enabled(&self, metadata: &Metadata) -> bool {
        metadata.level() <= Level::Info
    }

    fn log(&self, record: &Record) {
        if self.enabled(record.metadata()) {
            sync::lock(&RECORDS).push((record.level(), record.args().to_string()));
        }
    }

    fn flush(&self) {}
}

/// Keeps the records of the process from now on: a test calls it before what it looks for.
pub(crate) fn keep() {
    static KEEP: Once = Once::new();
    KEEP.call_once(|| {
        if log::set_logger(&Kept).is_ok() {
            log::set_max_level(LevelFilter::Info);
        }
    });
}

/// The WARNINGs kept so far that contain every one of `words`: the tests of a process run at
/// once, so each names what is its own (an image name of its alone).
pub(crate) fn warnings(words: &[&str]) -> Vec<String> {
    sync::lock(&RECORDS)
        .iter()
        .filter(|(level, text)| *level == Level::Warn && words.iter().all(|w| text.contains(w)))
        .map(|(_, text)| text.clone())
        .collect()
}

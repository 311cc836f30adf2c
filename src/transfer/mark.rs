//! The mark of an upload in flight, so that one whose process was killed can be told from one
//! that still runs (`glance-rbd-native status` and `sweep`, python/glance_rbd_native/leftovers.py).
//!
//! One omap entry per upload in the pool's index object `INDEX`, keyed by image name, saying
//! who writes (host, boot, pid and process start: a pid alone is reused), since when, and how
//! many bytes are stored, refreshed every `REFRESH`. Finding the uploads in flight reads that
//! one object: it costs what they are, not the pool. The mark is set once the image is open
//! (its watch held), before the first byte, and cleared once the snapshot is made or the image
//! removed. The upload never fails for its mark: without one, a crash leaves what stock leaves.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::error::Op;
use crate::rbd::cluster::IoCtx;
use crate::rbd::omap;

/// The index object, one per pool. Its format is read by python/glance_rbd_native/leftovers.py.
pub(crate) const INDEX: &str = "glance_rbd_native.uploads";

/// How often the bytes stored are written into the mark, at most.
const REFRESH: Duration = Duration::from_secs(5);

pub(crate) struct Mark {
    ioctx: Arc<IoCtx>,
    image: String,
    /// The JSON fields that do not change: who writes, since when, the declared size.
    fixed: String,
    refreshed: Instant,
    /// Set, and not yet cleared.
    present: bool,
}

impl Mark {
    /// Marks `image` (open, of `size` bytes or 0 when unknown) as written by this process.
    pub(crate) fn set(ioctx: Arc<IoCtx>, image: &str, size: u64) -> Mark {
        let mut fixed = String::from("{");
        for (key, value) in writer() {
            let _ = write!(fixed, "\"{key}\":{value},");
        }
        // SAFETY: the ioctx is live; its cluster handle is connected for as long as it lives.
        let client = unsafe {
            ceph::rados::rados_get_instance_id(ceph::rados::rados_ioctx_get_cluster(ioctx.handle()))
        };
        // The client's global id names its watch on the image: a sweep cuts that one alone.
        let _ = write!(fixed, "\"client\":{client},");
        let _ = write!(fixed, "\"started\":{:.3},\"size\":{size}", unix_now());
        let mut mark = Mark {
            ioctx,
            image: image.to_owned(),
            fixed,
            refreshed: Instant::now(),
            present: false,
        };
        match mark.write(0) {
            Ok(()) => mark.present = true,
            Err(err) => log::warn!(
                "{err}: should this process die during the upload, `glance-rbd-native sweep` \
                 will not know the partial image as its own"
            ),
        }
        mark
    }

    /// Writes the bytes stored into the mark, if the last write is `REFRESH` old.
    pub(crate) fn refresh(&mut self, stored: u64) {
        if !self.present || self.refreshed.elapsed() < REFRESH {
            return;
        }
        self.refreshed = Instant::now();
        if let Err(err) = self.write(stored) {
            log::debug!("{err}");
        }
    }

    /// Removes the mark: the upload is finished, or its image removed.
    pub(crate) fn clear(&mut self) {
        if std::mem::take(&mut self.present) {
            unmark(&self.ioctx, &self.image);
        }
    }

    fn write(&self, stored: u64) -> crate::error::Result<()> {
        let value = format!(
            "{},\"updated\":{:.3},\"bytes\":{stored}}}",
            self.fixed,
            unix_now()
        );
        let target = self.ioctx.target(&self.image);
        omap::set(&self.ioctx, INDEX, &self.image, &value, Op::Mark, &target)
    }
}

/// Removes the mark of `image`, if any; a failure is logged (`sweep` drops stale marks).
pub(crate) fn unmark(ioctx: &IoCtx, image: &str) {
    let target = ioctx.target(image);
    if let Err(err) = omap::remove(ioctx, INDEX, image, Op::Unmark, &target) {
        log::warn!("{err}");
    }
}

/// Who writes, as JSON values: host name, boot id, pid and the process's start time in clock
/// ticks after boot (field 22 of /proc/self/stat), which together name one process for good.
fn writer() -> [(&'static str, String); 4] {
    let pid = std::process::id();
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let start = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // The command name, in parentheses, may hold spaces: count fields after it.
            let after = stat.rsplit_once(')')?.1;
            after.split_whitespace().nth(19)?.parse::<u64>().ok()
        })
        .unwrap_or(0);
    [
        ("host", json_string(&hostname())),
        ("boot_id", json_string(boot_id.trim())),
        ("pid", pid.to_string()),
        ("process_start", start.to_string()),
    ]
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length; gethostname NUL-terminates within it on success.
    let ret = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if ret != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn json_string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_for_json() {
        assert_eq!(json_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }

    #[test]
    fn the_writer_is_this_process() {
        let fields = writer();
        assert_eq!(fields[2].1, std::process::id().to_string());
        assert_ne!(fields[3].1, "0", "process start read from /proc/self/stat");
        assert_eq!(
            fields[1].1.len(),
            38,
            "a boot id is a quoted uuid: {}",
            fields[1].1
        );
    }
}

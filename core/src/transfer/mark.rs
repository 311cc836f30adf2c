//! The mark of an upload in flight, so that one whose process was killed can be told from one
//! that still runs (`glance-rbd-native status` and `sweep`, python/glance_rbd_native/leftovers).
//!
//! One omap entry per upload in the pool's index object `INDEX`, keyed by image name, saying
//! who writes (host, boot, pid and process start: a pid alone is reused; the pid namespace and
//! the cgroup: which container), with which librados client (its global id names its watch,
//! its address is what fencing blocklists), on which image id, since when, and how many bytes
//! are stored, refreshed every `REFRESH`. Finding the uploads in flight reads that one object:
//! it costs what they are, not the pool. The mark is set once the image is open (its watch
//! held), before the first byte, and cleared once the snapshot is made or the image removed.
//!
//! Every write after the first is conditional on the entry still holding what this writer last
//! wrote: a writer judged gone (and its image removed) never overwrites, or clears, the mark of
//! a new upload of the same name. The upload never fails for its mark: without one, a crash
//! leaves what stock leaves.

use std::fmt::Write as _;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Op};
use crate::io::{OmapChange, OmapWrite, Pool};
use crate::json::json_string;

/// The index object, one per pool. Its format is read by python/glance_rbd_native/leftovers.
pub(crate) const INDEX: &str = "glance_rbd_native.uploads";

/// How often the bytes stored are written into the mark, at most.
const REFRESH: Duration = Duration::from_secs(5);

pub(crate) struct Mark {
    pool: Arc<dyn Pool>,
    image: String,
    /// The JSON fields that do not change: who writes, since when, the declared size.
    fixed: String,
    refreshed: Instant,
    /// What this writer last wrote, while the entry is its own.
    written: Option<String>,
}

impl Mark {
    /// Marks `image` (open, of id `image_id`, and `size` bytes or 0 when unknown) as written by
    /// this process.
    pub(crate) fn set(pool: Arc<dyn Pool>, image: &str, image_id: &str, size: u64) -> Mark {
        let (client, address) = pool.client();
        let mut fixed = identity(client, address.as_deref());
        let _ = write!(fixed, "\"image_id\":{},", json_string(image_id));
        let _ = write!(fixed, "\"started\":{:.3},\"size\":{size}", unix_now());
        let mut mark = Mark {
            pool,
            image: image.to_owned(),
            fixed,
            refreshed: Instant::now(),
            written: None,
        };
        if let Err(err) = mark.write(0) {
            log::warn!(
                "{err}: should this process die during the upload, `glance-rbd-native sweep` \
                 will not know the partial image as its own"
            );
        }
        mark
    }

    /// Writes the bytes stored into the mark, if the last write is `REFRESH` old.
    pub(crate) fn refresh(&mut self, stored: u64) {
        if self.written.is_none() || self.refreshed.elapsed() < REFRESH {
            return;
        }
        self.refreshed = Instant::now();
        if let Err(err) = self.write(stored) {
            log::debug!("{err}");
        }
    }

    /// Removes the mark, if it is still this writer's: the upload is finished, or its image
    /// removed.
    pub(crate) fn clear(&mut self) {
        let pool = Arc::clone(&self.pool);
        self.clear_through(&*pool);
    }

    /// As `clear`, through `pool` (the same pool, another connection): the writer's own
    /// connection was fenced.
    pub(crate) fn clear_through(&mut self, pool: &dyn Pool) {
        let Some(written) = self.written.take() else {
            return;
        };
        let target = pool.target(&self.image);
        match pool.omap_write(&OmapWrite {
            object: INDEX,
            key: &self.image,
            change: OmapChange::Remove,
            expect: Some(&written),
            op: Op::Unmark,
            target: &target,
        }) {
            Ok(()) => {}
            Err(err) if is_taken(&err) => self.taken(),
            Err(err) => log::warn!("{err}"),
        }
    }

    /// Says in the mark, if it is still this writer's, that the removal of its image was given
    /// up at `when` (seconds since the epoch), through `pool` (this mark's pool, perhaps
    /// another connection): `glance-rbd-native sweep --remove` then removes the image while this
    /// process runs. Whether the mark says so now; it is no longer this writer's either way.
    pub(crate) fn give_up(&mut self, pool: &dyn Pool, when: f64) -> bool {
        let Some(written) = self.written.take() else {
            return false;
        };
        let Some(given_up) = given_up(&written, when) else {
            return false;
        };
        let target = pool.target(&self.image);
        match pool.omap_write(&OmapWrite {
            object: INDEX,
            key: &self.image,
            change: OmapChange::Set(&given_up),
            expect: Some(&written),
            op: Op::Mark,
            target: &target,
        }) {
            Ok(()) => true,
            Err(err) if is_taken(&err) => {
                self.taken();
                false
            }
            Err(err) => {
                log::warn!("{err}");
                false
            }
        }
    }

    /// Whether the entry is this writer's, as far as it knows.
    pub(crate) fn is_written(&self) -> bool {
        self.written.is_some()
    }

    fn write(&mut self, stored: u64) -> crate::error::Result<()> {
        let value = format!(
            "{},\"updated\":{:.3},\"bytes\":{stored}}}",
            self.fixed,
            unix_now()
        );
        let target = self.pool.target(&self.image);
        let expect = self.written.clone();
        let set = self.pool.omap_write(&OmapWrite {
            object: INDEX,
            key: &self.image,
            change: OmapChange::Set(&value),
            expect: expect.as_deref(),
            op: Op::Mark,
            target: &target,
        });
        match set {
            Ok(()) => {
                self.written = Some(value);
                Ok(())
            }
            Err(err) if expect.is_some() && is_taken(&err) => {
                self.taken();
                Ok(())
            }
            Err(err) => Err(err),
        }
    }

    /// Hands the mark over to the janitor, which clears it once the image is gone.
    pub(crate) fn hand_over(&mut self) -> Mark {
        Mark {
            pool: Arc::clone(&self.pool),
            image: self.image.clone(),
            fixed: self.fixed.clone(),
            refreshed: self.refreshed,
            written: self.written.take(),
        }
    }

    pub(crate) fn pool(&self) -> &Arc<dyn Pool> {
        &self.pool
    }

    pub(crate) fn image(&self) -> &str {
        &self.image
    }

    /// The entry holds what another process wrote, or is gone: it is no longer this writer's.
    fn taken(&mut self) {
        self.written = None;
        log::warn!(
            "the mark of {} was changed or removed by another process (`glance-rbd-native \
             sweep`, or an upload of the same image): left as it is",
            self.pool.target(&self.image)
        );
    }
}

fn is_taken(err: &Error) -> bool {
    err.errno() == Some(libc::ECANCELED)
}

/// The opening of a mark's JSON object: who writes (`writer`), with which librados client (its
/// global id names its watch on an image; its address is what fencing blocklists). Ends with a
/// comma: the mark's own fields follow.
pub(crate) fn identity(client: u64, address: Option<&str>) -> String {
    let mut json = String::from("{");
    for (key, value) in writer() {
        let _ = write!(json, "\"{key}\":{value},");
    }
    let _ = write!(json, "\"client\":{client},");
    if let Some(addr) = address {
        let _ = write!(json, "\"addr\":{},", json_string(addr));
    }
    json
}

/// `identity` as a JSON object of its own: who marks, for a mark written by the Python side
/// (`check`'s probes), which the sweep then judges as it judges a writer's.
pub fn identity_object(client: u64, address: Option<&str>) -> String {
    let mut json = identity(client, address);
    json.pop(); // the comma the mark's own fields would follow
    json.push('}');
    json
}

/// Who writes, as JSON fields: host name, boot id, pid and the process's start time in clock
/// ticks after boot (field 22 of /proc/self/stat), which together name one process for good;
/// and the pid namespace the pid is of (its inode), and the cgroup (the container, for people).
pub(crate) fn writer() -> Vec<(&'static str, String)> {
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
    let mut fields = vec![
        ("host", json_string(&hostname())),
        ("boot_id", json_string(boot_id.trim())),
        ("pid", pid.to_string()),
        ("process_start", start.to_string()),
    ];
    // Without /proc, no namespace: the sweep then never judges this writer by its pid.
    if let Ok(namespace) = std::fs::metadata("/proc/self/ns/pid") {
        fields.push(("pid_ns", namespace.ino().to_string()));
    }
    if let Some(cgroup) = cgroup() {
        fields.push(("cgroup", json_string(&cgroup)));
    }
    fields
}

/// The cgroup of this process: the unified hierarchy's path, else the pids controller's.
fn cgroup() -> Option<String> {
    cgroup_of(&std::fs::read_to_string("/proc/self/cgroup").ok()?)
}

/// The cgroup that `/proc/PID/cgroup`'s `text` names (see `cgroup`).
fn cgroup_of(text: &str) -> Option<String> {
    let paths: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|line| {
            let (_, rest) = line.split_once(':')?;
            rest.split_once(':')
        })
        .collect();
    let path = paths
        .iter()
        .find(|(controllers, _)| controllers.is_empty())
        .or_else(|| {
            paths
                .iter()
                .find(|(c, _)| c.split(',').any(|c| c == "pids"))
        })?
        .1;
    Some(path.to_owned())
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

/// A mark's JSON `value` with the field saying its writer gave up at `when` (seconds since the
/// epoch), read by python/glance_rbd_native/leftovers: an upload's mark, a delete's too. None
/// if `value` is not a JSON object.
pub(crate) fn given_up(value: &str, when: f64) -> Option<String> {
    let fields = value.strip_suffix('}')?;
    Some(format!("{fields},\"given_up\":{when:.3}}}"))
}

pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup_is_the_unified_one_else_the_pids_controllers() {
        let v2 = "0::/system.slice/docker-0123abcd.scope\n";
        assert_eq!(
            cgroup_of(v2).as_deref(),
            Some("/system.slice/docker-0123abcd.scope")
        );
        let v1 = "12:pids:/docker/0123abcd\n11:cpu,cpuacct:/docker/0123abcd\n1:name=systemd:/x\n";
        assert_eq!(cgroup_of(v1).as_deref(), Some("/docker/0123abcd"));
        assert_eq!(cgroup_of(""), None);
    }

    #[test]
    fn the_writer_is_this_process() {
        let fields = writer();
        assert_eq!(fields[2].1, std::process::id().to_string());
        let namespace = std::fs::metadata("/proc/self/ns/pid").unwrap().ino();
        assert!(fields.contains(&("pid_ns", namespace.to_string())));
        assert_ne!(fields[3].1, "0", "process start read from /proc/self/stat");
        assert_eq!(
            fields[1].1.len(),
            38,
            "a boot id is a quoted uuid: {}",
            fields[1].1
        );
    }
}

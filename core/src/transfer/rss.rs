//! The process's RSS kept near its in-flight bound while transfers run.
//!
//! glibc keeps the 8 MiB chunks that transfers free, for reuse: in the arena of each thread
//! that freed them, and, once it has seen such chunks freed, it raises its mmap threshold so that
//! the next ones come from there too. The heap fragments: a 1 GiB read peaked 260-300 MiB over
//! the process's RSS before it, for a bound of 64 MiB, whatever the number of arenas. Returning
//! every chunk at once (a fixed mmap threshold) holds the peak at what is in use, but costs a
//! page fault for each page of each chunk: reads were 40% slower. So the RSS is watched instead:
//! read from /proc every `CHECK_EVERY` bytes the transfers take or let go of (a chunk reserved,
//! written, read or handed out), and when it is more than
//! the bound plus `HEADROOM` above its level when the first transfer started, malloc's free
//! pages go back to the system (`malloc_trim`), about 16 times per GiB read.
//!
//! What a trim leaves resident is in use (consumers holding chunks, many transfers at once):
//! the next trim waits until the RSS has grown `HEADROOM` past it, and that level follows the
//! RSS down. Trimming at every reading instead, with nothing to give back, made 16 downloads at
//! once 1.19x stock's time, against 0.93x without the watch: each trim takes every arena's lock.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes taken or let go of between two readings of the RSS: half a chunk.
const CHECK_EVERY: usize = 4 << 20;
/// What the RSS may exceed the bound by, over its level at the start, before free memory is
/// given back: what the transfers hold beyond the bound (one chunk each, the consumer's), and
/// what is allocated between two readings.
pub(crate) const HEADROOM: usize = 32 << 20;

/// The RSS when the first of the transfers running started, in bytes (0: unknown).
static BASELINE: AtomicUsize = AtomicUsize::new(0);
/// Bytes taken or let go of since the last reading.
static MOVED: AtomicUsize = AtomicUsize::new(0);
/// The RSS above which the next trim is due, if above the bound's limit: what the last trim
/// left resident, plus `HEADROOM` (0: none yet).
static TRIM_AT: AtomicUsize = AtomicUsize::new(0);

/// The first transfer of the process starts (none was running): the RSS now is the baseline.
pub(crate) fn first_started() {
    BASELINE.store(rss().unwrap_or(0), Ordering::Relaxed);
    MOVED.store(0, Ordering::Relaxed);
    TRIM_AT.store(0, Ordering::Relaxed);
}

/// A transfer took or let go of `len` bytes of its share; `bound` is the process's bound.
pub(crate) fn moved(len: usize, bound: usize) {
    if MOVED.fetch_add(len, Ordering::Relaxed) + len < CHECK_EVERY {
        return;
    }
    MOVED.store(0, Ordering::Relaxed);
    let baseline = BASELINE.load(Ordering::Relaxed);
    let (Some(now), true) = (rss(), baseline > 0) else {
        return;
    };
    let due = next_trim(
        baseline + bound + HEADROOM,
        TRIM_AT.load(Ordering::Relaxed),
        now,
    );
    if let Some(trim_at) = due.trim_at {
        TRIM_AT.store(trim_at, Ordering::Relaxed);
    }
    if due.trim {
        trim();
        // What is still resident is in use: the next trim waits for HEADROOM more.
        TRIM_AT.store(rss().unwrap_or(now) + HEADROOM, Ordering::Relaxed);
    }
}

/// What a reading of the RSS calls for.
#[derive(Debug, PartialEq)]
struct Due {
    trim: bool,
    /// The new level of `TRIM_AT`, if it changes before any trim.
    trim_at: Option<usize>,
}

/// Over the limit and over what the last trim left plus `HEADROOM`, free memory goes back.
/// Below that level by more than `HEADROOM`, the level follows the RSS down.
fn next_trim(limit: usize, trim_at: usize, now: usize) -> Due {
    if now > limit.max(trim_at) {
        return Due {
            trim: true,
            trim_at: None,
        };
    }
    let lower = (trim_at > now + HEADROOM).then_some(now + HEADROOM);
    Due {
        trim: false,
        trim_at: lower,
    }
}

/// Gives malloc's free pages back to the system; off glibc, nothing.
pub(crate) fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of malloc's arenas, under their locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// This process's resident set, in bytes: the second field of /proc/self/statm, in pages.
fn rss() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * usize::try_from(page).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn a_trim_is_due_over_the_limit() {
        let limit = 196 * MIB;
        assert_eq!(
            next_trim(limit, 0, 190 * MIB),
            Due {
                trim: false,
                trim_at: None
            }
        );
        assert_eq!(
            next_trim(limit, 0, 200 * MIB),
            Due {
                trim: true,
                trim_at: None
            }
        );
    }

    #[test]
    fn memory_in_use_over_the_limit_is_not_trimmed_again_until_it_grows() {
        let limit = 196 * MIB;
        // The last trim left 300 MiB resident: due again only past 300 + HEADROOM.
        let trim_at = 300 * MIB + HEADROOM;
        assert_eq!(
            next_trim(limit, trim_at, 310 * MIB),
            Due {
                trim: false,
                trim_at: None
            }
        );
        assert!(next_trim(limit, trim_at, 333 * MIB).trim);
    }

    #[test]
    fn the_level_follows_the_rss_down() {
        let limit = 196 * MIB;
        let trim_at = 300 * MIB + HEADROOM;
        let due = next_trim(limit, trim_at, 250 * MIB);
        assert_eq!(
            due,
            Due {
                trim: false,
                trim_at: Some(250 * MIB + HEADROOM)
            }
        );
        // Below the limit, the limit rules again.
        let due = next_trim(limit, 250 * MIB + HEADROOM, 150 * MIB);
        assert_eq!(due.trim_at, Some(150 * MIB + HEADROOM));
        assert!(next_trim(limit, 150 * MIB + HEADROOM, 200 * MIB).trim);
    }

    #[test]
    fn the_rss_is_the_one_proc_states_for_this_process() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let vm_rss = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|kib| {
                kib.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<usize>()
                    .ok()
            })
            .unwrap()
            * 1024;
        let statm = rss().unwrap();
        // Read a moment apart, while other tests allocate: within 16 MiB of each other.
        assert!(
            statm.abs_diff(vm_rss) < 16 << 20,
            "{statm} against {vm_rss}"
        );
    }
}

//! Uploads and downloads on the in-memory cluster (`memory`), each with the fault it is about:
//! what the caller sees, and what is left in the pool and its index. The same paths run against
//! a real cluster in tests/ (test_writer.py, test_faults.py, test_fencing.py, test_leftovers.py).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::download::{Download, DownloadOptions};
use super::in_flight::Buffer;
use super::mark::INDEX;
use super::shares::{DEFAULT_BOUND, PROCESS};
use super::upload::{Upload, UploadOptions};
use crate::error::{Error, Result};
use crate::memory::{Memory, assert_fenced_within, assert_fenced_within_seconds, wait_for};
use crate::testlog;

const MIB: usize = 1 << 20;
const POOL: &str = "images";
/// Held by the tests that measure bytes in flight: the process bound is the process's, and
/// one of them changes it.
static BOUND: Mutex<()> = Mutex::new(());

fn options(image: &str, size: u64) -> UploadOptions {
    UploadOptions {
        pool: POOL.into(),
        image: image.into(),
        size,
        order: 22,
        thin: false,
        max_in_flight: Some(4 * MIB),
        snapshot: Some("snap".into()),
        digests: vec!["md5".into()],
    }
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i % 251) as u8))
        .collect()
}

fn chunk(len: usize, seed: u8) -> Buffer {
    Arc::new(data(len, seed))
}

fn go() -> impl FnMut() -> Result<()> {
    || Ok(())
}

/// Writes `chunks` chunks of `len` bytes, then finishes: the first error, if any.
fn upload(memory: &Memory, name: &str, size: u64, chunks: u8, len: usize) -> Result<Upload> {
    let mut upload = Upload::start(memory.pool(POOL), options(name, size), &mut go())?;
    for seed in 0..chunks {
        upload.write(chunk(len, seed), &mut go())?;
    }
    upload.finish(&mut go())?;
    Ok(upload)
}

fn errno(result: Result<Upload>) -> Option<i32> {
    result.err().and_then(|err| err.errno())
}

/// Nothing of `name` is left: no image, no mark.
fn assert_gone(memory: &Memory, name: &str) {
    assert!(
        !memory.images().contains(&name.to_owned()),
        "{name} is left"
    );
    assert!(
        !memory.omap(INDEX).contains_key(name),
        "{name}'s mark is left"
    );
}

#[test]
fn an_upload_of_unknown_size_grows_trims_and_snapshots() {
    let memory = Memory::new();
    let done = upload(&memory, "grown", 0, 3, 5 * MIB).unwrap();
    let summary = done.summary();
    assert_eq!(summary.bytes_written, 15 * MIB as u64);
    assert!(summary.resizes >= 1);
    assert_eq!(summary.digests.len(), 1);
    let (bytes, snaps) = memory.image("grown").unwrap();
    let written: Vec<u8> = (0..3).flat_map(|seed| data(5 * MIB, seed)).collect();
    assert!(bytes == written, "the image holds other bytes");
    assert_eq!(snaps, ["snap"]);
    assert!(
        memory.omap(INDEX).is_empty(),
        "the mark outlived the upload"
    );
}

#[test]
fn the_mark_names_the_writer_while_it_writes() {
    let memory = Memory::new();
    let mut upload = Upload::start(memory.pool(POOL), options("marked", 0), &mut go()).unwrap();
    let mark = memory
        .omap(INDEX)
        .remove("marked")
        .expect("marked from the start");
    for field in [
        "\"pid\":",
        "\"client\":1,",
        "\"addr\":\"127.0.0.1:0/1\"",
        "\"image_id\":",
    ] {
        assert!(mark.contains(field), "{field} not in {mark}");
    }
    upload.abort(&mut go()).unwrap();
    assert_gone(&memory, "marked");
}

#[test]
fn writes_in_flight_stay_within_the_bound() {
    let _bound = crate::sync::lock(&BOUND);
    let memory = Memory::new();
    memory.faults(|f| f.delay = Some(Duration::from_millis(50)));
    // Made first: in a debug build, making a chunk takes longer than a write.
    let chunks: Vec<Buffer> = (0..12).map(|seed| chunk(MIB, seed)).collect();
    let mut upload = Upload::start(memory.pool(POOL), options("bounded", 0), &mut go()).unwrap();
    for chunk in chunks {
        upload.write(chunk, &mut go()).unwrap();
    }
    upload.finish(&mut go()).unwrap();
    let most = memory.counts().most_in_flight;
    assert!(most <= 4 * MIB, "{most} bytes in flight, over the bound");
    assert!(most > MIB, "writes never overlapped ({most} bytes at most)");
}

#[test]
fn a_failed_write_aborts_and_removes_everything() {
    for errno in [libc::ENOSPC, libc::EIO, libc::EDQUOT] {
        let memory = Memory::new();
        memory.faults(|f| f.write_error = Some((2, errno)));
        assert_eq!(self::errno(upload(&memory, "full", 0, 4, MIB)), Some(errno));
        assert_gone(&memory, "full");
    }
}

#[test]
fn a_write_past_the_declared_size_is_refused_and_removes_everything() {
    let memory = Memory::new();
    let err = upload(&memory, "overrun", 1000, 1, 1001).err().unwrap();
    assert!(matches!(err, Error::Usage(_)), "{err}");
    assert_gone(&memory, "overrun");
}

#[test]
fn a_failed_resize_or_snapshot_aborts() {
    let memory = Memory::new();
    memory.faults(|f| f.resize_error = Some(libc::EIO));
    assert_eq!(errno(upload(&memory, "resize", 0, 1, MIB)), Some(libc::EIO));
    assert_gone(&memory, "resize");

    let memory = Memory::new();
    memory.faults(|f| f.snapshot_error = Some(libc::EDQUOT));
    assert_eq!(
        errno(upload(&memory, "snap", 2 * MIB as u64, 2, MIB)),
        Some(libc::EDQUOT)
    );
    assert_gone(&memory, "snap");
}

#[test]
fn a_timed_out_upload_leaves_its_removal_to_the_janitor() {
    let memory = Memory::new();
    memory.faults(|f| {
        f.write_error = Some((1, libc::ETIMEDOUT));
        f.remove_errors = vec![libc::ETIMEDOUT, libc::ETIMEDOUT];
    });
    assert_eq!(
        errno(upload(&memory, "later", 0, 2, MIB)),
        Some(libc::ETIMEDOUT)
    );
    wait_for("the janitor's removal", Duration::from_secs(5), || {
        memory.images().is_empty() && memory.omap(INDEX).is_empty()
    });
}

#[test]
fn the_janitor_leaves_a_name_another_image_took() {
    let memory = Memory::new();
    memory.faults(|f| {
        f.write_error = Some((1, libc::ETIMEDOUT));
        // The cluster stays away until the name is another image's.
        f.remove_errors = vec![libc::ETIMEDOUT; 1000];
    });
    assert!(upload(&memory, "taken", 0, 1, MIB).is_err());
    // Another process removes the leftover and uploads the same image ID again.
    memory.remove_behind("taken");
    memory.faults(|f| f.write_error = None);
    let retried = upload(&memory, "taken", 0, 1, MIB).unwrap();
    memory.faults(|f| f.remove_errors.clear());
    wait_for(
        "the janitor to give up on the name",
        Duration::from_secs(5),
        || memory.omap(INDEX).is_empty(),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(memory.image("taken").unwrap().0, data(MIB, 0));
    drop(retried);
}

#[test]
fn the_janitor_replaces_a_fenced_connection_and_says_so() {
    testlog::keep();
    let memory = Memory::new();
    memory.faults(|f| {
        f.write_error = Some((1, libc::ETIMEDOUT));
        // glance's timeouts: the janitor's tries go through the upload's own connection.
        f.timeouts_set = true;
        // The removals fail until the client is fenced: EIO, which keeps the connection (a
        // timeout would replace it, and the fence could fall on the one it leaves).
        f.remove_errors = vec![libc::EIO; 1000];
    });
    assert!(upload(&memory, "fenced-leftover", 0, 1, MIB).is_err());
    memory.fence_and(|f| f.remove_errors.clear());
    // Through the fenced client, its removal and the mark's would fail for good.
    wait_for("the janitor's removal", Duration::from_secs(5), || {
        memory.images().is_empty()
    });
    wait_for("the mark cleared", Duration::from_secs(1), || {
        memory.omap(INDEX).is_empty()
    });
    let said = testlog::warnings(&["'fenced-leftover'", "was fenced", "connecting again"]);
    assert_eq!(said.len(), 1, "{said:?}");
}

#[test]
fn the_janitor_gives_up_and_its_mark_and_the_log_say_so() {
    testlog::keep();
    let memory = Memory::new();
    memory.faults(|f| {
        f.write_error = Some((1, libc::ETIMEDOUT));
        f.remove_errors = vec![libc::EIO; 1000];
    });
    assert!(upload(&memory, "given-up", 0, 1, MIB).is_err());
    let marked = memory.omap(INDEX)["given-up"].clone();
    // GIVE_UP_AFTER is 1 s in `cargo test`.
    wait_for("the janitor to give up", Duration::from_secs(5), || {
        memory.omap(INDEX)["given-up"] != marked
    });
    let given_up = &memory.omap(INDEX)["given-up"];
    let fields = marked.strip_suffix('}').unwrap();
    assert!(
        given_up.starts_with(&format!("{fields},\"given_up\":")),
        "{given_up}"
    );
    assert!(memory.images().contains(&"given-up".to_owned()));
    // Its tries are over: no more removals are asked.
    let left = || {
        let mut left = 0;
        memory.faults(|f| left = f.remove_errors.len());
        left
    };
    let before = left();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(left(), before);
    let failing = testlog::warnings(&["'given-up'", "is not removed yet"]);
    assert_eq!(failing.len(), 1, "{failing:?}");
    let gave_up = testlog::warnings(&["'given-up'", "gave up", "sweep --remove"]);
    assert_eq!(gave_up.len(), 1, "{gave_up:?}");
}

#[test]
fn a_fenced_upload_fails_within_seconds_and_its_image_goes() {
    let memory = Memory::new();
    memory.faults(|f| f.held_from = Some(2));
    let mut upload = Upload::start(memory.pool(POOL), options("fenced", 0), &mut go()).unwrap();
    upload.write(chunk(MIB, 1), &mut go()).unwrap();
    upload.write(chunk(MIB, 2), &mut go()).unwrap(); // held: never answered
    memory.fence();
    let started = Instant::now();
    let err = upload.finish(&mut go()).err().unwrap();
    assert_fenced_within(&err, started, Duration::from_secs(5));
    assert!(!upload.is_open());
    // Cleaned up through a new connection: the fenced one can do nothing.
    assert_gone(&memory, "fenced");
    // The process's next upload works.
    upload_again(&memory);
}

fn upload_again(memory: &Memory) {
    memory.faults(|f| f.held_from = None);
    upload(memory, "next", 0, 1, MIB).unwrap();
}

#[test]
fn a_fenced_upload_fails_fast_in_its_synchronous_calls_too() {
    let memory = Memory::new();
    let mut upload = Upload::start(memory.pool(POOL), options("sync", 0), &mut go()).unwrap();
    upload.write(chunk(MIB, 1), &mut go()).unwrap();
    memory.fence();
    // The finish's flush, trim and snapshot block for a fenced client: the probe ends the wait.
    let started = Instant::now();
    let err = upload.finish(&mut go()).err().unwrap();
    assert!(matches!(err, Error::Fenced { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_gone(&memory, "sync");
    memory.release(); // the blocked call's thread ends
}

#[test]
fn an_image_removed_behind_the_upload_ends_it() {
    let memory = Memory::new();
    memory.faults(|f| f.held_from = Some(2));
    let mut upload = Upload::start(memory.pool(POOL), options("swept", 0), &mut go()).unwrap();
    upload.write(chunk(MIB, 1), &mut go()).unwrap();
    upload.write(chunk(MIB, 2), &mut go()).unwrap();
    memory.remove_behind("swept");
    let err = upload.finish(&mut go()).err().unwrap();
    assert!(
        matches!(
            err,
            Error::Fenced {
                errno: libc::ENOENT,
                ..
            }
        ),
        "{err}"
    );
    assert_gone(&memory, "swept");
}

#[test]
fn an_interrupted_wait_leaves_the_upload_to_be_aborted() {
    let memory = Memory::new();
    memory.faults(|f| f.held_from = Some(1));
    let mut upload =
        Upload::start(memory.pool(POOL), options("interrupted", 0), &mut go()).unwrap();
    upload.write(chunk(4 * MIB, 1), &mut go()).unwrap();
    // The bound is full of an unanswered write: the next one waits, and a signal comes.
    let err = upload
        .write(chunk(MIB, 2), &mut || Err(Error::Interrupted))
        .err()
        .unwrap();
    assert!(matches!(err, Error::Interrupted));
    assert!(
        upload.is_open(),
        "an interrupted upload stays for its abort"
    );
    let refused = upload.write(chunk(MIB, 3), &mut go()).err().unwrap();
    assert!(refused.to_string().contains("abort it"), "{refused}");
    memory.release();
    upload.abort(&mut go()).unwrap();
    assert_gone(&memory, "interrupted");
}

#[test]
fn an_unfinished_upload_dropped_is_removed() {
    let memory = Memory::new();
    let mut upload = Upload::start(memory.pool(POOL), options("dropped", 0), &mut go()).unwrap();
    upload.write(chunk(MIB, 1), &mut go()).unwrap();
    drop(upload);
    assert_gone(&memory, "dropped");
}

#[test]
fn an_image_that_exists_is_left_untouched() {
    let memory = Memory::new();
    upload(&memory, "there", 0, 1, MIB).unwrap();
    assert_eq!(
        errno(upload(&memory, "there", 0, 1, MIB)),
        Some(libc::EEXIST)
    );
    assert_eq!(memory.image("there").unwrap().0, data(MIB, 0));
}

fn download_options(name: &str, snapshot: Option<&str>) -> DownloadOptions {
    DownloadOptions {
        pool: POOL.into(),
        image: name.into(),
        snapshot: snapshot.map(str::to_owned),
        chunk_size: MIB,
        max_in_flight: Some(3 * MIB),
    }
}

fn download(memory: &Memory, name: &str, snapshot: Option<&str>) -> Result<Download<Vec<u8>>> {
    Download::open(
        memory.pool(POOL),
        &download_options(name, snapshot),
        &mut || Ok(()),
    )
}

fn next(download: &mut Download<Vec<u8>>) -> Result<Option<Vec<u8>>> {
    for len in download.wanted() {
        download.start(vec![0; len])?;
    }
    download.next_chunk(&mut go())
}

#[test]
fn a_download_reads_back_what_the_snapshot_holds() {
    let memory = Memory::new();
    upload(&memory, "read", 0, 5, MIB).unwrap();
    let mut reader = download(&memory, "read", Some("snap")).unwrap();
    let mut read = Vec::new();
    while let Some(bytes) = next(&mut reader).unwrap() {
        read.extend(bytes);
    }
    assert_eq!(read, memory.image("read").unwrap().0);
    assert_eq!(reader.delivered(), 5 * MIB as u64);
}

#[test]
fn a_read_in_flight_counts_twice_in_the_bound() {
    // Its destination, and the buffers librbd receives it into before copying it there.
    let _bound = crate::sync::lock(&BOUND);
    let memory = Memory::new();
    upload(&memory, "twice", 0, 8, MIB).unwrap();
    let options = DownloadOptions {
        max_in_flight: Some(4 * MIB),
        ..download_options("twice", Some("snap"))
    };
    let mut reader =
        Download::<Vec<u8>>::open(memory.pool(POOL), &options, &mut || Ok(())).unwrap();
    assert_eq!(reader.wanted(), vec![MIB; 2]);
}

#[test]
fn a_failed_read_ends_the_download() {
    let memory = Memory::new();
    upload(&memory, "unreadable", 0, 4, MIB).unwrap();
    memory.faults(|f| f.read_error = Some((2, libc::EIO)));
    let mut reader = download(&memory, "unreadable", Some("snap")).unwrap();
    assert!(next(&mut reader).unwrap().is_some());
    let err = next(&mut reader).err().unwrap();
    assert_eq!(err.errno(), Some(libc::EIO));
}

#[test]
fn a_fenced_download_fails_within_seconds() {
    let memory = Memory::new();
    upload(&memory, "fenced-read", 0, 4, MIB).unwrap();
    let mut reader = download(&memory, "fenced-read", Some("snap")).unwrap();
    assert!(next(&mut reader).unwrap().is_some());
    memory.fence();
    let started = Instant::now();
    // The reads already answered are delivered; the first one started after the fence is not.
    let err = loop {
        match next(&mut reader) {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the download ended as if nothing happened"),
            Err(err) => break err,
        }
    };
    assert!(matches!(err, Error::Fenced { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_download_stopped_early_gives_its_chunks_back() {
    let memory = Memory::new();
    upload(&memory, "early", 0, 6, MIB).unwrap();
    let mut reader = download(&memory, "early", None).unwrap();
    assert!(next(&mut reader).unwrap().is_some());
    for len in reader.wanted() {
        reader.start(vec![0; len]).unwrap();
    }
    let unread = reader.drain();
    assert!(!unread.is_empty(), "no read was in flight");
    assert!(reader.delivered() < reader.size());
}

#[test]
fn transfers_at_once_share_the_process_bound() {
    let _bound = crate::sync::lock(&BOUND);
    let memory = Memory::new();
    upload(&memory, "source", 0, 8, MIB).unwrap();
    memory.faults(|f| f.delay = Some(Duration::from_millis(50)));
    PROCESS.set_bound(4 * MIB);
    let transfers: Vec<_> = (0..3)
        .map(|n| {
            let memory = memory.clone();
            std::thread::spawn(move || {
                let mut upload = Upload::start(
                    memory.pool(POOL),
                    UploadOptions {
                        max_in_flight: None,
                        ..options(&format!("shared-{n}"), 0)
                    },
                    &mut go(),
                )?;
                let chunks: Vec<Buffer> = (0..8).map(|seed| chunk(MIB, seed)).collect();
                for chunk in chunks {
                    upload.write(chunk, &mut go())?;
                }
                upload.finish(&mut go()).map(drop)
            })
        })
        .collect();
    let mut reader = download(&memory, "source", Some("snap")).unwrap();
    while next(&mut reader).unwrap().is_some() {}
    let outcomes: Vec<_> = transfers.into_iter().map(|t| t.join().unwrap()).collect();
    PROCESS.set_bound(DEFAULT_BOUND);
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    let most = memory.counts().most_in_flight;
    assert!(
        most <= 4 * MIB,
        "{most} bytes written at once by three uploads, over the bound"
    );
}

#[test]
fn a_write_answered_with_eblocklisted_is_fenced() {
    let memory = Memory::new();
    memory.faults(|f| f.write_error = Some((2, libc::ESHUTDOWN)));
    let err = upload(&memory, "blocklisted", 0, 3, MIB).err().unwrap();
    assert_eq!(err.errno(), Some(libc::ESHUTDOWN), "{err}");
    assert_gone(&memory, "blocklisted");
    upload_again(&memory);
}

#[test]
fn a_download_a_silently_fenced_client_cannot_open_fails_within_seconds_or_when_polled() {
    let memory = Memory::new();
    upload(&memory, "image", 0, 1, MIB).unwrap();
    let pool = memory.silently_fenced(POOL);
    let options = download_options("image", Some("snap"));
    let started = Instant::now();
    let err = Download::<Vec<u8>>::open(Arc::clone(&pool), &options, &mut || Ok(()))
        .err()
        .expect("no open");
    assert_fenced_within_seconds(&err, started);
    let err = Download::<Vec<u8>>::open(pool, &options, &mut || Err(Error::Interrupted))
        .err()
        .expect("no open");
    assert!(matches!(err, Error::Interrupted), "{err}");
    memory.release();
}

#[test]
fn an_upload_a_silently_fenced_client_cannot_start_fails_within_seconds_and_leaves_nothing() {
    let memory = Memory::new();
    let pool = memory.silently_fenced(POOL);
    let started = Instant::now();
    let err = Upload::start(pool, options("fenced-start", 0), &mut go())
        .err()
        .expect("no start");
    assert_fenced_within_seconds(&err, started);
    memory.release_held_calls();
    assert!(memory.images().is_empty());
}

#[test]
fn an_upload_start_its_caller_stopped_waiting_for_removes_what_it_made_once_answered() {
    let memory = Memory::new();
    memory.faults(|f| f.calls_held = true);
    let err = Upload::start(memory.pool(POOL), options("left", 0), &mut || {
        Err(Error::Interrupted)
    })
    .err()
    .expect("no start");
    assert!(matches!(err, Error::Interrupted), "{err}");
    memory.release();
    // Answered after its caller left, the start made the image and marked it: the upload,
    // dropped on its thread, removes both.
    wait_for("the image's removal", Duration::from_secs(2), || {
        memory.images().is_empty() && memory.omap(INDEX).is_empty()
    });
}

/// A memory cluster with an upload that timed out, its image left to the janitor still open.
fn timed_out_upload(name: &str, change: impl FnOnce(&mut crate::memory::Faults)) -> Memory {
    let memory = Memory::new();
    memory.faults(|f| {
        f.write_error = Some((1, libc::ETIMEDOUT));
        f.remove_errors = vec![libc::ETIMEDOUT];
        change(f);
    });
    assert_eq!(
        errno(upload(&memory, name, 0, 2, MIB)),
        Some(libc::ETIMEDOUT)
    );
    memory
}

#[test]
fn closes_the_cluster_leaves_unanswered_hold_none_of_the_janitors_threads() {
    // As many leftovers whose close never returns as the janitor has threads, and more.
    let held: Vec<Memory> = (0..3)
        .map(|n| timed_out_upload(&format!("held-close-{n}"), |f| f.close_held = true))
        .collect();
    let other = timed_out_upload("other", |_| {});
    wait_for("the other's removal", Duration::from_secs(3), || {
        other.images().is_empty() && other.omap(INDEX).is_empty()
    });
    for memory in &held {
        assert_eq!(memory.images().len(), 1);
        memory.release();
    }
    for memory in &held {
        wait_for("the removal once closed", Duration::from_secs(3), || {
            memory.images().is_empty() && memory.omap(INDEX).is_empty()
        });
    }
}

#[test]
fn the_janitor_tries_on_a_connection_with_timeouts_and_gives_up_a_close_never_answered() {
    testlog::keep();
    let memory = timed_out_upload("never-closed", |f| f.close_held = true);
    let marked = memory.omap(INDEX)["never-closed"].clone();
    // GIVE_UP_AFTER is 1 s in `cargo test`: the close's tries count.
    wait_for("the janitor to give up", Duration::from_secs(5), || {
        memory.omap(INDEX)["never-closed"] != marked
    });
    assert!(memory.omap(INDEX)["never-closed"].contains("\"given_up\":"));
    // Its connection with timeouts made once, and no removal tried while it stays open.
    assert_eq!(memory.counts().bounded_asked, 1);
    assert!(memory.images().contains(&"never-closed".to_owned()));
    let said = testlog::warnings(&["'never-closed'", "its close still waits on the cluster"]);
    assert_eq!(said.len(), 1, "{said:?}");
    memory.release();

    let memory = timed_out_upload("bounded", |_| {});
    wait_for("the removal", Duration::from_secs(3), || {
        memory.images().is_empty()
    });
    assert_eq!(memory.counts().bounded_asked, 1);
}

//! glance's delete and the purge of deleted images on the in-memory cluster (`memory`), each
//! with the case or the fault it is about: what the caller sees, and what is left in the pool,
//! its trash and the deletes' index. The same paths run against a real cluster in tests/
//! (test_delete.py, against the stock driver; test_delete_purge.py, test_deleted_leftovers.py).

use std::time::{Duration, Instant};

use super::purge::{self, Job};
use super::{Deleted, INDEX, Rules, delete_in, guarded};
use crate::error::{Error, Op};
use crate::io::{OmapChange, OmapWrite};
use crate::memory::{Memory, assert_fenced_within_seconds, wait_for};
use crate::testlog;

const POOL: &str = "images";

/// Image `name`, with glance's `snapshot` if given, moved to the trash and marked as a delete
/// does: the job its delete queues.
fn deleted(memory: &Memory, name: &str, snapshot: Option<&str>) -> Job {
    let pool = memory.pool(POOL);
    pool.create(name, 1 << 20, 22).unwrap();
    if let Some(snap) = snapshot {
        memory.snapshot(name, snap, false);
    }
    let id = pool.image_id(name).unwrap();
    pool.trash_move(name).unwrap();
    let mark = format!("{{\"image\":\"{name}\",\"image_id\":\"{id}\"}}");
    pool.omap_write(&OmapWrite {
        object: INDEX,
        key: &id,
        change: OmapChange::Set(&mark),
        expect: None,
        op: Op::MarkDelete,
        target: &pool.target(name),
    })
    .unwrap();
    Job {
        pool,
        name: name.to_owned(),
        id,
        snapshot: snapshot.map(str::to_owned),
        mark: Some(mark),
        deleted: Instant::now(),
    }
}

/// A cluster whose manager refuses the user's tasks: the process removes the data itself.
fn without_manager() -> Memory {
    let memory = Memory::new();
    memory.faults(|f| f.manager_error = Some(libc::EACCES));
    memory
}

/// Whether entry `id` and its mark are gone.
fn purged(memory: &Memory, id: &str) -> bool {
    !memory.trash().contains(&id.to_owned()) && !memory.omap(INDEX).contains_key(id)
}

#[test]
fn an_entry_held_open_never_delays_the_others_and_goes_once_let_go() {
    let memory = without_manager();
    let held: Vec<Job> = (0..2)
        .map(|i| deleted(&memory, &format!("held-{i}"), None))
        .collect();
    let held_ids: Vec<String> = held.iter().map(|job| job.id.clone()).collect();
    for id in &held_ids {
        memory.hold(id, true);
    }
    for job in held {
        purge::queue(job);
    }
    let others: Vec<Job> = (0..3)
        .map(|i| deleted(&memory, &format!("other-{i}"), Some("snap")))
        .collect();
    let other_ids: Vec<String> = others.iter().map(|job| job.id.clone()).collect();
    for job in others {
        purge::queue(job);
    }
    // Gone while the held ones still are (tried until GIVE_UP_AFTER, 3 s in `cargo test`).
    wait_for("the others purged", Duration::from_secs(2), || {
        other_ids.iter().all(|id| purged(&memory, id))
    });
    assert!(held_ids.iter().all(|id| !purged(&memory, id)));
    for id in &held_ids {
        memory.hold(id, false);
    }
    wait_for(
        "the held ones purged once let go",
        Duration::from_secs(2),
        || held_ids.iter().all(|id| purged(&memory, id)),
    );
}

#[test]
fn the_manager_removes_the_data_where_it_takes_the_task() {
    let memory = Memory::new();
    memory.faults(|f| f.manager_takes = Duration::from_millis(200));
    let job = deleted(&memory, "by-manager", Some("snap"));
    let id = job.id.clone();
    purge::queue(job);
    wait_for("the manager's removal", Duration::from_secs(2), || {
        purged(&memory, &id)
    });
    let counts = memory.counts();
    assert_eq!((counts.manager_asked, counts.trash_removals), (1, 0));
}

#[test]
fn a_manager_that_refuses_or_does_not_answer_is_not_asked_again_and_the_process_removes_it() {
    for errno in [libc::EACCES, libc::ETIMEDOUT] {
        let memory = Memory::new();
        memory.faults(|f| f.manager_error = Some(errno));
        for name in ["first", "second"] {
            let job = deleted(&memory, name, None);
            let id = job.id.clone();
            purge::queue(job);
            wait_for("the process's removal", Duration::from_secs(2), || {
                purged(&memory, &id)
            });
        }
        let counts = memory.counts();
        assert_eq!(
            (counts.manager_asked, counts.trash_removals),
            (1, 2),
            "{errno}"
        );
    }
}

#[test]
fn a_fenced_purge_connects_again_and_says_so() {
    testlog::keep();
    let memory = without_manager();
    let job = deleted(&memory, "fenced-purge", None);
    let id = job.id.clone();
    memory.hold(&id, true);
    purge::queue(job);
    std::thread::sleep(Duration::from_millis(100));
    memory.fence();
    memory.hold(&id, false);
    // Through the fenced client, the removal and the mark's would fail for good.
    wait_for(
        "the purge through a new connection",
        Duration::from_secs(2),
        || purged(&memory, &id),
    );
    let said = testlog::warnings(&["'fenced-purge'", "was fenced", "connecting again"]);
    assert_eq!(said.len(), 1, "{said:?}");
}

#[test]
fn a_purge_given_up_stops_and_says_so_in_its_mark_and_the_log() {
    testlog::keep();
    let memory = without_manager();
    let job = deleted(&memory, "given-up-purge", None);
    let (id, marked) = (job.id.clone(), job.mark.clone().unwrap());
    memory.hold(&id, true);
    purge::queue(job);
    // GIVE_UP_AFTER is 3 s in `cargo test`.
    wait_for("the purge to give up", Duration::from_secs(8), || {
        memory.omap(INDEX)[&id] != marked
    });
    let given_up = &memory.omap(INDEX)[&id];
    let fields = marked.strip_suffix('}').unwrap();
    assert!(
        given_up.starts_with(&format!("{fields},\"given_up\":")),
        "{given_up}"
    );
    // No more tries: let go, the entry stays for the sweep.
    memory.hold(&id, false);
    std::thread::sleep(Duration::from_millis(300));
    assert!(memory.trash().contains(&id));
    // Held: said within WARN_AFTER (300 ms here), once; then the give-up.
    let held = testlog::warnings(&["'given-up-purge'", "a client has it open"]);
    assert_eq!(held.len(), 1, "{held:?}");
    let gave_up = testlog::warnings(&["'given-up-purge'", "gave up", "sweep --remove"]);
    assert_eq!(gave_up.len(), 1, "{gave_up:?}");
}

#[test]
fn an_entry_the_manager_took_that_a_client_holds_open_is_a_warning_then_goes_once_let_go() {
    testlog::keep();
    let memory = Memory::new();
    let job = deleted(&memory, "held-for-manager", None);
    let id = job.id.clone();
    memory.hold(&id, true);
    purge::queue(job);
    // WARN_AFTER is 300 ms in `cargo test`, MANAGER_WARN_AFTER 1 s.
    wait_for("the WARNING", Duration::from_millis(900), || {
        !testlog::warnings(&["'held-for-manager'", "a client has it open"]).is_empty()
    });
    let said = testlog::warnings(&["'held-for-manager'"]);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains(&format!("listwatchers rbd_header.{id}")),
        "{said:?}"
    );
    assert!(!purged(&memory, &id));
    memory.hold(&id, false);
    wait_for(
        "the manager's removal once let go",
        Duration::from_secs(2),
        || purged(&memory, &id),
    );
    assert_eq!(memory.counts().trash_removals, 0);
}

/// glance_store's rules from 4.3.2 on; before, `refuse_clones_first` and no trash with
/// snapshots.
const RULES: Rules = Rules {
    refuse_clones_first: false,
    trash_with_snapshots: true,
};

/// Image `name` as glance stores it: with its protected snapshot `snap`.
fn stored(memory: &Memory, name: &str) {
    memory.pool(POOL).create(name, 1 << 20, 22).unwrap();
    memory.snapshot(name, "snap", true);
}

fn delete(memory: &Memory, name: &str, rules: Rules) -> crate::error::Result<Deleted> {
    delete_in(memory.pool(POOL), name, Some("snap"), rules)
}

#[test]
fn a_delete_moves_the_image_and_its_snapshot_to_the_trash_and_the_purge_removes_both() {
    let memory = without_manager();
    stored(&memory, "image");
    let Deleted::Purging { id } = delete(&memory, "image", RULES).unwrap() else {
        panic!("not purged");
    };
    assert!(memory.image("image").is_none());
    wait_for("the purge", Duration::from_secs(2), || purged(&memory, &id));
    assert_eq!(memory.counts().trash_removals, 1);
}

#[test]
fn a_missing_image_or_snapshot() {
    let memory = without_manager();
    let missing = delete(&memory, "none", RULES).unwrap_err();
    assert_eq!(missing.errno(), Some(libc::ENOENT), "{missing}");
    // An image without glance's snapshot goes as it is.
    memory.pool(POOL).create("bare", 1 << 20, 22).unwrap();
    let Deleted::Purging { id } = delete(&memory, "bare", RULES).unwrap() else {
        panic!("not purged");
    };
    wait_for("the purge", Duration::from_secs(2), || purged(&memory, &id));
}

#[test]
fn a_snapshot_with_clones_is_refused_and_nothing_changes() {
    for refuse_clones_first in [false, true] {
        let memory = without_manager();
        stored(&memory, "parent");
        memory.clone_from("parent", "snap");
        let rules = Rules {
            refuse_clones_first,
            ..RULES
        };
        let refused = delete(&memory, "parent", rules).unwrap_err();
        assert_eq!(refused.errno(), Some(libc::EBUSY), "{refused}");
        assert_eq!(memory.image("parent").unwrap().1, vec!["snap".to_owned()]);
        assert!(memory.trash().is_empty() && memory.omap(INDEX).is_empty());
    }
}

#[test]
fn an_image_a_client_has_open_is_refused_and_loses_only_glances_snapshot() {
    let memory = without_manager();
    stored(&memory, "open");
    let reader = memory.pool(POOL).open("open", None).unwrap();
    let refused = delete(&memory, "open", RULES).unwrap_err();
    assert_eq!(refused.errno(), Some(libc::EBUSY), "{refused}");
    // As stock: the snapshot goes before the removal is refused.
    assert!(memory.image("open").unwrap().1.is_empty());
    assert!(memory.trash().is_empty() && memory.omap(INDEX).is_empty());
    drop(reader);
}

#[test]
fn an_image_with_other_snapshots_stays_in_the_trash_or_is_refused_by_older_rules() {
    let memory = without_manager();
    stored(&memory, "kept");
    memory.snapshot("kept", "users", false);
    let Deleted::KeptInTrash { id } = delete(&memory, "kept", RULES).unwrap() else {
        panic!("purged with another snapshot");
    };
    // Not purged, not marked: its data is kept for the other snapshot, as stock keeps it.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(memory.trash(), vec![id]);
    assert!(memory.omap(INDEX).is_empty());

    stored(&memory, "refused");
    memory.snapshot("refused", "users", false);
    let rules = Rules {
        trash_with_snapshots: false,
        ..RULES
    };
    let refused = delete(&memory, "refused", rules).unwrap_err();
    assert_eq!(refused.errno(), Some(libc::ENOTEMPTY), "{refused}");
    assert_eq!(
        memory.image("refused").unwrap().1,
        vec!["users".to_owned()],
        "glance's snapshot goes first, as stock's does"
    );
}

#[test]
fn the_purge_tries_on_a_connection_with_timeouts_and_waits_for_one() {
    let memory = without_manager();
    memory.faults(|f| f.bounded_error = Some(libc::ETIMEDOUT));
    let job = deleted(&memory, "bounded", Some("snap"));
    let id = job.id.clone();
    purge::queue(job);
    wait_for("tries to connect", Duration::from_secs(2), || {
        memory.counts().bounded_asked >= 2
    });
    // Nothing is tried on the delete's connection, which may wait for ever.
    assert!(!purged(&memory, &id) && memory.counts().trash_removals == 0);
    memory.faults(|f| f.bounded_error = None);
    wait_for("the purge, once connected", Duration::from_secs(2), || {
        purged(&memory, &id)
    });
}

#[test]
fn a_delete_a_silently_fenced_client_would_wait_on_for_good_fails_within_seconds() {
    let memory = without_manager();
    stored(&memory, "image");
    let pool = memory.silently_fenced(POOL);
    let started = Instant::now();
    let err = guarded(pool, "image", Some("snap"), RULES, &mut || Ok(())).unwrap_err();
    assert_fenced_within_seconds(&err, started);
    // The call left to its thread hears ESHUTDOWN once answered: the image is as it was.
    memory.release_held_calls();
    let (_, snapshots) = memory.image("image").expect("the image");
    assert_eq!(snapshots, ["snap"]);
    assert!(memory.trash().is_empty());
}

#[test]
fn a_delete_waiting_on_the_cluster_ends_when_its_poll_says_so_and_goes_on_once_answered() {
    let memory = without_manager();
    stored(&memory, "image");
    memory.faults(|f| f.calls_held = true);
    let err = guarded(memory.pool(POOL), "image", Some("snap"), RULES, &mut || {
        Err(Error::Interrupted)
    })
    .unwrap_err();
    assert!(matches!(err, Error::Interrupted), "{err}");
    memory.release();
    wait_for("the delete and its purge", Duration::from_secs(2), || {
        memory.image("image").is_none() && memory.trash().is_empty()
    });
}

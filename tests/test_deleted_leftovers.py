"""What a process killed during a native delete leaves, on the real cluster: the image is in
the pool's trash, its data only partly removed, with its mark in the pool's index;
`glance-rbd-native status` lists it, and `sweep --remove` purges it and only it: never another
tool's trash entry, never an entry whose deferment has not ended, never one whose deleter may
still be at it."""

import json
import os
import subprocess
import sys
import time

import pytest
import rados
import rbd

from glance_rbd_native._native import _delete_image
from tests.harness import command, trash
from tests.harness.command import CHECKOUT
from tests.harness.data import MiB, data_of, new_name
from tests.harness.stores import SNAP, glance_api_conf
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.cluster

DELETES = trash.DELETES


def trash_names(images):
    return trash.names(images.ioctx)


def listed(conf_file, *args):
    """{image: deletion} as `glance-rbd-native ARGS` lists them."""
    report = command.report(conf_file, *args)
    return {d["image"]: d for d in report["deletes"]}


def image_to_delete(images, name):
    """Image `name` with glance's snapshot, unprotected (its unprotect would wait for the
    monitors, which some tests pause), and 512 MiB of objects to remove, written sparse: the
    removal takes many round trips."""
    images.create(name, 512 * MiB)
    for offset in range(0, 512 * MiB, 8 * MiB):
        images.write(name, data_of(4096, seed=offset), offset)
    images.snapshot(name)
    with rbd.Image(images.ioctx, name) as image:
        image.unprotect_snap(SNAP)


def deleter(cluster, name, *args):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.harness.killed_delete",
            str(cluster.conf_path),
            cluster.pool,
            name,
            SNAP,
            *args,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=CHECKOUT,
    )


def killed_mid_delete(cluster, images):
    """The name and trash id of an image whose deleter was killed as the delete returned."""
    name = new_name("killed-delete")
    image_to_delete(images, name)
    child = deleter(cluster, name)
    out, err = child.communicate(timeout=120)
    assert child.returncode == -9, err
    return name, out.strip()


def killed_mid_purge(cluster, images):
    """The name and trash id of an image whose deleter was killed in its purge, while removing
    glance's snapshot: librbd moves it to the trash namespace first, and releases its id with
    the monitors (paused here) after."""
    name = new_name("killed-purge")
    image_to_delete(images, name)
    child = deleter(cluster, name, "--wait")
    try:
        assert child.stdout.readline().strip() == "connected", child.stderr.read()
        with cluster.paused("mon.a"):
            child.stdin.write("go\n")
            child.stdin.flush()
            trash_id = child.stdout.readline().strip()
            deadline = time.monotonic() + 30
            while snapshots_in_trash(images, trash_id) != [("trash", SNAP)]:
                assert time.monotonic() < deadline, snapshots_in_trash(images, trash_id)
                time.sleep(0.05)
            child.kill()
            child.wait(timeout=30)
    finally:
        child.kill()
        child.communicate(timeout=30)
    return name, trash_id


def in_the_trash(images, label):
    """A stored image, its snapshot removed, moved to the trash as a delete moves it (no
    deferment): its name and trash id."""
    name = images.store(new_name(label), data_of(MiB))
    images.remove_snapshots(name)
    rbd.RBD().trash_move(images.ioctx, name, 0)
    return name, trash_names(images)[name]


def mark_as_by_a_dead_process(images, name, image_id, snapshot=None):
    """A deletion mark for trash entry `image_id`, as the native delete writes one, of a process
    of this host that is gone (its start time is no process's); naming the `snapshot` that moved
    to the trash with the image, if given."""
    with open("/proc/sys/kernel/random/boot_id") as boot:
        boot_id = boot.read().strip()
    mark = {
        "host": os.uname().nodename,
        "boot_id": boot_id,
        "pid": os.getpid(),
        "process_start": 1,
        "pid_ns": os.stat("/proc/self/ns/pid").st_ino,
        "image": name,
        "image_id": image_id,
        "started": time.time() - 60,
    }
    if snapshot is not None:
        mark["snapshot"] = snapshot
    with rados.WriteOpCtx() as op:
        images.ioctx.set_omap(op, (image_id,), (json.dumps(mark).encode(),))
        images.ioctx.operate_write_op(op, DELETES)


def snapshots_in_trash(images, image_id):
    """The snapshots of trash entry `image_id`: ("user", name), or ("trash", its name before)
    for one whose removal began (librbd moves it to the trash namespace first)."""
    with rbd.Image(images.ioctx, image_id=image_id, read_only=True) as image:
        return [
            ("trash", snap["trash"]["original_name"])
            if snap["namespace"] == rbd.RBD_SNAP_NAMESPACE_TYPE_TRASH
            else ("user", snap["name"])
            for snap in image.list_snaps()
        ]


def marked(images):
    """The trash ids the pool's index of deletions marks."""
    return set(trash.marked(images.ioctx))


def test_a_killed_delete_is_listed_then_purged_and_nothing_else(cluster, clean_pool, conf_file):
    name, trash_id = killed_mid_delete(cluster, clean_pool)
    assert name not in clean_pool.names()
    assert trash_names(clean_pool).get(name) == trash_id, "the data was all gone before the kill"
    # glance's snapshot moved with the image, for the purge to remove first: its removal waits
    # for the monitors, longer than the kill took.
    assert [name for _, name in snapshots_in_trash(clean_pool, trash_id)] == [SNAP]
    # Another tool's trash entry, without a mark; and one marked, whose deferment has not ended.
    other = clean_pool.store(new_name("other-tool"), data_of(MiB))
    clean_pool.remove_snapshots(other)
    rbd.RBD().trash_move(clean_pool.ioctx, other, 0)
    deferred = clean_pool.store(new_name("deferred"), data_of(MiB))
    clean_pool.remove_snapshots(deferred)
    rbd.RBD().trash_move(clean_pool.ioctx, deferred, 3600)
    deferred_id = trash_names(clean_pool)[deferred]
    mark_as_by_a_dead_process(clean_pool, deferred, deferred_id)
    try:
        found = listed(conf_file, "status")
        assert found[name]["state"] == "gone" and found[name]["image_id"] == trash_id
        assert "its process is gone" in found[name]["reason"]
        assert found[deferred]["state"] == "kept" and "deferment" in found[deferred]["reason"]
        assert other not in found
        text = command.run(conf_file, "status").stdout
        assert f"{cluster.pool}/{name}  deleted, data in the trash as {trash_id}" in text
        assert listed(conf_file, "sweep")[name]["state"] == "gone"
        assert trash_names(clean_pool).get(name) == trash_id, "sweep without --remove purged"
        swept = listed(conf_file, "sweep", "--remove")
        assert swept[name]["outcome"] == "purged"
        assert "outcome" not in swept[deferred]
        left = trash_names(clean_pool)
        assert name not in left and other in left and deferred in left
        assert name not in listed(conf_file, "status")
    finally:
        for entry in rbd.RBD().trash_list(clean_pool.ioctx):
            if entry["name"] in (other, deferred, name):
                rbd.RBD().trash_remove(clean_pool.ioctx, entry["id"], force=True)
        with rados.WriteOpCtx() as op:
            clean_pool.ioctx.remove_omap_keys(op, (deferred_id,))
            clean_pool.ioctx.operate_write_op(op, DELETES)


def test_the_sweep_removes_glances_snapshot_first_and_no_other(clean_pool, conf_file):
    """An entry whose deleter died before its purge removed glance's snapshot: the sweep removes
    that snapshot, then the data. One with another snapshot as well is kept, with both."""
    entries = {}
    for label, extra in (("only-glances", None), ("with-another", "user-snap")):
        name = clean_pool.store(new_name(label), data_of(MiB))
        with rbd.Image(clean_pool.ioctx, name) as image:
            image.unprotect_snap(SNAP)
            if extra:
                image.create_snap(extra)
        rbd.RBD().trash_move(clean_pool.ioctx, name, 0)
        entries[label] = (name, trash_names(clean_pool)[name])
        mark_as_by_a_dead_process(clean_pool, name, entries[label][1], snapshot=SNAP)
    try:
        swept = listed(conf_file, "sweep", "--remove")
        only, other = entries["only-glances"], entries["with-another"]
        assert swept[only[0]]["outcome"] == "purged"
        assert swept[other[0]]["state"] == "kept" and "outcome" not in swept[other[0]]
        assert "snapshots other than" in swept[other[0]]["reason"]
        left = trash_names(clean_pool)
        assert only[0] not in left and other[0] in left
        assert sorted(snapshots_in_trash(clean_pool, other[1])) == [
            ("user", SNAP),
            ("user", "user-snap"),
        ]
    finally:
        for _, trash_id in entries.values():
            trash.discard(clean_pool.ioctx, trash_id)


def test_a_delete_killed_between_its_mark_and_its_move_leaves_the_image_whole(
    cluster, clean_pool, conf_file
):
    """Killed after it marked the deletion and before the image moved to the trash: the image
    is whole, where it was (glance's snapshot unprotected: glance still has the image, whose
    delete failed); the sweep drops the mark, which names no trash entry, and touches nothing
    else. A delete of that image then goes through."""
    name = clean_pool.store(new_name("killed-before-move"), data_of(MiB))
    with rbd.Image(clean_pool.ioctx, name) as image:
        image.unprotect_snap(SNAP)
        image_id = image.id()
    mark_as_by_a_dead_process(clean_pool, name, image_id, snapshot=SNAP)
    try:
        assert name not in listed(conf_file, "status")
        assert command.report(conf_file, "sweep")["stale_marks"] == 1
        assert image_id in marked(clean_pool), "sweep without --remove dropped it"
        swept = command.report(conf_file, "sweep", "--remove")
        assert swept["stale_marks"] == 1 and swept["left"] == 0
        assert image_id not in marked(clean_pool)
        assert clean_pool.read(name) == data_of(MiB)
        assert clean_pool.info(name)["snaps"] == {SNAP: False}
        connection = {"conffile": str(cluster.conf_path), "user": "admin"}
        assert _delete_image(cluster.pool, name, SNAP, connect=connection) == (image_id, True)
        gone = wait_for(
            lambda: image_id not in trash.ids(clean_pool.ioctx) | marked(clean_pool), timeout=60
        )
        assert gone, "the delete's purge did not end"
    finally:
        trash.discard(clean_pool.ioctx, image_id)
        clean_pool.remove(name)


def test_a_delete_killed_mid_purge_is_finished_by_the_sweep(cluster, clean_pool, conf_file):
    """Killed while its purge removed glance's snapshot (moved to the trash namespace, under a
    name of librbd's): the sweep removes that snapshot and the data, and drops the mark."""
    name, trash_id = killed_mid_purge(cluster, clean_pool)
    try:
        assert trash_id in marked(clean_pool)
        assert listed(conf_file, "status")[name]["state"] == "gone"
        done = command.run(conf_file, "sweep", "--remove")
        assert f"{name} (deleted, trash id {trash_id})  purged" in done.stdout
        assert trash_id not in trash_names(clean_pool).values()
        assert trash_id not in marked(clean_pool)
    finally:
        trash.discard(clean_pool.ioctx, trash_id)


def test_the_sweep_exits_1_while_an_entry_it_would_purge_is_held(clean_pool, conf_file):
    """An entry whose deleter is gone, held open by a client: `sweep --remove` keeps it, names
    it and exits 1, in text and in JSON; once it is let go, the next sweep purges it, exit 0."""
    name, trash_id = in_the_trash(clean_pool, "held")
    mark_as_by_a_dead_process(clean_pool, name, trash_id)
    try:
        with rbd.Image(clean_pool.ioctx, image_id=trash_id):  # open: a watch on it
            text = command.run(conf_file, "sweep", "--remove", check=False)
            assert text.returncode == 1, text.stderr
            assert f"{name} (deleted, trash id {trash_id})  kept: a client still has it open" in (
                text.stdout
            )
            assert "1 of those to remove are left" in text.stdout
            as_json = command.run(conf_file, "sweep", "--remove", "--format", "json", check=False)
            assert as_json.returncode == 1, as_json.stderr
            report = json.loads(as_json.stdout)[0]
            assert report["left"] == 1
            held = {d["image"]: d for d in report["deletes"]}[name]
            assert held["outcome"].startswith("kept: a client still has it open")
            # Without --remove nothing is to be removed: it ran, exit 0.
            assert command.run(conf_file, "sweep", check=False).returncode == 0
        after = command.run(conf_file, "sweep", "--remove", "--format", "json", check=False)
        assert after.returncode == 0, after.stdout + after.stderr
        assert {d["image"]: d for d in json.loads(after.stdout)[0]["deletes"]}[name][
            "outcome"
        ] == "purged"
        assert trash_id not in trash_names(clean_pool).values()
        assert trash_id not in marked(clean_pool)
    finally:
        trash.discard(clean_pool.ioctx, trash_id)


def test_a_removal_that_fails_leaves_that_entry_and_the_sweep_goes_on(
    cluster, clean_pool, conf_file, tmp_path
):
    """`sweep --remove` as a user that may only read the pool: each entry's removal fails on
    its own, is named with why, and the others are still tried; exit 1. The entries stay."""
    entries = [in_the_trash(clean_pool, f"refused-{n}") for n in range(2)]
    for name, trash_id in entries:
        mark_as_by_a_dead_process(clean_pool, name, trash_id)
    reader = cluster.user(
        "reader", mon="profile rbd", osd=f"profile rbd-read-only pool={cluster.pool}"
    )
    conf = glance_api_conf(tmp_path / "reader.conf", cluster.pool, "reader", reader)
    try:
        done = command.run(conf, "sweep", "--remove", "--format", "json", status=1)
        report = json.loads(done.stdout)[0]
        outcomes = {d["image"]: d["outcome"] for d in report["deletes"]}
        assert report["left"] == 2, report
        for name, trash_id in entries:
            assert outcomes[name].startswith("left: "), outcomes
            assert trash_id in trash_names(clean_pool).values() and trash_id in marked(clean_pool)
    finally:
        for _, trash_id in entries:
            trash.discard(clean_pool.ioctx, trash_id)


def mark_as_by_this_process(images, name, image_id, **extra):
    """A deletion mark for trash entry `image_id` whose deleter runs: this very process."""
    with open("/proc/self/stat") as stat:
        start = int(stat.read().rsplit(")", 1)[1].split()[19])
    mark_as_by_a_dead_process(images, name, image_id)
    with rados.ReadOpCtx() as op:
        values, _ = images.ioctx.get_omap_vals_by_keys(op, (image_id,))
        images.ioctx.operate_read_op(op, DELETES)
        mark = json.loads(dict(values)[image_id])
    mark.update(process_start=start, **extra)
    with rados.WriteOpCtx() as op:
        images.ioctx.set_omap(op, (image_id,), (json.dumps(mark).encode(),))
        images.ioctx.operate_write_op(op, DELETES)


def test_a_delete_its_deleter_gave_up_is_purged_while_it_runs(clean_pool, conf_file):
    """A purge whose tries are over says so in the mark (`given_up`): the sweep removes that
    entry although its deleter runs."""
    name, trash_id = in_the_trash(clean_pool, "given-up")
    mark_as_by_this_process(clean_pool, name, trash_id, given_up=time.time() - 5)
    try:
        found = listed(conf_file, "status")[name]
        assert found["state"] == "gone" and "gave up removing its data" in found["reason"]
        assert listed(conf_file, "sweep", "--remove")[name]["outcome"] == "purged"
        assert trash_id not in trash_names(clean_pool).values()
        assert trash_id not in marked(clean_pool)
    finally:
        trash.discard(clean_pool.ioctx, trash_id)


def test_a_deleter_that_runs_is_left_alone(cluster, clean_pool, conf_file):
    """A mark whose deleter runs (this process): listed as deleting, never purged."""
    name, trash_id = in_the_trash(clean_pool, "deleting")
    mark_as_by_this_process(clean_pool, name, trash_id)
    try:
        assert listed(conf_file, "status")[name]["state"] == "deleting"
        assert name not in listed(conf_file, "sweep", "--remove")
        assert trash_names(clean_pool).get(name) == trash_id
    finally:
        rbd.RBD().trash_remove(clean_pool.ioctx, trash_id, force=True)
    # Its entry gone, the mark is stale: the sweep drops it.
    assert command.report(conf_file, "sweep", "--remove")["stale_marks"] >= 1
    with rados.ReadOpCtx() as op:
        values, _ = clean_pool.ioctx.get_omap_vals_by_keys(op, (trash_id,))
        clean_pool.ioctx.operate_read_op(op, DELETES)
        assert not dict(values)

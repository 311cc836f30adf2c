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

from tests.harness import command
from tests.harness.command import CHECKOUT
from tests.harness.data import MiB, data_of, new_name
from tests.harness.stores import SNAP

pytestmark = pytest.mark.cluster

DELETES = "glance_rbd_native.deletes"


def trash_names(images):
    return {entry["name"]: entry["id"] for entry in rbd.RBD().trash_list(images.ioctx)}


def listed(conf_file, *args):
    """{image: deletion} as `glance-rbd-native ARGS` lists them."""
    report = command.report(conf_file, *args)
    return {d["image"]: d for d in report["deletes"]}


def killed_mid_delete(cluster, images):
    """The name and trash id of an image whose deleter was killed as the delete returned."""
    # 512 MiB of objects to remove, written sparse: the removal takes many round trips.
    name = new_name("killed-delete")
    images.create(name, 512 * MiB)
    for offset in range(0, 512 * MiB, 8 * MiB):
        images.write(name, data_of(4096, seed=offset), offset)
    images.snapshot(name)
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.harness.killed_delete",
            str(cluster.conf_path),
            cluster.pool,
            name,
            SNAP,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=CHECKOUT,
    )
    assert child.returncode == -9, child.stderr
    return name, child.stdout.strip()


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
    with rbd.Image(images.ioctx, image_id=image_id) as image:
        return [snap["name"] for snap in image.list_snaps()]


def test_a_killed_delete_is_listed_then_purged_and_nothing_else(cluster, clean_pool, conf_file):
    name, trash_id = killed_mid_delete(cluster, clean_pool)
    assert name not in clean_pool.names()
    assert trash_names(clean_pool).get(name) == trash_id, "the data was all gone before the kill"
    # glance's snapshot moved with the image, unprotected, for the purge to remove first.
    assert snapshots_in_trash(clean_pool, trash_id) in ([SNAP], [])
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
        assert "snapshots other than" in swept[other[0]]["outcome"]
        left = trash_names(clean_pool)
        assert only[0] not in left and other[0] in left
        assert sorted(snapshots_in_trash(clean_pool, other[1])) == [SNAP, "user-snap"]
    finally:
        for name, trash_id in entries.values():
            if name in trash_names(clean_pool):
                with rbd.Image(clean_pool.ioctx, image_id=trash_id) as image:
                    for snap in list(image.list_snaps()):
                        image.remove_snap(snap["name"])
                rbd.RBD().trash_remove(clean_pool.ioctx, trash_id, force=True)
            with rados.WriteOpCtx() as op:
                clean_pool.ioctx.remove_omap_keys(op, (trash_id,))
                clean_pool.ioctx.operate_write_op(op, DELETES)


def test_a_deleter_that_runs_is_left_alone(cluster, clean_pool, conf_file):
    """A mark whose deleter runs (this process): listed as deleting, never purged."""
    name = clean_pool.store(new_name("deleting"), data_of(MiB))
    clean_pool.remove_snapshots(name)
    rbd.RBD().trash_move(clean_pool.ioctx, name, 0)
    trash_id = trash_names(clean_pool)[name]
    with open("/proc/self/stat") as stat:
        start = int(stat.read().rsplit(")", 1)[1].split()[19])
    mark_as_by_a_dead_process(clean_pool, name, trash_id)
    # Now as this very process: alive.
    with rados.ReadOpCtx() as op:
        values, _ = clean_pool.ioctx.get_omap_vals_by_keys(op, (trash_id,))
        clean_pool.ioctx.operate_read_op(op, DELETES)
        mark = json.loads(dict(values)[trash_id])
    mark["process_start"] = start
    with rados.WriteOpCtx() as op:
        clean_pool.ioctx.set_omap(op, (trash_id,), (json.dumps(mark).encode(),))
        clean_pool.ioctx.operate_write_op(op, DELETES)
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

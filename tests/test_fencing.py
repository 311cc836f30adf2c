"""A transfer whose Ceph client is fenced (blocklisted), on the real cluster: by an operator in
the middle of an upload or a download, or by `glance-rbd-native sweep --remove` after its
writer, frozen in a pid namespace the sweep cannot see, was presumed gone. Each ends within
`FAILS_WITHIN` seconds with the fenced error, leaves nothing behind, and the next transfer of
the same process connects again and works."""

import json
import os
import subprocess
import sys
import time

import pytest
import rbd

from glance_rbd_native import leftovers
from glance_rbd_native._native import Fenced, RbdReader, RbdWriter, _delete_image
from tests.harness import command, trash
from tests.harness.command import OWN_PID_NAMESPACE
from tests.harness.data import MiB, data_of, new_name
from tests.harness.held_upload import CHECKOUT, Held
from tests.harness.stores import SNAP
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.cluster

# The bound this suite states for "within seconds": a stalled wait probes the cluster after
# 3 s, and the probe's answer comes in one round trip to an OSD.
FAILS_WITHIN = 20


def blocklist(cluster, addr):
    """Blocklists `addr`, and returns once every OSD enforces it: an OSD judges a client's
    operations by the map it has, and one that has not had the new map yet lets them through
    (under load, for long enough that a transfer started meanwhile opens, and fails later)."""
    cluster.mon("osd blocklist", blocklistop="add", addr=addr)
    dump = cluster.mon("osd dump", format="json").strip()
    epoch = json.JSONDecoder().raw_decode(dump)[0]["epoch"]
    wait_for(
        lambda: all(osd_epoch(cluster, osd) >= epoch for osd in range(cluster.osds)),
        60,
        f"every OSD has the osdmap of epoch {epoch}, which blocklists {addr}",
    )


def osd_epoch(cluster, osd):
    """The newest osdmap epoch that OSD `osd` has."""
    status = cluster.ceph("tell", f"osd.{osd}", "status", "--format", "json")
    return json.JSONDecoder().raw_decode(status.strip())[0]["newest_map"]


def test_an_upload_blocklisted_in_the_middle_fails_fast_and_the_next_works(cluster, clean_pool):
    name, then = new_name("fenced"), new_name("after")
    held = Held(cluster, name, then=then)
    blocklist(cluster, leftovers.marks(clean_pool.ioctx)[name].get("addr"))
    held.go()
    line, took = held.outcome(timeout=120)
    assert line.startswith("failed: FencedOff:") and "was fenced" in line, line
    assert took < FAILS_WITHIN, f"the fenced upload took {took:.1f} s to fail"
    line, _ = held.outcome(timeout=120)
    assert line == "stored", f"the next upload of the same process: {line}"
    held.end()
    # Its clean-up went through a new connection: nothing of the fenced upload is left.
    assert name not in clean_pool.names() and name not in leftovers.marks(clean_pool.ioctx)
    assert clean_pool.read(then) == data_of(MiB, seed=len(then))
    clean_pool.remove(then)
    print(f"\nblocklisted upload: failed {took:.1f} s after it went on")


def test_an_upload_blocklisted_before_its_finish_fails_fast(cluster, clean_pool):
    """Fenced after its last write has completed: what is left, the flush, the trim of an
    image of unknown size and the snapshot, are librbd's synchronous calls, and they end
    within seconds with the fenced error, as the writes do."""
    conf = {"conffile": str(cluster.conf_path), "user": "admin"}
    name = new_name("fenced-finish")
    writer = RbdWriter(cluster.pool, name, 0, snapshot=SNAP, **conf)
    writer.write(data_of(4 * MiB))
    time.sleep(1)  # the write completes: only the synchronous calls are left
    blocklist(cluster, leftovers.marks(clean_pool.ioctx)[name].get("addr"))
    started = time.monotonic()
    with pytest.raises(Fenced, match="was fenced"):
        writer.finish()
    took = time.monotonic() - started
    assert took < FAILS_WITHIN, f"the fenced finish took {took:.1f} s to fail"
    assert name not in clean_pool.names() and name not in leftovers.marks(clean_pool.ioctx)
    print(f"\nblocklisted before its finish: failed {took:.1f} s after")


def test_a_download_blocklisted_in_the_middle_fails_fast_and_the_next_works(cluster, clean_pool):
    name = new_name("read-fenced")
    clean_pool.store(name, data_of(64 * MiB, seed=len(name)))
    # A bound of 8 MiB: most of the image is still to read when the reader is fenced.
    reader = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.harness.held_download",
            "--conf",
            str(cluster.conf_path),
            "--pool",
            cluster.pool,
            "--image",
            name,
        ],
        cwd=CHECKOUT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "GLANCE_RBD_NATIVE_MAX_IN_FLIGHT_MIB": "8"},
    )
    try:
        assert reader.stdout.readline().strip() == "held"
        (watch,) = clean_pool.watchers(name)
        blocklist(cluster, watch["addr"])
        reader.stdin.write("go\n")
        reader.stdin.flush()
        out, _ = reader.communicate(timeout=120)
    finally:
        reader.kill()
    first, second = out.strip().splitlines()
    assert first.startswith("failed: FencedOff:") and "was fenced" in first, out
    took = float(first.rsplit(" after ", 1)[1].rstrip("s"))
    assert took < FAILS_WITHIN, f"the fenced download took {took:.1f} s to fail"
    assert second == f"read {64 * MiB} bytes, as stored", out
    clean_pool.remove(name)


def test_a_connection_fenced_while_idle_is_replaced_by_the_next_transfer(cluster, clean_pool):
    """Fenced between transfers, the process's cached connection fails the next transfer's first
    operation: that transfer connects again, and goes through."""
    conf = {"conffile": str(cluster.conf_path), "user": "admin"}
    first, second = new_name("idle"), new_name("after-idle")
    writer = RbdWriter(cluster.pool, first, 0, snapshot=SNAP, **conf)
    addr = leftovers.marks(clean_pool.ioctx)[first].get("addr")
    writer.write(data_of(MiB))
    writer.finish()
    blocklist(cluster, addr)
    writer = RbdWriter(cluster.pool, second, 0, snapshot=SNAP, **conf)
    again = leftovers.marks(clean_pool.ioctx)[second].get("addr")
    assert again != addr
    writer.write(data_of(MiB, seed=2))
    writer.finish()
    blocklist(cluster, again)
    with RbdReader(cluster.pool, first, snapshot=SNAP, **conf) as reader:
        assert b"".join(reader) == data_of(MiB)
    for name in (first, second):
        clean_pool.remove(name)


def test_a_delete_on_a_connection_fenced_while_idle_connects_again(cluster, clean_pool):
    """A delete's first operation on the fenced cached connection fails: the delete runs again
    on a new connection, within seconds, and its purge removes the data and the mark."""
    conf = {"conffile": str(cluster.conf_path), "user": "admin"}
    name = new_name("delete-fenced")
    writer = RbdWriter(cluster.pool, name, 0, snapshot=SNAP, **conf)
    addr = leftovers.marks(clean_pool.ioctx)[name].get("addr")
    writer.write(data_of(MiB))
    writer.finish()
    blocklist(cluster, addr)
    started = time.monotonic()
    trash_id, purging = _delete_image(cluster.pool, name, SNAP, connect=conf)
    took = time.monotonic() - started
    assert purging and took < FAILS_WITHIN, f"{took:.1f} s"
    assert name not in clean_pool.names()
    # The mark goes just after the entry.
    assert wait_for(
        lambda: (
            trash_id not in trash.ids(clean_pool.ioctx)
            and trash_id not in trash.marked(clean_pool.ioctx)
        ),
        60,
    ), "the purge did not remove the data and the mark through the new connection"


def test_a_frozen_writer_no_sweep_can_see_is_fenced_then_fails_fast(cluster, clean_pool, conf_file):
    """A writer in a pid namespace of its own, frozen past `--presume-gone-after`, looked at
    by a sweep in another namespace, which cannot see it: fenced, then removed. Thawed, its
    upload fails at once with the fenced error, and that process's next upload is stored."""
    name, then = new_name("presumed"), new_name("after")
    held = Held(cluster, name, then=then, own_namespace=True)
    held.freeze()
    try:
        wait_for(lambda: not clean_pool.watchers(name), 90, "the frozen writer's watch expired")
        sweep = command.report(
            conf_file, "sweep", "--remove", "--presume-gone-after", "1", wrap=OWN_PID_NAMESPACE
        )
        (gone,) = sweep["gone"]
        assert gone["image"] == name and gone["outcome"] == "fenced and removed", gone
        assert "presumed gone" in gone["reason"] and "cannot be seen" in gone["reason"]
        assert name not in clean_pool.names()
    finally:
        held.thaw()
    held.go()
    line, took = held.outcome(timeout=120)
    assert line.startswith("failed: FencedOff:"), line
    assert took < FAILS_WITHIN, f"the fenced upload took {took:.1f} s to fail"
    assert held.outcome(timeout=120)[0] == "stored"
    held.end()
    assert name not in clean_pool.names() and name not in leftovers.marks(clean_pool.ioctx)
    clean_pool.remove(then)
    with pytest.raises(rbd.ImageNotFound):
        rbd.Image(clean_pool.ioctx, name, read_only=True)

"""What a process killed mid-upload leaves, on the real cluster: the mark of each native upload
in flight, `glance-rbd-native status` and `sweep`, and the retried upload that goes through.

The uploads run in processes of their own (tests/harness/held_upload.py), held in the middle, so
that each can be killed with SIGKILL, left running, or let finish. The test cluster expires a
dead client's watch after 15 s (`osd client watch timeout`, tests/harness/cluster.py).
"""

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest
import rados
import rbd
from glance_store import exceptions

import glance_rbd_native
from glance_rbd_native import leftovers
from glance_rbd_native._native import RbdWriter
from tests.harness import command
from tests.harness.command import OWN_PID_NAMESPACE
from tests.harness.data import MiB, data_of, expected_result, new_name
from tests.harness.held_upload import Held
from tests.harness.stores import SNAP, glance_api_conf, make_store
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.cluster


def cli(conf_file, *args, check=True):
    """`glance-rbd-native ARGS --config-file CONF`: (exit status, stdout, stderr)."""
    done = command.run(conf_file, *args, check=check)
    return done.returncode, done.stdout, done.stderr


def status(conf_file):
    return {u["image"]: u for u in command.report(conf_file, "status")["uploads"]}


def sweep(conf_file, *args, status=0):
    return command.report(conf_file, "sweep", *args, status=status)


# -- the mark --------------------------------------------------------------------------------


def test_an_upload_is_marked_from_its_first_byte_until_its_snapshot(cluster, clean_pool):
    name = new_name("marked")
    client, ioctx = clean_pool.client, clean_pool.ioctx
    writer = RbdWriter(
        cluster.pool, name, 0, conffile=str(cluster.conf_path), user="admin", snapshot=SNAP
    )
    mark = leftovers.marks(ioctx)[name]
    assert mark.get("pid") == os.getpid() and mark.get("bytes") == 0 and mark.get("size") == 0
    assert abs(mark.get("started") - time.time()) < 30
    # Who writes, to tell processes apart across containers, and what fencing would name.
    assert mark.get("pid_ns") == os.stat("/proc/self/ns/pid").st_ino
    assert mark.get("image_id") == rbd.Image(ioctx, name, read_only=True).id()
    assert mark.get("client") == client.get_instance_id() or mark.get("client") > 0
    assert mark.get("addr", "").endswith(tuple("0123456789")) and "/" in mark.get("addr")
    pool = leftovers.Pool(client, ioctx)
    assert leftovers.inspect(pool, name, mark, 3600).state == "alive"
    writer.write(data_of(MiB))
    writer.finish()
    assert name not in leftovers.marks(ioctx)
    clean_pool.remove(name)

    aborted = new_name("aborted")
    writer = RbdWriter(
        cluster.pool, aborted, 4 * MiB, conffile=str(cluster.conf_path), user="admin", snapshot=SNAP
    )
    assert aborted in leftovers.marks(ioctx)
    writer.write(data_of(MiB))
    writer.abort()
    assert aborted not in leftovers.marks(ioctx)


def test_the_mark_carries_the_bytes_stored(cluster, clean_pool):
    """Refreshed every 5 s at most, from the writes that completed."""
    name = new_name("refreshed")
    ioctx = clean_pool.ioctx
    writer = RbdWriter(
        cluster.pool, name, 0, conffile=str(cluster.conf_path), user="admin", snapshot=SNAP
    )
    try:
        for _ in range(4):
            writer.write(data_of(MiB))
        time.sleep(5.5)
        writer.write(data_of(MiB))
        mark = leftovers.marks(ioctx)[name]
        assert 4 * MiB <= mark.get("bytes") <= 5 * MiB
        assert mark.get("updated") > mark.get("started") + 5
    finally:
        writer.abort()


# -- a killed upload -------------------------------------------------------------------------


def test_a_killed_upload_is_listed_swept_and_stored_again(cluster, clean_pool, conf_file, caplog):
    name = new_name("killed")
    held = Held(cluster, name)
    listed = status(conf_file)
    assert listed[name]["state"] == "alive" and listed[name]["pid"] == held.pid
    assert "would remove" not in cli(conf_file, "sweep")[1]
    assert sweep(conf_file)["gone"] == []

    held.kill()
    killed = time.monotonic()
    # Its process is gone on this host: gone at once, before its watch expires.
    found = sweep(conf_file)
    assert [u["image"] for u in found["gone"]] == [name]
    assert "is gone" in found["gone"][0]["reason"]
    listed_after = time.monotonic() - killed
    assert status(conf_file)[name]["state"] == "gone"

    # The retry of the same image ID: the leftover goes, with a WARNING naming its writer.
    glance_rbd_native.patch()
    data = data_of(3 * MiB)
    with caplog.at_level(logging.WARNING, logger="glance_rbd_native"):
        result = make_store(cluster, chunk_mib=1).add(name, io.BytesIO(data), len(data), "sha512")
    stored_after = time.monotonic() - killed
    assert result[1:4] == expected_result(data)
    assert clean_pool.read(name) == data
    warning = [r.getMessage() for r in caplog.records if "left over" in r.getMessage()]
    assert warning and f"pid {held.pid} on" in warning[0], caplog.text
    ioctx = clean_pool.ioctx
    assert name not in leftovers.marks(ioctx)
    print(
        f"\nkilled upload: listed by sweep {listed_after:.1f} s after the kill, "
        f"stored again {stored_after:.1f} s after it"
    )
    clean_pool.remove(name)


def test_without_its_process_in_view_the_watch_and_the_mark_decide(cluster, clean_pool, conf_file):
    """A writer on another host: alive while it watches; then kept until it has been silent
    for `--presume-gone-after`; then fenced, and removed."""
    name = new_name("elsewhere")
    held = Held(cluster, name)
    held.kill()
    ioctx = clean_pool.ioctx
    fields = dict(leftovers.marks(ioctx)[name].fields, host="another-host")
    write_mark(ioctx, name, json.dumps(fields))
    killed = time.monotonic()
    assert sweep(conf_file)["gone"] == [], "listed while its watch is still there"
    assert status(conf_file)[name]["state"] == "alive"
    kept = wait_for(lambda: sweep(conf_file)["kept"], 60, "the watch expired")
    assert kept[0]["state"] == "silent" and "presumed gone after 1h00m" in kept[0]["reason"]
    assert "another host" in kept[0]["reason"]
    print(f"\nanother host's leftover: silent {time.monotonic() - killed:.1f} s after the kill")
    removed = sweep(conf_file, "--remove", "--presume-gone-after", "1")
    assert [u["outcome"] for u in removed["gone"]] == ["fenced and removed"]
    assert name not in clean_pool.names() and name not in leftovers.marks(ioctx)
    assert fields["addr"] in blocklisted(cluster)


def write_mark(ioctx, name, value):
    """Sets the mark of `name` to `value` (str or bytes) in the pool's index."""
    with rados.WriteOpCtx() as op:
        ioctx.set_omap(op, (name,), (value.encode() if isinstance(value, str) else value,))
        ioctx.operate_write_op(op, leftovers.INDEX)


def blocklisted(cluster):
    """The addresses the cluster's blocklist holds."""
    # The monitor's answer is the list, then a line of how many it holds.
    listing = json.JSONDecoder().raw_decode(cluster.mon("osd blocklist ls", format="json"))[0]
    return {entry.get("addr") for entry in listing}


def test_sweep_removes_only_the_leftover(cluster, clean_pool, conf_file):
    """Around one killed native upload: a live one of another process, a finished image, a
    clone's parent, an image made by `rbd create`, and stock's killed upload."""
    data = data_of(2 * MiB)
    glance_rbd_native.patch()
    finished = new_name("finished")
    make_store(cluster, chunk_mib=1).add(finished, io.BytesIO(data), len(data), "sha512")
    parent = new_name("parent")
    make_store(cluster, chunk_mib=1).add(parent, io.BytesIO(data), len(data), "sha512")
    clone = new_name("clone")
    cluster.rbd("clone", f"{cluster.pool}/{parent}@{SNAP}", f"{cluster.pool}/{clone}")
    foreign = new_name("foreign")
    cluster.rbd("create", "--size", "4M", f"{cluster.pool}/{foreign}")
    stock_left = str(uuid.uuid4())  # named as glance names images
    Held(cluster, stock_left, driver="stock").kill()
    live = Held(cluster, new_name("live"))
    killed = new_name("killed")
    Held(cluster, killed).kill()
    try:
        listed = sweep(conf_file)
        assert [u["image"] for u in listed["gone"]] == [killed]
        assert listed["unmarked"] == []
        removed = sweep(conf_file, "--remove")
        assert [(u["image"], u["outcome"]) for u in removed["gone"]] == [(killed, "removed")]
        left = clean_pool.names()
        assert killed not in left
        assert {finished, parent, clone, foreign, stock_left, live.image} <= left
        assert status(conf_file)[live.image]["state"] == "alive"

        # Stock's leftover (and the foreign image) only with --include-unmarked and an age.
        code, _, err = cli(conf_file, "sweep", "--include-unmarked", check=False)
        assert code == 2 and "--older-than" in err
        assert sweep(conf_file, "--include-unmarked", "--older-than", "1h")["unmarked"] == []
        wait_for(
            lambda: (
                stock_left
                in {
                    u["image"]
                    for u in sweep(conf_file, "--include-unmarked", "--older-than", "1")["unmarked"]
                }
            ),
            60,
            "stock's leftover without a watcher",
        )
        listing = sweep(conf_file, "--include-unmarked", "--older-than", "1")
        unmarked = {u["image"] for u in listing["unmarked"]}
        # Only names that are glance's image ids: not the image made by `rbd create`.
        assert stock_left in unmarked and foreign not in unmarked
        assert not unmarked & {finished, parent, clone, live.image}
        assert listing["database"] == "not read: the configuration has no [database] connection"
        live.finish()
        assert clean_pool.read(live.image) == data_of(16 * MiB, seed=len(live.image))
    finally:
        with contextlib.suppress(Exception):
            live.kill()
        cluster.rbd("rm", f"{cluster.pool}/{clone}")
        remove_when_free(clean_pool, (finished, parent, foreign, stock_left, live.image))


# -- races -----------------------------------------------------------------------------------


def test_a_sweep_while_the_writer_finishes_leaves_it(cluster, clean_pool, conf_file):
    held = Held(cluster, new_name("finishing"))
    stop = threading.Event()
    outcomes = []

    def sweeping():
        while not stop.is_set():
            outcomes.append(sweep(conf_file, "--remove"))

    sweeper = threading.Thread(target=sweeping)
    sweeper.start()
    try:
        time.sleep(1)
        held.finish()
        time.sleep(1)
    finally:
        stop.set()
        sweeper.join()
    assert outcomes and all(o["gone"] == [] for o in outcomes)
    assert clean_pool.read(held.image) == data_of(16 * MiB, seed=len(held.image))
    clean_pool.remove(held.image)


def test_an_invalid_upload_stays_invalid_while_sweeps_look(cluster, clean_pool, conf_file):
    """`status` and `sweep` read images without a watch or a lock: an upload whose source ends
    short of its declared size (the driver's `Invalid`, glance's 400) still removes its image
    itself while they run, and its error stays `Invalid`, never a removal refused for their
    watch."""
    glance_rbd_native.patch()
    stop = threading.Event()
    looks = []

    def looking():
        while not stop.is_set():
            looks.append(status(conf_file))
            looks.append(sweep(conf_file, "--remove"))

    looker = threading.Thread(target=looking)
    looker.start()
    try:
        for attempt in range(6):
            name = new_name(f"short-{attempt}")
            data = data_of(24 * MiB, seed=attempt)
            with pytest.raises(exceptions.Invalid, match="Size mismatch"):
                make_store(cluster, chunk_mib=1).add(name, io.BytesIO(data), 32 * MiB, "sha512")
            assert name not in clean_pool.names()
    finally:
        stop.set()
        looker.join(120)
    assert len(looks) >= 2, "no status or sweep ran beside the uploads"
    assert all(look["gone"] == [] for look in looks[1::2])


def test_two_sweeps_at_once_remove_the_leftover_once(cluster, clean_pool, conf_file):
    name = new_name("twice")
    Held(cluster, name).kill()
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "glance_rbd_native",
                "--config-file",
                str(conf_file),
                "sweep",
                "--remove",
                "--format",
                "json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], results
    outcomes = sorted(u.get("outcome") for out, _ in results for u in json.loads(out)[0]["gone"])
    assert "removed" in outcomes and set(outcomes) <= {
        "removed",
        "already removed",
        "already gone: its mark was cleared since it was judged",
    }
    assert name not in clean_pool.names()
    ioctx = clean_pool.ioctx
    assert name not in leftovers.marks(ioctx)


@pytest.mark.parametrize("held", [1, 10], ids=["moved-meanwhile", "held-open"])
def test_a_removal_beside_another_client_waits_for_its_watch(cluster, clean_pool, held):
    """Another sweep moving the same leftover to the trash opens it for a moment, which adds a
    watch: the removal waits for that watch to go (images.SETTLE), and then finds the image
    removed. A client that keeps the image open is another client: the image is left. (An
    unmarked leftover, so that no dead writer's watch is in the way.)"""
    name = str(uuid.uuid4())
    clean_pool.create(name, 4 * MiB)
    pool = leftovers.Pool(clean_pool.client, clean_pool.ioctx)
    judged = leftovers.inspect(pool, name, None, 0)
    assert judged.state == "unmarked"
    opened = threading.Event()

    def other_client():
        with rbd.Image(clean_pool.ioctx, name):
            opened.set()
            time.sleep(held)
        if held < leftovers.images.SETTLE:
            rbd.RBD().remove(clean_pool.ioctx, name)

    other = threading.Thread(target=other_client)
    other.start()
    try:
        assert opened.wait(30)
        outcome = leftovers.remove(pool, judged)
    finally:
        other.join(60)
    if held < leftovers.images.SETTLE:
        assert outcome == "already removed"
        assert name not in clean_pool.names()
    else:
        assert outcome.startswith("left: another client watches it now ("), outcome
        assert name in clean_pool.names()
        clean_pool.remove(name)


def test_a_removal_judged_before_the_name_went_to_a_new_upload_leaves_the_new_one(
    cluster, clean_pool
):
    """The sweep judges a killed upload gone; meanwhile the leftover goes (another sweep) and
    glance's retry of the same image ID starts a new upload under the name. The first sweep's
    removal then finds the mark changed, and leaves the new upload, which finishes."""
    name = new_name("renamed")
    Held(cluster, name).kill()
    pool = leftovers.Pool(clean_pool.client, clean_pool.ioctx)
    judged = leftovers.inspect(pool, name, leftovers.marks(pool.ioctx)[name], 3600)
    other = leftovers.inspect(pool, name, leftovers.marks(pool.ioctx)[name], 3600)
    assert judged.state == other.state == "gone"
    assert leftovers.remove(pool, other) == "removed"
    retried = Held(cluster, name)
    assert leftovers.remove(pool, judged) == "left: its mark changed since it was judged"
    retried.finish()
    assert clean_pool.read(name) == data_of(16 * MiB, seed=len(name))
    clean_pool.remove(name)


def test_an_unmarked_image_judged_before_its_name_went_to_another_is_left(cluster, clean_pool):
    """Without a mark, the image's id decides: judged, then replaced by another image of the
    same name, it is not the one the removal acts on."""
    name = str(uuid.uuid4())
    clean_pool.create(name, 4 * MiB)
    pool = leftovers.Pool(clean_pool.client, clean_pool.ioctx)
    judged = leftovers.inspect(pool, name, None, 0)
    assert judged.state == "unmarked"
    clean_pool.remove(name)
    clean_pool.create(name, 8 * MiB)
    clean_pool.write(name, b"new")
    assert leftovers.remove(pool, judged) == "left: the name is another image's now"
    with rbd.Image(clean_pool.ioctx, name) as image:
        assert image.size() == 8 * MiB and image.read(0, 3) == b"new"
    clean_pool.remove(name)


def test_the_janitor_leaves_a_new_image_that_took_the_name(cluster, clean_pool, caplog):
    """An upload whose removal fails (another client watches the image) leaves it to the
    janitor; meanwhile the name goes to a new image. The janitor acts on the old image's id:
    the new image stays, and it says so."""
    caplog.set_level(logging.INFO, logger="glance_rbd_native")
    name = new_name("janitor")
    writer = RbdWriter(
        cluster.pool, name, 0, conffile=str(cluster.conf_path), user="admin", snapshot=SNAP
    )
    writer.write(data_of(MiB))
    with rbd.Image(clean_pool.ioctx, name):  # a watch: the writer's removal is refused
        with pytest.raises(glance_rbd_native.RbdError):
            writer.abort()
    clean_pool.remove(name)
    clean_pool.create(name, 8 * MiB)
    clean_pool.write(name, b"new")
    said = "is already gone: the name is another image's now, left alone"
    wait_for(
        lambda: (
            RbdWriter(
                cluster.pool, new_name(), conffile=str(cluster.conf_path), user="admin"
            ).abort()
            or said in caplog.text
        ),
        60,
        "the janitor tried again",
        every=2,
    )
    with rbd.Image(clean_pool.ioctx, name) as image:
        assert image.size() == 8 * MiB and image.read(0, 3) == b"new"
    clean_pool.remove(name)


# -- glance's documented user, and what the command refuses ---------------------------------


def test_glance_documented_user_marks_lists_and_sweeps(cluster, clean_pool, tmp_path):
    """`mon 'profile rbd'`, `osd 'profile rbd pool=images'`, `mgr 'profile rbd pool=images'`:
    the mark, the status, the removal (and the blocklisting of a dead writer's client)."""
    conf = cluster.user(
        "glance",
        mon="profile rbd",
        osd=f"profile rbd pool={cluster.pool}",
        mgr=f"profile rbd pool={cluster.pool}",
    )
    glance_conf = glance_api_conf(tmp_path / "glance-api.conf", cluster.pool, "glance", conf)
    name = new_name("glance-user")
    held = Held(cluster, name, conf=conf, user="glance")
    assert status(glance_conf)[name]["state"] == "alive"
    held.kill()
    removed = sweep(glance_conf, "--remove")
    assert [(u["image"], u["outcome"]) for u in removed["gone"]] == [(name, "removed")]
    assert name not in clean_pool.names()


def test_the_command_says_what_is_wrong(cluster, tmp_path, conf_file):
    code, _, err = cli(tmp_path / "missing.conf", "status", check=False)
    assert code == 2 and "missing.conf" in err

    code, _, err = cli(conf_file, "--backend", "nope", "status", check=False)
    assert code == 2 and "no rbd backend 'nope'" in err

    no_rbd = tmp_path / "file-only.conf"
    no_rbd.write_text("[glance_store]\nstores = file\ndefault_store = file\n")
    code, _, err = cli(no_rbd, "status", check=False)
    assert code == 2 and "no rbd backend" in err

    other = cluster.user("elsewhere", mon="profile rbd", osd="profile rbd pool=another")
    denied = tmp_path / "denied.conf"
    denied.write_text(
        conf_file.read_text()
        .replace("rbd_store_user = admin", "rbd_store_user = elsewhere")
        .replace(f"rbd_store_ceph_conf = {cluster.conf_path}", f"rbd_store_ceph_conf = {other}")
    )
    code, _, err = cli(denied, "status", check=False)
    assert code == 1 and "refused client.elsewhere" in err and "profile rbd" in err, err

    unreachable = tmp_path / "unreachable.conf"
    ceph_conf = tmp_path / "ceph.conf"
    ceph_conf.write_text(
        cluster.conf_path.read_text().replace(
            f"mon host = v2:127.0.0.1:{cluster.port}", "mon host = v2:127.0.0.1:9"
        )
    )
    unreachable.write_text(
        conf_file.read_text().replace(
            f"rbd_store_ceph_conf = {cluster.conf_path}",
            f"rbd_store_ceph_conf = {ceph_conf}\nrados_connect_timeout = 3",
        )
    )
    code, _, err = cli(unreachable, "status", check=False)
    assert code == 1 and "cannot connect" in err, err


def test_a_backend_that_cannot_be_read_is_reported_failed_beside_the_others(
    cluster, clean_pool, tmp_path
):
    """Two backends, the second's monitors unreachable: the first is still reported, in text
    and in JSON, the second as failed with why, and the status is 1 for cron."""
    ceph_conf = tmp_path / "ceph.conf"
    ceph_conf.write_text(
        cluster.conf_path.read_text().replace(
            f"mon host = v2:127.0.0.1:{cluster.port}", "mon host = v2:127.0.0.1:9"
        )
    )
    store = f"rbd_store_pool = {cluster.pool}\nrbd_store_user = admin\nrados_connect_timeout = 3\n"
    conf = tmp_path / "glance-api.conf"
    conf.write_text(
        "[DEFAULT]\nenabled_backends = good:rbd, away:rbd\n"
        "[glance_store]\ndefault_backend = good\n"
        f"[good]\n{store}rbd_store_ceph_conf = {cluster.conf_path}\n"
        f"[away]\n{store}rbd_store_ceph_conf = {ceph_conf}\n"
    )
    code, out, err = cli(conf, "status", check=False)
    assert code == 1, out + err
    assert f"good: {cluster.pool}: no upload in flight" in out
    assert err.startswith("glance-rbd-native: backend away: cannot connect"), err
    assert "Warning" not in err, err  # glance_store's and eventlet's are for glance-api's log
    done = command.run(conf, "status", "--format", "json", status=1)
    good, away = json.loads(done.stdout)
    assert (good["backend"], good["uploads"], "error" not in good) == ("good", [], True)
    assert away["backend"] == "away" and away["error"].startswith("backend away: cannot connect")


def test_a_leftover_whose_writer_may_live_stays_a_duplicate(cluster, clean_pool):
    """As stock: an image that is there and not provably a dead writer's is a Duplicate."""
    from glance_store import exceptions

    name = new_name("busy")
    held = Held(cluster, name)
    try:
        glance_rbd_native.patch()
        with pytest.raises(exceptions.Duplicate):
            make_store(cluster, chunk_mib=1).add(name, io.BytesIO(b"x"), 1, "sha512")
    finally:
        held.kill()
    # Unmarked (stock's leftover): Duplicate too.
    stock_left = new_name("stock-dup")
    Held(cluster, stock_left, driver="stock").kill()
    with pytest.raises(exceptions.Duplicate):
        make_store(cluster, chunk_mib=1).add(stock_left, io.BytesIO(b"x"), 1, "sha512")
    remove_when_free(clean_pool, (name, stock_left))


def remove_when_free(images, names, timeout=60):
    """Removes `names`, waiting for the watches of killed writers to expire."""

    def removed():
        for image in names:
            with contextlib.suppress(rbd.ImageNotFound, rbd.ImageBusy):
                images.remove(image)
        return not set(names) & images.names()

    wait_for(removed, timeout, f"{names} removed once free")
    for image in names:
        drop_mark(images.ioctx, image)


def drop_mark(ioctx, name):
    """Removes the mark of `name`, whatever it holds."""
    with rados.WriteOpCtx() as op:
        ioctx.remove_omap_keys(op, (name,))
        with contextlib.suppress(rados.ObjectNotFound):
            ioctx.operate_write_op(op, leftovers.INDEX)


# -- writers in containers, frozen writers ----------------------------------------------------


def test_a_writer_in_a_pid_namespace_of_its_own_is_kept_and_finishes(
    cluster, clean_pool, conf_file
):
    """As kolla runs glance-api: the host's network and hostname, its own pids (pid 1 there).
    Judged from the host, from inside its namespace, and from another namespace: alive, kept,
    and it finishes."""
    held = Held(cluster, new_name("contained"), own_namespace=True)
    name = held.image
    mark = leftovers.marks(clean_pool.ioctx)[name]
    assert mark.get("pid") == 1 and mark.get("pid_ns") != os.stat("/proc/self/ns/pid").st_ino
    for where, wrap in (
        ("the host", ()),
        ("its namespace", command.in_namespace_of(held.pid)),
        ("another namespace", OWN_PID_NAMESPACE),
    ):
        listed = {u["image"]: u for u in command.report(conf_file, "status", wrap=wrap)["uploads"]}
        assert listed[name]["state"] == "alive", (where, listed[name])
        removed = command.report(conf_file, "sweep", "--remove", wrap=wrap)
        assert removed["gone"] == [], (where, removed)
    reasons = {u["image"]: u["reason"] for u in command.report(conf_file, "status")["uploads"]}
    assert f"pid {held.pid} here" in reasons[name]
    held.finish()
    assert clean_pool.read(name) == data_of(16 * MiB, seed=len(name))
    clean_pool.remove(name)


def test_a_frozen_writer_is_kept_and_finishes(cluster, clean_pool, conf_file):
    """SIGSTOP past the watch timeout (as `docker pause`): its watch goes, its process stays;
    `sweep --remove` keeps it, and it finishes after SIGCONT."""
    held = Held(cluster, new_name("frozen"))
    name = held.image
    held.freeze()
    try:
        wait_for(lambda: not clean_pool.watchers(name), 90, "the frozen writer's watch expired")
        listed = status(conf_file)[name]
        assert listed["state"] == "alive" and "stopped" in listed["reason"], listed
        assert "without a watch" in listed["reason"]
        assert sweep(conf_file, "--remove", "--presume-gone-after", "1")["gone"] == []
        assert name in clean_pool.names()
    finally:
        held.thaw()
    held.finish()
    assert clean_pool.read(name) == data_of(16 * MiB, seed=len(name))
    clean_pool.remove(name)


# -- what cannot be read, what is refused, how it is asked -----------------------------------

MALFORMED = {
    "not-json": b"{not json",
    "not-an-object": b"[1, 2]",
    "control": json.dumps(
        {
            "host": "vm\x1b[2J\r\nFAKE",
            "boot_id": "b",
            "pid": 1,
            "process_start": 1,
            "started": 1.0,
            "updated": 1.0,
            "bytes": 0,
        }
    ).encode(),
}


def test_malformed_marks_are_listed_unreadable_and_never_printed_raw(
    cluster, clean_pool, conf_file, caplog
):
    ioctx = clean_pool.ioctx
    names = {kind: new_name(kind) for kind in MALFORMED}
    for kind, value in MALFORMED.items():
        write_mark(ioctx, names[kind], value)
    # A key that is not UTF-8: only the C API (here the `rados` program) writes one.
    bad_key = b"\xff\xfe" + new_name("key").encode()
    subprocess.run(
        [
            b"rados",
            b"-c",
            str(cluster.conf_path).encode(),
            b"-p",
            cluster.pool.encode(),
            b"setomapval",
            leftovers.INDEX.encode(),
            bad_key,
            b"{}",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    control_key = new_name("key\x1b[2J")
    write_mark(ioctx, control_key, b"{}")
    try:
        for args, said in (
            (("status",), "mark UNREADABLE"),
            (("sweep", "--remove"), "kept: an unreadable mark"),
        ):
            done = command.run(conf_file, *args)
            assert "\x1b" not in done.stdout and "\r" not in done.stdout, done.stdout
            for name in names.values():
                assert f"/{name}  {said}" in done.stdout, done.stdout
            assert "(a key that is not UTF-8, after " in done.stdout
            assert "key\\x1b[2J" in done.stdout
        listed = status(conf_file)
        for kind, name in names.items():
            assert listed[name]["state"] == "unreadable", (kind, listed[name])
        marks = leftovers.marks(ioctx)
        assert all(name in marks for name in names.values()), "an unreadable mark was dropped"
    finally:
        for name in [*names.values(), control_key]:
            drop_mark(ioctx, name)
        subprocess.run(
            [
                b"rados",
                b"-c",
                str(cluster.conf_path).encode(),
                b"-p",
                cluster.pool.encode(),
                b"rmomapkey",
                leftovers.INDEX.encode(),
                bad_key,
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )


def test_a_refused_fence_keeps_that_image_and_names_the_cap(cluster, clean_pool, tmp_path):
    """With the legacy `mon 'allow r'`, fencing is refused: that image is kept, the output
    names the cap, and the other images are still handled."""
    conf = cluster.user("legacy", mon="allow r", osd=f"allow rwx pool={cluster.pool}")
    glance_conf = glance_api_conf(tmp_path / "glance-api.conf", cluster.pool, "legacy", conf)
    elsewhere, here = new_name("elsewhere"), new_name("here")
    Held(cluster, elsewhere).kill()
    Held(cluster, here).kill()
    ioctx = clean_pool.ioctx
    fields = dict(leftovers.marks(ioctx)[elsewhere].fields, host="another-host")
    write_mark(ioctx, elsewhere, json.dumps(fields))
    # Both watches gone: with `here`'s still there, the sweep would cut it (a fence too, refused
    # alike) before librbd is asked for the lock.
    wait_for(
        lambda: not clean_pool.watchers(elsewhere) and not clean_pool.watchers(here),
        60,
        "the killed writers' watches expired",
    )
    # Both are left: exit status 1.
    result = sweep(glance_conf, "--remove", "--presume-gone-after", "1", status=1)
    assert result["left"] == 2
    outcomes = {u["image"]: u["outcome"] for u in result["gone"]}
    # Each image is handled, and each says the cap it misses: fencing the writer presumed gone,
    # and breaking the exclusive lock of the dead one (librbd blocklists its owner).
    assert (
        outcomes[elsewhere].startswith("left: fencing its writer's client")
        and "profile rbd" in outcomes[elsewhere]
    ), outcomes
    assert (
        outcomes[here].startswith("left: librbd could not take its exclusive lock")
        and "profile rbd" in outcomes[here]
    ), outcomes
    assert {elsewhere, here} <= clean_pool.names()
    remove_when_free(clean_pool, (elsewhere, here))


def test_options_go_before_or_after_the_command(conf_file):
    for argv in (
        ["--config-file", str(conf_file), "status"],
        ["status", "--config-file", str(conf_file)],
        ["sweep", "--config-file", str(conf_file), "--backend", "glance_store"],
        ["--backend", "glance_store", "sweep", "--config-file", str(conf_file)],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "glance_rbd_native", *argv],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (argv, done.stderr)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "glance_rbd_native",
            "sweep",
            "IMAGE",
            "--config-file",
            str(conf_file),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "--include-unmarked --remove" in done.stderr


def test_the_command_is_installed_with_the_package():
    """The console script of the wheel, and `python -m glance_rbd_native`."""
    script = os.path.join(os.path.dirname(sys.executable), "glance-rbd-native")
    for argv in (
        [script, "--help"],
        [sys.executable, "-m", "glance_rbd_native", "sweep", "--help"],
    ):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "sweep" in done.stdout

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

import pytest
import rados
import rbd

import glance_rbd_native
from glance_rbd_native import leftovers
from glance_rbd_native._native import RbdWriter
from tests.harness.data import MiB, data_of, expected_result, new_name
from tests.harness.stores import SNAP, make_store

pytestmark = pytest.mark.cluster

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Held:
    """A held upload in a child process (tests/harness/held_upload.py)."""

    def __init__(self, cluster, image, driver="native", conf=None, user="admin"):
        self.image = image
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.harness.held_upload", "--conf",
             str(conf or cluster.conf_path), "--pool", cluster.pool, "--image", image,
             "--driver", driver, "--user", user],
            cwd=CHECKOUT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.strip() == "held", f"the upload did not get to the middle: {line!r}"

    @property
    def pid(self):
        return self.proc.pid

    def kill(self):
        self.proc.kill()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()
        self.proc.stdin.close()

    def finish(self):
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        out, _ = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0 and out.strip() == "stored", out


@pytest.fixture
def conf_file(cluster, tmp_path):
    """A glance-api.conf with one rbd store, [glance_store], as admin."""
    path = tmp_path / "glance-api.conf"
    path.write_text(f"""[glance_store]
stores = rbd
default_store = rbd
rbd_store_pool = {cluster.pool}
rbd_store_user = admin
rbd_store_ceph_conf = {cluster.conf_path}
""")
    return path


def cli(conf_file, *args, check=True):
    """`python -m glance_rbd_native --config-file CONF ARGS...`: (exit status, stdout, stderr)."""
    done = subprocess.run([sys.executable, "-m", "glance_rbd_native", "--config-file",
                           str(conf_file), *args], capture_output=True, text=True, timeout=120)
    if check:
        assert done.returncode == 0, done.stderr
    return done.returncode, done.stdout, done.stderr


def status(conf_file):
    _, out, _ = cli(conf_file, "status", "--format", "json")
    return {u["image"]: u for u in json.loads(out)[0]["uploads"]}


def sweep(conf_file, *args):
    _, out, _ = cli(conf_file, "sweep", "--format", "json", *args)
    return json.loads(out)[0]


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout} s: {what}")


# -- the mark --------------------------------------------------------------------------------

def test_an_upload_is_marked_from_its_first_byte_until_its_snapshot(cluster, clean_pool):
    name = new_name("marked")
    client, ioctx = clean_pool.client, clean_pool.ioctx
    writer = RbdWriter(cluster.pool, name, 0, conffile=str(cluster.conf_path),
                       user="admin", snapshot=SNAP)
    mark = leftovers.marks(ioctx)[name]
    assert mark["pid"] == os.getpid() and mark["bytes"] == 0 and mark["size"] == 0
    assert abs(mark["started"] - time.time()) < 30
    assert leftovers.inspect(client, ioctx, name, mark).state == "alive"
    writer.write(data_of(MiB))
    writer.finish()
    assert name not in leftovers.marks(ioctx)
    clean_pool.remove(name)

    aborted = new_name("aborted")
    writer = RbdWriter(cluster.pool, aborted, 4 * MiB, conffile=str(cluster.conf_path),
                       user="admin", snapshot=SNAP)
    assert aborted in leftovers.marks(ioctx)
    writer.write(data_of(MiB))
    writer.abort()
    assert aborted not in leftovers.marks(ioctx)


def test_the_mark_carries_the_bytes_stored(cluster, clean_pool):
    """Refreshed every 5 s at most, from the writes that completed."""
    name = new_name("refreshed")
    ioctx = clean_pool.ioctx
    writer = RbdWriter(cluster.pool, name, 0, conffile=str(cluster.conf_path),
                       user="admin", snapshot=SNAP)
    try:
        for _ in range(4):
            writer.write(data_of(MiB))
        time.sleep(5.5)
        writer.write(data_of(MiB))
        mark = leftovers.marks(ioctx)[name]
        assert 4 * MiB <= mark["bytes"] <= 5 * MiB
        assert mark["updated"] > mark["started"] + 5
    finally:
        writer.abort()


# -- a killed upload -------------------------------------------------------------------------

def test_a_killed_upload_is_listed_swept_and_stored_again(cluster, clean_pool, conf_file,
                                                         caplog):
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
        result = make_store(cluster, chunk_mib=1).add(name, io.BytesIO(data), len(data),
                                                      "sha512")
    stored_after = time.monotonic() - killed
    assert result[1:4] == expected_result(data)
    assert clean_pool.read(name) == data
    warning = [r.getMessage() for r in caplog.records if "left over" in r.getMessage()]
    assert warning and f"pid {held.pid} on" in warning[0], caplog.text
    ioctx = clean_pool.ioctx
    assert name not in leftovers.marks(ioctx)
    print(f"\nkilled upload: listed by sweep {listed_after:.1f} s after the kill, "
          f"stored again {stored_after:.1f} s after it")
    clean_pool.remove(name)


def test_without_its_process_in_view_the_watch_decides(cluster, clean_pool, conf_file):
    """A writer on another host: gone only once its watch has expired."""
    name = new_name("elsewhere")
    held = Held(cluster, name)
    held.kill()
    ioctx = clean_pool.ioctx
    mark = leftovers.marks(ioctx)[name]
    mark["host"] = "another-host"
    with rados.WriteOpCtx() as op:
        ioctx.set_omap(op, (name,), (json.dumps(mark).encode(),))
        ioctx.operate_write_op(op, leftovers.INDEX)
    killed = time.monotonic()
    assert sweep(conf_file)["gone"] == [], "listed while its watch is still there"
    assert status(conf_file)[name]["state"] == "alive"
    wait_for(lambda: sweep(conf_file)["gone"], 60, "the watch expired")
    print(f"\nanother host's leftover: listed {time.monotonic() - killed:.1f} s after the kill")
    removed = sweep(conf_file, "--remove")
    assert [u["outcome"] for u in removed["gone"]] == ["removed"]
    assert name not in clean_pool.names()


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
    stock_left = new_name("stock")
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
        wait_for(lambda: stock_left in {u["image"] for u in sweep(
            conf_file, "--include-unmarked", "--older-than", "1")["unmarked"]},
            60, "stock's leftover without a watcher")
        unmarked = {u["image"] for u in sweep(conf_file, "--include-unmarked", "--older-than",
                                              "1")["unmarked"]}
        assert stock_left in unmarked and foreign in unmarked
        assert not unmarked & {finished, parent, clone, live.image}
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


def test_two_sweeps_at_once_remove_the_leftover_once(cluster, clean_pool, conf_file):
    name = new_name("twice")
    Held(cluster, name).kill()
    runs = [subprocess.Popen([sys.executable, "-m", "glance_rbd_native", "--config-file",
                              str(conf_file), "sweep", "--remove", "--format", "json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    results = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], results
    outcomes = sorted(u.get("outcome") for out, _ in results
                      for u in json.loads(out)[0]["gone"])
    assert "removed" in outcomes and set(outcomes) <= {"removed", "already removed",
                                                       "left: its mark changed since it was judged"}
    assert name not in clean_pool.names()
    ioctx = clean_pool.ioctx
    assert name not in leftovers.marks(ioctx)


# -- glance's documented user, and what the command refuses ---------------------------------

def test_glance_documented_user_marks_lists_and_sweeps(cluster, clean_pool, tmp_path):
    """`mon 'profile rbd'`, `osd 'profile rbd pool=images'`, `mgr 'profile rbd pool=images'`:
    the mark, the status, the removal (and the blocklisting of a dead writer's client)."""
    conf = cluster.user("glance", mon="profile rbd", osd=f"profile rbd pool={cluster.pool}",
                        mgr=f"profile rbd pool={cluster.pool}")
    glance_conf = tmp_path / "glance-api.conf"
    glance_conf.write_text(f"""[glance_store]
stores = rbd
default_store = rbd
rbd_store_pool = {cluster.pool}
rbd_store_user = glance
rbd_store_ceph_conf = {conf}
""")
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
    denied.write_text(conf_file.read_text().replace("rbd_store_user = admin",
                                                    "rbd_store_user = elsewhere").replace(
        f"rbd_store_ceph_conf = {cluster.conf_path}", f"rbd_store_ceph_conf = {other}"))
    code, _, err = cli(denied, "status", check=False)
    assert code == 1 and "refused client.elsewhere" in err and "profile rbd" in err, err

    unreachable = tmp_path / "unreachable.conf"
    ceph_conf = tmp_path / "ceph.conf"
    ceph_conf.write_text(cluster.conf_path.read_text().replace(
        f"mon host = v2:127.0.0.1:{cluster.port}", "mon host = v2:127.0.0.1:9"))
    unreachable.write_text(conf_file.read_text().replace(
        f"rbd_store_ceph_conf = {cluster.conf_path}",
        f"rbd_store_ceph_conf = {ceph_conf}\nrados_connect_timeout = 3"))
    code, _, err = cli(unreachable, "status", check=False)
    assert code == 1 and "cannot connect" in err, err


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
    ioctx = images.ioctx
    for image in names:
        leftovers.unmark(ioctx, image)


def test_the_command_is_installed_with_the_package():
    """The console script of the wheel, and `python -m glance_rbd_native`."""
    script = os.path.join(os.path.dirname(sys.executable), "glance-rbd-native")
    for argv in ([script, "--help"], [sys.executable, "-m", "glance_rbd_native", "sweep",
                                      "--help"]):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "sweep" in done.stdout

"""`glance-rbd-native check`'s round trip on the cluster (python/glance_rbd_native/round_trip.py):
`--size` MiB through the stock and the native `Store.add` and `get` of glance's configured
Store, each checked against the source; a driver that stores or reads back other bytes is a
Failure naming it; a check killed after either add leaves only what `sweep --remove` reclaims."""

import json
import re
import signal
import subprocess
import sys

import pytest
from oslo_upgradecheck.upgradecheck import Code

from glance_rbd_native import backends, check, patching
from glance_rbd_native.leftovers import index
from tests.harness import command

pytestmark = pytest.mark.cluster

ROW = "Backend glance_store: round trip"
# Runs the command with the round trip's calls wrapped: SIGKILL right after the one named.
KILLED_AFTER = """
import os, signal, sys
from glance_rbd_native import cli, round_trip
after = sys.argv[1]
timed = round_trip.RoundTrip._timed
def killed(self, what, call):
    done = timed(self, what, call)
    if what == after:
        os.kill(os.getpid(), signal.SIGKILL)
    return done
round_trip.RoundTrip._timed = killed
sys.exit(cli.main(sys.argv[2:]))
"""


def probe_marks(ioctx):
    return sorted(name for name, mark in index.read(ioctx).items() if mark.get("probe"))


def test_the_size_given_goes_through_both_drivers_and_comes_back_the_same(
    cluster, clean_pool, well_set
):
    done = command.run(well_set, "check", "--json", "--size", "24", check=False)
    (row,) = [r for r in json.loads(done.stdout)["checks"] if r["check"] == ROW]
    assert row["result"] == Code.SUCCESS, row
    assert re.fullmatch(
        r"24 MiB as client\.admin in pool 'images': stock add [\d.]+ s, get [\d.]+ s; native add "
        r"[\d.]+ s \([\d.]+x stock's speed\), get [\d.]+ s \([\d.]+x\); both stored and read "
        r"back the source's size, md5 and sha512",
        row["details"],
    ), row["details"]
    assert probe_marks(clean_pool.ioctx) == []


@pytest.mark.parametrize("size", ["0", "-3", "1.5", "lots"])
def test_a_size_that_is_not_whole_mebibytes_is_a_usage_error(well_set, size):
    done = command.run(well_set, "check", "--size", size, status=2)
    assert f"not a whole number of MiB, 1 or more: {size!r}" in done.stderr


@pytest.mark.parametrize("driver", ["stock", "native"])
def test_a_driver_that_reads_back_other_bytes_is_a_failure_naming_it(
    cluster, clean_pool, well_set, monkeypatch, driver
):
    """The comparison is real: one byte changed in what one driver's get gives is found."""
    methods = patching.methods

    def altered(native):
        found = methods(native)
        if native == (driver == "native"):
            get = found["get"]

            def get_altered(store, location, *args, **kwargs):
                chunks, size = get(store, location, *args, **kwargs)
                whole = b"".join(chunks)
                return iter([bytes([whole[0] ^ 1]) + whole[1:]]), size

            found["get"] = get_altered
        return found

    monkeypatch.setattr(patching, "methods", altered)
    glance_conf, found = backends.read([str(well_set)], None, bound=check.CONNECT_TIMEOUT)
    checks = check.Checks(glance_conf, found, size_mib=4)
    try:
        result = checks.round_trip(found[0])
    finally:
        checks.close()
    assert result.code == Code.FAILURE
    assert re.fullmatch(
        rf"4 MiB as client\.admin: {driver} get: 4194304 bytes of md5 [0-9a-f]{{32}} and sha512 "
        r"[0-9a-f]{16}\.\.\., where the source is 4194304 bytes of md5 [0-9a-f]{32} and sha512 "
        r"[0-9a-f]{16}\.\.\.",
        result.details,
    ), result.details
    assert probe_marks(clean_pool.ioctx) == []


@pytest.mark.parametrize("after", ["stock add", "native add"])
def test_a_check_killed_after_an_add_leaves_what_sweep_remove_reclaims(
    cluster, clean_pool, well_set, after
):
    before = clean_pool.names()
    argv = ["check", "--size", "8", "--config-file", str(well_set)]
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER, after, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=command.CHECKOUT,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (image,) = clean_pool.names() - before
    assert probe_marks(clean_pool.ioctx) == [image]
    command.run(well_set, "sweep", "--remove")
    assert clean_pool.names() == before
    assert probe_marks(clean_pool.ioctx) == []

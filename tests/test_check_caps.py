"""`glance-rbd-native check`'s caps row on the cluster (python/glance_rbd_native/probes.py): what
glance's cephx user does in its pool, done by the check on an image of its own, each user its
own glance-api.conf. A cap missing is named with the `ceph auth caps` line that grants it, the
manager's as a Warning; --no-write writes nothing; a check killed at any step leaves only what
`sweep --remove` reclaims, and one interrupted removes what it made itself."""

import json
import signal
import subprocess
import sys

import pytest
import rados
from oslo_upgradecheck.upgradecheck import Code

from glance_rbd_native.leftovers import deletes, index
from tests.harness import command
from tests.harness.cephx import Case, glance_caps, make_user
from tests.harness.stores import glance_api_conf
from tests.harness.trash import probes_left

pytestmark = pytest.mark.cluster

CAPS = "mon 'profile rbd' osd 'profile rbd pool={pool}' mgr 'profile rbd pool={pool}'"
STEPS = [
    "mark the upload",
    "create",
    "write",
    "snapshot",
    "protect",
    "unprotect",
    "remove the snapshot",
    "mark the delete",
    "move to the trash",
]
USERS = {
    "good": glance_caps,
    "read-only": lambda pool: {**glance_caps(pool), "osd": f"profile rbd-read-only pool={pool}"},
    "no-mgr-cap": lambda pool: {k: v for k, v in glance_caps(pool).items() if k != "mgr"},
}
# Runs the command with the probe's steps wrapped: the signal given is sent to the process
# itself right after the step named has been done.
SIGNALLED_AFTER = """
import os, signal, sys
from glance_rbd_native import cli, probes
after, signum, within = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "within"
# Python leaves SIGINT ignored where its parent did (a background job).
signal.signal(signal.SIGINT, signal.default_int_handler)
step = probes.Probe._step
def signalled(self, probed, name, call):
    if name == after and within:
        # As librbd's call returns, before the probe has taken note of it.
        step(self, probed, name, lambda: (call(), os.kill(os.getpid(), signum)))
        return
    step(self, probed, name, call)
    if name == after:
        os.kill(os.getpid(), signum)
probes.Probe._step = signalled
sys.exit(cli.main(sys.argv[4:]))
"""


@pytest.fixture(scope="module")
def confs(cluster, tmp_path_factory):
    """{user: glance-api.conf} for each of USERS, as `check-<user>`."""
    root = tmp_path_factory.mktemp("caps")
    made = {}
    for name, caps in USERS.items():
        user = make_user(cluster, Case(name, caps), "check")
        made[name] = glance_api_conf(
            root / f"{name}.conf", cluster.pool, user.id, user.conf, "rados_connect_timeout = 10\n"
        )
    return made


def caps_row(conf_file, *args, status):
    """The caps row of `check`, which must exit with `status` (`command.check_report`)."""
    report = command.check_report(conf_file, *args, status=status)
    (row,) = [r for r in report["checks"] if r["check"].endswith(": caps")]
    return row["result"], row["details"]


def grant(cluster, user):
    return f"`ceph auth caps client.check-{user} {CAPS.format(pool=cluster.pool)}`"


def pool_contents(ioctx):
    """Every object of the pool, and the omap of the marks' index objects."""
    objects = sorted(o.key for o in ioctx.list_objects())
    marks = {}
    for obj in (index.INDEX, deletes.DELETES):
        with rados.ReadOpCtx() as op:
            values, _ = ioctx.get_omap_vals(op, "", "", 1000)
            try:
                ioctx.operate_read_op(op, obj)
                marks[obj] = dict(values)
            except rados.ObjectNotFound:
                marks[obj] = None
    return objects, marks


def test_glances_caps_do_all_and_the_manager_removes_the_probe(cluster, clean_pool, confs, manager):
    result, details = caps_row(confs["good"], status=0)
    assert result == Code.SUCCESS, details
    assert details.startswith(
        f"client.check-good did in pool {cluster.pool!r} what uploads and deletes do: "
        f"{', '.join(STEPS)}, the manager's removal ("
    ), details
    assert probes_left(clean_pool.ioctx) == []


def test_a_read_only_osd_cap_is_a_failure_naming_the_caps_to_grant(cluster, clean_pool, confs):
    result, details = caps_row(confs["read-only"], status=2)
    assert result == Code.FAILURE
    assert details.startswith(
        f"mark the upload in pool {cluster.pool!r} failed for client.check-read-only ("
    ), details
    assert "client.check-read-only's osd cap on the pool does not allow it" in details
    assert f"grant glance's caps with {grant(cluster, 'read-only')}" in details
    assert details.endswith("done before it: nothing")
    assert probes_left(clean_pool.ioctx) == []


def test_no_mgr_cap_is_a_warning_and_the_probe_removes_its_data_itself(
    cluster, clean_pool, confs, manager
):
    result, details = caps_row(confs["no-mgr-cap"], status=1)
    assert result == Code.WARNING
    assert f"{', '.join(STEPS)}, remove (" in details
    assert "the Ceph manager refused `rbd task add trash remove` (access denied" in details
    assert details.endswith(
        "glance-api's deletes then remove their data in its own process (the manager would "
        f"with mgr 'profile rbd' on the pool: {grant(cluster, 'no-mgr-cap')})"
    ), details
    assert probes_left(clean_pool.ioctx) == []


@pytest.mark.parametrize("user", ["read-only", "no-mgr-cap"])
def test_no_write_writes_nothing_and_asks_the_manager_alone(
    cluster, clean_pool, confs, manager, user
):
    before = pool_contents(clean_pool.ioctx)
    done = command.run(confs[user], "check", "--json", "--no-write", check=False)
    assert pool_contents(clean_pool.ioctx) == before
    checks = {r["check"]: r for r in json.loads(done.stdout)["checks"]}
    assert checks["Backend glance_store: round trip"]["details"] == "not run (--no-write)"
    row = checks["Backend glance_store: caps"]
    if user == "read-only":
        assert row["result"] == Code.SUCCESS
        assert row["details"] == (
            "the Ceph manager answers client.check-read-only's `rbd task list`; nothing else "
            "probed (--no-write)"
        )
    else:
        assert row["result"] == Code.WARNING
        assert row["details"].startswith("the Ceph manager refused `rbd task list`")


def signalled_after(conf_file, step, signum, within=False):
    argv = ["check", "--json", "--config-file", str(conf_file)]
    where = "within" if within else "after"
    return subprocess.run(
        [sys.executable, "-c", SIGNALLED_AFTER, step, str(signum), where, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=command.CHECKOUT,
    )


KILLED_AFTER = ["mark the upload", "create", "snapshot", "protect", "mark the delete"]


@pytest.mark.parametrize("step", [*KILLED_AFTER, "move to the trash"])
def test_a_check_killed_after_any_step_leaves_what_sweep_remove_reclaims(
    cluster, clean_pool, confs, step
):
    killed = signalled_after(confs["good"], step, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert probes_left(clean_pool.ioctx), "the kill came after the probe was done"
    command.run(confs["good"], "sweep", "--remove")
    assert probes_left(clean_pool.ioctx) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize(
    "step, within",
    [
        ("write", False),
        ("protect", False),
        ("move to the trash", False),
        ("move to the trash", True),
    ],
    ids=["after write", "after protect", "after the move", "as the move returns"],
)
def test_a_check_interrupted_removes_what_it_made(cluster, clean_pool, confs, step, within, signum):
    interrupted = signalled_after(confs["good"], step, signum, within)
    assert interrupted.returncode == 128 + signum, interrupted.stderr
    assert interrupted.stderr.strip() == (
        f"glance-rbd-native check: interrupted by {signal.Signals(signum).name}; what its "
        "probes made was removed"
    )
    assert probes_left(clean_pool.ioctx) == []

"""`glance-rbd-native check`'s row of the glance-api processes on this host
(python/glance_rbd_native/processes.py), against real servers: uWSGI with the switch on and off,
gunicorn, one in a pid namespace of its own as kolla's container runs it, and one whose native
module was replaced under it, as an upgrade does."""

import json
import os
import pathlib
import re
import shutil

import pytest
from oslo_upgradecheck.upgradecheck import Code

from glance_rbd_native import _native
from tests.harness import command
from tests.harness.waiting import wait_for

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:'cgi' is deprecated:DeprecationWarning"),
]

INSTALLED = pathlib.Path(_native.__file__)
NATIVE = "native module loaded from {path}, not replaced since"


def processes_row(conf_file):
    """(result, {pid: what the row says of it}) of `check --no-write`."""
    done = command.run(conf_file, "check", "--json", "--no-write", check=False)
    (row,) = [r for r in json.loads(done.stdout)["checks"] if r["check"] == "glance-api processes"]
    said = {}
    for part in row["details"].split(": ", 1)[1].split("; "):
        head, state = part.split(": ", 1)
        said[int(re.match(r"pid (\d+)", head)[1])] = (head, state)
    return row["result"], said


def loaded(pid):
    """Whether process `pid` has the native module mapped."""
    try:
        return "glance_rbd_native/_native." in pathlib.Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def workers_loaded(master):
    """Waits until every worker of `master` has loaded the app, and the native module: uWSGI
    answers once one has. Returns them."""
    wait_for(
        lambda: len(children(master)) == 2 and all(map(loaded, children(master))),
        60,
        f"the two workers of pid {master} with the native module loaded",
    )
    return children(master)


def children(pid):
    """The pids of the children of process `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return sorted(found)


@pytest.fixture(scope="module")
def servers(new_glance_api, glance_servers, tmp_path_factory):
    """The session's native and stock uWSGI servers; native ones under gunicorn and in a pid
    namespace of their own; and one importing the package from a copy of its own."""
    copy = tmp_path_factory.mktemp("copy")
    shutil.copytree(INSTALLED.parent, copy / "glance_rbd_native")
    started = {
        "uwsgi": glance_servers("native"),
        "stock": glance_servers("stock"),
        "gunicorn": new_glance_api("check-gunicorn", native=True, server="gunicorn").start(),
        "contained": new_glance_api("check-contained", native=True, pid_namespace=True).start(),
        "copy": new_glance_api(
            "check-copy", native=True, environment={"PYTHONPATH": str(copy)}
        ).start(),
    }
    for name in ("uwsgi", "gunicorn", "copy"):
        workers_loaded(started[name].pid)
    workers_loaded(children(started["contained"].pid)[0])
    yield started
    for name in ("gunicorn", "contained", "copy"):
        started[name].stop()


@pytest.fixture(scope="module")
def copied(servers):
    """The copy of the native module the "copy" server loaded."""
    environment = servers["copy"].environment
    return pathlib.Path(environment["PYTHONPATH"]) / "glance_rbd_native" / INSTALLED.name


def test_each_glance_api_process_and_whether_it_runs_the_native_module(conf_file, servers):
    # The row's result is the host's: other servers may be starting meanwhile.
    _, said = processes_row(conf_file)
    for name in ("uwsgi", "gunicorn", "stock"):
        master = servers[name].pid
        workers = children(master)
        assert len(workers) == 2, (name, workers)
        server = "uwsgi" if name != "gunicorn" else "gunicorn"
        assert said[master] == (
            f"pid {master} {server}, master of {', '.join(map(str, workers))}",
            "no native module (its workers load the app)",
        )
        for worker in workers:
            state = (
                "no native module: the stock driver"
                if name == "stock"
                else NATIVE.format(path=INSTALLED)
            )
            assert said[worker] == (f"pid {worker} {server}", state), name
    # kolla's shape: unshare (the container's first process) starts uWSGI as its pid 1.
    (master,) = children(servers["contained"].pid)
    for worker in children(master):
        head, state = said[worker]
        assert re.fullmatch(rf"pid {worker} \(pid \d+ in its pid namespace\) uwsgi", head)
        assert state == NATIVE.format(path=INSTALLED)


def test_a_module_replaced_under_a_running_glance_api_is_a_warning_to_restart_it(
    conf_file, servers, copied
):
    api = servers["copy"]
    workers = children(api.pid)
    result, said = processes_row(conf_file)
    assert [said[w][1] for w in workers] == [NATIVE.format(path=copied)] * 2
    # As pip upgrades it: a new file renamed over the old one, which the workers keep mapped.
    shutil.copy2(copied, copied.with_suffix(".new"))
    os.replace(copied.with_suffix(".new"), copied)
    result, said = processes_row(conf_file)
    assert result == Code.WARNING
    for worker in workers:
        assert said[worker][1] == (
            f"runs the native module it loaded from {copied}, deleted since it was "
            "loaded: restart it to run the one installed"
        )
    assert said[servers["uwsgi"].pid][1] == "no native module (its workers load the app)"
    api.stop()
    api.start()
    restarted = workers_loaded(api.pid)
    result, said = processes_row(conf_file)
    assert [said[w][1] for w in restarted] == [NATIVE.format(path=copied)] * 2

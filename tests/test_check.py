"""`glance-rbd-native check` on the cluster, run as operators run it (tests/harness/command.py),
each configuration its own glance-api.conf: oslo.upgradecheck's table and JSON, its exit codes,
a row for glance_store, one for the native module and the libraries it loaded, one for each rbd
backend. The rows' failures that need no cluster are checked in-process."""

import re
import subprocess
import sys
import time

import pytest
from oslo_upgradecheck.upgradecheck import Code

import glance_rbd_native
from glance_rbd_native import check, compat, processes
from tests.harness import command
from tests.harness.cluster import free_port
from tests.harness.data import new_name
from tests.harness.held_upload import Held
from tests.harness.stores import glance_api_conf

pytestmark = pytest.mark.cluster

LIBRBD = r"librbd 1\.(\d+)\.\d+ \(Ceph (\d+)\), librados \d+\.\d+\.\d+, OpenSSL 3\."


def rows(report):
    return {row["check"]: (row["result"], row["details"]) for row in report["checks"]}


def swept(conf_file):
    """The pool without what processes of earlier tests left (a delete's purge cut short by its
    process's exit), which the leftovers row would rightly warn of."""
    command.run(conf_file, "sweep", "--remove")


def test_all_well_is_success_in_oslo_upgradechecks_form(cluster, clean_pool, well_set, manager):
    swept(well_set)
    report = command.check_report(well_set, status=0)
    assert report["name"] == "glance-rbd-native check"
    assert [row["check"] for row in report["checks"]] == [
        "glance_store",
        "Native module",
        "glance-api processes",
        "max_in_flight_mib",
        "Backend glance_store",
        "Backend glance_store: rados_connect_timeout",
        "Backend glance_store: caps",
        "Backend glance_store: round trip",
        "Backend glance_store: leftovers",
    ]
    found = rows(report)
    found.pop("glance-api processes")  # the host's (checked)
    assert {result for result, _ in found.values()} == {Code.SUCCESS}, found
    version = compat.glance_store_version()
    assert found["glance_store"][1].startswith(
        f"glance_store {version}: patch() takes over add, get, get_size and delete"
    )
    librbd = re.search(LIBRBD, found["Native module"][1])
    assert librbd and librbd[1] == librbd[2] and int(librbd[2]) >= 16, found["Native module"]
    assert "loaded from /" in found["Native module"][1]
    assert found["Backend glance_store"][1].startswith(
        f"client.admin reached cluster {cluster.fsid} in "
    )
    assert f"pool {cluster.pool!r} is there" in found["Backend glance_store"][1]
    assert found["Backend glance_store: rados_connect_timeout"][1].startswith("30 s: ")
    assert found["max_in_flight_mib"][1].startswith("64 MiB per glance-api process, ")


def test_no_rados_connect_timeout_is_a_warning_that_says_what_to_set(cluster, conf_file):
    report = command.check_report(conf_file, "--no-write", status=1)
    result, details = rows(report)["Backend glance_store: rados_connect_timeout"]
    assert result == Code.WARNING
    assert details.startswith("unset: a monitor or OSD that stops answering")
    assert details.endswith("set rados_connect_timeout in [glance_store], e.g. to 30")


def test_a_partial_image_of_a_writer_that_is_gone_is_a_warning_with_the_command(
    cluster, clean_pool, well_set, manager
):
    """An upload killed mid-way (tests/harness/held_upload.py): the leftovers row says how many,
    and which command removes them; once swept, all is well again."""
    swept(well_set)
    held = Held(cluster, new_name("check-killed"))
    held.kill()
    leftovers = "Backend glance_store: leftovers"
    result, details = rows(command.check_report(well_set, "--no-write", status=1))[leftovers]
    assert result == Code.WARNING
    assert details.startswith(f"pool {cluster.pool!r}: 1 partial images of writers that are gone")
    assert "`sweep --remove` removes them" in details
    command.run(well_set, "sweep", "--remove")
    found = rows(command.check_report(well_set, "--no-write", status=0))
    assert found[leftovers][0] == Code.SUCCESS


def test_the_table_and_the_options_on_either_side(cluster, clean_pool, well_set, manager):
    """Without --json, oslo.upgradecheck's table; --config-file before the command too."""
    swept(well_set)
    done = command.run(well_set, "check", check=False)  # --config-file after the command
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert "| glance-rbd-native check" in done.stdout
    assert "| Check: Backend glance_store" in done.stdout
    assert done.stdout.count("| Check: ") == 9
    assert done.stdout.count("| Result: Success") >= 8  # the processes row is the host's
    argv = ["--config-file", str(well_set), "check", "--no-write"]
    before = subprocess.run(
        [sys.executable, "-m", "glance_rbd_native", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=command.CHECKOUT,
    )
    assert before.returncode in (0, 1), before.stderr
    assert "| Check: Backend glance_store" in before.stdout
    assert before.stdout.count("| Check: ") == 9


@pytest.mark.parametrize("mib", ["8", "memory"])
def test_an_in_flight_bound_that_hurts_is_a_warning_that_says_why(cluster, tmp_path, mib):
    """Fewer than two chunks (each upload loses its overlap), or more than half the host's
    memory for its glance-api processes."""
    memory = check._memory_mib()
    bound = 8 if mib == "8" else 2 * memory
    conf = glance_api_conf(
        tmp_path / "glance-api.conf",
        cluster.pool,
        "admin",
        cluster.conf_path,
        f"rados_connect_timeout = 30\n[glance_rbd_native]\nmax_in_flight_mib = {bound}\n",
    )
    result, details = rows(command.check_report(conf, "--no-write", status=1))["max_in_flight_mib"]
    assert result == Code.WARNING
    assert details.startswith(f"{bound} MiB per glance-api process, ")
    assert f"of this host's {memory} MiB; chunks of 8 MiB; " in details
    if mib == "8":
        assert details.endswith(
            "it holds fewer than two 8 MiB chunks: an upload then has one write in flight at a "
            "time, and loses the native writer's overlap (the default, 64, keeps it)"
        )
    else:
        assert details.endswith(
            "the transfers of its processes may hold more than half this host's memory: lower "
            "max_in_flight_mib, or the workers"
        )


def test_a_missing_pool_is_a_failure_that_names_it(cluster, tmp_path):
    conf = glance_api_conf(tmp_path / "glance-api.conf", "no-such-pool", "admin", cluster.conf_path)
    result, details = rows(command.check_report(conf, status=2))["Backend glance_store"]
    assert result == Code.FAILURE
    assert details.startswith(f"pool 'no-such-pool' does not exist in cluster {cluster.fsid}")


@pytest.mark.parametrize("timeout", [5, None], ids=["glance's timeout", "none set"])
def test_monitors_that_do_not_answer_fail_within_the_timeout(cluster, tmp_path, timeout):
    """A Ceph configuration whose monitor address nothing listens on: a Failure within glance's
    rados_connect_timeout, or within the check's own where glance sets none (librados' own
    would be 300 s)."""
    ceph_conf = tmp_path / "ceph.conf"
    monitor = f"127.0.0.1:{cluster.port}"
    ceph_conf.write_text(cluster.conf_path.read_text().replace(monitor, f"127.0.0.1:{free_port()}"))
    extra = "" if timeout is None else f"rados_connect_timeout = {timeout}\n"
    conf = glance_api_conf(tmp_path / "glance-api.conf", cluster.pool, "admin", ceph_conf, extra)
    started = time.monotonic()
    result, details = rows(command.check_report(conf, status=2))["Backend glance_store"]
    took = time.monotonic() - started
    assert result == Code.FAILURE and "cannot connect" in details, details
    assert took < (timeout or check.CONNECT_TIMEOUT) + 15, took


def test_glance_store_outside_the_supported_range_is_a_failure(monkeypatch):
    monkeypatch.setattr(compat, "glance_store_version", lambda: "3.0.0")
    result = check.Checks(None, []).glance_store()
    assert result.code == Code.FAILURE
    assert result.details.startswith(
        "glance_store 3.0.0 is not supported (supported: 4.1.0 to 5.x)"
    )


def test_a_native_module_that_cannot_load_is_a_failure_with_its_reason(monkeypatch):
    """The ImportError's message is the row's details: on a host without librbd, the package to
    install (test_host_libraries.py)."""
    monkeypatch.setitem(sys.modules, "glance_rbd_native._native", None)
    # Once imported, the module is also the package's attribute, which `from ... import` finds.
    monkeypatch.delattr(glance_rbd_native, "_native", raising=False)
    result = check.Checks(None, []).native_module()
    assert result.code == Code.FAILURE
    assert "glance_rbd_native._native" in result.details


def test_a_check_that_raises_exits_255_with_the_error(monkeypatch, capsys):
    def broken(self):
        raise RuntimeError("a check that raised")

    monkeypatch.setattr(check.Checks, "glance_store", broken)
    assert check.run(check.Checks(None, []), as_json=False) == 255
    assert "a check that raised" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, server",
    [
        (["/usr/bin/uwsgi", "--ini", "/etc/glance/glance-api-uwsgi.ini"], "uwsgi"),
        (["/var/lib/kolla/venv/bin/glance-api"], "glance-api"),
        (
            ["/usr/bin/python3", "/usr/bin/glance-api", "--config-file", "/etc/glance/g.conf"],
            "glance-api",
        ),
        (["gunicorn: worker [glance.wsgi.api:application]"], "gunicorn"),
        (["uwsgi", "--wsgi-file", "/usr/bin/glance-wsgi-api"], "uwsgi"),
        (["uwsgi", "--module", "glance.common.wsgi_app:init_app()"], "uwsgi"),
        (
            ["/usr/bin/uwsgi_python311", "--ini", "/etc/glance/glance-api-uwsgi.ini"],
            "uwsgi_python311",
        ),
        (["python3", "-m", "gunicorn", "glance.wsgi.api:application"], "gunicorn"),
    ],
)
def test_glance_api_processes_are_known_by_their_command_line(argv, server):
    assert processes.is_glance_api(argv) and processes._program(argv)[0] == server


@pytest.mark.parametrize(
    "argv",
    [
        ["glance-rbd-native", "check", "--config-file", "/etc/glance/glance-api.conf"],
        ["/usr/bin/python3", "-m", "glance_rbd_native", "sweep"],
        ["tail", "-f", "/var/log/glance/glance-api.log"],
        ["vi", "/etc/glance/glance-api.conf"],
        ["glance-manage", "db", "sync"],
        ["journalctl", "-fu", "glance-api"],
        ["systemctl", "status", "glance-api"],
        ["vi", "/etc/glance/glance-api-uwsgi.ini"],
        ["grep", "-r", "glance.wsgi.api", "/etc"],
        ["uwsgi", "--ini", "/etc/nova/nova-api-uwsgi.ini"],
    ],
)
def test_other_processes_naming_glance_api_are_not_it(argv):
    assert not processes.is_glance_api(argv)

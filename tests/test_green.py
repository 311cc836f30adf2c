"""Native waits kept off eventlet's hub (glance_rbd_native.green), in an interpreter that eventlet
has monkey-patched as glance's eventlet server does: while the patched Store uploads and
downloads, a green thread that sleeps 10 ms at a time wakes on time. With every native call
made directly instead, it wakes only when the transfer is over: the measure can fail. Records
the native layer logs from eventlet's pool reach logging, from the hub's own thread."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from tests.harness.data import MiB

pytestmark = [pytest.mark.cluster, pytest.mark.alone]

CHECKOUT = pathlib.Path(__file__).resolve().parents[1]  # the child imports tests.harness

SIZE = 192 * MiB
# A green thread that ticks every 10 ms is woken this late at most, by a transfer that keeps
# its waits off the hub. Measured on a loaded 2-core machine, where the OSD, the native digest
# threads and the hub share the CPU: 5-75 ms; with the calls made on the hub, the whole
# transfer, 0.28-0.88 s.
GREEN_LATE = 0.15


@pytest.fixture(scope="module")
def measured(cluster):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GLANCE_RBD_NATIVE")}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.harness.green_transfers",
            str(cluster.conf_path),
            cluster.pool,
            str(SIZE),
        ],
        cwd=CHECKOUT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.splitlines()[-1])
    for mode in ("green", "direct"):
        for transfer, figures in result[mode].items():
            print(
                f"{mode} {transfer}: {figures['seconds']:.2f}s, "
                f"tick late by {figures['late'] * 1000:.1f} ms at most"
            )
    assert not set(result["names"]) & set(cluster.images())
    return result


@pytest.mark.parametrize("transfer", ["upload", "download"])
def test_the_hub_goes_on_during_native_waits(measured, transfer):
    assert measured["green"][transfer]["late"] < GREEN_LATE, measured["green"][transfer]


@pytest.mark.parametrize("transfer", ["upload", "download"])
def test_direct_native_waits_block_the_hub(measured, transfer):
    # What the test above would see without green.call: nothing in either loop waits on the
    # hub (the source is in memory, the chunks are only counted), so the hub waits out most of
    # the transfer.
    direct = measured["direct"][transfer]
    assert direct["late"] > 0.5 * direct["seconds"], direct
    assert direct["late"] > max(GREEN_LATE, 3 * measured["green"][transfer]["late"]), direct


def test_records_from_the_pool_reach_logging_on_the_hub(measured, cluster):
    failed = measured["failed"]
    removed = f"removed partial image '{failed['name']}' in pool '{cluster.pool}'"
    records = [r for r in failed["records"] if r["message"] == removed]
    assert records == [{"level": "INFO", "message": removed, "hub": True}], failed["records"]
    assert all(r["hub"] for r in failed["records"])

"""A process's RSS follows the in-flight bound: one 10 GiB read, and one 10 GiB upload of unknown
size, each peak at most the bound plus 64 MiB over the process's RSS before it (VmHWM against
VmRSS, in a child process of its own: benchmarks/download.py and benchmarks/upload.py, as the
benchmark measures them). glibc would keep the chunks the transfers free, fragmented: such a
read peaked at 200-330 MiB over the baseline (core/src/transfer/rss.rs).

The image read is 10 GiB of objects that exist (4 KiB written at the end of each, the rest a
hole): the OSD sends every byte, zeros included, as it would data, and it fits the test cluster.
The upload reads a sparse 10 GiB file into a thin store, whose zero chunks are not written: the
chunks still pass through the process as glance's would."""

import contextlib
import json
import os
import subprocess
import sys

import pytest
import rbd

from glance_rbd_native import DEFAULT_MAX_IN_FLIGHT
from tests.harness.command import CHECKOUT
from tests.harness.data import MiB, new_name

pytestmark = [pytest.mark.cluster, pytest.mark.load]

GiB = 1024 * MiB
SIZE = 10 * GiB
OBJECT = 8 * MiB
ALLOWED_MIB = DEFAULT_MAX_IN_FLIGHT // MiB + 64


def child(module, *args):
    """`python -m module ARGS`, native, without the switch: its JSON."""
    env = {k: v for k, v in os.environ.items() if k != "GLANCE_RBD_NATIVE"}
    done = subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=CHECKOUT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def over(result):
    return result["peak_rss_mib"] - result["baseline_rss_mib"]


def test_a_10_gib_read_peaks_within_the_bound(cluster, clean_pool):
    name = new_name("rss-read")
    clean_pool.create(name, SIZE)
    with rbd.Image(clean_pool.ioctx, name) as image:
        for offset in range(OBJECT - 4096, SIZE, OBJECT):
            image.write(b"\x01" * 4096, offset)
    clean_pool.snapshot(name)
    try:
        result = child(
            "benchmarks.download",
            "--conf", cluster.conf_path, "--pool", cluster.pool, "--image", name,
            "--driver", "native",
        )  # fmt: skip
    finally:
        clean_pool.remove(name)
    print(f"\n10 GiB read: {result['seconds']:.1f} s, peak +{over(result):.0f} MiB")
    assert result["ok"] and result["bytes"] == SIZE
    assert over(result) <= ALLOWED_MIB, f"peak +{over(result):.0f} MiB"


def test_a_10_gib_upload_of_unknown_size_peaks_within_the_bound(cluster, clean_pool, tmp_path):
    source = tmp_path / "sparse"
    with open(source, "wb") as file:
        file.truncate(SIZE)
    result = child(
        "benchmarks.upload",
        "--conf", cluster.conf_path, "--pool", cluster.pool, "--file", source,
        "--driver", "native", "--unknown-size", "--thin",
    )  # fmt: skip
    with contextlib.suppress(KeyError):
        for image in result["images"]:
            clean_pool.remove(image)
    print(f"\n10 GiB upload: {result['seconds']:.1f} s, peak +{over(result):.0f} MiB")
    assert result["ok"], result
    assert over(result) <= ALLOWED_MIB, f"peak +{over(result):.0f} MiB"

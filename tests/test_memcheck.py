"""The FFI layer and the upload and download cores under valgrind memcheck, against the real
cluster.

`make test` builds the driver program (core/examples/lifecycle.rs, plain Rust, no Python in the way)
before pytest runs. It walks every write path (finish, abort, drop unfinished, overrun, errors)
and every read path (at a snapshot and at the head, to the end, dropped mid-stream with reads in
flight, errors), and says so as it goes.
"""

import pathlib
import subprocess

import pytest

pytestmark = pytest.mark.cluster

PROGRAM = pathlib.Path(__file__).resolve().parent.parent / "target/debug/examples/lifecycle"


def test_lifecycle_has_no_memory_errors_or_leaks(cluster, clean_pool):
    assert PROGRAM.exists(), "build it first: make lifecycle (make test does)"
    run = subprocess.run(
        [
            "valgrind",
            "--tool=memcheck",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite",
            "--error-exitcode=99",
            str(PROGRAM),
            str(cluster.conf_path),
            cluster.pool,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    for paths in ("write paths", "read paths", "every path"):
        assert f"lifecycle: {paths} ran" in run.stdout, run.stderr[-3000:]
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ERROR SUMMARY: 0 errors" in run.stderr
    assert "definitely lost: 0 bytes" in run.stderr

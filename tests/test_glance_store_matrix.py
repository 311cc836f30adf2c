"""The glance_store contract tests against every release operators run, each in a virtualenv of
its own with the same wheel, on this session's cluster.

The tests named in CONTRACT compare the native driver with the stock driver of whatever
glance_store is installed; here they run once per release in harness.venvs.MATRIX.
"""

import os
import re
import subprocess

import pytest

import stock_versions
from harness import venvs

pytestmark = [pytest.mark.cluster, pytest.mark.matrix]

HERE = os.path.dirname(os.path.abspath(__file__))
CONTRACT = ["test_differential.py", "test_stock_bugs.py", "test_errors.py", "test_compat.py",
            "test_patch.py"]


@pytest.mark.parametrize("version", venvs.MATRIX)
def test_contract_on_release(cluster, version):
    if version == stock_versions.VERSION_TEXT:
        pytest.skip(f"{version} is this interpreter's glance_store: the main run covers it")
    python = venvs.release(version)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["GLANCE_RBD_TEST_CLUSTER"] = str(cluster.root)
    result = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
         # Old releases call what newer oslo libraries deprecate; that is not ours to fail on.
         "-W", "ignore::DeprecationWarning", *CONTRACT],
        cwd=HERE, env=env, capture_output=True, text=True, timeout=1200)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    print(f"glance_store {version}: {summary}")
    assert result.returncode == 0, f"glance_store {version}:\n{result.stdout[-20000:]}" \
                                   f"{result.stderr[-5000:]}"
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 100, summary

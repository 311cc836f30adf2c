"""The glance_store contract tests (harness/contract.py) against every release operators run,
each in a virtualenv of its own with the same wheel, on this session's cluster: once per release
in harness.venvs.MATRIX.
"""

import os
import subprocess

import pytest

from tests import stock_versions
from tests.harness import contract, venvs

pytestmark = [pytest.mark.cluster, pytest.mark.matrix]


@pytest.mark.parametrize("version", venvs.MATRIX)
def test_contract_on_release(cluster, version, tmp_path):
    if version == stock_versions.VERSION_TEXT:
        pytest.skip(f"{version} is this interpreter's glance_store: the main run covers it")
    python = venvs.release(version)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["GLANCE_RBD_TEST_CLUSTER"] = str(cluster.root)
    junit = tmp_path / "contract.xml"
    result = subprocess.run([str(python), *contract.pytest_args(str(junit))], cwd=venvs.ROOT,
                            env=env, capture_output=True, text=True, timeout=1200)
    xml = junit.read_text() if junit.exists() else ""
    where = f"glance_store {version}"
    print(f"{where}: {contract.check(where, version, result, xml)}")

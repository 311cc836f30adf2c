"""The glance_store contract tests (harness/contract.py) against every release operators run,
each in a virtualenv of its own with the same wheel, on this session's cluster: once per release
in harness.venvs.MATRIX.
"""

import os
import subprocess

import pytest

import stock_versions
from harness import contract, venvs

pytestmark = [pytest.mark.cluster, pytest.mark.matrix]

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("version", venvs.MATRIX)
def test_contract_on_release(cluster, version):
    if version == stock_versions.VERSION_TEXT:
        pytest.skip(f"{version} is this interpreter's glance_store: the main run covers it")
    python = venvs.release(version)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["GLANCE_RBD_TEST_CLUSTER"] = str(cluster.root)
    result = subprocess.run([str(python), *contract.PYTEST], cwd=HERE, env=env,
                            capture_output=True, text=True, timeout=1200)
    print(f"glance_store {version}: {contract.check(f'glance_store {version}', result)}")

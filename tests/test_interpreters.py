"""The one abi3 wheel on every CPython glance hosts run (3.9 on RDO EL9, 3.10 on Ubuntu 22.04,
3.12 on Ubuntu 24.04, 3.13 on Debian 13): installed by pip into a virtualenv of each interpreter
this machine has, with numpy from PyPI, it loads and uploads into the session's cluster. Only
the native module is needed there; the image is checked from this process."""

import hashlib
import json
import os
import pathlib
import subprocess

import pytest

from tests.harness import venvs
from tests.harness.data import MiB, data_of, new_name
from tests.harness.stores import SNAP

pytestmark = [pytest.mark.cluster, pytest.mark.wheel]

# Run by path by each interpreter under test, where only the wheel and numpy are installed.
PROGRAM = pathlib.Path(__file__).resolve().parent / "harness" / "wheel_upload.py"


@pytest.mark.parametrize("version", ["3.9", "3.10", "3.12", "3.13"])
def test_the_wheel_uploads_from_python(version, cluster, clean_pool, tmp_path):
    base = venvs.interpreter(version)
    if base is None:
        pytest.skip(f"no Python {version} on this machine")
    python = venvs.ensure(f"python{version}", ["numpy"], base=base)
    data = data_of(20 * MiB + 5, seed=int(version.replace(".", "")))
    source = tmp_path / "data"
    source.write_bytes(data)
    name = new_name(f"py{version}")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    out = subprocess.run(
        [str(python), str(PROGRAM), str(cluster.conf_path), cluster.pool, name, SNAP, str(source)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["python"] == version
    assert result["written"] == len(data)
    assert result["digests"] == {
        "md5": hashlib.md5(data).hexdigest(),
        "sha512": hashlib.sha512(data).hexdigest(),
    }
    assert clean_pool.read(name) == data  # at the snapshot
    clean_pool.remove(name)

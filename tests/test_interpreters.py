"""The one abi3 wheel on every CPython glance hosts run (3.9 on RDO EL9, 3.10 on Ubuntu 22.04,
3.12 on Ubuntu 24.04, 3.13 on Debian 13): installed by pip into a virtualenv of each interpreter
this machine has, with numpy from PyPI, it loads and uploads into the session's cluster. Only
the native module is needed there; the image is checked from this process."""

import hashlib
import json
import os
import subprocess

import pytest

from tests.harness import venvs
from tests.harness.data import MiB, data_of, new_name
from tests.harness.stores import SNAP

pytestmark = [pytest.mark.cluster, pytest.mark.wheel]

# Writes DATA (a file) as bytes, a bytearray and a numpy array, and prints what the writer saw.
PROBE = """
import json, sys
import numpy as np
from glance_rbd_native import RbdWriter
conf, pool, name, snapshot, path = sys.argv[1:]
data = open(path, "rb").read()
third = len(data) // 3
with RbdWriter(pool, name, len(data), conffile=conf, user="admin", snapshot=snapshot,
               digests=["md5", "sha512"]) as writer:
    writer.write(data[:third])
    writer.write(bytearray(data[third:2 * third]))
    writer.write(np.frombuffer(data[2 * third:], dtype=np.uint8))
print(json.dumps({"python": "%d.%d" % sys.version_info[:2], "numpy": np.__version__,
                  "written": writer.bytes_written, "digests": writer.hexdigests}))
"""


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
    out = subprocess.run([str(python), "-c", PROBE, str(cluster.conf_path), cluster.pool, name,
                          SNAP, str(source)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["python"] == version
    assert result["written"] == len(data)
    assert result["digests"] == {"md5": hashlib.md5(data).hexdigest(),
                                 "sha512": hashlib.sha512(data).hexdigest()}
    assert clean_pool.read(name) == data  # at the snapshot
    clean_pool.remove(name)

"""What `glance-rbd-native` answers before it reaches a cluster: no Ceph, root or network (the
unit loop). What it answers on a cluster is in test_leftovers.py."""

import pytest

from tests.harness import command


@pytest.mark.parametrize("layout", ["single store", "one of two backends"])
def test_a_ceph_conf_that_is_not_there_is_named_without_a_traceback(tmp_path, layout):
    """With backends enabled, glance_store 5 connects in configure_add, for the fsid: a missing
    rbd_store_ceph_conf failed there, in librados, with a traceback. A single store fails
    later, in the command's own connect; both read the same."""
    ceph_conf = tmp_path / "missing-ceph.conf"
    rbd = f"rbd_store_pool = images\nrbd_store_ceph_conf = {ceph_conf}\n"
    conf = tmp_path / "glance-api.conf"
    if layout == "single store":
        conf.write_text(f"[glance_store]\nstores = rbd\ndefault_store = rbd\n{rbd}")
    else:
        conf.write_text(
            "[DEFAULT]\nenabled_backends = ceph1:rbd, ceph2:rbd\n"
            "[glance_store]\ndefault_backend = ceph1\n"
            f"[ceph1]\n{rbd}[ceph2]\n{rbd}"
        )
    done = command.run(conf, "status", check=False)
    assert done.returncode == 2, done.stderr  # the configuration names a file that is not there
    assert "Traceback" not in done.stderr
    backend = "glance_store" if layout == "single store" else "ceph1"
    assert done.stderr.startswith(f"glance-rbd-native: backend {backend}: cannot connect"), (
        done.stderr
    )
    assert str(ceph_conf) in done.stderr and "No such file or directory" in done.stderr

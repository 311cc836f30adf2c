"""glance-api as kolla runs it: under uWSGI in a pid namespace of its own (the host's network and
hostname, its own pids and /proc). An upload sent through the API, held in the middle, is
judged by `glance-rbd-native status` and `sweep --remove` run on the host, inside the server's
namespace, and in another namespace that sees neither: it is kept each time, and it finishes."""

import hashlib
import os
import pathlib
import threading

import pytest

from glance_rbd_native import leftovers
from tests.harness.command import OWN_PID_NAMESPACE, in_namespace_of, report
from tests.harness.data import MiB, data_of
from tests.harness.glance_api import held_body, writer_of

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

SIZE = 64 * MiB


@pytest.fixture(scope="module")
def api(new_glance_api):
    with new_glance_api("contained", native=True, pid_namespace=True) as server:
        yield server


def namespace_of(api):
    """The host pid of the server's master, pid 1 of its namespace."""
    unshare = api._proc.pid
    return int(pathlib.Path(f"/proc/{unshare}/task/{unshare}/children").read_text().split()[0])


def test_an_upload_to_glance_api_in_its_own_pid_namespace_is_kept_and_finishes(
    api, images, clean_pool
):
    data = data_of(SIZE, seed=41)
    image_id = api.create_image("in a container")
    release = threading.Event()
    outcome = {}

    def put():
        outcome["put"] = api.upload(image_id, held_body(data, release), size=SIZE)

    sender = threading.Thread(target=put)
    sender.start()
    try:
        writer = writer_of(images.ioctx, image_id)
        mark = leftovers.marks(images.ioctx)[image_id]
        assert mark.get("pid_ns") != os.stat("/proc/self/ns/pid").st_ino
        master = namespace_of(api)
        places = {
            "the host": (),
            "its namespace": in_namespace_of(master),
            "another namespace": OWN_PID_NAMESPACE,
        }
        for where, wrap in places.items():
            listed = {u["image"]: u for u in report(api.conf_file, "status", wrap=wrap)["uploads"]}
            assert listed[image_id]["state"] == "alive", (where, listed[image_id])
            assert listed[image_id]["pid"] == writer
            assert report(api.conf_file, "sweep", "--remove", wrap=wrap)["gone"] == [], where
        uploads = report(api.conf_file, "status")["uploads"]
        (reason,) = [u["reason"] for u in uploads if u["image"] == image_id]
        assert "here)" in reason and "runs" in reason, reason
    finally:
        release.set()
        sender.join(120)
    try:
        assert outcome["put"][0] == 204, outcome
        image = api.image(image_id)
        assert image["status"] == "active"
        assert image["checksum"] == hashlib.md5(data).hexdigest()
    finally:
        api.delete(image_id)

"""`glance-rbd-native status` and `sweep --remove` run in a loop beside uploads through
glance-api that fail in the middle: each is larger than glance's `image_size_cap`, so glance's
own reader raises inside the driver's loop, and the driver aborts. The command reads images
without a watch or a lock, so each abort still removes its image itself and glance-api still
answers 413, never a 500 of a removal refused for the command's watch. (A body shorter than
its Content-Length never reaches the driver's size check through glance-api: uWSGI and
glance's eventlet server both fail the read themselves, a 500 whatever the driver; the
driver's `Invalid` beside the command is proved at the store, `test_leftovers.py`.)"""

import threading

import pytest

from tests.harness.command import report
from tests.harness.data import MiB, data_of

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

CAP = 16 * MiB


@pytest.fixture(scope="module")
def api(new_glance_api):
    with new_glance_api("sweeps-beside", native=True, image_size_cap=CAP) as server:
        yield server


def test_uploads_over_the_cap_answer_413_while_sweeps_look(api, clean_pool):
    stop = threading.Event()
    looks = []

    def looking():
        while not stop.is_set():
            looks.append(report(api.conf_file, "status"))
            looks.append(report(api.conf_file, "sweep", "--remove"))

    looker = threading.Thread(target=looking)
    looker.start()
    answers = []
    try:
        for attempt in range(6):
            image_id = api.create_image(f"over the cap {attempt}")
            data = data_of(CAP + 8 * MiB, seed=attempt)
            answers.append(api.upload(image_id, data, size=len(data)))
            api.delete(image_id)
    finally:
        stop.set()
        looker.join(120)
    assert len(looks) >= 2, "no status or sweep ran beside the uploads"
    assert all(look["gone"] == [] for look in looks[1::2])
    for status, body in answers:
        assert status == 413, (status, body[:300])
    assert not clean_pool.names()

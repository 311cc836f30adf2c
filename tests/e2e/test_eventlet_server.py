"""glance's own eventlet `glance-api` server (glance 32, the last that has it, with the
glance_store 5.4.0 and eventlet it pins): the app loaded, 2 workers forked, each running every
request as a green thread on one OS thread, where logging's locks are green too."""

import io
import time

import pytest

from tests.clients import CLIENTS, SIZE, check_four_at_once, check_upload, wait_status
from tests.harness import command, venvs
from tests.harness.data import MiB, data_of
from tests.harness.waiting import wait_for

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:'cgi' is deprecated:DeprecationWarning"),
]


@pytest.fixture(scope="module")
def eventlet_servers(new_glance_api):
    """The native and the stock eventlet server, started on first use."""
    bin_dir = venvs.eventlet_glance()
    started = {}

    def server(name):
        if name not in started:
            started[name] = new_glance_api(
                f"eventlet-{name}",
                native=name == "native",
                server="eventlet",
                bin_dir=bin_dir,
                timeout=5,
            ).start()
        return started[name]

    yield server
    for api in started.values():
        api.stop()


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("server", ["native", "stock"])
def test_upload(server, client, eventlet_servers, cluster, clean_pool):
    check_upload(eventlet_servers(server), cluster, data_of(SIZE, seed=len(client)), client)


@pytest.mark.parametrize("server", ["native", "stock"])
def test_four_clients_at_once(server, eventlet_servers, cluster, clean_pool):
    check_four_at_once(eventlet_servers(server), cluster, seed=200)


def janitor_story(api, cluster, image_id):
    """What the janitor was doing with a partial image it did not remove in time: glance's log
    lines of that image, the image's watchers and lockers, and what `glance-rbd-native status`
    says of its mark."""
    spec = f"{cluster.pool}/{image_id}"
    lines = [line for line in api.log().splitlines() if image_id in line]

    def asked(*argv):
        try:
            return cluster.rbd(*argv, timeout=30).strip()
        except Exception as exc:  # what the cluster answers is the story, whatever it is
            return f"(rbd {' '.join(argv)} failed: {exc})"

    done = command.run(api.conf_file, "status", check=False)
    return "\n".join([
        f"the janitor did not remove {spec} within 120 s of the OSD's return",
        "glance's log of it:", *lines[-40:],
        "rbd status:", asked("status", spec),
        "rbd lock ls:", asked("lock", "ls", spec),
        "glance-rbd-native status:", done.stdout + done.stderr,
    ])  # fmt: skip


def test_osd_stopped_mid_upload(eventlet_servers, cluster, clean_pool):
    """The OSD goes away mid-upload: the upload fails within rados_connect_timeout, the janitor
    thread removes the partial image once the OSD is back, and its record reaches glance's log
    through a green thread (the janitor itself never calls into Python). The server lives on."""
    api = eventlet_servers("native")
    data = data_of(SIZE, seed=300)
    image_id = api.create_image("eventlet osd stopped")

    def body():
        yield data[: 8 * MiB]
        time.sleep(1)  # glance has written the first chunk
        cluster.stop_osd()
        for pos in range(8 * MiB, len(data), MiB):
            yield data[pos : pos + MiB]

    try:
        status, _ = api.upload(image_id, body())
        assert status >= 500, status
        assert wait_status(api, image_id, {"queued", "killed"}) == "queued"
    finally:
        cluster.start_osd()
    removed = wait_for(lambda: image_id not in cluster.images(), 120, every=1)
    assert removed, janitor_story(api, cluster, image_id)
    target = f"image '{image_id}' in pool '{cluster.pool}'"
    assert (
        f"could not remove {target} (the cluster timed out); retrying in the background"
        in api.log()
    )
    removed = f"removed partial {target} after an earlier failure"
    # The next upload in each worker emits what the janitor queued (two workers: try a few).
    for attempt in range(6):
        if removed in api.log():
            break
        after = api.create_image(f"eventlet after {attempt}")
        assert api.upload(after, io.BytesIO(data_of(MiB)), size=MiB)[0] == 204
        api.delete(after)
    assert removed in api.log()
    api.delete(image_id)

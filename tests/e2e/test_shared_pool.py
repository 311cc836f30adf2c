"""`glance-rbd-native sweep --include-unmarked` in a pool shared with cinder and nova, against
a glance-api with its database: only images named as glance names images, that glance's
database does not reference, are listed; `--remove` removes only those named on its command
line. A cinder volume, a nova disk, and an active glance image whose snapshot an operator
removed by hand are never listed, and never removed."""

import io
import time
import uuid

import pytest

from tests.harness.command import report
from tests.harness.data import MiB, data_of

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]


@pytest.fixture(scope="module")
def api(new_glance_api):
    with new_glance_api("shared-pool", native=True) as server:
        yield server


def sweep(api, *args):
    return report(api.conf_file, "sweep", "--include-unmarked", "--older-than", "1", *args)


def test_only_unreferenced_glance_leftovers_are_listed_and_removed_by_name(api, cluster, images):
    image_id = api.create_image("snapshot removed by hand")
    assert api.upload(image_id, io.BytesIO(data_of(MiB)), size=MiB)[0] == 204
    images.remove_snapshots(image_id)
    volume, disk = f"volume-{uuid.uuid4()}", f"{uuid.uuid4()}_disk"
    leftover, other = str(uuid.uuid4()), str(uuid.uuid4())  # partial images, no mark
    for name in (volume, disk, leftover, other):
        images.create(name, 4 * MiB)
    kept = {image_id, volume, disk}
    try:
        time.sleep(1.5)  # --older-than 1
        listed = sweep(api)
        assert listed["database"] == "read"
        names = {u["image"] for u in listed["unmarked"]}
        assert {leftover, other} <= names and not names & kept, names

        removed = sweep(api, "--remove")
        outcomes = {u["image"]: u["outcome"] for u in removed["unmarked"]}
        assert outcomes[leftover] == outcomes[other] == "kept: not named on the command line"
        assert {leftover, other} | kept <= set(cluster.images())

        removed = sweep(api, "--remove", leftover)
        outcomes = {u["image"]: u["outcome"] for u in removed["unmarked"]}
        assert outcomes[leftover] == "removed" and outcomes[other].startswith("kept"), outcomes
        left = set(cluster.images())
        assert leftover not in left and {other} | kept <= left
        assert api.image(image_id)["status"] == "active"
    finally:
        for name in (volume, disk, leftover, other, image_id):
            images.remove(name)
        api.delete(image_id)

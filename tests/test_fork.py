"""A process that forks after it has connected, as uWSGI's master does when it loads the app
before forking its workers: the children must not use what the parent made."""

import io
import os
import traceback

import pytest

import glance_rbd_native
from tests.harness.data import MiB, data_of, expected_result, new_name
from tests.harness.stores import make_store
from tests.harness.waiting import exit_status

pytestmark = [
    pytest.mark.cluster,
    # eventlet, imported by glance's dependencies in this interpreter, warns in its at-fork hook.
    pytest.mark.filterwarnings("ignore:Using fork\\(\\) is a bad idea:DeprecationWarning"),
]


def test_children_of_a_connected_parent_upload(cluster, clean_pool):
    glance_rbd_native.patch()
    data = data_of(3 * MiB)
    name = new_name("parent")
    make_store(cluster, chunk_mib=1).add(name, io.BytesIO(data), len(data), "sha512")
    clean_pool.remove(name)
    assert glance_rbd_native.connection_count() >= 1  # the parent's connection is cached

    children = {}
    for index in range(2):
        name = new_name(f"child{index}")
        pid = os.fork()
        if pid == 0:  # the child: upload through the same settings, report by exit code
            code = 1
            try:
                result = make_store(cluster, chunk_mib=1).add(
                    name, io.BytesIO(data), len(data), "sha512"
                )
                code = 0 if result[1:4] == expected_result(data) else 2
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        children[pid] = name

    outcomes = {name: exit_status(pid, timeout=60) for pid, name in children.items()}
    for name in children.values():
        if outcomes[name] == 0:
            assert clean_pool.read(name) == data
        clean_pool.remove(name)
    assert outcomes == dict.fromkeys(children.values(), 0)

    # The parent's own connection still serves it.
    name = new_name("parent")
    make_store(cluster, chunk_mib=1).add(name, io.BytesIO(data), len(data), "sha512")
    assert clean_pool.read(name) == data
    clean_pool.remove(name)

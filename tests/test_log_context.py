"""The records of the native layer's own threads reach glance's log without a request's id.

Those threads never call into Python: their records wait for the next Python thread that calls
in (src/logbridge.rs). In glance-api that thread serves another request, whose oslo.context
oslo.log stamps on what it formats: a purge's line would carry the id of a request that had
nothing to do with it. Here the records are formatted as glance-api formats them, as they are
emitted."""

import contextlib
import io
import logging

import pytest
import rbd
from oslo_config import cfg
from oslo_context import context
from oslo_log import formatters, log

from glance_rbd_native._native import _flush_logs
from tests.harness.data import MiB, data_of, new_name
from tests.harness.stores import locate, make_store
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.cluster


@contextlib.contextmanager
def glances_log():
    """The package's records, formatted by oslo.log's ContextFormatter with glance's defaults."""
    conf = cfg.ConfigOpts()
    log.register_options(conf)
    conf([], project="glance")
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(formatters.ContextFormatter(config=conf, project="glance"))
    logger = logging.getLogger("glance_rbd_native")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        vars(context._request_store).pop("context", None)  # oslo.context has no clear()


def test_a_purge_line_carries_no_other_requests_id(images, cluster, native):
    name = images.store(new_name("log-context"), data_of(4 * MiB))
    store = make_store(cluster)
    with glances_log() as lines:
        context.RequestContext(request_id="req-the-delete")  # current in this thread
        store.delete(locate(store, cluster, name))
        (deleted,) = [line for line in lines.getvalue().splitlines() if name in line]
        trash_id = deleted.split("moved to the trash as ")[1].split(",")[0]
        wait_for(
            lambda: trash_id not in {e["id"] for e in rbd.RBD().trash_list(images.ioctx)},
            timeout=120,
            what="the purge to remove the trash entry",
        )

        context.RequestContext(request_id="req-another")  # the next request in this thread

        def purged():
            _flush_logs()  # as that request's first native call would
            said = lines.getvalue().splitlines()
            return next((line for line in said if f"trash id {trash_id}" in line), None)

        line = wait_for(purged, timeout=30, what="the purge's record")
    assert "req-the-delete" in deleted  # the request's own line keeps its id
    assert "is removed, by " in line  # the manager, or this process where there is none
    assert "req-" not in line and " [-] " in line

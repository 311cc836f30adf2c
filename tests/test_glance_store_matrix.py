"""The glance_store contract tests (harness/contract.py) against every release operators run,
each in a virtualenv of its own with the same wheel: once per release in harness.venvs.MATRIX.

A run is a child pytest that waits on its cluster about as much as it computes, so the releases
run two at a time, each on a cluster of its own (the session's, and one booted for the matrix):
the contract's tests expect a pool nobody else writes to.
"""

import contextlib
import os
import pathlib
import queue
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from tests import stock_versions
from tests.harness import contract, venvs
from tests.harness.cluster import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.matrix]


class Runs:
    """Contract runs, as many at a time as there are clusters, each on a cluster alone."""

    def __init__(self, clusters: list[Cluster], work: pathlib.Path):
        self._free: queue.Queue[Cluster] = queue.Queue()
        for cluster in clusters:
            self._free.put(cluster)
        self._work = work
        self._children: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._stopping = False
        self._pool = ThreadPoolExecutor(len(clusters), thread_name_prefix="matrix")
        self.results: dict[str, Future] = {}

    def start(self, versions) -> None:
        for version in versions:
            self.results[version] = self._pool.submit(self._run, version)

    def _run(self, version: str) -> tuple[subprocess.CompletedProcess, str]:
        python = venvs.release(version)
        cluster = self._free.get()
        try:
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
            env["GLANCE_RBD_TEST_CLUSTER"] = str(cluster.root)
            junit = self._work / f"contract-{version}.xml"
            argv = [str(python), *contract.pytest_args(str(junit))]
            with self._lock:
                if self._stopping:
                    raise RuntimeError("the matrix was stopped")
                child = subprocess.Popen(
                    argv,
                    cwd=venvs.ROOT,
                    env=env,
                    text=True,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
                self._children.add(child)
            try:
                out, err = child.communicate(timeout=1200)
            except subprocess.TimeoutExpired:
                child.kill()
                out, err = child.communicate()
            finally:
                with self._lock:
                    self._children.discard(child)
            result = subprocess.CompletedProcess(argv, child.returncode, out, err)
            return result, junit.read_text() if junit.exists() else ""
        finally:
            self._free.put(cluster)

    def stop(self) -> None:
        """Ends the runs still going (an interrupted session) and waits for the threads."""
        with self._lock:
            self._stopping = True
            for child in self._children:
                child.kill()
        self._pool.shutdown(cancel_futures=True)


@pytest.fixture(scope="module")
def matrix(request, cluster, tmp_path_factory):
    """Starts the contract run of every release selected in this module: futures by release."""
    versions = [
        item.callspec.params["version"]
        for item in request.session.items
        if item.module is request.module
        and item.callspec.params["version"] != stock_versions.VERSION_TEXT
    ]
    clusters = [cluster]
    with contextlib.ExitStack() as stack:
        if len(versions) > 1:
            root = pathlib.Path(tempfile.mkdtemp(prefix="grn-m-", dir="/tmp"))
            stack.callback(shutil.rmtree, root, ignore_errors=True)
            # With its mgr from the start: the contract's quota case needs one, and a mgr that a
            # child started would be the child's, unknown here when the cluster stops.
            clusters.append(stack.enter_context(Cluster(root, with_mgr=True)))
        runs = Runs(clusters, tmp_path_factory.mktemp("matrix"))
        stack.callback(runs.stop)
        runs.start(versions)
        yield runs.results


@pytest.mark.parametrize("version", venvs.MATRIX)
def test_contract_on_release(matrix, version):
    if version == stock_versions.VERSION_TEXT:
        pytest.skip(f"{version} is this interpreter's glance_store: the main run covers it")
    result, xml = matrix[version].result()
    where = f"glance_store {version}"
    print(f"{where}: {contract.check(where, version, result, xml)}")

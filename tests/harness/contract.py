"""The contract tests: the files that compare the native driver with the stock driver of
whatever glance_store the interpreter running them has. The main run covers the host's
glance_store; the release matrix (tests/test_glance_store_matrix.py) and the Debian 13 root
(tests/distro/test_debian13.py) run them again elsewhere, on the same cluster.

The guard counts what it expects: every file, its number of cases, and which of them skip on
which release. A run that lost a file, gained or lost cases, or skipped something it should have
run (or ran something that should skip) fails, naming the file and the release. It reads
pytest's per-case results (JUnit XML), not its summary line; the main run applies the same table
to what it ran (tests/conftest.py)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable

from tests import stock_versions

FILES = (
    "test_differential.py",
    "test_stock_bugs.py",
    "test_errors.py",
    "test_compat.py",
    "test_patch.py",
    "test_download.py",
    "test_delete.py",
)
# The cases of each file: the same on every release (no parameter depends on the release; what
# differs is what a case expects, from tests/stock_versions.py). A new case changes this table.
CASES = {
    "test_differential.py": 103,
    "test_stock_bugs.py": 7,
    "test_errors.py": 13,
    "test_compat.py": 24,
    "test_patch.py": 9,
    "test_download.py": 17,
    "test_delete.py": 8,
}


@dataclasses.dataclass(frozen=True)
class Skip:
    """A case that skips where `applies(glance_store version, running as root)` holds, and
    passes everywhere else; `when` says where, for the messages."""

    case: str  # FILE::NAME[PARAMS], as pytest names it
    when: str
    applies: Callable[[tuple[int, ...], bool], bool]

    @property
    def file(self) -> str:
        return self.case.partition("::")[0]


def _before(release: tuple[int, ...]) -> Callable[[tuple[int, ...], bool], bool]:
    return lambda version, _root: version < release


_STORE_CONF = ".".join(map(str, stock_versions.STORE_CONF_SINCE))
SKIPS = (
    Skip(
        "test_compat.py::test_multi_store_options_from_backend_defaults",
        f"glance_store < {_STORE_CONF} (no [backend_defaults])",
        _before(stock_versions.STORE_CONF_SINCE),
    ),
    Skip(
        "test_patch.py::test_a_host_without_ceph_libraries_keeps_the_stock_driver",
        "not root (mount namespaces)",
        lambda _version, root: not root,
    ),
)

# The core that runs where emulation makes the whole too slow (the arm64 root,
# tests/distro/test_debian13_arm64.py): an add with the size and one without, a get, the two
# size checks, a missing pool (add and get), a full pool, and a delete, of an image and of one a
# client has open (the librbd structures a delete reads); images of a few MiB.
CORE = (
    "test_differential.py::test_same_as_stock[file-known-chunk+1-4MiB]",
    "test_differential.py::test_same_as_stock[file-unknown-chunk+1-4MiB]",
    "test_download.py::test_same_chunks_bytes_and_size[8388609]",
    "test_errors.py::test_size_exceeds",
    "test_errors.py::test_size_mismatch",
    "test_errors.py::test_missing_pool_names_the_pool",
    "test_download.py::test_a_missing_pool_is_named",
    "test_errors.py::test_pool_over_quota_is_storage_full",
    "test_delete.py::test_an_image",
    "test_delete.py::test_an_image_a_client_has_open",
)

# Old releases call what newer oslo libraries deprecate; that is not ours to fail on.
_OPTIONS = ["-q", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning"]


def pytest_args(junit_xml: str, cases: tuple[str, ...] | None = None) -> list[str]:
    """The arguments after the interpreter: run from the checkout (the import root), with the
    results of every case written to `junit_xml`; every file, or the `cases` alone."""
    return [
        "-m",
        "pytest",
        *_OPTIONS,
        f"--junitxml={junit_xml}",
        *(f"tests/{name}" for name in (cases or FILES)),
    ]


def parse_junit(xml_text: str) -> dict[str, dict[str, str]]:
    """file -> {case -> "passed", "skipped", "failed" or "error"}, from pytest's JUnit XML.
    Cases outside the contract files, and collection errors, go under their own name."""
    results: dict[str, dict[str, str]] = {}
    for case in ET.fromstring(xml_text).iter("testcase"):
        # classname is the dotted module (tests.test_compat), then the class if any.
        parts = case.get("classname", "").split(".")
        at = next((i for i, part in enumerate(parts) if f"{part}.py" in FILES), None)
        if at is None:
            file = case.get("classname") or case.get("name", "?")
            case_id = f"{file}::{case.get('name', '?')}"
        else:
            file = f"{parts[at]}.py"
            case_id = "::".join([file, *parts[at + 1 :], case.get("name", "?")])
        if case.find("failure") is not None:
            outcome = "failed"
        elif case.find("error") is not None:
            outcome = "error"
        elif case.find("skipped") is not None:  # xfail too: the contract has none
            outcome = "skipped"
        else:
            outcome = "passed"
        cases = results.setdefault(file, {})
        if cases.get(case_id) not in ("failed", "error"):  # a teardown error after a pass
            cases[case_id] = outcome
    return results


def problems(
    where: str,
    version: tuple[int, ...],
    results: dict[str, dict[str, str]],
    *,
    root: bool,
    files=FILES,
    failures=True,
) -> list[str]:
    """What differs between `results` (as parse_junit gives them) and the table, for a run on
    glance_store `version`; one line each, naming the file and `where` (the release). With
    failures, each failed case too."""
    found = []
    for file in files:
        cases = results.get(file)
        if not cases:
            found.append(f"{where}: {file}: no results (not collected?)")
            continue
        if len(cases) != CASES[file]:
            found.append(f"{where}: {file}: {len(cases)} cases, expected {CASES[file]}")
        for case, outcome in sorted(cases.items()):
            if failures and outcome in ("failed", "error"):
                found.append(f"{where}: {file}: {case} {outcome}")
        skipped = {case for case, outcome in cases.items() if outcome == "skipped"}
        expected = {s.case: s for s in SKIPS if s.file == file and s.applies(version, root)}
        for case in sorted(skipped - expected.keys()):
            found.append(f"{where}: {file}: {case} skipped, expected to run")
        for case in sorted(expected.keys() - skipped):
            found.append(
                f"{where}: {file}: {case} ran ({cases.get(case, 'missing')}), expected "
                f"to skip on {expected[case].when}"
            )
    for file in sorted(results.keys() - set(FILES)):
        found.append(f"{where}: {file}: not a contract file ({len(results[file])} results)")
    return found


def check(
    where: str,
    version: str,
    result: subprocess.CompletedProcess,
    junit_xml: str,
    *,
    root: bool | None = None,
) -> str:
    """Fails unless the run passed with exactly the table's cases and skips for glance_store
    `version`; returns pytest's last line, for the log."""
    output = f"{result.stdout[-20000:]}{result.stderr[-5000:]}"
    root = os.geteuid() == 0 if root is None else root
    try:
        results = parse_junit(junit_xml)
    except ET.ParseError as e:
        raise AssertionError(f"{where}: no readable JUnit XML ({e}):\n{output}") from None
    found = problems(where, stock_versions.parse(version), results, root=root)
    assert not found and result.returncode == 0, "\n".join(
        [*found, f"{where}: pytest exited with {result.returncode}", output]
    )
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""


def check_cases(
    where: str, cases: tuple[str, ...], result: subprocess.CompletedProcess, junit_xml: str
) -> str:
    """Fails unless exactly `cases` ran, and each passed; returns pytest's last line."""
    output = f"{result.stdout[-20000:]}{result.stderr[-5000:]}"
    try:
        results = parse_junit(junit_xml)
    except ET.ParseError as e:
        raise AssertionError(f"{where}: no readable JUnit XML ({e}):\n{output}") from None
    ran = {case: outcome for file in results.values() for case, outcome in file.items()}
    found = [
        f"{where}: {case}: {ran.get(case, 'not run')}"
        for case in cases
        if ran.get(case) != "passed"
    ]
    found += [
        f"{where}: {case}: ran, not one of the cases" for case in sorted(ran.keys() - set(cases))
    ]
    assert not found and result.returncode == 0, "\n".join(
        [*found, f"{where}: pytest exited with {result.returncode}", output]
    )
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""


class Tally:
    """The main run's own check: the outcome of each case of the contract files it ran in
    full (nothing deselected, nothing left unrun), held against the same table."""

    def __init__(self):
        self.collected: dict[str, set[str]] = {}
        self.deselected: set[str] = set()
        self.outcomes: dict[str, dict[str, str]] = {}

    @staticmethod
    def _case(nodeid: str) -> tuple[str | None, str]:
        """The file, if a contract file, and the case as the table names it (FILE::NAME)."""
        path, sep, rest = nodeid.partition("::")
        file = path.rpartition("/")[2]
        return (file if sep and file in FILES else None), f"{file}::{rest}"

    def collect(self, nodeid: str) -> None:
        file, case = self._case(nodeid)
        if file:
            self.collected.setdefault(file, set()).add(case)

    def deselect(self, nodeid: str) -> None:
        file, case = self._case(nodeid)
        if file:
            self.deselected.add(case)

    def report(self, nodeid: str, when: str, outcome: str) -> None:
        """One phase's report (setup, call, teardown): "passed", "failed" or "skipped"."""
        file, case = self._case(nodeid)
        if not file:
            return
        cases = self.outcomes.setdefault(file, {})
        if cases.get(case) in ("failed", "error"):
            return
        if outcome == "failed":
            cases[case] = "failed" if when == "call" else "error"
        elif outcome == "skipped":
            cases[case] = "skipped"
        elif when == "call":
            cases[case] = "passed"

    def problems(self, version: tuple[int, ...], *, root: bool) -> list[str]:
        complete = [
            file
            for file in FILES
            if file in self.collected
            and not self.collected[file] & self.deselected
            and self.collected[file] == set(self.outcomes.get(file, {}))
        ]
        results = {file: self.outcomes[file] for file in complete}
        where = f"glance_store {'.'.join(map(str, version))} (this run)"
        # pytest reports the failures itself.
        return problems(where, version, results, root=root, files=complete, failures=False)

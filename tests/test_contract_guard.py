"""The guard of the contract runs (tests/harness/contract.py) on made-up results: it must name
the file and the release of whatever differs from its table. No cluster."""

import pathlib
import re
import subprocess
import sys
from xml.sax.saxutils import quoteattr

import pytest

from tests.harness import contract

NEW = (5, 7, 0)
OLD = (4, 1, 0)


def run_results(version, root=True):
    """The results of a clean run on `version`: every case, the table's skips skipped."""
    results = {}
    for file, count in contract.CASES.items():
        skips = [s.case for s in contract.SKIPS if s.file == file]
        cases = skips + [f"{file}::test_case[{i}]" for i in range(count - len(skips))]
        skipping = {s.case for s in contract.SKIPS if s.applies(version, root)}
        results[file] = {case: "skipped" if case in skipping else "passed" for case in cases}
    return results


def junit(results):
    """pytest's JUnit XML of these results, cases of a module in classname tests.MODULE."""
    lines = ['<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">']
    body = {
        "passed": "",
        "skipped": '<skipped type="pytest.skip" message="x"/>',
        "failed": '<failure message="x">trace</failure>',
        "error": '<error message="x"/>',
    }
    for file, cases in results.items():
        for case, outcome in cases.items():
            _, _, name = case.partition("::")
            *classes, name = name.split("::")
            classname = ".".join(["tests", file.removesuffix(".py"), *classes])
            lines.append(
                f"<testcase classname={quoteattr(classname)} name={quoteattr(name)} "
                f'time="0.1">{body[outcome]}</testcase>'
            )
    return "\n".join([*lines, "</testsuite></testsuites>"])


def completed(returncode=0):
    return subprocess.CompletedProcess([], returncode, stdout="171 passed in 1s\n", stderr="")


@pytest.mark.parametrize("version", [NEW, OLD, (5, 2, 0), (5, 0, 0), (4, 10, 0), (4, 9, 1)])
def test_a_clean_run_passes(version):
    results = run_results(version)
    assert contract.problems("glance_store x", version, results, root=True) == []
    assert contract.parse_junit(junit(results)) == results


def test_the_table_covers_the_contract_files():
    assert set(contract.CASES) == set(contract.FILES)
    assert all(s.file in contract.FILES for s in contract.SKIPS)


def test_the_backend_defaults_case_skips_before_5_0_only():
    [skip] = [s for s in contract.SKIPS if s.file == "test_compat.py"]
    assert skip.applies((4, 10, 0), True) and skip.applies(OLD, True)
    assert not skip.applies((5, 0, 0), True) and not skip.applies((5, 1, 0), True)
    assert not skip.applies((5, 2, 0), True) and not skip.applies(NEW, True)
    assert "5.0" in skip.when


def test_a_missing_file_fails_naming_it_and_the_release():
    results = run_results(OLD)
    del results["test_errors.py"]
    assert contract.problems("glance_store 4.1.0", OLD, results, root=True) == [
        "glance_store 4.1.0: test_errors.py: no results (not collected?)"
    ]


def test_a_count_that_differs_fails():
    results = run_results(NEW)
    results["test_download.py"].popitem()
    found = contract.problems("glance_store 5.7.0", NEW, results, root=True)
    expected = contract.CASES["test_download.py"]
    assert found == [
        f"glance_store 5.7.0: test_download.py: {expected - 1} cases, expected {expected}"
    ]


def test_an_unexpected_skip_fails():
    results = run_results(NEW)
    results["test_differential.py"]["test_differential.py::test_case[3]"] = "skipped"
    assert contract.problems("glance_store 5.7.0", NEW, results, root=True) == [
        "glance_store 5.7.0: test_differential.py: test_differential.py::test_case[3] skipped, "
        "expected to run"
    ]


def test_a_missing_skip_fails():
    """A case for 5.0 on that ran on 4.1 means the release's conditions were not read."""
    results = run_results(NEW)  # where it runs
    [found] = contract.problems("glance_store 4.1.0", OLD, results, root=True)
    assert found.startswith(
        "glance_store 4.1.0: test_compat.py: test_compat.py::"
        "test_multi_store_options_from_backend_defaults ran (passed), "
        "expected to skip on glance_store < 5.0"
    )


def test_a_skip_that_depends_on_root():
    results = run_results(NEW, root=False)
    assert contract.problems("x", NEW, results, root=False) == []
    assert len(contract.problems("x", NEW, results, root=True)) == 1


def test_check_reads_the_junit_xml_not_the_summary():
    results = run_results(OLD)
    results["test_patch.py"] = {}
    with pytest.raises(AssertionError, match=r"glance_store 4\.1\.0: test_patch\.py: no results"):
        contract.check("glance_store 4.1.0", "4.1.0", completed(), junit(results), root=True)
    assert (
        contract.check(
            "glance_store 4.1.0", "4.1.0", completed(), junit(run_results(OLD)), root=True
        )
        == "171 passed in 1s"
    )


def test_check_fails_a_failed_run_and_unreadable_xml():
    results = run_results(NEW)
    results["test_errors.py"]["test_errors.py::test_case[0]"] = "failed"
    with pytest.raises(AssertionError, match=r"test_errors.py::test_case\[0\] failed"):
        contract.check("glance_store 5.7.0", "5.7.0", completed(1), junit(results), root=True)
    with pytest.raises(AssertionError, match="no readable JUnit XML"):
        contract.check("glance_store 5.7.0", "5.7.0", completed(2), "", root=True)


def test_cases_in_classes_and_teardown_errors():
    xml = junit({"test_patch.py": {"test_patch.py::TestX::test_y[a/b]": "passed"}})
    xml = xml.replace(
        "</testsuite>",
        '<testcase classname="tests.test_patch.TestX" name="test_y[a/b]">'
        '<error message="teardown"/></testcase></testsuite>',
    )
    assert contract.parse_junit(xml) == {
        "test_patch.py": {"test_patch.py::TestX::test_y[a/b]": "error"}
    }


def test_the_main_runs_tally():
    tally = contract.Tally()
    results = run_results(NEW)
    for cases in results.values():
        for case, outcome in cases.items():
            nodeid = f"tests/{case}"
            tally.collect(nodeid)
            if outcome == "skipped":
                tally.report(nodeid, "setup", "skipped")
            else:
                tally.report(nodeid, "setup", "passed")
                tally.report(nodeid, "call", outcome)
            tally.report(nodeid, "teardown", "passed")
    tally.collect("tests/test_writer.py::test_other")  # not a contract file
    assert tally.outcomes == results
    assert tally.problems(NEW, root=True) == []
    # Checked on 4.1 (where the case for 5.0 on must skip), the same outcomes are wrong.
    assert len(tally.problems(OLD, root=True)) == 1
    # A failure is pytest's to report; the tally counts it as a case that ran.
    tally.report("tests/test_errors.py::test_case[0]", "call", "failed")
    assert tally.problems(NEW, root=True) == []


def test_the_tally_leaves_out_files_not_run_in_full():
    tally = contract.Tally()
    tally.collect("tests/test_errors.py::test_a")
    tally.collect("tests/test_errors.py::test_b")
    tally.deselect("tests/test_errors.py::test_b")
    tally.report("tests/test_errors.py::test_a", "call", "passed")
    tally.collect("tests/test_compat.py::test_c")  # collected, never run (-x, interrupted)
    assert tally.problems(NEW, root=True) == []


def contract_root() -> pathlib.Path:
    return pathlib.Path(__file__).resolve().parents[1]


def core_results(outcome="passed"):
    results = {}
    for case in contract.CORE:
        results.setdefault(case.partition("::")[0], {})[case] = outcome
    return results


def test_the_core_names_cases_of_the_contract_files():
    """Each case of the emulated core exists: pytest collects it from the checkout."""
    ids = [f"tests/{case}" for case in contract.CORE]
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *ids],
        capture_output=True,
        text=True,
        cwd=contract_root(),
    ).stdout
    assert sorted(line for line in out.splitlines() if "::" in line) == sorted(ids)


def test_a_core_run_passes_only_with_each_case_passed():
    results = core_results()
    assert contract.check_cases("arm64", contract.CORE, completed(), junit(results)) == (
        "171 passed in 1s"
    )
    first = contract.CORE[0]
    results[first.partition("::")[0]][first] = "skipped"
    with pytest.raises(AssertionError, match=re.escape(f"arm64: {first}: skipped")):
        contract.check_cases("arm64", contract.CORE, completed(), junit(results))
    results = core_results()
    results["test_patch.py"] = {"test_patch.py::test_case[0]": "passed"}
    with pytest.raises(AssertionError, match=r"test_case\[0\]: ran, not one of the cases"):
        contract.check_cases("arm64", contract.CORE, completed(), junit(results))
    del results["test_patch.py"], results["test_errors.py"]
    with pytest.raises(AssertionError, match=r"test_errors\.py::test_size_exceeds: not run"):
        contract.check_cases("arm64", contract.CORE, completed(), junit(results))

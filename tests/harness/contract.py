"""The contract tests: the files that compare the native driver with the stock driver of
whatever glance_store the interpreter running them has. The main run covers the host's
glance_store; the release matrix (tests/test_glance_store_matrix.py) and the Debian 13 root
(tests/distro/test_debian13.py) run them again elsewhere, on the same cluster."""

from __future__ import annotations

import re
import subprocess

FILES = ["test_differential.py", "test_stock_bugs.py", "test_errors.py", "test_compat.py",
         "test_patch.py", "test_download.py"]
# Old releases call what newer oslo libraries deprecate; that is not ours to fail on.
PYTEST = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning",
          *FILES]
# Far fewer would mean whole files were skipped or not collected.
AT_LEAST = 100


def check(where: str, result: subprocess.CompletedProcess) -> str:
    """Fails unless the run passed, with at least AT_LEAST tests; returns pytest's summary."""
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, f"{where}:\n{result.stdout[-20000:]}{result.stderr[-5000:]}"
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= AT_LEAST, f"{where}: {summary}"
    return summary

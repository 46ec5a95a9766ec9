"""What every benchmark suite of ``make bench`` shares (``benchmarks/suites/suite_*.py``).

Each benchmark's ``extra_info`` gets the commit it measured (``git``: the commit and whether
the working tree differed from it). A suite puts the figures a user reads in ``extra_info``:
``summary``, one line printed after pytest-benchmark's table, and ``timings_s``, named
seconds (lower is better) that ``benchmarks/compare_saved.py`` compares between saved runs
beside the benchmark's own median.
"""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUMMARIES = []


def _git(*args) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="session")
def commit() -> dict:
    """The commit measured, and whether tracked files differed from it."""
    try:
        return dict(commit=_git("rev-parse", "HEAD"), dirty=bool(_git("status", "--porcelain", "--untracked-files=no")))
    except (OSError, subprocess.CalledProcessError):
        return dict(commit=None, dirty=None)


@pytest.fixture(autouse=True)
def _stamped(request, commit):
    if "benchmark" not in request.fixturenames:
        yield
        return
    bench = request.getfixturevalue("benchmark")
    bench.extra_info["git"] = commit
    yield
    if bench.extra_info.get("summary"):
        SUMMARIES.append((request.node.name, bench.extra_info["summary"]))


def pytest_terminal_summary(terminalreporter):
    if SUMMARIES:
        terminalreporter.write_sep("-", "figures (each benchmark's extra_info, in the saved JSON)")
        for name, line in SUMMARIES:
            terminalreporter.write_line(f"{name}: {line}")

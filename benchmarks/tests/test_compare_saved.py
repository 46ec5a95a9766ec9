"""``benchmarks/compare_saved.py`` on saved runs in pytest-benchmark's own format.

A tiny pytest-benchmark run (three sleeps of a millisecond, saved as ``make bench`` saves)
gives the older run; the newer one is its copy with one benchmark's times made three times
longer, one's halved and one's unchanged. The verdicts come from those ratios, never from a
timing taken here.
"""
import copy
import glob
import json
import os
import subprocess
import sys

from benchmarks import compare_saved

TINY_SUITE = '''
import time


def test_unchanged(benchmark):
    benchmark.pedantic(time.sleep, args=(0.001,), rounds=3, iterations=1)
    benchmark.extra_info["timings_s"] = dict(epoch=0.5, gone_figure=1.0)


def test_slowed(benchmark):
    benchmark.pedantic(time.sleep, args=(0.001,), rounds=3, iterations=1)


def test_sped_up(benchmark):
    benchmark.pedantic(time.sleep, args=(0.001,), rounds=3, iterations=1)
'''
TIMES = ("min", "max", "mean", "median", "q1", "q3", "iqr", "stddev", "ld15iqr", "hd15iqr", "total")


def _saved_run(tmp_path) -> str:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_tiny.py").write_text(TINY_SUITE)
    storage = tmp_path / "saved"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_tiny.py",
                           "--benchmark-enable", "--benchmark-autosave", f"--benchmark-storage={storage}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (path,) = glob.glob(str(storage / "*" / "*.json"))
    return path


def _scaled(bench: dict, factor: float) -> None:
    for key in TIMES:
        if bench["stats"].get(key) is not None:
            bench["stats"][key] *= factor
    if "data" in bench["stats"]:
        bench["stats"]["data"] = [x * factor for x in bench["stats"]["data"]]


def _verdicts(out: str) -> dict:
    """The verdict printed on each benchmark's (and figure's) line, by the line's first word."""
    rows = {}
    for line in out.splitlines():
        for verdict in ("within noise", "slower", "faster"):
            if line.rstrip().endswith(verdict):
                rows[line.split()[0]] = verdict
    return rows


def test_slowed_benchmark_is_slower_unchanged_is_within_noise(tmp_path, capsys):
    older = _saved_run(tmp_path)
    run = json.loads(open(older).read())
    newer = copy.deepcopy(run)
    by_name = {b["name"]: b for b in newer["benchmarks"]}
    _scaled(by_name["test_slowed"], 3.0)
    _scaled(by_name["test_sped_up"], 0.5)
    by_name["test_unchanged"]["extra_info"]["timings_s"] = dict(epoch=0.5 * 1.05)
    newer["datetime"] = "9999-01-01T00:00:00.000000"  # the newest, whatever the clock says
    with open(os.path.join(os.path.dirname(older), "0002_newer.json"), "w") as fh:
        json.dump(newer, fh)

    assert compare_saved.main(["--storage", str(tmp_path / "saved"), "--noise", "0.15"]) == 0
    out = capsys.readouterr().out
    assert "0002_newer.json" in out.splitlines()[1]  # "new: ..." names the newest file
    verdicts = _verdicts(out)
    assert verdicts["test_tiny.py::test_slowed"] == "slower"
    assert verdicts["test_tiny.py::test_sped_up"] == "faster"
    assert verdicts["test_tiny.py::test_unchanged"] == "within noise"
    assert verdicts["epoch"] == "within noise"  # a timings_s figure, 5% longer
    assert "gone_figure" not in out  # in one run only: not compared
    assert "3.00x" in next(line for line in out.splitlines() if "test_slowed" in line)


def test_fewer_than_two_saved_runs_says_so(tmp_path, capsys):
    assert compare_saved.main(["--storage", str(tmp_path)]) == 0
    assert "fewer than two saved runs" in capsys.readouterr().out


def test_verdict_threshold():
    assert compare_saved.verdict(1.16, 0.15) == "slower"
    assert compare_saved.verdict(1.14, 0.15) == "within noise"
    assert compare_saved.verdict(1 / 1.14, 0.15) == "within noise"
    assert compare_saved.verdict(1 / 1.16, 0.15) == "faster"

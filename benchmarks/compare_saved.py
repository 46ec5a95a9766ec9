"""What got slower or faster between the two newest saved runs of the benchmark suites.

Reads the two newest pytest-benchmark JSON files under ``--storage`` (``make bench`` saves one
per run into ``benchmarks/saved/<machine>/``; newest by the run's own ``datetime``; the older
one is taken from the newest one's machine folder, since figures of two machines do not
compare) and prints, per benchmark present in both, the ratio of the medians (new over old)
and a verdict: ``slower`` when the new median exceeds the old by more than the noise
threshold, ``faster`` when the old exceeds the new by more than it, else ``within noise``.
Each named figure of the benchmark's ``extra_info["timings_s"]`` (seconds, lower is better:
an epoch's median, a round trip) is judged the same way on the line below it. Benchmarks in one
run only are listed as new or gone. The threshold (``--noise``, default 30%) is the spread of
single runs on the shared 2-core machine the suites were written on: two runs of the quick
suites on the same code there (2026-12-06) differed by up to 1.26x (a stale epoch's predictor
time, under a millisecond) and 0.78x (the read path), while 12 of their 55 medians and figures
moved by more than 15%; a slower verdict at 30% is worth rerunning, one below it is not news.

Called by ``make bench-compare`` after it ran the quick suites again; always exits 0.

    python benchmarks/compare_saved.py [--storage benchmarks/saved] [--noise 0.15] [OLD.json NEW.json]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STORAGE = os.path.join(ROOT, "benchmarks", "saved")
NOISE = 0.30


def verdict(ratio: float, noise: float) -> str:
    """``ratio``: new over old (seconds)."""
    if ratio > 1 + noise:
        return "slower"
    if ratio < 1 / (1 + noise):
        return "faster"
    return "within noise"


def _load(path: str) -> dict:
    with open(path) as fh:
        return json.load(fh)


def newest_two(storage: str) -> list:
    """The two newest saved runs' paths, oldest first: the newest overall and the one before it in
    the same machine folder; fewer where fewer were saved."""
    dated = []
    for path in glob.glob(os.path.join(storage, "**", "*.json"), recursive=True):
        try:
            dated.append((_load(path).get("datetime", ""), os.path.basename(path), path))
        except (OSError, ValueError):
            continue  # not a saved run
    if not dated:
        return []
    dated.sort()
    newest = dated[-1][2]
    same = [p for _, _, p in dated if os.path.dirname(p) == os.path.dirname(newest)]
    return same[-2:]


def _label(fullname: str) -> str:
    """``suite_x.py::test_y[param]`` of pytest-benchmark's ``fullname`` (its folder dropped)."""
    file, sep, rest = fullname.partition("::")
    return os.path.basename(file) + sep + rest


def _s(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def _row(label: str, old, new, noise: float) -> tuple:
    if not old or old <= 0 or not new or new <= 0:
        return (label, "-", "-", "-", "not comparable")
    ratio = new / old
    return (label, _s(old), _s(new), f"{ratio:.2f}x", verdict(ratio, noise))


def compare(old: dict, new: dict, noise: float = NOISE) -> list:
    """The rows (label, old, new, new/old, verdict) of the comparison of two saved runs
    (pytest-benchmark's JSON, loaded): per benchmark its median, then its ``timings_s``."""
    by_old = {b["fullname"]: b for b in old.get("benchmarks", [])}
    by_new = {b["fullname"]: b for b in new.get("benchmarks", [])}
    rows = []
    for name in sorted(by_new, key=lambda n: (by_new[n].get("group") or "", n)):
        if name not in by_old:
            rows.append((_label(name), "", "", "", "new (not in the older run)"))
            continue
        b_old, b_new = by_old[name], by_new[name]
        rows.append(_row(_label(name), b_old["stats"]["median"], b_new["stats"]["median"], noise))
        t_old = (b_old.get("extra_info") or {}).get("timings_s") or {}
        t_new = (b_new.get("extra_info") or {}).get("timings_s") or {}
        rows += [_row(f"    {key}", t_old[key], t_new[key], noise) for key in sorted(set(t_old) & set(t_new))]
    rows += [(_label(name), "", "", "", "gone (only in the older run)") for name in sorted(set(by_old) - set(by_new))]
    return rows


def table(rows: list) -> list:
    """``rows`` as aligned lines, under a header."""
    head = ("benchmark: median (indented: its extra_info timings_s)", "old", "new", "new/old", "verdict")
    width = max(len(r[0]) for r in [head] + rows)
    return [f"{r[0]:<{width}s}  {r[1]:>9s}  {r[2]:>9s}  {r[3]:>7s}  {r[4]}" for r in [head] + rows]


def _run_label(run: dict, path: str) -> str:
    commit = run.get("commit_info") or {}
    dirty = " + uncommitted changes" if commit.get("dirty") else ""
    return f"{os.path.basename(path)} ({run.get('datetime', '?')}, commit {str(commit.get('id'))[:10]}{dirty})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", metavar="OLD.json NEW.json",
                        help="two saved runs to compare (default: the two newest under --storage)")
    parser.add_argument("--storage", default=STORAGE, help="pytest-benchmark's --benchmark-storage folder")
    parser.add_argument("--noise", type=float, default=NOISE,
                        help="relative change taken as noise (default 0.30: single runs on a shared 2-core machine)")
    ns = parser.parse_args(argv)
    if ns.files and len(ns.files) != 2:
        parser.error("give two saved runs (OLD.json NEW.json), or none")
    paths = ns.files or newest_two(ns.storage)
    if len(paths) < 2:
        print(f"fewer than two saved runs under {ns.storage}: run `make bench` (it saves one), then compare")
        return 0
    old, new = (_load(p) for p in paths)
    print(f"old: {_run_label(old, paths[0])}\nnew: {_run_label(new, paths[1])}\n"
          f"noise threshold {ns.noise:.0%}: slower above {1 + ns.noise:.2f}x, faster below {1 / (1 + ns.noise):.2f}x")
    for line in table(compare(old, new, ns.noise)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

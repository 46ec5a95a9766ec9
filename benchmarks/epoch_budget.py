"""What a stale run's epochs would have had to cost to reach a time-to-target goal, from a
``bench_e2e.py --seeds`` result file (no training).

    python benchmarks/epoch_budget.py RESULT.json [RESULT.json ...] --target 2.5 [--graph G] [--link L]

Per run name, medians over the seeds (of every file given: seeds trained apart, same settings):
the interval-1 epoch, the run's sync and stale epochs (each the median of its epochs of that
mode), the epochs per sync k, the epochs it needed to the target against interval 1's, and how
much sooner it reached it. Then, at those same epochs, the stale epoch with which the median
seed would have reached the target ``--target`` times sooner, the syncs as they were, and the
sync epoch with which it would have, the stale epochs as they were. Per seed:

    mean epoch  m = (sync + (k - 1) * stale) / k,   needed  m' = m * sooner / target
    stale'      = (k * m' - sync) / (k - 1),        sync'   = k * m' - (k - 1) * stale

A seed that never reached the target has no budget: its epochs, not their cost, are what it
lacks. It counts as 0x in the median of how much sooner, as in the results report, and as the
lowest budget in the budgets' median ("never" when that is the median). The epochs criterion
(at most so many times interval 1's epochs) is not one that cheaper epochs can meet, so it is
printed beside the budget, not folded into it. A budget below zero is printed as "none": no
cost of that kind of epoch alone would have done it.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys


def budget(run: dict, target: float) -> dict:
    """One seed's run: its epochs' costs (ms) and what the target would have needed."""
    modes = run["breakdown"]
    sync, stale = modes["sync"]["time_s"] * 1e3, modes["stale"]["time_s"] * 1e3
    k = run["epochs_per_sync"]
    out = dict(sync_ms=sync, stale_ms=stale, k=k, sooner=run.get("time_to_target_speedup"),
               epochs=run.get("epochs_to_target_ratio"))
    if out["sooner"] is None:
        return out
    needed = (sync + (k - 1) * stale) / k * out["sooner"] / target
    out.update(stale_needed_ms=(k * needed - sync) / (k - 1), sync_needed_ms=k * needed - (k - 1) * stale)
    return out


def table(results: list, target: float, graph: str | None = None, link: str | None = None) -> list:
    """Per stale run name of ``results`` (``bench_e2e.py --seeds`` files): medians over seeds."""
    per_name: dict = {}
    for result in results:
        graphs = result["graphs"]
        links = graphs[graph or next(iter(graphs))]
        for seed in links[link or next(iter(links))]["by_seed"].values():
            base = next(r for r in seed["runs"] if r["name"] == "interval1")
            for run in seed["runs"]:
                if "stale" not in run["breakdown"]:
                    continue
                row = budget(run, target)
                row["interval1_ms"] = base["epoch_s"] * 1e3
                per_name.setdefault(run["name"], []).append(row)
    rows = []
    for name, seeds in per_name.items():
        row = dict(name=name, seeds=len(seeds), never=sum(s["sooner"] is None for s in seeds),
                   sooner=statistics.median(s["sooner"] or 0.0 for s in seeds))
        for key in ("interval1_ms", "sync_ms", "stale_ms", "k", "epochs"):
            values = [s[key] for s in seeds if s.get(key) is not None]
            row[key] = statistics.median(values) if values else None
        for key in ("stale_needed_ms", "sync_needed_ms"):  # a seed that never reached: no cost would do
            needed = statistics.median(s.get(key, -math.inf) for s in seeds)
            row[key] = None if needed == -math.inf else needed
        rows.append(row)
    return rows


def _fmt(value, digits=0):
    return "never" if not value else f"{value:.{digits}f}"


def _budget(value):
    return "never" if value is None else "none" if value < 0 else f"{value:.0f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="bench_e2e.py --seeds result files")
    parser.add_argument("--target", type=float, required=True, help="times sooner than interval 1")
    parser.add_argument("--graph", default=None)
    parser.add_argument("--link", default=None)
    ns = parser.parse_args(argv)
    if ns.target <= 0:
        parser.error(f"--target must be positive, got {ns.target}")
    results = []
    for path in ns.results:
        with open(path) as fh:
            results.append(json.load(fh))
    rows = table(results, ns.target, ns.graph, ns.link)
    print(f"| run | seeds (never) | interval 1 ms | sync ms | stale ms | epochs per sync | epochs vs interval 1 "
          f"| x sooner | stale ms for {ns.target}x | sync ms for {ns.target}x |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['name']} | {r['seeds']} ({r['never']}) | {_fmt(r['interval1_ms'])} | {_fmt(r['sync_ms'])} | "
              f"{_fmt(r['stale_ms'])} | {_fmt(r['k'], 1)} | {_fmt(r['epochs'], 2)} | {_fmt(r['sooner'], 2)} | "
              f"{_budget(r['stale_needed_ms'])} | {_budget(r['sync_needed_ms'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

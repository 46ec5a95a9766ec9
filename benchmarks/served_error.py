"""The served rows' error of stale runs trained with ``measure_staleness`` (the true rows pulled
beside the served ones, for measurement only), per seed and over seeds.

    python benchmarks/served_error.py --graph syn200k --link 1gbit --epochs 100 \\
        --configs benchmarks/configs/paper-error.json --seeds 0,1,2 --out FILE.json

reads the runs ``bench_e2e.py`` kept for those entries (``benchmarks/results/e2e_runs/``; train
them first with the same flags), writes per run and stale epoch the mean absolute L2 error of the
predicted rows and of the cache's rows on the same rows (``pred_rows_l2``,
``pred_rows_cache_l2``) and of every served row against the cache's (``staleness_l2``,
``cache_l2``), and prints per entry the median over seeds of the predicted rows' error as a
fraction of the cache's on them.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import bench_e2e  # noqa: E402
from benchmarks._sweep import run_sweep  # noqa: E402

KEYS = ("pred_rows_l2", "pred_rows_cache_l2", "staleness_l2", "cache_l2")


def collect(graph: str, link: str, epochs: int, configs: list, seeds: list) -> dict:
    """Per entry (with ``measure_staleness``) and seed, its stale epochs' errors."""
    out_dir = os.path.join(bench_e2e.RESULTS, "e2e_runs", f"{graph}-{link}-w4")
    base = bench_e2e.model_args(None) + (["--bandwidth", link] if link != "unshaped" else [])
    out = {}
    for c in configs:
        if not c.get("measure_staleness"):
            continue
        entries = [dict({k: v for k, v in c.items() if k != "name"}, epochs=epochs, seed=s) for s in seeds]
        metrics = run_sweep(bench_e2e.GRAPHS[graph], 4, entries, out_dir, base_args=base)  # kept runs: read back
        out[c["name"]] = {str(s): [dict(epoch=e["epoch"], **{k: e[k] for k in KEYS if k in e})
                                   for e in m["epochs"] if e["mode"] == "stale"]
                          for s, m in zip(seeds, metrics)}
    return out


def ratios(errors: dict) -> dict:
    """Per entry: per seed the predicted rows' mean error over the stale epochs as a fraction of
    the cache's on the same rows, and the served rows' against the cache's."""
    table = {}
    for name, by_seed in errors.items():
        pred, served = [], []
        for epochs in by_seed.values():
            rows = [e for e in epochs if e.get("pred_rows_cache_l2")]
            pred.append(sum(e["pred_rows_l2"] for e in rows) / sum(e["pred_rows_cache_l2"] for e in rows))
            served.append(sum(e["staleness_l2"] for e in epochs) / sum(e["cache_l2"] for e in epochs))
        table[name] = dict(predicted_over_cache=pred, served_over_cache=served)
    return table


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--graph", default="syn200k")
    p.add_argument("--link", default="1gbit")
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--configs", required=True)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--out", required=True)
    ns = p.parse_args(argv)
    with open(ns.configs) as fh:
        configs = json.load(fh)
    errors = collect(ns.graph, ns.link, ns.epochs, configs, [int(s) for s in ns.seeds.split(",")])
    table = ratios(errors)
    with open(ns.out, "w") as fh:
        json.dump(dict(graph=ns.graph, link=ns.link, epochs=ns.epochs, errors=errors, ratios=table), fh)
    for name, r in table.items():
        print(f"{name}: predicted rows' error / the cache's on them, median {statistics.median(r['predicted_over_cache']):.3f} "
              f"(seeds {', '.join(f'{x:.3f}' for x in r['predicted_over_cache'])}); every served row's / the cache's "
              f"{statistics.median(r['served_over_cache']):.3f}")
    print(f"wrote {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

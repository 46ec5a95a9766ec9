"""Accuracy of quantized halo exchange against float32: paired seeds on Cora and CiteSeer.

Interval 1, 4 workers, 3-layer GCN (hidden 16, dropout 0.5), 200 epochs, exact evaluation
after every epoch; reports test accuracy at the best validation epoch and at the end, mean
and std over seeds, for float32 and each bit width. Writes
``benchmarks/results/quantize_accuracy.json``.

    python benchmarks/quantize_accuracy.py [--seeds 5] [--datasets cora,citeseer] [--bits 8,4]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks._sweep import run_sweep  # noqa: E402

from dgl_sni.data import default_data_dir  # noqa: E402

SHARED = default_data_dir()  # ../shared/data, or $DGL_SNI_DATA_DIR
MODEL = ["--model", "gcn", "--layers", 3, "--hidden", 16, "--dropout", 0.5, "--eval-every", 1]


def _best(epochs):
    i = max(range(len(epochs)), key=lambda k: (epochs[k]["val_acc"], -k))
    return epochs[i]["test_acc"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--datasets", default="cora,citeseer")
    parser.add_argument("--bits", default="8,4")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    ns = parser.parse_args(argv)
    bits = [0] + [int(b) for b in ns.bits.split(",")]
    report = {}
    for name in ns.datasets.split(","):
        path = os.path.join(SHARED, f"{name}.npz")
        if not os.path.exists(path):
            print(f"{name}: {path} not present, skipped")
            continue
        runs = [dict(seed=s, quantize=b, epochs=ns.epochs) for b in bits for s in range(ns.seeds)]
        out = os.path.join(ROOT, "benchmarks", "results", "quantize_runs", f"{name}-w{ns.workers}")
        metrics = run_sweep(["--dataset", path], ns.workers, runs, out, base_args=MODEL)
        rows = {}
        for b in bits:
            ms = [m for m, r in zip(metrics, runs) if r["quantize"] == b]
            best = [_best(m["epochs"]) for m in ms]
            final = [m["epochs"][-1]["test_acc"] for m in ms]
            bytes_ = statistics.median(e["bytes_sent"] + e["bytes_recv"] for m in ms for e in m["epochs"][5:])
            rows[f"q{b}" if b else "float32"] = dict(
                test_at_best_val_mean=statistics.mean(best), test_at_best_val_std=statistics.pstdev(best),
                final_test_mean=statistics.mean(final), final_test_std=statistics.pstdev(final),
                bytes_per_epoch=bytes_, seeds=len(ms))
        report[name] = rows
        for k, v in rows.items():
            print(f"{name:9s} {k:8s} test@best-val {v['test_at_best_val_mean']:.4f} +- {v['test_at_best_val_std']:.4f}"
                  f"  final {v['final_test_mean']:.4f} +- {v['final_test_std']:.4f}  bytes/epoch {v['bytes_per_epoch']/1e6:.2f} MB",
                  flush=True)
    os.makedirs(os.path.join(ROOT, "benchmarks", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "benchmarks", "results", "quantize_accuracy.json"), "w") as fh:
        json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

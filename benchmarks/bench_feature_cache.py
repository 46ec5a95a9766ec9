"""The stock-script switch's feature cache on DGL's own mini-batch example.

Runs DGL 2.1.0's ``examples/distributed/graphsage/node_classification.py``, unchanged
(read from the DGL mirror, or ``--example PATH``), under ``dgl-sni launch`` at 1 Gbit/s on
2 and 4 emulated machines: stock DGL, ``DGL_SNI=1`` with the cache off (budget 0) and with
the cache at ``--budget`` (default 20% of each trainer's remote feature rows). The example
is seeded from outside (torch, numpy, random, DGL, in every process) and runs with sampler
processes 0. Reports per machine count and run: remote feature bytes per epoch (the
switch's per-pull counters for ``features``, summed over trainers: the first epoch, which
fills the cache, apart, the mean of the later epochs, and the mean of the later half of
the epochs, once the re-plans by counted accesses have settled), median epoch
time (the example's own "Epoch Time(s)"), final test accuracy, and whether the losses
equal stock DGL's (with ``--repeat 2`` or more, also whether stock DGL's own losses repeat:
with 4 machines they do not, its servers sample for several clients in arrival order).
Writes ``benchmarks/results/feature_cache.json``.

    python benchmarks/bench_feature_cache.py [--workers 2 4] [--epochs 8] [--nodes 100000]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DGL_MIRROR = "/work/.mirror/dmlc+dgl/repo"
EXAMPLE = "examples/distributed/graphsage/node_classification.py"
SEEDED = ("import random, runpy, sys; import numpy, torch, dgl; random.seed(0); numpy.random.seed(0); "
          "torch.manual_seed(0); dgl.seed(0); path = sys.argv[1]; sys.argv = sys.argv[1:]; "
          "runpy.run_path(path, run_name='__main__')")
LOSS = re.compile(r"Part (\d+) \| Epoch (\d+) \| Step (\d+) \| Loss ([\d.]+)")
EPOCH_TIME = re.compile(r"Part (\d+), Epoch Time\(s\): ([\d.]+)")
TEST_ACC = re.compile(r"Part (\d+), Val Acc ([\d.]+), Test Acc ([\d.]+)")


def _example(path: str | None, into: str) -> str:
    """The example, unchanged, at ``into/ex/node_classification.py``."""
    os.makedirs(os.path.join(into, "ex"), exist_ok=True)
    dest = os.path.join(into, "ex", "node_classification.py")
    if path:
        shutil.copy(path, dest)
    else:
        text = subprocess.run(["git", "-C", DGL_MIRROR, "show", f"v2.1.0:{EXAMPLE}"], check=True,
                              capture_output=True, text=True).stdout
        with open(dest, "w") as fh:
            fh.write(text)
    return dest


def _partition(work: str, parts: int, nodes: int, feat_dim: int, extra=()) -> str:
    """A generated graph partitioned for ``parts`` machines (``extra``: more dataset flags, such
    as ``--avg-degree``)."""
    out = os.path.join(work, f"parts{parts}")
    subprocess.run([sys.executable, "-m", "dgl_sni.cli", "partition", "--dataset", "synthetic",
                    "--nodes", str(nodes), "--feat-dim", str(feat_dim), *map(str, extra), "--parts", str(parts),
                    "--out", out, "--graph-name", "graph"], check=True, cwd=ROOT,
                   env=dict(os.environ, PYTHONPATH=ROOT))
    return os.path.join(out, "graph.json")


def _run(work: str, part_config: str, workers: int, epochs: int, flag_env: dict, tag: str,
         batch: int = 500, eval_every: int | None = None) -> dict:
    """One run of the example (``eval_every``: its evaluations, default only after the last
    epoch). Returns its losses, median epoch time, last test accuracy and, per evaluation of
    part 0, ``test_accs``, with part 0's ``epoch_times_s``; under ``DGL_SNI`` its feature bytes."""
    stats = os.path.join(work, f"{tag}-sni{{rank}}.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGL_SNI")}
    env.update(flag_env, DGL_SNI_STATS=stats, PYTHONPATH=ROOT)
    cmd = [sys.executable, "-m", "dgl_sni.cli", "launch", "--workers", str(workers), "--part-config",
           part_config, "--bandwidth", "1gbit", "--timeout", "1500", "--", sys.executable, "-c", SEEDED,
           "ex/node_classification.py",  # by a relative path: launch keeps the working directory
           "--graph_name", "graph", "--ip_config", "{ip_config}", "--part_config", "{part_config}",
           "--num_epochs", str(epochs), "--eval_every", str(eval_every or epochs), "--log_every", "1",
           "--batch_size", str(batch)]
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{tag} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    out = proc.stdout
    losses = sorted((int(p), int(e), int(s), float(v)) for p, e, s, v in LOSS.findall(out))
    times = [float(t) for _, t in EPOCH_TIME.findall(out)]
    accs = [float(t) for _, _, t in TEST_ACC.findall(out)]
    run = dict(losses=losses, epoch_time_s=statistics.median(times) if times else None,
               test_acc=accs[-1] if accs else None, final_line=bool(accs),
               test_accs=[float(t) for part, _, t in TEST_ACC.findall(out) if part == "0"],
               epoch_times_s=[float(t) for part, t in EPOCH_TIME.findall(out) if part == "0"])
    if "DGL_SNI" in flag_env:
        per = [json.load(open(stats.replace("{rank}", str(r)))) for r in range(workers)]
        feats = [p.get("features", {}) for p in per]
        # per epoch: each trainer's training pulls (one per step, the step lines of its part),
        # summed over trainers; the evaluation's pulls come after them
        by_epoch = [0] * epochs
        for rank, f in enumerate(feats):
            log = f.get("pulled_bytes_by_pull", [])
            steps = [sum(1 for p, e, _, _ in losses if p == rank and e == ep + 1) for ep in range(epochs)]
            at = 0
            for ep, n in enumerate(steps):
                by_epoch[ep] += sum(log[at:at + n])
                at += n
            run.setdefault("eval_feature_bytes", 0)
            run["eval_feature_bytes"] += sum(log[at:])
        run["remote_feature_bytes_by_epoch"] = by_epoch
        run["remote_feature_bytes_first_epoch"] = by_epoch[0]
        run["remote_feature_bytes_per_epoch"] = statistics.mean(by_epoch[1:]) if epochs > 1 else by_epoch[0]
        # the cache re-plans by counted accesses: its steady state is the later half of the run
        run["remote_feature_bytes_later_half"] = statistics.mean(by_epoch[epochs // 2:])
        run["remote_feature_rows_asked"] = sum(f.get("remote_rows", 0) for f in feats)
        run["feature_rows_from_cache"] = sum(f.get("served_rows", 0) for f in feats)
        run["cache_capacity_rows"] = sum(f.get("cache_capacity_rows", 0) for f in feats)
        run["roles"] = {k: v.get("role") for k, v in per[0].items() if k != "__switch__"}
    return run


def compare_cache(work: str, workers: int, epochs: int, nodes: int, feat_dim: int, budget: str,
                  repeat: int = 1, stock: bool = True) -> dict:
    """On ``workers`` machines at 1 Gbit/s (the example copied into ``work`` by :func:`_example`):
    the example under ``DGL_SNI=1`` with the cache off (budget 0) and at ``budget``, and with
    ``stock``, stock DGL; each ``repeat`` times, interleaved. Returns the runs (epoch time: the
    median over the repeats) and the remote feature bytes' ratios, off over on; prints one line.
    Called by :func:`main` per machine count and by the feature cache's benchmark suite."""
    part_config = _partition(work, workers, nodes, feat_dim)
    envs = {"stock": {}, "off": dict(DGL_SNI="1", DGL_SNI_CACHE_BUDGET="0"),
            "on": dict(DGL_SNI="1", DGL_SNI_CACHE_BUDGET=budget)}
    if not stock:
        del envs["stock"]
    runs = {name: [] for name in envs}
    for rep in range(repeat):  # interleaved: the machine's load drifts
        for name in runs:
            runs[name].append(_run(work, part_config, workers, epochs, envs[name], f"{name}{workers}-{rep}"))
    kept = {name: dict(rs[0], epoch_time_s=statistics.median(r["epoch_time_s"] for r in rs),
                       epoch_times_s=[r["epoch_time_s"] for r in rs]) for name, rs in runs.items()}
    off, on = kept["off"], kept["on"]
    ratio = off["remote_feature_bytes_per_epoch"] / max(on["remote_feature_bytes_per_epoch"], 1)
    later = off["remote_feature_bytes_later_half"] / max(on["remote_feature_bytes_later_half"], 1)
    out = {}
    times = f"off {off['epoch_time_s']:.3f} s, on {on['epoch_time_s']:.3f} s"
    accs = f"{off['test_acc']} / {on['test_acc']}"
    if stock:
        base = out["stock"] = kept["stock"]
        base["reproducible"] = all(r["losses"] == base["losses"] for r in runs["stock"])
        for run in (off, on):
            run["losses_equal_stock"] = run["losses"] == base["losses"] and bool(base["losses"])
        times = f"stock {base['epoch_time_s']:.3f} s, " + times + (
            f"; losses equal stock: off {off['losses_equal_stock']}, on {on['losses_equal_stock']} "
            f"(stock reproducible: {base['reproducible']})")
        accs = f"{base['test_acc']} / " + accs
    out.update(cache_off=off, cache_on=on, bytes_ratio=ratio, bytes_ratio_later_half=later)
    print(f"{workers} machines at 1gbit: remote feature bytes/epoch after the first "
          f"{off['remote_feature_bytes_per_epoch']:.0f} "
          f"-> {on['remote_feature_bytes_per_epoch']:.0f} ({ratio:.2f}x fewer; later half of the "
          f"epochs {later:.2f}x; first epoch "
          f"{off['remote_feature_bytes_first_epoch']:.0f} -> {on['remote_feature_bytes_first_epoch']:.0f}), "
          f"epoch time {times}; test acc {accs}", flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--nodes", type=int, default=100000)
    ap.add_argument("--feat-dim", type=int, default=128)
    ap.add_argument("--budget", default="20%", help="feature_cache_bytes of the cached run")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each kind (epoch time: their median)")
    ap.add_argument("--example", default=None, help="the example file (default: from the DGL mirror)")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "feature_cache.json"))
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="bench-feature-cache-")
    results = dict(config=vars(args), runs={})
    try:
        _example(args.example, work)
        for n in args.workers:
            results["runs"][str(n)] = compare_cache(work, n, args.epochs, args.nodes, args.feat_dim, args.budget,
                                                    args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(results, fh, indent=1)
    print(f"results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Fingerprint of training results: what a change that must not change any result is checked by.

Trains a fixed list of configurations, every setting given explicitly (so a change of
defaults or presets cannot move them), and writes each run's per-epoch losses, accuracies,
modes and row and byte counters (everything but timings) to a JSON file. ``--compare OLD``
then says, run by run, whether the new file equals the old one to the bit:

    python benchmarks/fingerprint.py --out before.json            # on the old commit
    python benchmarks/fingerprint.py --out after.json --compare before.json

The runs: exact training on 2 and 4 workers (GCN, SAGE, GAT); on 4 workers at 1 Gbit/s the
stale settings at intervals 2 and 5, the gated predictor with its drift transfer, the trend
predictors, every sync policy, every stale-gradient policy and sync-halo form, 4-bit rows,
staleness measurement; the storage tier with and without prediction; and the stock-script
switch's results and stats under an explicit ``DGL_SNI_CONFIG``. Needs root (emulated
machines); takes about 15 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GRAPH = ["--dataset", "synthetic", "--nodes", "20000", "--avg-degree", "10", "--classes", "8",
         "--feat-dim", "64", "--data-seed", "0"]
MODEL = dict(layers=3, hidden=16, dropout=0.5, lr=0.01, weight_decay=5e-4, seed=0, epochs=20, eval_every=1)
# the stale settings of dgl-sni train's fast configuration, every one named
FAST = dict(sync_interval=2, warmup=5, predictor="cache", sampling_ratio=0.1, stale_grad="last",
            sync_policy="fixed", smooth=0.75, quantize=8, stale_halo="summed", sync_halo="auto",
            measure_staleness=False, stale_eval=False, transfer=True, agent="process", row_average=0.0,
            grad_average=0.0)
EXACT = dict(sync_interval=1, warmup=5, predictor="cache", sampling_ratio=0.1, stale_grad="last",
             sync_policy="fixed", smooth=0.75, quantize=0, stale_halo="rows", sync_halo="rows",
             measure_staleness=False, stale_eval=False, transfer=True, agent="process")


def _run(name, **kw):
    return dict(name=name, **MODEL, **kw)


SWEEPS = {
    "w2": dict(workers=2, bandwidth=None, runs=[
        _run("exact-gcn", model="gcn", **EXACT),
        _run("exact-sage", model="sage", **EXACT),
        _run("exact-gat", model="gat", heads=2, **EXACT),
    ]),
    "w4-1gbit": dict(workers=4, bandwidth="1gbit", runs=[
        _run("exact-gcn", model="gcn", **EXACT),
        _run("interval2", model="gcn", **FAST),
        _run("interval5", model="gcn", **dict(FAST, sync_interval=5)),
        _run("gated-transfer", model="gcn", **dict(FAST, predictor="gated")),
        _run("gated-transfer-measured", model="gcn", **dict(FAST, predictor="gated", measure_staleness=True)),
        _run("linear-trend", model="gcn", **dict(FAST, predictor="linear-trend", stale_halo="rows",
                                                 sync_halo="rows")),
        _run("holt", model="gcn", **dict(FAST, predictor="holt", stale_halo="rows", sync_halo="rows")),
        _run("pipeline", model="gcn", **dict(FAST, sync_policy="pipeline", smooth=0.0, quantize=0,
                                             stale_halo="rows", sync_halo="rows")),
        _run("drift", model="gcn", **dict(FAST, sync_policy="drift", sync_interval=5, sync_drift=0.2)),
        _run("guarded", model="gcn", **dict(FAST, sync_policy="guarded", sync_interval=5, sync_loss_gap=0.01)),
        _run("adaptive", model="gcn", **dict(FAST, sync_policy="adaptive", predictor="gated", drift_bound=0.05,
                                             stale_halo="rows", sync_halo="rows")),
        _run("grad-exchange", model="gcn", **dict(FAST, stale_grad="exchange")),
        _run("grad-skip", model="gcn", **dict(FAST, stale_grad="skip")),
        _run("sync-inputs", model="gcn", **dict(FAST, sync_halo="inputs")),
        _run("sync-summed", model="gcn", **dict(FAST, sync_halo="summed")),
        _run("sync-rows", model="gcn", **dict(FAST, sync_halo="rows")),
        _run("stale-rows", model="gcn", **dict(FAST, stale_halo="rows", sync_halo="rows")),
        _run("quantize4", model="gcn", **dict(FAST, quantize=4)),
        _run("stale-eval", model="gcn", **dict(FAST, stale_eval=True)),
        _run("sage-interval2", model="sage", **FAST),
        _run("gat-interval2", model="gat", heads=2, **dict(FAST, stale_halo="rows", sync_halo="rows")),
        _run("inline-agent", model="gcn", **dict(FAST, predictor="gated", agent="inline")),
    ]),
}
TIER = {  # runs on the storage tier: tier settings are not sweepable, one cluster each
    "tier-exact": dict(workers=2, run=_run("tier-exact", model="gcn", **dict(EXACT, stale_halo="rows"))),
    "tier-predicted": dict(workers=2, run=_run("tier-predicted", model="gcn",
                                               **dict(FAST, quantize=0, stale_halo="rows", sync_halo="rows"))),
    "tier-gated": dict(workers=2, run=_run("tier-gated", model="gcn",
                                           **dict(FAST, predictor="gated", quantize=0, stale_halo="rows",
                                                  sync_halo="rows"))),
}
SWITCH_CONFIG = dict(sync_interval=3, warmup=2, predictor="cache", sampling_ratio=0.1, stale_grad="exchange",
                     sync_policy="fixed", smooth=0.0, quantize=0, stale_halo="rows", window=4, beta=0.2, lam=0.2,
                     agent="process", feature_cache_bytes="256M")


# what the storage tier's reads and writes counted depends on its threads' timing (prefetching,
# evictions); its results do not
TIMED = ("storage_", "fwd_bytes_", "bwd_bytes_", "cache_", "layer_times")


def _clean(rec):
    """A record without its timings (what two runs of the same code share to the bit)."""
    if isinstance(rec, dict):
        return {k: _clean(v) for k, v in rec.items()
                if not k.endswith("_s") and k not in ("peak_rss_mb", "allocator") and not k.startswith(TIMED)}
    if isinstance(rec, list):
        return [_clean(v) for v in rec]
    return rec


def _cli(*args, env=None):
    full = dict(os.environ, PYTHONPATH=ROOT, PYTHONWARNINGS="ignore", **(env or {}))
    proc = subprocess.run([sys.executable, "-m", "dgl_sni.cli", *map(str, args)], capture_output=True,
                          text=True, env=full, cwd=ROOT)
    if proc.returncode:
        raise SystemExit(f"dgl-sni {' '.join(map(str, args))} failed:\n{proc.stderr[-4000:]}")


def _fingerprint(metrics):
    return dict(epochs=_clean(metrics["epochs"]), in_effect=_clean(metrics.get("in_effect", {})))


def run_sweeps(tmp, only):
    out = {}
    for key, sweep in SWEEPS.items():
        runs = [r for r in sweep["runs"] if not only or r["name"] in only]
        if not runs:
            continue
        folder = os.path.join(tmp, key)
        os.makedirs(folder)
        with open(os.path.join(folder, "sweep.json"), "w") as fh:
            json.dump([{k: v for k, v in r.items() if k != "name"} for r in runs], fh)
        args = [*GRAPH, "--workers", sweep["workers"], "--quiet", "--sweep", os.path.join(folder, "sweep.json"),
                "--metrics", os.path.join(folder, "m")]
        if sweep["bandwidth"]:
            args += ["--bandwidth", sweep["bandwidth"]]
        print(f"fingerprint: {key}: {len(runs)} runs", file=sys.stderr, flush=True)
        _cli("train", *args)
        for i, r in enumerate(runs):
            with open(os.path.join(folder, "m", f"run{i:03d}.json")) as fh:
                out[f"{key}/{r['name']}"] = _fingerprint(json.load(fh))
    for key, tier in TIER.items():
        if only and key not in only:
            continue
        folder = os.path.join(tmp, key)
        os.makedirs(folder)
        run = tier["run"]
        flags = []
        for k, v in run.items():
            if k == "name" or v is None:
                continue
            flag = "--" + k.replace("_", "-")
            if isinstance(v, bool):
                if v != {"transfer": True}.get(k, False):
                    flags.append(("--no-" + k.replace("_", "-")) if k == "transfer" else flag)
                continue
            flags += [flag, v]
        print(f"fingerprint: {key}", file=sys.stderr, flush=True)
        _cli("train", *GRAPH, "--workers", tier["workers"], "--quiet", "--storage-tier", os.path.join(folder, "tier"),
             "--subparts", 3, "--host-cache-budget", "1M", "--metrics", os.path.join(folder, "m.json"), *flags)
        with open(os.path.join(folder, "m.json")) as fh:
            out[key] = _fingerprint(json.load(fh))
    if not only or "switch" in only:
        out["switch"] = run_switch(tmp)
    return out


def run_switch(tmp):
    """The stock script of the tests under the switch with every setting explicit."""
    from dgl_sni.data import load_npz, save_npz, synthetic
    from dgl_sni.partition import partition
    folder = os.path.join(tmp, "switch")
    os.makedirs(folder)
    npz = os.path.join(folder, "g.npz")
    save_npz(synthetic(num_nodes=1500, avg_degree=8, num_classes=5, feat_dim=24, seed=3), npz)
    parts = partition(load_npz(npz), 2, os.path.join(folder, "parts"), method="metis", graph_name="graph")
    with open(os.path.join(folder, "sni.json"), "w") as fh:
        json.dump(SWITCH_CONFIG, fh)
    print("fingerprint: switch", file=sys.stderr, flush=True)
    _cli("launch", "--workers", 2, "--part-config", parts, "--", sys.executable,
         os.path.join(ROOT, "tests", "scripts", "stock_dist_script.py"), "--ip_config", "{ip_config}",
         "--part_config", "{part_config}", "--out", folder, "--epochs", 8,
         env=dict(DGL_SNI_CONFIG=os.path.join(folder, "sni.json"),
                  DGL_SNI_STATS=os.path.join(folder, "sni{rank}.json")))
    out = {}
    for r in (0, 1):
        with open(os.path.join(folder, f"rank{r}.json")) as fh:
            out[f"rank{r}"] = json.load(fh)
        with open(os.path.join(folder, f"sni{r}.json")) as fh:
            stats = json.load(fh)
        stats.get("__switch__", {}).pop("config", None)  # the settings as the switch holds them
        out[f"stats{r}"] = _clean(stats)
    return out


def compare(new, old):
    """Names of the runs that differ (or exist in one file only), each with its first difference."""
    bad = []
    new, old = _clean(new), _clean(old)
    for name in sorted(set(new) | set(old)):
        if name not in new or name not in old:
            bad.append(f"{name}: only in {'the new' if name in new else 'the old'} file")
        elif new[name] != old[name]:
            bad.append(f"{name}: {_first_difference(new[name], old[name])}")
    return bad


def _first_difference(a, b, path=""):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{path}/{k} only in one"
            if a[k] != b[k]:
                return _first_difference(a[k], b[k], f"{path}/{k}")
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} vs {len(b)} entries"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path}: {a!r} vs {b!r}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="write the fingerprint here (JSON)")
    parser.add_argument("--compare", help="a fingerprint to compare with; exit 1 where a run differs")
    parser.add_argument("--only", default="", help="comma-separated run names (sweep/name, tier-*, switch)")
    ns = parser.parse_args(argv)
    only = {n.split("/")[-1] for n in ns.only.split(",") if n}
    with tempfile.TemporaryDirectory(prefix="sni-fp-") as tmp:
        found = run_sweeps(tmp, only)
    with open(ns.out, "w") as fh:
        json.dump(found, fh, indent=1, sort_keys=True)
    print(f"fingerprint: {len(found)} runs written to {ns.out}", file=sys.stderr)
    if ns.compare:
        with open(ns.compare) as fh:
            old = json.load(fh)
        if only:
            old = {k: v for k, v in old.items() if k in found}
        bad = compare(found, old)
        for line in bad:
            print(f"DIFFERS {line}")
        print(f"fingerprint: {len(found) - len(bad)} of {len(set(found) | set(old))} runs equal to the bit")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One partitioner run in a fresh process, for ``bench_partitioner.py``.

    python benchmarks/_partition_worker.py --graph SPEC --method METHOD --parts P --out FILE

``SPEC``: ``npy:DIR`` (``src.npy``, ``dst.npy``, ``meta.json`` with ``num_nodes``, as the
benchmark caches the synthetic graph) or ``npz:PATH`` (a dataset file for
:func:`dgl_sni.data.load_npz`). Methods: ``switching`` (ours, default settings),
``switching-plain`` (ours, ``levels=0``: the single-level algorithm), ``metis``
(``dgl.metis_partition_assignment`` on a ``dgl.graph`` of the arrays) and ``random``
(balanced random).

Memory: after the imports and the graph load (``src``/``dst`` int64 arrays only) the
worker records VmRSS and resets the peak (``/proc/self/clear_refs`` 5), so VmHWM after the
method is the method's peak including the loaded graph; ``peak_over_loaded_mb`` is the
difference. The time and peak cover everything the method builds from the COO arrays
(CSR for ours, the DGLGraph for METIS). Quality is evaluated afterwards with
``storage_tier.partitioner.cut_stats``.
"""
import argparse
import gc
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
METHODS = ("switching", "switching-plain", "metis", "random")


def status_kb(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def load_graph(spec: str):
    kind, _, where = spec.partition(":")
    if kind == "npy":
        with open(os.path.join(where, "meta.json")) as fh:
            meta = json.load(fh)
        return (meta.get("name", "graph"), np.load(os.path.join(where, "src.npy")),
                np.load(os.path.join(where, "dst.npy")), int(meta["num_nodes"]))
    if kind == "npz":
        from dgl_sni.data import load_npz
        data = load_npz(where)
        out = (data.name, data.src, data.dst, data.num_nodes)
        del data
        return out
    raise SystemExit(f"unknown graph spec {spec!r}: use npy:DIR or npz:PATH")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", required=True)
    parser.add_argument("--method", required=True, choices=METHODS)
    parser.add_argument("--parts", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--extra-seeds", type=int, default=0,
                        help="ours: also run seeds 1..N after the measured run, report their cuts")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import dgl_sni  # noqa: F401  (DGL shims; imports no torch/dgl by itself)
    if args.method == "metis":
        import torch
        import dgl
        from dgl_sni.partition import _silenced
    elif args.method.startswith("switching"):
        from storage_tier.partitioner import partition_from_edges
    rss_imports = status_kb("VmRSS")

    name, src, dst, n = load_graph(args.graph)
    gc.collect()
    rss_loaded = status_kb("VmRSS")
    hwm_reset = reset_peak()
    extra = {}
    start = time.perf_counter()
    if args.method == "metis":
        g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=n)
        core = time.perf_counter()
        with _silenced():
            parts = dgl.metis_partition_assignment(g, args.parts).numpy()
        extra["seconds_core"] = time.perf_counter() - core
        del g
    elif args.method == "random":
        parts = np.random.default_rng(args.seed).permutation(n) % args.parts
    else:
        kw = dict(levels=0) if args.method == "switching-plain" else {}
        parts, info = partition_from_edges(src, dst, n, args.parts, seed=args.seed, return_info=True, **kw)
        extra.update(seconds_core=info.seconds, levels=info.levels, iterations=info.iterations,
                     stop_reason=info.stop_reason, restored_start=info.restored_start,
                     dstpart_dtype=info.dstpart_dtype, history=info.history.tolist())
    seconds = time.perf_counter() - start
    peak = status_kb("VmHWM")
    rss_after = status_kb("VmRSS")

    from storage_tier.partitioner import cut_stats
    stats = cut_stats(src, dst, parts, args.parts)
    if args.extra_seeds and args.method.startswith("switching"):
        cuts = [stats["edge_cut"]]
        for seed in range(args.seed + 1, args.seed + 1 + args.extra_seeds):
            other, info = partition_from_edges(src, dst, n, args.parts, seed=seed, return_info=True, **kw)
            cuts.append(info.edge_cut)
        extra["seed_cuts"] = cuts
    record = dict(graph=name, num_nodes=int(n), num_edges=int(src.size), method=args.method,
                  parts=args.parts, seed=args.seed, seconds=seconds,
                  rss_imports_mb=rss_imports / 1024, rss_loaded_mb=rss_loaded / 1024,
                  peak_rss_mb=peak / 1024, peak_over_loaded_mb=(peak - rss_loaded) / 1024,
                  rss_after_mb=rss_after / 1024, hwm_reset=hwm_reset,
                  edge_cut=stats["edge_cut"], alpha=stats["alpha"], balance=stats["balance"],
                  part_sizes=stats["part_sizes"], **extra)
    if not hwm_reset:
        record["note"] = "VmHWM could not be reset: peak includes the graph load"
    with open(args.out, "w") as fh:
        json.dump(record, fh)


if __name__ == "__main__":
    main()

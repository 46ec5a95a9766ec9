"""Storage tier benchmark: bytes moved per epoch versus two baselines, epoch time, I/O bandwidth.

Runs, on one synthetic graph and one model (default: 200k nodes, average degree 10,
64 features; 3-layer SAGE, hidden 128, dropout 0.5; P = 8 sub-partitions from the
switching-aware partitioner):

1. the tier (regather, bypass) for GCN, SAGE and GAT with a host cache of
   ``--budget-layers`` x the model's widest layer (default 2.1: one layer's activations and
   its gradient buffer fit -- the backward working set on a graph where every sub-partition
   depends on every other one -- while the other layers live on storage), and, for
   ``--model``, the same with a tiny cache (``--tiny-budget-mb``, storage-bound);
   The tier runs under its three write policies: bypass (``lazy_writes=False``: outputs
   and gradient buffers written at once; ``tier``), gradient buffers write-back (the
   trainer's default, ``"grads"``: kept in the host cache under the same budget, written
   only when evicted; ``tier_grads``) and lazy write-back (``True``: activations too;
   ``tier_lazy``);
2. baseline (b), the HongTu-style snapshot engine (:func:`benchmarks.tier_baselines.snapshot_trainer`),
   same cache budget;
   baseline (b) also runs under that write policy (``snapshot_lazy``), so each policy is
   compared with itself;
3. baseline (a), plain autograd over the same sub-partitions with every saved tensor
   spilled to the same storage (:class:`benchmarks.tier_baselines.AutogradSpillTrainer`),
   and (a'), the GriNNder analysis's "autograd + OS swap": the same autograd with its
   activations, features and saved tensors in an LRU swap space holding the tier's RAM
   budget (:class:`benchmarks.tier_baselines.SwapSpace`);
4. epoch time of in-memory training (:class:`dgl_sni.trainer.FullGraphTrainer`) versus the
   tier with the whole working set cached (budget larger than everything), with bypass
   writes (default policy) and with lazy write-back (no I/O at all), epochs interleaved
   so that machine load hits all three alike; median of the warm epochs;
5. I/O bandwidth: the tier's read path (every unit of every layer read through
   :class:`~storage_tier.io.IOEngine`, 2 reads in flight as the prefetcher issues
   them, checksums verified, wall clock) and the per-read bandwidth seen inside the
   storage-bound epochs, versus a direct sequential O_DIRECT read (8 MiB requests) of one
   file of the same total size on the same disk; the two alternate three times in the
   same run (the disk is shared and drifts) and the medians are compared.

Byte accounting (all runs): bytes passed to ``pwrite``/``preadv`` on unit files per
epoch (second epoch; the 4096-byte header and padding included), reads + writes. The tier
counts every unit file it touches (inputs, outputs, gradients, write-backs); the snapshot
engine the same plus its snapshots; the autograd baseline the saved float tensors it
spills (weights, integer index/key tensors and the layer outputs themselves stay in memory
and are not counted, which favours that baseline); (a') what its swap space writes on
eviction and reads on a miss (autograd's gradient buffers stay in memory, uncounted). Targets from the issue: (a) at least
(2*alpha+3)/2 times more bytes than the tier, (b) at least alpha times more, with alpha the
measured expansion ratio. Forward-only ratios (the paper's analysis is per forward pass)
are reported too.

Writes ``benchmarks/results/storage.json`` and ``benchmarks/results/storage.png``.

    python benchmarks/bench_storage.py [--nodes 200000] [--model sage] [--parts 8]
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import signal
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import dgl_sni  # noqa: E402,F401  (DGL shims first)
import numpy as np  # noqa: E402
import torch  # noqa: E402

from dgl_sni.data import synthetic  # noqa: E402
from dgl_sni.metrics import peak_rss_mb  # noqa: E402
from dgl_sni.reference import whole_graph_view  # noqa: E402
from dgl_sni.trainers import FullGraphTrainer, ModelConfig  # noqa: E402
from dgl_sni.trainers import TierTrainer  # noqa: E402
from benchmarks.tier_baselines import AutogradSpillTrainer, snapshot_trainer  # noqa: E402
from storage_tier.io import ALIGN, IOEngine  # noqa: E402
from storage_tier.subparts import rowspace_from_graph  # noqa: E402

STORAGE = os.path.join(ROOT, "build", "storage-bench")  # unit files: a real disk (O_DIRECT), not tmpfs
KEEP = ("loss", "time_s", "source_major", "alpha", "storage_bytes", "storage_bytes_read", "storage_bytes_written",
        "fwd_bytes_read", "fwd_bytes_written", "bwd_bytes_read", "bwd_bytes_written",
        "cache_hit_rate", "cache_hits", "cache_misses", "cache_peak_bytes", "cache_budget_bytes",
        "cache_group_evictions", "cache_unit_evictions", "io_wait_s", "gather_s", "compute_s",
        "storage_read_s", "storage_write_s", "storage_read_gbps", "storage_write_gbps",
        "io_mode", "subpart_method", "num_subparts", "layer_times", "peak_rss_mb",
        "saved_bytes", "saved_tensors", "kept_bytes")


def slim(rec: dict) -> dict:
    return {k: rec[k] for k in KEEP if k in rec}


def run_epochs(trainer, epochs: int) -> list:
    recs = []
    for epoch in range(epochs):
        recs.append(trainer.train_epoch(epoch))
        print(f"    epoch {epoch}: {recs[-1]['time_s']:.2f} s, "
              f"{recs[-1].get('storage_bytes', 0) / 2**20:.0f} MiB moved", flush=True)
    return recs


def autograd_epochs(mcfg: ModelConfig, data, epochs: int, **kwargs) -> list:
    """:func:`run_epochs` of baseline (a), plain autograd over the sub-partitions with its saved
    tensors spilled to storage (with ``swap_budget``: (a'), autograd in an LRU swap space of that
    many bytes), closed after."""
    base = AutogradSpillTrainer(mcfg, whole_graph_view(data, mcfg.model), data.feat_dim, data.num_classes,
                                **kwargs)
    try:
        return run_epochs(base, epochs)
    finally:
        base.close()


def sequential_read_gbps(directory: str, nbytes: int, chunk: int = 8 << 20) -> dict:
    """Write one file of ``nbytes`` with O_DIRECT, then read it sequentially with O_DIRECT."""
    nbytes = max(chunk, (nbytes // chunk) * chunk)
    path = os.path.join(directory, f"seqread-{os.getpid()}.bin")
    buf = mmap.mmap(-1, chunk)
    buf.write(os.urandom(ALIGN) * (chunk // ALIGN))
    flags = getattr(os, "O_DIRECT", 0)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flags, 0o600)
    try:
        for off in range(0, nbytes, chunk):
            os.pwrite(fd, buf, off)
    finally:
        os.close(fd)
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        start = time.perf_counter()
        for off in range(0, nbytes, chunk):
            os.preadv(fd, [buf], off)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return dict(bytes=nbytes, seconds=elapsed, gbps=nbytes / elapsed / 1e9, chunk=chunk,
                o_direct=bool(flags))


def engine_read_gbps(io: IOEngine, keys: list, in_flight: int = 2) -> dict:
    """Read ``keys`` through the engine's reader (pooled buffers recycled as the engine does
    for transient units, checksums verified), ``in_flight`` at a time; wall clock."""
    io.reset_stats()
    start = time.perf_counter()
    pending = []
    for key in keys:
        pending.append(io.read_async(key))
        if len(pending) >= in_flight:
            io.pool.release(pending.pop(0).result())
    for fut in pending:
        io.pool.release(fut.result())
    elapsed = time.perf_counter() - start
    n = io.stats["bytes_read"]
    return dict(bytes=n, seconds=elapsed, gbps=n / elapsed / 1e9, units=len(keys))


def layer_budget(budget_layers: float, nodes: int, width: int) -> int:
    """A host cache budget of ``budget_layers`` x one float32 layer of ``nodes`` x ``width``."""
    return int(budget_layers * nodes * width * 4)


def interleaved_epochs(contenders: dict, epochs: int) -> tuple:
    """``epochs`` epochs of every trainer in ``contenders`` (name: trainer), interleaved so that
    the machine's load hits all alike; per name the wall and process CPU seconds of each epoch,
    and the last epoch's record."""
    wall = {k: [] for k in contenders}
    cpu = {k: [] for k in contenders}
    last_rec = {}
    for epoch in range(epochs):
        for name, trainer in contenders.items():
            c0 = time.process_time()
            rec = trainer.train_epoch(epoch)
            cpu[name].append(time.process_time() - c0)
            wall[name].append(rec["time_s"])
            last_rec[name] = rec
        print("    epoch %d: " % epoch + ", ".join(
            f"{k} {wall[k][-1]:.2f} s (cpu {cpu[k][-1]:.2f})" for k in contenders), flush=True)
    return wall, cpu, last_rec


def warm_median(values: list) -> float:
    """The median of the epochs after the first (the warm ones), or of the one epoch."""
    return statistics.median(values[1:] if len(values) > 1 else values)


def read_bandwidth_runs(trainer, layers: int, repeats: int = 3) -> tuple:
    """With every activation unit of ``trainer`` (a :class:`TierTrainer` whose budget keeps them
    on storage) written out by a forward pass: the engine's read path over all of them
    (:func:`engine_read_gbps`) and a direct sequential read of as many bytes
    (:func:`sequential_read_gbps`), alternating ``repeats`` times (the disk is shared, its speed
    drifts), the sequential read first and last. Returns both lists of runs."""
    trainer.engine.forward(training=False)  # every act[l] unit is on storage now
    trainer.io.wait()
    keys = [("act", l, p) for l in range(layers) for p in trainer.plan.unit_parts]
    nbytes = sum(trainer.engine.layer_bytes(l) for l in range(layers))
    seq_runs, path_runs = [], []
    for _ in range(repeats):
        seq_runs.append(sequential_read_gbps(trainer.io.dir, nbytes))
        path_runs.append(engine_read_gbps(trainer.io, keys))
    seq_runs.append(sequential_read_gbps(trainer.io.dir, nbytes))
    return seq_runs, path_runs


def arguments() -> argparse.ArgumentParser:
    """The benchmark's options (``parse_args([])``: the defaults, the sizes the docstring names)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--avg-degree", type=float, default=10.0)
    parser.add_argument("--feat-dim", type=int, default=64)
    parser.add_argument("--model", default="sage", help="model of the timing and bandwidth runs")
    parser.add_argument("--byte-models", default="gcn,sage,gat")
    parser.add_argument("--heads", type=int, default=1,
                        help="GAT heads (1 keeps GAT's layers as wide as the others')")
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--budget-layers", type=float, default=2.1,
                        help="host cache budget in units of the model's widest layer "
                             "(2.1: one layer's activations + its gradient buffer fit)")
    parser.add_argument("--extra-budget-layers", type=lambda v: [float(x) for x in v.split(",") if x],
                        default=[3.1],
                        help="further cache budgets for the byte comparison (3.1: the backward "
                             "working set act[l] + grad[l] + grad[l+1] fits, so only cold misses "
                             "remain, the operating point of the GriNNder analysis)")
    parser.add_argument("--tiny-budget-mb", type=float, default=16)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--time-epochs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads for every run (1: steady timings on a shared "
                             "2-core machine, where OpenMP barriers stall on descheduled threads)")
    parser.add_argument("--storage-dir", default=None)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    return parser


def setup(args) -> tuple:
    """The synthetic graph of ``args`` (:func:`arguments`' namespace) and the model of its timing runs."""
    data = synthetic(num_nodes=args.nodes, avg_degree=args.avg_degree, num_classes=8,
                     feat_dim=args.feat_dim, seed=0)
    cfg = ModelConfig(model=args.model, layers=args.layers, hidden=args.hidden, heads=args.heads,
                      dropout=0.5, seed=0)
    return data, cfg


def main():
    args = arguments().parse_args()
    # SIGTERM -> SystemExit, so the trainers' finally/close() remove their run directories
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    storage = args.storage_dir or STORAGE
    os.makedirs(storage, exist_ok=True)

    data, cfg = setup(args)
    layer_bytes = args.nodes * max(args.hidden, args.feat_dim) * 4  # the largest layer
    budget = layer_budget(args.budget_layers, args.nodes, max(args.hidden, args.feat_dim))
    tiny = int(args.tiny_budget_mb * 2**20)
    common = dict(num_subparts=args.parts, storage_dir=storage)
    print(f"graph: {args.nodes} nodes, {data.num_edges} edges; {args.model} x{args.layers}, "
          f"hidden {args.hidden}; P={args.parts}; budget {budget / 2**20:.0f} MiB", flush=True)
    out = dict(config=dict(vars(args), edges=data.num_edges, budget_bytes=budget,
                           tiny_budget_bytes=tiny, hidden_layer_bytes=layer_bytes,
                           torch_threads=torch.get_num_threads()))

    # 1-3: bytes per epoch, for every model ----------------------------------------------
    runs, bytes_by_model, bytes_by_budget = {}, {}, {}

    def fwd(r):
        return r["fwd_bytes_read"] + r["fwd_bytes_written"]

    def budget_runs(model, mcfg, budget_layers, auto, tag=""):
        """The runs that depend on the cache budget, and every ratio at that budget."""
        width = max(args.feat_dim, args.hidden * (args.heads if model == "gat" else 1))
        budget = layer_budget(budget_layers, args.nodes, width)  # x the model's largest layer
        name = f"{model}{tag}"
        print(f"[{name}] tier (regather + bypass), budget {budget / 2**20:.0f} MiB", flush=True)
        with TierTrainer.from_graph(mcfg, data, host_cache_budget=budget, lazy_writes=False, **common) as t:
            runs[f"{name}/tier"] = run_epochs(t, args.epochs)
            setup = dict(setup_s=t.setup_s, alpha=t.plan.alpha, method=t.plan.method)
        print(f"[{name}] tier, gradient buffers write-back (the trainer's default)", flush=True)
        with TierTrainer.from_graph(mcfg, data, host_cache_budget=budget, lazy_writes="grads",
                                    **common) as t:
            runs[f"{name}/tier_grads"] = run_epochs(t, args.epochs)
        print(f"[{name}] tier, gradient buffers write-back, destination-major backward (regather "
              f"every layer; the default before the source-major backward)", flush=True)
        with TierTrainer.from_graph(mcfg, data, host_cache_budget=budget, lazy_writes="grads",
                                    source_major=False, **common) as t:
            runs[f"{name}/tier_grads_dst"] = run_epochs(t, args.epochs)
        print(f"[{name}] tier with lazy write-back (writes only what the cache evicts)", flush=True)
        with TierTrainer.from_graph(mcfg, data, host_cache_budget=budget, lazy_writes=True,
                                    **common) as t:
            runs[f"{name}/tier_lazy"] = run_epochs(t, args.epochs)
        for lazy_writes in (False, True):
            kind = "snapshot_lazy" if lazy_writes else "snapshot"
            print(f"[{name}] baseline (b): {kind} engine", flush=True)
            with snapshot_trainer(mcfg, rowspace_from_graph(data, model), data.feat_dim,
                                  data.num_classes, host_cache_budget=budget,
                                  lazy_writes=lazy_writes, **common) as t:
                runs[f"{name}/{kind}"] = run_epochs(t, args.epochs)
        print(f"[{name}] baseline (a'): autograd + swap (activations and saved tensors in an "
              f"LRU of the same {budget / 2**20:.0f} MiB over the storage)", flush=True)
        runs[f"{name}/autograd_swap"] = autograd_epochs(mcfg, data, args.epochs, swap_budget=budget, **common)
        alpha = setup["alpha"]
        tier, grads, grads_dst, lazy, snap, snap_lazy, swap = (runs[f"{name}/{k}"][-1] for k in (
            "tier", "tier_grads", "tier_grads_dst", "tier_lazy", "snapshot", "snapshot_lazy",
            "autograd_swap"))
        def per_lazy(run):  # None where the lazy tier moved nothing (everything cached)
            return run["storage_bytes"] / lazy["storage_bytes"] if lazy["storage_bytes"] else None

        bm = dict(
            alpha=alpha, subpart_method=setup["method"], budget_layers=budget_layers,
            budget_bytes=budget,
            tier=tier["storage_bytes"], tier_fwd=fwd(tier),
            snapshot=snap["storage_bytes"], snapshot_fwd=fwd(snap),
            autograd_spill=auto["storage_bytes"], autograd_spill_fwd=fwd(auto),
            autograd_saved_bytes=auto["saved_bytes"],
            ratio_autograd=auto["storage_bytes"] / tier["storage_bytes"],
            ratio_autograd_fwd=fwd(auto) / fwd(tier),
            target_autograd=(2 * alpha + 3) / 2,
            ratio_snapshot=snap["storage_bytes"] / tier["storage_bytes"],
            ratio_snapshot_fwd=fwd(snap) / fwd(tier),
            target_snapshot=alpha,
            tier_grads=grads["storage_bytes"], tier_grads_fwd=fwd(grads),
            ratio_autograd_vs_grads=auto["storage_bytes"] / max(1, grads["storage_bytes"]),
            tier_grads_dst=grads_dst["storage_bytes"],
            ratio_autograd_vs_grads_dst=auto["storage_bytes"] / max(1, grads_dst["storage_bytes"]),
            source_major=grads["source_major"],
            ratio_autograd_swap_vs_grads=swap["storage_bytes"] / max(1, grads["storage_bytes"]),
            tier_lazy=lazy["storage_bytes"], tier_lazy_fwd=fwd(lazy),
            ratio_autograd_vs_lazy=per_lazy(auto),
            ratio_snapshot_vs_lazy=per_lazy(snap),
            autograd_swap=swap["storage_bytes"], autograd_swap_fwd=fwd(swap),
            ratio_autograd_swap=swap["storage_bytes"] / tier["storage_bytes"],
            ratio_autograd_swap_fwd=fwd(swap) / fwd(tier),
            ratio_autograd_swap_vs_lazy=per_lazy(swap),
            snapshot_lazy=snap_lazy["storage_bytes"],
            ratio_snapshot_lazy_vs_lazy=per_lazy(snap_lazy))
        print(f"[{name}] alpha {alpha:.2f}: autograd/tier {bm['ratio_autograd']:.2f}x "
              f"(gradient buffers write-back: {bm['ratio_autograd_vs_grads']:.2f}x; "
              f"destination-major {bm['ratio_autograd_vs_grads_dst']:.2f}x), "
              f"autograd+swap/tier {bm['ratio_autograd_swap']:.2f}x "
              f"(fwd {bm['ratio_autograd_swap_fwd']:.2f}x; target {(2 * alpha + 3) / 2:.2f}), "
              f"snapshot/tier {bm['ratio_snapshot']:.2f}x, lazy/lazy "
              + (f"{bm['ratio_snapshot_lazy_vs_lazy']:.2f}x" if bm['ratio_snapshot_lazy_vs_lazy'] is not None
                 else "n/a (the lazy tier moved nothing)") + f" (target {alpha:.2f})", flush=True)
        return bm

    for model in args.byte_models.split(","):
        mcfg = ModelConfig(model=model, layers=args.layers, hidden=args.hidden, heads=args.heads,
                           dropout=0.5, seed=0)
        print(f"[{model}] baseline (a): autograd, saved tensors spilled", flush=True)
        # does not depend on the cache budget
        runs[f"{model}/autograd_spill"] = autograd_epochs(mcfg, data, args.epochs, **common)
        auto = runs[f"{model}/autograd_spill"][-1]
        bytes_by_model[model] = budget_runs(model, mcfg, args.budget_layers, auto)
        bytes_by_budget[model] = {str(args.budget_layers): bytes_by_model[model]}
        for extra in args.extra_budget_layers:
            bytes_by_budget[model][str(extra)] = budget_runs(model, mcfg, extra, auto,
                                                             tag=f"@{extra}")
    print(f"[{args.model}] tier, tiny budget (storage-bound)", flush=True)
    with TierTrainer.from_graph(cfg, data, host_cache_budget=tiny, **common) as t:
        runs["tier_tiny"] = run_epochs(t, args.epochs)
        seq_runs, path_runs = read_bandwidth_runs(t, args.layers)
    out["runs"] = {k: [slim(r) for r in v] for k, v in runs.items()}
    last = {k: v[-1] for k, v in runs.items()}
    last["tier"] = last.get(f"{args.model}/tier") or next(v for k, v in last.items() if k.endswith("/tier"))
    out["bytes"] = dict(
        by_model=bytes_by_model, by_budget=bytes_by_budget, tier_tiny=last["tier_tiny"]["storage_bytes"],
        accounting=("bytes passed to pwrite/preadv on unit files in the second epoch, reads + "
                    "writes, 4 KiB header and padding included; autograd_spill: spilled "
                    "saved float tensors only (weights, index/key tensors and layer outputs "
                    "stay in memory, uncounted); autograd_swap: activations, features and "
                    "saved tensors in an LRU swap space with the tier's RAM budget, evictions "
                    "written once, misses read (autograd's gradient buffers in memory, "
                    "uncounted); snapshot_lazy: the snapshot engine under the tier_lazy "
                    "write policy"))

    # 4: epoch time, working set cached ---------------------------------------------------
    print("epoch time: in-memory vs tier with everything cached", flush=True)
    big = 1 << 40
    ref = FullGraphTrainer(cfg, whole_graph_view(data, args.model), data.feat_dim, data.num_classes)
    contenders = dict(
        in_memory=ref,
        tier_cached=TierTrainer.from_graph(cfg, data, host_cache_budget=big, lazy_writes=False, **common),
        tier_cached_lazy=TierTrainer.from_graph(cfg, data, host_cache_budget=big, lazy_writes=True,
                                                **common),
        tier_cached_p1=TierTrainer.from_graph(cfg, data, host_cache_budget=big, lazy_writes=True,
                                              num_subparts=1, storage_dir=storage))
    try:
        wall, cpu, last_rec = interleaved_epochs(contenders, args.time_epochs)
        out["cached_records"] = {k: slim(v) for k, v in last_rec.items() if k != "in_memory"}
    finally:
        for name, trainer in contenders.items():
            if name != "in_memory":
                trainer.close()

    mw = {k: warm_median(v) for k, v in wall.items()}
    mc = {k: warm_median(v) for k, v in cpu.items()}
    out["epoch_time"] = dict(
        wall_s=wall, cpu_s=cpu, median_warm_wall=mw, median_warm_cpu=mc,
        ratio_cached=mw["tier_cached"] / mw["in_memory"],
        ratio_cached_lazy=mw["tier_cached_lazy"] / mw["in_memory"],
        ratio_cached_p1=mw["tier_cached_p1"] / mw["in_memory"],
        ratio_cached_cpu=mc["tier_cached"] / mc["in_memory"],
        ratio_cached_lazy_cpu=mc["tier_cached_lazy"] / mc["in_memory"],
        ratio_cached_p1_cpu=mc["tier_cached_p1"] / mc["in_memory"],
        alpha_p1=1.0, target=1.5,
        note=("wall: median of warm epochs, runs interleaved; cpu: process CPU time (all "
              "threads) per epoch, robust to other jobs on the shared machine"),
        tier_one_layer_budget_s=last["tier"]["time_s"], tier_tiny_budget_s=last["tier_tiny"]["time_s"])

    # 5: bandwidth ----------------------------------------------------------------------
    seq = statistics.median(r["gbps"] for r in seq_runs)
    path_bw = dict(path_runs[0], gbps=statistics.median(r["gbps"] for r in path_runs))
    tiny_rec = last["tier_tiny"]
    out["bandwidth"] = dict(
        sequential_o_direct_runs=seq_runs, engine_read_path_runs=path_runs,
        sequential_gbps=seq, engine_read_path=path_bw,
        ratio_engine_read_path=path_bw["gbps"] / seq,
        in_training_read_gbps_per_op=tiny_rec.get("storage_read_gbps"),
        ratio_in_training_per_op=(tiny_rec.get("storage_read_gbps") or 0) / seq,
        target=0.7, io_mode=tiny_rec["io_mode"])
    out["peak_rss_mb"] = peak_rss_mb()

    path = os.path.join(args.out, "storage.json")
    with open(path + ".tmp", "w") as fh:
        json.dump(out, fh, indent=1)
    os.replace(path + ".tmp", path)
    plot(out, os.path.join(args.out, "storage.png"))
    b, e, w = out["bytes"]["by_model"], out["epoch_time"], out["bandwidth"]
    print(json.dumps(dict(bytes={m: {k: v[k] for k in ("alpha", "ratio_autograd_vs_grads", "ratio_autograd",
                                                       "ratio_autograd_vs_grads_dst", "ratio_autograd_swap",
                                                       "ratio_autograd_swap_fwd", "target_autograd",
                                                       "ratio_snapshot", "ratio_snapshot_lazy_vs_lazy",
                                                       "target_snapshot")}
                                 for m, v in b.items()},
                          ratio_cached=e["ratio_cached"],
                          ratio_cached_cpu=e["ratio_cached_cpu"], ratio_cached_p1=e["ratio_cached_p1"],
                          ratio_cached_p1_cpu=e["ratio_cached_p1_cpu"],
                          ratio_cached_lazy=e["ratio_cached_lazy"],
                          ratio_bw=w["ratio_engine_read_path"]), indent=1))
    print(f"wrote {path}")


def plot(out: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    runs = out["runs"]
    by_model = out["bytes"]["by_model"]
    kinds = [("tier_grads", "tier (default)"), ("tier_grads_dst", "tier (default, destination-major)"),
             ("tier", "tier (bypass)"), ("tier_lazy", "tier (lazy write-back)"),
             ("snapshot", "(b) snapshot"), ("snapshot_lazy", "(b) snapshot, lazy"),
             ("autograd_spill", "(a) autograd spill"), ("autograd_swap", "(a') autograd + swap")]
    models = list(by_model)
    ax = axes[0]
    width = 0.8 / len(kinds)
    for i, (kind, label) in enumerate(kinds):
        xs = np.arange(len(models)) + (i - (len(kinds) - 1) / 2) * width
        rd = [runs[f"{m}/{kind}"][-1]["storage_bytes_read"] / 2**30 for m in models]
        wr = [runs[f"{m}/{kind}"][-1]["storage_bytes_written"] / 2**30 for m in models]
        ax.bar(xs, rd, width, color=f"C{i}", label=f"{label} read")
        ax.bar(xs, wr, width, bottom=rd, color=f"C{i}", alpha=0.5, label=f"{label} written")
    ax.set_xticks(np.arange(len(models)),
                  [f"{m}\n(a) {by_model[m]['ratio_autograd_vs_grads']:.1f}x (default)\n"
                   f"{by_model[m]['ratio_autograd']:.1f}x (bypass), (a') "
                   f"{by_model[m]['ratio_autograd_swap']:.1f}x / {by_model[m]['target_autograd']:.1f}"
                   f"\n(b) {by_model[m]['ratio_snapshot']:.1f}x / {by_model[m]['target_snapshot']:.1f}"
                   for m in models], fontsize=7)
    ax.set_ylabel("GiB per epoch")
    alpha = next(iter(by_model.values()))["alpha"]
    ax.set_title(f"storage bytes per epoch (alpha = {alpha:.2f}); baseline/tier ratio / target",
                 fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    e = out["epoch_time"]
    ax = axes[1]
    labels = ["in-memory", "tier cached\n(bypass)", "tier cached\n(lazy)",
              f"tier, budget\n{out['config']['budget_layers']} layers",
              "tier tiny\nbudget"]
    m = e["median_warm_wall"]
    labels.insert(3, "tier cached\nP=1 (lazy)")
    vals = [m["in_memory"], m["tier_cached"], m["tier_cached_lazy"], m["tier_cached_p1"],
            e["tier_one_layer_budget_s"], e["tier_tiny_budget_s"]]
    ax.bar(np.arange(len(vals)), vals, color=["grey", "C0", "C0", "C2", "C1", "C3"])
    ax.axhline(1.5 * vals[0], color="k", ls="--", lw=1, label="1.5x in-memory")
    ax.set_xticks(np.arange(len(vals)), labels, fontsize=8)
    ax.set_ylabel("seconds per epoch")
    ax.set_title(f"epoch time; cached/in-memory wall {e['ratio_cached']:.2f}x "
                 f"(cpu {e['ratio_cached_cpu']:.2f}x), P=1 {e['ratio_cached_p1']:.2f}x "
                 f"(cpu {e['ratio_cached_p1_cpu']:.2f}x)", fontsize=8)
    ax.legend(fontsize=8)
    w = out["bandwidth"]
    ax = axes[2]
    vals = [w["sequential_gbps"], w["engine_read_path"]["gbps"], w["in_training_read_gbps_per_op"] or 0]
    ax.bar(np.arange(3), vals, color=["grey", "C0", "C1"])
    ax.axhline(0.7 * vals[0], color="k", ls="--", lw=1, label="0.7x sequential")
    ax.set_xticks(np.arange(3), ["sequential\nO_DIRECT", "tier read path\n(2 in flight)",
                                 "in training\n(per read)"], fontsize=8)
    ax.set_ylabel("GB/s")
    ax.set_title(f"read bandwidth ({w['io_mode']}; path/sequential "
                 f"{w['ratio_engine_read_path']:.2f}x)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()

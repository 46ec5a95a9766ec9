"""The storage tier's benchmark suite: bytes against autograd spilling, a cached epoch against an
in-memory one, its read path against a direct read of the disk.

The graph, model and budgets are ``benchmarks/bench_storage.py``'s (:func:`~benchmarks.bench_storage.arguments`,
:func:`~benchmarks.bench_storage.setup`: 3-layer SAGE, hidden 128, P = 8 sub-partitions, one
torch thread), at its default size (200k nodes, long) or at 50k nodes (quick, with a 4 MiB tiny
budget, so that it stays storage-bound; a layer is 24 MiB there). Unit files go to ``build/storage-bench`` (a disk:
the direct read is O_DIRECT). Each benchmark calls the script's own functions:

* ``test_bytes_against_autograd``: two epochs of the tier at its default write policy
  (gradient buffers write-back) with a host cache of 2.1 layers (timed, one round), then
  baseline (a), autograd with its saved tensors spilled, untimed; bytes per epoch (second
  epoch, reads + writes) of both, their ratio and its target ``(2*alpha + 3) / 2``.
* ``test_cached_epoch_against_in_memory``: the tier with everything cached (bypass writes)
  and in-memory training, epochs interleaved (timed: all of them, one round); the warm epochs'
  median wall and CPU time of both and their ratios.
* ``test_read_path_against_direct_read``: with the tiny budget, after one epoch, the engine's
  read path over every activation unit against a sequential O_DIRECT read of as many bytes,
  alternating three times (timed: all of it, one round); GB/s of both and their ratio, and the
  per-read bandwidth seen inside the storage-bound epoch.
"""
import os
import statistics

import pytest
import torch

from benchmarks import bench_storage as bs
from benchmarks.suites._support import sizes
from dgl_sni.reference import whole_graph_view
from dgl_sni.trainers import FullGraphTrainer, TierTrainer

pytestmark = pytest.mark.benchmark(group="storage tier")
QUICK = ["--nodes", "50000", "--tiny-budget-mb", "4", "--time-epochs", "4"]


@pytest.fixture(scope="module", params=sizes(QUICK, []))
def world(request):
    """The benchmark's options at one size, its graph and model, one torch thread (as the script)."""
    args = bs.arguments().parse_args(request.param)
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    os.makedirs(bs.STORAGE, exist_ok=True)
    data, cfg = bs.setup(args)
    yield args, data, cfg, dict(num_subparts=args.parts, storage_dir=bs.STORAGE)
    torch.set_num_threads(threads)


def _config(args, data) -> dict:
    return dict(nodes=args.nodes, edges=data.num_edges, avg_degree=args.avg_degree, feat_dim=args.feat_dim,
                model=args.model, layers=args.layers, hidden=args.hidden, parts=args.parts, threads=args.threads)


def test_bytes_against_autograd(benchmark, world):
    args, data, cfg, common = world
    budget = bs.layer_budget(args.budget_layers, args.nodes, max(args.hidden, args.feat_dim))
    with TierTrainer.from_graph(cfg, data, host_cache_budget=budget, **common) as t:
        tier = benchmark.pedantic(bs.run_epochs, args=(t, args.epochs), rounds=1, iterations=1)[-1]
        alpha = t.plan.alpha
    auto = bs.autograd_epochs(cfg, data, args.epochs, **common)[-1]
    ratio = auto["storage_bytes"] / max(1, tier["storage_bytes"])
    target = (2 * alpha + 3) / 2
    benchmark.extra_info.update(
        _config(args, data), budget_layers=args.budget_layers, budget_bytes=budget, alpha=alpha,
        tier=bs.slim(tier), autograd_spill=bs.slim(auto), ratio_autograd=ratio, target_autograd=target,
        timings_s=dict(tier_epoch=tier["time_s"], autograd_spill_epoch=auto["time_s"]),
        summary=(f"{args.nodes} nodes: bytes/epoch tier {tier['storage_bytes'] / 2**20:.0f} MiB, autograd spilling "
                 f"{auto['storage_bytes'] / 2**20:.0f} MiB ({ratio:.2f}x; target {target:.2f}x at alpha {alpha:.2f})"))


def test_cached_epoch_against_in_memory(benchmark, world):
    args, data, cfg, common = world
    contenders = dict(in_memory=FullGraphTrainer(cfg, whole_graph_view(data, args.model), data.feat_dim,
                                                 data.num_classes),
                      tier_cached=TierTrainer.from_graph(cfg, data, host_cache_budget=1 << 40, lazy_writes=False,
                                                         **common))
    try:
        wall, cpu, _ = benchmark.pedantic(bs.interleaved_epochs, args=(contenders, args.time_epochs),
                                          rounds=1, iterations=1)
    finally:
        contenders["tier_cached"].close()
    mw = {k: bs.warm_median(v) for k, v in wall.items()}
    mc = {k: bs.warm_median(v) for k, v in cpu.items()}
    ratio, ratio_cpu = mw["tier_cached"] / mw["in_memory"], mc["tier_cached"] / mc["in_memory"]
    benchmark.extra_info.update(
        _config(args, data), epochs=args.time_epochs, wall_s=wall, cpu_s=cpu, median_warm_wall_s=mw,
        median_warm_cpu_s=mc, ratio_cached=ratio, ratio_cached_cpu=ratio_cpu,
        timings_s={f"{k}_epoch": v for k, v in mw.items()},
        summary=(f"{args.nodes} nodes: epoch in memory {mw['in_memory']:.3f} s, tier with everything cached "
                 f"{mw['tier_cached']:.3f} s ({ratio:.2f}x; CPU {ratio_cpu:.2f}x)"))


def test_read_path_against_direct_read(benchmark, world):
    args, data, cfg, common = world
    with TierTrainer.from_graph(cfg, data, host_cache_budget=int(args.tiny_budget_mb * 2**20), **common) as t:
        rec = bs.run_epochs(t, 1)[-1]
        seq_runs, path_runs = benchmark.pedantic(bs.read_bandwidth_runs, args=(t, args.layers), rounds=1,
                                                 iterations=1)
    seq = statistics.median(r["gbps"] for r in seq_runs)
    path = statistics.median(r["gbps"] for r in path_runs)
    benchmark.extra_info.update(
        _config(args, data), tiny_budget_mb=args.tiny_budget_mb, io_mode=rec.get("io_mode"),
        sequential_gbps=seq, engine_read_path_gbps=path, ratio_engine_read_path=path / seq,
        in_training_read_gbps_per_op=rec.get("storage_read_gbps"), bytes_read=path_runs[0]["bytes"],
        sequential_runs=seq_runs, engine_read_path_runs=path_runs,
        timings_s=dict(sequential_read=statistics.median(r["seconds"] for r in seq_runs),
                       engine_read_path=statistics.median(r["seconds"] for r in path_runs)),
        summary=(f"{path_runs[0]['bytes'] / 2**20:.0f} MiB: read path {path:.2f} GB/s, direct sequential read "
                 f"{seq:.2f} GB/s ({path / seq:.2f}x; {rec.get('io_mode')})"))

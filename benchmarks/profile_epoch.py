"""Where one trainer's training step spends its time: torch's profiler over a partition's pass.

Builds partition 0 of a synthetic graph's METIS partitioning (as ``dgl-sni train`` makes it),
the trainer's block (owned rows and their halo), and runs training steps of a model over it in
one process: the halo rows are the block's own source rows (no exchange, no network), so the
profile is the trainer's compute alone, the part of an epoch no stale step removes. Prints the
step's median time and the operators that take most of it (self CPU time), and writes them as
JSON. Used to explain what bounds a model's epoch (GAT: docs/design-choices.md).

    python benchmarks/profile_epoch.py --model gat --heads 2 --nodes 200000 --avg-degree 20
    python benchmarks/profile_epoch.py --model-file examples/gat.py --heads 2
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from dgl_sni.config import ModelConfig  # noqa: E402
from dgl_sni.data import synthetic  # noqa: E402
from dgl_sni.halo.rows import Form, WholeGraph  # noqa: E402
from dgl_sni.halo.sums import BlockSplit  # noqa: E402
from dgl_sni.model_file import build  # noqa: E402
from dgl_sni.partition import metis_assignment  # noqa: E402
from storage_tier.block import MODELS_WITH_SELF_LOOPS, build_block  # noqa: E402


def partition_block(data, parts: int, model: str):
    """Partition 0's block: its owned nodes (METIS part 0) and their in-neighbours owned elsewhere."""
    owner = metis_assignment(data, parts)
    owned = np.flatnonzero(owner == 0)
    is_owned = owner == 0
    keep = is_owned[data.dst]
    halo = np.setdiff1d(np.unique(data.src[keep]), owned)
    order = np.concatenate((owned, halo))
    pos = np.empty(data.num_nodes, np.int64)
    pos[order] = np.arange(order.size)
    in_deg, out_deg = data.degrees()
    block = build_block(pos[data.src[keep]], pos[data.dst[keep]], order.size, owned.size, out_deg[order],
                        in_deg[owned], self_loops=model in MODELS_WITH_SELF_LOOPS, src_keys=order)
    train = torch.from_numpy(data.masks()["train_mask"][owned])  # a trainer's loss reads these rows
    return block, torch.from_numpy(data.features[order]), torch.from_numpy(data.labels[owned]).long(), train


class LocalHalo(WholeGraph):
    """Halo rows without an exchange: each layer's halo rows are fixed random rows of its width
    (the compute of a step is the same as with rows from the owners). ``stale``: a stale step of
    ``--stale-halo summed``: every layer that declares a sum takes a fixed kept sum (the input
    layer the sum of its halo features), the others the fixed rows."""

    def __init__(self, num_halo: int, takes: list | None = None):
        self.num_halo, self.rows, self.sums, self.takes = num_halo, {}, {}, takes

    def form(self, layer):
        return Form.SUM if self.takes is not None and self.takes[layer].sum else Form.ROWS

    def splits(self):
        return self.takes is not None

    def __call__(self, layer, owned):
        if layer not in self.rows:
            self.rows[layer] = torch.randn(self.num_halo, owned.shape[1])
        return torch.cat((owned, self.rows[layer]))

    def start_halo(self, layer, owned):
        return owned

    def halo_sum(self, layer, owned, split, scale, mask=None):
        if layer not in self.sums:
            self.sums[layer] = split.sum_rows(torch.randn(self.num_halo, owned.shape[1]), scale)
        return self.sums[layer]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gat")
    p.add_argument("--model-file", default="")
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--nodes", type=int, default=200_000)
    p.add_argument("--avg-degree", type=float, default=20)
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--stale", action="store_true", help="profile a stale step (kept halo sums) instead of an "
                                                            "exact one")
    p.add_argument("--dropout", type=float, default=0.5, help="the model's dropout (0: the input layer projects "
                                                               "the features' kept aggregate)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (a trainer's share of this host)")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "profile-epoch.json"))
    ns = p.parse_args(argv)
    torch.set_num_threads(ns.threads)
    data = synthetic(num_nodes=ns.nodes, avg_degree=ns.avg_degree)
    cfg = ModelConfig(model=ns.model if not ns.model_file else "gcn", model_file=ns.model_file, layers=ns.layers,
                      hidden=ns.hidden, heads=ns.heads, dropout=ns.dropout)
    arch = "custom" if ns.model_file else ns.model
    block, x, labels, train = partition_block(data, ns.parts, arch)
    model = build(cfg, x.shape[1], data.num_classes).train()
    takes = model.halo_takes(block, x) if ns.stale else None
    halo = LocalHalo(block.num_src - block.num_dst, takes)
    split = BlockSplit(block, x) if ns.stale else None
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def step(i):
        opt.zero_grad()
        logits = model(block, x, halo, step=i, split=split)
        loss = torch.nn.functional.cross_entropy(logits[train], labels[train])
        loss.backward()
        opt.step()

    step(0)  # warm caches
    times = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for i in range(1, ns.steps + 1):
            t = time.perf_counter()
            step(i)
            times.append(time.perf_counter() - t)
    ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in ops) or 1
    top = [dict(op=e.key, self_ms_per_step=e.self_cpu_time_total / 1000 / ns.steps,
                share=e.self_cpu_time_total / total) for e in ops[:15]]
    result = dict(model=ns.model_file or ns.model, step="stale" if ns.stale else "exact", heads=ns.heads, layers=ns.layers, hidden=ns.hidden,
                  dropout=ns.dropout,
                  nodes=ns.nodes, avg_degree=ns.avg_degree, parts=ns.parts, threads=ns.threads,
                  owned=block.num_dst, halo=block.num_src - block.num_dst, edges=block.num_edges,
                  step_ms_median=1000 * statistics.median(times), top_ops=top)
    print(f"{result['model']}: partition 0 of {ns.parts} ({block.num_dst} owned, {result['halo']} halo rows, "
          f"{block.num_edges} edges), {ns.threads} thread(s): {result['step']} step {result['step_ms_median']:.0f} ms (median of "
          f"{ns.steps}, profiled)")
    for t in top:
        print(f"  {t['self_ms_per_step']:8.1f} ms  {100 * t['share']:5.1f}%  {t['op']}")
    os.makedirs(os.path.dirname(os.path.abspath(ns.out)), exist_ok=True)
    with open(ns.out, "w") as fh:
        json.dump(result, fh, indent=1)
    print(f"wrote {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

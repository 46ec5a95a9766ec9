"""The switching-aware partitioner's benchmark suite: memory, time and edge cut against METIS.

Each (graph, parts, method) runs in a fresh process through
:func:`benchmarks.bench_partitioner.run_one` (peak RSS over the loaded graph, wall time, edge
cut, balance, alpha); METIS (DGL's) first, then ours, which is judged against it by
:func:`~benchmarks.bench_partitioner.acceptance` (memory and cut ratios, their targets).
Quick: the 100k-node synthetic graph (average degree 20) and Cora, 4 parts; long: the 1M-node
graph at 4 and 16 parts and CiteSeer. Timed: the process (one round; start-up and graph load
included); the method's own seconds are in ``timings_s``. A real graph whose file is absent
(``../shared/data``, ``DGL_SNI_DATA_DIR``) is skipped.
"""
import os

import pytest

from benchmarks import bench_partitioner as bp
from dgl_sni.data import default_data_dir

pytestmark = pytest.mark.benchmark(group="partitioner")
METHODS = ("metis", bp.OURS)  # METIS first: ours is judged against it
CASES = [("synthetic-100k", 4, False), ("cora", 4, False),
         ("synthetic-1M", 4, True), ("synthetic-1M", 16, True), ("citeseer", 4, True)]
DONE = {}  # (graph, parts, method): record


def _spec(graph: str) -> str:
    if graph.startswith("synthetic-"):
        nodes = {"100k": 100_000, "1M": 1_000_000}[graph.split("-")[1]]
        return "npy:" + bp.synthetic_graph(bp.CACHE, nodes, 20.0, 0)
    path = os.path.join(default_data_dir(), f"{graph}.npz")
    if not os.path.exists(path):
        pytest.skip(f"{graph}: {path} not found (set DGL_SNI_DATA_DIR to the folder holding {graph}.npz)")
    return "npz:" + path


@pytest.mark.parametrize("graph,parts,method", [
    pytest.param(g, p, m, id=f"{g}-p{p}-{m}", marks=[pytest.mark.long] if long else [])
    for g, p, long in CASES for m in METHODS])
def test_partition(benchmark, graph, parts, method):
    spec = _spec(graph)
    record = benchmark.pedantic(bp.run_one, args=(spec, method, parts, 0, 1800), rounds=1, iterations=1)
    assert "error" not in record, record.get("error")
    DONE[graph, parts, method] = record
    info = {k: v for k, v in record.items() if k != "history"}
    summary = (f"{graph} p={parts} {method}: {record['seconds']:.2f} s, peak {record['peak_over_loaded_mb']:.0f} MB "
               f"over the loaded graph, cut {record['edge_cut']:.4f}, alpha {record['alpha']:.3f}")
    judged = bp.acceptance([DONE[key] for key in ((graph, parts, m) for m in METHODS) if key in DONE])
    if method == bp.OURS and judged:
        info["against_metis"] = row = judged[0]
        summary += f"; against METIS: memory {row['mem_ratio']:.3f}x, cut {row['cut_ratio']:.2f}x, " \
                   f"time {row['time_ratio']:.2f}x"
    benchmark.extra_info.update(info, graph_name=graph, targets=dict(memory_over_loaded_vs_metis=bp.MEM_TARGET,
                                                                     edge_cut_vs_metis=bp.CUT_TARGET),
                                timings_s=dict(method=record["seconds"]), summary=summary)

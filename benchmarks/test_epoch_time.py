"""Epoch time: dgl-sni on 2 and 4 emulated machines vs one process running DGL's GraphConv.

Graph: synthetic, 200k nodes, ~4M directed edges, 64 features; model: 2-layer GCN,
hidden 16, Adam. The single-process baseline is the same model built from
``dgl.nn.GraphConv`` (norm="both", self loops added) with 2 torch threads and
``torch.nn.Dropout``. The distributed runs are driven one epoch at a time through
the trainers' epoch gate (one byte through a FIFO starts a synchronised training
step on every machine, one byte back says it finished), so pytest-benchmark times
exactly one distributed training epoch (forward, halo exchange, backward, gradient
push, all-reduce, Adam) per round, plus ~1 ms of gate round trip.

All variants are measured in one session; the last test prints the ratios and writes
``benchmarks/results/epoch_time.json``. Run: ``make bench`` or
``pytest benchmarks/test_epoch_time.py --benchmark-enable``.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

import pytest
import torch

import dgl_sni  # noqa: F401
import dgl
from dgl.nn import GraphConv

from dgl_sni.cluster import netns_available
from dgl_sni.data import save_npz, synthetic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODES, DEGREE, FEATS, HIDDEN = 200_000, 20, 64, 16
ROUNDS = 15
RESULTS = {}


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    data = synthetic(num_nodes=NODES, avg_degree=DEGREE, feat_dim=FEATS, seed=0)
    path = str(tmp_path_factory.mktemp("g") / "g200k.npz")
    save_npz(data, path)
    return data, path


class GraphConvModel(torch.nn.Module):
    def __init__(self, in_dim, classes, dropout):
        super().__init__()
        self.c1, self.c2 = GraphConv(in_dim, HIDDEN), GraphConv(HIDDEN, classes)
        self.drop = torch.nn.Dropout(dropout)

    def forward(self, g, x):
        return self.c2(g, self.drop(torch.relu(self.c1(g, self.drop(x)))))


def _record(benchmark, key, **extra):
    stats = benchmark.stats.stats if benchmark.stats else None
    if stats is not None and stats.rounds > 1:
        RESULTS[key] = dict(median_s=stats.median, mean_s=stats.mean, rounds=stats.rounds, **extra)
    benchmark.extra_info.update(extra)


@pytest.mark.parametrize("dropout", [0.5, 0.0])
def test_single_process_graphconv(benchmark, graph, dropout):
    data, _ = graph
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        g = dgl.add_self_loop(dgl.graph((torch.from_numpy(data.src), torch.from_numpy(data.dst)),
                                        num_nodes=data.num_nodes))
        g.create_formats_()
        x, y = torch.from_numpy(data.features), torch.from_numpy(data.labels)
        train = torch.from_numpy(data.train_idx)
        torch.manual_seed(0)
        model = GraphConvModel(FEATS, data.num_classes, dropout)
        opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

        def epoch():
            loss = torch.nn.functional.cross_entropy(model(g, x)[train], y[train])
            opt.zero_grad()
            loss.backward()
            opt.step()

        benchmark.pedantic(epoch, rounds=ROUNDS, warmup_rounds=3, iterations=1)
        _record(benchmark, f"single_graphconv_dropout{dropout}", threads=2, dropout=dropout)
    finally:
        torch.set_num_threads(threads)


class GatedRun:
    """A ``dgl-sni train`` run whose epochs are started one at a time from here."""

    def __init__(self, npz, workers, dropout, run_dir):
        self.dir = run_dir
        for name in ("go", "done"):
            os.mkfifo(os.path.join(run_dir, name))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dgl_sni.cli", "train", "--dataset", npz, "--workers", str(workers),
             "--model", "gcn", "--layers", "2", "--hidden", str(HIDDEN), "--dropout", str(dropout),
             "--epochs", "100000", "--eval-every", "100000", "--quiet", "--epoch-gate", run_dir,
             "--metrics", os.path.join(run_dir, "metrics.json"), "--run-dir", os.path.join(run_dir, "run")],
            cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), stderr=subprocess.PIPE, text=True)
        self.go = open(os.path.join(run_dir, "go"), "wb", buffering=0)
        self.done = open(os.path.join(run_dir, "done"), "rb", buffering=0)

    def step(self):
        self.go.write(b"g")
        if self.done.read(1) != b".":
            raise RuntimeError(f"training stopped: {self.proc.stderr.read()[-3000:]}")

    def close(self):
        self.go.write(b"q")
        self.go.close()
        self.proc.wait(timeout=120)
        self.done.close()
        if self.proc.returncode != 0:
            raise RuntimeError(self.proc.stderr.read()[-3000:])
        with open(os.path.join(self.dir, "metrics.json")) as fh:
            return json.load(fh)


@pytest.mark.skipif(not netns_available()[0], reason="emulated machines need root")
@pytest.mark.parametrize("dropout", [0.5, 0.0])
@pytest.mark.parametrize("workers", [2, 4])
def test_distributed_epoch(benchmark, graph, workers, dropout):
    _, npz = graph
    with tempfile.TemporaryDirectory() as tmp:
        run = GatedRun(npz, workers, dropout, tmp)
        try:
            for _ in range(3):
                run.step()
            benchmark.pedantic(run.step, rounds=ROUNDS, iterations=1)
        finally:
            metrics = run.close()
    epochs = metrics["epochs"][3:]
    inside = dict(time_s=statistics.median(e["time_s"] for e in epochs),
                  comp_s=statistics.median(e["comp_s"] for e in epochs),
                  comm_s=statistics.median(e["comm_s"] for e in epochs),
                  sync_s=statistics.median(e["sync_s"] for e in epochs),
                  bytes_per_epoch=statistics.median(e["bytes_sent"] + e["bytes_recv"] for e in epochs))
    _record(benchmark, f"dist{workers}_dropout{dropout}", workers=workers, dropout=dropout,
            in_trainer_medians=inside, edge_cut=metrics["partition"]["edge_cut"],
            alpha=metrics["partition"]["alpha"])


def test_report_ratios():
    """Print and save the ratios of the medians measured above (needs --benchmark-enable)."""
    if not RESULTS:
        pytest.skip("benchmarks disabled: run with --benchmark-enable to measure")
    rows = []
    for dropout in (0.5, 0.0):
        base = RESULTS.get(f"single_graphconv_dropout{dropout}")
        for workers in (2, 4):
            dist = RESULTS.get(f"dist{workers}_dropout{dropout}")
            if base and dist:
                rows.append(dict(workers=workers, dropout=dropout, single_s=base["median_s"],
                                 dist_s=dist["median_s"], ratio=dist["median_s"] / base["median_s"]))
    for r in rows:
        print(f"dropout {r['dropout']}: {r['workers']} workers {r['dist_s'] * 1e3:.1f} ms vs single "
              f"GraphConv {r['single_s'] * 1e3:.1f} ms -> {r['ratio']:.2f}x")
    os.makedirs(os.path.join(ROOT, "benchmarks", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "benchmarks", "results", "epoch_time.json"), "w") as fh:
        json.dump(dict(graph=dict(nodes=NODES, avg_degree=DEGREE, feat_dim=FEATS), hidden=HIDDEN,
                       measurements=RESULTS, ratios=rows), fh, indent=1)
    assert rows

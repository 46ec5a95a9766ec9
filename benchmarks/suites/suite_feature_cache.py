"""The stock-script switch's feature cache, benchmarked on DGL's own mini-batch example.

DGL 2.1.0's ``examples/distributed/graphsage/node_classification.py``, unchanged (the file
``$DGL_SNI_DGL_EXAMPLE`` names, else the DGL mirror ``bench_feature_cache.py`` reads; the
project cannot ship DGL's example, so without either the benchmark is skipped and says how to
give it one), run under
``dgl-sni launch`` at 1 Gbit/s by :func:`benchmarks.bench_feature_cache.compare_cache`: under
``DGL_SNI=1`` with the cache off (budget 0) and at 20% of each trainer's remote feature rows.
Quick: 2 machines, a 20k-node graph, 4 epochs; long: 2 and 4 machines, the 100k-node graph, 8
epochs, with stock DGL too (whether the switch's losses equal stock DGL's). Timed: the whole
comparison (one round); ``extra_info``: remote feature bytes per epoch with and without the
cache (after the first epoch, and over the later half of the epochs) and their ratio, epoch
times, test accuracies.
"""
import os
import shutil
import subprocess
import tempfile

import pytest

from benchmarks import bench_feature_cache as fc
from benchmarks.suites._support import EMULATED, fmt

QUICK = dict(workers=2, nodes=20_000, epochs=4, stock=False)
CASES = [pytest.param(QUICK, id="quick-w2")] + \
        [pytest.param(dict(workers=w, nodes=100_000, epochs=8, stock=True), id=f"long-w{w}", marks=pytest.mark.long)
         for w in (2, 4)]
FEAT_DIM, BUDGET = 128, "20%"


@pytest.fixture
def example_dir():
    """A fresh folder holding DGL's example, unchanged (the partitions go beside it)."""
    given = os.environ.get("DGL_SNI_DGL_EXAMPLE")
    if given and not os.path.isfile(given):
        pytest.fail(f"DGL_SNI_DGL_EXAMPLE={given} is not a file (DGL 2.1.0's {fc.EXAMPLE})")
    if not given and not os.path.isdir(fc.DGL_MIRROR):
        pytest.skip(f"needs DGL 2.1.0's {fc.EXAMPLE}: set DGL_SNI_DGL_EXAMPLE to its path (a checkout of DGL's "
                    f"repository at v2.1.0), or keep a DGL mirror at {fc.DGL_MIRROR}")
    work = tempfile.mkdtemp(prefix="suite-feature-cache-")
    try:
        fc._example(given or None, work)
    except subprocess.CalledProcessError as err:
        shutil.rmtree(work, ignore_errors=True)
        pytest.skip(f"the DGL mirror at {fc.DGL_MIRROR} has no v2.1.0 example: {err.stderr.strip()[-300:]}")
    yield work
    shutil.rmtree(work, ignore_errors=True)


def _run_figures(run: dict) -> dict:
    keep = ("epoch_time_s", "test_acc", "remote_feature_bytes_per_epoch", "remote_feature_bytes_first_epoch",
            "remote_feature_bytes_later_half", "feature_rows_from_cache", "cache_capacity_rows", "losses_equal_stock",
            "reproducible")
    return {k: run[k] for k in keep if k in run}


@pytest.mark.benchmark(group="feature cache")
@EMULATED
@pytest.mark.parametrize("case", CASES)
def test_cache_against_none(benchmark, case, example_dir):
    out = benchmark.pedantic(fc.compare_cache, args=(example_dir, case["workers"], case["epochs"], case["nodes"],
                                                     FEAT_DIM, BUDGET),
                             kwargs=dict(stock=case["stock"]), rounds=1, iterations=1)
    runs = {k: _run_figures(out[k]) for k in ("stock", "cache_off", "cache_on") if k in out}
    off, on = runs["cache_off"], runs["cache_on"]
    benchmark.extra_info.update(
        case, feat_dim=FEAT_DIM, budget=BUDGET, link="1gbit", runs=runs, bytes_ratio=out["bytes_ratio"],
        bytes_ratio_later_half=out["bytes_ratio_later_half"],
        timings_s={f"{k}_epoch": r["epoch_time_s"] for k, r in runs.items() if r.get("epoch_time_s") is not None},
        summary=(f"{case['workers']} machines: remote feature bytes/epoch {off['remote_feature_bytes_per_epoch']:.3g} "
                 f"-> {on['remote_feature_bytes_per_epoch']:.3g} with the cache ({out['bytes_ratio']:.2f}x fewer; "
                 f"later half {out['bytes_ratio_later_half']:.2f}x), epoch {fmt(off.get('epoch_time_s'), '.3f')} s -> "
                 f"{fmt(on.get('epoch_time_s'), '.3f')} s"))

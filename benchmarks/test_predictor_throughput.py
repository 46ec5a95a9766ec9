"""Throughput of the compiled predictor core (``dpu_agent.TrendPredictor``).

Setup: ``NUM_NODES`` (1M) tracked nodes, all initialised with two observations (t=0, 1);
each call names ``BATCH`` (64k) distinct random ids -- the next slice of a random
permutation, cycling through the slices, so consecutive calls touch different nodes and
the state is not cache-resident -- and ``step`` advances t by 1. ``step`` is the self-feeding update without observations (the agent's
hot path between syncs); ``predict_window`` reads the full ring (window 4).

Contenders, timed in the same rounds (interleaved, best of ``ROUNDS``, so that noise from
other jobs on the machine hits all of them alike):

* compiled: ``dpu_agent.TrendPredictor`` (one thread, GIL released);
* numpy: ``NumpyTrendPredictor`` (the test oracle, ``tests/dpu_agent/numpy_ref.py``), vectorised over rows
  (target: compiled >= 4x faster);
* gather: a plain numpy row gather ``a[idx]`` with the same ``idx``, where ``a`` is a
  read-only float32 view ``[num_nodes, record_floats]`` of the compiled state's own
  records (``TrendPredictor._records``: same total size, same huge-page backed numpy
  allocation, same rows) -- the memory-bound reference.

Byte accounting (logical bytes a row must move; ``dim`` floats of 4 B, times f64):

* ``step`` state: reads x_last and N (``8*dim``), D (4), t_last (8), ring head/fill (4);
  writes x_new into the ring and N (``8*dim``), D (4), t_last (8), the ring time (8),
  head/fill (4): ``state_bytes_per_row = 16*dim + 40`` (``TrendPredictor.state_bytes_per_row``).
* ``predict_window`` state (full ring of W): reads the W ring rows (``4*dim*W``), their
  times (``8*W``) and head/fill (4); writes no state: ``W*(4*dim + 8) + 4``.
* I/O per row, for both: the id read (8) and the output row written (``4*dim``).
* gather: reads a record row of ``R = 4*record_floats`` bytes and writes it to the
  output, plus the id: ``2*R + 8``.

``moved_GBps = rows/s * (state + I/O bytes)``; ``gather_GBps = gather rows/s * (2R + 8)``;
``frac_of_gather = moved_GBps / gather_GBps`` (target >= 0.5); ``frac_state_only`` uses the
state bytes alone. The gather's rows are whole records (wider than the vectors a step
touches), which makes it a demanding reference: a gather of ``dim``-wide rows reaches far
fewer bytes/s.

Derived figures go to ``benchmark.extra_info``; the last test prints a table and writes
``benchmarks/results/predictor_throughput.json``. With ``--benchmark-disable`` (the
default) each benchmarked call runs once and the interleaved timing uses 2 rounds.
Environment: ``SNI_PRED_BENCH_NODES`` overrides the node count.
"""
import gc
import json
import os
import platform
import time

import numpy as np
import pytest

from dpu_agent import TrendPredictor
# the numpy reference is the tests' oracle and lives beside them (not an installed module)
from tests.dpu_agent.numpy_ref import NumpyTrendPredictor

NUM_NODES = int(os.environ.get("SNI_PRED_BENCH_NODES", 1_000_000))
PROBE = min(256, NUM_NODES // 4)   # nodes never timed, to check compiled == numpy at the end
BATCH = min(65536, NUM_NODES - PROBE)
DIMS = [16, 64, 128]
WINDOW = 4
INIT_CHUNK = 1 << 12  # small chunks keep numpy temporaries on the heap (no mmap churn)
RESULTS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                            "predictor_throughput.json")
RESULTS = {}


class World:
    """One dim's compiled predictor, numpy reference and gather array, initialised."""

    def __init__(self, dim):
        rng = np.random.default_rng(dim)
        self.dim = dim
        perm = rng.permutation(NUM_NODES).astype(np.int64)
        self.probe = np.sort(perm[NUM_NODES - PROBE:])
        nslices = max(1, (NUM_NODES - PROBE) // BATCH)
        self.slices = [perm[k * BATCH:(k + 1) * BATCH] for k in range(nslices)]
        self.calls = 0
        base = rng.standard_normal((INIT_CHUNK, dim), dtype=np.float32)
        t0 = time.perf_counter()
        self.compiled = TrendPredictor(NUM_NODES, dim, window=WINDOW)
        self._init(self.compiled, base)
        self.init_compiled_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.numpy = NumpyTrendPredictor(NUM_NODES, dim, window=WINDOW)
        self._init(self.numpy, base)
        self.init_numpy_s = time.perf_counter() - t0
        # the gather reads the compiled state's own records: same size, same pages
        self.gather_src = self.compiled._records
        self.t = 1.0

    @staticmethod
    def _init(pred, base):
        for t in (0.0, 1.0):
            obs_all = base * np.float32(1 + t) + np.float32(0.01 * t)
            for s in range(0, NUM_NODES, INIT_CHUNK):
                ids = np.arange(s, min(NUM_NODES, s + INIT_CHUNK), dtype=np.int64)
                pred.step(ids, t, np.ascontiguousarray(obs_all[: len(ids)]))

    def next_ids(self):
        self.calls += 1
        return self.slices[self.calls % len(self.slices)]

    def close(self):
        del self.compiled, self.numpy, self.gather_src
        gc.collect()


@pytest.fixture(scope="module", params=DIMS, ids=lambda d: f"dim{d}")
def world(request):
    w = World(request.param)
    yield w
    w.close()


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def interleaved(contenders, rounds):
    """Best time of each contender over ``rounds`` rounds, contenders alternating."""
    best = {k: float("inf") for k in contenders}
    for _ in range(rounds):
        for k, fn in contenders.items():
            best[k] = min(best[k], timed(fn))
    return best


def measure(benchmark, world, op):
    dim, n = world.dim, len(world.slices[0])
    src = world.gather_src
    if op == "step":
        def run(pred):
            def call():
                world.t += 1.0
                pred.step(world.next_ids(), world.t)
            return call
        state_bytes = world.compiled.state_bytes_per_row
        assert state_bytes == 16 * dim + 40
    else:
        def run(pred):
            return lambda: pred.predict_window(world.next_ids(), world.t + 2.0)
        state_bytes = world.compiled.window_bytes_per_row
        assert state_bytes == WINDOW * (4 * dim + 8) + 4
    io_bytes = 8 + 4 * dim
    gather_bytes = 2 * 4 * src.shape[1] + 8

    benchmark.group = f"predictor {op}"
    benchmark(run(world.compiled))
    rounds = 2 if getattr(benchmark, "disabled", False) else 5
    best = interleaved({"compiled": run(world.compiled), "numpy": run(world.numpy),
                        "gather": lambda: src[world.next_ids()]}, rounds)
    rows = {k: n / v for k, v in best.items()}
    moved = rows["compiled"] * (state_bytes + io_bytes) / 1e9
    gather_bw = rows["gather"] * gather_bytes / 1e9
    info = {
        "op": op, "dim": dim, "num_nodes": NUM_NODES, "batch": n, "window": WINDOW, "rounds": rounds,
        "rows_per_s": rows["compiled"], "numpy_rows_per_s": rows["numpy"],
        "gather_rows_per_s": rows["gather"],
        "speedup_vs_numpy": rows["compiled"] / rows["numpy"],
        "state_bytes_per_row": state_bytes, "io_bytes_per_row": io_bytes,
        "gather_bytes_per_row": gather_bytes,
        "moved_GBps": moved, "state_GBps": rows["compiled"] * state_bytes / 1e9,
        "gather_GBps": gather_bw,
        "frac_of_gather": moved / gather_bw,
        "frac_state_only": rows["compiled"] * state_bytes / 1e9 / gather_bw,
        "init_compiled_s": world.init_compiled_s, "init_numpy_s": world.init_numpy_s,
    }
    benchmark.extra_info.update(info)
    RESULTS[(op, dim)] = info
    # the probe nodes (never timed) went through the same calls in both: still equal
    got = world.compiled.predict_window(world.probe, world.t + 2.0)
    ref = world.numpy.predict_window(world.probe, world.t + 2.0)
    assert np.abs(got - ref).max() <= 1e-5 * max(1.0, float(np.abs(ref).max()))


def test_step_throughput(benchmark, world):
    measure(benchmark, world, "step")


def test_predict_window_throughput(benchmark, world):
    measure(benchmark, world, "predict_window")


def test_zz_report():
    """Print the table and write the JSON (runs last: pytest keeps file order)."""
    if not RESULTS:
        pytest.skip("no throughput measured in this run")
    cols = ["op", "dim", "rows/s", "numpy rows/s", "speedup", "state B/row", "moved GB/s",
            "gather GB/s", "frac gather", "frac (state)"]
    lines = ["  ".join(f"{c:>14}" for c in cols)]
    for (op, dim), r in sorted(RESULTS.items()):
        vals = [op, dim, f"{r['rows_per_s']:.3g}", f"{r['numpy_rows_per_s']:.3g}",
                f"{r['speedup_vs_numpy']:.1f}x", r["state_bytes_per_row"], f"{r['moved_GBps']:.2f}",
                f"{r['gather_GBps']:.2f}", f"{r['frac_of_gather']:.2f}", f"{r['frac_state_only']:.2f}"]
        lines.append("  ".join(f"{v:>14}" for v in vals))
    print("\npredictor throughput, %d nodes, %d ids per call, window %d\n%s"
          % (NUM_NODES, BATCH, WINDOW, "\n".join(lines)))
    os.makedirs(os.path.dirname(RESULTS_PATH), exist_ok=True)
    with open(RESULTS_PATH, "w") as fh:
        json.dump({"num_nodes": NUM_NODES, "batch": BATCH, "window": WINDOW,
                   "machine": {"cpu_count": os.cpu_count(), "processor": platform.processor(),
                               "python": platform.python_version(), "numpy": np.__version__},
                   "results": [RESULTS[k] for k in sorted(RESULTS)]}, fh, indent=2)

"""The agent's benchmark suite: its predictor cores' throughput, its shared-memory transport, and
how much of its prediction hides behind the trainers' compute.

**Predictor throughput** (``test_step_throughput``, ``test_predict_window_throughput``): the
compiled predictor core that a history table runs (``dpu_agent.PredictorCore``, ``make_core`` of
``csrc/tables.hpp``) tracking ``nodes`` nodes; each call names ``BATCH`` (64k, fewer on small
worlds) distinct random ids -- the next slice of a random permutation, cycling through the
slices, so consecutive calls touch different nodes and the state is not cache-resident.
``step``: ``PredictorCore('linear-trend').serve``, the self-feeding update without observations
(the agent's hot path between syncs), every node initialised with two observations (t=0, 1),
each call advancing t by 1. ``predict_window``: ``PredictorCore('window-trend').serve``, the
read-only windowed trend over the full ring (window 4: every node observed at t=0..3). Quick:
250k nodes, dims 16 and 64; long: 1M nodes, dims 16, 64 and 128. Timed: one call of the
compiled core. Contenders, timed in the same rounds (interleaved, best of 5, so that noise from
other jobs hits all of them alike):

* compiled: ``dpu_agent.PredictorCore`` (one thread, GIL released); its state lives in the
  C++ core's own 64-byte aligned allocation, as in the agent;
* numpy: ``NumpyCore`` of the same kind (the test oracle, ``tests/dpu_agent/numpy_ref.py``),
  vectorised over rows;
* gather: a plain numpy row gather ``a[idx]`` with the same ``idx``, where ``a`` is a float32
  ``[nodes, record_floats]`` numpy array, filled, with the compiled core's record size
  (``PredictorCore.record_floats``; the core does not expose its records) -- the memory-bound
  reference. numpy asks the kernel for transparent huge pages for such an array; the core's
  allocation does not, so where huge pages are on request only the gather has the easier
  TLB.

Byte accounting (logical bytes a row must move; ``dim`` floats of 4 B, times f64): ``step``
reads x_last and N (``8*dim``), D (4), t_last (8), ring head/fill (4) and writes x_new into the
ring and N (``8*dim``), D (4), t_last (8), the ring time (8), head/fill (4):
``16*dim + 40``; ``predict_window`` (full ring of W) reads the W ring rows (``4*dim*W``), their
times (``8*W``) and head/fill (4): ``W*(4*dim + 8) + 4``. I/O per row, for both: the id read
(8), the output row (``4*dim``) and its weight (4) written. The gather reads a record row of
``R = 4*record_floats`` bytes and writes it, plus the id: ``2*R + 8``. ``moved_GBps = rows/s *
(state + I/O bytes)``; ``frac_of_gather = moved_GBps / gather GB/s``; ``frac_state_only`` uses the
state bytes alone. The gather's rows are whole records (wider than the vectors a step touches),
a demanding reference. After the timing, nodes never timed (the probe) are checked equal
between the compiled core and numpy.

**Transport** (``test_transport``): :func:`benchmarks.bench_agent.transport` against a fresh
``sni-agent`` process: the round trip of a minimal message and the bandwidth of row blocks
agent-ward (``observe``) and back (``result``) against ``numpy.copyto`` of the same bytes; quick
and long sizes are ``bench_agent``'s ``quick`` and ``full`` presets. Timed: the whole measurement.

**Pipeline** (``test_pipeline``): :func:`benchmarks.bench_agent.pipeline`, one 2-worker training
run per agent mode (``inline``, ``process``) at interval 5 with ``gated`` on the 20k-node graph:
per stale epoch the predictor's time, the trainers' wait for it and the fraction hidden behind
compute (quick: 12 epochs; long: 30). Timed: the whole sweep.
"""
import gc
import time

import numpy as np
import pytest

from benchmarks import bench_agent
from benchmarks.suites._support import EMULATED, fmt, sizes
from dpu_agent import PredictorCore
# the numpy reference is the tests' oracle and lives beside them (not an installed module)
from tests.dpu_agent.numpy_ref import NumpyCore

WINDOW = 4
INIT_CHUNK = 1 << 12  # small chunks keep numpy temporaries on the heap (no mmap churn)
ROUNDS = 5
WORLDS = [pytest.param((250_000, dim), id=f"250k-dim{dim}") for dim in (16, 64)] + \
         [pytest.param((1_000_000, dim), id=f"1M-dim{dim}", marks=pytest.mark.long) for dim in (16, 64, 128)]


OPS = {  # op: (predictor kind, observations before timing, state bytes per row)
    "step": ("linear-trend", 2, lambda dim: 16 * dim + 40),
    "predict_window": ("window-trend", WINDOW, lambda dim: WINDOW * (4 * dim + 8) + 4),
}


class World:
    """One size's compiled core of ``kind``, its numpy reference and the gather array, initialised
    with ``observations`` observations of every node (t = 0, 1, ...)."""

    def __init__(self, kind, observations, nodes, dim):
        rng = np.random.default_rng(dim)
        self.nodes, self.dim = nodes, dim
        probe = min(256, nodes // 4)  # nodes never timed, to check compiled == numpy at the end
        self.batch = min(65536, nodes - probe)
        perm = rng.permutation(nodes).astype(np.int64)
        self.probe = np.sort(perm[nodes - probe:])
        nslices = max(1, (nodes - probe) // self.batch)
        self.slices = [perm[k * self.batch:(k + 1) * self.batch] for k in range(nslices)]
        self.calls = 0
        base = rng.standard_normal((INIT_CHUNK, dim), dtype=np.float32)
        times = [float(t) for t in range(observations)]
        t0 = time.perf_counter()
        self.compiled = PredictorCore(kind, nodes, dim, window=WINDOW)
        self._init(self.compiled, base, times)
        self.init_compiled_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.numpy = NumpyCore(kind, nodes, dim, window=WINDOW)
        self._init(self.numpy, base, times)
        self.init_numpy_s = time.perf_counter() - t0
        # the gather's array: the compiled records' size, pages touched
        self.gather_src = np.ones((nodes, self.compiled.record_floats), dtype=np.float32)
        self.t = times[-1]

    def _init(self, pred, base, times):
        for t in times:
            obs_all = base * np.float32(1 + t) + np.float32(0.01 * t * t)
            for s in range(0, self.nodes, INIT_CHUNK):
                ids = np.arange(s, min(self.nodes, s + INIT_CHUNK), dtype=np.int64)
                pred.observe(ids, t, np.ascontiguousarray(obs_all[: len(ids)]))

    def next_ids(self):
        self.calls += 1
        return self.slices[self.calls % len(self.slices)]

    def close(self):
        del self.compiled, self.numpy, self.gather_src
        gc.collect()


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def interleaved(contenders, rounds):
    """Best time of each contender over ``rounds`` rounds, contenders alternating."""
    best = {k: float("inf") for k in contenders}
    for _ in range(rounds):
        for k, fn in contenders.items():
            best[k] = min(best[k], _timed(fn))
    return best


def measure(benchmark, op, nodes, dim):
    kind, observations, state_bytes = OPS[op]
    world = World(kind, observations, nodes, dim)
    try:
        _measure(benchmark, world, op, kind, state_bytes(dim))
    finally:
        world.close()


def _measure(benchmark, world, op, kind, state_bytes):
    dim, n = world.dim, world.batch
    src = world.gather_src
    if op == "step":
        def run(pred):
            def call():
                world.t += 1.0
                pred.serve(world.next_ids(), world.t)
            return call
    else:
        def run(pred):
            return lambda: pred.serve(world.next_ids(), world.t + 2.0)
    io_bytes = 8 + 4 * dim + 4
    gather_bytes = 2 * 4 * src.shape[1] + 8

    benchmark(run(world.compiled))
    best = interleaved({"compiled": run(world.compiled), "numpy": run(world.numpy),
                        "gather": lambda: src[world.next_ids()]}, ROUNDS)
    rows = {k: n / v for k, v in best.items()}
    moved = rows["compiled"] * (state_bytes + io_bytes) / 1e9
    gather_bw = rows["gather"] * gather_bytes / 1e9
    benchmark.extra_info.update({
        "op": op, "kind": kind, "dim": dim, "num_nodes": world.nodes, "batch": n, "window": WINDOW,
        "rounds": ROUNDS, "rows_per_s": rows["compiled"], "numpy_rows_per_s": rows["numpy"],
        "gather_rows_per_s": rows["gather"],
        "speedup_vs_numpy": rows["compiled"] / rows["numpy"],
        "state_bytes_per_row": state_bytes, "io_bytes_per_row": io_bytes,
        "gather_bytes_per_row": gather_bytes,
        "moved_GBps": moved, "state_GBps": rows["compiled"] * state_bytes / 1e9,
        "gather_GBps": gather_bw,
        "frac_of_gather": moved / gather_bw,
        "frac_state_only": rows["compiled"] * state_bytes / 1e9 / gather_bw,
        "init_compiled_s": world.init_compiled_s, "init_numpy_s": world.init_numpy_s,
        "summary": (f"{op} dim {dim}, {world.nodes} nodes: {rows['compiled']:.3g} rows/s, "
                    f"{rows['compiled'] / rows['numpy']:.1f}x numpy, {moved:.2f} GB/s = "
                    f"{moved / gather_bw:.2f} of a row gather"),
    })
    # the probe nodes (never timed) went through the same calls in both: still equal
    got, _ = world.compiled.serve(world.probe, world.t + 2.0, preview=True)
    ref, _ = world.numpy.serve(world.probe, world.t + 2.0, preview=True)
    assert np.abs(got - ref).max() <= 1e-5 * max(1.0, float(np.abs(ref).max()))


@pytest.mark.benchmark(group="agent: predictor step")
@pytest.mark.parametrize("size", WORLDS)
def test_step_throughput(benchmark, size):
    measure(benchmark, "step", *size)


@pytest.mark.benchmark(group="agent: predictor predict_window")
@pytest.mark.parametrize("size", WORLDS)
def test_predict_window_throughput(benchmark, size):
    measure(benchmark, "predict_window", *size)


# --------------------------------------------------------------------- transport and pipeline
@pytest.mark.benchmark(group="agent")
@pytest.mark.parametrize("preset", sizes("quick", "full"))
def test_transport(benchmark, preset):
    p = bench_agent.PRESETS[preset]
    t = benchmark.pedantic(bench_agent.transport, args=(p["rows"], p["dims"], p["repeats"], p["latency_repeats"],
                                                        p["min_time"]), rounds=1, iterations=1)
    latency = {k: v["median"] for k, v in t["latency"].items()}
    blocks = [dict(rows=b["rows"], dim=b["dim"], observe_GBps=b["observe"]["GBps"], result_GBps=b["result"]["GBps"],
                   memcpy_GBps=b["memcpy"]["GBps"], observe_over_memcpy=b["observe_over_memcpy"],
                   result_over_memcpy=b["result_over_memcpy"]) for b in t["bandwidth"]]
    timings = {k[:-2]: v for k, v in latency.items()}
    timings.update({f"{name}_{b['rows']}x{b['dim']}": b[name]["seconds"]["median"]
                    for b in t["bandwidth"] for name in ("observe", "result")})
    big = max(t["bandwidth"], key=lambda b: b["bytes"])
    benchmark.extra_info.update(
        preset=preset, latency_median_s=latency, bandwidth=blocks, transport=t, timings_s=timings,
        summary=(f"stats round trip {latency['stats_rtt_s'] * 1e6:.1f} us; {big['rows']} x {big['dim']} rows: observe "
                 f"{big['observe']['GBps']:.2f} GB/s, result {big['result']['GBps']:.2f} GB/s, memcpy "
                 f"{big['memcpy']['GBps']:.2f} GB/s"))


@pytest.mark.benchmark(group="agent")
@EMULATED
@pytest.mark.parametrize("preset", sizes("quick", "full"))
def test_pipeline(benchmark, preset):
    p = bench_agent.PRESETS[preset]
    out = benchmark.pedantic(bench_agent.pipeline, args=(p["nodes"], p["epochs"], 16, 3, 2, p["floor_repeats"]),
                             rounds=1, iterations=1)
    modes = {mode: m["summary"] for mode, m in out["modes"].items()}
    benchmark.extra_info.update(
        preset=preset, config=out["config"], modes=modes,
        timings_s={f"{mode}_{k}": s[k] for mode, s in modes.items()
                   for k in ("stale_epoch_s", "sync_epoch_s", "predictor_s", "agent_wait_s") if s[k] is not None},
        summary="; ".join(f"{mode}: hidden {fmt(s['hidden_fraction'], '.2f')} of {fmt(s['predictor_s'], '.2f', 1e3)} ms "
                          f"predictor time, stale epoch {fmt(s['stale_epoch_s'], '.1f', 1e3)} ms"
                          for mode, s in modes.items()))

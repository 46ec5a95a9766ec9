"""Agent pipeline and transport benchmark: how much prediction hides behind compute, what the
shared-memory transport costs against a plain memcpy.

Two parts, written to ``benchmarks/results/agent.json`` (``--out``) and printed as tables:

* **pipeline** -- one training run per agent mode (``inline``: a thread of the trainer;
  ``process``: the ``sni-agent`` binary beside it over a Unix socket and shared memory) on
  one emulated cluster (``dgl-sni train --sweep``; 2 workers, the embedded synthetic graph,
  3-layer GCN, ``--sync-interval 5 --warmup 5 --predictor gated --sampling-ratio 0.3``).
  Per stale epoch: ``predictor_s`` (agent time in the predictor cores, both workers),
  ``agent_wait_s`` (time the trainers were blocked in the agent's ``result`` call, both
  workers) and the hidden fraction ``1 - wait / predictor`` (clipped to [0, 1]); medians
  over the stale epochs per mode, and the median stale and sync epoch times. Because the
  process agent's wait also contains copying the served rows out of shared memory (work no
  prediction can hide), the ``result`` call on rows that are already computed is timed too
  at the run's table shapes (the transport floor), and the fraction hidden beyond it.
* **transport** -- with :func:`dpu_agent.client.spawn_agent` and its
  :class:`~dpu_agent.shm.ShmHostEndpoint`: the round trip of a minimal message (``stats``),
  and the bandwidth of moving row blocks (``--rows`` x ``--dims`` float32) agent-ward
  (``observe``) and back (``serve`` of a cache table), each against ``numpy.copyto`` of
  the same bytes. Every figure's ``what`` in the JSON says what it includes.

    python benchmarks/bench_agent.py            # both parts (a minute or two)
    python benchmarks/bench_agent.py --quick    # smoke run
    python benchmarks/bench_agent.py --parts transport --rows 1000,100000 --dims 64
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

RESULTS = os.path.join(ROOT, "benchmarks", "results")
MODES = ("inline", "process")
PRESETS = {
    "full": dict(nodes=20000, epochs=30, rows=[1000, 10000, 100000], dims=[16, 64], repeats=50,
                 latency_repeats=2000, floor_repeats=50, min_time=0.25),
    "quick": dict(nodes=20000, epochs=12, rows=[1000, 10000], dims=[16], repeats=10,
                  latency_repeats=200, floor_repeats=10, min_time=0.0),
}
SNI = ["--sync-interval", 5, "--warmup", 5, "--predictor", "gated", "--sampling-ratio", 0.3]

WHAT = dict(
    pipeline=dict(
        predictor_s="agent time inside the predictor cores during the epoch (C++ serve/observe of the "
                    "sampled rows; stats() delta at the epoch's end), summed over the workers; not the "
                    "agent's copies of the cache and of the served rows, nor the transport",
        agent_wait_s="time the trainers were blocked in the agent's result() call for the step's rows "
                     "(dgl_sni.halo.resolver counter agent_wait_s), summed over the workers and the "
                     "exchanged layers; for process it includes receiving the reply and copying the "
                     "served rows and weights out of shared memory",
        hidden_fraction="1 - agent_wait_s / predictor_s of the epoch, clipped to [0, 1]; median over "
                        "the stale epochs",
        hidden_fraction_total="1 - (sum of agent_wait_s) / (sum of predictor_s) over the stale epochs, "
                              "clipped to [0, 1]: the long waits the median ignores count here",
        epochs_hidden_80="stale epochs whose hidden_fraction is at least 0.8",
        transport_floor_s="per stale epoch, the result() call for rows the agent has already computed "
                          "(a cache table of each worker's halo rows x hidden, idle agent, median), "
                          "times the exchanged layers, summed over the workers: the part of the wait "
                          "no prediction can hide (measured outside the run, on the same machine)",
        hidden_fraction_beyond_transport="1 - max(agent_wait_s - transport_floor_s, 0) / predictor_s, "
                                         "clipped to [0, 1]; median over the stale epochs (an estimate: "
                                         "a median floor subtracted from each epoch's wait)",
        stale_epoch_s="median wall time of a stale training epoch (slowest worker; evaluation excluded)",
        sync_epoch_s="median wall time of a sync training epoch after the warm-up",
        sync_agent_wait_s="median over sync epochs after the warm-up of agent_wait_s: the drift "
                          "transfer's preview of the step, which is not prefetched",
    ),
    transport=dict(
        stats_rtt="one `stats` message through the ShmHostEndpoint: encoding, sendall of the 32-byte "
                  "header on the Unix socket, the agent's reply (32-byte header + 32-byte payload), "
                  "receiving and decoding it in Python; per-call wall time",
        client_stats_rtt="RemoteAgentClient.stats(): stats_rtt plus the client's reply bookkeeping",
        serve_1row_rtt="RemoteAgentClient.result() of a 1-row x 16 cache table (memoised step): serve "
                       "request, the agent's copy into shared memory, reply, copy of the row and "
                       "weight out of shared memory",
        inline_stats_rtt="InlineAgentClient.stats(): a hop to the agent thread and back (no transport; "
                         "for comparison)",
        observe="trainer copies the block into the table's `fresh` shared-memory region (np.copyto), "
                "sends `observe`, the agent copies it out of shared memory into its buffer and observes "
                "it into a cache table (a per-row distance to the previous rows and a copy into its "
                "history; no sampled rows, no predictor), replies; until the reply is decoded",
        result="trainer sends `serve` (memoised step of a cache table), the agent copies its memoised "
               "served rows and weights into its send buffer and from there into the `served`/`weight` "
               "shared-memory regions, replies; the trainer copies both "
               "out of shared memory (ndarray.copy(), a fresh allocation, as the client does); GB/s "
               "counts the rows block only (the weight vector, 4 bytes a row, travels too)",
        trainer_copy="the trainer's own share alone: np.copyto into the `fresh` region (observe) or "
                     "`served` region .copy() (result)",
        memcpy="numpy.copyto between two preallocated, touched float32 arrays of the same shape",
        GBps="bytes of the rows block (rows x dim x 4) / median seconds, 1 GB = 1e9 bytes",
    ),
)


# ----------------------------------------------------------------------------- timing helpers
def _stats(samples: list) -> dict:
    s = sorted(samples)
    q = lambda p: s[min(len(s) - 1, int(p * len(s)))]  # noqa: E731
    return dict(median=statistics.median(s), p10=q(0.1), p90=q(0.9), n=len(s))


def _timed(fn, repeats: int, warmup: int = 2, min_time: float = 0.0) -> list:
    """Per-call wall times of ``fn``: at least ``repeats`` calls, more (up to 20 times as
    many) until ``min_time`` seconds have been timed (small, noisy operations)."""
    for _ in range(warmup):
        fn()
    out, total = [], 0.0
    while len(out) < repeats or (total < min_time and len(out) < 20 * repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
        total += out[-1]
    return out


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _clip01(x):
    return None if x is None else min(max(x, 0.0), 1.0)


# ----------------------------------------------------------------------------- transport
def _check(reply: dict) -> dict:
    if reply.get("error"):
        raise RuntimeError(f"agent error: {reply['error']}")
    return reply


def _latency(client, repeats: int) -> dict:
    from dpu_agent.client import InlineAgentClient
    ep = client.endpoint
    out = {}

    def stats_rtt():
        ep.send(dict(op="stats"))
        _check(ep.recv())

    out["stats_rtt_s"] = _stats(_timed(stats_rtt, repeats, warmup=20))
    out["client_stats_rtt_s"] = _stats(_timed(client.stats, repeats, warmup=20))
    client.add_table(9999, 1, 16, np.zeros(1, bool), "cache")
    client.observe(9999, 0.0, np.ones((1, 16), np.float32))
    out["serve_1row_rtt_s"] = _stats(_timed(lambda: client.result(9999, 1.0), repeats, warmup=20))
    inline = InlineAgentClient()
    try:
        out["inline_stats_rtt_s"] = _stats(_timed(inline.stats, repeats, warmup=20))
    finally:
        inline.close()
    return out


def _bandwidth(client, table: int, rows: int, dim: int, repeats: int, min_time: float) -> dict:
    ep = client.endpoint
    client.add_table(table, rows, dim, np.zeros(rows, bool), "cache")
    rng = np.random.default_rng(table)
    block = rng.standard_normal((rows, dim), dtype=np.float32)
    fresh, served = ep.region(table, "fresh"), ep.region(table, "served")
    step = [0.0]

    def observe():
        np.copyto(fresh[:rows], block)
        ep.send(dict(op="observe", table=table, step=step[0], count=rows, partial=False))
        _check(ep.recv())
        step[0] += 1.0

    obs = _timed(observe, repeats, min_time=min_time)
    obs_copy = _timed(lambda: np.copyto(fresh[:rows], block), repeats, min_time=min_time)
    serve_step = step[0] + 1.0  # after every observe: the cache rows are `block`
    got = {}

    def result():
        ep.send(dict(op="serve", table=table, step=serve_step, preview=False))
        _check(ep.recv())
        got["rows"], got["weight"] = ep.region(table, "served").copy(), ep.region(table, "weight").copy()

    res = _timed(result, repeats, min_time=min_time)  # the first (warm-up) serve computes, the others are memoised
    if not np.array_equal(got["rows"], block) or got["weight"].any():
        raise RuntimeError("the served rows are not the rows observed: the transport moved something else")
    res_copy = _timed(lambda: served.copy(), repeats, min_time=min_time)
    dst = np.empty_like(block)
    dst.fill(0)
    mem = _timed(lambda: np.copyto(dst, block), repeats, min_time=min_time)
    nbytes = rows * dim * 4
    gbps = lambda s: nbytes / s / 1e9  # noqa: E731
    entry = dict(rows=rows, dim=dim, bytes=nbytes)
    for name, samples, copy in (("observe", obs, obs_copy), ("result", res, res_copy)):
        st = _stats(samples)
        entry[name] = dict(seconds=st, GBps=gbps(st["median"]), trainer_copy_s=_stats(copy)["median"])
    ms = _stats(mem)
    entry["memcpy"] = dict(seconds=ms, GBps=gbps(ms["median"]))
    for name in ("observe", "result"):
        entry[f"{name}_over_memcpy"] = entry[name]["seconds"]["median"] / ms["median"]
    return entry


def transport(rows: list, dims: list, repeats: int, latency_repeats: int, min_time: float = 0.0) -> dict:
    """Latency and bandwidth of the shm transport (a fresh ``sni-agent`` process)."""
    from dpu_agent.client import spawn_agent
    client = spawn_agent()
    try:
        latency = _latency(client, latency_repeats)
        bandwidth = [_bandwidth(client, 100 + k, n, d, repeats, min_time)
                     for k, (n, d) in enumerate((n, d) for d in dims for n in rows)]
    finally:
        client.close()
    return dict(what=WHAT["transport"], latency=latency, bandwidth=bandwidth)


# ----------------------------------------------------------------------------- pipeline
def _compute_for(seconds: float) -> None:
    """Keep this core busy for ``seconds`` as a trainer computing does: numpy loops that
    release the GIL between and during calls (a sleep would let the core idle and make the
    next call pay for waking it up)."""
    work = np.ones(1 << 14, np.float32)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        np.sqrt(work, out=work)


def ready_result_s(client, rows: int, dim: int, repeats: int, table: int = 0) -> float:
    """Median time of ``client.result()`` for rows the agent has already computed (a memoised
    step of a cache table of ``rows`` x ``dim``): what a fully hidden prediction still costs."""
    client.add_table(table, rows, dim, np.zeros(rows, bool), "cache")
    client.observe(table, 0.0, np.ones((rows, dim), np.float32))
    client.result(table, 1.0)  # computes and memoises step 1
    samples = []
    for _ in range(repeats + 2):
        client.request(table, 1.0)
        _compute_for(0.002 + rows * dim * 4 / 1e9)  # the agent answers meanwhile (>= 1 GB/s)
        t0 = time.perf_counter()
        client.result(table, 1.0)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples[2:])


def _floors(halo_rows: list, dim: int, tables: int, repeats: int) -> dict:
    """Per mode: the ready-rows result() time of every worker's tables, summed (seconds)."""
    from dpu_agent.client import InlineAgentClient, spawn_agent
    out = {}
    for mode in MODES:
        client = InlineAgentClient() if mode == "inline" else spawn_agent()
        try:
            out[mode] = sum(tables * ready_result_s(client, rows, dim, repeats, table=w)
                            for w, rows in enumerate(halo_rows))
        finally:
            client.close()
    return out


def _summarize_mode(metrics: dict, floor_s: float) -> dict:
    cfg = metrics["config"]
    epochs = metrics["epochs"]
    rows = []
    for e in epochs:
        pred, wait = e.get("predictor_s"), e.get("agent_wait_s", 0.0)
        hidden = _clip01(1.0 - wait / pred) if e["mode"] == "stale" and pred else None
        beyond = _clip01(1.0 - max(wait - floor_s, 0.0) / pred) if e["mode"] == "stale" and pred else None
        rows.append(dict(epoch=e["epoch"], mode=e["mode"], time_s=e["time_s"], comp_s=e.get("comp_s"),
                         comm_s=e.get("comm_s"), predictor_s=pred, agent_wait_s=wait,
                         hidden_fraction=hidden, hidden_fraction_beyond_transport=beyond,
                         predicted_rows=e.get("predicted_rows"), cached_rows=e.get("cached_rows"),
                         workers=[dict(predictor_s=w.get("predictor_s"), agent_wait_s=w.get("agent_wait_s", 0.0))
                                  for w in e.get("workers", [])]))
    stale = [r for r in rows if r["mode"] == "stale"]
    sync = [r for r in rows if r["mode"] == "sync" and r["epoch"] >= cfg["warmup"]]
    summary = dict(
        stale_epochs=len(stale), sync_epochs=len(sync),
        predictor_s=_median([r["predictor_s"] for r in stale]),
        agent_wait_s=_median([r["agent_wait_s"] for r in stale]),
        hidden_fraction=_median([r["hidden_fraction"] for r in stale]),
        hidden_fraction_total=_clip01(1.0 - sum(r["agent_wait_s"] for r in stale) /
                                      sum(r["predictor_s"] for r in stale))
        if stale and all(r["predictor_s"] for r in stale) else None,
        epochs_hidden_80=sum(1 for r in stale if (r["hidden_fraction"] or 0.0) >= 0.8),
        transport_floor_s=floor_s,
        hidden_fraction_beyond_transport=_median([r["hidden_fraction_beyond_transport"] for r in stale]),
        stale_epoch_s=_median([r["time_s"] for r in stale]),
        sync_epoch_s=_median([r["time_s"] for r in sync]),
        sync_agent_wait_s=_median([r["agent_wait_s"] for r in sync]),
        sync_predictor_s=_median([r["predictor_s"] for r in sync]),
        predicted_rows=_median([r["predicted_rows"] for r in stale]),
        served_rows=_median([(r["predicted_rows"] or 0) + (r["cached_rows"] or 0) for r in stale]),
    )
    return dict(summary=summary, epochs=rows)


def pipeline(nodes: int, epochs: int, hidden: int, layers: int, workers: int, floor_repeats: int) -> dict:
    """One training run per agent mode on one emulated cluster; per stale epoch the agent's
    predictor time and the trainers' wait for it."""
    from benchmarks._sweep import run_sweep
    data = ["--dataset", "synthetic", "--nodes", nodes]
    model = ["--model", "gcn", "--layers", layers, "--hidden", hidden, "--dropout", 0.5,
             "--eval-every", epochs]  # one evaluation, after the last epoch
    out_dir = tempfile.mkdtemp(prefix="bench-agent-")
    try:
        entries = [dict(agent=mode, epochs=epochs) for mode in MODES]
        start = time.time()
        metrics = run_sweep(data, workers, entries, out_dir, base_args=model + SNI)
        wall = time.time() - start
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    halo = [w["halo_nodes"] for w in metrics[0]["summary"]["workers"]]
    tables = layers - 1  # one exchanged table per hidden layer (GCN: width hidden)
    floors = _floors(halo, hidden, tables, floor_repeats)
    modes = {m["config"]["agent"]: _summarize_mode(m, floors[m["config"]["agent"]]) for m in metrics}
    config = dict(nodes=nodes, epochs=epochs, hidden=hidden, layers=layers, workers=workers,
                  model="gcn", args=[str(a) for a in data + model + SNI], halo_rows_per_worker=halo,
                  tables_per_worker=tables, order=list(MODES), sweep_wall_s=wall)
    return dict(what=WHAT["pipeline"], config=config, modes=modes)


# ----------------------------------------------------------------------------- report
def _f(x, scale=1.0, spec=".3f"):
    return "-" if x is None else format(x * scale, spec)


def _print_pipeline(p: dict) -> None:
    c = p["config"]
    print(f"pipeline: {c['workers']} workers, {c['nodes']} nodes, {c['layers']}-layer GCN hidden {c['hidden']}, "
          f"{c['epochs']} epochs; halo rows/worker {c['halo_rows_per_worker']}")
    print(f"  {'mode':8s} {'stale':>5s} {'pred ms':>8s} {'wait ms':>8s} {'hidden':>7s} {'floor ms':>9s} "
          f"{'total':>6s} {'>=0.8':>5s} {'hid>floor':>9s} {'stale ms':>9s} {'sync ms':>8s} {'syncwait':>9s} {'pred rows':>9s}")
    for mode, m in p["modes"].items():
        s = m["summary"]
        print(f"  {mode:8s} {s['stale_epochs']:5d} {_f(s['predictor_s'], 1e3):>8s} {_f(s['agent_wait_s'], 1e3):>8s} "
              f"{_f(s['hidden_fraction'], 1, '.2f'):>7s} {_f(s['transport_floor_s'], 1e3):>9s} "
              f"{_f(s['hidden_fraction_total'], 1, '.2f'):>6s} {s['epochs_hidden_80']:5d} "
              f"{_f(s['hidden_fraction_beyond_transport'], 1, '.2f'):>9s} {_f(s['stale_epoch_s'], 1e3, '.1f'):>9s} "
              f"{_f(s['sync_epoch_s'], 1e3, '.1f'):>8s} {_f(s['sync_agent_wait_s'], 1e3):>9s} "
              f"{_f(s['predicted_rows'], 1, '.0f'):>9s}")


def _print_transport(t: dict) -> None:
    lat = t["latency"]
    print("transport latency (median, p10-p90, us): " + "; ".join(
        f"{k[:-2]} {v['median'] * 1e6:.1f} ({v['p10'] * 1e6:.1f}-{v['p90'] * 1e6:.1f})" for k, v in lat.items()))
    print(f"  {'rows':>7s} {'dim':>4s} {'MB':>7s} {'obs GB/s':>9s} {'res GB/s':>9s} {'memcpy':>8s} "
          f"{'obs/mcp':>8s} {'res/mcp':>8s} {'obs cp ms':>9s} {'res cp ms':>9s}")
    for b in t["bandwidth"]:
        print(f"  {b['rows']:7d} {b['dim']:4d} {b['bytes'] / 1e6:7.2f} {b['observe']['GBps']:9.2f} "
              f"{b['result']['GBps']:9.2f} {b['memcpy']['GBps']:8.2f} {b['observe_over_memcpy']:8.2f} "
              f"{b['result_over_memcpy']:8.2f} {b['observe']['trainer_copy_s'] * 1e3:9.3f} "
              f"{b['result']['trainer_copy_s'] * 1e3:9.3f}")
    print("  (obs/mcp, res/mcp: time of the transport over time of one memcpy of the same bytes)")


def _ints(text: str) -> list:
    return [int(x) for x in text.split(",") if x]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: fewer epochs, sizes and repeats")
    parser.add_argument("--parts", default="pipeline,transport", help="comma-separated: pipeline, transport")
    parser.add_argument("--nodes", type=int, default=None, help="pipeline: synthetic graph nodes")
    parser.add_argument("--epochs", type=int, default=None, help="pipeline: epochs per mode")
    parser.add_argument("--hidden", type=int, default=16, help="pipeline: hidden width")
    parser.add_argument("--layers", type=int, default=3, help="pipeline: GCN layers")
    parser.add_argument("--workers", type=int, default=2, help="pipeline: emulated machines")
    parser.add_argument("--rows", default=None, help="transport: comma-separated block rows")
    parser.add_argument("--dims", default=None, help="transport: comma-separated row widths (float32)")
    parser.add_argument("--repeats", type=int, default=None, help="transport: timed repeats per block size")
    parser.add_argument("--latency-repeats", type=int, default=None, help="transport: timed round trips")
    parser.add_argument("--out", default=None, help="result JSON (default benchmarks/results/agent[-quick].json)")
    ns = parser.parse_args(argv)
    preset = dict(PRESETS["quick" if ns.quick else "full"])
    parts = [p for p in ns.parts.split(",") if p]
    if not parts or set(parts) - {"pipeline", "transport"}:
        parser.error("--parts takes pipeline and/or transport")
    rows = _ints(ns.rows) if ns.rows else preset["rows"]
    dims = _ints(ns.dims) if ns.dims else preset["dims"]
    repeats = ns.repeats or preset["repeats"]
    latency_repeats = ns.latency_repeats or preset["latency_repeats"]
    report = dict(preset="quick" if ns.quick else "full", parts=parts,
                  machine=dict(cpus=os.cpu_count(), platform=platform.platform(), python=platform.python_version(),
                               numpy=np.__version__, load_avg=os.getloadavg()))
    if "transport" in parts:  # first: the training cluster's teardown would disturb it
        report["transport"] = transport(rows, dims, repeats, latency_repeats, preset["min_time"])
    if "pipeline" in parts:
        report["pipeline"] = pipeline(ns.nodes or preset["nodes"], ns.epochs or preset["epochs"], ns.hidden,
                                      ns.layers, ns.workers, preset["floor_repeats"])
        _print_pipeline(report["pipeline"])
    if "transport" in parts:
        _print_transport(report["transport"])
    out = ns.out or os.path.join(RESULTS, "agent-quick.json" if ns.quick else "agent.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as fh:
        json.dump(report, fh, indent=1, allow_nan=False)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

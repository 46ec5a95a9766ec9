"""The results report's suite: what it trains and how its parts are read from the record.

Declares the suite (:data:`METHODS` and what each is, :data:`SUITES`), and computes each part
of the report (the comparison per graph and link, boundary node sampling on a second graph, DGL's
example, scaling, the storage tier with prediction, the cost model) from a source of runs: a
:class:`~benchmarks.record.Recorder` (trains what the record lacks) or a
:class:`~benchmarks.record.Replay` (reads the record, trains nothing). Called by
``benchmarks/results_report.py``; :mod:`benchmarks.report_pages` writes what it returns.
"""
from __future__ import annotations

import contextlib
import glob
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time

from benchmarks import bench_e2e, seed_sweeps
from benchmarks.record import RECORD, MissingRun, Recorder, Replay

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")

# the methods of the comparison: bench_e2e configurations (interval 1 first: the others are judged
# against it), declared in benchmarks/configs/peers.json so that one command trains them over seeds:
#   python benchmarks/bench_e2e.py --preset full --graphs syn200k --links 1gbit \
#       --configs benchmarks/configs/peers.json --seeds 0,1,2
# (SETTING says which rows are the peers in their own settings and which in fast's)
PEERS_CONFIG = os.path.join(ROOT, "benchmarks", "configs", "peers.json")
with open(PEERS_CONFIG) as _fh:
    METHODS = json.load(_fh)
SETTING = {  # which setting each row of the comparison is in
    "cache-no-averaging": "fast's", "linear-trend": "fast's", "pipelined": "fast's", "exact-8bit": "own",
    "exact-4bit": "own", "adaqp-fast": "fast's", "bns-0.1": "own", "bns-0.3": "own",
    "bns-fast-0.1": "fast's", "bns-fast-0.3": "fast's", "sancus-own": "own",
    "adaqp-own": "own", "pipegcn-own": "own", "sni-paper-3": "own", "sni-paper-5": "own",
}
WHAT = {
    "interval1": "exact training: every epoch exchanges float32 halo rows",
    "int1-masks": "exact training again with other dropout masks: what two exact runs differ by (the null)",
    "fast": "`--preset fast`: interval 8, rows and gradients averaged over steps, 8-bit",
    "cache-no-averaging": "SANCUS-like: stale epochs on the cached rows of the last sync, no averaging or smoothing",
    "linear-trend": "the SNI paper's trend predictor serving stale rows (interval 8)",
    "pipelined": "PipeGCN-like: every epoch uses the previous epoch's halo rows and gradients",
    "exact-8bit": "AdaQP's compression alone: interval 1 with 8-bit rows and gradients",
    "exact-4bit": "interval 1 with 4-bit rows and gradients",
    "adaqp-fast": "`fast` with AdaQP's bit choice: each message's rows at 2, 4 or 8 bits, chosen per row "
                  "(`--bit-choice adaptive`)",
    "bns-0.1": "BNS-GCN-like boundary node sampling: each epoch pulls a random 10% of the hidden layers' halo rows "
               "(scaled by 1/p) and pushes only their gradients; the input layer keeps every halo feature",
    "bns-0.3": "the same with 30% of the halo rows",
    "bns-fast-0.1": "`fast` with BNS-GCN's sampling (`--halo-sample 0.1`): each sync pulls 10% of the hidden layers' "
                    "halo rows (scaled by 1/p) and pushes their gradients; the stale epochs reuse what it pulled",
    "bns-fast-0.3": "the same with 30% of the halo rows",
    "sancus-own": "SANCUS's own setting, as near as the project has it: float32 cached rows, no averaging or smoothing, "
                  "a sync whenever the exchanged layers' weights moved more than 5% since the last one, at least every "
                  "4th epoch (SANCUS skips a broadcast while its embeddings' change stays under a bound)",
    "adaqp-own": "AdaQP's own setting: interval 1, each message's halo rows and gradients at 2, 4 or 8 bits, "
                 "chosen per row to trade the rounding's variance (weighted by how many rows aggregate it) against "
                 "the message's bytes, AdaQP's objective at its default weight 0.5",
    "pipegcn-own": "PipeGCN's own setting (PipeGCN-GF): every epoch pipelined from the first, float32, the "
                   "one-epoch-old halo rows and gradients each averaged over epochs with 0.95 (its smoothing)",
    "sni-paper-3": "the SNI paper's setting: interval 3, a 20-epoch warm-up, the linear trend on the 30% most "
                   "connected halo rows, the cache on the others, float32, no averaging",
    "sni-paper-5": "the same at interval 5",
    "single-process": "one process, DGL's `GraphConv` over the whole graph (examples/gcn.py): the floor on one machine",
}
SUITES = {
    "quick": dict(graphs=["syn20k", "cora", "citeseer", "pubmed"], links=["1gbit"], epochs=150, seeds=[0],
                  scaling_graph="syn20k", scaling_epochs=40, tier_graph="syn20k", dgl_example_epochs=300,
                  peer_graph=None),
    "full": dict(graphs=["syn200k", "syn500k", "cora", "citeseer", "pubmed"], links=["1gbit", "unshaped"], epochs=150,
                 seeds=[0, 1, 2], scaling_graph="syn200k", scaling_epochs=30, tier_graph="syn200k",
                 dgl_example_epochs=300, peer_graph="syn300k-d16"),
}
WORKERS = 4
HALO_RATIO = 2.5  # the projection's halo rows per owned row: as measured on the 200k graph at 4 parts
PAPER_GRAPHS = {  # sizes as the datasets' authors publish them
    "Reddit": dict(nodes=232_965, avg_degree=492.0, feat_dim=602, classes=41),
    "ogbn-products": dict(nodes=2_449_029, avg_degree=50.5, feat_dim=100, classes=47),
}


def _graph_args(graph):
    return bench_e2e.GRAPHS[graph]


def _present(graph) -> bool:
    args = _graph_args(graph)
    return graph not in bench_e2e.REAL or os.path.exists(args[1])


def _kept_seeds(source, graph, link, suite) -> list:
    """The suite's seeds whose runs of ``graph`` and ``link`` the record holds in full."""
    kept = []
    for seed in suite["seeds"]:
        try:
            with _quiet():
                bench_e2e.run("report", [graph], [link], suite["epochs"], METHODS, WORKERS, [seed], sweep=source.sweep,
                              need_data=False)
            kept.append(seed)
        except MissingRun:
            pass
    return kept


def _quiet():
    """Silences the judged tables ``bench_e2e.run`` prints (a replay prints only what it wrote)."""
    return contextlib.redirect_stdout(io.StringIO())


def comparison(suite: dict, source) -> dict:
    """Every method on each graph and link, judged per seed; on a replay, the parts and seeds
    the record holds (the others are reported as not measured)."""
    # a replay reads what the record holds: the datasets need not be on this machine
    graphs = [g for g in suite["graphs"] if isinstance(source, Replay) or _present(g)]
    report = dict(graphs={})
    for graph in graphs:
        for link in suite["links"]:
            seeds = suite["seeds"]
            try:
                with _quiet() if isinstance(source, Replay) else contextlib.nullcontext():
                    judged = bench_e2e.run("report", [graph], [link], suite["epochs"], METHODS, WORKERS, seeds,
                                           sweep=source.sweep, need_data=isinstance(source, Recorder))
            except MissingRun:  # a replay of a record that holds some seeds of this part, or none
                seeds = _kept_seeds(source, graph, link, suite)
                if not seeds:
                    continue
                with _quiet():
                    judged = bench_e2e.run("report", [graph], [link], suite["epochs"], METHODS, WORKERS, seeds,
                                           sweep=source.sweep, need_data=False)
            part = judged["graphs"][graph][link]
            saved = sorted(r["saved"] for seed in part["by_seed"].values() for r in seed["runs"] if r.get("saved"))
            part["measured"] = dict(seeds=seeds, first=saved[0] if saved else None, last=saved[-1] if saved else None)
            report["graphs"].setdefault(graph, {})[link] = part
    floors = {}
    for graph in graphs:  # one process, DGL's own layers
        out_dir = os.path.join(RESULTS, "report_runs", f"{graph}-single")
        try:
            metrics = source.sweep(_graph_args(graph), 1, [dict(preset="exact", epochs=suite["epochs"], seed=0)],
                                   out_dir, base_args=bench_e2e.model_args(os.path.join(ROOT, "examples", "gcn.py")))
        except MissingRun:
            continue
        floors[graph] = bench_e2e.summarize_run(metrics[0], "single-process")
    report["single_process"] = floors
    report["skipped"] = [g for g in suite["graphs"] if g not in graphs]
    return report


def peer_code(suite: dict, source) -> dict:
    """The in-project boundary node sampling on a second, larger graph: interval 1 and p = 0.1
    and 0.3, 4 machines at 1 Gbit/s, seed 0 (the full suite only: a 300k-node graph)."""
    graph = suite.get("peer_graph")
    if not graph:
        return dict(ran=False, why="the full suite runs it (a 300k-node graph)")
    methods = [m for m in METHODS if m["name"] in ("interval1", "bns-0.1", "bns-0.3")]
    try:
        report = bench_e2e.run("report", [graph], ["1gbit"], suite["epochs"], methods, WORKERS, [0],
                               sweep=source.sweep)
    except MissingRun:
        return dict(ran=False, why="not measured yet", graph=graph)
    judged = report["graphs"][graph]["1gbit"]["by_seed"]["0"]
    runs = [dict(name=r["name"], epoch_s=r["epoch_s"], time_to_target_s=r.get("time_to_target_s"),
                 best_val=r["best_val_acc"], final_test=r["final_test_acc"], final_test_delta=r.get("final_test_delta"),
                 saved=r.get("saved")) for r in judged["runs"]]
    return dict(ran=True, graph=graph, target_val_acc=judged["target_val_acc"], runs=runs)


def scaling(suite: dict, source) -> dict | None:
    graph, rows = suite["scaling_graph"], []
    for workers in (2, 4, 8):
        out_dir = os.path.join(RESULTS, "report_runs", f"scaling-{graph}-w{workers}")
        entries = [dict(preset="exact", epochs=suite["scaling_epochs"]),
                   dict(preset="fast", epochs=suite["scaling_epochs"])]
        try:
            metrics = source.sweep(_graph_args(graph), workers, entries, out_dir,
                                   base_args=bench_e2e.MODEL + ["--bandwidth", "1gbit"])
        except MissingRun:
            return None
        for entry, m in zip(entries, metrics):
            s = bench_e2e.summarize_run(m, entry["preset"])
            rows.append(dict(workers=workers, preset=entry["preset"], epoch_s=s["epoch_s"], breakdown=s["breakdown"],
                             halo_nodes=sum(w["halo_nodes"] for w in m["summary"]["workers"]) / workers,
                             owned_nodes=sum(w["owned_nodes"] for w in m["summary"]["workers"]) / workers))
    return dict(graph=graph, link="1gbit", cores=metrics[0]["host_cores"], rows=rows)


def tier_and_prediction(suite: dict, source) -> dict | None:
    """``fast`` through the storage tier with a host cache far below the activations, beside the
    same settings in memory (the tier's configuration: ``fast`` falls back to it there) and
    beside ``fast`` in memory."""
    from dgl_sni.config import TrainConfig
    graph = suite["tier_graph"]
    tier_cfg = TrainConfig.from_dict(dict(preset="fast", storage_tier="/t")).sni
    same = dict(preset="fast", sync_interval=tier_cfg.sync_interval, smooth=tier_cfg.smooth,
                row_average=tier_cfg.row_average, grad_average=tier_cfg.grad_average, quantize=tier_cfg.quantize,
                stale_halo=tier_cfg.stale_halo, sync_halo=tier_cfg.sync_halo)
    base = bench_e2e.MODEL + ["--bandwidth", "1gbit"]
    tier_dir = tempfile.mkdtemp(prefix="dgl-sni-report-tier-")
    try:
        memory = source.sweep(_graph_args(graph), 2, [dict(preset="fast", epochs=suite["epochs"]),
                                                      dict(same, epochs=suite["epochs"])],
                              os.path.join(RESULTS, "report_runs", f"tier-{graph}-memory"), base_args=base)
        tiered = source.sweep(_graph_args(graph), 2, [dict(preset="fast", epochs=suite["epochs"])],
                              os.path.join(RESULTS, "report_runs", f"tier-{graph}"),
                              base_args=base + ["--storage-tier", tier_dir, "--subparts", 4, "--host-cache-budget", "1M"])
        runs = {"fast, in memory": memory[0], "the tier's settings, in memory": memory[1],
                "fast through the storage tier, 1 MiB host cache": tiered[0]}
    except MissingRun:
        return None
    finally:
        shutil.rmtree(tier_dir, ignore_errors=True)
    out = {}
    for name, m in runs.items():
        s = bench_e2e.summarize_run(m, name)
        out[name] = dict(epoch_s=s["epoch_s"], best_val=s["best_val_acc"], final_test=s["final_test_acc"],
                         bytes_per_epoch=statistics.mean(e["bytes_sent"] + e["bytes_recv"] for e in m["epochs"]),
                         sync_interval=m["config"]["sync_interval"], smooth=m["config"]["smooth"],
                         peak_rss_mb=m["summary"]["peak_rss_mb"])
    return dict(graph=graph, workers=2, link="1gbit", runs=out)


EVAL_EVERY = 25  # DGL's example evaluates every this many epochs (its evaluation is a full inference)


def dgl_example(suite: dict, example: str | None, source) -> dict:
    """DGL 2.1.0's distributed GraphSAGE example, unchanged, with its own sampler, on the
    comparison's first synthetic graph (4 machines at 1 Gbit/s): epoch time and its test
    accuracy at each evaluation, the training time to its best. Needs a copy of the example
    (``--dgl-example PATH``, or the DGL mirror ``bench_feature_cache.py`` reads)."""
    from benchmarks import bench_feature_cache as fc
    graph = next((g for g in suite["graphs"] if g.startswith("syn")), None)
    args = dict(zip(_graph_args(graph)[2::2], _graph_args(graph)[3::2]))
    kept = f"dgl-example-{graph}-w{WORKERS}-e{suite['dgl_example_epochs']}"
    graph_args = list(map(str, _graph_args(graph)))
    done = source.get(kept)
    if done and done.get("graph_args") == graph_args:  # a finished run on the same graph is reused
        return done
    if isinstance(source, Replay):
        return dict(ran=False, why="not measured yet")
    work = tempfile.mkdtemp(prefix="dgl-sni-report-dgl-")
    try:
        try:
            fc._example(example, work)
        except (OSError, subprocess.CalledProcessError) as err:
            return dict(ran=False, why=f"no copy of DGL's example ({type(err).__name__}); pass --dgl-example PATH")
        # the comparison's own graph: every generator flag it sets (degree, seed) but nodes and width
        extra = [x for k, v in args.items() if k not in ("--nodes", "--feat-dim") for x in (k, v)]
        part_config = fc._partition(work, WORKERS, int(args.get("--nodes", 20000)), int(args.get("--feat-dim", 64)),
                                    extra)
        epochs = suite["dgl_example_epochs"]
        try:  # stock DGL, the example's own batch size
            run = fc._run(work, part_config, WORKERS, epochs, {}, "stock", batch=1000, eval_every=EVAL_EVERY)
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            return dict(ran=False, why=f"the example failed: {str(err)[-500:]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    times, accs = run["epoch_times_s"], run["test_accs"]
    evals = [min(EVAL_EVERY * (i + 1), epochs) for i in range(len(accs))]  # its evaluations' epochs
    best = max(range(len(accs)), key=lambda i: accs[i]) if accs else None
    out = dict(ran=True, graph=graph, epochs=epochs, epoch_s=statistics.median(times) if times else None,
               test_accs=accs, eval_epochs=evals, best_test=accs[best] if accs else None,
               time_to_best_s=sum(times[: evals[best]]) if accs else None, measured=_stamp(), graph_args=graph_args)
    source.put(kept, out)
    return out


def cost_model(source, scaling_part: dict | None) -> dict:
    """``dgl-sni estimate`` fitted to every modelled run of the record, its error per
    configuration in sample and with each graph held out, and its projection of the SNI paper's
    setting with the halo rows per owned row measured at the most machines of the scaling part."""
    from dataclasses import asdict
    from dgl_sni import estimate as est
    runs = est.from_runs(source.all_runs())
    costs = est.fit(runs)
    ratio, machines = HALO_RATIO, None
    if scaling_part:
        widest = max(scaling_part["rows"], key=lambda r: r["workers"])
        ratio, machines = widest["halo_nodes"] / widest["owned_nodes"], widest["workers"]
    projections = []
    for name, g in PAPER_GRAPHS.items():
        owned = g["nodes"] / 16
        for interval, bits in ((1, 32), (8, 8)):
            cl = est.Cluster(workers=16, rate_bits=10e9, owned=owned, halo=ratio * owned,
                             edges=owned * (g["avg_degree"] + 1), feat_dim=g["feat_dim"], hidden=16,
                             classes=g["classes"], layers=3, bits=bits, interval=interval)
            projections.append(dict(graph=name, interval=interval, bits=bits, halo_ratio=ratio,
                                    **{k: v for k, v in est.project(costs, cl).items()}))
    return dict(costs=asdict(costs), check=est.check(costs, runs), holdout=est.holdout(runs),
                projections=projections, assumptions=list(est.ASSUMPTIONS), runs=len(runs),
                halo_ratio=dict(value=ratio, machines=machines), points=measured_points(runs))


def measured_points(runs: list) -> dict | None:
    """The largest graph measured at ``WORKERS`` machines on a shaped link: its cluster (interval
    8, 8 bits: ``fast``) and, per link rate, the measured epoch speed-up of ``fast`` over interval 1
    (medians over the runs), the points the cost model's curve is drawn through."""
    from dataclasses import asdict
    by = {}
    for name, cl, measured in runs:
        if cl.workers == WORKERS and cl.rate_bits and (cl.interval, cl.bits) in ((1, 32), (8, 8)):
            graph = name.split(",")[0]
            entry = by.setdefault((graph, cl.rate_bits), dict(cl=None, exact=[], fast=[]))
            entry["exact" if cl.interval == 1 else "fast"].append(measured["epoch_s"])
            if cl.interval == 8:
                entry["cl"] = cl  # the curve is fast's
    pairs = {k: v for k, v in by.items() if v["exact"] and v["fast"]}
    if not pairs:
        return None
    graph = max({g for g, _ in pairs}, key=lambda g: max(v["cl"].owned for (h, _), v in pairs.items() if h == g))
    points = [(rate, statistics.median(v["exact"]) / statistics.median(v["fast"]))
              for (g, rate), v in sorted(pairs.items()) if g == graph]
    cl = next(v["cl"] for (g, _), v in pairs.items() if g == graph)
    return dict(graph=graph, cluster=asdict(cl), points=points)


def leftovers(started: float) -> dict:
    """What the suite's runs left behind: namespaces, shared memory, run folders."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n")
    names = [ln.split()[0] for ln in netns if ln.startswith("sni")]
    shm = [f for f in os.listdir("/dev/shm") if os.path.getmtime(os.path.join("/dev/shm", f)) >= started]
    tmp = [p for p in glob.glob(os.path.join(tempfile.gettempdir(), "dgl-sni-*")) if os.path.getmtime(p) >= started]
    return dict(namespaces=names, shared_memory=shm, temporary=tmp, clean=not (names or shm or tmp))


def _stamp() -> dict:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    return dict(commit=commit or "unknown", date=time.strftime("%Y-%m-%d"))


def machine() -> dict:
    import psutil
    import torch
    import dgl_sni  # noqa: F401
    import dgl
    return dict(**_stamp(), cores=os.cpu_count(),
                memory_gib=round(psutil.virtual_memory().total / 2**30, 1), python=platform.python_version(),
                torch=torch.__version__, dgl=dgl.__version__, kernel=platform.release())


def narrowed(name: str, graphs=None, links=None, seeds=None) -> dict:
    """The suite ``name`` with its comparison narrowed to the given graphs, links and seeds (each
    must be the suite's: a ``ValueError`` names the one that is not)."""
    suite = dict(SUITES[name])
    for key, chosen in (("graphs", graphs), ("links", links), ("seeds", seeds)):
        if chosen is None:
            continue
        unknown = [c for c in chosen if c not in suite[key]]
        if unknown:
            raise ValueError(f"{key} {', '.join(map(str, unknown))} not in the {name} suite "
                             f"(its {key}: {', '.join(map(str, suite[key]))})")
        suite[key] = [c for c in suite[key] if c in chosen]
    return suite


def missing_parts(data: dict) -> list:
    """The suite's comparison parts (graph, link, seed) that the report does not hold."""
    suite, have = SUITES[data["suite"]], data["comparison"]["graphs"]
    out = []
    for graph in suite["graphs"]:
        if graph in data["comparison"].get("skipped", []):
            continue
        for link in suite["links"]:
            part = have.get(graph, {}).get(link) or {}
            seeds = part.get("measured", {}).get("seeds", [int(k) for k in part.get("by_seed", {})])
            lacking = [s for s in suite["seeds"] if s not in seeds]
            if lacking:
                out.append(f"{graph}/{link} seed{'s' if len(lacking) > 1 else ''} {', '.join(map(str, lacking))}")
    return out


def collect(name: str, suite: dict, source, example: str | None = None) -> dict:
    """The report's parts from ``source``: a :class:`Recorder` trains what ``suite`` (the suite
    ``name`` or a part of it) lacks; a :class:`Replay` reads what the record holds."""
    out = dict(suite=name, settings=SUITES[name])
    out["comparison"] = comparison(suite, source)
    out["peer_code"] = peer_code(suite, source)
    out["dgl_example"] = dgl_example(SUITES[name], example, source)  # the suite's first synthetic graph
    out["scaling"] = scaling(suite, source)
    out["tier"] = tier_and_prediction(suite, source)
    return out


def measure(name: str, suite: dict, example: str | None, root: str = RECORD) -> dict:
    """Train ``suite`` (what the record lacks), keep its runs in the record, and note this
    invocation: the machine, its minutes and what it left behind."""
    started = time.time()
    collect(name, suite, Recorder(name, root), example)
    invocation = dict(machine=machine(), minutes=(time.time() - started) / 60, cleanup=leftovers(started))
    Recorder(name, root).put("invocation", invocation)
    return invocation


def replay(name: str, root: str = RECORD) -> dict:
    """The whole report of the suite ``name`` from its record alone (nothing is trained)."""
    source = Replay(name, root)
    invocation = source.get("invocation")
    if invocation is None:
        raise MissingRun(f"{source.folder} holds no record of the {name} suite: run it first")
    data = collect(name, SUITES[name], source)
    data.update(invocation)
    data["cost_model"] = cost_model(source, data["scaling"])
    data["sweeps"] = [seed_sweeps.summarize(s) for s in seed_sweeps.SWEEPS]
    data["peers_over_seeds"] = seed_sweeps.summarize_peers()
    data["peer_code_over_seeds"] = seed_sweeps.summarize_peers_code()
    return data

"""The results report: one command trains the suite and writes ``docs/RESULTS.md`` with its plots.

    python benchmarks/results_report.py            # the quick suite (minutes)
    python benchmarks/results_report.py --full     # the full suite (hours: the acceptance graphs, 3 seeds)
    python benchmarks/results_report.py --no-run   # the report again from the suite's JSON
    python benchmarks/results_report.py --full --graphs syn200k --links 1gbit --seeds 0   # a part of it

``--graphs``/``--links``/``--seeds`` narrow the comparison to a part of the suite; its parts
(one graph and link each) are merged into the suite's JSON beside the parts measured before,
each with its commit and date, so that the full suite can be measured in pieces; the report
names the suite's parts not measured yet.

Every figure of the report comes from the JSON the suite writes (``benchmarks/results/report-
{quick,full}.json``); nothing is typed by hand. The suite:

* **comparison**: every method below on each graph and link, 4 workers, judged as
  ``bench_e2e.py`` judges (time to interval 1's best validation accuracy minus 0.01, final
  test accuracy): interval 1 and its null, ``fast``, cache-only stale epochs without averaging
  or smoothing (SANCUS-like), the ``linear-trend`` predictor (the SNI paper's Algorithm 2), the
  pipelined policy (PipeGCN-like), quantized exact epochs (8 and 4 bits, AdaQP's compression
  alone); plus one process running DGL's ``GraphConv`` full-graph (``examples/gcn.py``);
* **scaling**: 2, 4 and 8 emulated machines on one graph, exact and ``fast``: epoch time and
  its breakdown (the machines share this host's cores: said in the figure);
* **tier and prediction together**: ``fast`` with the storage tier and a host cache below the
  activations' size, beside the in-memory run;
* **cost model**: ``dgl-sni estimate`` fitted to every modelled run of the suite, its error per
  configuration, and its projection of the SNI paper's setting (16 machines at 10 Gbit/s);
* **clean-up check**: no namespace, shared-memory segment or run folder left behind.
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import io
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import bench_e2e, seed_sweeps  # noqa: E402
from benchmarks.record import RECORD, MissingRun, Recorder, Replay  # noqa: E402

RESULTS = os.path.join(ROOT, "benchmarks", "results")
DOC = os.path.join(ROOT, "docs", "RESULTS.md")
FIGURES = os.path.join(ROOT, "docs", "figures", "results")
README = os.path.join(ROOT, "README.md")
HEADLINE = ("<!-- results headline: written by benchmarks/results_report.py -->",
            "<!-- end of results headline -->")

# the methods of the comparison: bench_e2e configurations (interval 1 first: the others are judged against it)
METHODS = [
    dict(name="interval1", preset="exact"),
    dict(name="int1-masks", preset="exact", dropout_stream=1),
    dict(name="fast", preset="fast"),
    dict(name="cache-no-averaging", preset="fast", row_average=0.0, grad_average=0.0, smooth=0.0),
    dict(name="linear-trend", preset="fast", predictor="linear-trend", row_average=0.0, grad_average=0.0,
         smooth=0.0, stale_halo="rows"),
    dict(name="pipelined", preset="fast", sync_policy="pipeline"),
    dict(name="exact-8bit", preset="exact", quantize=8),
    dict(name="exact-4bit", preset="exact", quantize=4),
    dict(name="bns-0.1", preset="exact", halo_sample=0.1),
    dict(name="bns-0.3", preset="exact", halo_sample=0.3),
    # the peers in their own settings (the rows above put the stale ones in fast's)
    dict(name="sancus-own", preset="fast", sync_policy="drift", sync_interval=4, row_average=0.0, grad_average=0.0,
         smooth=0.0, quantize=0, stale_halo="rows"),
    dict(name="sni-paper-3", preset="fast", sync_interval=3, warmup=20, predictor="linear-trend", sampling_ratio=0.3,
         row_average=0.0, grad_average=0.0, smooth=0.0, stale_halo="rows", quantize=0),
    dict(name="sni-paper-5", preset="fast", sync_interval=5, warmup=20, predictor="linear-trend", sampling_ratio=0.3,
         row_average=0.0, grad_average=0.0, smooth=0.0, stale_halo="rows", quantize=0),
]
SETTING = {  # which setting each row of the comparison is in
    "cache-no-averaging": "fast's", "linear-trend": "fast's", "pipelined": "fast's", "exact-8bit": "own",
    "exact-4bit": "own", "bns-0.1": "own", "bns-0.3": "own", "sancus-own": "own", "sni-paper-3": "own",
    "sni-paper-5": "own",
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
    "bns-0.1": "BNS-GCN-like boundary node sampling: each epoch pulls a random 10% of the hidden layers' halo rows "
               "by id (scaled by 1/p) and pushes only their gradients; the input layer keeps every halo feature",
    "bns-0.3": "the same with 30% of the halo rows",
    "sancus-own": "SANCUS's own setting, as near as the project has it: float32 cached rows, no averaging or smoothing, "
                  "a sync whenever the exchanged layers' weights moved more than 5% since the last one, at least every "
                  "4th epoch (SANCUS skips a broadcast while its embeddings' change stays under a bound)",
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
                bench_e2e.run("report", [graph], [link], suite["epochs"], METHODS, WORKERS, [seed], sweep=source.sweep)
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
    graphs = [g for g in suite["graphs"] if _present(g)]
    report = dict(graphs={})
    for graph in graphs:
        for link in suite["links"]:
            seeds = _kept_seeds(source, graph, link, suite) if isinstance(source, Replay) else suite["seeds"]
            if not seeds:
                continue
            with _quiet() if isinstance(source, Replay) else contextlib.nullcontext():
                part = bench_e2e.run("report", [graph], [link], suite["epochs"], METHODS, WORKERS, seeds,
                                     sweep=source.sweep)
            report["graphs"].setdefault(graph, {})[link] = part["graphs"][graph][link]
    for links in report["graphs"].values():
        for part in links.values():
            saved = sorted(r["saved"] for seed in part["by_seed"].values() for r in seed["runs"] if r.get("saved"))
            part["measured"] = dict(seeds=suite["seeds"], first=saved[0] if saved else None,
                                    last=saved[-1] if saved else None)
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
    return data


# ----------------------------------------------------------------------------- the report

def _f(value, spec, none="-"):
    return none if value is None else format(value, spec)


def _runs(part):
    """The judged runs of one graph and link (seed 0 for the curves; the figures over seeds)."""
    if "over_seeds" in part:
        first = part["by_seed"][sorted(part["by_seed"])[0]]
        return first["runs"], part["over_seeds"]
    return part["runs"], None


def comparison_table(graph, link, part, floor) -> list:
    runs, seeds = _runs(part)
    lines = ["| method | setting | ms/epoch | x epoch | to target (s) | x sooner | epochs to target | best val | final test | vs interval 1 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        sooner = seeds[r["name"]]["time_to_target_speedup_median"] if seeds else r.get("time_to_target_speedup")
        delta = seeds[r["name"]]["final_test_delta_mean"] if seeds else r.get("final_test_delta")
        lines.append(f"| {r['name']} | {SETTING.get(r['name'], '-')} | {r['epoch_s'] * 1000:.0f} | {_f(r.get('epoch_speedup'), '.2f')} | "
                     f"{_f(r.get('time_to_target_s'), '.1f', 'not reached')} | {'never' if sooner == 0 else _f(sooner, '.2f')} | "
                     f"{_f(r.get('epochs_to_target'), 'd', '-')} | {_f(r['best_val_acc'], '.4f')} | "
                     f"{_f(r['final_test_acc'], '.4f')} | {_f(delta, '+.4f')} |")
    if floor is not None:
        lines.append(f"| single-process | - | {floor['epoch_s'] * 1000:.0f} | - | - | - | - | {_f(floor['best_val_acc'], '.4f')} | "
                     f"{_f(floor['final_test_acc'], '.4f')} | - |")
    return lines


_STABLE = {"png": {"Software": None}, "svg": {"Date": None}}  # no date or version stamped in a plot's file


def plots(data: dict, figures: str = FIGURES) -> list:
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "dgl-sni"  # the same data draws the same file
    import matplotlib.pyplot as plt
    from dgl_sni.report import accuracy_figure
    os.makedirs(figures, exist_ok=True)
    written = []

    def save(fig, name):
        fig.tight_layout()
        for fmt in ("png", "svg"):
            fig.savefig(os.path.join(figures, f"{name}.{fmt}"), dpi=110, bbox_inches="tight", metadata=_STABLE[fmt])
        written.append(f"figures/results/{name}.png")
        plt.close(fig)

    for graph, links in data["comparison"]["graphs"].items():
        for link, part in links.items():
            runs, _ = _runs(part)
            target = part.get("target_val_acc") or next(iter(part.get("by_seed", {}).values()), {}).get("target_val_acc")
            curves = [(r["name"], [(p["epoch"], p["train_time_s"], p["val_acc"]) for p in r["curve"]
                                   if p["val_acc"] is not None]) for r in runs]
            fig = accuracy_figure(curves, target, f"{graph}, {link}, {WORKERS} workers (dashed: target)",
                                  floor=max(0.0, (target or 0.5) - 0.3))
            save(fig, f"comparison-{graph}-{link}")

    drawn = {os.path.basename(w)[:-4] for w in written}
    for old in glob.glob(os.path.join(figures, "comparison-*.*")):  # another suite's graphs: not in this report
        if os.path.splitext(os.path.basename(old))[0] not in drawn:
            os.remove(old)

    pts = data["cost_model"].get("points")
    if pts:
        from dgl_sni import estimate as est
        fig = est.advantage_figure(est.Costs(**data["cost_model"]["costs"]), est.Cluster(**pts["cluster"]),
                                   [(rate, up, f"measured, {rate / 1e9:g} Gbit/s") for rate, up in pts["points"]])
        save(fig, "cost-model")
    sc = data["scaling"]
    if not sc:
        return written
    fig, ax = plt.subplots(figsize=(7, 4))
    labels, x, stale_labelled = [], 0, False
    for row in sc["rows"]:
        med = row["breakdown"].get("sync", {})
        stale = row["breakdown"].get("stale")
        # the sync step split so that its parts add up to it: compute, and the rest (exchange and waits)
        step, comp = med.get("time_s", 0.0) * 1000, min(med.get("comp_s", 0.0), med.get("time_s", 0.0)) * 1000
        ax.bar(x, comp, color="tab:blue", label="sync step: compute" if x == 0 else None)
        ax.bar(x, step - comp, bottom=comp, color="tab:orange",
               label="sync step: exchange and waits (the rest)" if x == 0 else None)
        ax.scatter([x], [row["epoch_s"] * 1000], color="black", marker="_", s=300, zorder=3,
                   label="mean epoch" if x == 0 else None)
        if stale:
            ax.scatter([x], [stale["time_s"] * 1000], color="red", marker="x", zorder=3,
                       label=None if stale_labelled else "stale step")
            stale_labelled = True
        labels.append(f"{row['workers']} machines,\n{row['preset']}")
        x += 1
    ax.set_xticks(range(len(labels)), labels, fontsize=7, rotation=30, ha="right")
    ax.set_ylabel("ms (medians over epochs)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"scaling on {sc['graph']} at 1 Gbit/s: the machines share {sc['cores']} cores", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, never on them
    save(fig, "scaling")
    return written


def write_report(data: dict, command: str, doc: str = DOC, readme: str = README) -> None:
    m, comp = data["machine"], data["comparison"]
    lines = [
        "# Results",
        "",
        f"Generated by `{command} --no-run` from the suite's record, `benchmarks/record/{data['suite']}/`: compact "
        "copies of every run below (per epoch its time and parts, mode, loss, accuracies, bytes; per run its "
        "configuration, partition and machine), committed with the project, so that this page, its plots and the "
        "README's headline are recomputed from the repository alone (a test checks that they are). The record was "
        f"last added to on {m['date']} at commit {m['commit']} ({data['minutes']:.0f} minutes: runs the record "
        f"holds are reused, not trained again; each part below says when its runs were trained). Machine: "
        f"{m['cores']} cores, {m['memory_gib']} GiB, "
        f"Linux {m['kernel']}, Python {m['python']}, torch {m['torch']}, DGL {m['dgl']}. All emulated machines "
        "share this one host's cores: epoch times of several machines include their competition for them.",
        "",
        f"Suite `{data['suite']}`: {', '.join(data['settings']['graphs'])}; links {', '.join(data['settings']['links'])}; "
        f"{WORKERS} workers; 3-layer GCN, hidden 16, dropout 0.5; {data['settings']['epochs']} epochs with exact "
        f"evaluation after each; seeds {', '.join(map(str, data['settings']['seeds']))}. "
        "`python benchmarks/results_report.py --full` runs the full suite (the acceptance graphs, 3 seeds, hours).",
        "",
    ]
    lines += ["## Over seeds: `fast` for each model", "",
              "Sweeps over seeds on 4 machines at 1 Gbit/s (3-layer models, hidden 16, dropout 0.5, 150 epochs, exact "
              "evaluation after every epoch, unless the row says otherwise), from the `bench_e2e.py --seeds` result files under "
              "`benchmarks/measured/` (each seed's runs with their curves; `benchmarks/seed_sweeps.py` lists them and "
              "recomputes these figures). *x sooner*: training time to interval 1's best validation accuracy minus "
              "0.01, against interval 1 of the same seed; the *null* is interval 1 again with other dropout masks, "
              "what two exact runs differ by. syn200k is the graph the defaults were tuned on; confirm150k (150k "
              "nodes, degree 12, another seed) was generated to confirm them only.", "",
              *seed_sweeps.table(data["sweeps"]), "", *seed_sweeps.references(data["sweeps"]), ""]
    lacking = missing_parts(data)
    if lacking:
        lines += [f"Not measured yet (the suite's parts this report lacks): {'; '.join(lacking)}.", ""]
    lines += [
        "## The methods side by side",
        "",
        "*To target*: training time (evaluation excluded) to interval 1's best validation accuracy minus 0.01; "
        "*x sooner* against interval 1 of the same seed (median over seeds), *vs interval 1* the final test "
        "accuracy's difference (mean over seeds).",
        "",
    ]
    lines += [f"- `{name}`: {text}" for name, text in WHAT.items()]
    lines.append("")
    lines += [
        "The peers are in-project versions, run on the same emulated cluster and the same model; *setting* says "
        "whether a row runs in the peer's own setting or in `fast`'s (interval 8, warm-up 5). None of the peers' "
        "own code runs here (written for CUDA; no script in the repository reproduces their figures, so none are "
        "published). What each in-project version keeps and leaves out: `cache-no-averaging` keeps SANCUS's reuse "
        "of stale cached rows; `sancus-own` adds a skip test on the weights' drift, not SANCUS's test on each "
        "embedding's; `pipelined` keeps PipeGCN's one-epoch-stale rows and gradients without its smoothing (the "
        "pipelined policy has no agent to smooth them: not measured in its own setting); the `exact-*bit` runs keep "
        "AdaQP's stochastic quantization at a fixed width, not its per-message bit choice (not implemented); `bns-*` "
        "samples boundary rows per epoch as BNS-GCN does, scales them by 1/p instead of renormalising the sampled "
        "graph, and leaves the input layer's boundary features whole (they never change). DGL's own distributed "
        "GraphSAGE example is run unchanged below, from a copy of DGL's repository (not shipped with the project).",
        "",
    ]
    for graph, links in comp["graphs"].items():
        for link, part in links.items():
            lines += [f"### {graph}, {link}", ""]
            if part.get("measured"):
                mp = part["measured"]
                lines += [f"Seeds {', '.join(map(str, mp['seeds']))}; runs trained {mp['first']} to {mp['last']}.", ""]
            lines += comparison_table(graph, link, part, comp.get("single_process", {}).get(graph))
            lines += ["", f"![{graph} {link}](figures/results/comparison-{graph}-{link}.png)", ""]
    if comp.get("skipped"):
        lines += [f"Skipped (dataset not present): {', '.join(comp['skipped'])}.", ""]

    lines += peer_section(data.get("peer_code"))
    ex = data.get("dgl_example", {})
    lines += ["## DGL's distributed GraphSAGE example", ""]
    if ex.get("ran"):
        syn = comp["graphs"].get(ex["graph"], {})
        part = next(iter(syn.values()), None)
        runs = {r["name"]: r for r in _runs(part)[0]} if part else {}
        best = {k: (runs[k]["test_acc_at_best_val"], runs[k].get("time_to_target_s")) for k in ("interval1", "fast")
                if k in runs}
        lines += [f"DGL 2.1.0's `examples/distributed/graphsage/node_classification.py`, unchanged, with its own "
                  f"neighbour sampler and defaults (2-layer SAGE, fan-outs 10 and 25, batch 1000), on {ex['graph']} "
                  f"partitioned for {WORKERS} machines at 1 Gbit/s, {ex['epochs']} epochs, evaluated every {EVAL_EVERY}th: "
                  f"epoch {ex['epoch_s'] * 1000:.0f} ms (median, its own timer), test accuracy after epochs "
                  f"{', '.join(f'{e}: {a:.4f}' for e, a in zip(ex['eval_epochs'], ex['test_accs']))}; its best, {ex['best_test']:.4f}, after "
                  f"{ex['time_to_best_s']:.1f} s of training. Full-graph training on the same graph (3-layer GCN): test "
                  f"accuracy at the best validation epoch " + ", ".join(
                      f"{k} {acc:.4f} (its target after {_f(t, '.1f', 'never')} s)" for k, (acc, t) in best.items()) + ". "
                  "The example trains another model (2-layer GraphSAGE on sampled neighbourhoods): its accuracy is its "
                  "own, not the GCN's.", ""]
    else:
        lines += [f"Not run: {ex.get('why', 'not part of this suite')}.", ""]

    sc = data["scaling"]
    lines += ["## Scaling", ""]
    if not sc:
        lines += ["Not measured yet.", ""]
    lines += [] if not sc else [
              f"{sc['graph']} at 1 Gbit/s, exact and `fast`, 2, 4 and 8 emulated machines on this host's "
              f"{sc['cores']} cores: beyond {sc['cores']} machines each shares a core, so compute does not shrink "
              "with more machines here as it would on a cluster.", "",
              "| machines | preset | mean epoch ms | sync step ms | compute ms | exchange ms | waits ms | stale step ms | halo rows per owned row |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in (sc or {}).get("rows", []):
        s, st = r["breakdown"].get("sync", {}), r["breakdown"].get("stale", {})
        lines.append(f"| {r['workers']} | {r['preset']} | {r['epoch_s'] * 1000:.0f} | {_f(s.get('time_s') and s['time_s'] * 1000, '.0f')} | "
                     f"{_f(s.get('comp_s') and s['comp_s'] * 1000, '.0f')} | {_f(s.get('comm_s') and s['comm_s'] * 1000, '.0f')} | "
                     f"{_f(s.get('sync_s') and s['sync_s'] * 1000, '.0f')} | {_f(st.get('time_s') and st['time_s'] * 1000, '.0f')} | "
                     f"{r['halo_nodes'] / r['owned_nodes']:.2f} |")
    if sc:
        lines += ["", "![scaling](figures/results/scaling.png)", ""]

    tier = data["tier"]
    lines += ["## Prediction and the storage tier together", ""]
    if not tier:
        lines += ["Not measured yet.", ""]
    lines += [] if not tier else [
              f"{tier['graph']}, {tier['workers']} workers at 1 Gbit/s, {data['settings']['epochs']} epochs. On the "
              "storage tier `--preset fast` takes its unaveraged configuration (the tier's layers read rows unit by "
              "unit: sync every 2nd epoch, the smoothed cache, float32 rows); the tier runs 4 sub-partitions "
              "through a 1 MiB host cache, far below the activations. Beside it: the same settings in memory, "
              "and `fast` in memory.", "",
              "| run | mean epoch ms | best val | final test | mean bytes per epoch | sync interval | peak RSS MiB |",
              "|---|---|---|---|---|---|---|"]
    for name, r in (tier or {}).get("runs", {}).items():
        lines.append(f"| {name} | {r['epoch_s'] * 1000:.0f} | {_f(r['best_val'], '.4f')} | {_f(r['final_test'], '.4f')} | "
                     f"{_f(r['bytes_per_epoch'], ',.0f')} | {r['sync_interval']} | {r['peak_rss_mb']:.0f} |")
    lines.append("")

    cm = data["cost_model"]
    held = {r["configuration"]: r for r in cm["holdout"]}
    worst_held = max((abs(r["error"]) for r in cm["holdout"]), default=None)
    worst = max((abs(r["error"]) for r in cm["check"]), default=None)
    hr = cm["halo_ratio"]
    lines += ["## Cost model", "",
              f"`dgl-sni estimate` (the model: `dgl_sni/estimate.py`) fitted to the {cm['runs']} modelled runs of this "
              f"suite's record. **Fitted on the other graphs only, its largest error is {_f(worst_held, '.0%')}** (a "
              f"graph it has not seen); fitted on every run, {_f(worst, '.0%')}. Per configuration, the mean epoch "
              "measured (median over its runs) against the estimate:", "",
              "| configuration | runs | measured ms | fitted on the other graphs: error | estimated ms (all runs) | error |",
              "|---|---|---|---|---|---|"]
    for r in cm["check"]:
        h = held.get(r["configuration"])
        lines.append(f"| {r['configuration']} | {r['runs']} | {r['measured_s'] * 1000:.0f} | {_f(h and h['error'], '+.0%')} | "
                     f"{r['estimated_s'] * 1000:.0f} | {r['error']:+.0%} |")
    ratio_text = (f"{hr['value']:.2f} halo rows per owned row, as measured at {hr['machines']} machines in the scaling "
                  "part (more machines have more: a lower bound at 16)" if hr["machines"] else
                  f"{hr['value']} halo rows per owned row (the scaling part was not measured)")
    lines += ["", "Projected for the SNI paper's setting (16 machines, 10 Gbit/s links, 3-layer GCN, hidden 16), with "
              "this host's CPU compute speed; assumptions: " + "; ".join(cm["assumptions"]) + f"; {ratio_text}.", "",
              "| graph | interval, bits | sync step ms | stale step ms | epoch ms | x interval 1 |", "|---|---|---|---|---|---|"]
    for p in cm["projections"]:
        lines.append(f"| {p['graph']} | {p['interval']}, {p['bits']} | {p['sync_s'] * 1000:.0f} | {p['stale_s'] * 1000:.0f} | "
                     f"{p['epoch_s'] * 1000:.0f} | {p['speedup']:.2f} |")
    lines += ["", "These costs ship with dgl-sni (`dgl_sni/costs.json`, written by this command): `dgl-sni estimate "
              "--workers 16 --bandwidth 10gbit --nodes N --avg-degree D --feat-dim F --classes C` projects a cluster "
              "on a fresh install, `--compute-speed` states how much faster its machines compute than one core here "
              "(a GPU: not measured here) and `--plot FILE` draws the advantage over link rates."]
    if cm.get("points"):
        pts = cm["points"]
        lines += ["", f"The model's curve for the measured cluster ({pts['graph']}, {WORKERS} machines sharing this host's "
                  "cores, `fast`: interval 8, 8-bit) against its measured epoch speed-ups: "
                  + ", ".join(f"{up:.2f}x at {rate / 1e9:g} Gbit/s" for rate, up in pts["points"]) + ".", "",
                  "![cost model](figures/results/cost-model.png)"]
    c = data["cleanup"]
    lines += ["", "## Clean-up", "",
              "After the suite: " + ("no namespace, shared-memory segment or run folder was left behind." if c["clean"] else
                                     f"left behind: namespaces {c['namespaces']}, shared memory {c['shared_memory']}, "
                                     f"folders {c['temporary']}."), ""]
    with open(doc, "w") as fh:
        fh.write("\n".join(lines))
    _headline(data, readme)


def peer_section(peer: dict | None) -> list:
    """The in-project boundary node sampling on the graph BNS-GCN's CPU port was tried on."""
    if not peer:
        return []
    lines = ["## Boundary node sampling on a second graph", "",
             "BNS-GCN's own code is not run by this suite: no script in the repository reproduces its figures "
             "(its CUDA code needs a port), so none are published. The in-project version on a 300k-node graph "
             f"(`{peer.get('graph', 'syn300k-d16')}`), 4 machines at 1 Gbit/s, seed 0:", ""]
    if not peer["ran"]:
        return lines + [f"Not run: {peer['why']}.", ""]
    lines += ["| run | epoch ms | reached target | to target (s) | best val | final test vs interval 1 |",
              "|---|---|---|---|---|---|"]
    for r in peer["runs"]:
        lines.append(f"| `{r['name']}` | {r['epoch_s'] * 1000:.0f} | "
                     f"{'no' if r['time_to_target_s'] is None else 'yes'} | {_f(r['time_to_target_s'], '.1f')} | "
                     f"{r['best_val']:.4f} | {_f(r['final_test_delta'], '+.3f')} |")
    return lines + ["", f"Target: interval 1's best validation accuracy minus 0.01 ({peer['target_val_acc']:.4f}).", ""]


def _headline(data: dict, readme: str = README) -> None:
    """The README's headline: ``fast`` for each model over seeds, and which targets hold."""
    rows = data["sweeps"]
    held = [f"{r['model']} on {r['graph']}" for r in rows if r["holds"]]
    missed = [f"{r['model']} on {r['graph']}" for r in rows if not r["holds"]]
    block = [HEADLINE[0], "Time to exact training's accuracy with `--preset fast` against exact training (interval 1), "
             "4 emulated machines at 1 Gbit/s sharing 2 cores; medians over seeds with their range and the null beside "
             "them (from [docs/RESULTS.md](docs/RESULTS.md)):", "", *seed_sweeps.table(rows), "",
             f"Targets that hold: {', '.join(held) or 'none'}. Missed: {', '.join(missed) or 'none'}.", HEADLINE[1]]
    with open(readme) as fh:
        text = fh.read()
    if HEADLINE[0] not in text:
        return
    head, rest = text.split(HEADLINE[0], 1)
    _, tail = rest.split(HEADLINE[1], 1)
    with open(readme, "w") as fh:
        fh.write(head + "\n".join(block) + tail)


def write_costs(data: dict, path: str | None = None) -> None:
    """The fitted costs and what they were fitted on, as ``dgl-sni estimate`` reads them by default."""
    from dgl_sni import estimate as est
    cm = data["cost_model"]
    meta = dict(fitted_on=f"benchmarks/record/{data['suite']}", runs=cm["runs"],
                holdout_error=max((abs(r["error"]) for r in cm["holdout"]), default=None),
                halo_ratio=cm["halo_ratio"]["value"], halo_ratio_machines=cm["halo_ratio"]["machines"])
    est.save(est.Costs(**cm["costs"]), path or est.DEFAULT_COSTS, meta)


def _names(value: str) -> list:
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return names


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true", help="the full suite (hours)")
    parser.add_argument("--no-run", action="store_true",
                        help="train nothing: write the report from the suite's committed record alone")
    parser.add_argument("--dgl-example", default=None, metavar="PATH",
                        help="DGL 2.1.0's examples/distributed/graphsage/node_classification.py (default: the DGL "
                             "mirror, where there is one)")
    parser.add_argument("--graphs", type=_names, default=None, help="only these of the suite's graphs (comma-separated)")
    parser.add_argument("--links", type=_names, default=None, help="only these of the suite's links")
    parser.add_argument("--seeds", type=lambda v: [int(x) for x in _names(v)], default=None,
                        help="only these of the suite's seeds")
    parser.add_argument("--record", default=RECORD, help=argparse.SUPPRESS)  # the tests' own record
    parser.add_argument("--doc", default=DOC, help=argparse.SUPPRESS)  # where the report is written (tests)
    parser.add_argument("--readme", default=README, help=argparse.SUPPRESS)
    parser.add_argument("--costs-out", default=None, help=argparse.SUPPRESS)  # default: the package's costs.json
    ns = parser.parse_args(argv)
    name = "full" if ns.full else "quick"
    try:
        suite = narrowed(name, ns.graphs, ns.links, ns.seeds)
    except ValueError as err:
        parser.error(str(err))
    clean = True
    if not ns.no_run:
        clean = measure(name, suite, ns.dgl_example, ns.record)["cleanup"]["clean"]
    try:
        data = replay(name, ns.record)
    except MissingRun as err:
        parser.error(str(err))
    figures = os.path.join(os.path.dirname(os.path.abspath(ns.doc)), "figures", "results")
    plots(data, figures)
    write_report(data, "python benchmarks/results_report.py" + (" --full" if ns.full else ""), ns.doc, ns.readme)
    write_costs(data, ns.costs_out)
    print(f"wrote {ns.doc} and {figures}/ from {os.path.join(ns.record, name)}/")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())

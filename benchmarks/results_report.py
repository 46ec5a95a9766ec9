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
import glob
import json
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

from benchmarks import bench_e2e  # noqa: E402
from benchmarks._sweep import run_sweep  # noqa: E402

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
]
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
    "single-process": "one process, DGL's `GraphConv` over the whole graph (examples/gcn.py): the floor on one machine",
}
SUITES = {
    "quick": dict(graphs=["syn20k", "cora", "citeseer"], links=["1gbit"], epochs=150, seeds=[0],
                  scaling_graph="syn20k", scaling_epochs=40, tier_graph="syn20k", dgl_example_epochs=300,
                  peer_graph=None),
    "full": dict(graphs=["syn200k", "syn500k", "cora", "citeseer"], links=["1gbit", "unshaped"], epochs=150,
                 seeds=[0, 1, 2], scaling_graph="syn200k", scaling_epochs=30, tier_graph="syn200k",
                 dgl_example_epochs=300, peer_graph="syn300k-d16"),
}
PEERS = os.path.join(ROOT, "benchmarks", "peers.json")  # figures of peers' own code, measured elsewhere
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
    return graph not in ("cora", "citeseer") or os.path.exists(args[1])


def comparison(suite: dict) -> dict:
    graphs = [g for g in suite["graphs"] if _present(g)]
    report = bench_e2e.run("report", graphs, suite["links"], suite["epochs"], METHODS, WORKERS, suite["seeds"])
    for links in report["graphs"].values():
        for part in links.values():
            saved = sorted(r["saved"] for seed in part["by_seed"].values() for r in seed["runs"] if r.get("saved"))
            part["measured"] = dict(seeds=suite["seeds"], first=saved[0] if saved else None,
                                    last=saved[-1] if saved else None)
    floors = {}
    for graph in graphs:  # one process, DGL's own layers
        out_dir = os.path.join(RESULTS, "report_runs", f"{graph}-single")
        metrics = run_sweep(_graph_args(graph), 1, [dict(preset="exact", epochs=suite["epochs"], seed=0)], out_dir,
                            base_args=bench_e2e.model_args(os.path.join(ROOT, "examples", "gcn.py")))
        floors[graph] = bench_e2e.summarize_run(metrics[0], "single-process")
    report["single_process"] = floors
    report["skipped"] = [g for g in suite["graphs"] if g not in graphs]
    return report


def peer_code(suite: dict) -> dict:
    """The in-project boundary node sampling beside BNS-GCN's own code, on the graph its figures
    (``benchmarks/peers.json``) were measured on: interval 1 and p = 0.1 and 0.3, 4 machines at
    1 Gbit/s, seed 0 (the full suite only: a 300k-node graph)."""
    with open(PEERS) as fh:
        reference = json.load(fh)["bns-gcn"]
    graph = suite.get("peer_graph")
    if not graph:
        return dict(ran=False, why="the full suite runs it (a 300k-node graph)", reference=reference)
    methods = [m for m in METHODS if m["name"] in ("interval1", "bns-0.1", "bns-0.3")]
    report = bench_e2e.run("report", [graph], ["1gbit"], suite["epochs"], methods, WORKERS, [0])
    judged = report["graphs"][graph]["1gbit"]["by_seed"]["0"]
    runs = [dict(name=r["name"], epoch_s=r["epoch_s"], time_to_target_s=r.get("time_to_target_s"),
                 best_val=r["best_val_acc"], final_test=r["final_test_acc"], final_test_delta=r.get("final_test_delta"),
                 saved=r.get("saved")) for r in judged["runs"]]
    return dict(ran=True, graph=graph, target_val_acc=judged["target_val_acc"], runs=runs, reference=reference)


def scaling(suite: dict) -> dict:
    graph, rows = suite["scaling_graph"], []
    for workers in (2, 4, 8):
        out_dir = os.path.join(RESULTS, "report_runs", f"scaling-{graph}-w{workers}")
        entries = [dict(preset="exact", epochs=suite["scaling_epochs"]),
                   dict(preset="fast", epochs=suite["scaling_epochs"])]
        metrics = run_sweep(_graph_args(graph), workers, entries, out_dir,
                            base_args=bench_e2e.MODEL + ["--bandwidth", "1gbit"])
        for entry, m in zip(entries, metrics):
            s = bench_e2e.summarize_run(m, entry["preset"])
            rows.append(dict(workers=workers, preset=entry["preset"], epoch_s=s["epoch_s"], breakdown=s["breakdown"],
                             halo_nodes=sum(w["halo_nodes"] for w in m["summary"]["workers"]) / workers,
                             owned_nodes=sum(w["owned_nodes"] for w in m["summary"]["workers"]) / workers))
    return dict(graph=graph, link="1gbit", cores=os.cpu_count(), rows=rows)


def tier_and_prediction(suite: dict) -> dict:
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
    runs = {}
    try:
        memory = run_sweep(_graph_args(graph), 2, [dict(preset="fast", epochs=suite["epochs"]),
                                                   dict(same, epochs=suite["epochs"])],
                           os.path.join(RESULTS, "report_runs", f"tier-{graph}-memory"), base_args=base)
        tiered = run_sweep(_graph_args(graph), 2, [dict(preset="fast", epochs=suite["epochs"])],
                           os.path.join(RESULTS, "report_runs", f"tier-{graph}"),
                           base_args=base + ["--storage-tier", tier_dir, "--subparts", 4, "--host-cache-budget", "1M"])
        runs = {"fast, in memory": memory[0], "the tier's settings, in memory": memory[1],
                "fast through the storage tier, 1 MiB host cache": tiered[0]}
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


def dgl_example(suite: dict, example: str | None) -> dict:
    """DGL 2.1.0's distributed GraphSAGE example, unchanged, with its own sampler, on the
    comparison's first synthetic graph (4 machines at 1 Gbit/s): epoch time and its test
    accuracy at each evaluation, the training time to its best. Needs a copy of the example
    (``--dgl-example PATH``, or the DGL mirror ``bench_feature_cache.py`` reads)."""
    from benchmarks import bench_feature_cache as fc
    graph = next((g for g in suite["graphs"] if g.startswith("syn")), None)
    args = dict(zip(_graph_args(graph)[2::2], _graph_args(graph)[3::2]))
    kept = os.path.join(RESULTS, "report_runs", f"dgl-example-{graph}-w{WORKERS}-e{suite['dgl_example_epochs']}.json")
    graph_args = list(map(str, _graph_args(graph)))
    if os.path.exists(kept):  # a finished run on the same graph is reused, as the sweeps' runs are
        with open(kept) as fh:
            done = json.load(fh)
        if done.get("graph_args") == graph_args:
            return done
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
    os.makedirs(os.path.dirname(kept), exist_ok=True)
    with open(kept, "w") as fh:
        json.dump(out, fh, indent=1)
    return out


def cost_model() -> dict:
    from dgl_sni import estimate as est
    runs = est.load([os.path.join(RESULTS, "e2e_runs"), os.path.join(RESULTS, "report_runs")])
    costs = est.fit(runs)
    projections = []
    for name, g in PAPER_GRAPHS.items():
        owned = g["nodes"] / 16
        for interval, bits in ((1, 32), (8, 8)):
            cl = est.Cluster(workers=16, rate_bits=10e9, owned=owned, halo=HALO_RATIO * owned,
                             edges=owned * (g["avg_degree"] + 1), feat_dim=g["feat_dim"], hidden=16,
                             classes=g["classes"], layers=3, bits=bits, interval=interval)
            projections.append(dict(graph=name, interval=interval, bits=bits, halo_ratio=HALO_RATIO,
                                    **{k: v for k, v in est.project(costs, cl).items()}))
    from dataclasses import asdict
    return dict(costs=asdict(costs), check=est.check(costs, runs), holdout=est.holdout(runs),
                projections=projections, assumptions=list(est.ASSUMPTIONS), runs=len(runs))


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


def merge(before: dict | None, now: dict) -> dict:
    """``now``'s comparison parts (graph and link) beside ``before``'s others: a part measured
    again replaces the old one; the rest of the report is ``now``'s."""
    if not before or before.get("suite") != now["suite"]:
        return now
    graphs = {g: dict(links) for g, links in before["comparison"]["graphs"].items()}
    for graph, links in now["comparison"]["graphs"].items():
        graphs.setdefault(graph, {}).update(links)
    order = SUITES[now["suite"]]["graphs"]
    now["comparison"]["graphs"] = {g: graphs[g] for g in sorted(graphs, key=lambda g: order.index(g) if g in order else 99)}
    floors = dict(before["comparison"].get("single_process", {}))
    floors.update(now["comparison"].get("single_process", {}))
    now["comparison"]["single_process"] = floors
    return now


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


def run_suite(name: str, example: str | None, suite: dict | None = None) -> dict:
    suite = suite or SUITES[name]
    started = time.time()
    out = dict(suite=name, machine=machine(), settings=SUITES[name])
    out["comparison"] = comparison(suite)
    out["peer_code"] = peer_code(suite)
    out["dgl_example"] = dgl_example(SUITES[name], example)  # on the suite's first synthetic graph, narrowed or not
    out["scaling"] = scaling(suite)
    out["tier"] = tier_and_prediction(suite)
    out["cost_model"] = cost_model()
    out["cleanup"] = leftovers(started)
    out["minutes"] = (time.time() - started) / 60
    return out


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
    lines = [f"| method | ms/epoch | x epoch | to target (s) | x sooner | epochs to target | best val | final test | vs interval 1 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        sooner = seeds[r["name"]]["time_to_target_speedup_median"] if seeds else r.get("time_to_target_speedup")
        delta = seeds[r["name"]]["final_test_delta_mean"] if seeds else r.get("final_test_delta")
        lines.append(f"| {r['name']} | {r['epoch_s'] * 1000:.0f} | {_f(r.get('epoch_speedup'), '.2f')} | "
                     f"{_f(r.get('time_to_target_s'), '.1f', 'not reached')} | {'never' if sooner == 0 else _f(sooner, '.2f')} | "
                     f"{_f(r.get('epochs_to_target'), 'd', '-')} | {_f(r['best_val_acc'], '.4f')} | "
                     f"{_f(r['final_test_acc'], '.4f')} | {_f(delta, '+.4f')} |")
    if floor is not None:
        lines.append(f"| single-process | {floor['epoch_s'] * 1000:.0f} | - | - | - | - | {_f(floor['best_val_acc'], '.4f')} | "
                     f"{_f(floor['final_test_acc'], '.4f')} | - |")
    return lines


def plots(data: dict) -> list:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from dgl_sni.report import accuracy_figure
    os.makedirs(FIGURES, exist_ok=True)
    written = []

    def save(fig, name):
        fig.tight_layout()
        for fmt in ("png", "svg"):
            fig.savefig(os.path.join(FIGURES, f"{name}.{fmt}"), dpi=110)
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
    for old in glob.glob(os.path.join(FIGURES, "comparison-*.*")):  # another suite's graphs: not in this report
        if os.path.splitext(os.path.basename(old))[0] not in drawn:
            os.remove(old)

    sc = data["scaling"]
    fig, ax = plt.subplots(figsize=(7, 4))
    labels, x, stale_labelled = [], 0, False
    for row in sc["rows"]:
        med = row["breakdown"].get("sync", {})
        stale = row["breakdown"].get("stale")
        bottom = 0.0
        for key, color, part in (("comp_s", "tab:blue", "sync step: compute"), ("comm_s", "tab:orange", "exchange"),
                                 ("sync_s", "tab:green", "waits")):
            h = med.get(key, 0.0) * 1000
            ax.bar(x, h, bottom=bottom, color=color, label=part if x == 0 else None)
            bottom += h
        ax.scatter([x], [row["epoch_s"] * 1000], color="black", marker="_", s=300, zorder=3,
                   label="mean epoch" if x == 0 else None)
        if stale:
            ax.scatter([x], [stale["time_s"] * 1000], color="red", marker="x", zorder=3,
                       label=None if stale_labelled else "stale step")
            stale_labelled = True
        labels.append(f"{row['workers']} machines\n{row['preset']}")
        x += 1
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylabel("ms (sync step parts: medians)")
    ax.set_title(f"scaling on {sc['graph']} at 1 Gbit/s: the machines share {sc['cores']} cores", fontsize=9)
    ax.legend(fontsize=7)
    save(fig, "scaling")
    return written


def write_report(data: dict, command: str) -> None:
    m, comp = data["machine"], data["comparison"]
    lines = [
        "# Results",
        "",
        f"Generated by `{command}` on {m['date']} at commit {m['commit']}; every figure below comes from "
        f"`benchmarks/results/report-{data['suite']}.json`, which the same command wrote (its last invocation: "
        f"{data['minutes']:.0f} minutes; runs it finds under `benchmarks/results/` are reused, not trained again; each "
        f"part below says when its runs were trained). Machine: {m['cores']} cores, {m['memory_gib']} GiB, "
        f"Linux {m['kernel']}, Python {m['python']}, torch {m['torch']}, DGL {m['dgl']}. All emulated machines "
        "share this one host's cores: epoch times of several machines include their competition for them.",
        "",
        f"Suite `{data['suite']}`: {', '.join(data['settings']['graphs'])}; links {', '.join(data['settings']['links'])}; "
        f"{WORKERS} workers; 3-layer GCN, hidden 16, dropout 0.5; {data['settings']['epochs']} epochs with exact "
        f"evaluation after each; seeds {', '.join(map(str, data['settings']['seeds']))}. "
        "`python benchmarks/results_report.py --full` runs the full suite (the acceptance graphs, 3 seeds, hours).",
        "",
    ]
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
        "The peers are in-project versions, run on the same emulated cluster and the same model. Of their own "
        "code, BNS-GCN's runs on CPU once ported (its figures stand beside the in-project version below); "
        "PipeGCN's and AdaQP's were not run here (written for CUDA). What each in-project version keeps and leaves out: "
        "`cache-no-averaging` keeps SANCUS's reuse of stale cached rows but not its broadcast-skipping test; "
        "`pipelined` keeps PipeGCN's one-epoch-stale rows and gradients without its smoothing; the `exact-*bit` "
        "runs keep AdaQP's stochastic quantization at a fixed width, not its per-message bit choice; `bns-*` "
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
    lines += ["## Scaling", "",
              f"{sc['graph']} at 1 Gbit/s, exact and `fast`, 2, 4 and 8 emulated machines on this host's "
              f"{sc['cores']} cores: beyond {sc['cores']} machines each shares a core, so compute does not shrink "
              "with more machines here as it would on a cluster.", "",
              "| machines | preset | mean epoch ms | sync step ms | compute ms | exchange ms | waits ms | stale step ms | halo rows per owned row |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in sc["rows"]:
        s, st = r["breakdown"].get("sync", {}), r["breakdown"].get("stale", {})
        lines.append(f"| {r['workers']} | {r['preset']} | {r['epoch_s'] * 1000:.0f} | {_f(s.get('time_s') and s['time_s'] * 1000, '.0f')} | "
                     f"{_f(s.get('comp_s') and s['comp_s'] * 1000, '.0f')} | {_f(s.get('comm_s') and s['comm_s'] * 1000, '.0f')} | "
                     f"{_f(s.get('sync_s') and s['sync_s'] * 1000, '.0f')} | {_f(st.get('time_s') and st['time_s'] * 1000, '.0f')} | "
                     f"{r['halo_nodes'] / r['owned_nodes']:.2f} |")
    lines += ["", "![scaling](figures/results/scaling.png)", ""]

    tier = data["tier"]
    lines += ["## Prediction and the storage tier together", "",
              f"{tier['graph']}, {tier['workers']} workers at 1 Gbit/s, {data['settings']['epochs']} epochs. On the "
              "storage tier `--preset fast` takes its unaveraged configuration (the tier's layers read rows unit by "
              "unit: sync every 2nd epoch, the smoothed cache, float32 rows); the tier runs 4 sub-partitions "
              "through a 1 MiB host cache, far below the activations. Beside it: the same settings in memory, "
              "and `fast` in memory.", "",
              "| run | mean epoch ms | best val | final test | mean bytes per epoch | sync interval | peak RSS MiB |",
              "|---|---|---|---|---|---|---|"]
    for name, r in tier["runs"].items():
        lines.append(f"| {name} | {r['epoch_s'] * 1000:.0f} | {_f(r['best_val'], '.4f')} | {_f(r['final_test'], '.4f')} | "
                     f"{_f(r['bytes_per_epoch'], ',.0f')} | {r['sync_interval']} | {r['peak_rss_mb']:.0f} |")
    lines.append("")

    cm = data["cost_model"]
    lines += ["## Cost model", "",
              f"`dgl-sni estimate --fit benchmarks/results/` fitted to the {cm['runs']} modelled runs under "
              "`benchmarks/results/` (the model: `dgl_sni/estimate.py`); the mean epoch it estimates against the "
              "measured one, per configuration (median over its runs), and with the costs fitted on the other "
              "graphs only:", "",
              "| configuration | runs | measured ms | estimated ms | error | fitted on the other graphs |",
              "|---|---|---|---|---|---|"]
    held = {r["configuration"]: r for r in cm["holdout"]}
    for r in cm["check"]:
        h = held.get(r["configuration"])
        lines.append(f"| {r['configuration']} | {r['runs']} | {r['measured_s'] * 1000:.0f} | {r['estimated_s'] * 1000:.0f} | "
                     f"{r['error']:+.0%} | {_f(h and h['error'], '+.0%')} |")
    worst = max((abs(r["error"]) for r in cm["check"]), default=None)
    lines += ["", f"Largest error: {_f(worst, '.0%')}.", "",
              "Projected for the SNI paper's setting (16 machines, 10 Gbit/s links, 3-layer GCN, hidden 16), "
              "assumptions: " + "; ".join(cm["assumptions"]) + f"; {cm['projections'][0]['halo_ratio']} halo rows per owned "
              "row (as measured on the 200k graph at 4 parts; denser graphs and more parts have more).", "",
              "| graph | interval, bits | sync step ms | stale step ms | epoch ms | x interval 1 |", "|---|---|---|---|---|---|"]
    for p in cm["projections"]:
        lines.append(f"| {p['graph']} | {p['interval']}, {p['bits']} | {p['sync_s'] * 1000:.0f} | {p['stale_s'] * 1000:.0f} | "
                     f"{p['epoch_s'] * 1000:.0f} | {p['speedup']:.2f} |")
    c = data["cleanup"]
    lines += ["", "## Clean-up", "",
              "After the suite: " + ("no namespace, shared-memory segment or run folder was left behind." if c["clean"] else
                                     f"left behind: namespaces {c['namespaces']}, shared memory {c['shared_memory']}, "
                                     f"folders {c['temporary']}."), ""]
    with open(DOC, "w") as fh:
        fh.write("\n".join(lines))
    _headline(data)


def peer_section(peer: dict | None) -> list:
    """BNS-GCN's own code (figures from ``peers.json``) beside the in-project sampling."""
    if not peer:
        return []
    ref = peer["reference"]
    lines = ["## BNS-GCN's own code beside the in-project sampling", "",
             f"{ref['what']}; {ref['where']}; graph `{ref['graph']}` (`{' '.join(map(str, bench_e2e.GRAPHS[ref['graph']]))}`); "
             f"{ref['model']}. Its figures come from {ref['source']}.", "",
             "| run | epoch ms | reached target | to target (s) | best val | final test vs exact |", "|---|---|---|---|---|---|"]
    for r in ref["runs"]:
        low, high = (x * 1000 for x in r["epoch_s"])
        lines.append(f"| BNS-GCN's code, p = {r['p']} | {low:.0f}" + (f"-{high:.0f}" if high != low else "") +
                     f" | {'yes' if r['reached_target'] else 'no'} | - | {r['best_val']:.4f} | "
                     f"{_f(r.get('final_test_vs_exact'), '+.3f')} |")
    if not peer["ran"]:
        return lines + ["", f"The in-project version on this graph: not run ({peer['why']}).", ""]
    for r in peer["runs"]:
        lines.append(f"| dgl-sni `{r['name']}` | {r['epoch_s'] * 1000:.0f} | "
                     f"{'no' if r['time_to_target_s'] is None else 'yes'} | {_f(r['time_to_target_s'], '.1f')} | "
                     f"{r['best_val']:.4f} | {_f(r['final_test_delta'], '+.3f')} |")
    lines += ["", f"Target: interval 1's best validation accuracy minus 0.01 ({peer['target_val_acc']:.4f} for the "
                  "in-project runs, seed 0; BNS-GCN's code judged against its own exact run).", ""]
    ours = {r["name"]: r for r in peer["runs"]}
    theirs = {r["p"]: r for r in ref["runs"]}
    if "interval1" in ours and "bns-0.1" in ours and 1.0 in theirs and 0.1 in theirs:
        exact, sampled = ours["interval1"]["epoch_s"], ours["bns-0.1"]["epoch_s"]
        ref_exact, ref_sampled = statistics.mean(theirs[1.0]["epoch_s"]), statistics.mean(theirs[0.1]["epoch_s"])
        reached, ref_reached = ours["bns-0.1"]["time_to_target_s"] is not None, theirs[0.1]["reached_target"]
        text = (f"dgl-sni's exact epoch is {ref_exact / exact:.2f}x shorter than BNS-GCN's code's on this graph; at "
                f"p = 0.1 an epoch takes {sampled / exact:.2f} of the exact one in project and {ref_sampled / ref_exact:.2f} "
                "in BNS-GCN's code. ")
        if reached == ref_reached:
            text += "At p = 0.1 both " + ("reach" if reached else "miss") + " the target: the in-project version reproduces that behaviour."
        else:
            text += (f"At p = 0.1 the in-project version {'reaches' if reached else 'misses'} the target where BNS-GCN's code "
                     f"{'did' if ref_reached else 'did not'}: it does not reproduce that behaviour. It differs from BNS-GCN's "
                     "code in the two ways stated above (rows scaled by 1/p rather than the sampled graph renormalised; the "
                     "input layer's boundary features kept whole rather than sampled); which of them accounts for the "
                     "difference was not measured.")
        lines += [text, ""]
    return lines


def _headline(data: dict) -> None:
    """The README's headline table: fast against interval 1 per graph (first link)."""
    rows = ["| graph, link | interval 1 ms/epoch | fast ms/epoch | fast: x sooner to target | fast: final test vs interval 1 |",
            "|---|---|---|---|---|"]
    for graph, links in data["comparison"]["graphs"].items():
        for link, part in links.items():
            runs, seeds = _runs(part)
            by = {r["name"]: r for r in runs}
            fast, base = by.get("fast"), by.get("interval1")
            if not fast or not base:
                continue
            sooner = seeds["fast"]["time_to_target_speedup_median"] if seeds else fast.get("time_to_target_speedup")
            delta = seeds["fast"]["final_test_delta_mean"] if seeds else fast.get("final_test_delta")
            rows.append(f"| {graph}, {link} | {base['epoch_s'] * 1000:.0f} | {fast['epoch_s'] * 1000:.0f} | "
                        f"{_f(sooner, '.2f')} | {_f(delta, '+.4f')} |")
    m = data["machine"]
    seeds = sorted({s for links in data["comparison"]["graphs"].values() for part in links.values()
                    for s in part.get("measured", {}).get("seeds", data["settings"]["seeds"])})
    block = [HEADLINE[0], f"From [docs/RESULTS.md](docs/RESULTS.md) (suite `{data['suite']}`, seed"
             f"{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}, {m['date']}, commit "
             f"{m['commit']}, {m['cores']} cores shared by {WORKERS} emulated machines):", "", *rows, HEADLINE[1]]
    with open(README) as fh:
        text = fh.read()
    if HEADLINE[0] not in text:
        return
    head, rest = text.split(HEADLINE[0], 1)
    _, tail = rest.split(HEADLINE[1], 1)
    with open(README, "w") as fh:
        fh.write(head + "\n".join(block) + tail)


def _names(value: str) -> list:
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return names


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true", help="the full suite (hours)")
    parser.add_argument("--no-run", action="store_true", help="write the report from the suite's JSON again")
    parser.add_argument("--dgl-example", default=None, metavar="PATH",
                        help="DGL 2.1.0's examples/distributed/graphsage/node_classification.py (default: the DGL "
                             "mirror, where there is one)")
    parser.add_argument("--graphs", type=_names, default=None, help="only these of the suite's graphs (comma-separated)")
    parser.add_argument("--links", type=_names, default=None, help="only these of the suite's links")
    parser.add_argument("--seeds", type=lambda v: [int(x) for x in _names(v)], default=None,
                        help="only these of the suite's seeds")
    ns = parser.parse_args(argv)
    name = "full" if ns.full else "quick"
    path = os.path.join(RESULTS, f"report-{name}.json")
    try:
        suite = narrowed(name, ns.graphs, ns.links, ns.seeds)
    except ValueError as err:
        parser.error(str(err))
    before = None
    if os.path.exists(path):
        try:
            with open(path) as fh:
                before = json.load(fh)
        except ValueError as err:
            if ns.no_run:
                parser.error(f"{path} is not a report's JSON ({err})")
    if ns.no_run:
        if before is None:
            parser.error(f"{path} does not exist: run the suite first")
        data = before
    else:
        data = run_suite(name, ns.dgl_example, suite)
        if suite != SUITES[name]:  # a part of the suite: kept beside the parts measured before
            data = merge(before, data)
        os.makedirs(RESULTS, exist_ok=True)
        with open(path, "w") as fh:
            json.dump(data, fh, indent=1)
    plots(data)
    write_report(data, "python benchmarks/results_report.py" + (" --full" if ns.full else ""))
    print(f"wrote {DOC} and {FIGURES}/ from {path}")
    return 0 if data["cleanup"]["clean"] else 1


if __name__ == "__main__":
    sys.exit(main())

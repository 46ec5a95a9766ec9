"""The results report's pages: ``docs/RESULTS.md``, its plots, the README's headline and the
cost model's shipped constants, written from the data :mod:`benchmarks.report_suite` computes.
Called by ``benchmarks/results_report.py``; reads nothing but the data it is given (and the
README it rewrites the headline block of).
"""
from __future__ import annotations

import glob
import os
import statistics

from benchmarks import seed_sweeps
from benchmarks.report_suite import EVAL_EVERY, SETTING, WHAT, WORKERS, missing_parts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "RESULTS.md")
FIGURES = os.path.join(ROOT, "docs", "figures", "results")
README = os.path.join(ROOT, "README.md")
HEADLINE = ("<!-- results headline: written by benchmarks/results_report.py -->",
            "<!-- end of results headline -->")


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


def _section(title: str, part, intro) -> list:
    """A section's heading, then ``intro()`` (its text and table head), or "Not measured yet."."""
    return [f"## {title}", ""] + (intro() if part else ["Not measured yet.", ""])


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
    peers = data.get("peers_over_seeds")
    if peers:
        lines += [f"## Over seeds: every method on {peers['graph']}", "",
                  f"Every method of the comparison below (`benchmarks/configs/peers.json`), seeds "
                  f"{', '.join(map(str, peers['seeds']))}, 4 machines at 1 Gbit/s, 3-layer GCN, hidden 16, dropout 0.5, "
                  "150 epochs, exact evaluation after every epoch (`python benchmarks/bench_e2e.py --preset full --graphs "
                  f"{peers['graph']} --links 1gbit --configs benchmarks/configs/peers.json --seeds 0,1,2`; the result "
                  "file is committed under `benchmarks/measured/` and `benchmarks/seed_sweeps.py` recomputes this "
                  "table). *setting*: the peer's own, or `fast`'s (interval 8, warm-up 5); *x epoch*: the median "
                  "epoch's speed-up; *never*: the run did not reach the target.", "",
                  *seed_sweeps.peer_table(peers, SETTING), ""]
    lines += peer_code_section(data.get("peer_code_over_seeds"))
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
        "whether a row runs in the peer's own setting or in `fast`'s (interval 8, warm-up 5). BNS-GCN's and PipeGCN's "
        "own code also run here, from their repositories at pinned commits ported to the CPU (their tables above); "
        "SANCUS's and AdaQP's do not, and no figure of them is published: AdaQP quantizes through a CUDA extension "
        "(`AdaQP/util/quantization`) with no CPU path, so running it here would mean replacing its kernels; SANCUS's "
        "public code (github.com/chenzhao/light-dist-gnn) skips broadcasts in its cached GCN (`models/cached_gcn.py`) "
        "on a fixed count of earlier broadcasts, not by its paper's staleness test, so its figures would not be "
        "SANCUS's method. What each in-project version keeps and leaves out: `cache-no-averaging` keeps SANCUS's reuse "
        "of stale cached rows; `sancus-own` adds a skip test on the weights' drift, not SANCUS's test on each "
        "embedding's; `pipelined` keeps PipeGCN's one-epoch-stale rows and gradients in `fast`'s setting, "
        "`pipegcn-own` adds PipeGCN's smoothing of both (its default 0.95) from the first epoch; the `exact-*bit` runs keep "
        "AdaQP's stochastic quantization at a fixed width, `adaqp-own` and `adaqp-fast` its bit choice per row, "
        "solved per message in closed form where AdaQP solves one integer program over every link (its time is the "
        "slowest link's) every few epochs, and the rows' variance weighted by how many rows aggregate them where "
        "AdaQP weighs it by their aggregation coefficients; `bns-0.*` samples boundary rows per epoch as BNS-GCN "
        "does (scaled by 1/p, full-graph degrees) and leaves the input layer's boundary features whole, as BNS-GCN "
        "does with `--use-pp`; its rows travel through the registered sets exact steps use, with no "
        "barrier; `bns-fast-*` samples the same way at `fast`'s syncs, and its stale epochs reuse what the sync "
        "pulled (BNS-GCN has no stale epochs). DGL's own distributed "
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
    lines += _section("Scaling", sc, lambda: [
              f"{sc['graph']} at 1 Gbit/s, exact and `fast`, 2, 4 and 8 emulated machines on this host's "
              f"{sc['cores']} cores: beyond {sc['cores']} machines each shares a core, so compute does not shrink "
              "with more machines here as it would on a cluster.", "",
              "| machines | preset | mean epoch ms | sync step ms | compute ms | exchange ms | waits ms | stale step ms | halo rows per owned row |",
              "|---|---|---|---|---|---|---|---|---|"])
    for r in (sc or {}).get("rows", []):
        s, st = r["breakdown"].get("sync", {}), r["breakdown"].get("stale", {})
        lines.append(f"| {r['workers']} | {r['preset']} | {r['epoch_s'] * 1000:.0f} | {_f(s.get('time_s') and s['time_s'] * 1000, '.0f')} | "
                     f"{_f(s.get('comp_s') and s['comp_s'] * 1000, '.0f')} | {_f(s.get('comm_s') and s['comm_s'] * 1000, '.0f')} | "
                     f"{_f(s.get('sync_s') and s['sync_s'] * 1000, '.0f')} | {_f(st.get('time_s') and st['time_s'] * 1000, '.0f')} | "
                     f"{r['halo_nodes'] / r['owned_nodes']:.2f} |")
    if sc:
        lines += ["", "![scaling](figures/results/scaling.png)", ""]

    tier = data["tier"]
    lines += _section("Prediction and the storage tier together", tier, lambda: [
              f"{tier['graph']}, {tier['workers']} workers at 1 Gbit/s, {data['settings']['epochs']} epochs. On the "
              "storage tier `--preset fast` takes its unaveraged configuration (the tier's layers read rows unit by "
              "unit: sync every 2nd epoch, the smoothed cache, float32 rows); the tier runs 4 sub-partitions "
              "through a 1 MiB host cache, far below the activations. Beside it: the same settings in memory, "
              "and `fast` in memory.", "",
              "| run | mean epoch ms | best val | final test | mean bytes per epoch | sync interval | peak RSS MiB |",
              "|---|---|---|---|---|---|---|"])
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
             "BNS-GCN's own code is not run by this suite (`benchmarks/peer_code.py --peer bns-gcn` runs it; its figures are "
             "in the table over seeds above). The in-project version on a 300k-node graph "
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


MODEL_NAMES = {"gcn": "GCN", "graphsage": "GraphSAGE"}


def peer_code_section(codes: list | None) -> list:
    """Each peer's own code over seeds, beside this project's runs trained alongside."""
    lines = []
    for code in codes or ():
        model = MODEL_NAMES.get(code["model"], code["model"])
        lines += [f"### {code['peer']}'s own code", "",
                  f"{code['peer']}'s code at commit [{code['commit'][:7]}]({code['url']}/tree/{code['commit']}), run by "
                  f"`python benchmarks/peer_code.py --peer {code['key']} --repo CLONE` on {code['graph']} (seeds "
                  f"{', '.join(map(str, code['seeds']))}, 4 machines at 1 Gbit/s, 3 layers, hidden 16, dropout 0.5, lr 0.01, "
                  f"150 epochs): its {model} with its defaults (LayerNorm between layers, `--use-pp`, METIS partitions "
                  "balanced by volume), ported to the CPU by the script (device strings, pinned buffers and CUDA streams"
                  + "".join(f", {r} for DGL 2.1" for r in code.get("port_renames", ()))
                  + "; nothing of its code is committed), every epoch's weights "
                  f"evaluated on the whole graph after training. `{code['exact']}` is its own exact training; *against its "
                  "own exact code*: the target is that run's best validation minus 0.01. This project's rows ("
                  f"{code['ours_model']}) were trained alongside on the same host, so the times are paired by seed.",
                  "", *seed_sweeps.peer_code_table(code), ""]
        vals = [v for r in code["rows"].values() for v in r["best_val"]]
        reach = (f" Its best validation accuracies over every variant and seed lie at {min(vals):.4f}-{max(vals):.4f}, "
                 f"this project's targets at {min(code['targets']):.4f}-{max(code['targets']):.4f}.")
        if code["best"]:
            x = code["fast_over_best"]
            lines.append(f"`fast`'s median time to this project's target is "
                         + (f"{x:.2f}x shorter" if x >= 1 else f"{1 / x:.2f}x longer")
                         + f" than {code['peer']}'s code's in its best variant (`{code['best']}`)." + reach)
        else:
            lines.append(f"{code['peer']}'s code did not reach this project's target on most seeds in a variant other "
                         f"than its exact training" + ("" if code["exact_reached"] else ", nor in that") + "." + reach)
        lines.append("")
    return lines


def _peer_code_line(codes: list | None) -> list:
    """The README's lines on the peers' own code."""
    out = []
    for code in codes or ():
        head = f"{code['peer']}'s own code (pinned commit, ported to the CPU, same seeds, trained alongside): "
        best = code["best"]
        if best is not None:
            x = code["fast_over_best"]
            out.append(head + "`fast`'s median time to the target is "
                       + (f"{x:.2f}x shorter" if x >= 1 else f"{1 / x:.2f}x longer") + f" than its best variant's (`{best}`).")
            continue
        faster = {n: r["own"] for n, r in code["rows"].items() if "own" in r}
        text = head + "no variant but its exact training reaches this project's target on most seeds" + \
            ("" if code["exact_reached"] else ", nor does that")
        if faster:
            name = max(faster, key=lambda n: statistics.median(faster[n]["sooner"]))
            x = statistics.median(faster[name]["sooner"])
            if x:
                text += f"; against its own exact code, `{name}` reaches that code's target {x:.2f}x sooner"
        out.append(text + ".")
    return out


def _peers_line(peers: dict | None) -> list:
    """The README's line on the peers: ``fast``'s median time to target against each peer's best row."""
    if not peers:
        return []
    ratios, never = [], []
    for f in peers["families"]:
        x = f["fast_over_best"]
        if x is None:
            never.append(f"{f['peer']}'s rows ({', '.join(f'`{m}`' for m in f['rows'])})")
        else:
            ratios.append(f"{x:.2f}x shorter than {f['peer']}'s (`{f['best']}`)" if x >= 1 else
                          f"{1 / x:.2f}x longer than {f['peer']}'s (`{f['best']}`)")
    text = (f"Against the peers' in-project versions on {peers['graph']} (seeds {', '.join(map(str, peers['seeds']))}; "
            "each peer in its own setting and in `fast`'s, its best row taken): ")
    if ratios:
        text += f"`fast`'s median time to the target is {', '.join(ratios)}"
    if never:
        text += ("; " if ratios else "") + f"{' and '.join(never)} did not reach the target"
    return ["", text + " (table in [docs/RESULTS.md](docs/RESULTS.md))."]


def _headline(data: dict, readme: str = README) -> None:
    """The README's headline: ``fast`` for each model over seeds, and which targets hold."""
    rows = data["sweeps"]
    held = [f"{r['model']} on {r['graph']}" for r in rows if r["holds"]]
    missed = [f"{r['model']} on {r['graph']}" for r in rows if not r["holds"]]
    block = [HEADLINE[0], "Time to exact training's accuracy with `--preset fast` against exact training (interval 1), "
             "4 emulated machines at 1 Gbit/s sharing 2 cores; medians over seeds with their range and the null beside "
             "them (from [docs/RESULTS.md](docs/RESULTS.md)):", "", *seed_sweeps.table(rows), "",
             f"Targets that hold: {', '.join(held) or 'none'}. Missed: {', '.join(missed) or 'none'}.",
             *_peers_line(data.get("peers_over_seeds")), *_peer_code_line(data.get("peer_code_over_seeds")),
             HEADLINE[1]]
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

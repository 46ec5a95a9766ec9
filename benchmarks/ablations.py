"""What makes a stale epoch worth less than an exact one, and the SNI paper's ablations.

Each study is one sweep on one emulated cluster (4 workers, the 200k-node synthetic graph of
``bench_e2e``, 3-layer GCN, dropout 0.5), written to ``benchmarks/results/ablations/NAME.json``
with a plot beside it (``NAME.png``):

* ``causes``: stale epochs at interval 5 (the smoothed cache, no averaging) against exact ones,
  and the same with the owners' true rows, true gradients or both on the stale epochs
  (``--stale-truth``, per layer too), with the served rows' and kept gradients' errors per layer
  over training (``--measure-staleness``); and the fast preset (rows and gradients averaged
  over steps, interval 8).
* ``fig3``: the served rows' error against the true ones over epochs, at intervals 2 to 5, for
  the cache, the smoothed cache, the step-averaged rows and each predictor on the smoothed rows
  (the paper's Fig. 3).
* ``fig18``: the predicted rows' error over epochs with and without self-feeding (the paper's
  Algorithm 2, ``linear-trend``, against its Algorithm 1, ``window-trend``; Fig. 18).
* ``table3``: the sampling rate against accuracy (the paper's Table III: a cache at interval 5
  refined by the trend predictor for the sampled rows).
* ``table5``: sampling, self-feeding and the asynchronous pipeline on and off, cumulatively: epoch
  time at 1 Gbit/s and accuracy (the paper's Table V), and the fast preset beside them.

fig18, table3 and table5 start, as the paper does, from the cache of the last synced rows at
interval 5 (no smoothing, no averaging).

    python benchmarks/ablations.py causes
    python benchmarks/ablations.py fig3 --epochs 60
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks._sweep import run_sweep  # noqa: E402
from benchmarks.bench_e2e import GRAPHS, MODEL, RESULTS, first_at  # noqa: E402
from dgl_sni.report import TARGET_MARGIN  # noqa: E402

OUT = os.path.join(RESULTS, "ablations")
# the stale configurations the studies start from, every averaging setting named (the fast
# preset averages rows and gradients over steps; its fallback serves the smoothed cache)
SMOOTHED5 = dict(preset="fast", sync_interval=5, smooth=0.75, row_average=0.0, grad_average=0.0)
RAW5 = dict(SMOOTHED5, smooth=0.0)  # the paper's baseline: the cache of the last synced rows
AVERAGED = dict(preset="fast")  # interval 8, rows and gradients averaged over steps
LAYERS = (1, 2)  # the exchanged layers of a 3-layer GCN
PREDICTORS = ("linear-trend", "gated", "holt", "window-trend")


def _study(name: str) -> dict:
    """The sweep of study ``name``: its link, epochs and named runs (the first one exact where
    runs are judged against it)."""
    if name == "causes":
        runs = [("exact", dict(preset="exact")), ("stale", dict(SMOOTHED5, measure_staleness=True))]
        runs += [(f"true {what}", dict(SMOOTHED5, stale_truth=truth)) for what, truth in (
            ("rows", "rows"), ("gradients", "grads"), ("rows and gradients", "both"),
            ("rows of layer 1", "rows@1"), ("rows of layer 2", "rows@2"))]
        runs += [("step-averaged (fast)", dict(AVERAGED, measure_staleness=True))]
        return dict(link="unshaped", epochs=150, runs=runs)
    if name == "fig3":
        methods = [("cache", RAW5), ("smoothed cache", SMOOTHED5), ("step-averaged", AVERAGED)]
        methods += [(p, dict(SMOOTHED5, predictor=p, sampling_ratio=1.0)) for p in PREDICTORS]
        runs = [(f"{method} E{e}", dict(base, sync_interval=e, measure_staleness=True))
                for e in (2, 3, 4, 5) for method, base in methods]
        return dict(link="unshaped", epochs=60, runs=runs)
    if name == "fig18":
        runs = [(f"{label}", dict(RAW5, predictor=p, sampling_ratio=0.3, measure_staleness=True))
                for label, p in (("self-feeding (Algorithm 2)", "linear-trend"),
                                 ("no self-feeding (Algorithm 1)", "window-trend"))]
        return dict(link="unshaped", epochs=100, runs=runs)
    if name == "table3":
        runs = [("exact", dict(preset="exact")), ("cache, SR 0", RAW5)]
        runs += [(f"SR {sr:g}", dict(RAW5, predictor="linear-trend", sampling_ratio=sr))
                 for sr in (0.01, 0.05, 0.1, 0.3)]
        return dict(link="unshaped", epochs=150, runs=runs)
    if name == "table5":
        base = RAW5
        runs = [("exact", dict(preset="exact")), ("cache (no prediction)", base),
                ("+ prediction, every row", dict(base, predictor="window-trend", sampling_ratio=1.0, prefetch=False)),
                ("+ sampling", dict(base, predictor="window-trend", sampling_ratio=0.1, prefetch=False)),
                ("+ self-feeding", dict(base, predictor="linear-trend", sampling_ratio=0.1, prefetch=False)),
                ("+ async pipeline", dict(base, predictor="linear-trend", sampling_ratio=0.1)),
                ("the fast preset (averaged, interval 8)", AVERAGED)]
        return dict(link="1gbit", epochs=100, runs=runs)
    raise ValueError(f"unknown study '{name}': choose one of {', '.join(STUDIES)}")


STUDIES = ("causes", "fig3", "fig18", "table3", "table5")


def _per_layer(epochs: list, key: str, norm: str | None = None) -> dict:
    """Per exchanged layer, ``key`` (over ``norm`` where given) of every stale epoch that has it."""
    out = {}
    for layer in LAYERS:
        points = []
        for e in epochs:
            value = e.get(f"l{layer}_{key}")
            if e["mode"] == "stale" and value is not None:
                scale = e.get(f"l{layer}_{norm}") if norm else 1.0
                if scale:
                    points.append((e["epoch"], value / scale))
        out[layer] = points
    return out


def summarize(name: str, metrics: dict, exact: dict | None) -> dict:
    epochs = metrics["epochs"]
    stale = [e["time_s"] for e in epochs[5:] if e["mode"] == "stale"]
    out = dict(name=name, epochs=len(epochs), best_val_acc=max(e["val_acc"] for e in epochs),
               final_test_acc=epochs[-1]["test_acc"], epoch_s=statistics.mean(e["time_s"] for e in epochs[5:]),
               stale_epoch_s=statistics.median(stale) if stale else None,
               syncs=sum(e["mode"] == "sync" for e in epochs),
               val=[e["val_acc"] for e in epochs], loss=[e["loss"] for e in epochs],
               row_error=_per_layer(epochs, "staleness_l2", "true_l2"),
               grad_error=_per_layer(epochs, "grad_err_l2", "grad_true_l2"),
               predicted_error=[(e["epoch"], e["pred_rows_l2"], e.get("pred_rows_cache_l2"))
                                for e in epochs if e.get("pred_rows_l2") is not None])
    if exact is not None:
        target = max(e["val_acc"] for e in exact["epochs"]) - TARGET_MARGIN
        curve = [dict(val_acc=e["val_acc"], epoch=e["epoch"]) for e in epochs]
        reached, base = first_at(curve, target), first_at(
            [dict(val_acc=e["val_acc"], epoch=e["epoch"]) for e in exact["epochs"]], target)
        out.update(target_val_acc=target, epochs_to_target=None if reached is None else reached["epoch"] + 1,
                   epochs_to_target_ratio=(reached["epoch"] + 1) / (base["epoch"] + 1) if reached and base else None,
                   final_test_delta=out["final_test_acc"] - exact["epochs"][-1]["test_acc"])
    return out


def run_study(name: str, graph: str, epochs: int | None, workers: int) -> dict:
    study = _study(name)
    epochs = epochs or study["epochs"]
    base_args = MODEL + (["--bandwidth", study["link"]] if study["link"] != "unshaped" else [])
    entries = [dict(settings, epochs=epochs) for _, settings in study["runs"]]
    out_dir = os.path.join(RESULTS, "e2e_runs", f"{graph}-{study['link']}-w{workers}")
    print(f"{name}: {len(entries)} runs of {epochs} epochs on {graph} ({study['link']})", flush=True)
    metrics = run_sweep(GRAPHS[graph], workers, entries, out_dir, base_args=base_args)
    exact = metrics[0] if study["runs"][0][0] == "exact" else None
    runs = [summarize(label, m, exact) for (label, _), m in zip(study["runs"], metrics)]
    return dict(study=name, graph=graph, link=study["link"], workers=workers, epochs=epochs, runs=runs)


def _print(report: dict) -> None:
    print(f"  {'run':34s} {'best val':>8s} {'final test':>10s} {'x epochs':>8s} {'ms/epoch':>8s} "
          f"{'stale ms':>8s} {'syncs':>5s} {'row err L1/L2 (last 10 stale)':>30s}")
    for r in report["runs"]:
        errs = "/".join(f"{statistics.mean(v for _, v in r['row_error'][layer][-10:]):.2f}"
                        for layer in map(int, r["row_error"]) if r["row_error"][layer]) or "-"
        ratio, stale = r.get("epochs_to_target_ratio"), r["stale_epoch_s"]
        ratio = "-" if ratio is None else f"{ratio:.2f}"
        stale = "-" if stale is None else f"{stale * 1e3:.0f}"
        print(f"  {r['name'][:34]:34s} {r['best_val_acc']:8.4f} {r['final_test_acc']:10.4f} {ratio:>8s} "
              f"{r['epoch_s'] * 1e3:8.0f} {stale:>8s} {r['syncs']:5d} {errs:>30s}")


def plot(report: dict, path: str) -> None:
    """The study's figure: validation accuracy over epochs (causes, table3, table5), the served
    rows' relative error per interval (fig3) or the predicted rows' error (fig18)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    name, runs = report["study"], report["runs"]
    if name == "fig3":
        intervals = sorted({int(r["name"].rsplit("E", 1)[1]) for r in runs})
        fig, axes = plt.subplots(1, len(intervals), figsize=(4 * len(intervals), 3.6), sharey=True)
        for ax, e in zip(axes, intervals):
            for r in runs:
                if r["name"].endswith(f" E{e}"):
                    points = [p for layer in r["row_error"] for p in r["row_error"][layer]]
                    by_epoch = {}
                    for epoch, value in points:
                        by_epoch.setdefault(epoch, []).append(value)
                    xs = sorted(by_epoch)
                    ax.plot(xs, [statistics.mean(by_epoch[x]) for x in xs], label=r["name"].rsplit(" E", 1)[0],
                            lw=1)
            ax.set_title(f"sync every {e} epochs")
            ax.set_xlabel("epoch")
        axes[0].set_ylabel("served rows' L2 error / true rows' L2")
        axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the panels, off the curves
    elif name == "fig18":
        fig, ax = plt.subplots(figsize=(6, 4))
        for r in runs:
            pts = r["predicted_error"]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=r["name"], lw=1)
        if runs and runs[0]["predicted_error"]:
            pts = runs[0]["predicted_error"]
            ax.plot([p[0] for p in pts], [p[2] for p in pts], label="cache (same rows)", lw=1, ls="--", c="grey")
        ax.set_xlabel("epoch")
        ax.set_ylabel("predicted rows' L2 error to the true rows")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for r in runs:
            axes[0].plot(range(1, len(r["val"]) + 1), r["val"], label=r["name"], lw=1)
        axes[0].set_xlabel("epoch")
        axes[0].set_ylabel("validation accuracy (exact evaluation)")
        axes[0].set_ylim(bottom=0.4)
        axes[0].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=3)
        if name == "table5":
            labels = [r["name"] for r in runs]
            axes[1].barh(labels, [r["epoch_s"] * 1e3 for r in runs])
            axes[1].set_xlabel("mean epoch time, ms (1 Gbit/s)")
        elif name == "table3":  # no staleness measured: the accuracies per sampling rate
            labels = [r["name"] for r in runs]
            axes[1].barh(labels, [r["best_val_acc"] for r in runs], label="best validation")
            axes[1].scatter([r["final_test_acc"] for r in runs], labels, c="k", zorder=3, label="final test")
            axes[1].set_xlim(left=0.0)  # bars from zero
            axes[1].set_xlabel("accuracy")
            axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        else:
            for r in runs:
                for layer, pts in r["row_error"].items():
                    if pts:
                        axes[1].plot([p[0] for p in pts], [p[1] for p in pts], lw=1,
                                     label=f"{r['name']}: rows, layer {layer}")
                for layer, pts in r["grad_error"].items():
                    if pts:
                        axes[1].plot([p[0] for p in pts], [p[1] for p in pts], lw=1, ls="--",
                                     label=f"{r['name']}: gradients, layer {layer}")
            axes[1].set_xlabel("epoch")
            axes[1].set_ylabel("stale epochs: L2 error / true L2")
            axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"{name}: {report['graph']}, {report['workers']} workers, {report['link']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # legends beside or below the axes included
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("study", choices=STUDIES)
    parser.add_argument("--graph", default="syn200k", choices=sorted(GRAPHS))
    parser.add_argument("--epochs", type=int, default=None, help="override the study's epochs")
    parser.add_argument("--workers", type=int, default=4)
    ns = parser.parse_args(argv)
    report = run_study(ns.study, ns.graph, ns.epochs, ns.workers)
    _print(report)
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, f"{ns.study}-{ns.graph}")
    with open(path + ".json", "w") as fh:
        json.dump(report, fh, indent=1)
    plot(report, path + ".png")
    print(f"wrote {path}.json and {path}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``dgl-sni report``: the plots and the summary of metrics files, several runs overlaid.

Reads what ``dgl-sni train --metrics`` writes (a file, or a ``--sweep``'s folder of
``runNNN.json``) and draws, with matplotlib's Agg backend, as PNG and SVG:

* ``accuracy``: validation accuracy against training time (evaluation excluded) and against
  epochs, the target (the first run's best validation accuracy minus 0.01) dashed;
* ``breakdown``: the median training step of each run by mode (sync, stale, pipelined),
  split into compute, communication and waits (barriers, all-reduce);
* ``bytes``: bytes each epoch moved (sent and received, all workers);
* ``staleness`` (where a run measured it, ``--measure-staleness``): the L2 error of the rows
  stale steps used against the true rows, per layer.

It prints one line per run: epochs, mean step, best validation accuracy, and the training
time to the target with its speed-up over the first run. Called by the CLI and by the
results report (``benchmarks/results_report.py``).
"""
from __future__ import annotations

import json
import os
import statistics

TARGET_MARGIN = 0.01  # the target: the first run's best validation accuracy minus this
SKIP = 5  # start-up epochs left out of per-epoch medians (the first epochs build caches and warm the allocator)
PARTS = (("comp_s", "compute"), ("comm_s", "communication"), ("sync_s", "waits"))
FORMATS = ("png", "svg")


def load_runs(paths: list, labels: list | None = None) -> list:
    """``[(label, metrics)]`` from metrics files and sweep folders; a ``ValueError`` names a
    path that is none."""
    found = []
    for path in paths:
        if os.path.isdir(path):
            files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.startswith("run") and f.endswith(".json"))
            if not files:
                raise ValueError(f"{path} is a folder without runNNN.json metrics files")
        else:
            files = [path]
        for file in files:
            try:
                with open(file) as fh:
                    metrics = json.load(fh)
            except FileNotFoundError:
                raise ValueError(f"metrics file not found: {file}") from None
            except json.JSONDecodeError as err:
                raise ValueError(f"{file} is not valid JSON: {err}") from None
            if not isinstance(metrics, dict) or not isinstance(metrics.get("epochs"), list) or not metrics["epochs"]:
                raise ValueError(f"{file} is not a dgl-sni metrics file (no epochs in it)")
            found.append((_label(file, metrics), metrics))
    if labels:
        if len(labels) != len(found):
            raise ValueError(f"--labels names {len(labels)} runs, the files hold {len(found)}")
        found = [(label, m) for label, (_, m) in zip(labels, found)]
    return found


def _label(path: str, metrics: dict) -> str:
    cfg = metrics.get("config", {})
    name = os.path.splitext(os.path.basename(path))[0]
    interval = cfg.get("sync_interval")
    detail = f"{cfg.get('preset', '?')}, interval {interval}" if interval is not None else ""
    return f"{name} ({detail})" if detail else name


def curve(metrics: dict) -> list:
    """``[(epoch, cumulative training time s, validation accuracy or None)]``."""
    t, out = 0.0, []
    for e in metrics["epochs"]:
        t += e["time_s"]
        out.append((e["epoch"], t, e.get("val_acc")))
    return out


def time_to_target(metrics: dict, target: float):
    """``(training time s, epoch)`` of the first evaluation at or above ``target``, or ``None``."""
    for epoch, t, val in curve(metrics):
        if val is not None and val >= target:
            return t, epoch
    return None


def summarize(runs: list) -> list:
    """One dict per run: its figures, the time to the first run's target and the speed-up."""
    if not runs:
        return []
    best0 = max((v for _, _, v in curve(runs[0][1]) if v is not None), default=None)
    target = None if best0 is None else best0 - TARGET_MARGIN
    rows, base = [], None
    for label, m in runs:
        vals = [v for _, _, v in curve(m) if v is not None]
        reached = time_to_target(m, target) if target is not None else None
        row = dict(label=label, epochs=len(m["epochs"]),
                   step_s=statistics.mean(e["time_s"] for e in m["epochs"]),
                   best_val=max(vals) if vals else None,
                   final_test=m["epochs"][-1].get("test_acc"), target=target,
                   time_to_target_s=reached[0] if reached else None,
                   epoch_at_target=reached[1] if reached else None)
        if base is None:
            base = row["time_to_target_s"]
        row["speedup"] = base / row["time_to_target_s"] if base and row["time_to_target_s"] else None
        rows.append(row)
    return rows


def format_summary(rows: list) -> str:
    def f(value, spec):
        return "-" if value is None else format(value, spec)
    lines = [f"{'run':<34} {'epochs':>6} {'step s':>8} {'best val':>8} {'final test':>10} "
             f"{'to target s':>11} {'epoch':>5} {'sooner':>7}"]
    for r in rows:
        lines.append(f"{r['label'][:34]:<34} {r['epochs']:>6} {f(r['step_s'], '.3f'):>8} {f(r['best_val'], '.4f'):>8} "
                     f"{f(r['final_test'], '.4f'):>10} {f(r['time_to_target_s'], '.1f'):>11} "
                     f"{f(r['epoch_at_target'], 'd'):>5} {f(r['speedup'], '.2f') + ('x' if r['speedup'] else ''):>7}")
    if rows and rows[0]["target"] is not None:
        lines.append(f"target: the first run's best validation accuracy - {TARGET_MARGIN} = {rows[0]['target']:.4f}")
    return "\n".join(lines)


def _medians(metrics: dict) -> dict:
    """Per mode: the median of each part of the training step."""
    out = {}
    for mode in ("sync", "stale", "pipelined"):
        sel = [e for e in metrics["epochs"] if e.get("mode") == mode]
        if sel:
            out[mode] = {k: statistics.median(e.get(k, 0.0) for e in sel) for k, _ in PARTS}
            out[mode]["time_s"] = statistics.median(e["time_s"] for e in sel)
    return out


def accuracy_figure(curves: list, target: float | None, title: str, floor: float | None = None):
    """Validation accuracy against training time and against epochs, one line per
    ``(label, [(epoch, training time s, validation accuracy)])``, the target dashed; the
    y axis from ``floor`` where given. Used by :func:`draw` and the results report."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_time, by_epoch) = plt.subplots(1, 2, figsize=(11, 4))
    palette = plt.cm.tab20.colors if len(curves) > 10 else plt.cm.tab10.colors  # no two lines share a colour
    for i, (label, pts) in enumerate(curves):
        color = palette[i % len(palette)]
        by_time.plot([t for _, t, _ in pts], [v for *_, v in pts], label=label, linewidth=1, color=color)
        by_epoch.plot([e for e, _, _ in pts], [v for *_, v in pts], label=label.split(",")[0], linewidth=1,
                      color=color)
    for ax, xlabel in ((by_time, "training time (s, evaluation excluded)"), (by_epoch, "epoch")):
        if target is not None:
            ax.axhline(target, color="grey", linestyle="--", linewidth=0.8)
        if floor is not None:
            ax.set_ylim(bottom=floor)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("validation accuracy")
        ax.grid(alpha=0.3)
    by_time.set_title(title)
    fig.tight_layout()
    # one legend below both panels, off the curves (saved with bbox_inches="tight")
    fig.legend(*by_time.get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=min(5, max(1, len(curves))), fontsize=7, frameon=False)
    by_epoch.set_title("accuracy against epochs")
    return fig


def draw(runs: list, out_dir: str, formats=FORMATS) -> list:
    """Write the plots of ``runs`` into ``out_dir``; returns the paths written."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    rows = summarize(runs)
    written = []

    def save(fig, name):
        fig.tight_layout()
        for fmt in formats:
            path = os.path.join(out_dir, f"{name}.{fmt}")
            fig.savefig(path, dpi=120, bbox_inches="tight")  # legends beside or below the axes included
            written.append(path)
        plt.close(fig)

    curves = []
    for (label, m), row in zip(runs, rows):
        reached = "" if row["time_to_target_s"] is None else f", target at {row['time_to_target_s']:.1f} s"
        curves.append((f"{label}{reached}", [p for p in curve(m) if p[2] is not None]))
    fig = accuracy_figure(curves, rows[0]["target"] if rows else None, "accuracy against time (dashed: target)")
    save(fig, "accuracy")

    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(runs) + 2), 4))
    bars, names = [], []
    for label, m in runs:
        for mode, med in _medians(m).items():
            bars.append(med)
            names.append(f"{label[:18]}\n{mode}")
    bottom = [0.0] * len(bars)
    for key, part in PARTS:
        heights = [b[key] * 1000 for b in bars]
        ax.bar(range(len(bars)), heights, bottom=bottom, label=part)
        bottom = [x + h for x, h in zip(bottom, heights)]
    ax.scatter(range(len(bars)), [b["time_s"] * 1000 for b in bars], color="black", marker="_", s=200,
               label="step (median)", zorder=3)
    ax.set_xticks(range(len(bars)), names, fontsize=7)
    ax.set_ylabel("ms per training step (median)")
    ax.set_title("where a training step's time goes, by mode")
    ax.legend(fontsize=7)
    save(fig, "breakdown")

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, m in runs:
        ax.plot([e["epoch"] for e in m["epochs"]],
                [(e.get("bytes_sent", 0) + e.get("bytes_recv", 0)) / 2**20 for e in m["epochs"]], label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("MiB moved in the training step (all workers)")
    ax.set_title("bytes per epoch")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, "bytes")

    measured = [(label, m) for label, m in runs if any("staleness_l2" in e for e in m["epochs"])]
    if measured:
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, m in measured:
            layers = sorted({k.split("_", 1)[0] for e in m["epochs"] for k in e
                             if k.startswith("l") and k.endswith("_staleness_l2")})
            for layer in layers or [None]:
                key = "staleness_l2" if layer is None else f"{layer}_staleness_l2"
                pts = [(e["epoch"], e[key]) for e in m["epochs"] if e.get(key) is not None]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], ".", label=f"{label} {layer or ''}".strip())
        ax.set_xlabel("epoch")
        ax.set_ylabel("L2 error of the served rows (stale steps)")
        ax.set_yscale("log")
        ax.set_title("staleness, where measured")
        ax.legend(fontsize=7)
        save(fig, "staleness")
    return written

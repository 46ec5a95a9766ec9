"""``dgl-sni estimate``: the epoch time of a cluster, from costs measured on this one.

The model, per worker (the mean partition), for a ``layers``-layer GCN of width ``hidden``:

* **compute** of a sync step ``T_c = share * (c_agg * E * sum(out_l) + c_proj * (n_src * F * hidden
  + n_own * sum_{l>=1} in_l * out_l) + c_0)``: ``E`` local edges (self loops included),
  ``n_src`` owned and halo rows, ``F`` input width; ``share`` = ``max(1, workers / cores)`` where
  the emulated machines share this host's cores (1 on a real cluster, one machine each);
* **communication** of a sync step ``T_x = k_link * bytes / rate + share * (c_row * rows + c_msg *
  messages + c_x)`` (a pull and a push to every peer per exchanged layer):
  the worker's halo rows of the ``layers - 1`` exchanged layers are pulled and their gradients
  pushed, ``width * bits / 8 + 8`` bytes a row (``width * 4`` at 32 bits), each way over its
  own link of ``rate`` (unshaped: ``share * k_veth * bytes``, the emulated link's own speed,
  fitted); the per-row and fixed costs are CPU work, shared like the compute;
* a **sync step** ``T_c + overlap * T_x + share * w_sync`` (part of the communication overlaps
  the owned rows' compute; ``w_sync``: barriers and the gradient all-reduce);
* a **stale step** ``stale_share * T_c + share * w_stale`` (summed halo rows: no halo row is
  projected or aggregated, ``stale_share`` at most 1; nothing moves but the all-reduce);
* an epoch at sync interval ``I``: ``(T_sync + (I - 1) * T_stale) / I``.

The constants are fitted by least squares (:func:`fit`) to the median sync and stale steps
of metrics files written here (``dgl-sni train --metrics``, ``benchmarks/bench_e2e.py``), and
:func:`check` reports the model's error on each measured configuration. :func:`project`
evaluates it for a cluster described by its size (``dgl-sni estimate --workers 16 --bandwidth
10gbit ...``), with its assumptions printed beside the figure.
"""
from __future__ import annotations

import json
import os
import statistics
from dataclasses import asdict, dataclass

import numpy as np

from .config import SNIConfig

from .report import SKIP  # start-up epochs left out of the medians
HALO_RATIO = 2.5  # halo rows per owned row where a cost file does not say what its runs measured


@dataclass
class Cluster:
    """What the model needs of a run: sizes per worker (means), widths, link and schedule."""

    workers: int
    rate_bits: float | None  # per link, bits/s; None: unshaped
    owned: float  # owned rows per worker
    halo: float  # halo rows per worker
    edges: float  # local edges per worker (self loops included)
    feat_dim: int
    hidden: int
    classes: int
    layers: int
    bits: int = 32  # of the exchanged rows and gradients
    interval: int = 1
    cores: int | None = None  # cores the workers share (None: one machine each, no sharing)
    compute_speed: float = 1.0  # a worker's compute against one core of the host the costs were fitted on

    @property
    def share(self) -> float:
        return 1.0 if not self.cores else max(1.0, self.workers / self.cores)

    def features(self) -> dict:
        outs = [self.hidden] * (self.layers - 1) + [self.classes]
        ins = [self.feat_dim] + outs[:-1]
        agg = self.edges * sum(outs)
        proj = (self.owned + self.halo) * self.feat_dim * outs[0] + self.owned * sum(i * o for i, o in zip(ins[1:], outs[1:]))
        rows = 2 * self.halo * (self.layers - 1)  # pulled and pushed
        per_row = self.hidden * 4 if self.bits >= 32 else self.hidden * self.bits / 8 + 8
        wire = self.halo * (self.layers - 1) * per_row  # each way
        msgs = 2 * (self.workers - 1) * (self.layers - 1)  # a pull and a push to every peer per exchanged layer
        return dict(agg=agg * self.share, proj=proj * self.share, const=self.share, rows=rows * self.share,
                    msgs=msgs * self.share,
                    link=0.0 if not self.rate_bits else wire * 8 / self.rate_bits,
                    unshaped=wire * self.share if not self.rate_bits else 0.0)


@dataclass
class Costs:
    """The fitted constants (seconds per unit of each term)."""

    c_agg: float
    c_proj: float
    c_0: float
    k_link: float
    k_veth: float
    c_row: float
    c_msg: float
    c_x: float
    overlap: float
    w_sync: float
    stale_share: float
    w_stale: float

    def steps(self, cl: Cluster) -> dict:
        f = cl.features()
        comp = (self.c_agg * f["agg"] + self.c_proj * f["proj"] + self.c_0 * f["const"]) / cl.compute_speed
        comm = (self.k_link * f["link"] + self.k_veth * f["unshaped"] + self.c_row * f["rows"] + self.c_msg * f["msgs"]
                + self.c_x * f["const"])
        sync = comp + self.overlap * comm + self.w_sync * f["const"]
        stale = self.stale_share * comp + self.w_stale * f["const"]
        return dict(compute_s=comp, comm_s=comm, sync_s=sync, stale_s=stale,
                    epoch_s=(sync + (cl.interval - 1) * stale) / cl.interval)


def _rate(bandwidth) -> float | None:
    if not bandwidth:
        return None
    from .cluster import rate_bits
    return float(rate_bits(str(bandwidth)))


def from_metrics(m: dict, cores: int | None) -> tuple[Cluster, dict]:
    """The :class:`Cluster` of a metrics file and its measured medians (sync and stale steps,
    mean epoch over the epochs after start-up and warm-up)."""
    cfg, part, ws = m["config"], m.get("partition", {}), m["summary"]["workers"]
    interval = cfg.get("sync_interval", SNIConfig().sync_interval)
    staled = interval > 1
    bits = cfg.get("quantize") or 32 if staled or cfg.get("quantize") else 32
    cl = Cluster(workers=cfg["workers"], rate_bits=_rate(cfg.get("bandwidth")),
                 owned=statistics.mean(w["owned_nodes"] for w in ws), halo=statistics.mean(w["halo_nodes"] for w in ws),
                 edges=statistics.mean(w["local_edges"] for w in ws), feat_dim=part.get("feat_dim") or cfg.get("feat_dim"),
                 hidden=cfg["hidden"], classes=part.get("num_classes") or cfg.get("classes"), layers=cfg["layers"],
                 bits=bits, interval=interval, cores=cores)
    warmup = cfg.get("warmup", SNIConfig().warmup) if staled else 0  # a file without it ran the default
    epochs = m["epochs"][max(SKIP, warmup):] or m["epochs"]
    measured = dict(epoch_s=statistics.mean(e["time_s"] for e in epochs),
                    graph=f"{part.get('num_nodes', '?')} nodes, {part.get('num_edges', '?')} edges")
    for mode in ("sync", "stale"):
        sel = [e for e in epochs if e["mode"] == mode]
        if sel:
            measured[mode] = {k: statistics.median(e.get(k, 0.0) for e in sel)
                              for k in ("time_s", "comp_s", "comm_s", "sync_s")}
    return cl, measured


MODELLED = ("sync_interval", "quantize")  # the settings the model takes; the others must be a preset's


def modelled(cfg: dict) -> bool:
    """The run is one the model covers: a GCN in memory, its stale settings those of its preset
    but for the sync interval and the bits."""
    from .config import TrainConfig
    if cfg.get("model") != "gcn" or cfg.get("model_file") or cfg.get("storage_tier") or "preset" not in cfg:
        return False
    preset = TrainConfig.from_dict(dict(preset=cfg["preset"])).as_dict()
    from .config.sni import SNIConfig
    names = [k for k in SNIConfig.__dataclass_fields__ if k in preset and k not in MODELLED
             and not k.startswith(("agent", "doca"))]
    return all(cfg.get(k, preset[k]) == preset[k] for k in names)  # a setting newer than the run: its default


def load(paths: list, cores: int | None = None) -> list:
    """``[(name, Cluster, measured)]`` of the metrics files under ``paths`` (files or folders,
    searched recursively) that the model covers (:func:`modelled`)."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                files += [os.path.join(root, n) for n in sorted(names) if n.startswith("run") and n.endswith(".json")]
        elif os.path.exists(path):
            files.append(path)
        else:
            raise ValueError(f"no such metrics file or folder: {path}")
    metrics = []
    for file in files:
        with open(file) as fh:
            metrics.append(json.load(fh))
    return from_runs(metrics, cores)


def from_runs(metrics: list, cores: int | None = None) -> list:
    """``[(name, Cluster, measured)]`` of the metrics the model covers (:func:`modelled`). The
    host's cores: ``cores`` if given, else the run's own ``host_cores`` (a compact copy's, see
    ``benchmarks/record.py``), else this machine's."""
    runs = []
    for m in metrics:
        cfg = m.get("config", {})
        if not isinstance(m.get("epochs"), list) or not modelled(cfg):
            continue
        cl, measured = from_metrics(m, cores or m.get("host_cores") or os.cpu_count())
        link = cfg.get("bandwidth") or "unshaped"
        name = (f"{graph_label(cfg, m.get('partition', {}))}, {cl.workers} workers: {cfg['preset']} interval "
                f"{cl.interval}, {cl.bits}-bit, {link}")
        runs.append((name, cl, measured))
    return runs


def graph_label(cfg: dict, partition: dict) -> str:
    """A short name of a run's graph: a dataset file's name, or ``syn<nodes>k d<degree>[ s<seed>]``
    for a generated one. Runs of the same graph and settings are one configuration wherever
    their files were saved (a sweep's comparison and its scaling runs, say)."""
    dataset = str(cfg.get("dataset", "?"))
    if dataset != "synthetic":
        return os.path.splitext(os.path.basename(dataset))[0]
    nodes = partition.get("num_nodes") or cfg.get("nodes") or 0
    seed = cfg.get("data_seed") or 0
    return f"syn{nodes / 1000:g}k d{cfg.get('avg_degree', 0):g}" + (f" s{seed}" if seed else "")


def fit(runs: list) -> Costs:
    """Least-squares constants over the runs' median steps (a ``ValueError`` if too few)."""
    sync = [(cl, me["sync"]) for _, cl, me in runs if "sync" in me]
    if len(sync) < 4:
        raise ValueError(f"fitting the cost model needs at least 4 runs with sync steps, got {len(sync)}")
    feats = [cl.features() for cl, _ in sync]
    comp = np.array([[f["agg"], f["proj"], f["const"]] for f in feats])
    c_comp = _nonneg(comp, np.array([s["comp_s"] for _, s in sync]))
    comm = np.array([[f["link"], f["unshaped"], f["rows"], f["msgs"], f["const"]] for f in feats])
    c_comm = _nonneg(comm, np.array([s["comm_s"] for _, s in sync]))
    comp_pred, comm_pred = comp @ np.array(c_comp), comm @ np.array(c_comm)
    shares = np.array([f["const"] for f in feats])
    overlap, w_sync = _nonneg(np.stack([comm_pred, shares], 1), np.array([s["time_s"] for _, s in sync]) - comp_pred)
    stale = [(cl.features(), me["stale"]["time_s"]) for _, cl, me in runs if "stale" in me]
    if stale:
        x = np.array([[f["agg"], f["proj"], f["const"]] for f, _ in stale]) @ np.array(c_comp)
        stale_share, w_stale = _nonneg(np.stack([x, [f["const"] for f, _ in stale]], 1), np.array([t for _, t in stale]),
                                       upper=[1.0, np.inf])
    else:
        stale_share, w_stale = 1.0, w_sync
    return Costs(*map(float, c_comp), *map(float, c_comm), float(overlap), float(w_sync), float(stale_share),
                 float(w_stale))


def _nonneg(a: np.ndarray, b: np.ndarray, upper=None) -> list:
    """Least squares with every constant at least 0 (and at most ``upper``), columns scaled; a
    term no run exercises (a column of zeros: no unshaped run, say) gets 0."""
    from scipy.optimize import lsq_linear
    scale = np.abs(a).max(0)
    used = scale > 0
    hi = np.full(a.shape[1], np.inf) if upper is None else np.asarray(upper, dtype=float)
    x = np.zeros(a.shape[1])
    if used.any():
        fit = lsq_linear(a[:, used] / scale[used], b, bounds=(0.0, hi[used] * scale[used]))
        x[used] = fit.x / scale[used]
    return list(x)


def check(costs: Costs, runs: list) -> list:
    """Per configuration (the runs of one graph, cluster and settings: seeds, repeats, sweeps): the median measured mean
    epoch, the estimate and its relative error, and the largest error of a single run."""
    groups = {}
    for name, cl, me in runs:
        groups.setdefault(name, []).append((costs.steps(cl)["epoch_s"], me["epoch_s"]))
    out = []
    for name, pairs in groups.items():
        measured = statistics.median(m for _, m in pairs)
        estimated = statistics.median(e for e, _ in pairs)
        out.append(dict(configuration=name, runs=len(pairs), measured_s=measured, estimated_s=estimated,
                        error=(estimated - measured) / measured,
                        worst_run_error=max(abs(e - m) / m for e, m in pairs)))
    return out


def holdout(runs: list) -> list:
    """:func:`check` of each graph's configurations with the costs fitted on the other graphs
    only (how the model does on a graph it was not fitted on)."""
    out = []
    for graph in sorted({me["graph"] for _, _, me in runs}):
        rest = [r for r in runs if r[2]["graph"] != graph]
        try:
            costs = fit(rest)
        except ValueError:
            continue
        out += check(costs, [r for r in runs if r[2]["graph"] == graph])
    return out


def format_check(rows: list) -> str:
    lines = [f"{'configuration':<58} {'runs':>4} {'measured s':>10} {'estimate s':>10} {'error':>7} {'worst run':>9}"]
    for r in rows:
        lines.append(f"{r['configuration'][:58]:<58} {r['runs']:>4} {r['measured_s']:>10.3f} {r['estimated_s']:>10.3f} "
                     f"{r['error']:>+7.0%} {r['worst_run_error']:>9.0%}")
    return "\n".join(lines)


def project(costs: Costs, cl: Cluster) -> dict:
    """The model's figures for ``cl`` (epoch at its interval, and at interval 1 beside it)."""
    out = costs.steps(cl)
    exact = Cluster(**{**asdict(cl), "interval": 1, "bits": 32})
    out["exact_epoch_s"] = costs.steps(exact)["epoch_s"]
    out["speedup"] = out["exact_epoch_s"] / out["epoch_s"]
    return out


ASSUMPTIONS = (
    "a worker's compute (aggregation and projection) at the stated compute speed, 1 being one core of the host "
    "the costs were fitted on (a GPU worker is faster by a factor the user states: it is not measured here)",
    "a 3-layer GCN; halo rows per worker = halo ratio x owned rows (the partitioner's cut, not modelled)",
    "every worker's link independent (no switch contention); stale steps as this host measured them",
    "the per-row and fixed costs of the exchange (RPC, encoding) as on this host's CPU",
)


def advantage(costs: Costs, cl: Cluster, rates_bits: list, speeds: list) -> dict:
    """``{compute speed: [speed-up of cl's interval and bits over interval 1, per link rate]}``:
    how much a stale schedule gains as the link and the compute get faster."""
    return {speed: [project(costs, Cluster(**{**asdict(cl), "rate_bits": rate, "compute_speed": speed}))["speedup"]
                    for rate in rates_bits] for speed in speeds}


def plot_advantage(costs: Costs, cl: Cluster, path: str, measured=(), speeds=(1, 10, 100)) -> None:
    """:func:`advantage_figure`, written to ``path``."""
    import matplotlib.pyplot as plt
    fig = advantage_figure(costs, cl, measured, speeds)
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None} if path.endswith(".png") else None)
    plt.close(fig)


def advantage_figure(costs: Costs, cl: Cluster, measured=(), speeds=(1, 10, 100)):
    """:func:`advantage` over link rates of 0.1 to 100 Gbit/s, one line per compute speed, with
    ``measured`` points ``(rate bits/s, measured per-epoch speed-up, label)`` on them."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rates = list(np.geomspace(1e8, 1e11, 31))
    curves = advantage(costs, cl, rates, list(speeds))
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for speed, ups in curves.items():
        ax.plot([r / 1e9 for r in rates], ups, label=f"compute x{speed:g} (projected)", linewidth=1.2)
    for rate, value, label in measured:
        ax.scatter([rate / 1e9], [value], marker="o", color="black", zorder=3)
        ax.annotate(label, (rate / 1e9, value), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("link per machine (Gbit/s)")
    ax.set_ylabel(f"epoch speed-up, interval {cl.interval} {cl.bits}-bit / interval 1")
    ax.set_title(f"{cl.workers} machines, {cl.owned * cl.workers:,.0f} nodes, {cl.halo / cl.owned:.2f} halo rows per "
                 "owned row", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


DEFAULT_COSTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "costs.json")  # fitted to the record


def save(costs: Costs, path: str, meta: dict) -> None:
    with open(path, "w") as fh:
        json.dump(dict(costs=asdict(costs), **meta), fh, indent=1)


def read(path: str) -> Costs:
    return Costs(**read_file(path)["costs"])


def read_file(path: str) -> dict:
    """A cost file: ``costs`` and what it was fitted on (a ``ValueError`` names a bad file)."""
    try:
        with open(path) as fh:
            data = json.load(fh)
        Costs(**data["costs"])
        return data
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path} is not a cost file written by dgl-sni estimate --fit ({err})") from None

"""Run configuration: one dataclass, its command-line flags, and validation.

``dgl-sni train`` parses the flags into a :class:`TrainConfig`, validates it, and
hands the same flags to every trainer (``dgl_sni.worker``), which parses them again;
under DGL's own launch tool the worker is started with the flags directly.
"""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass, fields

from .cluster import validate_rate
from .data import FEATURE_NORMS
from .models import MODEL_NAMES
from .sni.config import AGENT_MODES, PREDICTORS, STALE_GRAD, SYNC_POLICIES, SNIConfig
from .partition import METHODS
from .trainer import ModelConfig


@dataclass
class TrainConfig:
    """Everything that defines a training run (written to the metrics JSON as ``config``)."""

    # data
    dataset: str = "synthetic"
    data_dir: str | None = None
    nodes: int = 20000
    avg_degree: float = 10.0
    classes: int = 8
    feat_dim: int = 64
    data_seed: int = 0
    feature_norm: str = "auto"
    # cluster
    workers: int = 2
    partition: str = "metis"
    bandwidth: str | None = None
    cluster: str = "auto"
    port: int = 30050
    master_port: int = 29500
    threads: int | None = None
    timeout: float | None = None
    run_dir: str | None = None
    # model and optimiser
    model: str = "gcn"
    layers: int = 2
    hidden: int = 16
    heads: int = 4
    epochs: int = 100
    lr: float = 0.01
    dropout: float = 0.5
    weight_decay: float = 5e-4
    seed: int = 0
    eval_every: int = 1
    # in-network prediction (issue 3): stale epochs served by the agent
    sync_interval: int = 1
    sampling_ratio: float = 0.1
    warmup: int = 20
    predictor: str = "gated"
    stale_grad: str = "exchange"
    sync_policy: str = "fixed"
    drift_bound: float = 0.05
    measure_staleness: bool = False
    transfer: bool = True
    agent: str = "process"
    doca_pci: str = ""
    doca_name: str = ""
    # storage tier (issue 4): activations paged through host memory and SSD
    storage_tier: str | None = None
    device_mem_budget: str = "1G"
    host_cache_budget: str = "2G"
    subparts: int = 0
    # output
    quiet: bool = False
    metrics: str | None = None
    checkpoint_dir: str | None = None
    checkpoint_every: int = 1
    epoch_gate: str | None = None  # benchmarks drive epochs one by one (worker.EpochGate)
    sweep: str | None = None

    def model_config(self) -> ModelConfig:
        return ModelConfig(model=self.model, layers=self.layers, hidden=self.hidden,
                           heads=self.heads, dropout=self.dropout, lr=self.lr,
                           weight_decay=self.weight_decay, seed=self.seed)

    def sni_config(self) -> SNIConfig:
        return SNIConfig(sync_interval=self.sync_interval, sampling_ratio=self.sampling_ratio,
                         warmup=self.warmup, predictor=self.predictor, stale_grad=self.stale_grad,
                         sync_policy=self.sync_policy, drift_bound=self.drift_bound,
                         measure_staleness=self.measure_staleness, transfer=self.transfer,
                         agent=self.agent,
                         doca_pci=self.doca_pci, doca_name=self.doca_name).validate()

    @property
    def sni_active(self) -> bool:
        """Stale epochs can happen (otherwise the plain exact exchange runs, no agent)."""
        return self.predictor != "none" and (self.sync_interval > 1 or self.sync_policy == "adaptive")

    def synthetic_args(self) -> dict:
        return dict(num_nodes=self.nodes, avg_degree=self.avg_degree, num_classes=self.classes,
                    feat_dim=self.feat_dim, seed=self.data_seed)

    def validate(self) -> "TrainConfig":
        """Raise ``ValueError`` naming the first bad setting."""
        checks = [
            (self.workers >= 1, f"--workers must be at least 1, got {self.workers}"),
            (self.layers >= 1, f"--layers must be at least 1, got {self.layers}"),
            (self.hidden >= 1, f"--hidden must be at least 1, got {self.hidden}"),
            (self.heads >= 1, f"--heads must be at least 1, got {self.heads}"),
            (self.epochs >= 1, f"--epochs must be at least 1, got {self.epochs}"),
            (self.lr > 0, f"--lr must be positive, got {self.lr}"),
            (0.0 <= self.dropout < 1.0, f"--dropout must lie in [0, 1), got {self.dropout}"),
            (self.weight_decay >= 0, f"--weight-decay must be >= 0, got {self.weight_decay}"),
            (self.checkpoint_every >= 1, f"--checkpoint-every must be at least 1, got {self.checkpoint_every}"),
            (self.eval_every >= 1, f"--eval-every must be at least 1, got {self.eval_every}"),
            (self.model in MODEL_NAMES, f"--model must be one of {', '.join(MODEL_NAMES)}"),
            (self.partition in METHODS, f"--partition must be one of {', '.join(METHODS)}"),
            (self.cluster in ("auto", "netns", "loopback"), "--cluster must be auto, netns or loopback"),
            (self.timeout is None or self.timeout > 0, "--timeout must be positive"),
            (self.threads is None or self.threads >= 1, "--threads must be at least 1"),
            (self.port != self.master_port,
             f"--port and --master-port are both {self.port}: the DGL server and the "
             "torch.distributed store would collide on machine 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        if self.bandwidth:
            self.bandwidth = validate_rate(self.bandwidth)
        self.sni_config()  # raises on bad SNI settings
        for flag in ("device_mem_budget", "host_cache_budget"):
            if parse_bytes(getattr(self, flag), "--" + flag.replace("_", "-")) <= 0:
                raise ValueError(f"--{flag.replace('_', '-')} must be positive")
        if self.subparts < 0:
            raise ValueError(f"--subparts must be >= 0 (0: derive from --device-mem-budget), got {self.subparts}")
        return self

    def to_argv(self) -> list:
        """Flags that make :func:`from_args` rebuild this config."""
        argv = []
        for f in fields(self):
            value = getattr(self, f.name)
            flag = "--" + f.name.replace("_", "-")
            if isinstance(value, bool):
                if value != f.default:  # on/off switches: --flag, or --no-flag for default-on ones
                    argv.append(flag if value else "--no-" + f.name.replace("_", "-"))
            elif value is not None:
                argv += [flag, str(value)]
        return argv

    def as_dict(self) -> dict:
        return asdict(self)


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``dgl-sni train`` (and of the trainer processes)."""
    d = TrainConfig()
    g = parser.add_argument_group("data")
    g.add_argument("--dataset", default=d.dataset,
                   help="synthetic, cora, citeseer, a .npz file or a DGL .bin graph file")
    g.add_argument("--data-dir", default=d.data_dir, help="folder holding cora.npz/citeseer.npz")
    g.add_argument("--nodes", type=int, default=d.nodes, help="synthetic: number of nodes")
    g.add_argument("--avg-degree", type=float, default=d.avg_degree,
                   help="synthetic: directed edges per node")
    g.add_argument("--classes", type=int, default=d.classes, help="synthetic: number of classes")
    g.add_argument("--feat-dim", type=int, default=d.feat_dim, help="synthetic: feature width")
    g.add_argument("--data-seed", type=int, default=d.data_seed, help="synthetic: graph seed")
    g.add_argument("--feature-norm", default=d.feature_norm, choices=FEATURE_NORMS,
                   help="row-normalise features; auto: when all are non-negative (bag of words)")
    g = parser.add_argument_group("cluster")
    g.add_argument("--workers", type=int, default=d.workers, help="emulated machines (1 trainer each)")
    g.add_argument("--partition", default=d.partition, choices=METHODS)
    g.add_argument("--bandwidth", default=d.bandwidth, help="shape each machine's link, e.g. 1gbit")
    g.add_argument("--cluster", default=d.cluster, choices=("auto", "netns", "loopback"),
                   help="netns: one network+mount namespace per machine (root); loopback: "
                        "1 machine on 127.0.0.1; auto: netns when root")
    g.add_argument("--port", type=int, default=d.port, help="DGL server port on every machine")
    g.add_argument("--master-port", type=int, default=d.master_port,
                   help="torch.distributed store port on machine 0")
    g.add_argument("--threads", type=int, default=d.threads, help="OMP threads per trainer")
    g.add_argument("--timeout", type=float, default=d.timeout, help="give up after this many seconds")
    g.add_argument("--run-dir", default=d.run_dir, help="keep partitions and logs here")
    g = parser.add_argument_group("model")
    g.add_argument("--model", default=d.model, choices=MODEL_NAMES)
    g.add_argument("--layers", type=int, default=d.layers)
    g.add_argument("--hidden", type=int, default=d.hidden)
    g.add_argument("--heads", type=int, default=d.heads, help="GAT heads in hidden layers")
    g.add_argument("--epochs", type=int, default=d.epochs)
    g.add_argument("--lr", type=float, default=d.lr)
    g.add_argument("--dropout", type=float, default=d.dropout)
    g.add_argument("--weight-decay", type=float, default=d.weight_decay)
    g.add_argument("--seed", type=int, default=d.seed, help="weights and dropout seed")
    g.add_argument("--eval-every", type=int, default=d.eval_every)
    g = parser.add_argument_group("in-network prediction (stale epochs)")
    g.add_argument("--sync-interval", type=int, default=d.sync_interval,
                   help="exchange halo embeddings every E-th epoch after warm-up (1: every epoch, exact)")
    g.add_argument("--sampling-ratio", type=float, default=d.sampling_ratio,
                   help="fraction of halo nodes (most edges into the partition first) that get predictions")
    g.add_argument("--warmup", type=int, default=d.warmup, help="epochs that always sync")
    g.add_argument("--predictor", default=d.predictor, choices=PREDICTORS,
                   help="none: sync every epoch; cache; linear-trend (the paper); gated; holt")
    g.add_argument("--stale-grad", default=d.stale_grad, choices=STALE_GRAD,
                   help="on stale epochs still push halo gradients (exchange) or not (skip)")
    g.add_argument("--sync-policy", default=d.sync_policy, choices=SYNC_POLICIES,
                   help="adaptive: on stale epochs also pull rows whose predicted drift is large")
    g.add_argument("--drift-bound", type=float, default=d.drift_bound,
                   help="adaptive: pull a row when its predicted drift exceeds this fraction of the mean row norm")
    g.add_argument("--measure-staleness", action="store_true",
                   help="also pull true halo rows on stale epochs, for measurement only")
    g.add_argument("--no-transfer", dest="transfer", action="store_false",
                   help="gated: do not offer rows moved by the drift of the worker's own rows")
    g.add_argument("--agent", default=d.agent, choices=AGENT_MODES,
                   help="process: agent beside the trainer (shared memory); inline: a thread; "
                        "doca: the agent on the BlueField (Comch + DMA); doca-local: a DOCA agent started here")
    g.add_argument("--doca-pci", default=d.doca_pci, help="agent doca: PCI address of the BlueField")
    g.add_argument("--doca-name", default=d.doca_name, help="agent doca: Comch service name of the agent")
    g = parser.add_argument_group("storage tier (partitions larger than memory)")
    g.add_argument("--storage-tier", default=d.storage_tier,
                   help="train through the storage tier, with its files under this folder")
    g.add_argument("--device-mem-budget", default=d.device_mem_budget,
                   help="compute memory for one sub-partition's working set (e.g. 512M, 2G); sets P")
    g.add_argument("--host-cache-budget", default=d.host_cache_budget,
                   help="host memory for cached activations and gradients (e.g. 4G)")
    g.add_argument("--subparts", type=int, default=d.subparts,
                   help="sub-partitions per worker (0: derive from --device-mem-budget)")
    g = parser.add_argument_group("output")
    g.add_argument("--quiet", action="store_true", help="no progress line")
    g.add_argument("--metrics", default=d.metrics, help="write the metrics JSON here")
    g.add_argument("--checkpoint-dir", default=d.checkpoint_dir,
                   help="rank 0 saves weights and optimizer state here (epoch_N.pt)")
    g.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every,
                   help="save a checkpoint every N epochs")
    g.add_argument("--epoch-gate", default=d.epoch_gate, help=argparse.SUPPRESS)
    g.add_argument("--sweep", default=d.sweep,
                   help="JSON list of runs (each a dict of model/optimiser/prediction settings) to "
                        "train one after another on the same cluster; --metrics is then a folder")


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40,
          "tib": 1 << 40}


def parse_bytes(text, flag: str = "size") -> int:
    """``"512M"``, ``"2G"``, ``"1.5GiB"`` or a plain number of bytes -> bytes (binary units)."""
    value = str(text).strip().lower()
    number = value.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = value[len(number):]
    try:
        if unit not in _UNITS:
            raise ValueError
        return int(float(number) * _UNITS[unit])
    except ValueError:
        raise ValueError(f"{flag} '{text}' is not a size: use e.g. 512M, 2G or a number of bytes") from None


# settings a sweep run may change; the rest (data, partitioning, cluster) is the session's
SWEEPABLE = ("model", "layers", "hidden", "heads", "epochs", "lr", "dropout", "weight_decay", "seed",
             "eval_every", "sync_interval", "sampling_ratio", "warmup", "predictor", "stale_grad",
             "sync_policy", "drift_bound", "measure_staleness", "transfer", "agent")


def load_sweep(path: str, base: TrainConfig) -> list:
    """The runs of a sweep file: ``base`` with each entry's overrides applied and validated.

    Run ``i`` writes its metrics to ``<base.metrics>/run<i>.json`` (when ``--metrics`` is set).
    """
    try:
        with open(path) as fh:
            entries = json.load(fh)
    except FileNotFoundError:
        raise ValueError(f"--sweep file not found: {path}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"--sweep file {path} is not valid JSON: {err}") from None
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"--sweep file {path} must hold a non-empty JSON list of objects")
    runs = []
    for index, entry in enumerate(entries):
        bad = sorted(set(entry) - set(SWEEPABLE))
        if bad:
            raise ValueError(f"--sweep run {index} sets {', '.join(bad)}, which a sweep cannot change "
                             f"(allowed: {', '.join(SWEEPABLE)})")
        values = base.as_dict()
        values.update(entry)
        values["sweep"] = None
        if base.metrics:
            values["metrics"] = os.path.join(base.metrics, f"run{index:03d}.json")
        if base.checkpoint_dir:
            values["checkpoint_dir"] = os.path.join(base.checkpoint_dir, f"run{index:03d}")
        try:
            runs.append(TrainConfig(**values).validate())
        except ValueError as err:
            raise ValueError(f"--sweep run {index}: {err}") from None
    return runs


def from_args(ns: argparse.Namespace) -> TrainConfig:
    names = {f.name for f in fields(TrainConfig)}
    return TrainConfig(**{k: v for k, v in vars(ns).items() if k in names}).validate()

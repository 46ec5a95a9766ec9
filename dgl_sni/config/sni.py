"""The prediction part: how stale epochs are served (CLI flags, ``DGL_SNI_CONFIG`` or ``dgl_sni.enable``)."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from typing import ClassVar

from dpu_agent.predictors import PREDICTOR_NAMES

from .options import option, read_json

PREDICTORS = ("none",) + PREDICTOR_NAMES  # none: no agent, every epoch syncs
STALE_GRAD = ("exchange", "skip")
SYNC_POLICIES = ("fixed", "adaptive")
AGENT_MODES = ("process", "inline", "doca", "doca-local")


@dataclass
class SNIConfig:
    """How stale epochs are served.

    ``predictor``: ``none`` syncs every epoch (plain DistDGL); ``cache`` serves the last
    synced rows; ``linear-trend`` the paper's self-feeding trend predictor; ``gated`` the
    trend predictor behind a per-node confidence gate (never worse than the cache by
    construction of the gate); ``holt`` double exponential smoothing. ``transfer``
    (``gated`` only): also offer each sampled row its cached value moved by the affine
    drift of the worker's own rows since the sync (:mod:`dgl_sni.sni.transfer`), behind
    the same kind of gate.
    """

    TITLE: ClassVar[str] = "in-network prediction (stale epochs)"

    sync_interval: int = option(5, "exchange halo embeddings every E-th epoch after warm-up (1: every epoch, exact)",
                                sweep=True)
    sampling_ratio: float = option(0.1, "fraction of halo nodes (most edges into the partition first) "
                                        "that get predictions", sweep=True)
    warmup: int = option(20, "epochs that always sync", sweep=True)
    predictor: str = option("gated", "none: sync every epoch; cache; linear-trend (the paper); gated; holt",
                            choices=PREDICTORS, sweep=True)
    stale_grad: str = option("exchange", "on stale epochs still push halo gradients (exchange) or not (skip)",
                             choices=STALE_GRAD, sweep=True)
    sync_policy: str = option("fixed", "adaptive: on stale epochs also pull rows whose predicted drift is large",
                              choices=SYNC_POLICIES, sweep=True)
    drift_bound: float = option(0.05, "adaptive: pull a row when its predicted drift exceeds this fraction "
                                      "of the mean row norm", sweep=True)
    measure_staleness: bool = option(False, "also pull true halo rows on stale epochs, for measurement only",
                                     sweep=True)
    transfer: bool = option(True, "gated: do not offer rows moved by the drift of the worker's own rows",
                            sweep=True)
    agent: str = option("process", "process: agent beside the trainer (shared memory); inline: a thread; "
                                   "doca: the agent on the BlueField (Comch + DMA); doca-local: a DOCA agent "
                                   "started here", choices=AGENT_MODES, sweep=True)
    doca_pci: str = option("", "agent doca: PCI address of the BlueField (as this host sees it)")
    doca_name: str = option("", "agent doca: Comch service name of the agent (default per trainer)")
    # predictor parameters (dpu_agent cores)
    window: int = option(4, "trend predictors: synced rows of history kept per halo row")
    beta: float = option(0.2, "linear-trend: damping of the trend step, dt*exp(-beta*dt)")
    lam: float = option(0.2, "trend predictors: decay exp(-lam*dt) of the trend's weight")
    # stock-script switch (kvstore.enable) only: which DistTensors SNI serves
    tensors: list = option(default_factory=list, cli=False,
                           help="names of the DistTensors served; empty: every tensor created after enable")
    static: list = option(default_factory=list, cli=False,
                          help="read-only tensors: cached exactly after their first pull")

    @property
    def enabled(self) -> bool:
        return self.predictor != "none"

    def validate(self) -> "SNIConfig":
        checks = [
            (self.sync_interval >= 1, f"--sync-interval must be at least 1, got {self.sync_interval}"),
            (0.0 <= self.sampling_ratio <= 1.0, f"--sampling-ratio must lie in [0, 1], got {self.sampling_ratio}"),
            (self.warmup >= 0, f"--warmup must be >= 0, got {self.warmup}"),
            (self.predictor in PREDICTORS, f"--predictor must be one of {', '.join(PREDICTORS)}, got '{self.predictor}'"),
            (self.stale_grad in STALE_GRAD, f"--stale-grad must be one of {', '.join(STALE_GRAD)}"),
            (self.sync_policy in SYNC_POLICIES, f"--sync-policy must be one of {', '.join(SYNC_POLICIES)}"),
            (self.agent in AGENT_MODES, f"agent must be one of {', '.join(AGENT_MODES)}"),
            (self.drift_bound > 0, f"--drift-bound must be positive, got {self.drift_bound}"),
            (self.window >= 1, f"window must be at least 1, got {self.window}"),
            (not self.agent.startswith("doca") or bool(self.doca_pci),
             "agent mode doca needs the device's PCI address (--doca-pci / doca_pci)"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        return self

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "SNIConfig":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown SNI setting(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        return cls(**values).validate()

    def start_agent(self):
        """A client for this configuration's agent (see :func:`dpu_agent.client.start_agent`)."""
        from dpu_agent.client import start_agent
        return start_agent(self.agent, self.doca_pci or None, self.doca_name or None)

    @classmethod
    def from_file(cls, path: str) -> "SNIConfig":
        values = read_json(path, "DGL_SNI_CONFIG")
        if not isinstance(values, dict):
            raise ValueError(f"{path} must hold a JSON object of SNI settings")
        return cls.from_dict(values)

    @classmethod
    def from_env(cls) -> "SNIConfig | None":
        """``DGL_SNI_CONFIG=path`` (JSON) or ``DGL_SNI=1`` (defaults); ``None`` when off."""
        path = os.environ.get("DGL_SNI_CONFIG")
        if path:
            return cls.from_file(path)
        flag = os.environ.get("DGL_SNI", "").strip().lower()
        if flag in ("", "0", "false", "no", "off"):
            return None
        return cls().validate()

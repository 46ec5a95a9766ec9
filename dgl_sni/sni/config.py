"""SNI settings, from CLI flags, a JSON file (``DGL_SNI_CONFIG``) or ``dgl_sni.enable(...)``."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields

PREDICTORS = ("none", "cache", "linear-trend", "gated", "holt")
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

    sync_interval: int = 5
    sampling_ratio: float = 0.1
    warmup: int = 20
    predictor: str = "gated"
    stale_grad: str = "exchange"
    sync_policy: str = "fixed"
    drift_bound: float = 0.05  # adaptive: pull rows whose predicted drift / mean row norm exceeds this
    measure_staleness: bool = False
    transfer: bool = True
    agent: str = "process"
    doca_pci: str = ""  # agent "doca": PCI address of the BlueField as this host sees it
    doca_name: str = ""  # agent "doca": Comch service name of the agent (default per trainer)
    # stock-script switch (kvstore.enable): which DistTensors SNI serves
    tensors: list = field(default_factory=list)  # names; empty = every tensor created after enable
    static: list = field(default_factory=list)  # read-only tensors: cached after the first pull
    # predictor parameters (dpu_agent cores)
    window: int = 4
    beta: float = 0.2
    lam: float = 0.2

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
        try:
            with open(path) as fh:
                values = json.load(fh)
        except FileNotFoundError:
            raise ValueError(f"DGL_SNI_CONFIG file not found: {path}") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not valid JSON: {err}") from None
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

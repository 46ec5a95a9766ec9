"""The prediction part: how stale epochs are served (CLI flags, ``DGL_SNI_CONFIG`` or ``dgl_sni.enable``)."""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field, fields
from typing import ClassVar

from dpu_agent.predictors import PREDICTOR_NAMES, TREND_PARAMS

from .options import misplaced, option, read_json
from .presets import PRESET_NAMES, PRESETS, Context, describe, expand

PREDICTORS = ("none",) + PREDICTOR_NAMES  # none: no agent, every epoch syncs
STALE_GRAD = ("exchange", "skip", "last")
AVERAGE_TREND = ("none", "rows", "grads", "both")
SYNC_POLICIES = ("fixed", "adaptive", "drift", "pipeline", "guarded")
AGENT_MODES = ("process", "inline", "doca", "doca-local")
STALE_HALO = ("summed", "rows")
SYNC_HALO = ("auto", "inputs", "summed", "rows")
QUANTIZE_BITS = (0, 4, 8)
BIT_CHOICES = ("fixed", "adaptive")
TREND_PREDICTORS = ("linear-trend", "gated", "window-trend")  # the predictors with a window of history and a decay
STALE_TRUTH = re.compile(r"none|(rows|grads|both)(@[1-9][0-9]*)?")


def _by_preset(name: str) -> str:
    return ", ".join(f"{p}: {preset.values[name]}" for p, preset in PRESETS.items() if name in preset.values)


def cache_budget(value, remote_bytes: int) -> int:
    """Bytes of a ``feature_cache_bytes`` setting for a tensor whose remote rows take ``remote_bytes``."""
    text = str(value).strip()
    if text.endswith("%"):
        share = float(text[:-1])
        if not 0 <= share <= 100:
            raise ValueError(f"feature_cache_bytes share must lie in 0%..100%, got {text}")
        return int(remote_bytes * share / 100)
    from storage_tier.sizes import parse_bytes
    return parse_bytes(text, "feature_cache_bytes")


def _cache_budget_ok(value) -> bool:
    try:
        return cache_budget(value, 0) >= 0
    except (ValueError, TypeError):
        return False


SWITCH_OFF = ("", "0", "false", "no", "off")  # values of DGL_SNI that leave the stock-script switch off


def switch_on() -> bool:
    """``DGL_SNI`` asks for the stock-script switch (any value but :data:`SWITCH_OFF`)."""
    return os.environ.get("DGL_SNI", "").strip().lower() not in SWITCH_OFF


@dataclass
class SNIConfig:
    """How stale epochs are served: one set of defaults, shared by ``dgl-sni train`` and the
    stock-script switch, and the preset that sets the rest (:mod:`.presets`). A config made
    with :meth:`expanded` (the flags, ``DGL_SNI_CONFIG``, a sweep entry) knows which settings
    were ``given``; settings that mean nothing in a run are refused where given another
    value than their default.

    ``predictor``: ``none`` syncs every epoch (plain DistDGL); ``cache`` serves the last
    synced rows; ``linear-trend`` the paper's self-feeding trend predictor; ``gated`` the
    trend predictor behind a per-node confidence gate (never worse than the cache by
    construction of the gate); ``holt`` double exponential smoothing. ``transfer``
    (``gated`` only): also offer each sampled row its cached value moved by the affine
    drift of the worker's own rows since the sync (:mod:`dgl_sni.sni.transfer`), behind
    the same kind of gate.
    """

    TITLE: ClassVar[str] = "in-network prediction (stale epochs)"

    preset: str = option("exact", f"{describe('exact')}; {describe('fast')}. Flags given explicitly override "
                                  "it (the stock-script switch's preset: fast)",
                         choices=PRESET_NAMES, sweep=True, common=True)
    sync_interval: int = option(1, "exchange halo embeddings every E-th epoch after warm-up (1: every epoch, exact)",
                                sweep=True, common=True)
    sampling_ratio: float = option(0.1, "fraction of halo nodes (most edges into the partition first) "
                                        "that get predictions", sweep=True)
    warmup: int = option(5, "epochs that always sync", sweep=True)
    predictor: str = option("cache", "none: sync every epoch; cache; linear-trend (the paper); gated; holt",
                            choices=PREDICTORS, sweep=True)
    stale_grad: str = option("last", "on stale epochs still push halo gradients (exchange), drop them (skip), "
                                     "or send none and give each owned row the gradient it received at the "
                                     "syncs, averaged over syncs with the rows' smoothing (last)",
                             choices=STALE_GRAD, sweep=True)
    sync_policy: str = option("fixed", "fixed: sync every E-th epoch; adaptive: on stale epochs also pull rows "
                                       "whose predicted drift is large; drift: sync when the weights moved more "
                                       "than --sync-drift since the last sync, at least every E-th epoch; pipeline: every epoch after "
                                       "warm-up uses the halo rows and gradients of the previous one, exchanged "
                                       "while it computes (PipeGCN; no agent, --sync-interval unused); "
                                       "guarded: every k-th epoch, k halved (down to 1) when a sync epoch's loss "
                                       "rose more than --sync-loss-gap above the stale epoch before it, grown by "
                                       "one (up to --sync-interval) after two syncs without",
                              choices=SYNC_POLICIES, sweep=True)
    sync_drift: float = option(0.05, "drift policy: relative change of an exchanged layer's weights since the "
                                     "last sync that makes the next epoch sync", sweep=True,
                               needs=("--sync-policy drift", lambda c: c.sync_policy == "drift"))
    sync_loss_gap: float = option(0.01, "guarded policy: relative rise of the exact loss at a sync epoch over "
                                        "the stale epoch before it that halves the interval", sweep=True,
                                  needs=("--sync-policy guarded", lambda c: c.sync_policy == "guarded"))
    drift_bound: float = option(0.05, "adaptive: pull a row when its predicted drift exceeds this fraction "
                                      "of the mean row norm", sweep=True,
                                needs=("--sync-policy adaptive", lambda c: c.sync_policy == "adaptive"))
    measure_staleness: bool = option(False, "also pull true halo rows on stale epochs, for measurement only",
                                     sweep=True)
    transfer: bool = option(True, "gated: do not offer rows moved by the drift of the worker's own rows",
                            sweep=True, needs=("--predictor gated", lambda c: c.predictor == "gated"))
    quantize: int = option(0, "bits per halo value and halo gradient on the wire: 8 or 4, stochastically "
                              "rounded with a per-row scale (0: float32, exact; evaluation always moves "
                              "float32 rows). Presets: " + _by_preset("quantize") + " (contexts that take another "
                              "value: --preset)",
                           choices=QUANTIZE_BITS, sweep=True)
    bit_choice: str = option("fixed", "fixed: every quantized halo row at --quantize bits; adaptive: each "
                                      "message's rows at 2, 4 or 8 bits, chosen per row to trade the "
                                      "rounding's variance against the message's bytes (AdaQP's bit choice, "
                                      "a peer method, for comparison)",
                             choices=BIT_CHOICES, sweep=True,
                             needs=("--quantize 8", lambda c: c.quantize == 8))
    smooth: float = option(0.75, "the agent keeps each halo row as an exponential average over sync "
                                 "epochs, new = S * old + (1 - S) * synced, and serves that (stale "
                                 "epochs then serve rows that do not carry the one dropout draw the "
                                 "sync's update fitted); 0: the synced rows. With --sync-policy pipeline, "
                                 "each step's one-step-old halo rows and received gradients are averaged "
                                 "so over steps (PipeGCN's smoothing)",
                           sweep=True)
    stale_halo: str = option("summed", "how a stale epoch's layers take the served halo rows: rows (as "
                                       "fresh ones, input dropout included) or summed (each layer adds "
                                       "the sum of its halo rows, kept until the served rows change, "
                                       "without dropout on them: the mean of the exact epoch's), where a layer "
                                       "declares it can (attention layers take rows)",
                             choices=STALE_HALO, sweep=True)
    sync_halo: str = option("auto", "how the sync epochs of a run whose stale epochs take summed halo rows "
                                    "take theirs: inputs (only the input features' halo rows are summed, "
                                    "as on stale epochs; the layers above take fresh rows with their "
                                    "dropout), auto (rows where the input layer's halo rows are few beside "
                                    "the owned rows they reach, else inputs), summed (every layer sums its "
                                    "fresh halo rows, without dropout on them) or rows (every halo row with "
                                    "its dropout, as interval 1; where stale epochs take rows, sync epochs "
                                    "do too). Whichever, the stale epochs after a sync reuse the undropped "
                                    "sums of the rows it pulled instead of summing the served rows anew",
                            choices=SYNC_HALO, sweep=True)
    stale_eval: bool = option(False, "evaluate stale epochs with the rows served to training (approximate) "
                                     "instead of pulling fresh ones (exact, the default)", sweep=True)
    halo_sample: float = option(0.0, "boundary node sampling as in BNS-GCN (a peer method, for comparison): "
                                     "each sync training step pulls a random share P of every hidden "
                                     "layer's halo rows, scaled by 1/P, and pushes only their gradients; the "
                                     "others are left out of the step (the input layer keeps its features). "
                                     "With stale epochs, they take what the last sync pulled, as it pulled "
                                     "it. 0: off", sweep=True)
    prefetch: bool = option(True, "ask the agent for a stale step's rows (a sync step's preview) at the "
                                  "step's start, so it computes them while the trainer computes the layers "
                                  "below (the paper's asynchronous pipeline); --no-prefetch asks when the "
                                  "rows are needed", sweep=True)
    row_average: float = option(0.0, "each owner keeps its rows averaged over its training steps, new = A * "
                                     "old + (1 - A) * rows, and syncs publish that average instead of the "
                                     "step's rows (the receivers' cache then lags by about A / (1 - A) steps "
                                     "instead of by syncs); 0: the step's rows",
                                sweep=True, needs=("stale epochs (--sync-interval above 1)", lambda c: c.sync_interval > 1))
    grad_average: float = option(0.0, "each trainer computes its halo rows' gradients at every training step, "
                                      "stale ones too, keeps them averaged likewise, and syncs push that average "
                                      "(the owners then smooth it no further); 0: the sync step's gradients",
                                 sweep=True, needs=("stale epochs (--sync-interval above 1)", lambda c: c.sync_interval > 1))
    average_trend: str = option("none", "the averages over steps of the rows (rows), the gradients (grads) or both "
                                        "publish 2 E - EMA(E), E the average (double exponential smoothing): what "
                                        "changes at a steady rate is published without the average's lag of "
                                        "A / (1 - A) steps, at some of its noise; none: E",
                                choices=AVERAGE_TREND, sweep=True,
                                needs=("averages over steps (--row-average or --grad-average)",
                                       lambda c: c.row_average > 0 or c.grad_average > 0))
    stale_trend: float = option(0.0, "stale steps that reuse the halo sums kept at the last sync (--stale-halo "
                                     "summed) take them continued along their change between the last two syncs "
                                     "after the warm-up: S + T * k * (S - S_prev) / d, k steps after the sync, d "
                                     "steps between the syncs (T = 1: the linear trend of every halo row, at the "
                                     "cost of one pass over the sums); 0: the kept sums",
                                sweep=True, needs=("stale epochs that sum their halo rows (--sync-interval above 1, "
                                                   "--stale-halo summed)",
                                                   lambda c: c.sync_interval > 1 and c.stale_halo == "summed"))
    stale_truth: str = option("none", "measurement: stale epochs take the owners' true halo rows (rows), push and "
                                      "receive the true halo gradients (grads) or both, instead of the served "
                                      "ones (rows@L, grads@L, both@L: layer L only); pulled and pushed as on a "
                                      "sync, nothing observed or kept. What staleness costs, cause by cause",
                              sweep=True, needs=("stale epochs (--sync-interval above 1)", lambda c: c.sync_interval > 1))
    agent: str = option("process", "process: agent beside the trainer (shared memory); inline: a thread; "
                                   "doca: the agent on the BlueField (Comch + DMA); doca-local: a DOCA agent "
                                   "started here", choices=AGENT_MODES, sweep=True)
    agent_timeout: float = option(5.0, "seconds an agent reply may take; a slower or dead agent is dropped (the "
                                       "trainer serves its last synced rows and syncs until an agent is back)")
    agent_dir: str = option("", "agent process: connect to the standalone agents `dgl-sni agent start` runs "
                                "in this directory (one per trainer rank) instead of starting one")
    doca_pci: str = option("", "agent doca: PCI address of the BlueField (as this host sees it)")
    doca_name: str = option("", "agent doca: Comch service name of the agent (default per trainer)",
                            needs=("--agent doca or doca-local", lambda c: c.agent.startswith("doca")))
    # predictor parameters (dpu_agent cores)
    window: int = option(TREND_PARAMS["window"], "trend predictors: synced rows of history kept per halo row",
                         needs=("--predictor linear-trend, gated or window-trend", lambda c: c.predictor in TREND_PREDICTORS))
    beta: float = option(TREND_PARAMS["beta"], "linear-trend: damping of the trend step, dt*exp(-beta*dt)",
                         needs=("--predictor linear-trend", lambda c: c.predictor == "linear-trend"))
    lam: float = option(TREND_PARAMS["lam"], "trend predictors: decay exp(-lam*dt) of the trend's weight",
                        needs=("--predictor linear-trend, gated or window-trend", lambda c: c.predictor in TREND_PREDICTORS))
    # stock-script switch (kvstore.enable) only: which DistTensors SNI serves
    tensors: list = option(default_factory=list, cli=False,
                           help="names of the DistTensors served; empty: every tensor created after enable")
    static: list = option(default_factory=list, cli=False,
                          help="read-only tensors: cached exactly after their first pull")
    feature_cache_bytes: str = option("256M", cli=False,
                                      help="per trainer: memory for the exact cache of remote rows of static node "
                                           "data (input features), e.g. 512M, or a share of the tensor's remote "
                                           "rows such as 20%; 0 turns the cache off (dgl-sni launch "
                                           "--cache-budget)")

    given: frozenset = field(default=frozenset(), compare=False, repr=False,
                             metadata={"option": None})  # the settings given explicitly (not a setting)

    @property
    def enabled(self) -> bool:
        return self.predictor != "none"

    def truth(self, layer: int) -> tuple:
        """``(rows, grads)``: whether stale steps take layer ``layer``'s true halo rows and
        gradients (``stale_truth``, a measurement)."""
        what, _, only = self.stale_truth.partition("@")
        if what == "none" or (only and int(only) != layer):
            return False, False
        return what in ("rows", "both"), what in ("grads", "both")

    @classmethod
    def expanded(cls, given: dict, context: Context = Context()) -> "SNIConfig":
        """The config of the settings ``given`` explicitly, their preset's values and the one
        set of defaults (:func:`.presets.expand`), validated."""
        names = {f.name for f in fields(cls)} - {"given"}
        unknown = sorted(set(given) - names)
        if unknown:
            raise ValueError(f"unknown SNI setting(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        defaults = {f.name: getattr(cls(), f.name) for f in fields(cls) if f.name != "given"}
        return cls(**expand(given, context, defaults), given=frozenset(given)).validate()

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
            (self.sync_drift > 0, f"--sync-drift must be positive, got {self.sync_drift}"),
            (self.sync_loss_gap >= 0, f"--sync-loss-gap must be >= 0, got {self.sync_loss_gap}"),
            (self.preset in PRESET_NAMES, f"--preset must be one of {', '.join(PRESET_NAMES)}, got {self.preset!r}"),
            (0 <= self.smooth < 1, f"--smooth must lie in [0, 1), got {self.smooth}"),
            (0 <= self.halo_sample <= 1, f"--halo-sample must lie in [0, 1], got {self.halo_sample}"),
            (0 <= self.row_average < 1, f"--row-average must lie in [0, 1), got {self.row_average}"),
            (0 <= self.grad_average < 1, f"--grad-average must lie in [0, 1), got {self.grad_average}"),
            (0 <= self.stale_trend <= 1, f"--stale-trend must lie in [0, 1], got {self.stale_trend}"),
            (self.average_trend in AVERAGE_TREND,
             f"--average-trend must be one of {', '.join(AVERAGE_TREND)}, got {self.average_trend!r}"),
            (self.stale_halo in STALE_HALO,
             f"--stale-halo must be one of {', '.join(STALE_HALO)}, got {self.stale_halo!r}"),
            (self.sync_halo in SYNC_HALO,
             f"--sync-halo must be one of {', '.join(SYNC_HALO)}, got {self.sync_halo!r}"),
            (STALE_TRUTH.fullmatch(self.stale_truth) is not None,
             f"--stale-truth must be none, rows, grads or both, optionally @LAYER (e.g. rows@1), got "
             f"{self.stale_truth!r}"),
            (self.quantize in QUANTIZE_BITS,
             f"--quantize must be one of {', '.join(map(str, QUANTIZE_BITS))} bits, got {self.quantize}"),
            (self.window >= 1, f"window must be at least 1, got {self.window}"),
            (_cache_budget_ok(self.feature_cache_bytes),
             f"feature_cache_bytes must be a size such as 512M or a share such as 20%, got "
             f"{self.feature_cache_bytes!r}"),
            (self.agent_timeout > 0, f"--agent-timeout must be positive, got {self.agent_timeout}"),
            (not self.agent_dir or self.agent == "process",
             f"--agent-dir needs agent mode process (a standalone socket agent), got '{self.agent}'"),
            (not self.agent.startswith("doca") or bool(self.doca_pci),
             "agent mode doca needs the device's PCI address (--doca-pci / doca_pci)"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        misplaced(self, self.given)
        return self

    def as_dict(self) -> dict:
        out = asdict(self)
        out.pop("given")
        return out

    @classmethod
    def from_dict(cls, values: dict) -> "SNIConfig":
        """The stock-script switch's config of the settings ``values`` (``DGL_SNI_CONFIG``'s)."""
        return cls.expanded(values, Context(switch=True))

    def start_agent(self):
        """A client for this configuration's agent (see :func:`dpu_agent.client.start_agent`),
        supervised: a lost agent is survived and replaced (:mod:`dpu_agent.supervisor`)."""
        from dpu_agent.client import start_agent
        from dpu_agent.supervisor import SupervisedAgent
        return SupervisedAgent(lambda: start_agent(self.agent, self.doca_pci or None, self.doca_name or None,
                                                   self.agent_timeout, self.agent_dir or None))

    @classmethod
    def from_file(cls, path: str) -> "SNIConfig":
        values = read_json(path, "DGL_SNI_CONFIG")
        if not isinstance(values, dict):
            raise ValueError(f"{path} must hold a JSON object of SNI settings")
        return cls.from_dict(values)

    @classmethod
    def from_env(cls) -> "SNIConfig | None":
        """The stock-script switch's config: ``DGL_SNI_CONFIG=path`` (JSON) or ``DGL_SNI=1``
        (the switch's preset, ``fast``); ``None`` when off."""
        path = os.environ.get("DGL_SNI_CONFIG")
        if path:
            return cls.from_file(path)
        if not switch_on():
            return None
        return cls.from_dict({})

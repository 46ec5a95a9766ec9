"""The configuration of a ``dgl-sni train`` run: its parts, their flags, and the flat view.

``dgl-sni train`` parses the flags into a :class:`TrainConfig`, validates it, and hands
the same flags (:meth:`TrainConfig.to_argv`) to every trainer (``dgl_sni.worker``),
which parses them again; under DGL's own launch tool the worker is started with the
flags directly. The metrics JSON's ``config`` is the flat view (:meth:`TrainConfig.as_dict`).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields, replace

from .cluster import ClusterConfig
from .data import DataConfig
from .flags import add_part_arguments, part_argv, part_values
from .model import SUMMABLE_MODELS, ModelConfig
from .output import OutputConfig, resume_point
from .sni import SYNC_HALO_DEFAULT, TRAIN_QUANTIZE, SNIConfig
from .tier import TierConfig


def _train_sni() -> SNIConfig:
    # dgl-sni train is exact (syncs every epoch) unless told otherwise. Its stale epochs serve
    # the agent's cache of smoothed rows (smooth None: SNIConfig.smoothing), chosen over the
    # gated predictor by the paired-seed runs in benchmarks/MEASUREMENTS.md ("Stale defaults,
    # chosen over seeds"); sum them where the model allows it (stale_halo None: TrainConfig.stale_sums);
    # push no halo gradient, owned rows getting the smoothed gradients of the syncs (stale_grad
    # "last"; chosen over seeds: "Summed halo rows and smoothed sync gradients"), after a
    # warm-up of 5 (chosen over seeds: "Overlap, and a warm-up of 5"); a stale run's rows and
    # gradients travel in 8 bits (quantize None: TrainConfig.quantize_bits). The stock-script
    # switch (DGL_SNI=1) keeps SNIConfig's defaults.
    return SNIConfig(sync_interval=1, smooth=None, predictor="cache", quantize=None, stale_halo=None,
                     stale_grad="last", warmup=5)


@dataclass
class TrainConfig:
    """Everything that defines a training run, as one part per concern.

    Settings are read through their part (``cfg.cluster.workers``, ``cfg.sni.sync_interval``,
    ``cfg.model.model``); :meth:`as_dict`/:meth:`from_dict` give the flat view by setting name.
    """

    data: DataConfig = field(default_factory=DataConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    sni: SNIConfig = field(default_factory=_train_sni)
    tier: TierConfig = field(default_factory=TierConfig)
    output: OutputConfig = field(default_factory=OutputConfig)

    def parts(self) -> dict:
        """The parts by attribute name, in flag order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def sni_active(self) -> bool:
        """Stale epochs can happen (otherwise the plain exact exchange runs, no agent)."""
        sni = self.sni
        if sni.sync_policy == "pipeline":
            return False  # every step exchanges (one step late): nothing for an agent to serve
        return sni.predictor != "none" and (sni.sync_interval > 1 or sni.sync_policy == "adaptive")

    @property
    def quantize_bits(self) -> int:
        """Bits per halo value on the wire: ``quantize``, or where it is unset (``None``, the
        default) 8 when epochs can be stale (the run is approximate already; 8 bits cost no
        accuracy in the paired-seed runs) and the halo rows are in memory, else 0 (float32:
        an exact run stays exact)."""
        if self.sni.quantize is not None:
            return self.sni.quantize
        return TRAIN_QUANTIZE if self.sni_active and not self.tier.storage_tier else 0

    @property
    def stale_sums(self) -> bool:
        """Stale epochs take summed halo rows (:mod:`dgl_sni.halo.sums`): ``stale_halo``, or
        where it is unset (``None``, the default) wherever it applies: a model linear in its
        halo rows (GCN, SAGE) trained in memory, in a run whose epochs can be stale."""
        if self.sni.stale_halo is not None:
            return self.sni.stale_halo == "summed" and self.sni_active
        return self.sni_active and self.model.model in SUMMABLE_MODELS and not self.tier.storage_tier

    @property
    def sync_sums(self) -> str:
        """How the sync training steps take their halo rows: ``rows`` (as interval 1) unless
        the stale steps take summed halo rows (:attr:`stale_sums`); there ``sync_halo``, or
        where it is unset (``None``, the default) ``auto``, which the worker resolves from
        the partitions (:func:`dgl_sni.halo.sums.choose_sync_halo`): ``inputs`` (the input
        layer sums its halo rows as the stale steps do, the layers above take their fresh
        rows with dropout) where the input layer's halo rows outnumber the owned rows they
        reach, ``rows`` where they are few. Either way the stale steps after a sync reuse the
        undropped sums of the rows it pulled (chosen over seeds, see
        benchmarks/MEASUREMENTS.md, "Syncs take the hidden layers' halo rows with their
        dropout" and "Sync epochs that take every halo row, on Cora and CiteSeer")."""
        if not self.stale_sums:
            return "rows"
        return self.sni.sync_halo or SYNC_HALO_DEFAULT

    @property
    def pipelined(self) -> bool:
        """Training steps after warm-up are pipelined (halo rows and gradients one step old)."""
        return self.sni.sync_policy == "pipeline"

    def validate(self) -> "TrainConfig":
        """Raise ``ValueError`` naming the first bad setting."""
        for part in self.parts().values():
            part.validate()
        if self.sni.quantize and self.tier.storage_tier:
            raise ValueError("--quantize is not supported with --storage-tier (tier-backed rows are "
                             "served from the owners' files as float32)")
        if self.sni.stale_halo == "summed" and self.model.model not in SUMMABLE_MODELS:
            raise ValueError(f"--stale-halo summed needs a model linear in its halo rows "
                             f"({', '.join(SUMMABLE_MODELS)}); {self.model.model} is not (use --stale-halo rows)")
        if self.sni.sync_halo in ("inputs", "summed") and self.sni_active and not self.stale_sums:
            raise ValueError(f"--sync-halo {self.sni.sync_halo} needs stale epochs that take summed halo rows "
                             "(--stale-halo summed: GCN or SAGE, in memory)")
        if self.sni.stale_halo == "summed" and self.tier.storage_tier:
            raise ValueError("--stale-halo summed is not supported with --storage-tier (its layers read the "
                             "halo rows unit by unit; use --stale-halo rows)")
        if self.output.resume is not None:
            resume_point(self.output.resume, self.model.epochs)  # before the cluster starts
        if self.pipelined and self.tier.storage_tier:
            raise ValueError("--sync-policy pipeline is not supported with --storage-tier (the tier's "
                             "layers publish rows unit by unit, and a pipelined step would need two copies)")
        return self

    def to_argv(self) -> list:
        """Flags that make :func:`from_args` rebuild this config."""
        defaults = TrainConfig().parts()
        argv = []
        for name, part in self.parts().items():
            argv += part_argv(part, defaults[name])
        return argv

    def as_dict(self) -> dict:
        """Every setting that has a flag, by name (flat: names are unique over the parts)."""
        out = {}
        for part in self.parts().values():
            out.update(part_values(part))
        return out

    @classmethod
    def from_dict(cls, values: dict) -> "TrainConfig":
        """The config with these settings (by flat name) and the defaults elsewhere (not validated)."""
        unknown = sorted(set(values) - set(_OWNER))
        if unknown:
            raise ValueError(f"unknown setting(s) {', '.join(unknown)}")
        grouped = {}
        for key, value in values.items():
            grouped.setdefault(_OWNER[key], {})[key] = value
        return cls(**{name: replace(part, **grouped.get(name, {}))
                      for name, part in cls().parts().items()})


def _owners() -> dict:
    owner = {}
    for name, part in TrainConfig().parts().items():
        for key in part_values(part):
            if key in owner:
                raise TypeError(f"setting '{key}' is declared by both {owner[key]} and {name}")
            owner[key] = name
    return owner


_OWNER = _owners()  # flat setting name -> part attribute


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``dgl-sni train`` (and of the trainer processes): one group per part."""
    for part in TrainConfig().parts().values():
        add_part_arguments(parser.add_argument_group(part.TITLE), part)


def from_args(ns: argparse.Namespace) -> TrainConfig:
    """The validated config from flags parsed with :func:`add_train_arguments` (other flags ignored)."""
    return TrainConfig.from_dict({k: v for k, v in vars(ns).items() if k in _OWNER}).validate()

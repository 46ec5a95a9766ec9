"""The configuration of a ``dgl-sni train`` run: its parts, their flags, and the flat view.

``dgl-sni train`` parses the flags into a :class:`TrainConfig` (the settings given, their
preset's values, the one set of defaults: :mod:`.presets`), validates it, and hands the
flags given (:meth:`TrainConfig.to_argv`) to every trainer (``dgl_sni.worker``), which
parses them again and expands them the same; under DGL's own launch tool the worker is
started with the flags directly. The metrics JSON's ``config`` is the flat view
(:meth:`TrainConfig.as_dict`): every setting as it ran.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields, replace

from .cluster import ClusterConfig
from .data import DataConfig
from .flags import add_help_all, add_part_arguments, flag_name, part_values, switch_name
from .model import ModelConfig
from .options import misplaced
from .output import OutputConfig, resume_point
from .presets import PRESETS, Context
from .sni import SNIConfig
from .tier import TierConfig


@dataclass
class TrainConfig:
    """Everything that defines a training run, as one part per concern.

    Settings are read through their part (``cfg.cluster.workers``, ``cfg.sni.sync_interval``,
    ``cfg.model.model``); :meth:`as_dict`/:meth:`from_dict` give the flat view by setting name.
    """

    data: DataConfig = field(default_factory=DataConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    sni: SNIConfig = field(default_factory=SNIConfig)
    tier: TierConfig = field(default_factory=TierConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    given: frozenset = field(default=frozenset(), compare=False, repr=False)  # settings given explicitly

    def parts(self) -> dict:
        """The parts by attribute name, in flag order."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "given"}

    @property
    def sni_active(self) -> bool:
        """Stale epochs can happen (otherwise the plain exact exchange runs, no agent)."""
        sni = self.sni
        if sni.sync_policy == "pipeline":
            return False  # every step exchanges (one step late): nothing for an agent to serve
        return sni.predictor != "none" and (sni.sync_interval > 1 or sni.sync_policy == "adaptive")

    @property
    def stale_sums(self) -> bool:
        """Stale epochs take summed halo rows (:mod:`dgl_sni.halo.sums`): ``stale_halo summed``
        in a run whose epochs can be stale."""
        return self.sni.stale_halo == "summed" and self.sni_active

    @property
    def sync_sums(self) -> str:
        """How the sync training steps take their halo rows: ``rows`` (as interval 1) unless
        the stale steps take summed halo rows (:attr:`stale_sums`); there ``sync_halo``
        (``auto`` is resolved by the worker from the partitions:
        :func:`dgl_sni.halo.plan.choose_sync_halo`)."""
        return self.sni.sync_halo if self.stale_sums else "rows"

    @property
    def pipelined(self) -> bool:
        """Training steps after warm-up are pipelined (halo rows and gradients one step old)."""
        return self.sni.sync_policy == "pipeline"

    def validate(self) -> "TrainConfig":
        """Raise ``ValueError`` naming the first bad setting, or a setting given where it means
        nothing (:func:`.options.misplaced`)."""
        for part in self.parts().values():
            part.validate()
            if part is not self.sni:  # the SNI part checks its own (it knows what was given)
                misplaced(part, self.given)
        if self.model.model_file and "model" in self.given:
            raise ValueError("--model and --model-file both name the model: give one")
        if self.model.model_file and self.tier.storage_tier:
            raise ValueError("--model-file is not supported with --storage-tier: the tier runs each layer unit by "
                             "unit through its layer_forward interface, which only the built-in models implement")
        if self.sni.sync_halo in ("inputs", "summed") and self.sni_active and not self.stale_sums:
            raise ValueError(f"--sync-halo {self.sni.sync_halo} needs stale epochs that take summed halo rows "
                             "(--stale-halo summed, in memory)")
        if self.output.resume is not None:
            resume_point(self.output.resume, self.model.epochs)  # before the cluster starts
        if self.sni.halo_sample and (self.pipelined or self.tier.storage_tier or self.sni.bit_choice == "adaptive"):
            raise ValueError("--halo-sample (boundary node sampling) samples the rows sync steps pull from their "
                             "owners' memory at one width: it cannot run with --sync-policy pipeline, "
                             "--storage-tier or --bit-choice adaptive")
        if self.sni.halo_sample and self.sni_active and (self.sni.predictor != "cache"
                                                         or self.sni.sync_policy == "adaptive"):
            raise ValueError("--halo-sample with stale epochs needs --predictor cache and a sync policy other than "
                             "adaptive: a sampled sync leaves every row it did not draw at zero in the rows the "
                             "cache keeps, which a predictor would extrapolate and the adaptive policy compare")
        if self.pipelined and self.tier.storage_tier:
            raise ValueError("--sync-policy pipeline is not supported with --storage-tier (the tier's "
                             "layers publish rows unit by unit, and a pipelined step would need two copies)")
        return self

    def to_argv(self) -> list:
        """The flags given (:attr:`given`): :func:`from_args` expands them to this config."""
        defaults = TrainConfig().as_dict()
        argv = []
        for name, value in self.as_dict().items():
            if name not in self.given:
                continue
            if isinstance(defaults[name], bool):
                if value != defaults[name]:
                    argv.append(switch_name(name, defaults[name]))
            elif value is not None:
                argv += [flag_name(name), str(value)]
        return argv

    def as_dict(self) -> dict:
        """Every setting that has a flag, by name (flat: names are unique over the parts)."""
        out = {}
        for part in self.parts().values():
            out.update(part_values(part))
        return out

    @classmethod
    def from_dict(cls, values: dict) -> "TrainConfig":
        """The config of these settings given explicitly (by flat name), their preset's values
        and the defaults elsewhere (validated only as far as the presets need: call
        :meth:`validate`)."""
        unknown = sorted(set(values) - set(_OWNER))
        if unknown:
            raise ValueError(f"unknown setting(s) {', '.join(unknown)}")
        grouped = {}
        for key, value in values.items():
            grouped.setdefault(_OWNER[key], {})[key] = value
        parts = {name: replace(part, **grouped.get(name, {})) for name, part in cls().parts().items()
                 if name != "sni"}
        context = Context(model=parts["model"].arch, storage_tier=bool(parts["tier"].storage_tier),
                          dropout=parts["model"].dropout)
        parts["sni"] = SNIConfig.expanded(grouped.get("sni", {}), context)
        return cls(**parts, given=frozenset(values))

    def with_settings(self, values: dict) -> "TrainConfig":
        """This config's settings given, and ``values`` over them (a sweep entry): expanded
        anew, so an entry's preset sets what the entry and the base did not give."""
        mine = self.as_dict()
        return TrainConfig.from_dict({**{k: mine[k] for k in self.given}, **values})


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
    """The flags of ``dgl-sni train`` (and of the trainer processes): one group per part, a
    flag not given setting nothing (the preset decides), ``--help`` listing the common
    flags and ``--help-all`` every one."""
    defaults = SNIConfig()
    by_preset = {name: " / ".join(f"{p}: {preset.values.get(name, getattr(defaults, name))}"
                                  for p, preset in PRESETS.items())
                 for name in set().union(*(p.values for p in PRESETS.values()))}
    for part in TrainConfig().parts().values():
        add_part_arguments(parser.add_argument_group(part.TITLE), part, given_only=True, shown_defaults=by_preset)
    add_help_all(parser)


def from_args(ns: argparse.Namespace) -> TrainConfig:
    """The validated config from flags parsed with :func:`add_train_arguments` (other flags
    ignored): the flags given, expanded by their preset."""
    return TrainConfig.from_dict({k: v for k, v in vars(ns).items() if k in _OWNER}).validate()

"""Named presets: the settings a user picks by one name instead of one by one.

A preset sets the few settings that differ between exact and stale training; every
other setting keeps its one default (:class:`~dgl_sni.config.SNIConfig`), and a setting
given explicitly (a flag, a key of ``DGL_SNI_CONFIG`` or of a sweep entry) wins over both.
Where a preset's value cannot apply to a run, the setting falls back, and the metrics'
``config`` shows the value that ran:

* summed halo rows (``stale_halo summed``) need layers linear in their halo rows, in memory:
  GAT and the storage tier take rows (and their sync epochs take rows too);
* 8- or 4-bit rows (``quantize``) need the rows in memory and a step that waits for them:
  the storage tier and the pipelined policy move float32 rows;
* the pipelined policy has no agent, whose rows are smoothed: ``smooth`` 0 there;
* rows and gradients averaged over steps (``row_average``, ``grad_average``) need the owned rows
  in memory at every step and the exchange's own gradients: the storage tier, the pipelined
  policy and the stock-script switch do without, and ``fast`` there syncs every 2nd epoch and
  smooths the synced rows over syncs (the stale configuration measured before averaging). So
  does SAGE (not in ``AVERAGED_MODELS``: with averaging its stale runs never reached its exact
  runs' accuracy);
* GAT (not in ``STALE_MODELS``) trains at ``fast`` as at ``exact``: its stale runs, averaged
  or not, did not reach its exact run's accuracy, and its stale epochs were only 1.2x faster;
* a model of the user's (``--model-file``, ``custom``) takes the unaveraged configuration with
  rows: its layers are DGL's, which take halo rows as rows (:mod:`dgl_sni.block_model`);
* the stock-script switch moves a script's rows through DGL as they are: no smoothing, no
  quantization, no summed rows (its halo gradients are the script's own business).

``dgl-sni train`` runs ``exact`` unless told otherwise; the stock-script switch runs
``fast`` (turning it on asks for stale rows: at ``exact`` it would serve none).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .model import CUSTOM_MODEL, SUMMABLE_MODELS


@dataclass(frozen=True)
class Preset:
    """The settings a preset sets, one line on why, and what it sets instead where rows and
    gradients cannot be averaged over steps (``unaveraged``)."""

    values: dict
    why: str
    unaveraged: dict = field(default_factory=dict)


PRESETS = {
    "exact": Preset(dict(sync_interval=1, quantize=0),
                    "every epoch exchanges float32 halo rows: distributed training equals single-process training"),
    "fast": Preset(dict(sync_interval=8, quantize=8, row_average=0.9, grad_average=0.9, smooth=0.0),
                   "halo rows and gradients exchanged every 8th epoch after a warm-up of 5, 8-bit on the wire, "
                   "each averaged over the steps before (rows by their owners, gradients by their senders); "
                   "stale epochs take the last ones (rows as their sum) and send nothing; SAGE syncs every 2nd "
                   "epoch without averaging, GAT trains as at exact",
                   unaveraged=dict(sync_interval=2, smooth=0.75, row_average=0.0, grad_average=0.0)),
}
PRESET_NAMES = tuple(PRESETS)
# the models whose stale epochs were measured to train like exact ones with rows and gradients
# averaged over steps (docs/design-choices.md); the others take the unaveraged configuration
AVERAGED_MODELS = ("gcn",)
# the models for which stale epochs were measured to pay at all: GAT's epoch is bound by its
# own compute, and its stale runs did not reach the exact run's accuracy, so `fast` trains it
# as `exact` does
STALE_MODELS = ("gcn", "sage", CUSTOM_MODEL)
TRAIN_PRESET = "exact"  # dgl-sni train's
SWITCH_PRESET = "fast"  # the stock-script switch's (DGL_SNI=1)


@dataclass(frozen=True)
class Context:
    """What a run is, as far as a preset's values depend on it."""

    model: str = "gcn"
    storage_tier: bool = False
    switch: bool = False  # the stock-script switch (a DistDGL script of the user's own)


def expand(given: dict, context: Context, defaults: dict) -> dict:
    """Every setting of the SNI part: ``defaults``, then the preset's values (``given["preset"]``
    or the context's preset), then the values in ``given``; settings not given whose value
    cannot apply in ``context`` fall back (see the module docstring)."""
    name = given.get("preset", SWITCH_PRESET if context.switch else TRAIN_PRESET)
    if name not in PRESETS:
        raise ValueError(f"unknown preset '{name}': choose one of {', '.join(PRESET_NAMES)}")
    preset = PRESETS[name]
    if not context.switch and context.model not in STALE_MODELS:
        preset = PRESETS["exact"]  # stale epochs measured not to pay for this model
    values = dict(defaults, **preset.values, preset=name)
    values.update(given)

    def fall_back(key, value, when):
        if key not in given and when:
            values[key] = value

    pipeline = values.get("sync_policy") == "pipeline"
    unaveraged = context.switch or context.storage_tier or pipeline or context.model not in AVERAGED_MODELS
    for key, value in preset.unaveraged.items():  # owners average rows they hold in memory
        fall_back(key, value, unaveraged)
    rows_only = context.switch or context.storage_tier or context.model not in SUMMABLE_MODELS
    fall_back("stale_halo", "rows", rows_only)
    fall_back("sync_halo", "rows", values["stale_halo"] == "rows")
    fall_back("quantize", 0, context.switch or context.storage_tier or pipeline)
    fall_back("smooth", 0.0, context.switch or pipeline)
    return values

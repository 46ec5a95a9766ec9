"""Named presets, and the one table of where a context cannot take a preset's value.

A preset sets the few settings that differ between exact and stale training; every other
setting keeps its one default (:class:`~dgl_sni.config.SNIConfig`), and a setting given
explicitly (a flag, a key of ``DGL_SNI_CONFIG`` or of a sweep entry) wins over both.

``fast`` is one configuration. Where a run's context cannot take one of its values, a row of
:data:`RULES` says what it takes instead and why, with the measurement or the mechanism behind
it. The rows are the only place such exceptions live: :func:`expand` applies them (a setting
not given takes the row's value; a refused value given explicitly is an error naming the row's
reason), ``--help`` prints them (:func:`describe`), and the stock-script switch refuses what
its rows refuse. The metrics' ``config`` shows the values that ran, and ``in_effect`` what the
exchange did with them.

``dgl-sni train`` runs ``exact`` unless told otherwise; the stock-script switch runs
``fast`` (turning it on asks for stale rows: at ``exact`` it would serve none).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    """The settings a preset sets, and one line on what they do."""

    values: dict
    why: str


PRESETS = {
    "exact": Preset(dict(sync_interval=1, quantize=0),
                    "every epoch exchanges float32 halo rows: distributed training equals single-process training"),
    "fast": Preset(dict(sync_interval=8, quantize=8, row_average=0.9, grad_average=0.9, smooth=0.0),
                   "halo rows and gradients exchanged every 8th epoch after a warm-up of 5, 8-bit on the wire, "
                   "each averaged over the steps before (rows by their owners, gradients by their senders); "
                   "stale epochs take the last ones and send nothing; a layer linear in its halo rows "
                   "(GCN, SAGE, DGL's GraphConv, SAGEConv mean/gcn, GINConv sum/mean) takes them as their sum"),
}
PRESET_NAMES = tuple(PRESETS)
# how stale rows are served: a run that asks for stale epochs (--sync-interval above 1) without
# naming a preset gets fast's, the ones measured to train best, and keeps exact's float32 rows
STALE_SETTINGS = ("row_average", "grad_average", "smooth")
TRAIN_PRESET = "exact"  # dgl-sni train's
SWITCH_PRESET = "fast"  # the stock-script switch's (DGL_SNI=1)


@dataclass(frozen=True)
class Context:
    """What a run is, as far as a preset's values depend on it."""

    model: str = "gcn"  # a built-in model, or "custom" (a model file)
    storage_tier: bool = False
    switch: bool = False  # the stock-script switch (a DistDGL script of the user's own)
    dropout: float = 0.5  # the model's (a stock script's is not known: never 0 here)

    def is_(self, name: str, values: dict) -> bool:
        """Whether this run is in the context ``name`` of a :class:`Rule` (``values``: its settings
        so far); ``A & B``: in both."""
        if " & " in name:
            return all(self.is_(part, values) for part in name.split(" & "))
        if name == "dropout":
            return self.dropout > 0
        if name.startswith("model="):
            return not self.switch and self.model == name[len("model="):]
        if name == "pipelined":
            return values.get("sync_policy") == "pipeline"
        if name == "no_dropout":  # stale epochs whose layers take kept sums, of a model without dropout
            return not self.switch and self.dropout == 0 and values.get("sync_interval", 1) > 1 \
                and values.get("stale_halo") == "summed" and values.get("sync_policy") != "pipeline"
        return bool(getattr(self, name))


@dataclass(frozen=True)
class Rule:
    """In ``context`` (``switch``, ``storage_tier``, ``pipelined``, ``model=NAME``, ``dropout``,
    ``no_dropout``, or two of them joined by `` & ``), the
    setting ``setting`` takes ``value`` where not given, because ``why``; with ``refuse``, a
    value given explicitly other than ``value`` is an error (the context cannot run it).
    ``evidence``: where the measurement or the mechanism is written down."""

    context: str
    setting: str
    value: object
    why: str
    refuse: bool = False
    evidence: str = ""


_FILES = "its rows live in files, read unit by unit"
_SCRIPT = "a stock script moves its own rows and gradients through DGL"
RULES = (
    # the storage tier: rows are read from the owners' files as float32, unit by unit
    Rule("storage_tier", "row_average", 0.0, f"no rows averaged over steps: {_FILES}", refuse=True),
    Rule("storage_tier", "grad_average", 0.0, f"no gradients averaged over steps: {_FILES}", refuse=True),
    Rule("storage_tier", "quantize", 0, "tier-backed rows are served from the owners' files as float32",
         refuse=True),
    Rule("storage_tier", "stale_halo", "rows", f"its layers take whole rows: {_FILES}", refuse=True),
    Rule("storage_tier", "sync_interval", 2, "without averaging, stale epochs every 2nd epoch with the smoothed "
         "cache trained like exact ones", evidence="design-choices: the unaveraged fallback"),
    Rule("storage_tier", "smooth", 0.75, "without averaging, the cache serves the synced rows smoothed over syncs",
         evidence="design-choices: the unaveraged fallback"),
    # the pipelined policy (PipeGCN): every step exchanges, one step late; no agent
    Rule("pipelined", "row_average", 0.0, "a pipelined step publishes the rows it computes", refuse=True),
    Rule("pipelined", "grad_average", 0.0, "a pipelined step pushes the gradients it computes", refuse=True),
    Rule("pipelined", "quantize", 0, "pipelined rows move as float32 while the step computes"),
    Rule("pipelined", "smooth", 0.0, "a pipelined step takes the previous step's rows and gradients as they are; "
         "a given smooth G averages both over steps (PipeGCN's smoothing)"),
    # the stock-script switch
    Rule("switch", "sync_interval", 2, "without averaging, stale epochs every 2nd epoch trained like exact ones",
         evidence="design-choices: the unaveraged fallback"),
    Rule("switch", "smooth", 0.0, "the switch serves the synced rows as a script's pulls observe them", refuse=True),
    Rule("switch", "quantize", 0, f"{_SCRIPT} (float32)", refuse=True),
    Rule("switch", "stale_halo", "rows", f"{_SCRIPT}: its layers take whole rows", refuse=True),
    Rule("switch", "row_average", 0.0, f"{_SCRIPT}: the owners publish what the script writes", refuse=True),
    Rule("switch", "grad_average", 0.0, f"{_SCRIPT}: the script pushes its own gradients", refuse=True),
    Rule("switch", "sync_policy", "fixed", "the switch serves a script's tensors on the fixed schedule (the "
         "drift, guarded and adaptive policies read the trainer's weights, loss or rows)", refuse=True),
    Rule("switch", "stale_grad", "exchange", f"{_SCRIPT}: its pushes pass as the script makes them", refuse=True),
    Rule("switch", "sync_halo", "rows", f"{_SCRIPT}: its layers take whole rows", refuse=True),
    Rule("switch", "transfer", False, "the drift transfer reads the trainer's own rows, which a script keeps",
         refuse=True),
    Rule("switch", "halo_sample", 0.0, "boundary node sampling is a dgl-sni train peer method", refuse=True),
    Rule("switch", "stale_truth", "none", "a measurement of dgl-sni train's stale steps", refuse=True),
)
MODEL_RULES = (
    # models whose stale epochs were measured to train worse with averaging, or not to pay
    # (SAGE without dropout: half the averaging oscillates, as the GCN's does; it takes fast's)
    Rule("model=sage & dropout", "sync_interval", 5, "averaged at interval 8, SAGE's stale epochs left exact "
         "SAGE's long plateau later (never reached its target); at interval 5 with half the averaging 2.81x sooner "
         "in 0.97x the epochs over 3 seeds", evidence="MEASUREMENTS 2026-12-06, SAGE's own averaging"),
    Rule("model=sage & dropout", "row_average", 0.5, "as sync_interval: owners' rows averaged over fewer steps",
         evidence="MEASUREMENTS 2026-12-06, SAGE's own averaging"),
    Rule("model=sage & dropout", "grad_average", 0.5, "as row_average",
         evidence="MEASUREMENTS 2026-12-06, SAGE's own averaging"),
    Rule("model=gat", "preset", "exact", "a GAT epoch is bound by its own compute (stale epochs 1.2x faster) and "
         "its stale runs did not reach the exact run's accuracy: fast trains it as exact",
         evidence="MEASUREMENTS 2026-12-05, 13484f2; profile 2026-12-06"),
)
# without dropout (checked after the rows above have set the interval and the stale halo form)
DROPOUT_RULES = (
    Rule("no_dropout", "stale_trend", 1.0, "without dropout the stale rows repeat their errors in one direction; "
         "the kept halo sums continued along their change between syncs took back 0.07-0.14x of the GCN's epochs "
         "on every seed (SAGE at fast's values and the LayerNorm model: the same epochs as without)",
         evidence="MEASUREMENTS 2026-12-07, kept sums continued along their trend; 2026-12-08, without dropout"),
)
RULES = RULES + MODEL_RULES + DROPOUT_RULES
RULE_CONTEXTS = tuple(dict.fromkeys(r.context for r in RULES))


def describe(name: str = "fast") -> str:
    """What preset ``name`` does, and what each context takes instead (for ``--help``)."""
    text = f"{name}: {PRESETS[name].why}"
    if name != "fast":
        return text
    parts = []
    for context in RULE_CONTEXTS:
        rows = [r for r in RULES if r.context == context]
        parts.append(f"{context.replace('_', ' ')}: " + ", ".join(
            f"as {r.value}" if r.setting == "preset" else f"{r.setting} {r.value}" for r in rows))
    return text + ". Where a context cannot take a value: " + "; ".join(parts)


def rules_table() -> str:
    """:data:`RULES` as the markdown table ``docs/design-choices.md`` shows (a test keeps the two equal)."""
    lines = ["| context | setting | fast there | given otherwise | why | evidence |", "|---|---|---|---|---|---|"]
    for r in RULES:
        value = f"`{r.value}`'s values" if r.setting == "preset" else f"`{r.value}`"
        lines.append(f"| {r.context.replace('_', ' ')} | `{r.setting}` | {value} | "
                     f"{'refused' if r.refuse else 'runs'} | {r.why} | {r.evidence or 'the mechanism'} |")
    return "\n".join(lines)


def expand(given: dict, context: Context, defaults: dict) -> dict:
    """Every setting of the SNI part: ``defaults``, then the preset's values (``given["preset"]``
    or the context's preset; a stale interval given without a preset adds fast's
    :data:`STALE_SETTINGS`), then the values in ``given``; then :data:`RULES`: a setting not
    given takes the value of each row of ``context``, a refused value given is an error."""
    name = given.get("preset", SWITCH_PRESET if context.switch else TRAIN_PRESET)
    if name not in PRESETS:
        raise ValueError(f"unknown preset '{name}': choose one of {', '.join(PRESET_NAMES)}")
    preset = PRESETS[name]
    for rule in RULES:  # a context that runs another preset's values (the name stays the one asked for)
        if rule.setting == "preset" and name != rule.value and context.is_(rule.context, given):
            preset = PRESETS[rule.value]
    values = dict(defaults, **preset.values, preset=name)
    if "preset" not in given and name == TRAIN_PRESET and given.get("sync_interval", 1) > 1:
        values.update({key: PRESETS["fast"].values[key] for key in STALE_SETTINGS})
    values.update(given)
    for rule in RULES:
        if rule.setting == "preset" or not context.is_(rule.context, values):
            continue
        if rule.setting in given:
            if rule.refuse and given[rule.setting] != rule.value:
                raise ValueError(f"{rule.setting}={given[rule.setting]!r} cannot apply with "
                                 f"{rule.context.replace('_', ' ')}: {rule.why} ({rule.setting} {rule.value})")
        elif name != "exact" or rule.setting != "sync_interval":
            values[rule.setting] = rule.value
    return values

"""Sweep files: runs that change model, optimiser and prediction settings on one cluster."""
from __future__ import annotations

import os

from .flags import cli_fields
from .options import read_json
from .train import TrainConfig

# settings a sweep run may change (declared with sweep=True); the rest (data, partitioning,
# cluster) is the session's
SWEEPABLE = tuple(f.name for part in TrainConfig().parts().values()
                  for f, opt, _kind in cli_fields(type(part)) if opt.sweep)


def load_sweep(path: str, base: TrainConfig) -> list:
    """The runs of a sweep file: the settings ``base`` was given, each entry's over them, expanded
    by their preset (an entry's ``preset`` sets what neither gave) and validated.

    Run ``i`` writes its metrics to ``<base metrics>/run<i>.json`` (when ``--metrics`` is set).
    """
    entries = read_json(path, "--sweep")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"--sweep file {path} must hold a non-empty JSON list of objects")
    out = base.output
    runs = []
    for index, entry in enumerate(entries):
        bad = sorted(set(entry) - set(SWEEPABLE))
        if bad:
            raise ValueError(f"--sweep run {index} sets {', '.join(bad)}, which a sweep cannot change "
                             f"(allowed: {', '.join(SWEEPABLE)})")
        values = dict(entry, sweep=None)
        if out.metrics:
            values["metrics"] = os.path.join(out.metrics, f"run{index:03d}.json")
        if out.checkpoint_dir:
            values["checkpoint_dir"] = os.path.join(out.checkpoint_dir, f"run{index:03d}")
        try:
            runs.append(base.with_settings(values).validate())
        except ValueError as err:
            raise ValueError(f"--sweep run {index}: {err}") from None
    return runs

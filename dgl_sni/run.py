"""``dgl_sni.train(build_model, config)``: ``dgl-sni train`` from Python.

Partitions the graph, starts the emulated cluster, trains and returns the metrics, as the
command does with the same settings; ``build_model`` (a function defined at the top level
of a file, ``build(in_feats, num_classes, cfg) -> nn.Module``) becomes ``--model-file``,
since every trainer is a process of its own that loads it from its file.
"""
from __future__ import annotations

import json
import os
import tempfile

from .config import TrainConfig


def train(build_model=None, config=None) -> dict:
    """Train ``build_model``'s model (``None``: ``config``'s built-in ``model``) with the settings
    ``config`` (a dict by setting name, as ``DGL_SNI_CONFIG`` and sweep files name them, e.g.
    ``{"dataset": "cora", "workers": 4, "preset": "fast"}``, or a :class:`TrainConfig`).

    Returns the metrics (``config``, ``epochs``, ``summary``, ``in_effect``), also written to
    ``config["metrics"]`` if given. A bad setting or model raises ``ValueError`` naming it;
    a failed run raises ``RuntimeError`` with the command's message.
    """
    from . import cli
    from .model_file import spec_of
    if isinstance(config, TrainConfig):
        values = {k: v for k, v in config.as_dict().items() if k in config.given}
    else:
        values = dict(config or {})
    if build_model is not None:
        if "model" in values:
            raise ValueError("train(build_model, config): config names a built-in model too; leave 'model' out")
        values["model_file"] = spec_of(build_model)
    cfg = TrainConfig.from_dict(values).validate()
    with tempfile.TemporaryDirectory(prefix="dgl-sni-train-") as scratch:
        metrics = cfg.output.metrics or os.path.join(scratch, "metrics.json")
        if cfg.output.sweep:
            raise ValueError("train(): a sweep writes one metrics file per run; use dgl-sni train --sweep")
        argv = ["train", *cfg.to_argv()]
        if not cfg.output.metrics:
            argv += ["--metrics", metrics]
        if "quiet" not in cfg.given:
            argv.append("--quiet")
        code = cli.main(argv)
        if code != 0:
            raise RuntimeError(f"dgl-sni train failed (exit status {code}); its message is above")
        with open(metrics) as fh:
            return json.load(fh)

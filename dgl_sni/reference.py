"""Single-process full-graph training: the exactness reference and the 1-worker baseline.

Called by tests (distributed runs must match it to float tolerance) and benchmarks.
"""
from __future__ import annotations

import numpy as np
import torch

from storage_tier.block import MODELS_WITH_SELF_LOOPS, build_block
from .data import GraphData
from .trainers import FullGraphTrainer, LocalView, ModelConfig


def whole_graph_view(data: GraphData, model: str) -> LocalView:
    """A :class:`LocalView` in which one worker owns every node (``model``: the model as far
    as the block depends on it, :attr:`~dgl_sni.config.ModelConfig.arch`)."""
    in_deg, out_deg = data.degrees()
    block = build_block(data.src, data.dst, data.num_nodes, data.num_nodes, out_deg, in_deg,
                        self_loops=model in MODELS_WITH_SELF_LOOPS)
    masks = {k: torch.from_numpy(v) for k, v in data.masks().items()}
    return LocalView(block=block, x_src=torch.from_numpy(data.features),
                     labels=torch.from_numpy(np.maximum(data.labels, 0)), **masks)


def train_reference(data: GraphData, cfg: ModelConfig, epochs: int, evaluate: bool = True,
                    on_epoch=None, builder=None) -> tuple:
    """Train ``epochs`` full-graph epochs in this process.

    Returns ``(trainer, records)``; each record holds ``epoch``, ``loss``, ``train_acc``,
    ``time_s`` and, with ``evaluate``, ``val_acc``/``test_acc``. ``on_epoch(trainer,
    record)`` runs after each epoch (tests use it to snapshot weights). ``builder``: the
    model's (:mod:`dgl_sni.model_file`; default: the one ``cfg`` names).
    """
    trainer = FullGraphTrainer(cfg, whole_graph_view(data, cfg.arch), data.feat_dim,
                               data.num_classes, builder=builder)
    records = []
    for epoch in range(epochs):
        rec = trainer.train_epoch(epoch)
        if evaluate:
            rec.update(trainer.evaluate())
        records.append(rec)
        if on_epoch is not None:
            on_epoch(trainer, rec)
    return trainer, records

"""What every full-graph trainer shares: settings, the worker's view, the base class.

:class:`TrainerBase` is the base of :class:`~dgl_sni.train.full_graph.FullGraphTrainer`
(in memory) and :class:`~dgl_sni.train.tier.TierTrainer` (through the storage tier).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from storage_tier.block import GraphBlock
from ..config import ModelConfig  # noqa: F401  (re-exported by dgl_sni.train)


@dataclass
class LocalView:
    """What one worker trains on: its block, input rows, labels and split masks (owned rows)."""

    block: GraphBlock
    x_src: torch.Tensor
    labels: torch.Tensor
    train_mask: torch.Tensor
    val_mask: torch.Tensor
    test_mask: torch.Tensor


class TrainerBase:
    """What every full-graph trainer shares: gradient all-reduce, the exchange's step
    announcements, accuracy bookkeeping and checkpoints.

    Subclasses (:class:`FullGraphTrainer`, :class:`~dgl_sni.train.tier.TierTrainer`) set
    ``model``, ``optimizer``, ``params``, ``collective``, ``exchange``, ``global_counts``.
    """

    def _all_reduce_gradients(self) -> None:
        """Sum weight gradients over workers (one flat all-reduce)."""
        if self.collective.world_size == 1:
            return
        flat = torch.cat([p.grad.reshape(-1) for p in self.params])
        self.collective.all_reduce(flat)
        offset = 0
        for p in self.params:
            n = p.numel()
            p.grad.copy_(flat[offset: offset + n].view_as(p))
            offset += n

    def _begin(self, step: int, training: bool) -> str:
        """Tell the exchange which step a forward pass belongs to; returns its mode."""
        return self.exchange.begin_step(step, training)

    def _accuracies(self, correct: torch.Tensor) -> dict:
        """Train/val/test accuracy from this worker's correct counts (float64 [3])."""
        self.collective.all_reduce(correct)
        acc = (correct / self.global_counts.clamp(min=1)).tolist()
        return dict(eval_train_acc=acc[0], val_acc=acc[1], test_acc=acc[2])

    def save_checkpoint(self, path: str, epoch: int) -> None:
        """Write weights and optimiser state atomically (the previous file stays intact on error)."""
        tmp = f"{path}.tmp"
        torch.save(dict(epoch=epoch, model=self.model.state_dict(),
                        optimizer=self.optimizer.state_dict()), tmp)
        os.replace(tmp, path)

    def state(self) -> dict:
        """Current weights by parameter name (for comparisons and checkpoints)."""
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

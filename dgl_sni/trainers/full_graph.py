"""The in-memory full-graph trainer, shared by distributed workers and the single-process reference.

:class:`FullGraphTrainer` owns the model, the optimizer and one worker's view of the
graph: a :class:`~storage_tier.block.GraphBlock` whose destination rows are the nodes the
worker owns, the input rows of every source node, and labels/masks of the owned rows.
The exchange moves halo rows between layers; the collective sums losses, accuracy
counts and weight gradients over workers. With one worker owning the whole graph,
an identity exchange and :class:`~dgl_sni.collective.LocalCollective`, it *is* the
single-process full-graph reference.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from ..collective import LocalCollective
from ..halo.sums import BlockSplit
from ..metrics import Counters
from ..model_file import build
from ..models import TrainableModel, identity_exchange
from .base import LocalView, ModelConfig, TrainerBase


class FullGraphTrainer(TrainerBase):
    """Runs full-graph epochs (forward, backward, all-reduce, Adam step, evaluation).

    The model is ``builder``'s (:mod:`dgl_sni.model_file`; default: the one ``cfg`` names),
    built from ``cfg.seed``."""

    def __init__(self, cfg: ModelConfig, view: LocalView, in_dim: int, num_classes: int,
                 collective=None, exchange=identity_exchange, counters: Counters | None = None,
                 builder=None):
        self.cfg, self.view = cfg, view
        self.collective = collective or LocalCollective()
        self.exchange = exchange
        self._split: BlockSplit | None = None  # made at the first pass whose layers take halo rows apart or summed
        self.counters = counters or self.collective.counters
        self.model: TrainableModel = build(cfg, in_dim, num_classes, builder)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr,
                                          weight_decay=cfg.weight_decay)
        self.params = [p for p in self.model.parameters()]
        self.step = 0  # optimisation steps taken; keys dropout masks
        self.epoch_step = 0  # the step of the last training pass (its evaluation follows it)
        counts = torch.tensor([float(view.train_mask.sum()), float(view.val_mask.sum()),
                               float(view.test_mask.sum())], dtype=torch.float64)
        self.global_counts = self.collective.all_reduce(counts).clone()
        if self.global_counts[0] == 0:
            raise ValueError("no training node: the train split is empty")

    def _halo_split(self) -> BlockSplit | None:
        """The block split at its owned rows, made at the first pass where a layer takes its
        halo rows apart or summed (``None`` while every layer takes whole rows)."""
        if self._split is None and self.exchange.splits():
            self._split = BlockSplit(self.view.block, self.view.x_src)
        return self._split

    # ------------------------------------------------------------------ training
    def train_epoch(self, epoch: int) -> dict:
        """One optimisation step over the whole graph; returns the epoch's record."""
        start = time.perf_counter()
        self.model.train()
        self.epoch_step = self.step
        mode = self._begin(self.step, training=True)
        logits = self.model(self.view.block, self.view.x_src, self.exchange, step=self.step,
                            dropout_seed=self.cfg.dropout_seed, split=self._halo_split())
        mask = self.view.train_mask
        # Sum of per-node losses over the owned training nodes, divided by the *global*
        # number of training nodes: the workers' losses and gradients add up to the
        # single-process mean loss and its gradient.
        loss = F.cross_entropy(logits[mask], self.view.labels[mask], reduction="sum")
        loss = loss / self.global_counts[0].item()
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        with torch.no_grad():
            correct = int((logits[mask].argmax(1) == self.view.labels[mask]).sum())
        total_loss, total_correct = self._all_reduce_step(loss.item(), correct)
        self.optimizer.step()
        self.step += 1
        elapsed = time.perf_counter() - start
        return dict(epoch=epoch, mode=mode, loss=total_loss,
                    train_acc=total_correct / self.global_counts[0].item(), time_s=elapsed)

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self) -> dict:
        """Full-graph accuracy on the train/val/test splits (dropout off)."""
        self.model.eval()
        self._begin(self.epoch_step, training=False)
        logits = self.model(self.view.block, self.view.x_src, self.exchange, split=self._halo_split())
        pred = logits.argmax(1)
        hit = pred == self.view.labels
        correct = torch.tensor([float(hit[m].sum()) for m in
                                (self.view.train_mask, self.view.val_mask, self.view.test_mask)],
                               dtype=torch.float64)
        return self._accuracies(correct)

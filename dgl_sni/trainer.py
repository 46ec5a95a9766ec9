"""Full-graph training loop shared by the distributed trainer and the single-process reference.

:class:`FullGraphTrainer` owns the model, the optimizer and one worker's view of the
graph: a :class:`~dgl_sni.block.GraphBlock` whose destination rows are the nodes the
worker owns, the input rows of every source node, and labels/masks of the owned rows.
The exchange moves halo rows between layers; the collective sums losses, accuracy
counts and weight gradients over workers. With one worker owning the whole graph,
an identity exchange and :class:`~dgl_sni.collective.LocalCollective`, it *is* the
single-process full-graph reference.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .block import GraphBlock
from .collective import LocalCollective
from .metrics import Counters
from .models import FullGraphGNN, identity_exchange, init_model


@dataclass
class ModelConfig:
    """Model and optimiser settings; identical on every worker."""

    model: str = "gcn"
    layers: int = 2
    hidden: int = 16
    heads: int = 4
    dropout: float = 0.5
    lr: float = 0.01
    weight_decay: float = 5e-4
    seed: int = 0


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

    Subclasses (:class:`FullGraphTrainer`, :class:`storage_tier.engine.TierTrainer`) set
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
        """Tell a stepping exchange (SNI) which step a forward pass belongs to."""
        begin = getattr(self.exchange, "begin_step", None)
        return begin(step, training) if begin is not None else "sync"

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


class FullGraphTrainer(TrainerBase):
    """Runs full-graph epochs (forward, backward, all-reduce, Adam step, evaluation)."""

    def __init__(self, cfg: ModelConfig, view: LocalView, in_dim: int, num_classes: int,
                 collective=None, exchange=identity_exchange, counters: Counters | None = None):
        self.cfg, self.view = cfg, view
        self.collective = collective or LocalCollective()
        self.exchange = exchange
        self.counters = counters or self.collective.counters
        self.model: FullGraphGNN = init_model(
            cfg.seed, cfg.model, in_dim, cfg.hidden, num_classes, cfg.layers,
            dropout=cfg.dropout, heads=cfg.heads)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr,
                                          weight_decay=cfg.weight_decay)
        self.params = [p for p in self.model.parameters()]
        self.step = 0  # optimisation steps taken; keys dropout masks
        counts = torch.tensor([float(view.train_mask.sum()), float(view.val_mask.sum()),
                               float(view.test_mask.sum())], dtype=torch.float64)
        self.global_counts = self.collective.all_reduce(counts).clone()
        if self.global_counts[0] == 0:
            raise ValueError("no training node: the train split is empty")

    # ------------------------------------------------------------------ training
    def train_epoch(self, epoch: int) -> dict:
        """One optimisation step over the whole graph; returns the epoch's record."""
        start = time.perf_counter()
        self.model.train()
        self.epoch_step = self.step
        mode = self._begin(self.step, training=True)
        logits = self.model(self.view.block, self.view.x_src, self.exchange, step=self.step,
                            dropout_seed=self.cfg.seed)
        mask = self.view.train_mask
        # Sum of per-node losses over the owned training nodes, divided by the *global*
        # number of training nodes: the workers' losses and gradients add up to the
        # single-process mean loss and its gradient.
        loss = F.cross_entropy(logits[mask], self.view.labels[mask], reduction="sum")
        loss = loss / self.global_counts[0].item()
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        self._all_reduce_gradients()
        self.optimizer.step()
        self.step += 1
        with torch.no_grad():
            correct = (logits[mask].argmax(1) == self.view.labels[mask]).sum()
            stats = torch.tensor([loss.item(), float(correct)], dtype=torch.float64)
            self.collective.all_reduce(stats)
        elapsed = time.perf_counter() - start
        return dict(epoch=epoch, mode=mode, loss=stats[0].item(),
                    train_acc=stats[1].item() / self.global_counts[0].item(), time_s=elapsed)

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self) -> dict:
        """Full-graph accuracy on the train/val/test splits (dropout off)."""
        self.model.eval()
        self._begin(getattr(self, "epoch_step", self.step), training=False)
        logits = self.model(self.view.block, self.view.x_src, self.exchange)
        pred = logits.argmax(1)
        hit = pred == self.view.labels
        correct = torch.tensor([float(hit[m].sum()) for m in
                                (self.view.train_mask, self.view.val_mask, self.view.test_mask)],
                               dtype=torch.float64)
        return self._accuracies(correct)

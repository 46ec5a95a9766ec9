"""The full-graph trainer that runs through the storage tier.

:class:`TierTrainer` gives :class:`~storage_tier.engine.TierEngine` the training step of
:class:`~dgl_sni.trainers.full_graph.FullGraphTrainer` (same loss normalisation, same Adam,
same all-reduce of weight gradients), so the two can be compared number for number.
Created by the worker (``--storage-tier``), the tests and the storage benchmarks.
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

from storage_tier.engine import TierEngine
from storage_tier.host_cache import HostCache
from storage_tier.io import HEADER, BufferPool, IOEngine, padded
from storage_tier.protocols import HaloExchange, NoExchange
from storage_tier.shard import TierShardLayout, layer_tag, layout_path
from storage_tier.subparts import RowSpace, SubpartitionPlan, rowspace_from_graph, rowspace_from_view

from ..collective import LocalCollective
from ..config import TierConfig, parse_bytes
from ..metrics import Counters
from ..tier_models import TierModel, tier_model
from .base import TrainerBase


class TrainingLoss:
    """The loss of one sub-partition's logits, as the in-memory trainer takes it: the sum of
    per-node cross entropy over its training rows divided by the global number of training
    nodes (so the workers' and sub-partitions' gradients add up to the single-process mean's).
    Handed to the engine's backward (:class:`storage_tier.protocols.PartLoss`)."""

    def __init__(self, global_train: float):
        self.global_train = global_train

    def __call__(self, logits: torch.Tensor, part):
        mask = part.train_mask.to(logits.device)
        if not bool(mask.any()):
            return None
        labels = part.labels.to(logits.device)[mask]
        value = F.cross_entropy(logits[mask], labels, reduction="sum") / self.global_train
        return value, int((logits[mask].argmax(1) == labels).sum())


class TierTrainer(TrainerBase):
    """Full-graph training of one worker's partition through the storage tier.

    Mirrors :class:`~dgl_sni.trainers.full_graph.FullGraphTrainer` (``train_epoch``,
    ``evaluate``, ``state``, ``save_checkpoint``; ``model``, ``optimizer``, ``params``,
    ``step``) so the two are interchangeable; owns the model, the optimizer, the
    sub-partition plan, the I/O engine (and its run directory and buffer pool), the host
    cache and the :class:`~storage_tier.engine.TierEngine`.

    Arguments: ``cfg`` (:class:`~dgl_sni.trainers.base.ModelConfig`); ``view``: a
    :class:`~dgl_sni.trainers.base.LocalView` or a :class:`~storage_tier.subparts.RowSpace`
    (:meth:`from_graph` builds one for a whole graph without a whole-graph DGL block);
    ``num_subparts`` P; ``storage_dir`` (parent of the run directory; default the temp
    dir); ``host_cache_budget`` in bytes (``None``: the configuration's ``--host-cache-budget``); ``collective`` / ``counters`` as for
    FullGraphTrainer; ``exchange`` (a :class:`~storage_tier.protocols.HaloExchange`,
    default :class:`~storage_tier.protocols.NoExchange`); ``model`` (a
    :class:`~dgl_sni.tier_models.TierModel`, default the shipped GCN/SAGE/GAT of ``cfg``
    with ``init_model``'s initial weights); ``partition`` (``auto``/``switching``/``range``);
    ``mode`` (``regather``/``snapshot``); ``lazy_writes`` (``"grads"``: outputs bypass to
    storage, gradient buffers stay cached until evicted; ``False``: both bypass; ``True``:
    both write back); ``prefetch_depth``; ``io_mode``
    (``auto``/``direct``/``buffered``); ``device`` (``cpu``; ``cuda`` untested);
    ``pool_units`` (recycled unit buffers); ``hoist_dropout``; ``source_major`` (backward
    source unit by source unit where the model allows it -- GCN, SAGE -- else the
    destination-major regather; see :meth:`storage_tier.engine.TierEngine.backward`).

    The exchange is driven through its protocol: ``begin_step(step, training)`` before
    each forward pass (here), ``forward_rows``/``backward_rows`` by the engine.

    After construction the trainer holds no reference to the input features: they are
    in the tier. Any exception inside ``train_epoch``/``evaluate`` (e.g.
    :class:`~storage_tier.io.StorageError` for a full disk or a corrupt file) closes the
    trainer -- its run directory is removed -- and propagates; checkpoints written by
    :meth:`save_checkpoint` live elsewhere and are untouched.
    """

    def __init__(self, cfg, view, in_dim: int, num_classes: int, num_subparts: int = 4,
                 storage_dir: str | None = None, host_cache_budget: int | None = None,
                 collective=None, exchange: HaloExchange | None = None,
                 counters: Counters | None = None, *,
                 model: TierModel | None = None, partition: str = "auto", mode: str = "regather",
                 lazy_writes: bool | str = "grads", prefetch_depth: int = 2, io_mode: str = "auto",
                 device: str = "cpu", pool_units: int = 4, hoist_dropout: bool = True,
                 source_major: bool = True):
        self.cfg = cfg
        self.collective = collective or LocalCollective()
        self.counters = counters or self.collective.counters
        self.exchange: HaloExchange = exchange or NoExchange()
        self.model: TierModel = model or tier_model(cfg, in_dim, num_classes)
        self.model.to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr,
                                          weight_decay=cfg.weight_decay)
        self.params = [p for p in self.model.parameters()]
        self.step = 0
        self.epoch_step = self.step  # the step whose weights :meth:`evaluate` sees
        start = time.perf_counter()
        rs = view if isinstance(view, RowSpace) else rowspace_from_view(view, self.model.self_loops)
        self.plan = SubpartitionPlan.build(rs, num_subparts, partition, seed=cfg.seed)
        counts = torch.tensor([float(rs.train_mask.sum()), float(rs.val_mask.sum()),
                               float(rs.test_mask.sum())], dtype=torch.float64)
        self.global_counts = self.collective.all_reduce(counts).clone()
        if self.global_counts[0] == 0:
            raise ValueError("no training node: the train split is empty")
        dims = [int(in_dim)] + [self.model.layer_out_dim(l) for l in range(self.model.num_layers - 1)]
        self.io = IOEngine(storage_dir, io_mode)
        try:
            if host_cache_budget is None:  # the configuration's one default
                host_cache_budget = parse_bytes(TierConfig().host_cache_budget, "--host-cache-budget")
            self.cache = HostCache(host_cache_budget)
            self.engine = TierEngine(self.model, self.plan, self.io, self.cache, dims,
                                     self.exchange, mode=mode, lazy_writes=lazy_writes,
                                     prefetch_depth=prefetch_depth, device=device,
                                     hoist_dropout=hoist_dropout, source_major=source_major,
                                     out_width=num_classes)
            # recycle up to pool_units dropped unit buffers (fixed overhead, avoids page faults)
            largest = max(HEADER + padded(self.plan.unit_rows(p) * d * 4)
                          for p in self.plan.unit_parts for d in dims)
            self.io.pool.capacity = int(pool_units) * BufferPool.size_class(largest)
            self.io.check_space(int(self.engine.disk_needed() * 1.02) + (64 << 20),
                                "the tier's activations and gradients")
            self.engine.write_inputs(rs.features)
        except BaseException:
            self.close()
            raise
        del rs
        self.setup_s = time.perf_counter() - start

    @classmethod
    def from_graph(cls, cfg, data, **kwargs) -> "TierTrainer":
        """One process owning every node of a :class:`~dgl_sni.data.GraphData`."""
        return cls(cfg, rowspace_from_graph(data, cfg.model), data.feat_dim, data.num_classes,
                   **kwargs)

    # ------------------------------------------------------------------ training
    def train_epoch(self, epoch: int) -> dict:
        """One optimisation step over the worker's rows; returns the epoch's record."""
        start = time.perf_counter()
        try:
            self.engine.reset_metrics()
            self.model.train()
            self.model.set_step(self.step, self.cfg.dropout_seed)
            self.epoch_step = self.step
            mode = self.exchange.begin_step(self.step, training=True)
            self.optimizer.zero_grad(set_to_none=False)
            self.engine.forward(training=True)
            loss, correct = self.engine.backward(TrainingLoss(self.global_counts[0].item()))
            self.io.wait()
            total_loss, total_correct = self._all_reduce_step(loss, int(correct))
            self.optimizer.step()
            self.step += 1
        except BaseException:
            self.close()  # removes the run directory; checkpoints live elsewhere, untouched
            raise
        elapsed = time.perf_counter() - start
        rec = dict(epoch=epoch, mode=mode, loss=total_loss,
                   train_acc=total_correct / self.global_counts[0].item(), time_s=elapsed)
        rec.update(self.engine.metrics())
        return rec

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Accuracy on the train/val/test splits (dropout off), through the tier."""
        try:
            self.model.eval()
            self.exchange.begin_step(self.epoch_step, training=False)
            correct = self.engine.predict()
            self.io.wait()
        except BaseException:
            self.close()
            raise
        return self._accuracies(correct)

    # ------------------------------------------------------------------ state
    def write_shard_layouts(self, root: str, machine: int, owned_local: np.ndarray | None = None) -> None:
        """Record where each owned row of every hidden layer lives in this trainer's files,
        for tier-backed DistTensors (:mod:`storage_tier.shard`). ``owned_local[i]``: shard
        offset of view row ``i`` (default: the identity)."""
        plan = self.plan
        n = plan.num_owned
        view_of_local = np.arange(n) if owned_local is None else np.argsort(owned_local)
        part, pos = plan.locate(plan.inv_perm[view_of_local])
        for layer in range(1, self.model.num_layers):
            paths = [self.io.path(("act", layer, p)) for p in range(plan.num_parts)]
            TierShardLayout.write(layout_path(root, machine, layer_tag(layer)), paths, part, pos)

    def gradients(self) -> dict:
        """Weight gradients of the last step by parameter name."""
        return {k: p.grad.detach().clone() for k, p in self.model.named_parameters()
                if p.grad is not None}

    def close(self) -> None:
        """Stop the I/O threads and remove the tier's files (idempotent)."""
        self.io.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


__all__ = ["TierTrainer"]

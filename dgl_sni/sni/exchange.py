"""Halo exchange with sync and stale steps (the full-graph trainer's SNI path).

:class:`SNIExchange` is a :class:`~dgl_sni.exchange.HaloExchange` whose hidden-layer
rows come from DGL only on sync steps; on stale steps they come from the agent
(cache for most halo rows, predictions for the sampled ones) and no embedding is
pulled, so no barrier is needed before the layer. With the ``gated`` predictor (fixed
sync policy, owned rows in memory) a :class:`~dgl_sni.sni.transfer.DriftTransfer` per
layer may replace a sampled row by its cached value moved the way this worker's own rows
moved since the sync, where that has been closer to the fresh rows than the agent's row.
Gradients of halo rows are still pushed on stale steps unless ``stale_grad == "skip"``.
The trainer announces each forward pass with :meth:`begin_step`; stale steps ask the
agent for every layer's rows at once, so predictions are computed while the trainer
computes the layers below.
"""
from __future__ import annotations

import numpy as np
import torch

from ..exchange import HaloExchange
from .config import SNIConfig
from .schedule import SyncSchedule
from .table import HaloTable
from .transfer import DriftTransfer


class SNIExchange(HaloExchange):
    """Sync/stale halo exchange; one agent table per hidden layer."""

    def __init__(self, graph, owned_gids, halo_gids, tensors, collective, counters, cfg: SNIConfig,
                 agent, edge_counts: np.ndarray):
        super().__init__(graph, owned_gids, halo_gids, tensors, collective, counters)
        self.cfg = cfg
        self.schedule = SyncSchedule(cfg.warmup, cfg.sync_interval, cfg.enabled)
        self.agent = agent
        ids = self.halo_gids.numpy()
        self.tables = {layer: HaloTable(layer, ids, dim, edge_counts, cfg, agent, counters)
                       for layer, dim in enumerate(tensors.dims, start=1)}
        self.step, self.mode, self.training = 0, "sync", True
        self._predictor_s = 0.0
        use_transfer = cfg.predictor == "gated" and cfg.transfer and cfg.sync_policy == "fixed"
        self.transfers = {layer: DriftTransfer(table.sampled) for layer, table in self.tables.items()
                          if use_transfer and table.sampled.any()}
        self._served = {}  # layer -> (step, rows) served to the training pass (reused by eval)

    def begin_step(self, step: int, training: bool) -> str:
        """Announce a forward pass at training step ``step``; returns its mode."""
        self.step, self.training = step, training
        self.mode = self.schedule.mode(step)
        if self.mode == "stale":
            for table in self.tables.values():
                table.prefetch(step)
        return self.mode

    # ---------------------------------------------------------------- forward
    def forward_rows(self, layer: int, owned) -> torch.Tensor:
        table = self.tables[layer]
        transfer = self.transfers.get(layer)
        mine = owned.detach().numpy() if transfer is not None and self.training \
            and isinstance(owned, torch.Tensor) else None
        if self.mode == "sync":
            rows = super().forward_rows(layer, owned)
            if self.training:
                fresh = rows.numpy()
                if table.has_history:  # how stale would this step have been?
                    used, weight = table.preview(self.step)
                    if mine is not None and transfer.ready:
                        with self.counters.timing("transfer_s"):
                            moved = transfer.transferred(table.synced, mine)
                            agent_rows = used
                            used, _ = transfer.serve(agent_rows, moved)
                            transfer.score(moved, agent_rows, fresh)
                    table.measure(used, weight, fresh)
                table.observe(self.step, fresh)
                if mine is not None:
                    transfer.on_sync(mine)
            return rows
        used, weight = table.served(self.step)
        if mine is not None and transfer.ready and transfer.serving:  # gates closed: no fit
            with self.counters.timing("transfer_s"):
                used, moved_ids = transfer.serve(used, transfer.transferred(table.synced, mine))
            newly = int((weight[moved_ids] <= 0).sum())  # rows the agent served from its cache
            self.counters.add("transfer_rows", int(moved_ids.size))
            self.counters.add("predicted_rows", newly)
            self.counters.add("cached_rows", -newly)
        if self.training:
            self._served[layer] = (self.step, used)
        elif self._served.get(layer, (None,))[0] == self.step:
            used = self._served[layer][1]  # evaluation sees the rows training used
        need_true = self.training and self.cfg.measure_staleness
        adaptive = self.cfg.sync_policy == "adaptive"
        if need_true or adaptive:
            # someone pulls this layer's rows now: publish ours first
            self._write_owned(self.emb[layer].local_partition, owned)
            self.collective.barrier()
        if adaptive:
            used = self._adaptive_pull(table, layer, used)
        if need_true and self.halo_gids.numel():
            with self.counters.timing("comm_s"):
                true = self.emb[layer][self.halo_gids].numpy()
            self.counters.add("measure_bytes", true.nbytes)  # not training traffic
            table.measure(used, weight, true)
        return torch.from_numpy(np.ascontiguousarray(used))

    def _adaptive_pull(self, table: HaloTable, layer: int, used: np.ndarray) -> np.ndarray:
        """Pull the rows whose predicted drift exceeds the bound; observe them."""
        drift = table.drift(self.step)
        rows = np.flatnonzero(drift > self.cfg.drift_bound)
        if rows.size:
            fresh = self.pull_rows(self.emb[layer], self.halo_gids[torch.from_numpy(rows)]).numpy()
            if self.training:
                table.observe(self.step, fresh, rows)
            used = used.copy()
            used[rows] = fresh
        self.counters.add("adaptive_rows", int(rows.size))
        return used

    # ---------------------------------------------------------------- backward
    def backward_rows(self, layer: int, grad_halo: torch.Tensor) -> torch.Tensor:
        if self.mode == "stale" and self.cfg.stale_grad == "skip":
            return grad_halo.new_zeros((self.num_owned, grad_halo.shape[1]))
        return super().backward_rows(layer, grad_halo)

    def end_epoch(self) -> dict:
        """Agent time spent in predictors since the last call (waits for queued work)."""
        total = self.agent.stats()["predictor_s"]
        delta, self._predictor_s = total - self._predictor_s, total
        return dict(predictor_s=delta)

    def close(self) -> None:
        self.agent.close()

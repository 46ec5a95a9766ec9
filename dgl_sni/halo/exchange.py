"""Halo exchange through DistDGL's KVStore: pull embeddings forward, push gradients back.

Forward: a trainer writes its owned rows into its local shard of the layer's embedding
tensor (shared memory, no network), announces the write to its machine's server, and
pulls its halo rows; an owner's server answers the pull once the owner's write of this
pass is announced (:mod:`dgl_sni.halo.id_sets`). Backward: each pushes the gradients of
its halo rows to their owners' gradient shards, asks its own server for the gradients
pushed to its rows (answered once every trainer that has halo rows there pushed this
round), adds them to the gradient of its owned rows and zeroes the shard for the next
epoch. The trainers do not meet per layer: one waits only for the rows it reads. A
shard is written again only after the all-reduce that ends the pass (every pass of a
trainer ends in one), so no write meets a read of the pass before.

Which halo rows are pulled at a step, and which the agent serves instead (stale steps of
in-network prediction), is decided by one :class:`~dgl_sni.halo.resolver.HaloResolver`
per hidden layer; this module only moves rows. Stale steps pull no embedding; their
halo gradients are still pushed (``stale_grad == "exchange"``), dropped (``"skip"``), or not sent while each owned row
gets the gradient the others sent it at the syncs, averaged over syncs with the rows'
smoothing (``"last"``: no traffic). A run that sums halo rows on stale steps
(:mod:`dgl_sni.halo.sums`) gets each layer's sum from :meth:`KVHaloExchange.halo_sum`.

Communication overlaps compute where a layer takes its owned and halo rows apart (GCN and
SAGE: :class:`~dgl_sni.halo.sums.SplitHalo`; every step but a pipelined or tier-backed
one): :meth:`KVHaloExchange.start_halo` publishes a layer's owned rows and sends its pull
before the trainer aggregates them, and the rows are received when the layer needs their
sum (:meth:`~KVHaloExchange.halo_sum`, which drops them by the layer's input dropout as it
sums them); backward pushes the halo gradients in that node and receives the others' in
the node ``start_halo`` made, after the owned aggregation's backward ran.

Pipelined steps (``pipeline_from``: the first such step; PipeGCN's staleness of one step)
publish and push as exact steps do, but use the halo rows and gradients of the previous
step: a layer's pull is sent and left on the wire (:meth:`~dgl_sni.halo.id_sets.HaloIdSet.send_pull`),
pushes are not flushed, and both complete at the end of the step (:meth:`complete_step`),
so the rows travel while the trainer computes the layers above, the backward pass and the
optimiser step. Steps alternate between two sets of tensors (:meth:`LayerTensors.for_step`), so no
write meets a read still in flight; pipelined runs (and the adaptive policy, whose pulls
by id are DistTensor reads) also meet at a barrier after each write, which orders every
trainer's completed step before anyone reads its gradient shard.
"""
from __future__ import annotations

import numpy as np
import torch

import dgl_sni  # noqa: F401
from dgl.distributed import DistTensor

from storage_tier.protocols import Owned

from ..dropout import KeyedMask
from ..metrics import Counters
from ..sni.schedule import DriftSchedule, GuardedSchedule, SyncSchedule, WeightDrift
from .averages import mix
from .id_sets import HaloIdSet
from .quantize import decode, encode, row_seed
from .resolver import HaloResolver, Origin, Resolved
from .sums import HaloSplit, KeptSums
from .tensors import LayerTensors


# A publish writes only the owned rows other trainers read where they are at most 1 / PUBLISH_FEW
# of the owned rows. Gathering them costs more than it saves when they are most of them: 122k
# owned rows of 16, 8-bit, encoded and written in 3.1 ms, 95% of them gathered in 9.6 ms, 80% in
# 4.5 ms, 50% in 3.9 ms (one thread). Cora's 4 METIS parts have 15-21% of their rows read by
# the others, CiteSeer's 1-14%; the synthetic graphs nearly all.
PUBLISH_FEW = 4


class KVHaloExchange:
    """One trainer's halo exchange over the KVStore (implements
    :class:`storage_tier.protocols.HaloExchange` and :class:`~dgl_sni.halo.sums.HaloSums`);
    called by the model as ``exchange`` (or ``halo_sum`` on the stale steps of a run that
    sums halo rows) and by the storage tier's engine through ``forward_rows``/``backward_rows``.

    ``owned_gids``: global (DGL-reshuffled) ids of the trainer's owned nodes, in block
    row order; ``halo_gids``: ids of its halo nodes, in block row order after them;
    ``published``: the positions of the owned rows that other trainers read (in their halo
    sets): where they are few (:data:`PUBLISH_FEW`) a publish writes only those into the
    shard, else (and with ``None``) every owned row.
    ``tensors``: the job's :class:`~dgl_sni.halo.tensors.LayerTensors` (widths of the rows
    exchanged before layers ``1..L-1``). With ``cfg`` (an active
    :class:`~dgl_sni.config.SNIConfig`), ``agent`` and ``edge_counts`` (edges from each halo
    row into the partition), stale steps are served by the agent. With ``pipeline_from``
    (``tensors`` made with ``pipeline``), training steps from that one on are pipelined.
    ``sum_stale``: stale training steps take summed halo rows (:mod:`dgl_sni.halo.sums`;
    the trainer checks that its model allows it); ``sync_sums`` (with it): how the other
    training steps take theirs: ``inputs`` (the input layer sums), ``summed`` (every layer
    sums its fresh rows) or ``rows``. Whichever, a sync step sums the fresh rows of the
    layers above the input (as rows: undropped, apart from the ones it trains on) and
    updates the sums kept for the stale steps from them where the resolver says how the
    served rows follow (:attr:`Resolved.blend`).
    """

    def __init__(self, graph, owned_gids: torch.Tensor, halo_gids: torch.Tensor,
                 tensors: LayerTensors, collective, counters: Counters, cfg=None, agent=None,
                 edge_counts: np.ndarray | None = None, seed: int = 0, pipeline_from: int | None = None,
                 sum_stale: bool = False, sync_sums: str = "rows", published: np.ndarray | None = None):
        self.graph, self.collective, self.counters = graph, collective, counters
        self.num_owned = int(owned_gids.numel())
        self.halo_gids = halo_gids.to(torch.int64)
        policy = graph.get_node_partition_policy("_N")
        self.policy = policy
        local = policy.to_local(owned_gids.to(torch.int64))
        contiguous = bool(torch.equal(local, torch.arange(local.numel(), dtype=local.dtype)))
        self._owned_local = None if contiguous else local
        # the owned rows a publish writes: the ones other trainers read, where they are few
        # (None: every owned row, in one contiguous pass)
        self._published = self._published_at = None
        if published is not None and len(published) * PUBLISH_FEW <= self.num_owned:
            self._published = torch.from_numpy(np.asarray(published, dtype=np.int64))
            self._published_at = self._published if contiguous else local[self._published]
        # exact steps pull and push every halo row: their owners know them by a registered set
        self.halo_set = HaloIdSet(next(iter(tensors.emb.values())).kvstore_key, policy, self.halo_gids) \
            if tensors.emb else None
        self.tensors = tensors
        self.emb, self.grad = tensors.emb, tensors.grad
        if pipeline_from is not None and not tensors.pipeline:
            raise ValueError("a pipelined exchange needs LayerTensors made with pipeline=True")
        if pipeline_from is not None and cfg is not None:
            raise ValueError("pipelined steps replace stale steps: use --sync-policy pipeline without a "
                             "sync interval above 1")
        self.pipeline_from = pipeline_from
        self.publish_barrier = pipeline_from is not None or (cfg is not None and cfg.sync_policy == "adaptive")
        self._in_flight = {}  # layer -> PendingPull of the last pipelined step's rows
        self._last_rows = {}  # layer -> the halo rows of the last training step (pipelined or exact)
        self._last_grad = {}  # layer -> gradient received for owned rows at the last exact step
        self._sync_grad = {}  # stale_grad "last": layer -> gradient received at the last sync step
        self._grad_pending = False  # pushes of the last pipelined step not yet flushed
        self._started = {}  # layer -> _StartedSource: a sync step's halo rows on the wire, not yet used
        self._last_training_step = None
        self.tier_backed = tensors.tier_root is not None
        self.quantize, self.seed, self.dims = tensors.quantize, seed, tensors.dims
        self.bits = self.quantize  # of this step's rows: evaluation moves float32 rows (exact)
        if self.quantize and self.tier_backed:
            raise ValueError("quantized halo rows cannot be tier-backed")
        self.cfg, self.agent = cfg, agent
        if sum_stale and cfg is None:
            raise ValueError("summed halo rows are for stale steps: they need an active SNI configuration")
        if sync_sums != "rows" and not sum_stale:
            raise ValueError("summed halo rows on sync steps come with summed halo rows on stale steps")
        self.sum_stale, self.sync_sums = sum_stale, sync_sums
        self._sums = KeptSums()  # the sums of the served rows, per layer
        if cfg is None:
            self.schedule = None
        elif cfg.sync_policy == "drift":  # the trainer hands it a meter (watch_weights)
            self.schedule = DriftSchedule(cfg.warmup, cfg.sync_interval, cfg.sync_drift, enabled=cfg.enabled)
        elif cfg.sync_policy == "guarded":  # the worker hands it each step's loss (watch_loss)
            self.schedule = GuardedSchedule(cfg.warmup, cfg.sync_interval, cfg.sync_loss_gap, enabled=cfg.enabled)
        else:
            self.schedule = SyncSchedule(cfg.warmup, cfg.sync_interval, cfg.enabled)
        transfer = cfg is not None and cfg.predictor == "gated" and cfg.transfer and cfg.sync_policy != "adaptive"
        ids = self.halo_gids.numpy()
        self.resolvers = {
            layer: HaloResolver(cfg, counters, table_id=layer, ids=ids, dim=dim,
                                agent=None if agent is None else (lambda: agent),
                                edge_counts=lambda _ids: edge_counts, transfer=transfer)
            for layer, dim in enumerate(tensors.dims, start=1)}
        self.step, self.mode, self.training = 0, "sync", True
        self._predictor_s = 0.0
        self._agent_calls = -1  # the tables' agent operations at the last stats (-1: never asked)
        self._agents_lost = False  # some trainer's agent was gone at the end of the last training step
        if tensors.pipeline:  # an earlier run of a sweep may have ended on unread pushes
            for step in (0, 1):
                for grad in tensors.for_step(step)[1].values():
                    self._take_received(grad)

    def owned_local_offsets(self) -> np.ndarray:
        """Shard offset of every owned row, in block row order."""
        if self._owned_local is None:
            return np.arange(self.num_owned)
        return self._owned_local.numpy()

    # -------------------------------------------------------------- steps
    def begin_step(self, step: int, training: bool) -> str:
        """Announce a forward pass at training step ``step``; returns its mode. Stale steps
        ask the agent for every layer's rows at once, so predictions are computed while
        the trainer computes the layers below."""
        self.step, self.training = step, training
        self.complete_step()
        self.emb, self.grad = self.tensors.for_step(step if training else step + 1)
        self.bits = self.quantize if training else 0
        if not training and self.quantize:
            self.emb = self.tensors.eval_emb
        if self.pipeline_from is not None:
            ready = training and step >= self.pipeline_from and self._last_training_step == step - 1
            self.mode = "pipelined" if ready else "sync"
            if training:
                self._last_training_step = step
            return self.mode
        self.mode = self.schedule.mode(step) if self.schedule is not None else "sync"
        if self.mode == "stale" and not training and not self.cfg.stale_eval:
            self.mode = "sync"  # exact evaluation: fresh rows (its traffic is eval_bytes)
        if self.mode == "stale" and self._agents_lost:
            self.mode = "sync"  # an agent was gone at the last step's end: every trainer syncs until it is back
        if self.mode == "stale":
            for layer, resolver in self.resolvers.items():
                if self._kept_version(layer) is None:  # the rows are needed: let the agent start on them
                    resolver.prefetch(step)
        elif training and self.cfg is not None:  # a sync step may score the agent's preview
            for resolver in self.resolvers.values():
                resolver.prefetch_preview(step, own_rows=True)
        return self.mode

    def step_flags(self) -> tuple:
        """What this trainer adds to the all-reduce that ends a training step: 1.0 where its
        agent is gone (nothing without an agent). The sum tells every trainer the same thing,
        so they decide the next steps' modes alike without a collective of their own (see
        :meth:`~dgl_sni.train.base.TrainerBase._all_reduce_step`)."""
        if self.agent is None:
            return ()
        return (0.0 if self.agent.alive else 1.0,)

    def summed_flags(self, totals: tuple) -> None:
        """The sums of :meth:`step_flags` over the trainers, at the end of a training step: a
        stale step after it syncs instead where any agent was gone (an agent lost later, during
        that step, is found when it is asked for rows: its trainer serves the rows of the last
        sync, and the step after syncs)."""
        if totals:
            self._agents_lost = totals[0] > 0

    def complete_step(self) -> None:
        """Receive the rows the last pipelined step left on the wire and flush its pushes
        (their time is the communication the pipeline did not hide); a no-op otherwise.
        Also does the resolvers' work still left (:meth:`_settle`). Called by the worker
        at the end of each training step, and by :meth:`begin_step`."""
        self._settle()
        for source in self._started.values():  # sent for, never used (a pass that failed): received
            source.pull(None)
        self._started.clear()
        if not self._in_flight and not self._grad_pending:
            return
        with self.counters.timing("comm_s"):
            for layer, pending in self._in_flight.items():
                rows = pending.wait()
                self.counters.bytes_recv += rows.numel() * rows.element_size()
                self._last_rows[layer] = self._decode(layer, rows)
            self._in_flight.clear()
            if self._grad_pending:
                self.halo_set.flush()  # the owners applied the last step's pushes
            self._grad_pending = False

    def _settle(self) -> None:
        """Do the work a sync step left to the resolvers (the drift transfer's scoring, see
        :meth:`HaloResolver.settle`). Called where the trainer is about to wait on the
        network (a started pull's rows, the halo gradients), so it takes the time of that
        wait rather than adding to the step, and at the end of the step."""
        for resolver in self.resolvers.values():
            resolver.settle()

    def _decode(self, layer: int, pulled: torch.Tensor) -> np.ndarray:
        """Pulled rows of ``layer`` as float32 (decoded where they travel quantized)."""
        if self.bits:
            return decode(pulled, self.dims[layer - 1], self.bits).numpy()
        return pulled.numpy()

    def resume_at(self, step: int) -> None:
        """A run resumed at ``step``: that step syncs, seeding the agent's new tables (a
        pipelined run's first step after a resume is exact by itself: no previous rows)."""
        if self.schedule is not None:
            self.schedule.resume_at(step)

    def watch_weights(self, params) -> None:
        """The weights whose change since the last sync drives the ``drift`` policy (the
        layers whose outputs are exchanged); other policies ignore them."""
        if isinstance(self.schedule, DriftSchedule):
            self.schedule.meter = WeightDrift(params)

    def watch_loss(self, step: int, mode: str, loss: float) -> None:
        """Training step ``step`` ran in ``mode`` with global loss ``loss`` (the ``guarded``
        policy reads it; other policies ignore it)."""
        if isinstance(self.schedule, GuardedSchedule):
            self.schedule.observe(step, mode, loss)

    def end_epoch(self) -> dict:
        """Agent time spent in predictors since the last call (waits for queued work; asked
        only when the tables sent the agent something since)."""
        if self.agent is None:
            return {}
        calls = sum(r.table.agent_calls for r in self.resolvers.values() if r.table is not None)
        delta = 0.0
        if calls != self._agent_calls:
            total = self.agent.stats()["predictor_s"]
            delta, self._predictor_s, self._agent_calls = total - self._predictor_s, total, calls
        out = dict(predictor_s=delta)
        if isinstance(self.schedule, DriftSchedule):
            out["weight_drift"] = self.schedule.last_drift
        if isinstance(self.schedule, GuardedSchedule):
            out.update(sync_interval_now=self.schedule.interval, loss_gap=self.schedule.last_gap)
        return out

    def close(self, complete: bool = True) -> None:
        """End the job: receive what a last pipelined step left on the wire (``complete``;
        not after an error, when peers may be gone) and release the agent."""
        if complete:
            self.complete_step()
        if self.agent is not None:
            self.agent.close()

    # -------------------------------------------------------------- row movement
    def _coder(self, layer: int, direction: int) -> torch.Generator:
        """The generator of this step's stochastic rounding (quantized rows)."""
        return torch.Generator().manual_seed(row_seed(self.seed, self.step, layer, self.collective.rank, direction))

    def _write_owned(self, shard: torch.Tensor, rows: Owned, layer: int) -> None:
        """Copy the owned rows into the local shard: a tensor (only the rows other trainers
        read, where ``published`` named them), or the storage tier's
        :class:`~storage_tier.protocols.OwnedRows` unit by unit; encoded where rows travel
        quantized."""
        if self.tier_backed:  # the tier wrote them already; make sure they reached storage
            rows.sync()
            return
        if self.bits and not isinstance(rows, torch.Tensor):
            raise ValueError("quantized halo rows need the owned rows in memory (not the storage tier)")
        if isinstance(rows, torch.Tensor):
            rows, chosen = rows.detach(), self._published
            if self.bits:  # the chosen rows' bytes are those of the encode of every owned row
                rows = encode(rows, self.bits, self._coder(layer, 0),
                              rows=None if chosen is None else chosen.numpy())
            elif chosen is not None:
                rows = rows.index_select(0, chosen)
            if chosen is not None:
                shard[self._published_at] = rows
            elif self._owned_local is None:
                shard[: self.num_owned] = rows
            else:
                shard[self._owned_local] = rows
            return
        for ids, chunk in rows.units():
            ids = torch.from_numpy(np.asarray(ids, dtype=np.int64))
            target = ids if self._owned_local is None else self._owned_local[ids]
            shard[target] = torch.from_numpy(np.ascontiguousarray(chunk))

    def _publish(self, layer: int, owned: Owned) -> None:
        """Write the owned rows of layer ``layer``'s input where the others pull them and
        announce the write (:meth:`~dgl_sni.halo.id_sets.HaloIdSet.announce`: their set
        pulls of it are answered once every owner wrote). With :attr:`publish_barrier`
        the trainers also meet: pulls by id (the adaptive policy) read the shards as
        DistTensor reads, which wait for no announcement, and a pipelined step reads the
        gradients pushed at the step before, which its owners flushed before this."""
        tensor = self.emb[layer]
        self._write_owned(tensor.local_partition, owned, layer)
        if self.halo_set is not None:
            self.halo_set.announce(tensor.kvstore_key)
        if self.publish_barrier:
            self.collective.barrier()

    def _read_owned(self, shard: torch.Tensor) -> torch.Tensor:
        if self._owned_local is None:
            return shard[: self.num_owned]
        return shard[self._owned_local]

    def pull_rows(self, tensor: DistTensor, ids: torch.Tensor | None = None) -> torch.Tensor:
        """Pull rows ``ids`` of a layer tensor (None: every halo row, by the registered set),
        counting payload bytes and time."""
        with self.counters.timing("comm_s"):
            rows = self._halo_rows(tensor) if ids is None else tensor[ids]
        return self._pulled(rows)

    def _pulled(self, rows: torch.Tensor) -> torch.Tensor:
        """Count rows that arrived from a pull (payload bytes and rows)."""
        self.counters.bytes_recv += rows.numel() * rows.element_size()
        self.counters.add("pulled_rows", int(rows.shape[0]))
        return rows

    def _halo_rows(self, tensor: DistTensor) -> torch.Tensor:
        """Every halo row of ``tensor``, in block row order (no ids on the wire)."""
        return self.halo_set.pull(tensor.kvstore_key, tensor.local_partition)

    def _resolve(self, layer: int, owned: Owned) -> Resolved:
        """Publish owned rows of layer ``layer``'s input where they are needed and resolve
        the halo rows (pulled, or served on stale steps: the resolver decides)."""
        resolver = self.resolvers[layer]
        own = owned.detach().numpy() if resolver.transfer is not None and self.training \
            and isinstance(owned, torch.Tensor) else None
        pipelined = self.mode == "pipelined"
        source = self._started.pop(layer, None) or (_PipelinedSource if pipelined else _LayerSource)(self, layer, owned)
        next_syncs = self.mode == "stale" and self.training and self.schedule.surely_syncs(self.step + 1)
        resolved = resolver.resolve(self.step, self.training, source, own=own,
                                    mode="sync" if pipelined else self.mode, next_syncs=next_syncs)
        if self.pipeline_from is not None and self.training and not pipelined:
            self._last_rows[layer] = resolved.rows  # the first pipelined step uses them
        return resolved

    def forward_rows(self, layer: int, owned: Owned) -> torch.Tensor:
        """Publish owned rows of layer ``layer``'s input where they are needed and return
        the halo rows (pulled, or served on stale steps: the resolver decides)."""
        return torch.from_numpy(np.ascontiguousarray(self._resolve(layer, owned).rows))

    # -------------------------------------------------------------- summed halo rows
    def sums_halo(self) -> bool:
        """The current step is a stale training step of a run that sums halo rows, or a sync
        training step of a run whose sync steps sum them too."""
        if not (self.sum_stale and self.training):
            return False
        return self.mode == "stale" or (self.mode == "sync" and self.sync_sums == "summed")

    def sums_inputs(self) -> bool:
        """The current step is a training step that takes the sum of the halo input rows:
        in a run that sums on stale steps, every one unless its sync steps take rows."""
        return self.sum_stale and self.training and (self.mode == "stale" or self.sync_sums != "rows")

    def start_halo(self, layer: int, owned: torch.Tensor) -> torch.Tensor:
        """Start moving layer ``layer``'s halo rows where its sum needs them (a sync step:
        publish ``owned``, send the pull); returns ``owned`` as the input of :meth:`halo_sum`
        (see :class:`~dgl_sni.halo.sums.HaloSums`), through a node whose backward receives
        the gradient the others sent for the owned rows, after every other use of them."""
        return _HaloGate.apply(owned, self, layer)

    def _start_rows(self, layer: int, owned: torch.Tensor) -> None:
        if self.mode == "sync" and not self.tier_backed and self.halo_gids.numel():
            self._started[layer] = _StartedSource(self, layer, owned)

    def takes_rows_apart(self) -> bool:
        """The current pass may take halo rows apart from owned ones (:meth:`start_halo`,
        :meth:`halo_sum`; see :class:`~dgl_sni.halo.sums.SplitHalo`): not a pipelined step
        (its pushes complete at the end of the step) nor a tier-backed exchange."""
        return self.mode != "pipelined" and not self.tier_backed

    def _keeps_sync_sums(self, layer: int) -> bool:
        """The current step is a training sync step whose stale steps after it reuse the sum
        of layer ``layer``'s halo rows it pulls (they are served the cache's rows)."""
        return self.sum_stale and self.training and self.mode == "sync" \
            and self.resolvers[layer].versions_stale_rows()

    def halo_sum(self, layer: int, owned: torch.Tensor, split: HaloSplit,
                 scale: torch.Tensor | None, mask: KeyedMask | None = None) -> torch.Tensor:
        """The sum of layer ``layer``'s halo rows (see :class:`~dgl_sni.halo.sums.HaloSums`
        and :class:`~dgl_sni.halo.sums.SplitHalo`): on a step that :meth:`sums_halo`, of the
        served rows undropped, recomputed only when they changed (``Resolved.version``);
        on any other, of its rows dropped by ``mask`` (the layer's input dropout; ``None``:
        none), and a training sync step of a run whose stale steps sum halo rows also sums
        them undropped in the same pass, as those steps will (:meth:`_keep_sum`), so they
        sum nothing."""
        return _HaloSumFunction.apply(owned, self, layer, split, scale, mask)

    def _kept_version(self, layer: int) -> int | None:
        """On a stale training step that sums halo rows: the version of the rows the cache
        serves now where their sum is kept (updated at the last sync),
        so the rows are not needed; ``None`` otherwise."""
        if self.mode != "stale" or not self.sums_halo():
            return None
        version = self.resolvers[layer].cache_version()
        return version if version is not None and self._sums.version(layer) == version else None

    def _summed(self, layer: int, owned: torch.Tensor, split: HaloSplit, scale,
                mask: KeyedMask | None) -> torch.Tensor:
        """:meth:`halo_sum`'s forward: the kept or new sum of the served rows on a step that
        :meth:`sums_halo`; else the sum of this step's rows dropped by ``mask``, with their
        undropped sum from the same pass kept where the stale steps reuse it. Runs inside
        the autograd node's forward, so no graph is recorded."""
        if self.sums_halo():
            if mask is not None:
                raise ValueError("a step that sums halo rows takes them undropped")
            total = self._sums.get(layer, self._kept_version(layer), scale)
            if total is not None:
                self.resolvers[layer].count_cached()
                return total
            resolved = self._resolve(layer, owned)
            total = self._sums.get(layer, resolved.version, scale)
            if total is None:
                total = split.sum_rows(self._rows(resolved), scale)
                self._keep_sum(layer, resolved, scale, total)
            return total
        resolved = self._resolve(layer, owned)
        rows, keep = self._rows(resolved), self._keeps_sync_sums(layer)
        if mask is None:
            total = kept = split.sum_rows(rows, scale)
        else:
            total, kept = split.dropped_sums(rows, scale, mask, plain=keep)
        if keep:
            self._keep_sum(layer, resolved, scale, kept)
        return total

    @staticmethod
    def _rows(resolved: Resolved) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(resolved.rows))

    def _keep_sum(self, layer: int, resolved: Resolved, scale, total: torch.Tensor) -> None:
        """``total`` is the sum of ``resolved``'s rows undropped: keep it, or the kept sum it
        updates (:meth:`KeptSums.keep`), for the stale steps."""
        self.counters.add("summed_rows", int(resolved.rows.shape[0]))
        self._sums.keep(layer, resolved, scale, total)

    def pushes_halo_grad(self) -> bool:
        """This step sends its halo gradients (not a stale step that skips or reuses them)."""
        return not (self.mode == "stale" and self.cfg.stale_grad != "exchange")

    def backward_rows(self, layer: int, grad_halo: torch.Tensor | None) -> torch.Tensor:
        """Send halo gradients to their owners; return the gradient others sent for owned rows
        (``grad_halo`` may be ``None`` where :meth:`pushes_halo_grad` says none is sent)."""
        if self.mode == "pipelined":
            return self._pipelined_backward(layer, grad_halo)
        self._send_grad(layer, grad_halo)
        return self._received_grad(layer)

    def _send_grad(self, layer: int, grad_halo: torch.Tensor | None) -> None:
        """Push the halo gradients where this step sends them (not flushed)."""
        if self.pushes_halo_grad():
            self._push(layer, grad_halo)

    def _received_grad(self, layer: int) -> torch.Tensor:
        """The gradient for owned rows: what the others pushed (flushed: after
        :meth:`_send_grad`), or on a step that sends none the gradients of the syncs
        (``last``, the kept tensor itself, not a copy) or zeros. The exchange may keep it:
        callers only read it (the autograd nodes and the tier's engine add it out of place)."""
        if not self.pushes_halo_grad():
            last = self._sync_grad.get(layer) if self.cfg.stale_grad == "last" else None
            if last is not None:
                return last
            return torch.zeros((self.num_owned, self.dims[layer - 1]))
        self._settle()  # before waiting for the others' gradients
        with self.counters.timing("comm_s"):  # every gradient the others sent for the owned rows is applied
            self.halo_set.end_round(self.grad[layer].kvstore_key)
        received = self._take_received(self.grad[layer])
        if self.pipeline_from is not None and self.training:
            self._last_grad[layer] = received  # the first pipelined step uses it
        if self.cfg is not None and self.cfg.stale_grad == "last":
            # the stale steps until the next sync reuse it (smoothed over syncs as the rows are)
            g, prev = self.cfg.smoothing, self._sync_grad.get(layer)
            self._sync_grad[layer] = received if not g or prev is None else mix(prev, g, received)
        return received

    def _take_received(self, grad_tensor: DistTensor) -> torch.Tensor:
        """The gradient pushed to this worker's owned rows of ``grad_tensor`` (a copy), and
        its shard zeroed for the next step that uses it."""
        shard = grad_tensor.local_partition
        received = self._read_owned(shard).to(torch.float32)
        if self._owned_local is None:
            shard[: self.num_owned] = 0
        else:
            shard[self._owned_local] = 0
        return received

    def _push(self, layer: int, grad_halo: torch.Tensor) -> None:
        """Send halo gradients to their owners' shards of this step's set (not flushed)."""
        if not self.halo_gids.numel():
            return
        grad_halo = grad_halo.contiguous()
        if self.bits:
            grad_halo = encode(grad_halo, self.bits, self._coder(layer, 1))
        with self.counters.timing("comm_s"):
            self.halo_set.push(self.grad[layer].kvstore_key, grad_halo)
        self.counters.bytes_sent += grad_halo.numel() * grad_halo.element_size()
        self.counters.add("pushed_rows", int(self.halo_gids.numel()))

    def _pipelined_backward(self, layer: int, grad_halo: torch.Tensor) -> torch.Tensor:
        """Push this step's halo gradients (flushed at the end of the step, used by their owners
        at the next) and return what the others sent for owned rows at the previous step."""
        self._push(layer, grad_halo)
        self.halo_set.end_round(self.grad[layer].kvstore_key, wait=False)  # the barriers order these reads
        self._grad_pending = True
        if layer in self._last_grad:  # the previous step was exact: its received gradient
            return self._last_grad.pop(layer)
        return self._take_received(self.tensors.for_step(self.step - 1)[1][layer])

    def __call__(self, layer: int, owned: torch.Tensor) -> torch.Tensor:
        return _ExchangeFunction.apply(owned, self, layer)


class _LayerSource:
    """One layer's halo rows on the wire, as a :class:`~dgl_sni.halo.resolver.HaloSource`."""

    def __init__(self, exchange: KVHaloExchange, layer: int, owned: Owned):
        self.exchange, self.layer, self.owned = exchange, layer, owned
        self.origin = Origin.TIER if exchange.tier_backed else Origin.PULLED

    def publish(self) -> None:
        self.exchange._publish(self.layer, self.owned)

    def _rows(self, pulled: torch.Tensor) -> np.ndarray:
        return self.exchange._decode(self.layer, pulled)

    def pull(self, ids: np.ndarray | None) -> np.ndarray:
        ex, tensor = self.exchange, self.exchange.emb[self.layer]
        if ids is None:
            if ex.halo_gids.numel() == 0:
                return np.zeros((0, ex.dims[self.layer - 1]), dtype=np.float32)
            return self._rows(ex.pull_rows(tensor))
        if not ex.publish_barrier:  # a DistTensor read of chosen rows waits for no announcement
            raise RuntimeError("halo rows pulled by id need the publish barrier (the adaptive policy sets it)")
        return self._rows(ex.pull_rows(tensor, torch.from_numpy(ids)))

    def peek(self) -> np.ndarray:
        ex = self.exchange
        with ex.counters.timing("comm_s"):
            true = self._rows(ex._halo_rows(ex.emb[self.layer]))
        ex.counters.add("measure_bytes", true.nbytes)  # not training traffic
        return true


class _StartedSource(_LayerSource):
    """A sync step's halo rows sent for before the layer needs them: made after the owned
    rows are computed, it publishes them and sends the pull at once; ``pull`` receives the
    rows (the trainer aggregates its owned rows meanwhile)."""

    def __init__(self, exchange: KVHaloExchange, layer: int, owned: Owned):
        super().__init__(exchange, layer, owned)
        super().publish()
        with exchange.counters.timing("comm_s"):
            tensor = exchange.emb[layer]
            self._pending = exchange.halo_set.send_pull(tensor.kvstore_key, tensor.local_partition)

    def publish(self) -> None:
        pass  # done when made

    def pull(self, ids: np.ndarray | None) -> np.ndarray:
        if ids is not None:
            raise ValueError("a started pull fetches every halo row of its layer")
        ex = self.exchange
        ex._settle()  # before waiting for the rows
        with ex.counters.timing("comm_s"):
            rows = self._pending.wait()
        return self._rows(ex._pulled(rows))


class _PipelinedSource(_LayerSource):
    """A pipelined step's halo rows: ``pull`` sends this step's pull, leaves it on the wire
    (completed at the end of the step) and answers with the previous training step's rows."""

    def __init__(self, exchange: KVHaloExchange, layer: int, owned: Owned):
        super().__init__(exchange, layer, owned)
        self.origin = Origin.PIPELINED

    def pull(self, ids: np.ndarray | None) -> np.ndarray:
        ex = self.exchange
        if ids is not None:
            raise ValueError("a pipelined step pulls every halo row of its layer")
        if ex.halo_gids.numel():
            with ex.counters.timing("comm_s"):
                tensor = ex.emb[self.layer]
                ex._in_flight[self.layer] = ex.halo_set.send_pull(tensor.kvstore_key, tensor.local_partition)
            ex.counters.add("pulled_rows", int(ex.halo_gids.numel()))
        return ex._last_rows[self.layer]


class _ExchangeFunction(torch.autograd.Function):
    """Autograd node: ``[owned; halo] = exchange(owned)``; backward pushes halo gradients."""

    @staticmethod
    def forward(ctx, owned, exchange: KVHaloExchange, layer: int):
        ctx.exchange, ctx.layer = exchange, layer
        halo = exchange.forward_rows(layer, owned)
        return torch.cat((owned, halo), 0)

    @staticmethod
    def backward(ctx, grad_src):
        ex = ctx.exchange
        grad_owned = grad_src[: ex.num_owned]
        received = ex.backward_rows(ctx.layer, grad_src[ex.num_owned:])
        return grad_owned + received, None, None


class _HaloGate(torch.autograd.Function):
    """Autograd node: ``owned = gate(owned)``, made before a summing layer uses its owned
    rows. Forward starts the halo rows' pull where the step needs them; backward runs once
    every use of the owned rows has its gradient (after :class:`_HaloSumFunction` pushed the
    halo gradients, so the owned rows' backward ran while they travelled) and adds the
    gradient the others sent for the owned rows."""

    @staticmethod
    def forward(ctx, owned, exchange: KVHaloExchange, layer: int):
        ctx.exchange, ctx.layer = exchange, layer
        exchange._start_rows(layer, owned)
        return owned.view_as(owned)

    @staticmethod
    def backward(ctx, grad_owned):
        return grad_owned + ctx.exchange._received_grad(ctx.layer), None, None  # out of place


class _HaloSumFunction(torch.autograd.Function):
    """Autograd node: ``sum = halo_sum(owned)``; backward pushes the halo rows' gradient
    (``scale * A_halo^T dL/dsum``, dropped by the rows' ``mask``); the gradient the others
    sent for ``owned`` is added by the :class:`_HaloGate` ``owned`` came through."""

    @staticmethod
    def forward(ctx, owned, exchange: KVHaloExchange, layer: int, split: HaloSplit, scale, mask):
        ctx.exchange, ctx.layer, ctx.split, ctx.scale, ctx.mask = exchange, layer, split, scale, mask
        total = exchange._summed(layer, owned, split, scale, mask)
        return total.view_as(total)  # a new tensor per step, over the kept sum (only read)

    @staticmethod
    def backward(ctx, grad_sum):
        ex = ctx.exchange
        if ex.pushes_halo_grad():
            ex._send_grad(ctx.layer, ctx.split.rows_grad(grad_sum, ctx.scale, ctx.mask))
        return None, None, None, None, None, None

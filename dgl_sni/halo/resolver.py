"""Where a halo row's value comes from: one exchanged tensor's rows, step by step.

A :class:`HaloResolver` owns, for one exchanged tensor on one trainer, the agent's history
table (:class:`~dgl_sni.sni.table.HaloTable`), the smoothing of the synced rows and the
drift transfer. It observes a sync step's fresh rows (:meth:`HaloResolver.fresh`) and
answers a stale step (:meth:`HaloResolver.served`) with the rows and a per-row
:class:`Origin`:

* ``PULLED`` -- fresh from the owner (a DGL pull); ``TIER`` -- the same, read by the
  owner's server from its storage tier files (:mod:`storage_tier.shard`);
* ``STATIC`` -- read-only data (input features) from the stock-script switch's exact cache
  (:mod:`dgl_sni.sni.static_cache`);
* ``CACHED`` / ``PREDICTED`` -- stale steps: the agent's history cache, or its trend
  prediction (the row's predictor weight is positive);
* ``TRANSFERRED`` -- the cached row moved by the drift of the worker's own rows
  (:mod:`dgl_sni.sni.transfer`), where its gates are open;
* ``REPULLED`` -- stale steps with the adaptive policy: rows whose predicted drift
  exceeds the bound, pulled again;
* ``PIPELINED`` -- pipelined steps: the owners' rows of the previous step.

Which of these a step's rows are (synced, served, kept as a sum, the previous step's) is
the step plan's decision (:mod:`dgl_sni.halo.plan`); this module says what a served row is.
Served rows are counted once, from their origins, when they are final: ``cached_rows``,
``predicted_rows`` (predicted or transferred: not the cache), ``transfer_rows``,
``adaptive_rows``, ``served_rows`` (answered without a pull). ``agent_wait_s``: time blocked
waiting for the agent's rows (the part of its work that computing did not hide). Bytes and
time on the wire are the wire's business.

Callers: :class:`~dgl_sni.halo.plan.HaloPlanner` (full-graph trainers: one resolver per
hidden layer) and the stock-script switch (:mod:`dgl_sni.sni.kvstore`: one per managed
tensor, by row id: :meth:`HaloResolver.resolve_ids`), so their semantics are the same.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

import numpy as np

from ..metrics import Counters
from ..sni.table import HaloTable
from ..sni.transfer import DriftTransfer
from .averages import smooth_into

if TYPE_CHECKING:
    from dpu_agent.client import AgentClient

    from ..config import SNIConfig


class Origin(enum.IntEnum):
    """Where a halo row's value came from (one code per row of a :class:`Resolved`)."""

    PULLED = 1
    STATIC = 2
    CACHED = 3
    PREDICTED = 4
    TRANSFERRED = 5
    REPULLED = 6
    TIER = 7
    PIPELINED = 8


@dataclass
class Resolved:
    """A step's halo rows (``rows[i]`` for requested row ``i``) and their origins.

    ``version``: on a stale step whose every row is the agent's cache, the number of
    syncs the cache has seen (rows with the same version are the same rows: a caller may
    reuse what it computed from them, as :mod:`dgl_sni.halo.sums` does); ``None`` where
    rows may differ from one step to the next.
    ``blend``: on a training sync step whose rows the agent observed, ``(g, version)``: the
    cache's rows of ``version`` are ``g * (its rows of version - 1) + (1 - g) * rows``
    (the smoothing; ``g = 0`` at the first sync or without smoothing), so a caller can
    update what it computed from the cache's rows instead of computing it anew.
    """

    rows: np.ndarray
    origin: np.ndarray  # uint8, Origin codes
    version: int | None = None
    blend: tuple[float, int] | None = None

    def count(self, origin: Origin) -> int:
        return int((self.origin == origin).sum())


class HaloSource(Protocol):
    """How a resolver reaches the owners of its rows on the steps that need them (a stale
    step that measures staleness or re-pulls drifting rows; the switch's pulls by id).
    Implemented by :class:`~dgl_sni.halo.wire.WireSource` and the switch's pull source.

    ``publish()`` makes this worker's own rows visible before anyone pulls (a no-op where
    the script writes them itself); ``pull(ids)`` fetches rows as training traffic (``ids``:
    global ids; ``None``: every tracked row); ``peek()`` fetches every tracked row without
    counting it as training traffic (staleness measurement).
    """

    def publish(self) -> None: ...

    def pull(self, ids: np.ndarray | None) -> np.ndarray: ...

    def peek(self) -> np.ndarray: ...


def _origins(n: int, origin: Origin) -> np.ndarray:
    return np.full(n, int(origin), dtype=np.uint8)


class HaloResolver:
    """One tensor's halo rows on one trainer: observes the synced rows, serves the stale
    ones, counts them by origin (see module docstring).

    ``ids``: the tracked rows' global ids in row order (``None``: fixed by the first sync
    pull, sorted, as for a stock script's tensor); ``agent``: a function returning the
    agent client (called when the first table is made), or ``None`` for exact exchange
    (every row pulled at every step); ``edge_counts(ids)``: per tracked row, its edges into
    this partition, which rank rows for prediction; ``transfer``: offer the drift transfer
    (``gated``, fixed policy, rows in memory).
    """

    def __init__(self, cfg: "SNIConfig | None", counters: Counters, *, table_id: int = 0,
                 ids: np.ndarray | None = None, dim: int | None = None,
                 agent: "Callable[[], AgentClient] | None" = None,
                 edge_counts: "Callable[[np.ndarray], np.ndarray] | None" = None,
                 transfer: bool = False):
        self.cfg, self.counters = cfg, counters
        self.table_id, self.agent = table_id, agent
        self._edge_counts = edge_counts
        self.table = None
        self.ids = None if ids is None else np.asarray(ids, dtype=np.int64)
        self.transfer = None
        self._want_transfer = transfer
        if agent is not None and self.ids is not None:
            self._new_table(self.ids, dim)
        self._memo = None  # (step, rows, origin) a training pass used (evaluation reuses them)
        self._average = None  # smoothing > 0: the exponential average of the synced rows
        self._spare = None  # the average before it: the buffer of the next one
        self._preview_step = None  # the sync step whose preview the agent was asked for ahead
        self._scoring = None  # a sync step's transfer work not yet done: (own rows, cache, agent rows, fresh)

    # ------------------------------------------------------------------ deferred work
    def settle(self) -> None:
        """Do the last sync step's transfer work if it is still to do
        (:meth:`DriftTransfer.sync <dgl_sni.sni.transfer.DriftTransfer.sync>`: score the
        map, re-base it), counted as ``transfer_s``. A sync step leaves it for later: the
        planner settles where the trainer would otherwise wait on the network (the next
        layer's rows, the halo gradients) and at the start of every step. Every entry point
        settles first, so the transfer is never read half-updated."""
        if self._scoring is not None:
            work, self._scoring = self._scoring, None
            with self.counters.timing("transfer_s"):
                self.transfer.sync(*work)

    def versions_stale_rows(self) -> bool:
        """Stale training steps are served versioned rows (:attr:`Resolved.version`): the
        ``cache`` predictor, and no drift transfer or adaptive pull moves a served row. Only
        then can a caller reuse what it computed of the rows (the kept halo sums)."""
        cfg = self.cfg
        return self.table is not None and cfg.predictor == "cache" and self.transfer is None \
            and cfg.sync_policy != "adaptive"

    def cache_version(self) -> int | None:
        """The :attr:`Resolved.version` a stale training step would have, where it is known
        without asking the agent: with :meth:`versions_stale_rows` and nothing else that
        needs the agent's answer (staleness measurement, stale evaluation), every row is the
        cache's last observation; ``None`` otherwise."""
        cfg = self.cfg
        if not self.versions_stale_rows() or not self.table.has_history or cfg.measure_staleness \
                or cfg.stale_eval:
            return None
        return self.table.observations

    def count_cached(self) -> None:
        """A stale training step whose caller reuses what it computed from the rows of
        :meth:`cache_version`, without asking the agent for them: its rows are counted as the
        cache's, as :meth:`resolve` would have."""
        self.settle()
        self._count(_origins(self.table.num_rows, Origin.CACHED))

    def prefetch(self, step: int) -> None:
        """Let the agent start computing a stale step's rows (returns at once)."""
        self.settle()
        if self.table is not None:
            self.table.prefetch(step)

    def prefetch_preview(self, step: int, own_rows: bool) -> None:
        """A training sync step: let the agent start computing the preview that step will
        score or measure (returns at once; nothing when it will not be needed).
        ``own_rows``: the caller will hand the worker's own rows (the transfer scores)."""
        self.settle()
        if self._wants_preview(own_rows):
            self.table.prefetch(step, preview=True)
            self._preview_step = step

    def _wants_preview(self, own_rows: bool) -> bool:
        table, transfer = self.table, self.transfer
        if table is None or not table.has_history:
            return False
        return (own_rows and transfer is not None and transfer.ready) or self.cfg.measure_staleness

    # ------------------------------------------------------------------ rows
    def fresh(self, step: int, training: bool, fresh: np.ndarray, own: np.ndarray | None = None,
              ids: np.ndarray | None = None, origin: Origin = Origin.PULLED) -> Resolved:
        """A sync step's ``fresh`` rows (every tracked row, or the rows of ``ids``), just pulled
        from their owners (``origin``: ``PULLED`` or ``TIER``). A training step hands them to
        the agent's table (smoothed where ``smooth`` asks) and to the drift transfer, whose
        scoring of this step's preview is left for :meth:`settle`; ``own``: this worker's own
        rows of the layer now (the transfer needs them). ``Resolved.blend`` says how the
        cache's rows follow these (see :class:`Resolved`)."""
        self.settle()
        resolved = Resolved(fresh, _origins(fresh.shape[0], origin))
        if self.agent is None or not training or fresh.ndim != 2 or fresh.dtype != np.float32:
            return resolved
        if ids is not None:  # a stock script's pull: observe the tracked rows it holds
            self._observe_ids(step, np.asarray(ids, dtype=np.int64), fresh)
            return resolved
        table, transfer = self.table, self.transfer
        scoring = own is not None and transfer is not None and transfer.ready
        prefetched, self._preview_step = self._preview_step == step, None
        want = self._wants_preview(own is not None)
        if want:
            # what would this step have served? (the transfer's gates score it; measured on
            # request); prefetched by the planner at the start of the step
            with self.counters.timing("agent_wait_s"):  # blocked on the agent's reply
                used, weight = table.preview(step)
            if scoring and self.cfg.measure_staleness:  # what it served, with the chosen rows moved
                with self.counters.timing("transfer_s"):
                    served, _ = transfer.serve(used, transfer.transferred(table.synced, own))
                table.measure(served, weight, fresh)
            elif self.cfg.measure_staleness:
                table.measure(used, weight, fresh)
        elif prefetched:  # asked for, but the rows it was for did not come (not in memory)
            table.preview(step)
        synced = table.synced  # observe replaces it (a new array): the scoring keeps the old one
        g = self.cfg.smooth if self._average is not None else 0.0
        smoothed = self._smoothed(fresh)
        table.observe(step, smoothed, handed=smoothed is self._average)  # the average: not changed again
        resolved.blend = (g, table.observations)
        if own is not None and transfer is not None:  # done later, where the trainer waits (see settle)
            self._scoring = (np.array(own, dtype=np.float32), synced, used if scoring else None, fresh)
        return resolved

    def served(self, step: int, training: bool, source: HaloSource, own: np.ndarray | None = None,
               next_syncs: bool = False) -> Resolved:
        """A stale step's rows of every tracked row: the agent's (cache, prediction), the
        drift transfer's where its gates are open, and under the adaptive policy rows pulled
        again through ``source``, which also gives the true rows where staleness is measured.
        Evaluation of a step sees the rows its training pass used. ``next_syncs``: step
        ``step + 1`` syncs whatever happens before it, so a training step asks the agent for
        that sync's preview as soon as it has its own rows."""
        self.settle()
        resolved = self._resolve_stale(step, training, source, own, None)
        if next_syncs and training:
            self.prefetch_preview(step + 1, own_rows=own is not None)
        return resolved

    def resolve_ids(self, step: int, mode: str, source: HaloSource, ids: np.ndarray) -> Resolved:
        """The rows of ``ids`` at a training step of a stock script (the switch): on a ``sync``
        step (or before the agent has history) pulled and observed, on a ``stale`` step served,
        rows never synchronised pulled."""
        self.settle()
        if mode == "sync" or self.table is None:
            return self.fresh(step, True, source.pull(ids), ids=ids)
        return self._resolve_stale(step, True, source, None, ids)

    def _smoothed(self, fresh: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """What the agent observes at a sync: the fresh rows, or (smoothing S > 0) their
        exponential average over syncs, ``S * previous + (1 - S) * fresh``; ``rows``: only
        those rows were pulled (the adaptive policy), and only their averages move."""
        g = self.cfg.smooth
        if not g:
            return fresh
        if self._average is None:
            if rows is not None:  # not reached: a stale step comes after a full sync
                return fresh
            self._average = np.array(fresh, dtype=np.float32, copy=True)
        elif rows is None:
            # S * old + (1 - S) * fresh as (old - fresh) * S + fresh, in one pass, written into
            # the average of the sync before last: nothing reads that one any more (the table
            # holds the last average, the scoring that read the one before was settled)
            spare = self._spare if self._spare is not None and self._spare.shape == fresh.shape \
                else np.empty_like(self._average)
            smooth_into(self._average, fresh, g, spare)
            self._spare, self._average = self._average, spare
        else:
            self._average[rows] = g * self._average[rows] + (1.0 - g) * fresh
            return self._average[rows]
        return self._average

    def _resolve_stale(self, step, training, source, own, ids) -> Resolved:
        cfg, table, transfer = self.cfg, self.table, self.transfer
        with self.counters.timing("agent_wait_s"):  # blocked on the agent's reply (not hidden)
            used, weight = table.served(step)
        origin = np.where(weight > 0, int(Origin.PREDICTED), int(Origin.CACHED)).astype(np.uint8)
        transfer_live = own is not None and transfer is not None and transfer.ready and transfer.serving
        if transfer_live:  # gates closed: no fit
            with self.counters.timing("transfer_s"):
                used, moved_ids = transfer.serve(used, transfer.transferred(table.synced, own))
            origin[moved_ids] = int(Origin.TRANSFERRED)
        if training:
            self._memo = (step, used, origin)
        elif self._memo is not None and self._memo[0] == step:
            _, used, origin = self._memo  # evaluation sees the rows training used
        if ids is not None:
            return self._stale_ids(step, source, used, origin, np.asarray(ids, dtype=np.int64))
        need_true = training and cfg.measure_staleness
        adaptive = cfg.sync_policy == "adaptive"
        if need_true or adaptive:
            source.publish()  # someone pulls this layer's rows now
        if adaptive:
            used, origin = self._adaptive_pull(step, training, source, used, origin)
        if need_true and table.num_rows:
            true = source.peek()
            table.measure(used, weight, true)
        self._count(origin, transfer=transfer_live, adaptive=adaptive)
        cached = not transfer_live and not adaptive and not (weight > 0).any()
        return Resolved(used, origin, version=table.observations if cached else None)

    def _adaptive_pull(self, step, training, source, used, origin):
        """Pull the rows whose predicted drift exceeds the bound; observe them."""
        drift = self.table.drift(step)
        rows = np.flatnonzero(drift > self.cfg.drift_bound)
        if rows.size:
            fresh = source.pull(self.ids[rows])
            if training:
                self.table.observe(step, self._smoothed(fresh, rows), rows)
            used = used.copy()
            used[rows] = fresh
            origin = origin.copy()
            origin[rows] = int(Origin.REPULLED)
        return used, origin

    def _count(self, origin: np.ndarray, transfer: bool = False, adaptive: bool = False) -> None:
        """Count a stale step's rows by origin (once)."""
        c = self.counters
        n = np.bincount(origin, minlength=len(Origin) + 1)
        c.add("predicted_rows", int(n[Origin.PREDICTED] + n[Origin.TRANSFERRED]))
        c.add("cached_rows", int(n[Origin.CACHED]))
        if transfer:
            c.add("transfer_rows", int(n[Origin.TRANSFERRED]))
        if adaptive:
            c.add("adaptive_rows", int(n[Origin.REPULLED]))

    # ------------------------------------------------------------------ rows by id
    def _stale_ids(self, step, source, used, origin, ids) -> Resolved:
        """Tracked rows of ``ids`` from the stale rows; rows never synchronised are pulled."""
        pos = np.minimum(np.searchsorted(self.ids, ids), self.ids.size - 1)
        known = self.ids[pos] == ids
        rows = np.empty((ids.size, used.shape[1]), dtype=np.float32)
        out_origin = np.empty(ids.size, dtype=np.uint8)
        rows[known] = used[pos[known]]
        out_origin[known] = origin[pos[known]]
        if (~known).any():
            rows[~known] = source.pull(ids[~known])
            out_origin[~known] = int(Origin.PULLED)
        self._count(out_origin[known])
        self.counters.add("served_rows", int(known.sum()))
        return Resolved(rows, out_origin)

    def _observe_ids(self, step: int, ids: np.ndarray, rows: np.ndarray) -> None:
        """Observe a pull of arbitrary ``ids``; the first one fixes the tracked rows."""
        if self.table is None:
            self.ids = np.unique(ids)  # table rows are in sorted-id order
            self._new_table(self.ids, rows.shape[1])
        pos = np.minimum(np.searchsorted(self.ids, ids), self.ids.size - 1)
        known = self.ids[pos] == ids
        full = np.zeros((self.ids.size, rows.shape[1]), np.float32)
        seen = np.zeros(self.ids.size, dtype=bool)
        full[pos[known]] = rows[known]
        seen[pos[known]] = True
        self.table.observe(step, full if seen.all() else full[seen],
                           None if seen.all() else np.flatnonzero(seen))

    # ------------------------------------------------------------------ set-up
    def _new_table(self, ids: np.ndarray, dim: int) -> None:
        counts = self._edge_counts(ids)
        self.table = HaloTable(self.table_id, ids, dim, counts, self.cfg, self.agent(), self.counters)
        if self._want_transfer and self.table.sampled.any():
            self.transfer = DriftTransfer(self.table.sampled)

    def drift(self, step: int) -> np.ndarray:
        return self.table.drift(step)

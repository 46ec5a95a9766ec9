"""One exchanged tensor's halo rows on one trainer, as the agent serves them.

:class:`HaloTable` is the trainer-side half of an agent history table: it picks the
sampled rows (boundary importance), forwards fresh rows to the agent on sync steps,
asks it for rows on stale steps, and measures how far served rows are from the true
ones when those are known. Owned by a :class:`~dgl_sni.halo.resolver.HaloResolver` (one
per hidden layer of the full-graph exchange, one per managed tensor of the stock-script
switch).

A table hands the agent a sync's rows when the agent is next asked for something (rows,
a preview, drift), so a sync step sends it nothing to compute: its observation reaches the
agent with the next stale step's request. A ``cache`` table sends only the last observation
(the cache serves the last synced rows; not under the adaptive policy, whose drift is
estimated over the observations): with summed halo rows (the defaults) the stale steps
reuse the sums kept at the sync and never ask, and the agent then gets nothing. Other
kinds keep a history of every sync and get every observation, in order: one kept back is
sent before the next one replaces it.

The agent may die or stall (``dpu_agent.supervisor``): then a stale step gets the rows of
the last sync (the cache, weight 0), observations only update the trainer's copy, and at
the next sync, once an agent is back (a new generation), the table is created again there
and re-seeded with the rows of that sync. The same holds for an agent lost while the table is
created: it is created at the first sync once an agent is back.
"""
from __future__ import annotations

import numpy as np

from dpu_agent.supervisor import AgentLost

from ..metrics import Counters
from ..config import SNIConfig
from .sampling import importance_mask


class HaloTable:
    """Tracked halo rows of one tensor: sampling, agent calls, staleness measurements."""

    def __init__(self, table_id: int, ids: np.ndarray, dim: int, edge_counts: np.ndarray,
                 cfg: SNIConfig, agent, counters: Counters):
        self.table_id, self.dim, self.cfg = table_id, dim, cfg
        self.ids = np.asarray(ids, dtype=np.int64)
        self.agent, self.counters = agent, counters
        self.sampled = importance_mask(edge_counts, self.ids, cfg.sampling_ratio)
        self.num_rows = int(self.ids.size)
        self.synced = None  # last rows synchronised (the cache, trainer-side copy for measuring)
        self.observations = 0  # observe calls so far: the cache's rows change only there
        self.agent_calls = 0  # operations sent to the agent (the exchange asks for its stats only after some)
        self._unsent = None  # the step of the last observation, kept back (see module docstring)
        self._asked = None  # (step, preview) requested and not yet collected
        self._kind = "cache" if cfg.predictor in ("cache", "none") else cfg.predictor
        # only the last observation matters to the agent: a cache serves it, and no drift is asked
        # for (the adaptive policy's drift is a speed estimated over the observations)
        self._last_only = self._kind == "cache" and cfg.sync_policy != "adaptive"
        self._params = dict(window=cfg.window, beta=cfg.beta, lam=cfg.lam)
        self._generation = agent.generation  # the agent generation that holds this table
        self.agent_calls += 1
        try:
            agent.add_table(table_id, self.num_rows, dim, self.sampled, self._kind, **self._params)
        except AgentLost:  # logged once by the supervisor; created at the first sync once an agent is back
            self._generation = None

    @property
    def has_history(self) -> bool:
        return self.synced is not None

    @property
    def _agent_holds_table(self) -> bool:
        return self.agent.alive and self.agent.generation == self._generation

    def _last_sync(self):
        """What a stale step gets without an agent: the rows of the last sync, weight 0."""
        rows = self.synced.copy() if self.synced is not None else np.zeros((self.num_rows, self.dim), np.float32)
        return rows, np.zeros(self.num_rows, np.float32)

    def prefetch(self, step: int, preview: bool = False) -> None:
        """Let the agent start computing the rows of ``step`` (returns at once); ``preview``:
        what it would serve there, without advancing its state (a sync step's :meth:`preview`)."""
        if not self.num_rows:
            return
        self._send_unsent()
        if self._agent_holds_table and self._asked != (step, preview):
            self.agent_calls += 1
            self._asked = (step, preview)
            try:
                self.agent.request(self.table_id, step, preview)
            except AgentLost:
                pass

    def served(self, step: int, preview: bool = False):
        """Rows and predictor weights the agent serves at ``step`` (waits for them); the
        rows of the last sync when the agent is gone."""
        if not self.num_rows:
            return np.zeros((0, self.dim), np.float32), np.zeros(0, np.float32)
        self._send_unsent()
        if self._agent_holds_table:
            asked, self._asked = self._asked, None
            if asked != (step, preview):  # not requested yet: result() asks
                self.agent_calls += 1
            try:
                return self.agent.result(self.table_id, step, preview)
            except AgentLost:
                pass
        return self._last_sync()

    def preview(self, step: int):
        """What the agent would serve at ``step``, without advancing any state."""
        return self.served(step, preview=True)

    def observe(self, step: int, rows: np.ndarray, row_ids: np.ndarray | None = None,
                handed: bool = False) -> None:
        """Fresh rows (all, or the rows at ``row_ids``) synchronised at ``step``; re-seeds
        an agent that came back since the last sync. ``handed``: the caller will not change
        ``rows`` (all of them) while the table holds them, so they are kept without a copy.
        All rows reach the agent when it is next asked for something (see module
        docstring); rows at ``row_ids`` (the adaptive policy) at once."""
        if not self.num_rows:
            return
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        self.observations += 1
        if row_ids is not None or not self._last_only:
            self._send_unsent()  # the agent gets every observation, before the kept rows change
        if row_ids is None:
            self.synced = rows if handed else rows.copy()
            if self._agent_holds_table:  # kept back (a lost agent is revived now, below)
                self._unsent = step
                return
        elif self.synced is not None:
            self.synced[row_ids] = rows
        self._send_unsent()
        self._send(step, rows, row_ids)

    def _send_unsent(self) -> None:
        """Hand the agent the observation kept back, if any (before the agent is asked for
        anything)."""
        if self._unsent is not None:
            step, self._unsent = self._unsent, None
            self._send(step, self.synced, None)

    def _send(self, step: int, rows: np.ndarray, row_ids: np.ndarray | None) -> None:
        """Send one observation to the agent; re-create the table on an agent that came back
        (seeded with every synced row)."""
        if not self.agent.alive:
            self.agent.revive()
        self.agent_calls += 1
        try:
            if self._agent_holds_table:
                self.agent.observe(self.table_id, step, rows, row_ids)
            elif self.agent.alive and self.synced is not None:
                self.agent.add_table(self.table_id, self.num_rows, self.dim, self.sampled, self._kind,
                                     **self._params)
                self._generation, self._asked = self.agent.generation, None
                self.agent.observe(self.table_id, step, self.synced)
        except AgentLost:
            pass

    def drift(self, step: int) -> np.ndarray:
        """Predicted drift per row (adaptive policy); without an agent every row is due."""
        self._send_unsent()
        if self._agent_holds_table:
            self.agent_calls += 1
            try:
                return self.agent.drift(self.table_id, step)
            except AgentLost:
                pass
        return np.full(self.num_rows, np.inf, np.float32)

    def measure(self, used: np.ndarray, weight: np.ndarray, true: np.ndarray) -> None:
        """Add the L2 errors of ``used`` rows and of the cache against ``true`` rows.

        Sums (over rows) go to the counters: all halo rows (``stale_l2``, and the cache's
        ``cache_l2`` on the same rows) and the rows the predictor refined (weight > 0:
        ``pred_l2`` vs ``pred_cache_l2``); ``merge_epoch`` turns them into means.
        """
        if not self.num_rows or self.synced is None:
            return
        err_used = np.linalg.norm(used - true, axis=1)
        err_cache = np.linalg.norm(self.synced - true, axis=1)
        c = self.counters
        c.add("stale_l2_sum", float(err_used.sum()))
        c.add("cache_l2_sum", float(err_cache.sum()))
        c.add("stale_l2_n", int(err_used.size))
        tag = f"l{self.table_id}_"  # per layer (the full-graph trainers' table ids are their layers)
        c.add(tag + "stale_l2_sum", float(err_used.sum()))
        c.add(tag + "true_l2_sum", float(np.linalg.norm(true, axis=1).sum()))
        c.add(tag + "stale_l2_n", int(err_used.size))
        sel = self.sampled
        if sel.any():
            c.add("pred_l2_sum", float(err_used[sel].sum()))
            c.add("pred_cache_l2_sum", float(err_cache[sel].sum()))
            c.add("pred_l2_n", int(sel.sum()))

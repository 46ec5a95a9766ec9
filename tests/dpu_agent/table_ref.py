"""Reference of the agent's history table: the numpy implementation the C++ tables replaced.

``dpu_agent.tables.HistoryTable`` (C++, ``csrc/tables.hpp``) must give the results of this
class to the bit (tests/dpu_agent/test_tables.py). Below: the former module's text.

The agent's state: one history table per exchanged tensor of one trainer.

A :class:`HistoryTable` owns, for the ``n`` remote (halo) rows a trainer reads from
one tensor, the last synchronised value of every row (the history cache), the time
each row was last observed, a per-row speed estimate (for the adaptive sync policy),
and a compiled predictor over the *sampled* rows only (the most important
``sampling_ratio`` of them, chosen by the trainer). :class:`Agent` holds the tables
and executes the protocol's operations; a transport (``dpu_agent.transport``) feeds it
messages and moves rows between the trainer's memory and the agent's.

Served rows for a step are computed once and memoised, so a training forward and an
evaluation forward of the same step get the same rows, and the self-feeding
``linear-trend`` predictor advances exactly once per step.
"""
from __future__ import annotations

import time

import numpy as np

from dpu_agent.predictors import PredictorCore, check_predictor


def make_predictor(kind: str, num_rows: int, dim: int, window: int, beta: float,
                   lam: float) -> PredictorCore | None:
    """The compiled predictor core for ``kind`` over ``num_rows`` slots, as the C++ table makes
    it (None for ``cache`` or no slots). ``self_feeding``: serving advances the core (it feeds
    its prediction back as an observation), so the table must serve a step at most once and
    must not observe rows at a step it has already fed."""
    check_predictor(kind)
    if kind == "cache" or num_rows == 0:
        return None
    return PredictorCore(kind, num_rows, dim, window=window, beta=beta, lam=lam)


class HistoryTable:
    """History cache + predictor for the halo rows of one tensor (see module docstring).

    Owned by :class:`Agent` (one per table); the predictor is the compiled core that
    :func:`make_predictor` makes (None for ``cache``).
    """

    def __init__(self, num_rows: int, dim: int, sampled: np.ndarray, kind: str = "gated",
                 window: int = 4, beta: float = 0.2, lam: float = 0.2):
        check_predictor(kind)
        sampled = np.asarray(sampled, dtype=bool)
        if sampled.shape != (num_rows,):
            raise ValueError(f"sampled mask must have shape ({num_rows},), got {sampled.shape}")
        self.num_rows, self.dim, self.kind = num_rows, dim, kind
        self.cache = np.zeros((num_rows, dim), dtype=np.float32)
        self.t_obs = np.full(num_rows, -np.inf)
        self.speed = np.zeros(num_rows, dtype=np.float32)
        self.sampled_rows = np.flatnonzero(sampled).astype(np.int64)
        # slot of every row in the predictor (-1: not sampled)
        self.slot = np.full(num_rows, -1, dtype=np.int64)
        self.slot[self.sampled_rows] = np.arange(self.sampled_rows.size)
        self.predictor = make_predictor(kind, self.sampled_rows.size, dim, window, beta, lam)
        # a self-feeding predictor (linear-trend) advances when served: see observe/serve
        self._self_feeding = self.predictor is not None and self.predictor.self_feeding
        self._served_step = None
        self._fed_step = None
        self._served = np.zeros((num_rows, dim), dtype=np.float32)
        self._weight = np.zeros(num_rows, dtype=np.float32)
        self.predictor_s = 0.0

    # ------------------------------------------------------------------ operations
    def observe(self, step: float, rows: np.ndarray, row_ids: np.ndarray | None = None) -> None:
        """Fresh rows (all rows, or ``row_ids``) synchronised at ``step``."""
        ids = np.arange(self.num_rows) if row_ids is None else np.asarray(row_ids, dtype=np.int64)
        if rows.shape != (ids.size, self.dim):
            raise ValueError(f"observe needs rows of shape ({ids.size}, {self.dim}), got {rows.shape}")
        seen = np.isfinite(self.t_obs[ids])
        if seen.any():
            old = self.cache[ids[seen]]
            dt = np.maximum(step - self.t_obs[ids[seen]], 1e-8)
            self.speed[ids[seen]] = np.linalg.norm(rows[seen] - old, axis=1) / dt
        self.cache[ids] = rows
        self.t_obs[ids] = step
        if self.predictor is not None:
            slots = self.slot[ids]
            take = slots >= 0
            if self._self_feeding and self._fed_step == step:
                # already fed a prediction at this very step (adaptive partial sync):
                # a zero-length step would divide by eps; the cache took the rows
                take[:] = False
            if take.any():
                start = time.perf_counter()
                obs = np.ascontiguousarray(rows[take], dtype=np.float32)
                s = np.ascontiguousarray(slots[take])
                self.predictor.observe(s, step, obs)
                self.predictor_s += time.perf_counter() - start
        if self._served_step is not None and self._served_step >= step:
            self._served_step = None  # history changed under a memoised step

    def serve(self, step: float, preview: bool = False) -> tuple:
        """Rows to use at ``step`` for every halo row, and per-row predictor weight.

        Weight 0 means the cached row was served; > 0 that the predictor refined it
        (1 for ``linear-trend``/``holt``, the gate's shrinkage weight for ``gated``).
        ``preview`` computes what would be served without advancing any state (the
        self-feeding predictor is not fed) and without memoising.
        """
        if self._served_step == step and not preview:
            return self._served, self._weight
        if not np.isfinite(self.t_obs).all():
            missing = int(np.flatnonzero(~np.isfinite(self.t_obs))[0])
            raise ValueError(f"row {missing} was never synchronised; a stale step cannot serve it")
        served = np.array(self.cache) if preview else self._served
        weight = np.zeros(self.num_rows, np.float32) if preview else self._weight
        if not preview:
            np.copyto(served, self.cache)
            weight[:] = 0.0
        if self.predictor is not None and self.sampled_rows.size:
            start = time.perf_counter()
            slots = np.arange(self.sampled_rows.size, dtype=np.int64)
            pred, w = self.predictor.serve(slots, step, preview)
            served[self.sampled_rows] = pred
            weight[self.sampled_rows] = w
            self.predictor_s += time.perf_counter() - start
        if not preview:
            self._served_step = step
            self._fed_step = step if self._self_feeding else None
        return served, weight

    def drift(self, step: float) -> np.ndarray:
        """Predicted drift of every row since its last observation (adaptive policy):
        speed x steps since observed, relative to the table's mean row norm (so rows near
        zero do not look infinitely stale)."""
        scale = max(float(np.linalg.norm(self.cache, axis=1).mean()), 1e-12)
        drift = self.speed * np.maximum(step - self.t_obs, 0.0) / scale
        return drift.astype(np.float32)

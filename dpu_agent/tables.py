"""The agent's state: one history table per exchanged tensor of one trainer.

A :class:`HistoryTable` owns, for the ``n`` remote (halo) rows a trainer reads from
one tensor, the last synchronised value of every row (the history cache), the time
each row was last observed, a per-row speed estimate (for the adaptive sync policy),
and a compiled predictor over the *sampled* rows only (the most important
``sampling_ratio`` of them, chosen by the trainer). :class:`Agent` holds the tables.

The table logic is C++ (``csrc/tables.hpp``, through ``_core.TableCore``): the same code
runs in the inline agent (a thread of the trainer) and in the ``sni-agent`` binary, so
every agent mode serves the same rows to the bit.

Served rows for a step are computed once and memoised, so a training forward and an
evaluation forward of the same step get the same rows, and the self-feeding
``linear-trend`` predictor advances exactly once per step.
"""
from __future__ import annotations

import numpy as np

from ._core import TableCore
from .predictors import TREND_PARAMS, check_predictor


class HistoryTable:
    """History cache + predictor for the halo rows of one tensor (see module docstring).

    Owned by :class:`Agent` (one per table), or built directly (tests, references).
    """

    def __init__(self, num_rows: int, dim: int, sampled: np.ndarray, kind: str = "gated",
                 window: int = TREND_PARAMS["window"], beta: float = TREND_PARAMS["beta"],
                 lam: float = TREND_PARAMS["lam"]):
        check_predictor(kind)
        sampled = np.asarray(sampled, dtype=bool)
        if sampled.shape != (num_rows,):
            raise ValueError(f"sampled mask must have shape ({num_rows},), got {sampled.shape}")
        self.num_rows, self.dim, self.kind = num_rows, dim, kind
        self.sampled_rows = np.flatnonzero(sampled).astype(np.int64)
        self.core = TableCore(num_rows, dim, sampled, kind, window=window, beta=beta, lam=lam)

    @property
    def predictor_s(self) -> float:
        """Seconds spent in the predictor core so far."""
        return self.core.predictor_s

    @property
    def cache(self) -> np.ndarray:
        """A copy of the last synchronised rows."""
        return self.core.cache

    def observe(self, step: float, rows: np.ndarray, row_ids: np.ndarray | None = None) -> None:
        """Fresh rows (all rows, or ``row_ids``) synchronised at ``step``."""
        self.core.observe(step, rows, row_ids)

    def serve(self, step: float, preview: bool = False) -> tuple:
        """``(rows, weight)`` to use at ``step`` for every halo row (new arrays).

        Weight 0 means the cached row was served; > 0 that the predictor refined it
        (1 for ``linear-trend``/``holt``, the gate's shrinkage weight for ``gated``).
        ``preview`` computes what would be served without advancing any state.
        """
        return self.core.serve(step, preview)

    def drift(self, step: float) -> np.ndarray:
        """Predicted drift of every row since its last observation (adaptive policy):
        speed x steps since observed, relative to the table's mean row norm."""
        return self.core.drift(step)


class Agent:
    """The tables of one trainer by id. Used by the inline client (a thread in the
    trainer); the ``sni-agent`` binary holds the same C++ tables itself."""

    def __init__(self):
        self.tables = {}

    def add_table(self, table: int, num_rows: int, dim: int, sampled, kind: str, **params) -> None:
        if table in self.tables:
            raise ValueError(f"table {table} already exists")
        self.tables[table] = HistoryTable(num_rows, dim, sampled, kind, **params)

    def table(self, table: int) -> HistoryTable:
        try:
            return self.tables[table]
        except KeyError:
            raise ValueError(f"no table {table}; add_table first") from None

    def stats(self) -> dict:
        return dict(predictor_s=sum(t.predictor_s for t in self.tables.values()),
                    tables=len(self.tables),
                    tracked_rows=sum(t.num_rows for t in self.tables.values()),
                    predicted_slots=sum(int(t.sampled_rows.size) for t in self.tables.values()))

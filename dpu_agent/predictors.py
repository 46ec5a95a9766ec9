"""The agent's predictors: one registry of names, one adapter interface, one adapter per kind.

The compiled cores (``dpu_agent/_core.pyx`` over ``dpu_agent/csrc/predictor.hpp``):

* :class:`TrendPredictor` -- the paper's self-feeding trend update (``step``, its Algorithm
  2) and its windowed linear-trend predictor (``predict_window``, its Algorithm 1);
* :class:`HoltPredictor` -- Holt's double exponential smoothing (``observe``/``forecast``);
* :class:`GatedPredictor` -- the trend predictor behind a confidence gate: read-only
  ``serve`` returns the cached row shrunk towards a capped trend prediction, with weight 0
  (pure cache) unless the prediction has beaten the cache on past observations.

Node ids are slot ids ``0 .. num_nodes-1`` (int64, distinct within a call); observations
are C-contiguous float32 ``[len(ids), dim]``. Calls validate every row before changing any
state and release the GIL. ``tests/dpu_agent/numpy_ref.py`` holds the pure-numpy
references (same API) that the tests use as the oracle.

The cores differ in how they are fed and asked; a :class:`PredictorAdapter` gives the
:class:`~dpu_agent.tables.HistoryTable` one way to drive any of them. ``PREDICTOR_NAMES``
lists every kind a table accepts (``cache``: no predictor, the history cache alone).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from ._core import GatedPredictor, HoltPredictor, TrendPredictor

# the trend predictors' parameters where a caller gives none (dgl_sni's configuration reads these)
TREND_PARAMS = dict(window=4, beta=0.2, lam=0.2)


class PredictorAdapter(ABC):
    """One compiled core over a table's sampled slots, as :class:`~dpu_agent.tables.HistoryTable`
    drives it. Made by :func:`make_predictor`.

    ``self_feeding``: serving advances the core (it feeds its prediction back as an
    observation), so the table must serve a step at most once and must not observe rows
    at a step it has already fed.
    """

    self_feeding: ClassVar[bool] = False

    @abstractmethod
    def observe(self, slots: np.ndarray, step: float, rows: np.ndarray) -> None:
        """Fresh rows (C-contiguous float32 ``[len(slots), dim]``) of ``slots`` at ``step``."""

    @abstractmethod
    def serve(self, slots: np.ndarray, step: float, preview: bool) -> tuple:
        """``(rows, weight)`` predicted for ``slots`` at ``step``; ``preview`` changes no state."""


class TrendAdapter(PredictorAdapter):
    """``linear-trend``: the paper's self-feeding trend predictor (:class:`TrendPredictor`)."""

    self_feeding = True

    def __init__(self, num_rows: int, dim: int, window: int, beta: float, lam: float):
        self.core = TrendPredictor(num_rows, dim, window=window, beta=beta, lam=lam)

    def observe(self, slots, step, rows):
        self.core.step(slots, step, rows)

    def serve(self, slots, step, preview):
        # serving feeds the prediction back (the paper's self-feeding); a preview peeks
        pred = self.core.peek(slots, step) if preview else self.core.step(slots, step)
        return pred, np.ones(slots.size, dtype=np.float32)


class GatedAdapter(PredictorAdapter):
    """``gated``: the trend predictor behind a confidence gate (:class:`GatedPredictor`)."""

    def __init__(self, num_rows: int, dim: int, window: int, beta: float, lam: float):
        # no horizon damping: the gate's learned gain (least squares against past syncs)
        # decides how much of the linear extrapolation to trust, the same at every horizon
        self.core = GatedPredictor(num_rows, dim, window=window, beta=0.0, lam=lam)

    def observe(self, slots, step, rows):
        self.core.observe(slots, step, rows)

    def serve(self, slots, step, preview):
        return self.core.serve(slots, step)  # read-only: a preview is the same call


class WindowTrendAdapter(TrendAdapter):
    """``window-trend``: the paper's Algorithm 1 over the synced rows alone: each served row is
    ``0.3 * last + 0.7 * mean(window)`` plus the decayed, recency-weighted mean slope of the
    window times the horizon (:meth:`TrendPredictor.predict_window`; read-only, no self-feeding)."""

    self_feeding = False

    def __init__(self, num_rows: int, dim: int, window: int, beta: float, lam: float):
        super().__init__(num_rows, dim, window, beta, lam)
        self.lam = lam

    def serve(self, slots, step, preview):
        return self.core.predict_window(slots, step, lam_pred=self.lam), np.ones(slots.size, dtype=np.float32)


class HoltAdapter(PredictorAdapter):
    """``holt``: Holt's double exponential smoothing (:class:`HoltPredictor`)."""

    def __init__(self, num_rows: int, dim: int, window: int, beta: float, lam: float):
        self.core = HoltPredictor(num_rows, dim)

    def observe(self, slots, step, rows):
        self.core.observe(slots, step, rows)

    def serve(self, slots, step, preview):
        return self.core.forecast(slots, step), np.ones(slots.size, dtype=np.float32)


_ADAPTERS = {"linear-trend": TrendAdapter, "gated": GatedAdapter, "holt": HoltAdapter,
             "window-trend": WindowTrendAdapter}
PREDICTOR_NAMES = ("cache", *_ADAPTERS)


def check_predictor(kind: str) -> None:
    """Raise ValueError unless ``kind`` is one of ``PREDICTOR_NAMES``."""
    if kind not in PREDICTOR_NAMES:
        raise ValueError(f"unknown predictor '{kind}': choose one of {', '.join(PREDICTOR_NAMES)}")


def make_predictor(kind: str, num_rows: int, dim: int, window: int, beta: float,
                   lam: float) -> PredictorAdapter | None:
    """The adapted compiled core for ``kind`` over ``num_rows`` slots (None for ``cache``
    or no slots)."""
    check_predictor(kind)
    if kind == "cache" or num_rows == 0:
        return None
    return _ADAPTERS[kind](num_rows, dim, window, beta, lam)


__all__ = ["PREDICTOR_NAMES", "PredictorAdapter", "make_predictor", "check_predictor",
           "TrendPredictor", "HoltPredictor", "GatedPredictor"]

"""The agent's predictors: the registry of their names and the compiled core's Python binding.

The agent's tables (``csrc/tables.hpp``, :class:`~dpu_agent.tables.HistoryTable`) drive one
predictor core each (``make_core`` over ``csrc/predictor.hpp``): the paper's self-feeding
trend update (``linear-trend``, its Algorithm 2), its windowed linear-trend predictor
(``window-trend``, its Algorithm 1), the trend predictor behind a confidence gate (``gated``:
the cached row shrunk towards a capped trend prediction, weight 0 unless the prediction has
beaten the cache on past observations) and Holt's double exponential smoothing (``holt``).
:class:`PredictorCore` (``dpu_agent/_core.pyx``) gives Python one such core alone, driven
exactly as a table drives it (the tests against the numpy references of
``tests/dpu_agent/numpy_ref.py``, the throughput benchmark).

Node ids are slot ids ``0 .. num_nodes-1`` (int64, distinct within a call); rows are
C-contiguous float32 ``[len(ids), dim]``. Calls validate every row before changing any state
and release the GIL. ``PREDICTOR_NAMES`` lists every kind a table accepts (``cache``: no
predictor, the history cache alone), in the order of the protocol's kind codes.
"""
from __future__ import annotations

from ._core import PredictorCore

# the trend predictors' parameters where a caller gives none (dgl_sni's configuration reads these)
TREND_PARAMS = dict(window=4, beta=0.2, lam=0.2)


PREDICTOR_NAMES = ("cache", "linear-trend", "gated", "holt", "window-trend")  # csrc/tables.hpp drives each


def check_predictor(kind: str) -> None:
    """Raise ValueError unless ``kind`` is one of ``PREDICTOR_NAMES``."""
    if kind not in PREDICTOR_NAMES:
        raise ValueError(f"unknown predictor '{kind}': choose one of {', '.join(PREDICTOR_NAMES)}")


__all__ = ["PREDICTOR_NAMES", "TREND_PARAMS", "check_predictor", "PredictorCore"]

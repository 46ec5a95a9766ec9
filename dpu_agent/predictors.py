"""The agent's predictors: the registry of their names and the compiled cores' Python wrappers.

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

The agent's tables (``csrc/tables.hpp``, :class:`~dpu_agent.tables.HistoryTable`) drive the
cores themselves; these wrappers give Python the cores alone (tests against the numpy
references, the throughput benchmark). ``PREDICTOR_NAMES`` lists every kind a table accepts
(``cache``: no predictor, the history cache alone), in the order of the protocol's kind codes.
"""
from __future__ import annotations

from ._core import GatedPredictor, HoltPredictor, TrendPredictor

# the trend predictors' parameters where a caller gives none (dgl_sni's configuration reads these)
TREND_PARAMS = dict(window=4, beta=0.2, lam=0.2)


PREDICTOR_NAMES = ("cache", "linear-trend", "gated", "holt", "window-trend")  # csrc/tables.hpp drives each


def check_predictor(kind: str) -> None:
    """Raise ValueError unless ``kind`` is one of ``PREDICTOR_NAMES``."""
    if kind not in PREDICTOR_NAMES:
        raise ValueError(f"unknown predictor '{kind}': choose one of {', '.join(PREDICTOR_NAMES)}")


__all__ = ["PREDICTOR_NAMES", "TREND_PARAMS", "check_predictor", "TrendPredictor", "HoltPredictor", "GatedPredictor"]

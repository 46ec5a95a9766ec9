"""Per-node predictors of the agent (compiled core: ``dpu_agent/_core.pyx`` over
``dpu_agent/csrc/predictor.hpp``).

* :class:`TrendPredictor` -- the paper's self-feeding trend update (``step``) and its
  windowed linear-trend predictor (``predict_window``);
* :class:`HoltPredictor` -- Holt's double exponential smoothing (``observe``/``forecast``);
* :class:`GatedPredictor` -- the trend predictor behind a confidence gate: read-only
  ``serve`` returns the cached row shrunk towards a capped trend prediction, with weight 0
  (pure cache) unless the prediction has beaten the cache on past observations.

Node ids are slot ids ``0 .. num_nodes-1`` (int64, distinct within a call); observations
are C-contiguous float32 ``[len(ids), dim]``. Calls validate every row before changing any
state and release the GIL. ``dgl_sni.predict.numpy_ref`` holds the pure-numpy references
(same API) that the tests use as the oracle.
"""
from dpu_agent._core import GatedPredictor, HoltPredictor, TrendPredictor

__all__ = ["TrendPredictor", "HoltPredictor", "GatedPredictor"]

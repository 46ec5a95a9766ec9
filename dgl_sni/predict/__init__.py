"""Feature predictors: pure-numpy references of the agent's compiled predictor core.

The compiled versions live in ``dpu_agent`` (``TrendPredictor``, ``HoltPredictor``,
``GatedPredictor``); :mod:`dgl_sni.predict.numpy_ref` implements the same API vectorised
over rows and serves as the test oracle.
"""
from .numpy_ref import NumpyGatedPredictor, NumpyHoltPredictor, NumpyTrendPredictor

__all__ = ["NumpyTrendPredictor", "NumpyHoltPredictor", "NumpyGatedPredictor"]

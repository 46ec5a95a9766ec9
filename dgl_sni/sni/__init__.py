"""In-network embedding prediction: stale epochs served by the agent's history cache and predictor.

``config`` (what to do), ``schedule`` (when to sync), ``sampling`` (which halo rows get
predictions), ``table`` (one exchanged tensor's tracked halo rows on one trainer),
``transfer`` (cached rows moved by the drift of the worker's own rows, gated per row),
``kvstore`` (the drop-in DistTensor / KVClient switch for existing DistDGL scripts).
"""
from .config import PREDICTORS, SNIConfig  # noqa: F401

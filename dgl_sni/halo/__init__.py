"""Halo rows of full-graph training.

``plan`` decides, at the start of every step, where each layer's halo rows come from
(:class:`~dgl_sni.halo.plan.HaloPlanner`); ``exchange`` carries the plan out, moving bytes
through ``wire`` and taking part in autograd through ``autograd``; ``resolver`` says what a
served row's value is; ``rows`` declares how a model's layers take their halo rows;
``sums`` holds the summed form; ``tensors``, ``id_sets``, ``quantize`` and ``averages`` are
the exchanged tensors, the registered pulls, the 8/4-bit codec and the smoothing kernels.
"""
from .resolver import HaloResolver, HaloSource, Origin, Resolved  # noqa: F401

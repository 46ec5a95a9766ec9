"""Halo rows of full-graph training: the exchanged tensors, the exchange, and the resolver
that decides, step by step, where every halo row comes from."""
from .resolver import HaloResolver, HaloSource, Origin, Resolved  # noqa: F401

"""Structured storage offloading of activations (host cache + SSD) and its partitioner.

Layer rule: nothing in this package imports ``dgl_sni``; it uses stdlib, numpy, torch,
DGL (after ``patches.apply()``) and ``patches``. The trainer that drives the tier
(``TierTrainer``) and the models it trains live in ``dgl_sni``.
"""

# --- storage tier (cache, regather, bypass): public API -------------------------------
# Resolved lazily (PEP 562) so that ``import storage_tier.partitioner`` stays free of
# torch/DGL (the partitioner's memory measurements depend on it).
_TIER_EXPORTS = {
    "IOEngine": "io", "StorageError": "io", "BufferPool": "io", "HostCache": "host_cache",
    "RowSpace": "subparts", "SubpartitionPlan": "subparts", "rowspace_from_graph": "subparts",
    "rowspace_from_view": "subparts", "GraphBlock": "block", "build_block": "block",
    "HaloExchange": "protocols", "OwnedRows": "protocols", "TierModel": "protocols",
    "NoExchange": "protocols", "SourceMajorModel": "protocols", "ReverseBlock": "block",
    "TierEngine": "engine", "parse_bytes": "sizes",
}


def __getattr__(name):
    if name in _TIER_EXPORTS:
        import importlib
        return getattr(importlib.import_module(f".{_TIER_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

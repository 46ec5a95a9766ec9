"""Structured storage offloading of activations (host cache + SSD) and its partitioner."""

# --- storage tier (cache, regather, bypass): public API -------------------------------
# Resolved lazily (PEP 562) so that ``import storage_tier.partitioner`` stays free of
# torch/DGL (the partitioner's memory measurements depend on it).
_TIER_EXPORTS = {
    "IOEngine": "io_engine", "StorageError": "io_engine", "HostCache": "host_cache",
    "RowSpace": "subparts", "SubpartitionPlan": "subparts", "rowspace_from_graph": "subparts",
    "rowspace_from_view": "subparts", "TierModel": "models", "TierGCN": "models",
    "TierSAGE": "models", "TierGAT": "models", "tier_model": "models",
    "NoExchange": "engine", "TierEngine": "engine", "TierTrainer": "engine",
}


def __getattr__(name):
    if name in _TIER_EXPORTS:
        import importlib
        return getattr(importlib.import_module(f".{_TIER_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

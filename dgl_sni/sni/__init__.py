"""In-network embedding prediction: stale epochs served by the agent's history cache and predictor.

``schedule`` (when to sync), ``sampling`` (which halo rows get predictions), ``table`` (one
exchanged tensor's tracked halo rows on one trainer, the trainer's half of an agent table),
``transfer`` (cached rows moved by the drift of the worker's own rows, gated per row),
``kvstore`` (the drop-in DistTensor / KVClient switch for existing DistDGL scripts). The
settings are :class:`dgl_sni.config.SNIConfig`; which rows are served is decided by
:class:`dgl_sni.halo.resolver.HaloResolver`.
"""

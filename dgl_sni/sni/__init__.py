"""In-network embedding prediction: stale epochs served by the agent's history cache and predictor.

``schedule`` (when to sync), ``sampling`` (which halo rows get predictions), ``table`` (one
exchanged tensor's tracked halo rows on one trainer, the trainer's half of an agent table),
``transfer`` (cached rows moved by the drift of the worker's own rows, gated per row),
``kvstore`` (the drop-in DistTensor / KVClient switch for existing DistDGL scripts) and
``static_cache`` (its exact cache of input features). The settings are
:class:`dgl_sni.config.SNIConfig`; where a full-graph trainer's halo rows come from is
decided by :class:`dgl_sni.halo.plan.HaloPlanner`.
"""

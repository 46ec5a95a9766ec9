"""The per-layer DistTensors a full-graph job exchanges halo rows through.

For every hidden layer ``l`` a job has two ``DistTensor`` objects sharded like the
graph's nodes: ``<name>_h{l}`` (embeddings) and ``<name>_g{l}`` (gradients, with a push
handler that adds several workers' contributions to a row exactly, whatever their order of
arrival: :mod:`~dgl_sni.halo.grad_shard`). A pipelined job (rows and gradients
one step old, on the wire while the trainer computes) has a second set, ``<name>_p*``:
steps alternate between the two, so a step's writes never meet the previous step's
reads still in flight.
"""
from __future__ import annotations

import torch

import dgl_sni  # noqa: F401
from dgl.distributed import DistTensor
from dgl.distributed.kvstore import get_kvstore

from patches.kvstore_lazy_init import lazy_zeros

from . import grad_shard
from .bit_choice import mixed_accumulate_handler
from .quantize import packed_width, quantized_accumulate_handler


class LayerTensors:
    """The per-layer embedding and gradient ``DistTensor``s of a job (collective to create).

    One set serves every run of a sweep with the same hidden widths: gradient shards are
    zeroed after every read and embedding shards are overwritten before every pull.
    With ``tier_root`` (trainers on the storage tier) the embedding tensors are backed
    by the tier: servers answer pulls from the owners' tier files
    (:mod:`storage_tier.shard`), and their shared-memory shards stay empty. With ``quantize``
    (bits) the embedding tensors hold encoded rows and gradients are pushed encoded
    (:mod:`dgl_sni.halo.quantize`); evaluation, which is exact, moves float32 rows through a
    set of its own (``eval_emb``). With ``adaptive`` as well (a width per row, up to
    ``quantize`` bits: :mod:`dgl_sni.halo.bit_choice`) the embedding tensors hold float32
    rows, which the owners' servers encode as they send them, and serve evaluation too. With
    ``pipeline`` there are two sets, ``emb``/``grad`` for even steps and ``emb_odd``/``grad_odd``
    for odd ones (:meth:`for_step`). Made by the worker session, used by
    :class:`~dgl_sni.halo.exchange.KVHaloExchange`.
    """

    def __init__(self, graph, dims: list, name: str = "sni", tier_root: str | None = None, *, quantize: int,
                 pipeline: bool = False, adaptive: bool = False):
        if pipeline and tier_root is not None:
            raise ValueError("pipelined halo rows (--sync-policy pipeline) cannot be tier-backed "
                             "(--storage-tier with several workers)")
        if adaptive and (quantize != 8 or pipeline or tier_root is not None):
            raise ValueError("a bit width per row (--bit-choice adaptive) needs --quantize 8 and rows in memory, "
                             "not pipelined")
        self.dims = list(dims)
        self.tier_root, self.quantize, self.pipeline, self.adaptive = tier_root, quantize, pipeline, adaptive
        self.emb, self.grad = self._make(graph, name, tier_root, quantize)
        self.emb_odd, self.grad_odd = self._make(graph, f"{name}_p", None, quantize) if pipeline else (None, None)
        separate = quantize and not adaptive
        self.eval_emb = self._make(graph, f"{name}_e", None, 0, grad=False)[0] if separate else self.emb

    def for_step(self, step: int) -> tuple:
        """(embedding, gradient) tensors of ``step``: one set, or the set of its parity."""
        if self.pipeline and step % 2:
            return self.emb_odd, self.grad_odd
        return self.emb, self.grad

    def _make(self, graph, name: str, tier_root: str | None, quantize: int, grad: bool = True) -> tuple:
        policy = graph.get_node_partition_policy("_N")
        n = graph.num_nodes()
        kv = get_kvstore()
        dims = self.dims
        emb, grads = {}, {}
        for layer, dim in enumerate(dims, start=1):
            if quantize and not self.adaptive:  # rows travel encoded (dgl_sni.halo.quantize)
                emb[layer] = DistTensor((n, packed_width(dim, quantize)), torch.uint8,
                                        name=f"{name}_q{layer}", part_policy=policy)
            elif tier_root is None:
                emb[layer] = DistTensor((n, dim), torch.float32, name=f"{name}_h{layer}",
                                        part_policy=policy)
            else:  # rows stay in the owners' tier files; the shard holds no memory
                from storage_tier.shard import TierPullHandler, layer_tag
                emb[layer] = DistTensor((n, dim), torch.float32, name=f"{name}_h{layer}",
                                        part_policy=policy, init_func=lazy_zeros)
                kv.register_pull_handler(emb[layer].kvstore_key, TierPullHandler(tier_root, layer_tag(layer), dim))
            if not grad:
                continue
            # (sum, error) pairs on the owner: a row's contributions from several workers
            # arrive in any order, and their total must not depend on it
            grads[layer] = DistTensor(grad_shard.shape(n, dim), torch.float64, name=f"{name}_g{layer}",
                                      part_policy=policy)
            handler = mixed_accumulate_handler if self.adaptive else \
                quantized_accumulate_handler if quantize else grad_shard.accumulate_push_handler
            kv.register_push_handler(grads[layer].kvstore_key, handler)
        return emb, grads

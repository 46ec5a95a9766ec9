"""Halo exchange through DistDGL's KVStore: pull embeddings forward, push gradients back.

For every hidden layer ``l`` the exchange owns two ``DistTensor`` objects sharded like
the graph's nodes: ``sni_h{l}`` (embeddings) and ``sni_g{l}`` (gradients, with a push
handler that accumulates). Forward: a trainer writes its owned rows into its local
shard of ``sni_h{l}`` (shared memory, no network), all trainers meet at a barrier, and
each pulls its halo rows. Backward: each pushes the gradients of its halo rows to
their owners' ``sni_g{l}`` shards, makes sure its owners have applied them (a one-row
pull from every owner it pushed to: a server handles one client's requests in order),
all meet at a barrier, and each adds its local shard to the gradient of its owned rows
and zeroes the shard for the next epoch.
"""
from __future__ import annotations

import numpy as np
import torch

import dgl_sni  # noqa: F401
from dgl.distributed import DistTensor
from dgl.distributed.kvstore import get_kvstore

from patches.kvstore_lazy_init import lazy_zeros

from .metrics import Counters

PUBLISH_CHUNK_ROWS = 65536  # owned rows copied per step when publishing from the storage tier


def accumulate_push_handler(data_store, name, local_offset, data):
    """DGL push handler: add pushed rows instead of overwriting them (runs in the server)."""
    data_store[name].index_add_(0, local_offset, data.to(data_store[name].dtype))


class LayerTensors:
    """The per-layer embedding and gradient ``DistTensor``s of a job (collective to create).

    One set serves every run of a sweep with the same hidden widths: gradient shards are
    zeroed after every read and embedding shards are overwritten before every pull.
    With ``tier_root`` (trainers on the storage tier) the embedding tensors are backed
    by the tier: servers answer pulls from the owners' tier files
    (:mod:`storage_tier.shard`), and their shared-memory shards stay empty.
    """

    def __init__(self, graph, dims: list, name: str = "sni", tier_root: str | None = None):
        policy = graph.get_node_partition_policy("_N")
        n = graph.num_nodes()
        kv = get_kvstore()
        self.dims = list(dims)
        self.tier_root = tier_root
        self.emb, self.grad = {}, {}
        for layer, dim in enumerate(dims, start=1):
            if tier_root is None:
                self.emb[layer] = DistTensor((n, dim), torch.float32, name=f"{name}_h{layer}",
                                             part_policy=policy)
            else:  # rows stay in the owners' tier files; the shard holds no memory
                from storage_tier.shard import TierPullHandler, layer_tag
                self.emb[layer] = DistTensor((n, dim), torch.float32, name=f"{name}_h{layer}",
                                             part_policy=policy, init_func=lazy_zeros)
                kv.register_pull_handler(self.emb[layer].kvstore_key, TierPullHandler(tier_root, layer_tag(layer), dim))
            self.grad[layer] = DistTensor((n, dim), torch.float32, name=f"{name}_g{layer}",
                                          part_policy=policy)
            kv.register_push_handler(self.grad[layer].kvstore_key, accumulate_push_handler)


class HaloExchange:
    """Moves one trainer's halo rows for every hidden layer; called by the model as ``exchange``.

    ``owned_gids``: global (DGL-reshuffled) ids of the trainer's owned nodes, in block
    row order; ``halo_gids``: ids of its halo nodes, in block row order after them.
    ``tensors``: the job's :class:`LayerTensors` (widths of the rows exchanged before
    layers ``1..L-1``).
    """

    def __init__(self, graph, owned_gids: torch.Tensor, halo_gids: torch.Tensor,
                 tensors: LayerTensors, collective, counters: Counters):
        self.graph, self.collective, self.counters = graph, collective, counters
        self.kv = get_kvstore()
        self.num_owned = int(owned_gids.numel())
        self.halo_gids = halo_gids.to(torch.int64)
        policy = graph.get_node_partition_policy("_N")
        self.policy = policy
        local = policy.to_local(owned_gids.to(torch.int64))
        contiguous = bool(torch.equal(local, torch.arange(local.numel(), dtype=local.dtype)))
        self._owned_local = None if contiguous else local
        owners = policy.to_partid(self.halo_gids) if self.halo_gids.numel() else torch.empty(0, dtype=torch.int64)
        self.owner_machines = torch.unique(owners).tolist()
        # one representative row per remote owner, pulled after pushes to flush them
        self._flush_ids = torch.stack([self.halo_gids[owners == m][0] for m in self.owner_machines]) \
            if self.owner_machines else torch.empty(0, dtype=torch.int64)
        self.emb, self.grad = tensors.emb, tensors.grad
        self.tier_backed = tensors.tier_root is not None

    def owned_local_offsets(self) -> np.ndarray:
        """Shard offset of every owned row, in block row order."""
        if self._owned_local is None:
            return np.arange(self.num_owned)
        return self._owned_local.numpy()

    # -------------------------------------------------------------- row movement
    def _write_owned(self, shard: torch.Tensor, rows) -> None:
        """Copy the owned rows into the local shard: a tensor, or a reader (storage tier)
        with ``units()`` yielding ``(owned row ids, rows)``, or a plain ``rows(slice)``."""
        if self.tier_backed:  # the tier wrote them already; make sure they reached storage
            rows.sync()
            return
        if not callable(rows):
            rows = rows.detach()
            if self._owned_local is None:
                shard[: self.num_owned] = rows
            else:
                shard[self._owned_local] = rows
            return
        units = rows.units() if hasattr(rows, "units") else (
            (np.arange(lo, min(lo + PUBLISH_CHUNK_ROWS, self.num_owned)),
             rows(slice(lo, min(lo + PUBLISH_CHUNK_ROWS, self.num_owned))))
            for lo in range(0, self.num_owned, PUBLISH_CHUNK_ROWS))
        for ids, chunk in units:
            ids = torch.from_numpy(np.asarray(ids, dtype=np.int64))
            target = ids if self._owned_local is None else self._owned_local[ids]
            shard[target] = torch.from_numpy(np.ascontiguousarray(chunk))

    def _read_owned(self, shard: torch.Tensor) -> torch.Tensor:
        if self._owned_local is None:
            return shard[: self.num_owned]
        return shard[self._owned_local]

    def pull_rows(self, tensor: DistTensor, ids: torch.Tensor) -> torch.Tensor:
        """Pull rows of any DistTensor, counting payload bytes and time."""
        with self.counters.timing("comm_s"):
            rows = tensor[ids]
        self.counters.bytes_recv += rows.numel() * rows.element_size()
        self.counters.add("pulled_rows", int(ids.numel()))
        return rows

    def forward_rows(self, layer: int, owned) -> torch.Tensor:
        """Publish owned rows of layer ``layer``'s input (a tensor or a chunk reader, see
        :meth:`_write_owned`) and return the halo rows."""
        self._write_owned(self.emb[layer].local_partition, owned)
        self.collective.barrier()
        if self.halo_gids.numel() == 0:
            return torch.zeros((0, self.emb[layer].shape[1]), dtype=torch.float32)
        return self.pull_rows(self.emb[layer], self.halo_gids)

    def backward_rows(self, layer: int, grad_halo: torch.Tensor) -> torch.Tensor:
        """Send halo gradients to their owners; return the gradient others sent for owned rows."""
        grad_tensor = self.grad[layer]
        if self.halo_gids.numel():
            grad_halo = grad_halo.contiguous()
            with self.counters.timing("comm_s"):
                self.kv.push(grad_tensor.kvstore_key, self.halo_gids, grad_halo)
                grad_tensor[self._flush_ids]  # ordered after the pushes on each owner
            self.counters.bytes_sent += grad_halo.numel() * grad_halo.element_size()
            self.counters.add("pushed_rows", int(self.halo_gids.numel()))
        self.collective.barrier()
        shard = grad_tensor.local_partition
        received = self._read_owned(shard).clone()
        if self._owned_local is None:
            shard[: self.num_owned] = 0
        else:
            shard[self._owned_local] = 0
        return received

    def __call__(self, layer: int, owned: torch.Tensor) -> torch.Tensor:
        return _ExchangeFunction.apply(owned, self, layer)


class TierExchange:
    """Lets the storage tier's engine move halo rows through a (SNI) halo exchange.

    The engine calls ``forward_layer(layer, read_owned_rows)`` once a layer's owned
    rows are in the tier and ``backward_layer(layer, grad_halo)`` once the layer's halo
    gradients are complete (see :mod:`storage_tier.engine`); this forwards them to the
    exchange, which publishes owned rows chunk by chunk and pulls (or is served) halo rows.
    """

    def __init__(self, exchange: HaloExchange):
        self.exchange = exchange

    def begin_step(self, step: int, training: bool) -> str:
        begin = getattr(self.exchange, "begin_step", None)
        return begin(step, training) if begin is not None else "sync"

    def forward_layer(self, layer: int, read_owned_rows) -> np.ndarray:
        return self.exchange.forward_rows(layer, read_owned_rows).numpy()

    def backward_layer(self, layer: int, grad_halo: np.ndarray) -> np.ndarray:
        return self.exchange.backward_rows(layer, torch.from_numpy(np.ascontiguousarray(grad_halo))).numpy()

    def __getattr__(self, name):  # end_epoch, close, tables, ...
        return getattr(self.exchange, name)


class _ExchangeFunction(torch.autograd.Function):
    """Autograd node: ``[owned; halo] = exchange(owned)``; backward pushes halo gradients."""

    @staticmethod
    def forward(ctx, owned, exchange: HaloExchange, layer: int):
        ctx.exchange, ctx.layer = exchange, layer
        halo = exchange.forward_rows(layer, owned)
        return torch.cat((owned, halo), 0)

    @staticmethod
    def backward(ctx, grad_src):
        ex = ctx.exchange
        grad_owned = grad_src[: ex.num_owned]
        received = ex.backward_rows(ctx.layer, grad_src[ex.num_owned:])
        return grad_owned + received, None, None


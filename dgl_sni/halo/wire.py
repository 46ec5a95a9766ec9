"""The wire of the halo exchange: one trainer's rows and gradients over DistDGL's KVStore.

Forward, a trainer writes its owned rows into its local shard of the layer's embedding
tensor (shared memory, no network), announces the write to its machine's server, and
pulls its halo rows; an owner's server answers the pull once the owner's write of this
pass is announced (:mod:`dgl_sni.halo.id_sets`). Backward, it pushes the gradients of its
halo rows to their owners' gradient shards, asks its own server for the gradients pushed
to its rows (answered once every trainer that has halo rows there pushed this round) and
zeroes the shard for the next step. The trainers do not meet per layer: one waits only for
the rows it reads. A shard is written again only after the all-reduce that ends the pass
(every pass of a trainer ends in one), so no write meets a read of the pass before.

Rows travel as float32 or, with ``bits``, as 8- or 4-bit codes (:mod:`dgl_sni.halo.quantize`),
encoded here and decoded on arrival; gradients are decoded and summed by their owners. With a
bit width chosen per row (:mod:`dgl_sni.halo.bit_choice`, the tensors' ``adaptive``), owners
write float32 rows and their servers encode each pull's rows at the widths they choose;
gradients are pushed at the widths chosen here, per owner.
:class:`HaloWire` decides nothing: the exchange tells it what to move, from the step's plan.
"""
from __future__ import annotations

import numpy as np
import torch

import dgl_sni  # noqa: F401
from dgl.distributed import DistTensor

from storage_tier.protocols import Owned

from ..metrics import Counters
from . import grad_shard
from .bit_choice import ADAPTIVE, choose_bits, decode_mixed, encode_mixed
from .id_sets import HaloIdSet, PendingPull, SetSample
from .quantize import decode, encode, row_seed
from .tensors import LayerTensors


# A publish writes only the owned rows other trainers read where they are at most 1 / PUBLISH_FEW
# of the owned rows. Gathering them costs more than it saves when they are most of them: 122k
# owned rows of 16, 8-bit, encoded and written in 3.1 ms, 95% of them gathered in 9.6 ms, 80% in
# 4.5 ms, 50% in 3.9 ms (one thread). Cora's 4 METIS parts have 15-21% of their rows read by
# the others, CiteSeer's 1-14%; the synthetic graphs nearly all.
PUBLISH_FEW = 4


class HaloWire:
    """Moves one trainer's halo rows and gradients; owned by
    :class:`~dgl_sni.halo.exchange.KVHaloExchange`.

    ``owned_gids``: global (DGL-reshuffled) ids of the trainer's owned nodes, in block row
    order; ``halo_gids``: ids of its halo nodes, in block row order after them;
    ``published``: the positions of the owned rows other trainers read: where they are few
    (:data:`PUBLISH_FEW`) a publish writes only those (``None``: every owned row).
    ``tensors``: the job's :class:`~dgl_sni.halo.tensors.LayerTensors`. ``barrier``: the
    trainers also meet after every publish (pulls by id read shards as DistTensor reads,
    which wait for no announcement; a pipelined step reads the gradients pushed at the step
    before). ``before_wait``: called before the trainer waits on the network (the exchange
    hands the planner's deferred work in, so the wait hides it). ``weights``: how many owned
    rows aggregate each halo row (the owners' per-row bit choice weighs its variance so).
    """

    def __init__(self, graph, owned_gids: torch.Tensor, halo_gids: torch.Tensor, tensors: LayerTensors,
                 collective, counters: Counters, seed: int, published: np.ndarray | None = None,
                 barrier: bool = False, before_wait=lambda: None, weights: np.ndarray | None = None):
        self.collective, self.counters, self.seed = collective, counters, seed
        self.num_owned = int(owned_gids.numel())
        self.halo_gids = halo_gids.to(torch.int64)
        self.num_halo = int(self.halo_gids.numel())
        self.policy = policy = graph.get_node_partition_policy("_N")
        local = policy.to_local(owned_gids.to(torch.int64))
        contiguous = bool(torch.equal(local, torch.arange(local.numel(), dtype=local.dtype)))
        self._owned_local = None if contiguous else local
        # the owned rows a publish writes: the ones other trainers read, where they are few
        # (None: every owned row, in one contiguous pass)
        self._published = self._published_at = None
        if published is not None and len(published) * PUBLISH_FEW <= self.num_owned:
            self._published = torch.from_numpy(np.asarray(published, dtype=np.int64))
            self._published_at = self._published if contiguous else local[self._published]
        # exact steps pull and push every halo row: their owners know them by a registered set
        self.adaptive = tensors.adaptive
        self.widths = {}  # bits -> halo rows training pulls received at that width (adaptive)
        weights = torch.as_tensor(np.asarray(weights, dtype=np.float32)) if weights is not None and self.adaptive \
            else None
        self.halo_set = HaloIdSet(next(iter(tensors.emb.values())).kvstore_key, policy, self.halo_gids,
                                  weights=weights) if tensors.emb else None
        self.tensors, self.dims = tensors, tensors.dims
        self.tier_backed = tensors.tier_root is not None
        self.barrier, self.before_wait = barrier, before_wait
        self.emb, self.grad = tensors.emb, tensors.grad
        self.step, self.bits = 0, tensors.quantize
        if tensors.pipeline:  # an earlier run of a sweep may have ended on unread pushes
            for step in (0, 1):
                for grad in tensors.for_step(step)[1].values():
                    self.take_received(grad)

    def use(self, step: int, training: bool, bits: int) -> None:
        """The tensors and bits of a pass of ``step``: the set of its parity (pipelined jobs;
        evaluation takes the other, so it meets no training write in flight) and, where an
        evaluation of a quantized job moves float32 rows, the evaluation set."""
        self.step, self.bits = step, bits
        self.emb, self.grad = self.tensors.for_step(step if training else step + 1)
        if not training and self.tensors.quantize:
            self.emb = self.tensors.eval_emb

    def owned_local_offsets(self) -> np.ndarray:
        """Shard offset of every owned row, in block row order."""
        if self._owned_local is None:
            return np.arange(self.num_owned)
        return self._owned_local.numpy()

    # ------------------------------------------------------------------ rows forward
    def _coder(self, layer: int, direction: int) -> torch.Generator:
        """The generator of this step's stochastic rounding (quantized rows)."""
        return torch.Generator().manual_seed(row_seed(self.seed, self.step, layer, self.collective.rank, direction))

    def _write_owned(self, shard: torch.Tensor, rows: Owned, layer: int) -> None:
        """Copy the owned rows into the local shard: a tensor (only the rows other trainers
        read, where ``published`` named them), or the storage tier's
        :class:`~storage_tier.protocols.OwnedRows` unit by unit; encoded where rows travel
        quantized."""
        if self.tier_backed:  # the tier wrote them already; make sure they reached storage
            rows.sync()
            return
        if self.bits and not isinstance(rows, torch.Tensor):
            raise ValueError("quantized halo rows need the owned rows in memory (not the storage tier)")
        if isinstance(rows, torch.Tensor):
            rows, chosen = rows.detach(), self._published
            # the chosen rows' bytes are those of the encode of every owned row; rows whose widths
            # are chosen per row are written as float32 (the servers encode what they send)
            if self.bits and not self.adaptive:
                rows = encode(rows, self.bits, self._coder(layer, 0),
                              rows=None if chosen is None else chosen.numpy())
            elif chosen is not None:
                rows = rows.index_select(0, chosen)
            if chosen is not None:
                shard[self._published_at] = rows
            elif self._owned_local is None:
                shard[: self.num_owned] = rows
            else:
                shard[self._owned_local] = rows
            return
        for ids, chunk in rows.units():
            ids = torch.from_numpy(np.asarray(ids, dtype=np.int64))
            target = ids if self._owned_local is None else self._owned_local[ids]
            shard[target] = torch.from_numpy(np.ascontiguousarray(chunk))

    def publish(self, layer: int, owned: Owned) -> None:
        """Write the owned rows of layer ``layer``'s input where the others pull them and
        announce the write (:meth:`~dgl_sni.halo.id_sets.HaloIdSet.announce`: their set
        pulls of it are answered once every owner wrote); with :attr:`barrier` the trainers
        also meet."""
        tensor = self.emb[layer]
        self._write_owned(tensor.local_partition, owned, layer)
        if self.halo_set is not None:
            self.halo_set.announce(tensor.kvstore_key)
        if self.barrier:
            self.collective.barrier()

    def pull(self, layer: int, ids: np.ndarray | None = None) -> np.ndarray:
        """Layer ``layer``'s halo rows now (``ids``: global ids of chosen rows, a DistTensor
        read that needs :attr:`barrier`; ``None``: every halo row, by the registered set),
        decoded, counted as training traffic."""
        if ids is None:
            if not self.num_halo:
                return np.zeros((0, self.dims[layer - 1]), dtype=np.float32)
            with self.counters.timing("comm_s"):
                pending = self._set_pull(self.emb[layer])
                rows = pending.wait()
            return self.decode(layer, self._pulled(rows, pending.nbytes))
        if not self.barrier:  # a DistTensor read of chosen rows waits for no announcement
            raise RuntimeError("halo rows pulled by id need the publish barrier (the adaptive policy sets it)")
        with self.counters.timing("comm_s"):
            rows = self.emb[layer][torch.from_numpy(ids)]
        return self.decode(layer, self._pulled(rows))

    # ------------------------------------------------------------------ sampled rows (BNS-GCN)
    def sample(self, share: float) -> SetSample:
        """The halo rows this trainer's step samples, each with probability ``share``, drawn
        from ``(seed, step, rank)`` and each owner alone (the owners' servers draw them again)."""
        if self.adaptive and self.bits:
            raise ValueError("sampled halo rows move at one width: their widths cannot be chosen per row")
        return self.halo_set.sample(share, (self.seed, self.step, self.collective.rank, 0xB5))

    def pull_sampled(self, layer: int, sample: SetSample) -> np.ndarray:
        """Every halo row of layer ``layer``: the sampled ones scaled by ``1 / share``, the others
        zero. Pulled through the registered set once their owners announced the write, as a
        sync step's rows (no ids on the wire, no barrier), decoded where they travel quantized
        (an unsampled row's zero bytes decode to zeros). Counts the rows and their bytes."""
        if not self.num_halo:
            return np.zeros((0, self.dims[layer - 1]), dtype=np.float32)
        tensor = self.emb[layer]
        with self.counters.timing("comm_s"):
            rows = self.halo_set.send_pull(tensor.kvstore_key, tensor.local_partition, sample).wait()
        picked = sample.count
        self.counters.bytes_recv += picked * rows.shape[1] * rows.element_size()
        self.counters.add("pulled_rows", picked)
        return self.decode(layer, rows) / np.float32(sample.share)

    def push_sampled(self, layer: int, grad_halo: torch.Tensor, sample: SetSample) -> None:
        """Push the gradients of the sampled halo rows (scaled by ``1 / share``, as their rows
        were; encoded where gradients travel quantized) through the registered set; their
        owners add them up and count the round (:meth:`end_round`)."""
        if not self.num_halo:
            return
        data = grad_halo.contiguous() / sample.share
        if self.bits:
            data = encode(data, self.bits, self._coder(layer, 1))
        with self.counters.timing("comm_s"):
            self.halo_set.push(self.grad[layer].kvstore_key, data, sample)
        picked = sample.count
        self.counters.bytes_sent += picked * data.shape[1] * data.element_size()
        self.counters.add("pushed_rows", picked)

    def peek(self, layer: int) -> np.ndarray:
        """Every halo row of layer ``layer`` now, not counted as training traffic (staleness
        measurement: ``measure_bytes``)."""
        with self.counters.timing("comm_s"):
            true = self.decode(layer, self._set_pull(self.emb[layer], counted=False).wait())
        self.counters.add("measure_bytes", true.nbytes)
        return true

    def send_pull(self, layer: int) -> PendingPull:
        """Send the pull of every halo row of layer ``layer`` and leave it on the wire."""
        with self.counters.timing("comm_s"):
            return self._set_pull(self.emb[layer])

    def receive(self, layer: int, pending: PendingPull) -> np.ndarray:
        """The rows of a pull :meth:`send_pull` left on the wire, counted and decoded (the
        deferred work is done first, so the wait hides it)."""
        self.before_wait()
        with self.counters.timing("comm_s"):
            rows = pending.wait()
        return self.decode(layer, self._pulled(rows, pending.nbytes))

    def complete(self, layer: int, pending: PendingPull) -> np.ndarray:
        """The rows of a pipelined step's pull, received at the end of the step (their rows
        were counted when sent, their bytes now), decoded."""
        with self.counters.timing("comm_s"):
            rows = pending.wait()
        self.counters.bytes_recv += pending.nbytes
        return self.decode(layer, rows)

    def _pulled(self, rows: torch.Tensor, nbytes: int | None = None) -> torch.Tensor:
        """Count rows that arrived from a pull (payload bytes, ``nbytes`` where they arrived
        encoded otherwise than they are now, and rows)."""
        self.counters.bytes_recv += rows.numel() * rows.element_size() if nbytes is None else nbytes
        self.counters.add("pulled_rows", int(rows.shape[0]))
        return rows

    def _set_pull(self, tensor: DistTensor, counted: bool = True) -> PendingPull:
        """Send the pull of every halo row of ``tensor``, in block row order (no ids on the
        wire); where widths are chosen per row, the owners' servers encode them and the
        answers are decoded as they arrive, their widths added to :attr:`widths` unless the
        pull is a measurement (not ``counted``)."""
        if self.adaptive and self.bits:
            dim = tensor.local_partition.shape[1]
            counts = self.widths if counted else None
            return self.halo_set.send_pull(tensor.kvstore_key, tensor.local_partition, code=ADAPTIVE,
                                           decode=lambda block, count: decode_mixed(block, count, dim, counts))
        return self.halo_set.send_pull(tensor.kvstore_key, tensor.local_partition)

    def decode(self, layer: int, pulled: torch.Tensor) -> np.ndarray:
        """Pulled rows of ``layer`` as float32 (decoded where they travel quantized; rows of
        widths chosen per row were decoded as they arrived)."""
        if self.bits and not self.adaptive:
            return decode(pulled, self.dims[layer - 1], self.bits).numpy()
        return pulled.numpy()

    # ------------------------------------------------------------------ gradients backward
    def push(self, layer: int, grad_halo: torch.Tensor, measure: bool = False) -> None:
        """Send halo gradients to their owners' shards of this step's set (not flushed);
        ``measure``: sent only to be measured against (counted as ``measure_bytes``)."""
        if not self.num_halo:
            return
        grad_halo, per_owner = grad_halo.contiguous(), None
        if self.bits and self.adaptive:  # each owner's rows at the widths chosen for them
            coder = self._coder(layer, 1)
            per_owner = lambda rows: encode_mixed(rows, choose_bits(rows), coder)  # noqa: E731
        elif self.bits:
            grad_halo = encode(grad_halo, self.bits, self._coder(layer, 1))
        with self.counters.timing("comm_s"):
            sent = self.halo_set.push(self.grad[layer].kvstore_key, grad_halo, encode=per_owner)
        if measure:
            self.counters.add("measure_bytes", sent)
            return
        self.counters.bytes_sent += sent
        self.counters.add("pushed_rows", self.num_halo)

    def end_round(self, layer: int, wait: bool = True) -> None:
        """This trainer's pushes of layer ``layer`` are done; with ``wait``, wait until every
        gradient the others push to its owned rows has arrived (after the deferred work)."""
        if not wait:
            self.halo_set.end_round(self.grad[layer].kvstore_key, wait=False)
            return
        self.before_wait()
        with self.counters.timing("comm_s"):
            self.halo_set.end_round(self.grad[layer].kvstore_key)

    def received(self, layer: int, step: int | None = None) -> torch.Tensor:
        """The gradient pushed to this worker's owned rows of layer ``layer`` (of ``step``'s
        set: the current one by default), a copy; the shard is zeroed for the next step."""
        grad = self.grad if step is None else self.tensors.for_step(step)[1]
        return self.take_received(grad[layer])

    def take_received(self, grad_tensor: DistTensor) -> torch.Tensor:
        shard = grad_tensor.local_partition
        if self._owned_local is None:
            received = grad_shard.totals(shard[: self.num_owned])
            shard[: self.num_owned] = 0
        else:
            received = grad_shard.totals(shard[self._owned_local])
            shard[self._owned_local] = 0
        return received

    def zeros(self, layer: int) -> torch.Tensor:
        """No gradient for the owned rows of layer ``layer``."""
        return torch.zeros((self.num_owned, self.dims[layer - 1]))

    def flush(self) -> None:
        """Wait until the owners applied every push sent so far."""
        with self.counters.timing("comm_s"):
            self.halo_set.flush()


class WireSource:
    """One layer's halo rows on the wire, as a :class:`~dgl_sni.halo.resolver.HaloSource`: what
    a resolver reaches the owners through on a stale step that measures staleness or
    re-pulls drifting rows (the adaptive policy)."""

    def __init__(self, wire: HaloWire, layer: int, owned: Owned):
        self.wire, self.layer, self.owned = wire, layer, owned

    def publish(self) -> None:
        self.wire.publish(self.layer, self.owned)

    def pull(self, ids: np.ndarray | None) -> np.ndarray:
        return self.wire.pull(self.layer, ids)

    def peek(self) -> np.ndarray:
        return self.wire.peek(self.layer)

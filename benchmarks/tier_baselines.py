"""Baselines the storage tier is measured against, run for real on the same storage.

(a) :class:`AutogradSpillTrainer` -- plain PyTorch autograd over the same sub-partitions
(gather with ``index_select``, ``layer_forward`` per sub-partition, ``cat``), with
*every saved tensor spilled to storage* through ``torch.autograd.graph.saved_tensors_hooks``:
the pack hook writes the tensor to a file with the tier's :class:`~storage_tier.io.IOEngine`
(same directory, same O_DIRECT path, same header/checksum), the unpack hook reads it back in
backward and deletes the file. This is the "autograd engine + OS swap" baseline of the
GriNNder analysis: autograd snapshots the gathered inputs (alpha x D per layer) and the
intermediates (~2 D) and the outputs the next op saves (D).

Byte accounting for (a): bytes written by the pack hook plus bytes read by the unpack
hook (each file once each way, 4096-byte header and padding included, exactly as the tier
counts its own files). Floating-point saved tensors only; weights (and views of them) and
integer tensors (indices, dropout keys: topology) stay in memory and are not counted, and
the layer outputs themselves stay in host memory in this baseline (not counted either) --
both favour the baseline, so its ratio to the tier is a lower bound. Tensors DGL keeps on
its autograd ``ctx`` outside ``save_for_backward`` are not hooked (also in its favour).

(a') :class:`AutogradSpillTrainer` with ``swap_budget=B`` -- the same autograd run the way
the GriNNder analysis models it ("autograd engine + OS swap"): the layer activations, the
input features and every saved tensor live in one :class:`SwapSpace`, an LRU of tensors
holding at most ``B`` bytes in memory (the RAM the tier's host cache gets) in front of the
same storage. An evicted tensor is written once (a clean copy already on storage is not
rewritten, as swap keeps a page's slot), a miss reads it back, a consumed saved tensor or
a dead activation is dropped without I/O. Gathers read their source units through it, so
the gathered inputs (alpha x D per layer), the snapshots autograd saves (alpha x D) and
the intermediates (~2 D) move through storage when they exceed RAM, and the outputs (D)
are written when evicted. Autograd's gradient buffers stay in memory (uncounted: in the
baseline's favour). Bytes: the same pwrite/preadv counters as the tier.

(b) The HongTu-style snapshot engine is the tier itself with ``mode="snapshot"``
(:func:`snapshot_trainer`): forward additionally writes every sub-partition's gathered
inputs (all layers) to storage and backward reads them instead of regathering;
intermediates are recomputed, outputs bypass to storage, same cache and budget.
Its bytes are the tier's own counters.

:func:`saved_tensor_bytes` counts what plain in-memory training
(:class:`~dgl_sni.trainers.FullGraphTrainer`) keeps for backward (no spilling): the
in-memory footprint estimate of the scale demonstration.
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

from dgl_sni.metrics import peak_rss_mb
from dgl_sni.tier_models import TierModel, tier_model
from dgl_sni.trainers import TierTrainer
from storage_tier.io import IOEngine
from storage_tier.subparts import RowSpace, SubpartitionPlan, rowspace_from_view


class SpillHooks:
    """Pack/unpack hooks that send saved float tensors to storage (or only count them).

    ``io=None`` counts without spilling. ``keep`` holds storage pointers kept in memory
    (the parameters).
    """

    def __init__(self, io: IOEngine | None, keep: set):
        self.io, self.keep = io, keep
        self.counter = 0
        self.saved_bytes = 0
        self.saved_tensors = 0
        self.kept_bytes = 0

    def _account(self, t: torch.Tensor) -> bool:
        """Count ``t``; True for a saved float tensor that is not a parameter (to spill)."""
        nbytes = t.numel() * t.element_size()
        if not t.is_floating_point() or t.untyped_storage().data_ptr() in self.keep:
            self.kept_bytes += nbytes
            return False
        self.saved_bytes += nbytes
        self.saved_tensors += 1
        return True

    def pack(self, t: torch.Tensor):
        if not self._account(t) or self.io is None:
            return ("mem", t)
        key = ("saved", 0, self.counter)
        self.counter += 1
        self.io.write_async(key, t.detach().contiguous().numpy())
        return ("disk", key)

    def unpack(self, packed):
        if packed[0] == "mem":
            return packed[1]
        arr = self.io.read(packed[1])
        self.io.delete(packed[1])
        return torch.from_numpy(arr)

    def context(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)


class SwapSpace:
    """Tensors by key in an LRU of ``budget`` bytes over an :class:`IOEngine` (OS swap).

    Owns the resident tensors and the set of keys with a copy on storage; the swap
    baseline calls :meth:`put`, :meth:`get` and :meth:`drop`.
    """

    def __init__(self, io: IOEngine, budget: int):
        from collections import OrderedDict
        self.io, self.budget = io, int(budget)
        self.resident: "OrderedDict" = OrderedDict()
        self.on_disk: set = set()
        self.resident_bytes = 0
        self.hits = self.misses = 0

    @staticmethod
    def _nbytes(t: torch.Tensor) -> int:
        return t.numel() * t.element_size()

    def _make_room(self, need: int) -> None:
        while self.resident and self.resident_bytes + need > self.budget:
            key, t = self.resident.popitem(last=False)
            self.resident_bytes -= self._nbytes(t)
            if key not in self.on_disk:  # dirty: swap it out
                self.io.write_async(key, t.numpy())
                self.on_disk.add(key)

    def _admit(self, key, t: torch.Tensor) -> None:
        self._make_room(self._nbytes(t))
        self.resident[key] = t
        self.resident_bytes += self._nbytes(t)

    def put(self, key, t: torch.Tensor) -> None:
        """A copy of a new tensor (dirty until written)."""
        self.drop(key)
        self._admit(key, t.detach().clone(memory_format=torch.contiguous_format))

    def get(self, key) -> torch.Tensor:
        """The tensor: resident (now most recent), or read back from storage."""
        t = self.resident.get(key)
        if t is not None:
            self.hits += 1
            self.resident.move_to_end(key)
            return t
        self.misses += 1
        t = torch.from_numpy(self.io.read(key))
        self._admit(key, t)
        return t

    def drop(self, key) -> None:
        """Forget ``key`` (dead data: no I/O)."""
        t = self.resident.pop(key, None)
        if t is not None:
            self.resident_bytes -= self._nbytes(t)
        if key in self.on_disk:
            self.on_disk.discard(key)
            self.io.delete(key)

    def clear(self, keep=lambda key: False) -> None:
        for key in list(self.resident) + list(self.on_disk):
            if not keep(key):
                self.drop(key)


class SwapHooks(SpillHooks):
    """Saved float tensors go into a :class:`SwapSpace` (consumed once in backward)."""

    def __init__(self, swap: SwapSpace, keep: set):
        super().__init__(None, keep)
        self.swap = swap

    def pack(self, t: torch.Tensor):
        if not self._account(t):
            return ("mem", t)
        key = ("saved", 0, self.counter)
        self.counter += 1
        self.swap.put(key, t)
        return ("swap", key)

    def unpack(self, packed):
        if packed[0] != "swap":
            return packed[1]
        t = self.swap.get(packed[1])
        self.swap.drop(packed[1])
        return t


class _Rebind(torch.autograd.Function):
    """``data``'s values as an output of ``handle`` (whose memory was swapped out)."""

    @staticmethod
    def forward(ctx, handle, data):
        return data.view_as(data)

    @staticmethod
    def backward(ctx, g):
        return g, None


class AutogradSpillTrainer:
    """Baseline (a): autograd over the tier's sub-partitions, saved tensors spilled to storage.

    Same model, same plan, same loss and Adam step as :class:`TierTrainer`; activations of
    every layer are in host memory (``torch.cat`` of the sub-partitions' outputs).
    """

    def __init__(self, cfg, view, in_dim: int, num_classes: int, num_subparts: int = 4,
                 storage_dir: str | None = None, *, model: TierModel | None = None,
                 partition: str = "auto", io_mode: str = "auto", spill: bool = True,
                 swap_budget: int | None = None):
        self.cfg = cfg
        self.model = model or tier_model(cfg, in_dim, num_classes)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr,
                                          weight_decay=cfg.weight_decay)
        rs = view if isinstance(view, RowSpace) else rowspace_from_view(view, self.model.self_loops)
        if rs.num_halo:
            raise ValueError("the autograd baseline is single-process (no halo rows)")
        self.plan = SubpartitionPlan.build(rs, num_subparts, partition, seed=cfg.seed)
        feats = rs.features
        perm = torch.from_numpy(self.plan.perm)
        feats = feats if isinstance(feats, torch.Tensor) else torch.from_numpy(np.asarray(feats))
        self.x = feats.index_select(0, perm).contiguous()
        self.num_train = float(rs.train_mask.sum())
        self.gather_idx = []
        for part in self.plan.parts:
            pieces = []
            for src in part.sources:
                lo, _ = self.plan.unit_range(src.part)
                pieces.append(torch.arange(lo, lo + self.plan.unit_rows(src.part)) if src.rows is None
                              else torch.from_numpy(src.rows + lo))
            self.gather_idx.append(torch.cat(pieces))
        self.io = IOEngine(storage_dir, io_mode) if spill or swap_budget is not None else None
        self.swap = None if swap_budget is None else SwapSpace(self.io, swap_budget)
        self._features_swapped = False
        self.step = 0

    def _swap_forward(self, L: int) -> torch.Tensor:
        """Forward with every unit of every layer in the swap space (``swap_budget``)."""
        swap, plan = self.swap, self.plan
        if not self._features_swapped:  # the input features, swapped like any data
            self._features_swapped = True
            for p in range(plan.num_parts):
                lo, _ = plan.unit_range(p)
                swap.put(("act", 0, p), self.x[lo: lo + plan.unit_rows(p)])
        handles = [None] * plan.num_parts  # layer outputs, memory released, kept for autograd
        for layer in range(L):
            outs = []
            for part in plan.parts:
                pieces = []
                for src in part.sources:
                    unit = swap.get(("act", layer, src.part))
                    if handles[src.part] is not None:
                        unit = _Rebind.apply(handles[src.part], unit)
                    pieces.append(unit if src.rows is None else unit.index_select(0, src.index))
                out = self.model.layer_forward(layer, part.block, torch.cat(pieces))
                del pieces, unit
                if layer == L - 1:
                    outs.append(out)
                    continue
                swap.put(("act", layer + 1, part.index), out)
                out.untyped_storage().resize_(0)  # the data lives in the swap space now
                outs.append(out)
            if layer < L - 1:
                handles = outs
        return torch.cat(outs)

    def train_epoch(self, epoch: int) -> dict:
        start = time.perf_counter()
        if self.io is not None:
            self.io.reset_stats()
        keep = {p.untyped_storage().data_ptr() for p in self.model.parameters()}
        hooks = SpillHooks(self.io, keep) if self.swap is None else SwapHooks(self.swap, keep)
        self.model.train()
        self.model.set_step(self.step, self.cfg.seed)
        self.optimizer.zero_grad(set_to_none=False)
        L = self.model.num_layers
        with hooks.context():
            if self.swap is not None:
                h = self._swap_forward(L)
            else:
                h = self.x
                for layer in range(L):
                    outs = []
                    for part, idx in zip(self.plan.parts, self.gather_idx):
                        outs.append(self.model.layer_forward(layer, part.block,
                                                             h.index_select(0, idx)))
                    h = torch.cat(outs)
            labels = torch.cat([p.labels for p in self.plan.parts])
            mask = torch.cat([p.train_mask for p in self.plan.parts])
            loss = F.cross_entropy(h[mask], labels[mask], reduction="sum") / self.num_train
        fwd = dict(self.io.stats) if self.io is not None else {}
        loss.backward()
        del h
        if self.swap is not None:  # this epoch's activations are dead; the features stay
            self.swap.clear(keep=lambda key: key[0] == "act" and key[1] == 0)
        self.optimizer.step()
        self.step += 1
        rec = dict(epoch=epoch, loss=loss.item(), time_s=time.perf_counter() - start,
                   saved_bytes=hooks.saved_bytes, saved_tensors=hooks.saved_tensors,
                   kept_bytes=hooks.kept_bytes, alpha=self.plan.alpha, peak_rss_mb=peak_rss_mb())
        if self.io is not None:
            self.io.wait()
            s = self.io.stats
            rec.update(storage_bytes_read=s["bytes_read"], storage_bytes_written=s["bytes_written"],
                       storage_bytes=s["bytes_read"] + s["bytes_written"],
                       fwd_bytes_read=fwd["bytes_read"], fwd_bytes_written=fwd["bytes_written"],
                       bwd_bytes_read=s["bytes_read"] - fwd["bytes_read"],
                       bwd_bytes_written=s["bytes_written"] - fwd["bytes_written"],
                       io_mode=self.io.mode)
        return rec

    def gradients(self) -> dict:
        return {k: p.grad.detach().clone() for k, p in self.model.named_parameters()
                if p.grad is not None}

    def close(self) -> None:
        if self.io is not None:
            self.io.close()


def snapshot_trainer(cfg, view, in_dim: int, num_classes: int, **kwargs) -> TierTrainer:
    """Baseline (b): the tier engine keeping every sub-partition's gathered inputs (HongTu-style)."""
    return TierTrainer(cfg, view, in_dim, num_classes, mode="snapshot", **kwargs)


def saved_tensor_bytes(trainer) -> dict:
    """What one training step of a FullGraphTrainer keeps for backward (counted, not spilled).

    Runs ``trainer.train_epoch`` under counting hooks (so it also takes a step).
    """
    keep = {p.untyped_storage().data_ptr() for p in trainer.model.parameters()}
    hooks = SpillHooks(None, keep)
    with hooks.context():
        rec = trainer.train_epoch(0)
    return dict(saved_bytes=hooks.saved_bytes, saved_tensors=hooks.saved_tensors,
                kept_bytes=hooks.kept_bytes, time_s=rec["time_s"])

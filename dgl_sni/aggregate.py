"""The layers' sum aggregation over a DGL block, ``copy_u_sum``, compiled for narrow rows.

A GCN layer sums its source rows over each destination's in-edges, forward, and the
destinations' gradients over each source's out-edges, backward. DGL's CPU kernel for it
(``dgl.ops.copy_u_sum``) first zero-fills a fresh output and then adds rows a value at a
time; for the 8- and 16-wide rows of the trainers' hidden layers the kernel of
``csrc/row_sum.hpp`` keeps a destination's sum in vector registers and prefetches the next
source rows. One thread, 125k rows and 745k random edges: 2.5 against 3.1-5.0 ms at 16
values, 1.9-2.6 against 3.0-4.8 ms at 8 (this host's medians vary by that much between
runs). The sums are float32 in edge order, as DGL's: the tests compare the bits.

:func:`copy_u_sum` takes that path for float32 CPU rows of 8 or 16 values and is DGL's
op otherwise; :func:`scaled_sum` also scales the source rows and the sums in that pass (the
halo sums' GCN norms), and drops the sums by a keyed dropout (:func:`dropped_sum`'s
backward); :func:`dropped_sum` sums the source rows dropped by their keyed dropout, given as
one word of keep bits per row, and also undropped where asked, reading each row once (a
sync step's halo rows: trained on dropped, kept undropped for the stale steps). The
compressed edges of each block are taken from DGL once (``adj_tensors``) and kept while the
block lives. Used by :mod:`dgl_sni.models` and
:mod:`dgl_sni.halo.sums`.
"""
from __future__ import annotations

import threading
import weakref

import numpy as np
import torch

import dgl_sni  # noqa: F401
import dgl.ops as dops

from . import _ops
from .dropout import KeyedMask

WIDTHS = (8, 16)  # the row widths the compiled kernel sums in registers


class _Edges:
    """One block's edges compressed both ways, as the kernel reads them (int64, padded)."""

    def __init__(self, graph):
        self.num_src, self.num_dst = graph.num_src_nodes(), graph.num_dst_nodes()
        self.in_ptr, self.in_src = self._compressed(graph, "csc")    # per destination: its sources
        self.out_ptr, self.out_dst = self._compressed(graph, "csr")  # per source: its destinations

    @staticmethod
    def _compressed(graph, fmt: str):
        indptr, indices, _ = graph.adj_tensors(fmt)
        pad = np.zeros(_ops.PREFETCH_PAD, np.int64)  # the kernel reads ahead of the last edge
        return (np.ascontiguousarray(indptr.numpy(), dtype=np.int64),
                np.concatenate((indices.numpy().astype(np.int64, copy=False), pad)))

    def sum_in(self, x: torch.Tensor, src_scale: np.ndarray | None = None,
               dst_scale: np.ndarray | None = None, dst_mask: KeyedMask | None = None) -> torch.Tensor:
        out = torch.empty(self.num_dst, x.shape[1], dtype=torch.float32)
        bits, keep = (None, 1.0) if dst_mask is None else (dst_mask.bits(x.shape[1]), dst_mask.keep)
        _ops.row_sum_into(x.contiguous().numpy(), self.in_ptr, self.in_src, out.numpy(), src_scale, dst_scale,
                          bits, keep)
        return out

    def sum_in_dropped(self, x: torch.Tensor, mask: KeyedMask, src_scale: np.ndarray | None,
                       plain: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        dropped = torch.empty(self.num_dst, x.shape[1], dtype=torch.float32)
        undropped = torch.empty_like(dropped) if plain else None
        _ops.row_dropped_sum_into(x.contiguous().numpy(), self.in_ptr, self.in_src, mask.bits(x.shape[1]),
                                  mask.keep, dropped.numpy(), None if undropped is None else undropped.numpy(),
                                  src_scale)
        return dropped, undropped

    def sum_out(self, g: torch.Tensor) -> torch.Tensor:
        out = torch.empty(self.num_src, g.shape[1], dtype=torch.float32)
        _ops.row_sum_into(g.contiguous().numpy(), self.out_ptr, self.out_dst, out.numpy())
        return out


_EDGES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # graph -> _Edges
_EDGES_LOCK = threading.Lock()  # trainers built in threads (tests, the tier's engine) share the cache


def _edges(graph) -> _Edges:
    with _EDGES_LOCK:
        edges = _EDGES.get(graph)
        if edges is None:
            edges = _EDGES[graph] = _Edges(graph)
        return edges


class _CopyUSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, edges):
        ctx.edges = edges
        return edges.sum_in(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.edges.sum_out(grad), None


def _compiled_ok(graph, x: torch.Tensor) -> bool:
    return (x.dim() == 2 and x.shape[1] in WIDTHS and x.dtype == torch.float32 and x.device.type == "cpu"
            and graph.is_block and len(graph.canonical_etypes) == 1 and x.shape[0] == graph.num_src_nodes())


def copy_u_sum(graph, x: torch.Tensor) -> torch.Tensor:
    """``out[v] = sum of x[u]`` over the in-edges ``u -> v`` of the block ``graph``
    (``[num_dst, d]``), differentiable in ``x``; ``dgl.ops.copy_u_sum``'s values."""
    if not _compiled_ok(graph, x):
        return dops.copy_u_sum(graph, x)
    edges = _edges(graph)
    if x.requires_grad and torch.is_grad_enabled():
        return _CopyUSum.apply(x, edges)
    return edges.sum_in(x)


def _column(scale: torch.Tensor | None, n: int) -> np.ndarray | None:
    """A per-row scale as the kernel reads it (float32, one value per row), or ``None``."""
    if scale is None:
        return None
    if scale.dtype != torch.float32:  # a wider scale would widen the products: keep its values
        raise TypeError(f"a row scale must be float32, got {scale.dtype}")
    if scale.numel() != n:
        raise ValueError(f"a row scale needs one value per row: {n} rows, {scale.numel()} values")
    return np.ascontiguousarray(scale.detach().numpy().reshape(n))


def scaled_sum(graph, x: torch.Tensor, src_scale: torch.Tensor | None = None,
               dst_scale: torch.Tensor | None = None, dst_mask: KeyedMask | None = None) -> torch.Tensor:
    """``copy_u_sum(graph, x * src_scale) * dst_scale`` (scales: ``[rows, 1]`` columns or
    ``None``), with the scales applied inside the compiled sum: no scaled copy of ``x`` and
    no second pass over the sums; the same values. With ``dst_mask`` (a keyed dropout of the
    destination rows) the sums are then dropped by it, in the same pass where compiled (the
    backward of :func:`dropped_sum`). Not differentiable in ``x`` where it is compiled (the
    halo sums of rows that came off the wire, and their gradients)."""
    if x.requires_grad or not _compiled_ok(graph, x) or not _maskable(dst_mask, x):
        out = copy_u_sum(graph, x if src_scale is None else x * src_scale)
        out = out if dst_scale is None else out * dst_scale
        return out if dst_mask is None else dst_mask.apply(out)
    return _edges(graph).sum_in(x, _column(src_scale, x.shape[0]), _column(dst_scale, graph.num_dst_nodes()),
                                dst_mask)


def _maskable(mask: KeyedMask | None, x: torch.Tensor) -> bool:
    """The compiled sums can apply ``mask`` to rows like ``x`` (as keep bits: p above 0)."""
    return mask is None or (mask.p > 0.0 and x.shape[1] <= _ops.BITS_MAX)


def dropped_sum(graph, x: torch.Tensor, mask: KeyedMask, src_scale: torch.Tensor | None = None,
                plain: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``scaled_sum(graph, mask.apply(x), src_scale)`` and, with ``plain``,
    ``scaled_sum(graph, x, src_scale)`` (else ``None``): where compiled, one pass over the
    edges that reads each source row once and drops it by its mask's keep bits, without
    writing the dropped rows out; the same values. Not differentiable (the backward of the
    dropped sum is ``scaled_sum`` over the reversed edges with ``dst_scale=src_scale`` and
    ``dst_mask=mask``). A sync step's halo rows: trained on dropped, summed undropped for the
    stale steps (:mod:`dgl_sni.halo.sums`)."""
    if x.requires_grad or not _compiled_ok(graph, x) or not _maskable(mask, x):
        return scaled_sum(graph, mask.apply(x), src_scale), scaled_sum(graph, x, src_scale) if plain else None
    return _edges(graph).sum_in_dropped(x, mask, _column(src_scale, x.shape[0]), plain)

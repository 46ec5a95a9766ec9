"""The layers' projections ``h @ w`` where ``w`` is narrow: :func:`project`.

A GCN layer multiplies every source row of its block by a weight of at most a few dozen
columns: on the 200k-node graph on 4 workers a partition has 50k owned rows and 122k halo
rows, and the widths are 64 -> 16 -> 16 -> 8. One thread of MKL runs these tall, narrow
shapes at a third of memory speed or less: 9-12 ms for ``x @ w`` at 172k x 64 by 16, and
5-12 ms for the weight gradient ``x.T @ g`` at 172k x 16 by 8, where one pass over the rows
takes 1-7 ms (measured on this 2-core host, one thread each). The compiled kernels of
``csrc/narrow_matmul.hpp`` make that one pass, with the output row in vector registers.

``project`` uses them when the weight has at most :data:`NARROW_MAX` columns and torch runs
on one thread (the trainers do, one per core); otherwise it is torch's ``h @ w``, which is
multi-threaded. Both are float32 with float32 sums, in a different order: they agree to
float rounding (the tests compare them with float64 products).

``project(h, w, row_scale)`` is ``(h @ w) * row_scale``, a GCN layer's projection of rows it
then scales by their degree norm, with the scaling inside the kernels forward and backward
(the same bits as the two ops, without their extra passes over the rows). With ``mask`` (a
:class:`~dgl_sni.dropout.KeyedMask`) the rows are dropped as the kernels read them, forward
and for the weight gradient, the bits of the dropout followed by the product: the 64-wide
input rows of the 500k-node graph's partitions (125k x 64) are then never written dropped.
"""
from __future__ import annotations

import torch

from . import _ops
from .dropout import KeyedMask

NARROW_MAX = _ops.NARROW_MAX


def _narrow_ok(a: torch.Tensor, w: torch.Tensor) -> bool:
    return (torch.get_num_threads() == 1 and a.dtype == torch.float32 and w.dtype == torch.float32
            and a.dim() == 2 and w.dim() == 2 and 1 <= w.shape[1] <= NARROW_MAX and a.device.type == "cpu")


def _scale_array(scale: torch.Tensor | None):
    return None if scale is None else scale.reshape(-1).contiguous().numpy()


def _kernel_matmul(a: torch.Tensor, w: torch.Tensor, in_scale=None, out_scale=None,
                   mask: KeyedMask | None = None) -> torch.Tensor:
    """``a @ w`` through the kernel (the caller checked :func:`_narrow_ok`), ``a``'s rows or
    the output's scaled by ``in_scale`` / ``out_scale``, ``a``'s rows dropped by ``mask``."""
    a, w = a.contiguous(), w.contiguous()
    out = torch.empty(a.shape[0], w.shape[1], dtype=torch.float32)
    _ops.narrow_matmul_into(a.numpy(), w.numpy(), out.numpy(), _scale_array(in_scale), _scale_array(out_scale),
                            None if mask is None else mask.kernel_args())
    return out


def _matmul(a: torch.Tensor, w: torch.Tensor, in_scale=None) -> torch.Tensor:
    """``(a * in_scale) @ w`` through the kernel where it applies."""
    if _narrow_ok(a, w):
        return _kernel_matmul(a, w, in_scale)
    return (a if in_scale is None else a * in_scale) @ w


def _outer(a: torch.Tensor, g: torch.Tensor, g_scale=None, mask: KeyedMask | None = None) -> torch.Tensor:
    """``mask(a).T @ (g * g_scale)`` through the kernel where it applies."""
    if not _narrow_ok(a, g):
        a = a if mask is None else mask.apply(a)
        return a.t() @ (g if g_scale is None else g * g_scale)
    a, g = a.contiguous(), g.contiguous()
    out = torch.empty(a.shape[1], g.shape[1], dtype=torch.float32)
    _ops.narrow_outer_into(a.numpy(), g.numpy(), out.numpy(), _scale_array(g_scale),
                           None if mask is None else mask.kernel_args())
    return out


class _Project(torch.autograd.Function):
    """``(mask(h) @ w) * row_scale`` whose backward takes the same kernels, the gradient's
    rows scaled and ``h``'s dropped inside them: ``mask((g * s) @ w.T)`` and
    ``mask(h).T @ (g * s)``."""

    @staticmethod
    def forward(ctx, h, w, row_scale, mask):
        ctx.save_for_backward(h, w, row_scale)
        ctx.mask = mask
        return _kernel_matmul(h, w, out_scale=row_scale, mask=mask)  # project() checked the shapes

    @staticmethod
    def backward(ctx, grad):
        h, w, row_scale = ctx.saved_tensors
        grad_h = None
        if ctx.needs_input_grad[0]:
            grad_h = _matmul(grad, w.t(), row_scale)
            if ctx.mask is not None:  # the dropout's backward: the same mask, in place
                keys, seed, p = ctx.mask.kernel_args()
                _ops.keyed_dropout_into(grad_h.numpy(), grad_h.numpy(), keys, seed, p)
        grad_w = _outer(h, grad, row_scale, ctx.mask) if ctx.needs_input_grad[1] else None
        return grad_h, grad_w, None, None


def project(h: torch.Tensor, w: torch.Tensor, row_scale: torch.Tensor | None = None,
            mask: KeyedMask | None = None) -> torch.Tensor:
    """``h @ w`` for rows ``h [n, k]`` and a weight ``w [k, m]``, differentiable in both; with
    ``row_scale`` (``[n, 1]``, not differentiated) ``(h @ w) * row_scale``; with ``mask`` the
    rows ``h`` keyed-dropped first (``mask.apply(h)``)."""
    if row_scale is not None and row_scale.requires_grad:
        raise ValueError("project scales rows by a constant: row_scale must not require a gradient")
    if not _narrow_ok(h, w):
        if mask is not None:
            h = mask.apply(h)
        return h @ w if row_scale is None else (h @ w) * row_scale
    if mask is not None and mask.p == 0.0:
        mask = None
    return _Project.apply(h, w, row_scale, mask)

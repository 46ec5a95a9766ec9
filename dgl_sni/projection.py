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
"""
from __future__ import annotations

import torch

from . import _ops

NARROW_MAX = _ops.NARROW_MAX


def _narrow_ok(a: torch.Tensor, w: torch.Tensor) -> bool:
    return (torch.get_num_threads() == 1 and a.dtype == torch.float32 and w.dtype == torch.float32
            and a.dim() == 2 and w.dim() == 2 and 1 <= w.shape[1] <= NARROW_MAX and a.device.type == "cpu")


def _kernel_matmul(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``a @ w`` through the kernel (the caller checked :func:`_narrow_ok`)."""
    a, w = a.contiguous(), w.contiguous()
    out = torch.empty(a.shape[0], w.shape[1], dtype=torch.float32)
    _ops.narrow_matmul_into(a.numpy(), w.numpy(), out.numpy())
    return out


def _matmul(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``a @ w`` through the kernel where it applies."""
    return _kernel_matmul(a, w) if _narrow_ok(a, w) else a @ w


def _outer(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """``a.T @ g`` through the kernel where it applies."""
    if not _narrow_ok(a, g):
        return a.t() @ g
    a, g = a.contiguous(), g.contiguous()
    out = torch.empty(a.shape[1], g.shape[1], dtype=torch.float32)
    _ops.narrow_outer_into(a.numpy(), g.numpy(), out.numpy())
    return out


class _Project(torch.autograd.Function):
    """``h @ w`` whose backward takes the same kernels: ``g @ w.T`` and ``h.T @ g``."""

    @staticmethod
    def forward(ctx, h, w):
        ctx.save_for_backward(h, w)
        return _kernel_matmul(h, w)  # project() checked the shapes

    @staticmethod
    def backward(ctx, grad):
        h, w = ctx.saved_tensors
        grad_h = _matmul(grad, w.t()) if ctx.needs_input_grad[0] else None
        grad_w = _outer(h, grad) if ctx.needs_input_grad[1] else None
        return grad_h, grad_w


def project(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``h @ w`` for rows ``h [n, k]`` and a weight ``w [k, m]``, differentiable in both."""
    if not _narrow_ok(h, w):
        return h @ w
    return _Project.apply(h, w)

"""A GCN layer's row epilogue, fused: :func:`scale_bias_act`.

After its aggregation and projection a GCN layer scales each destination row by its
degree norm, adds its bias and, below the output layer, the model applies the relu; a
layer that projects before it aggregates first adds its halo rows' sum. As torch ops that
is up to four passes over the destination rows forward, each allocating a result, and
three backward (the relu's mask, the scaling, the bias's sum), plus an autograd node per
op. On a stale step of the 500k-node graph (125k owned rows of 8 or 16 values, one
thread) those passes were about a quarter of the step's CPU time; the compiled kernels of
``csrc/row_epilogue.hpp`` make one pass each way.

Forward values are the bits of the torch ops (same float operations, same order); the
bias gradient is summed in float64 blocks where torch sums in float32, so it agrees to
float rounding. Used by :class:`~dgl_sni.layers.GCNLayer`; off the compiled path (a
float64 or non-CPU tensor) it is the torch ops.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import _ops


def _fused_ok(*tensors: torch.Tensor | None) -> bool:
    return all(t is None or (t.dtype == torch.float32 and t.device.type == "cpu") for t in tensors)


def _array(t: torch.Tensor | None):
    return None if t is None else t.contiguous().numpy()


class _ScaleBiasAct(torch.autograd.Function):
    """``act((s + t) * row_scale + bias)``; backward gives ``s`` and ``t`` the same gradient."""

    @staticmethod
    def forward(ctx, s, t, row_scale, bias, relu):
        scale = row_scale.reshape(-1).contiguous()
        out = torch.empty(s.shape, dtype=torch.float32)
        _ops.scale_bias_act_into(_array(s), _array(t), scale.numpy(), _array(bias), relu, out.numpy())
        ctx.save_for_backward(out if relu else None, scale)
        ctx.has_bias = bias is not None
        return out

    @staticmethod
    def backward(ctx, grad):
        y, scale = ctx.saved_tensors
        want_rows = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        want_bias = ctx.has_bias and ctx.needs_input_grad[3]
        if not (want_rows or want_bias):
            return None, None, None, None, None
        grad = grad.contiguous()
        g_rows = torch.empty(grad.shape, dtype=torch.float32)
        g_bias = torch.zeros(grad.shape[1], dtype=torch.float64) if want_bias else None
        _ops.scale_bias_act_backward_into(grad.numpy(), _array(y), scale.numpy(), g_rows.numpy(),
                                          None if g_bias is None else g_bias.numpy())
        return (g_rows if ctx.needs_input_grad[0] else None,
                g_rows if ctx.needs_input_grad[1] else None,
                None,
                g_bias.to(torch.float32) if want_bias else None,
                None)


def scale_bias_act(s: torch.Tensor, row_scale: torch.Tensor, bias: torch.Tensor | None = None,
                   relu: bool = False, add: torch.Tensor | None = None) -> torch.Tensor:
    """``act((s + add) * row_scale + bias)`` for rows ``s [n, d]``: ``row_scale`` ``[n, 1]``
    (a constant), ``bias`` ``[d]``, ``add`` ``[n, d]`` or ``None``, act relu or the identity.
    Differentiable in ``s``, ``add`` and ``bias``."""
    if row_scale.requires_grad:
        raise ValueError("the row epilogue scales rows by a constant: row_scale must not require a gradient")
    if add is not None and add.shape != s.shape:
        raise ValueError(f"cannot add rows of shape {tuple(add.shape)} to rows of shape {tuple(s.shape)}")
    if s.dim() != 2 or row_scale.numel() != s.shape[0]:
        raise ValueError(f"need one scale per row: rows {tuple(s.shape)}, scale {tuple(row_scale.shape)}")
    if not _fused_ok(s, add, row_scale, bias):
        h = (s if add is None else s + add) * row_scale
        if bias is not None:
            h = h + bias
        return F.relu(h) if relu else h
    return _ScaleBiasAct.apply(s, add, row_scale, bias, bool(relu))

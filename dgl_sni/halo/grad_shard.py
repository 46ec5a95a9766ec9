"""The owners' halo-gradient shards: a float64 pair per element, the sum and its rounding error.

Every worker that reads a row of another's pushes that row's gradient to the owner, where
the contributions arrive in whatever order the network gives. Each is added with an
error-free sum (``csrc/row_accumulate.hpp``): the element keeps the rounded float64 sum and,
beside it, the rounding errors, so sum + error is the total of the contributions to far
below a float32 unit (the errors' own sum rounds, at a part in 2^53 of them) and
:func:`totals` reads the same float32 row whatever their order. (A plain float64 sum is
order-free only while a row's float32 contributions lie within about 2^29 of each other;
beyond, exact runs trained twice on 4 machines differed in the loss's last digits after
77-253 epochs.) A shard is ``[rows, 2, dim]``: ``[:, 0]`` the sums, ``[:, 1]`` the errors.

The push handlers here and in :mod:`~dgl_sni.halo.quantize` and
:mod:`~dgl_sni.halo.bit_choice` add into it in the owner's server;
:class:`~dgl_sni.halo.tensors.LayerTensors` makes the shards and
:class:`~dgl_sni.halo.wire.HaloWire` reads them.
"""
from __future__ import annotations

import torch

from .. import _ops


def shape(rows: int, dim: int) -> tuple:
    """The shape of a gradient shard of ``rows`` rows of ``dim`` values."""
    return (rows, 2, dim)


def check(target: torch.Tensor, name: str, what: str) -> int:
    """Refuse a shard ``name`` that is not a contiguous float64 pair shard; return its width."""
    if target.dtype != torch.float64 or target.dim() != 3 or target.shape[1] != 2 or not target.is_contiguous():
        raise TypeError(f"{what} add into a contiguous float64 shard of (sum, error) pairs, [rows, 2, dim]; "
                        f"'{name}' is {target.dtype} of shape {tuple(target.shape)}")
    return target.shape[2]


def totals(pairs: torch.Tensor) -> torch.Tensor:
    """Float32 rows of the pairs ``[rows, 2, dim]``: each sum plus its error, rounded."""
    return (pairs[:, 0] + pairs[:, 1]).to(torch.float32)


def accumulate_push_handler(data_store, name, local_offset, data):
    """DGL push handler (runs in the owner's server): add pushed float32 rows into the pair
    shard, error-free, in one compiled pass (no sort of the offsets, as ``index_add_`` does)."""
    target = data_store[name]
    check(target, name, "halo gradients")
    if data.dtype != torch.float32 or data.dim() != 2:
        raise TypeError(f"halo gradients pushed to '{name}' must be float32 rows, got {data.dtype} "
                        f"of shape {tuple(data.shape)}")
    _ops.accumulate_float_rows_into(data.contiguous().numpy(), local_offset.to(torch.int64).contiguous().numpy(),
                                    target.numpy())

"""Low-bit halo rows: stochastic rounding to b-bit codes with a per-row offset and scale.

A row ``x`` of width ``d`` travels as ``ceil(d * b / 8)`` bytes of codes and 8 bytes of
float32 offset and scale (``x ~ offset + code * scale``): for ``d = 16`` that is 24 bytes at
8 bits, 16 at 4 bits and 12 at 2 bits (a width per row: :mod:`dgl_sni.halo.bit_choice`)
instead of 64. Codes are rounded stochastically, ``floor(v + u)``
with ``u`` uniform in [0, 1), so a decoded row is an unbiased estimate of the row (as in
AdaQP, MLSys 2023). The uniforms are a window of one table of 4M uniforms, at an offset drawn
from a generator seeded by (seed, step, layer, worker, direction), so the codes repeat exactly;
an encode of more than 4M values takes a window per 4M (drawing them instead cost a 500k-node
partition's trainer 6% of its stale epochs).
The codec runs in one pass per row (``dgl_sni/csrc/row_codec.hpp``; rows of 8 or 16
values four at a time); its float operations are those of a torch formulation in the same
order, which the tests keep as the reference. 245k rows of 16 (the halo gradient rows one
trainer of the 200k-node graph pushes in a sync epoch) took 15.8 ms to encode a value at a
time and 4.4 ms four at a time (one thread), about what reading the rows and the uniforms
costs.

Used by :class:`~dgl_sni.halo.exchange.KVHaloExchange` with ``--quantize BITS``: owners
publish their rows encoded into a ``uint8`` DistTensor, pullers decode; halo gradients are
pushed encoded and :func:`quantized_accumulate_handler` (in the owner's server) decodes them
and adds them up exactly (:mod:`~dgl_sni.halo.grad_shard`).
"""
from __future__ import annotations

import numpy as np
import torch

from .. import _ops
from . import grad_shard

BITS = (2, 4, 8)
HEADER = 8  # float32 offset and scale
_DITHER_SIZE = 1 << 22
_dither = None  # uniforms in [0, 1), drawn once; each encode reads a window at a seeded offset


def _dither_for(numel: int, generator: torch.Generator) -> torch.Tensor:
    """``numel`` uniforms for one encode: a window of the shared table at an offset drawn
    from ``generator`` (a draw per value would cost more than the rest of the encode; only a
    single row wider than the table gets them)."""
    global _dither
    if _dither is None:
        _dither = torch.rand(_DITHER_SIZE, generator=torch.Generator().manual_seed(0x5EED))
    if numel > _DITHER_SIZE:
        return torch.rand(numel, generator=generator)
    start = int(torch.randint(0, _DITHER_SIZE - numel + 1, (1,), generator=generator))
    return _dither[start: start + numel]


def packed_width(dim: int, bits: int) -> int:
    """Bytes per encoded row of width ``dim``."""
    if bits not in BITS:
        raise ValueError(f"the row codec takes 2, 4 or 8 bits, got {bits}")
    return (dim * bits + 7) // 8 + HEADER


def row_seed(seed: int, step: int, layer: int, rank: int, direction: int) -> int:
    """The generator seed of one encode (direction 0: embeddings, 1: gradients)."""
    return ((((seed * 1_000_003 + step) * 1009 + layer) * 4099 + rank) * 3 + direction) % (2 ** 63)


def encode(x: torch.Tensor, bits: int, generator: torch.Generator,
           rows: np.ndarray | None = None) -> torch.Tensor:
    """Rows ``x`` (float, ``[n, d]``) as ``uint8 [n, packed_width(d, bits)]`` (one pass per
    row in ``dgl_sni._ops``). ``rows`` (sorted indices into ``x``): encode only those rows,
    as ``[len(rows), width]``, each with the uniforms it has in the encode of all ``n`` rows,
    so its bytes are the ones the full encode gives it. The kernel reads the chosen rows and
    their uniforms in place (130 of 700 rows of 16: 21 us, against 60 us when they were first
    gathered into copies; one thread, idle host)."""
    x = x.detach().to(torch.float32).contiguous()
    n, d = x.shape
    per = max(1, _DITHER_SIZE // d)  # rows per window of the table: more values take more windows
    if rows is not None:
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        if n > per and rows.size and (rows[0] < 0 or rows[-1] >= n or np.any(np.diff(rows) <= 0)):
            raise ValueError(f"rows to encode must be sorted distinct indices below {n}")
    out = torch.empty((n if rows is None else rows.size, packed_width(d, bits)), dtype=torch.uint8)
    xs, outs = x.numpy(), out.numpy()
    done = 0
    for a in range(0, n, per):
        b = min(n, a + per)
        dither = _dither_for((b - a) * d, generator).numpy()
        if rows is None:
            _ops.encode_rows_into(xs[a:b], dither, outs[a:b], bits)
            continue
        # one window's chosen rows, encoded in place from x (the kernel checks them)
        lo, hi = (0, rows.size) if n <= per else np.searchsorted(rows, (a, b))
        if hi > lo:
            _ops.encode_rows_into(xs[a:b], dither, outs[done: done + hi - lo], bits,
                                  rows=rows[lo:hi] if a == 0 else rows[lo:hi] - a)
        done += hi - lo
    return out


def decode(packed: torch.Tensor, dim: int, bits: int) -> torch.Tensor:
    """The rows of :func:`encode`'s output, as ``float32 [n, dim]``."""
    _check_width(packed, dim, bits)
    out = torch.empty((packed.shape[0], dim), dtype=torch.float32)
    if packed.shape[0]:
        _ops.decode_rows_into(packed.contiguous().numpy(), out.numpy(), bits)
    return out


def _check_width(packed: torch.Tensor, dim: int, bits: int) -> None:
    if packed.shape[1] != packed_width(dim, bits):
        raise ValueError(f"encoded rows are {packed.shape[1]} bytes wide; {dim} values at {bits} bits take "
                         f"{packed_width(dim, bits)}")


def bits_of(width: int, dim: int) -> int:
    """The bit width an encoded row of ``width`` bytes and ``dim`` values was made with."""
    for bits in BITS:
        if packed_width(dim, bits) == width:
            return bits
    raise ValueError(f"no bit width encodes {dim} values in {width} bytes")


def quantized_accumulate_handler(data_store, name, local_offset, data):
    """DGL push handler (runs in the owner's server): decode pushed rows and add them into the
    pair shard (:mod:`~dgl_sni.halo.grad_shard`), error-free: a decoded value has up to about
    32 significant bits, and three or more of them summed in plain float64 would depend, in
    the last bit, on the order the pushes arrive in."""
    target = data_store[name]
    dim = grad_shard.check(target, name, "quantized gradients")
    _ops.accumulate_rows_into(data.contiguous().numpy(), local_offset.to(torch.int64).contiguous().numpy(),
                              target.numpy(), bits_of(data.shape[1], dim))

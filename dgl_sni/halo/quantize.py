"""Low-bit halo rows: stochastic rounding to b-bit codes with a per-row offset and scale.

A row ``x`` of width ``d`` travels as ``ceil(d * b / 8)`` bytes of codes and 8 bytes of
float32 offset and scale (``x ~ offset + code * scale``): for ``d = 16`` that is 24 bytes at
8 bits and 16 at 4 bits instead of 64. Codes are rounded stochastically, ``floor(v + u)``
with ``u`` uniform in [0, 1), so a decoded row is an unbiased estimate of the row (as in
AdaQP, MLSys 2023). The uniforms are a window of one table of 4M uniforms, at an offset drawn
from a generator seeded by (seed, step, layer, worker, direction), so a run repeats exactly.

Used by :class:`~dgl_sni.halo.exchange.KVHaloExchange` with ``--quantize BITS``: owners
publish their rows encoded into a ``uint8`` DistTensor, pullers decode; halo gradients are
pushed encoded and :func:`quantized_accumulate_handler` (in the owner's server) decodes them
and adds them up in float64.
"""
from __future__ import annotations

import torch

BITS = (4, 8)
HEADER = 8  # float32 offset and scale
_DITHER_SIZE = 1 << 22
_dither = None  # uniforms in [0, 1), drawn once; each encode reads a window at a seeded offset


def _dither_for(numel: int, generator: torch.Generator) -> torch.Tensor:
    """``numel`` uniforms for one encode: a window of the shared table at an offset drawn
    from ``generator`` (a draw per value would cost more than the rest of the encode)."""
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
        raise ValueError(f"--quantize must be one of {', '.join(map(str, BITS))} bits (or 0: off), got {bits}")
    return (dim * bits + 7) // 8 + HEADER


def row_seed(seed: int, step: int, layer: int, rank: int, direction: int) -> int:
    """The generator seed of one encode (direction 0: embeddings, 1: gradients)."""
    return ((((seed * 1_000_003 + step) * 1009 + layer) * 4099 + rank) * 3 + direction) % (2 ** 63)


def encode(x: torch.Tensor, bits: int, generator: torch.Generator) -> torch.Tensor:
    """Rows ``x`` (float, ``[n, d]``) as ``uint8 [n, packed_width(d, bits)]``."""
    x = x.detach().to(torch.float32)
    n, d = x.shape
    width = packed_width(d, bits)
    out = torch.empty((n, width), dtype=torch.uint8)
    if n == 0:
        return out
    levels = (1 << bits) - 1
    cols = x.t().contiguous()  # row minima and maxima are vectorised reductions over columns
    lo, hi = cols.min(0).values, cols.max(0).values
    scale = (hi - lo) / levels
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    v = (x - lo[:, None]) / safe[:, None]
    v.add_(_dither_for(v.numel(), generator).view(v.shape))
    codes = v.to(torch.int32).clamp_(max=levels).to(torch.uint8)  # v >= 0: truncation is floor
    if bits == 4:
        if d % 2:
            codes = torch.cat((codes, torch.zeros((n, 1), dtype=torch.uint8)), 1)
        codes = codes[:, 0::2] | (codes[:, 1::2] << 4)
    out[:, : width - HEADER] = codes
    out[:, width - HEADER:] = torch.stack((lo, scale), 1).contiguous().view(torch.uint8)
    return out


def decode(packed: torch.Tensor, dim: int, bits: int, dtype=torch.float32) -> torch.Tensor:
    """The rows of :func:`encode`'s output, as ``dtype [n, dim]``."""
    n, width = packed.shape
    if width != packed_width(dim, bits):
        raise ValueError(f"encoded rows are {width} bytes wide; {dim} values at {bits} bits take "
                         f"{packed_width(dim, bits)}")
    header = packed[:, width - HEADER:].contiguous().view(torch.float32)
    codes = packed[:, : width - HEADER]
    if bits == 4:
        codes = torch.stack((codes & 0xF, codes >> 4), 2).reshape(n, -1)[:, :dim]
    return header[:, :1].to(dtype) + codes.to(dtype) * header[:, 1:].to(dtype)


def bits_of(width: int, dim: int) -> int:
    """The bit width an encoded row of ``width`` bytes and ``dim`` values was made with."""
    for bits in BITS:
        if packed_width(dim, bits) == width:
            return bits
    raise ValueError(f"no bit width encodes {dim} values in {width} bytes")


def quantized_accumulate_handler(data_store, name, local_offset, data):
    """DGL push handler (runs in the owner's server): decode pushed rows, add them in the
    shard's dtype (float64: the sum does not depend on the order pushes arrive in)."""
    target = data_store[name]
    dim = target.shape[1]
    rows = decode(data, dim, bits_of(data.shape[1], dim), dtype=target.dtype)
    target.index_add_(0, local_offset, rows)

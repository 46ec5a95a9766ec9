"""A bit width per halo row of each message, as AdaQP chooses them (``--bit-choice adaptive``).

AdaQP (MLSys 2023) quantizes each boundary row it sends to 2, 4 or 8 bits, choosing the
widths of a message's rows so as to trade the variance stochastic rounding adds against the
time the message takes: minimise ``lam * V' + (1 - lam) * T'``, where ``V'`` is the
message's variance and ``T'`` its time, each normalised between its values at all-2-bit and
all-8-bit (AdaQP's "nadir-utopia" normalisation; ``lam`` 0.5, its default). A row ``i`` of
width ``d`` rounded at ``b`` bits has variance at most ``d * r_i^2 / (4 (2^b - 1)^2)`` (``r_i``
its range), weighted by how much it weighs in its reader's aggregations (AdaQP: the square
of its aggregation coefficient; here ``w_i``, how many of the reader's rows aggregate it; 1
for gradients, which their owner adds once); a message's time grows with its bytes. With one link per message both objectives are sums over rows, so
the minimum takes each row's best width on its own (:func:`choose_bits`), a closed form
where AdaQP solves an integer program over all links at once (its time is the slowest
link's of each round) every few epochs; here each message is chosen from the rows it
carries, at every step.

A message of ``n`` rows travels as one ``uint8`` block (:func:`encode_mixed`): the widths, 2
bits per row (``ceil(n / 4)`` bytes), then the 8-bit rows, the 4-bit rows and the 2-bit
rows, each group in message order, each row as :mod:`dgl_sni.halo.quantize` encodes it
(``dgl_sni/csrc/row_blocks.hpp``, one pass over the rows; 80k rows of 16: the choice 1.5 ms,
the encode 2 ms, one thread). Owners'
servers encode the rows they send (:class:`~dgl_sni.halo.id_sets.PullSetRequest`, code
:data:`ADAPTIVE`); readers encode the gradients they push, which the owners' servers add up
(:func:`mixed_accumulate_handler`).
"""
from __future__ import annotations

import numpy as np
import torch

from .. import _ops
from . import grad_shard
from .quantize import _dither_for, packed_width

ADAPTIVE = 1  # a set pull's code: the owner's server encodes the rows at widths it chooses
LAMBDA = 0.5  # AdaQP's default weight of the variance against the time
_BITS = np.array([2, 4, 8], dtype=np.uint8)  # by width code


def choose_bits(x: torch.Tensor, weights: torch.Tensor | None = None, lam: float = LAMBDA) -> np.ndarray:
    """The bit width (2, 4 or 8) of each row of one message ``x`` (float, ``[n, d]``) that
    minimises ``lam`` times its normalised variance plus ``1 - lam`` times its normalised bytes
    (``weights``: each row's variance weight, 1 where ``None``). Each width's cost is a line in
    the row's score ``s`` (variance weight times ``d r^2 / 4``), so the best width is 2 up to one
    threshold of ``s``, 4 up to another, then 8 (4 never, where the thresholds cross)."""
    n, d = x.shape
    if n == 0:
        return np.empty(0, dtype=np.uint8)
    lo, hi = torch.aminmax(x.detach(), dim=1)
    span = (hi - lo).to(torch.float64).numpy()
    score = span * span * (d / 4.0)
    if weights is not None:
        score = score * weights.to(torch.float64).numpy()
    unit = 1.0 / (2.0 ** _BITS.astype(np.float64) - 1.0) ** 2  # variance per unit score at each width
    size = np.array([packed_width(d, int(b)) for b in _BITS], dtype=np.float64)
    v_span = float(score.sum()) * (unit[0] - unit[2])
    if not np.isfinite(v_span) or v_span <= 0:  # constant rows: no width adds variance
        return np.full(n, 2, dtype=np.uint8)
    if lam <= 0.0:
        return np.full(n, 2, dtype=np.uint8)
    if lam >= 1.0:
        return np.full(n, 8, dtype=np.uint8)
    t_span = n * (size[2] - size[0])
    # cost_b(s) = a unit_b s + c_b: width b' > b is better where s > (c_b' - c_b) / (a (unit_b - unit_b'))
    a, c = lam / v_span, (1.0 - lam) * size / t_span
    above = lambda i, j: (c[j] - c[i]) / (a * (unit[i] - unit[j]))  # noqa: E731
    t24, t48 = above(0, 1), above(1, 2)
    if t24 < t48:
        codes = (score > t24).astype(np.uint8) + (score > t48)
    else:
        codes = (score > above(0, 2)).astype(np.uint8) * 2
    return _BITS[codes]


def _codes(bits: np.ndarray, n: int) -> np.ndarray:
    bits = np.asarray(bits)
    codes = np.searchsorted(_BITS, bits).astype(np.uint8)
    if bits.shape != (n,) or not np.array_equal(_BITS[np.minimum(codes, 2)], bits):
        raise ValueError(f"a message of {n} rows needs one width of 2, 4 or 8 bits per row")
    return codes


def mixed_size(bits: np.ndarray, d: int) -> int:
    """Bytes of the block :func:`encode_mixed` makes of rows of width ``d`` at ``bits``."""
    bits = np.asarray(bits)
    return (len(bits) + 3) // 4 + sum(int((bits == b).sum()) * packed_width(d, int(b)) for b in _BITS)


def encode_mixed(x: torch.Tensor, bits: np.ndarray, generator: torch.Generator) -> torch.Tensor:
    """Rows ``x`` (``[n, d]``) at their ``bits`` as one ``uint8`` block (the layout above),
    rounded with one window of uniforms for the message (drawn from ``generator``)."""
    x = x.detach().to(torch.float32).contiguous()
    n, d = x.shape
    codes = _codes(bits, n)
    out = np.empty(mixed_size(bits, d), dtype=np.uint8)
    dither = _dither_for(n * d, generator).numpy()
    _ops.encode_block_into(x.numpy(), dither, codes, out)
    return torch.from_numpy(out)


def block_bits(block: torch.Tensor, n: int) -> np.ndarray:
    """The width of each of the ``n`` rows of a block (as its first bytes name them)."""
    raw = block.numpy() if isinstance(block, torch.Tensor) else np.asarray(block)
    head = raw[: (n + 3) // 4]
    codes = np.stack([(head >> s) & 3 for s in (0, 2, 4, 6)], 1).reshape(-1)[:n]
    return _BITS[np.minimum(codes, 2)]


def decode_mixed(block: torch.Tensor, n: int, d: int, counts: dict | None = None) -> torch.Tensor:
    """The ``n`` rows of width ``d`` of an :func:`encode_mixed` block, as ``float32 [n, d]``
    (``counts``: adds the number of rows at each width)."""
    out = np.empty((n, d), dtype=np.float32)
    raw = block.contiguous().numpy()
    _ops.decode_block_into(raw, out)
    if counts is not None:
        for b, k in zip(_BITS, np.bincount(np.searchsorted(_BITS, block_bits(raw, n)), minlength=3)):
            counts[int(b)] = counts.get(int(b), 0) + int(k)
    return torch.from_numpy(out)


def mixed_accumulate_handler(data_store, name, local_offset, data):
    """DGL push handler (runs in the owner's server): decode a block of mixed-width gradient
    rows and add them into the pair shard, error-free (as
    :func:`~dgl_sni.halo.quantize.quantized_accumulate_handler`)."""
    target = data_store[name]
    grad_shard.check(target, name, "mixed-width gradients")
    _ops.accumulate_block_into(data.contiguous().numpy(), local_offset.to(torch.int64).contiguous().numpy(),
                               target.numpy())

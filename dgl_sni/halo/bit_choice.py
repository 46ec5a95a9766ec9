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
rows, each group in message order and encoded by :mod:`dgl_sni.halo.quantize`. Owners'
servers encode the rows they send (:class:`~dgl_sni.halo.id_sets.PullSetRequest`, code
:data:`ADAPTIVE`); readers encode the gradients they push, which the owners' servers add up
(:func:`mixed_accumulate_handler`).
"""
from __future__ import annotations

import numpy as np
import torch

from .. import _ops
from .quantize import encode, packed_width

ADAPTIVE = 1  # a set pull's code: the owner's server encodes the rows at widths it chooses
LAMBDA = 0.5  # AdaQP's default weight of the variance against the time
WIDTHS = (8, 4, 2)  # the groups of a message, in order
_CODE = {2: 0, 4: 1, 8: 2}
_BITS = np.array([2, 4, 8], dtype=np.uint8)


def choose_bits(x: torch.Tensor, weights: torch.Tensor | None = None, lam: float = LAMBDA) -> np.ndarray:
    """The bit width (2, 4 or 8) of each row of one message ``x`` (float, ``[n, d]``) that
    minimises ``lam`` times its normalised variance plus ``1 - lam`` times its normalised bytes
    (``weights``: each row's variance weight, 1 where ``None``)."""
    n, d = x.shape
    if n == 0:
        return np.empty(0, dtype=np.uint8)
    span = (x.max(1).values - x.min(1).values).to(torch.float64)
    score = span * span * (d / 4.0)
    if weights is not None:
        score = score * weights.to(torch.float64)
    score = score.numpy()
    unit = 1.0 / (2.0 ** _BITS.astype(np.float64) - 1.0) ** 2  # variance per unit score at each width
    size = np.array([packed_width(d, int(b)) for b in _BITS], dtype=np.float64)
    v_span = score.sum() * (unit[0] - unit[-1])
    if not np.isfinite(v_span) or v_span <= 0:  # constant rows: no width adds variance
        return np.full(n, 2, dtype=np.uint8)
    t_span = n * (size[-1] - size[0])
    cost = lam * np.outer(score, unit) / v_span + (1.0 - lam) * size[None, :] / t_span
    return _BITS[cost.argmin(1)]


def mixed_size(bits: np.ndarray, d: int) -> int:
    """Bytes of the block :func:`encode_mixed` makes of rows of width ``d`` at ``bits``."""
    counts = {b: int((bits == b).sum()) for b in WIDTHS}
    return (len(bits) + 3) // 4 + sum(counts[b] * packed_width(d, b) for b in WIDTHS)


def encode_mixed(x: torch.Tensor, bits: np.ndarray, generator: torch.Generator) -> torch.Tensor:
    """Rows ``x`` (``[n, d]``) at their ``bits`` as one ``uint8`` block (the layout above)."""
    x = x.detach().to(torch.float32).contiguous()
    n, d = x.shape
    bits = np.asarray(bits, dtype=np.uint8)
    if bits.shape != (n,) or not np.isin(bits, _BITS).all():
        raise ValueError(f"a message of {n} rows needs one width of 2, 4 or 8 bits per row")
    codes = np.zeros(((n + 3) // 4) * 4, dtype=np.uint8)
    codes[:n] = np.searchsorted(_BITS, bits)
    head = codes[0::4] | (codes[1::4] << 2) | (codes[2::4] << 4) | (codes[3::4] << 6)
    parts = [torch.from_numpy(head)]
    for b in WIDTHS:
        rows = np.flatnonzero(bits == b)
        if rows.size:
            parts.append(encode(x, b, generator, rows=rows).reshape(-1))
    return torch.cat(parts)


def _groups(block: torch.Tensor, n: int, d: int):
    """The widths of a block's ``n`` rows and, per width, the positions of its rows and their codes."""
    raw = block.numpy() if isinstance(block, torch.Tensor) else np.asarray(block)
    head = (n + 3) // 4
    if raw.ndim != 1 or raw.size < head:
        raise ValueError(f"a block of {n} mixed-width rows needs at least {head} bytes of widths, got {raw.size}")
    codes = np.stack([(raw[:head] >> s) & 3 for s in (0, 2, 4, 6)], 1).reshape(-1)[:n]
    if (codes > 2).any():
        raise ValueError("a mixed-width block names a width other than 2, 4 or 8 bits")
    bits = _BITS[codes]
    if raw.size != mixed_size(bits, d):
        raise ValueError(f"a block of {n} rows of {d} values at the widths it names takes "
                         f"{mixed_size(bits, d)} bytes, got {raw.size}")
    at, out = head, []
    for b in WIDTHS:
        rows = np.flatnonzero(bits == b)
        width = packed_width(d, b)
        out.append((b, rows, raw[at: at + rows.size * width].reshape(rows.size, width)))
        at += rows.size * width
    return bits, out


def decode_mixed(block: torch.Tensor, n: int, d: int, counts: dict | None = None) -> torch.Tensor:
    """The ``n`` rows of width ``d`` of an :func:`encode_mixed` block, as ``float32 [n, d]``
    (``counts``: adds the number of rows at each width)."""
    out = np.empty((n, d), dtype=np.float32)
    for b, rows, packed in _groups(block, n, d)[1]:
        if counts is not None:
            counts[b] = counts.get(b, 0) + int(rows.size)
        if rows.size:
            part = np.empty((rows.size, d), dtype=np.float32)
            _ops.decode_rows_into(np.ascontiguousarray(packed), part, b)
            out[rows] = part
    return torch.from_numpy(out)


def block_bits(block: torch.Tensor, n: int, d: int) -> np.ndarray:
    """The width of each of the ``n`` rows of a block."""
    return _groups(block, n, d)[0]


def mixed_accumulate_handler(data_store, name, local_offset, data):
    """DGL push handler (runs in the owner's server): decode a block of mixed-width gradient
    rows and add them into the float64 shard (as :func:`~dgl_sni.halo.quantize.quantized_accumulate_handler`)."""
    target = data_store[name]
    if target.dtype != torch.float64 or not target.is_contiguous():
        raise TypeError(f"mixed-width gradients add into a contiguous float64 shard; '{name}' is {target.dtype}")
    offsets = local_offset.to(torch.int64).contiguous().numpy()
    for b, rows, packed in _groups(data.contiguous(), offsets.size, target.shape[1])[1]:
        if rows.size:
            _ops.accumulate_rows_into(np.ascontiguousarray(packed), np.ascontiguousarray(offsets[rows]),
                                      target.numpy(), b)

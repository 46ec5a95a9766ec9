"""Low-bit halo rows: widths, error bounds, unbiased rounding, repeatability, the push handler."""
import numpy as np
import pytest
import torch

from dgl_sni import _ops
from dgl_sni.halo.quantize import (BITS, _dither_for, decode, encode, packed_width, quantized_accumulate_handler,
                                   row_seed)
from tests.dgl_sni.halo import quantize_ref


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("dim", [16, 7])
def test_rows_come_back_within_one_step_of_their_scale(bits, dim):
    x = torch.randn(500, dim) * torch.logspace(-6, 2, 500)[:, None]  # gradients to activations
    packed = encode(x, bits, _gen())
    assert packed.dtype == torch.uint8 and packed.shape == (500, packed_width(dim, bits))
    y = decode(packed, dim, bits)
    step = (x.max(1).values - x.min(1).values) / ((1 << bits) - 1)
    assert ((y - x).abs() <= step[:, None] * (1 + 1e-5) + 1e-12).all()
    assert packed_width(16, 8) == 24 and packed_width(16, 4) == 16  # against 64 bytes of float32


@pytest.mark.parametrize("bits", BITS)
def test_rounding_is_unbiased_and_repeatable(bits):
    x = torch.rand(1, 16).repeat(20000, 1)
    y = decode(encode(x, bits, _gen(1)), 16, bits)
    step = float((x[0].max() - x[0].min()) / ((1 << bits) - 1))
    assert (y.mean(0) - x[0]).abs().max() < 0.02 * step  # the mean of many roundings is the row
    assert torch.equal(encode(x, bits, _gen(1)), encode(x, bits, _gen(1)))
    assert not torch.equal(encode(x, bits, _gen(1)), encode(x, bits, _gen(2)))
    assert row_seed(0, 3, 1, 0, 0) != row_seed(0, 3, 1, 1, 0) != row_seed(0, 3, 2, 0, 0)


def test_constant_rows_and_empty_input_are_exact():
    x = torch.full((3, 16), 2.5)
    assert torch.equal(decode(encode(x, 8, _gen()), 16, 8), x)
    assert encode(torch.zeros((0, 16)), 4, _gen()).shape == (0, packed_width(16, 4))


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("dim", [16, 8, 7, 1, 256])
def test_the_compiled_codec_equals_the_torch_reference_to_the_bit(bits, dim):
    x = torch.randn(300, dim) * torch.logspace(-8, 3, 300)[:, None]
    x[7] = 0.0  # a constant row: scale 0
    x[8, :] = 3.25
    packed = encode(x, bits, _gen(5))
    assert torch.equal(packed, quantize_ref.encode(x, bits, _dither_for(x.numel(), _gen(5))))
    assert torch.equal(decode(packed, dim, bits), quantize_ref.decode(packed, dim, bits))


@pytest.mark.parametrize("bits", BITS)
def test_an_encode_larger_than_the_dither_table_takes_one_window_per_table(monkeypatch, bits):
    import dgl_sni.halo.quantize as quantize
    monkeypatch.setattr(quantize, "_DITHER_SIZE", 64)  # 4 rows of 16 per window
    monkeypatch.setattr(quantize, "_dither", torch.rand(64, generator=_gen(1)))  # a table of that size
    x = torch.randn(50, 16)
    packed = encode(x, bits, _gen(5))
    gen, parts = _gen(5), []
    for a in range(0, 50, 4):
        rows = x[a:a + 4]
        parts.append(quantize_ref.encode(rows, bits, _dither_for(rows.numel(), gen)))
    assert torch.equal(packed, torch.cat(parts))
    assert (decode(packed, 16, bits) - x).abs().max() <= (x.max(1).values - x.min(1).values).max() / (2 ** bits - 1)


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("table", [None, 64])  # the real table; one of 4 rows of 16 per window
def test_chosen_rows_are_encoded_as_in_the_encode_of_every_row(monkeypatch, bits, table):
    import dgl_sni.halo.quantize as quantize
    if table:
        monkeypatch.setattr(quantize, "_DITHER_SIZE", table)
        monkeypatch.setattr(quantize, "_dither", torch.rand(table, generator=_gen(1)))
    x = torch.randn(50, 16)
    every = encode(x, bits, _gen(5))
    for rows in (np.array([0, 3, 4, 5, 17, 49]), np.arange(50), np.array([], dtype=np.int64)):
        chosen = encode(x, bits, _gen(5), rows=rows)
        assert torch.equal(chosen, every[torch.from_numpy(rows)])
    for bad in (np.array([3, 3]), np.array([5, 2]), np.array([50]), np.array([-1, 2])):
        with pytest.raises(ValueError, match="sorted distinct indices below 50"):
            encode(x, bits, _gen(5), rows=bad)


@pytest.mark.parametrize("bits", BITS)
def test_push_handler_decodes_and_adds_in_float64(bits):
    store = {"g": torch.zeros((5, 2, 16), dtype=torch.float64)}
    x = torch.randn(2, 16)
    packed = encode(x, bits, _gen())
    quantized_accumulate_handler(store, "g", torch.tensor([1, 3]), packed)
    quantized_accumulate_handler(store, "g", torch.tensor([1, 3]), packed)
    expect = quantize_ref.decode(packed, 16, bits, dtype=torch.float64)
    assert torch.equal(store["g"][[1, 3], 0], expect + expect)  # doubling is exact: no error kept
    assert store["g"][:, 1].abs().sum() == 0 and store["g"][[0, 2, 4]].abs().sum() == 0


def test_the_codec_names_a_bad_input():
    x = np.zeros((4, 16), np.float32)
    with pytest.raises(ValueError, match="do not hold 4 rows of 16 values at 8 bits"):
        _ops.encode_rows_into(x, np.zeros(64, np.float32), np.zeros((4, 16), np.uint8), 8)
    with pytest.raises(ValueError, match="need 64 uniforms"):
        _ops.encode_rows_into(x, np.zeros(10, np.float32), np.zeros((4, 24), np.uint8), 8)
    with pytest.raises(TypeError, match="rows must be float32"):
        _ops.encode_rows_into(x.astype(np.float64), np.zeros(64, np.float32), np.zeros((4, 24), np.uint8), 8)
    with pytest.raises(ValueError, match="rows to encode must be 1-d"):
        _ops.encode_rows_into(x, np.zeros(64, np.float32), np.zeros((1, 24), np.uint8), 8, rows=np.zeros((1, 1), np.int64))
    with pytest.raises(TypeError, match="rows to encode must be int64"):
        _ops.encode_rows_into(x, np.zeros(64, np.float32), np.zeros((1, 24), np.uint8), 8, rows=np.zeros(1, np.int32))
    with pytest.raises(ValueError, match="do not hold 2 rows"):
        _ops.encode_rows_into(x, np.zeros(64, np.float32), np.zeros((1, 24), np.uint8), 8, rows=np.array([0, 1]))
    with pytest.raises(IndexError, match=r"offsets must lie in \[0, 5\)"):
        _ops.accumulate_rows_into(np.zeros((1, 24), np.uint8), np.array([5]), np.zeros((5, 2, 16)), 8)
    with pytest.raises(ValueError, match=r"shard of \(sum, error\) pairs"):
        _ops.accumulate_rows_into(np.zeros((1, 24), np.uint8), np.array([1]), np.zeros((5, 16)), 8)
    with pytest.raises(TypeError, match="contiguous float64 shard of"):
        quantized_accumulate_handler({"g": torch.zeros((5, 2, 16))}, "g", torch.tensor([1]),
                                     encode(torch.randn(1, 16), 8, _gen()))


def test_a_bad_bit_width_is_refused():
    with pytest.raises(ValueError, match="the row codec takes 2, 4 or 8 bits, got 3"):
        packed_width(16, 3)
    with pytest.raises(ValueError, match="the row codec takes 2, 4 or 8 bits, got 1"):
        _ops.decode_rows_into(np.zeros((1, 10), np.uint8), np.zeros((1, 16), np.float32), 1)


def _scan_row(row, u, bits):
    """One row as the left-to-right scan encodes it (numpy float32 scalars: IEEE single, as
    the kernel's operations)."""
    f = np.float32
    levels = (1 << bits) - 1
    lo = hi = row[0]
    for v in row[1:]:
        lo = v if v < lo else lo
        hi = v if v > hi else hi
    scale = f(f(hi - lo) / f(levels))
    safe = scale if scale > 0 else f(1.0)
    codes = [min(int(f(f(f(x - lo) / safe) + uj)), levels) for x, uj in zip(row, u)]
    per = 8 // bits
    codes = [sum(c << (bits * k) for k, c in enumerate(codes[j:j + per])) for j in range(0, len(codes), per)]
    return bytes(codes) + np.array([lo, scale], np.float32).tobytes()


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("dim", [8, 16])
def test_rows_with_signed_zeros_are_encoded_as_the_scan_encodes_them(bits, dim):
    """The 8- and 16-wide rows go four values at a time; a zero min or max must still be the
    row's first zero, +0 or -0, as the scan keeps it (gradient rows are often zero)."""
    rng = np.random.default_rng(bits + dim)
    x = rng.standard_normal((64, dim)).astype(np.float32)
    x[rng.random(x.shape) < 0.5] = 0.0
    x[rng.random(x.shape) < 0.3] *= -0.0  # negative zeros among the zeros
    x[0], x[1] = 0.0, -0.0  # zero rows of each sign
    x[2, ::2], x[2, 1::2] = -0.0, 0.0
    x[3, ::2], x[3, 1::2] = 0.0, -0.0
    x[4] = np.abs(x[4])  # min zero
    x[5] = -np.abs(x[5])  # max zero
    u = rng.random(x.size).astype(np.float32)
    out = np.zeros((64, packed_width(dim, bits)), np.uint8)
    _ops.encode_rows_into(x, u, out, bits)
    for r in range(64):
        assert out[r].tobytes() == _scan_row(x[r], u[r * dim:(r + 1) * dim], bits), r


def test_a_row_with_a_nan_keeps_the_scans_header():
    x = np.tile(np.arange(16, dtype=np.float32), (2, 1))
    x[0, 5], x[1, 0] = np.nan, np.nan
    out = np.zeros((2, 24), np.uint8)
    _ops.encode_rows_into(x, np.zeros(32, np.float32), out, 8)
    lo = out[:, 16:20].copy().view(np.float32)[:, 0]
    assert lo[0] == 0.0 and np.isnan(lo[1])  # the scan skips a later NaN and keeps a first one

"""The averages over syncs and steps (dgl_sni.halo.averages): one compiled pass each, the bits of the
numpy and torch expressions they replace; bad blocks refused by name."""
import numpy as np
import pytest
import torch

from dgl_sni import _ops
from dgl_sni.halo.averages import mix, smooth_into, trend


@pytest.mark.parametrize("g", [0.75, 0.5, 0.1234567, 0.0])
def test_smoothing_is_numpys_three_passes_to_the_bit(g):
    rng = np.random.default_rng(1)
    old = (rng.standard_normal((1000, 16)) * 1e3).astype(np.float32)
    fresh = rng.standard_normal((1000, 16)).astype(np.float32)
    want = np.subtract(old, fresh)
    want *= g
    want += fresh
    out = np.empty_like(old)
    assert np.array_equal(smooth_into(old, fresh, g, out).view(np.int32), want.view(np.int32))
    smooth_into(old, fresh, g, old)  # in place: the resolver writes into a spare or the old one
    assert np.array_equal(old.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("g", [0.75, 0.3, 0.999])
def test_the_mix_is_torchs_expression_to_the_bit(g):
    gen = torch.Generator().manual_seed(2)
    kept, new = torch.randn(500, 8, generator=gen) * 50, torch.randn(500, 8, generator=gen)
    assert torch.equal(mix(kept, g, new), g * kept + (1.0 - g) * new)
    assert torch.equal(mix(kept.t().contiguous().t(), g, new), g * kept + (1.0 - g) * new)  # any layout


@pytest.mark.parametrize("g", [0.9, 0.5])
def test_the_trend_is_three_mixes_to_the_bit_and_follows_a_steady_change(g):
    gen = torch.Generator().manual_seed(3)
    average, twice = torch.randn(300, 8, generator=gen), torch.randn(300, 8, generator=gen)
    new = torch.randn(300, 8, generator=gen)
    want_average = mix(average, g, new)
    want_twice = mix(twice, g, want_average)
    want = mix(want_twice, -1.0, want_average)
    out = trend(average, twice, g, new)
    assert torch.equal(average, want_average) and torch.equal(twice, want_twice)  # updated in place
    assert torch.equal(out, want) and out.data_ptr() not in (average.data_ptr(), twice.data_ptr())
    # rows growing by 1 a step: the average lags g / (1 - g) steps behind, the trend does not
    rows = torch.zeros(2, 4)
    average, twice = rows.clone(), rows.clone()
    for step in range(1, 400):
        out = trend(average, twice, g, rows + step)
    torch.testing.assert_close(average, rows + 399 - g / (1 - g), rtol=0, atol=1e-3)
    torch.testing.assert_close(out, rows + 399, rtol=0, atol=1e-3)


def test_blocks_of_different_shapes_or_types_are_refused():
    a, b = np.zeros((4, 16), np.float32), np.zeros((4, 8), np.float32)
    with pytest.raises(ValueError, match=r"old rows \(4, 16\), fresh rows \(4, 8\) and out \(4, 16\) must have one shape"):
        _ops.smooth_rows_into(a, b, 0.5, a)
    with pytest.raises(TypeError, match="b must be float32"):
        _ops.mix_rows_into(a, 0.5, a.astype(np.float64), 0.5, a)

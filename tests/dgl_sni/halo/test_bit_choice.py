"""A bit width per row (AdaQP's choice): the choice minimises its objective, blocks round-trip, owners add them."""
import itertools

import numpy as np
import pytest
import torch

from dgl_sni.halo import id_sets
from dgl_sni.halo.bit_choice import (ADAPTIVE, block_bits, choose_bits, decode_mixed, encode_mixed,
                                     mixed_accumulate_handler, mixed_size)
from dgl_sni.halo.quantize import packed_width
from tests.dgl_sni.halo.test_id_sets import server  # noqa: F401  (the fixture)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _objective(x, weights, bits, lam):
    """AdaQP's scalarised objective of one message at widths ``bits``: variance and bytes, each
    normalised between all rows at 2 bits and all at 8."""
    n, d = x.shape
    span = (x.max(1).values - x.min(1).values).double().numpy()
    score = span ** 2 * d / 4 * (1.0 if weights is None else weights.double().numpy())
    var = lambda b: float((score / (2.0 ** np.asarray(b, float) - 1) ** 2).sum())  # noqa: E731
    size = lambda b: float(sum(packed_width(d, int(v)) for v in b))  # noqa: E731
    v_hi, v_lo, t_hi, t_lo = var([2] * n), var([8] * n), size([8] * n), size([2] * n)
    return lam * (var(bits) - v_lo) / (v_hi - v_lo) + (1 - lam) * (size(bits) - t_lo) / (t_hi - t_lo)


@pytest.mark.parametrize("lam", [0.5, 0.2, 0.9])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_chosen_widths_minimise_the_objective_over_every_assignment(lam, seed):
    g = _gen(seed)
    x = torch.randn(6, 16, generator=g) * torch.logspace(-2, 1, 6)[torch.randperm(6, generator=g)][:, None]
    weights = torch.randint(1, 9, (6,), generator=g).float()
    chosen = choose_bits(x, weights, lam)
    best = min(_objective(x, weights, b, lam) for b in itertools.product((2, 4, 8), repeat=6))
    assert _objective(x, weights, chosen, lam) == pytest.approx(best, rel=1e-12, abs=1e-15)


def test_wider_spans_and_heavier_rows_get_more_bits_and_the_extremes_take_one_width():
    x = torch.linspace(0, 1, 16)[None, :] * torch.logspace(-3, 2, 40)[:, None]
    bits = choose_bits(x)
    assert np.all(np.diff(bits.astype(int)) >= 0) and bits[0] == 2 and bits[-1] == 8
    heavy = choose_bits(x, torch.where(torch.arange(40) == 5, 1e12, 1.0))
    assert heavy[5] == 8 and bits[5] == 2  # the same row, weighed above all the others together, gets 8 bits
    assert set(choose_bits(x, lam=1.0).tolist()) == {8}  # variance alone
    assert set(choose_bits(x, lam=0.0).tolist()) == {2}  # bytes alone
    assert set(choose_bits(torch.ones(5, 16)).tolist()) == {2}  # constant rows add no variance
    assert choose_bits(torch.empty(0, 16)).shape == (0,)


@pytest.mark.parametrize("dim", [16, 7])
def test_a_block_round_trips_each_row_at_its_width(dim):
    g = _gen(3)
    x = torch.randn(50, dim, generator=g)
    bits = np.array([2, 4, 8, 8, 2] * 10, dtype=np.uint8)
    block = encode_mixed(x, bits, _gen(4))
    assert block.dtype == torch.uint8 and block.numel() == mixed_size(bits, dim) == \
        13 + sum(packed_width(dim, int(b)) for b in bits)
    assert np.array_equal(block_bits(block, 50), bits)
    counts = {}
    rows = decode_mixed(block, 50, dim, counts)
    assert counts == {8: 20, 4: 10, 2: 20}
    for b in (2, 4, 8):  # each row within one step of its own width's scale
        at = np.flatnonzero(bits == b)
        step = (x[at].max(1).values - x[at].min(1).values) / (2 ** b - 1)
        assert torch.all((rows[at] - x[at]).abs() <= step[:, None] * (1 + 1e-5) + 1e-6)


def test_the_owner_adds_a_pushed_block_in_float64_at_its_offsets():
    x = torch.randn(6, 16, generator=_gen(5))
    bits = np.array([8, 2, 4, 4, 8, 2], dtype=np.uint8)
    block = encode_mixed(x, bits, _gen(6))
    store = {"g": torch.zeros(10, 2, 16, dtype=torch.float64)}
    offsets = torch.tensor([9, 0, 3, 3, 7, 1])
    mixed_accumulate_handler(store, "g", offsets, block)
    expect = torch.zeros(10, 16, dtype=torch.float64)
    expect.index_add_(0, offsets, decode_mixed(block, 6, 16).double())
    total = store["g"][:, 0] + store["g"][:, 1]
    assert torch.allclose(total, expect, rtol=0, atol=1e-6)  # (float32 decodes against float64 sums)
    assert store["g"][[2, 4, 5, 6, 8]].abs().sum() == 0


def test_bad_blocks_and_widths_are_refused_by_name():
    x = torch.randn(4, 16)
    with pytest.raises(ValueError, match="one width of 2, 4 or 8 bits per row"):
        encode_mixed(x, np.array([8, 8, 3, 8]), _gen())
    block = encode_mixed(x, np.array([8, 4, 2, 8], dtype=np.uint8), _gen())
    with pytest.raises(ValueError, match="does not hold 4 rows of 16 values at the widths it names"):
        decode_mixed(block[:-1], 4, 16)
    bad = block.clone()
    bad[0] = 0xFF  # width code 3
    with pytest.raises(ValueError, match="does not hold 4 rows of 16 values at the widths it names"):
        decode_mixed(bad, 4, 16)
    with pytest.raises(IndexError, match=r"offsets must lie in \[0, 4\)"):
        mixed_accumulate_handler({"g": torch.zeros(4, 2, 16, dtype=torch.float64)}, "g", torch.tensor([0, 1, 2, 4]),
                                 block)
    with pytest.raises(TypeError, match="contiguous float64 shard of"):
        mixed_accumulate_handler({"g": torch.zeros(4, 2, 16)}, "g", torch.arange(4), block)
    with pytest.raises(TypeError, match=r"'g' is torch.float64 of shape \(4, 16\)"):
        mixed_accumulate_handler({"g": torch.zeros(4, 16, dtype=torch.float64)}, "g", torch.arange(4), block)


def test_an_owners_server_answers_a_chosen_width_pull_as_the_reader_decodes_it(server):  # noqa: F811
    kv = server.kv_store
    kv.data_store["h1"] = torch.randn(10, 16, generator=_gen(7)) * torch.logspace(-2, 1, 10)[:, None]
    members, weights = torch.tensor([108, 101, 104, 100, 109]), torch.tensor([1.0, 30.0, 2.0, 1.0, 5.0])
    id_sets.RegisterSetRequest("h1", 2, "halo", members, weights).process_request(server)
    block = id_sets.PullSetRequest("h1", 2, "halo", after=0, code=ADAPTIVE).process_request(server).rows
    stored = kv.data_store["h1"][members - 100]
    assert np.array_equal(block_bits(block, 5), choose_bits(stored, weights))
    rows = decode_mixed(block, 5, 16)
    bits = torch.from_numpy(block_bits(block, 5).astype(np.float32))
    step = (stored.max(1).values - stored.min(1).values) / (2 ** bits - 1)
    assert torch.all((rows - stored).abs() <= step[:, None] * (1 + 1e-5) + 1e-6)
    again = id_sets.PullSetRequest("h1", 2, "halo", after=0, code=ADAPTIVE).process_request(server).rows
    assert torch.equal(again, block)  # rounded from the set, the tensor and the publish: repeatable
    with pytest.raises(ValueError, match="a set pull's code must be 0 or 1"):
        id_sets.PullSetRequest("h1", 2, "halo", code=7).process_request(server)
    with pytest.raises(ValueError, match="a sampled pull moves float32 rows"):
        id_sets.PullSetRequest("h1", 2, "halo", share=0.5, draw=1, code=ADAPTIVE).process_request(server)
    with pytest.raises(ValueError, match="2 weights for 5 members"):
        id_sets.RegisterSetRequest("h1", 2, "halo", members, weights[:2]).process_request(server)


@pytest.mark.parametrize("dim", [16, 8, 7])
def test_the_compiled_block_holds_each_row_as_the_reference_encodes_it_at_its_width(dim):
    from dgl_sni import _ops
    from tests.dgl_sni.halo import quantize_ref
    g = _gen(8)
    n = 11
    x = torch.randn(n, dim, generator=g) * torch.logspace(-3, 1, n)[:, None]
    dither = torch.rand(n * dim, generator=g)
    codes = np.array([2, 0, 1, 1, 2, 0, 0, 1, 2, 2, 0], dtype=np.uint8)  # 8, 2, 4, 4, 8, ... bits
    bits = np.array([2, 4, 8], dtype=np.uint8)[codes]
    out = np.empty(mixed_size(bits, dim), dtype=np.uint8)
    _ops.encode_block_into(x.numpy(), dither.numpy(), codes, out)
    head = (n + 3) // 4
    assert [(out[r // 4] >> (2 * (r % 4))) & 3 for r in range(n)] == codes.tolist()
    at = head
    for b in (8, 4, 2):  # the groups, widest first, each in message order
        for r in np.flatnonzero(bits == b):
            ref = quantize_ref.encode(x[r:r + 1], int(b), dither[r * dim:(r + 1) * dim])
            width = packed_width(dim, int(b))
            assert bytes(out[at:at + width]) == bytes(ref.numpy()[0]), (r, b)
            at += width
    assert at == out.size

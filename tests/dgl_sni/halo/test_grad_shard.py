"""The owners' halo-gradient shards: contributions add up exactly, whatever order they arrive in."""
import itertools
import math

import numpy as np
import pytest
import torch

from dgl_sni import _ops
from dgl_sni.halo import grad_shard
from dgl_sni.halo.bit_choice import encode_mixed, mixed_accumulate_handler
from dgl_sni.halo.quantize import encode, quantized_accumulate_handler

ROWS, DIM, WORKERS = 40, 16, 4


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _pushes(seed=0):
    """One push per worker, each to every shard row: two that cancel (of magnitude 2^20 to
    2^40, as large gradients from two readers of a row may) and two near 1, whose low bits a
    plain float64 sum drops when it adds them to a large partial sum first."""
    g = _gen(seed)
    big = torch.randn(ROWS, DIM, generator=g).sign() * 2.0 ** torch.randint(20, 41, (ROWS, DIM), generator=g)
    big = big * (1 + torch.rand(ROWS, DIM, generator=g))
    rows = [big, -big, torch.randn(ROWS, DIM, generator=g), torch.randn(ROWS, DIM, generator=g)]
    return [(torch.arange(ROWS), x.to(torch.float32)) for x in rows]


def _apply(handler, pushes, order):
    store = {"g": torch.zeros(grad_shard.shape(ROWS, DIM), dtype=torch.float64)}
    for k in order:
        handler(store, "g", *pushes[k])
    return store["g"]


def test_float_rows_sum_to_the_same_float32_in_every_order_of_arrival():
    pushes = _pushes()
    exact = torch.tensor([[math.fsum(float(p[1][r, j]) for p in pushes) for j in range(DIM)] for r in range(ROWS)],
                         dtype=torch.float64).to(torch.float32)
    plain = set()
    for order in itertools.permutations(range(WORKERS)):
        pairs = _apply(grad_shard.accumulate_push_handler, pushes, order)
        assert torch.equal(grad_shard.totals(pairs), exact), order
        plain.add(sum((pushes[k][1].double() for k in order), torch.zeros(ROWS, DIM, dtype=torch.float64))
                  .to(torch.float32).numpy().tobytes())
    assert len(plain) > 1  # these contributions do round by order in a plain float64 sum


def test_the_sums_are_index_add_s_and_the_errors_what_it_dropped():
    g = _gen(1)
    offsets = torch.randint(0, 50, (400,), generator=g)  # many repeats: up to ~20 rows per target
    rows = torch.randn(400, 16, generator=g) * torch.logspace(-6, 6, 400).unsqueeze(1)
    store = {"g": torch.zeros(50, 2, 16, dtype=torch.float64)}
    grad_shard.accumulate_push_handler(store, "g", offsets, rows)
    assert torch.equal(store["g"][:, 0], torch.zeros(50, 16, dtype=torch.float64).index_add_(0, offsets, rows.double()))
    assert store["g"][:, 1].abs().sum() > 0  # the float64 sums did round here, and the errors are kept
    for r in range(50):
        mine = rows[offsets == r].double()
        for j in (0, 7, 15):
            assert float(grad_shard.totals(store["g"][r:r + 1])[0, j]) == float(np.float32(math.fsum(mine[:, j].tolist())))


@pytest.mark.parametrize("bits", [8, 4, 2, None])
def test_encoded_rows_sum_to_the_same_float32_in_every_order(bits):
    pushes = _pushes(2)
    if bits is None:  # a width per row
        widths = np.array([8, 4, 2, 8] * (ROWS // 4), dtype=np.uint8)
        coded = [(ids, encode_mixed(x, widths, _gen(10 + k))) for k, (ids, x) in enumerate(pushes)]
        handler = mixed_accumulate_handler
    else:
        coded = [(ids, encode(x, bits, _gen(10 + k))) for k, (ids, x) in enumerate(pushes)]
        handler = quantized_accumulate_handler
    totals = {grad_shard.totals(_apply(handler, coded, order)).numpy().tobytes()
              for order in itertools.permutations(range(WORKERS))}
    assert len(totals) == 1


def test_bad_shards_and_rows_are_refused_by_name():
    with pytest.raises(TypeError, match=r"\(sum, error\) pairs, \[rows, 2, dim\]; 'g' is torch.float64 of shape \(4, 3\)"):
        grad_shard.accumulate_push_handler({"g": torch.zeros(4, 3, dtype=torch.float64)}, "g", torch.tensor([1]),
                                           torch.ones(1, 3))
    with pytest.raises(TypeError, match="'g' is torch.float32"):
        grad_shard.accumulate_push_handler({"g": torch.zeros(4, 2, 3)}, "g", torch.tensor([1]), torch.ones(1, 3))
    store = {"g": torch.zeros(4, 2, 3, dtype=torch.float64)}
    with pytest.raises(TypeError, match="must be float32 rows, got torch.float64"):
        grad_shard.accumulate_push_handler(store, "g", torch.tensor([1]), torch.ones(1, 3, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"must be float32 rows, got torch.float32 of shape \(2, 2, 3\)"):
        grad_shard.accumulate_push_handler(store, "g", torch.tensor([1, 1]), torch.ones(2, 2, 3))
    assert not store["g"].any()


def test_the_compiled_accumulate_names_a_bad_input():
    target = np.zeros((5, 2, 16))
    with pytest.raises(IndexError, match=r"offsets must lie in \[0, 5\)"):
        _ops.accumulate_float_rows_into(np.zeros((1, 16), np.float32), np.array([5]), target)
    with pytest.raises(ValueError, match="need one offset per row: 2 rows"):
        _ops.accumulate_float_rows_into(np.zeros((2, 16), np.float32), np.array([1]), target)
    with pytest.raises(ValueError, match="rows of 8 values cannot be added into a target of 16 columns"):
        _ops.accumulate_float_rows_into(np.zeros((1, 8), np.float32), np.array([1]), target)
    with pytest.raises(TypeError, match="rows must be float32"):
        _ops.accumulate_float_rows_into(np.zeros((1, 16)), np.array([1]), target)
    with pytest.raises(ValueError, match=r"a shard of \(sum, error\) pairs, \[rows, 2, d\], got shape \(5, 16\)"):
        _ops.accumulate_float_rows_into(np.zeros((1, 16), np.float32), np.array([1]), np.zeros((5, 16)))
    assert not target.any()  # nothing was added before the refusals


@pytest.mark.parametrize("owned_local", [None, torch.tensor([3, 0])])
def test_the_wire_reads_the_totals_of_its_owned_rows_and_zeroes_them(owned_local):
    from types import SimpleNamespace

    from dgl_sni.halo.wire import HaloWire
    pushes = _pushes(3)
    shard = _apply(grad_shard.accumulate_push_handler, pushes, (0, 2, 1, 3))  # a large sum first: it rounds
    expect = grad_shard.totals(shard[:2] if owned_local is None else shard[owned_local])
    assert not torch.equal(expect, shard[:2, 0].to(torch.float32))  # the errors matter for these rows
    wire = SimpleNamespace(_owned_local=owned_local, num_owned=2)
    received = HaloWire.take_received(wire, SimpleNamespace(local_partition=shard))
    assert torch.equal(received, expect)
    taken = slice(0, 2) if owned_local is None else owned_local
    assert not shard[taken].any() and shard[4:].any()  # the read rows are zeroed for the next step, no others

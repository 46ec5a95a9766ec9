"""The compiled sum aggregation (dgl_sni.aggregate): DGL's copy_u_sum to the bit, forward and
backward, on blocks with empty rows and hubs; DGL's own op where the kernel does not apply;
sums of rows dropped by their keep bits equal to the bit keyed dropout and then the sum."""
import numpy as np
import pytest
import torch

import dgl_sni  # noqa: F401
import dgl
import dgl.ops as dops

from dgl_sni import _ops
from dgl_sni.aggregate import copy_u_sum, dropped_sum, scaled_sum
from dgl_sni.dropout import KeyedMask


def _block(num_src, num_dst, num_edges, seed):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, num_src, num_edges)
    dst = rng.integers(0, max(num_dst // 2, 1), num_edges)  # half the destinations have no in-edge
    src[: num_edges // 4] = 0  # a hub
    order = np.lexsort((src, dst))
    g = dgl.create_block((torch.from_numpy(src[order]), torch.from_numpy(dst[order])),
                         num_src_nodes=num_src, num_dst_nodes=num_dst)
    g.create_formats_()
    return g


@pytest.mark.parametrize("d", [8, 16])
@pytest.mark.parametrize("shape", [(500, 300, 4000), (40, 40, 0), (1, 1, 3), (3000, 100, 20000)])
def test_sums_and_their_gradient_are_dgls_bits(d, shape):
    g = _block(*shape, seed=d)
    gen = torch.Generator().manual_seed(d)
    x = torch.randn(shape[0], d, generator=gen)
    up = torch.randn(shape[1], d, generator=gen)
    grads = []
    for op in (copy_u_sum, dops.copy_u_sum):
        xx = x.clone().requires_grad_()
        out = op(g, xx)
        out.backward(up)
        grads.append((out.detach(), xx.grad))
    assert torch.equal(grads[0][0], grads[1][0])
    assert torch.equal(grads[0][1], grads[1][1])
    if shape[2] == 0:
        assert not grads[0][0].any()  # no edges: zeros, not what the buffer held


def test_other_widths_and_types_take_dgls_op():
    g = _block(50, 30, 200, seed=1)
    for x in (torch.randn(50, 5), torch.randn(50, 16, dtype=torch.float64)):
        assert torch.equal(copy_u_sum(g, x), dops.copy_u_sum(g, x))


def test_the_kernel_refuses_indices_without_their_padding():
    x = np.ones((3, 8), np.float32)
    with pytest.raises(ValueError, match="padding"):
        _ops.row_sum_into(x, np.array([0, 1, 2], np.int64), np.array([0, 1], np.int64), np.empty((2, 8), np.float32))
    with pytest.raises(ValueError, match="indptr needs 3 entries"):
        _ops.row_sum_into(x, np.array([0, 1], np.int64), np.zeros(20, np.int64), np.empty((2, 8), np.float32))


@pytest.mark.parametrize("d", [1, 5, 64])
def test_the_kernel_sums_rows_of_any_width_a_value_at_a_time(d):
    # widths other than 8 and 16 take the scalar loop (copy_u_sum sends them to DGL, the kernel takes them)
    rng = np.random.default_rng(d)
    x = rng.standard_normal((30, d)).astype(np.float32)
    indptr = np.array([0, 3, 3, 7], np.int64)
    indices = np.concatenate((rng.integers(0, 30, 7), np.zeros(_ops.PREFETCH_PAD, np.int64)))
    out = _ops.row_sum_into(x, indptr, indices, np.full((3, d), np.nan, np.float32))
    want = np.stack([x[indices[a:b]].sum(0) if b > a else np.zeros(d, np.float32)
                     for a, b in zip(indptr[:-1], indptr[1:])])
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("d", [8, 16, 5])
@pytest.mark.parametrize("scales", ["src", "dst", "both", "none"])
def test_scaled_sums_are_the_bits_of_scaling_before_and_after(d, scales):
    """The halo sums scale their rows and their sums inside the kernel: the values of
    ``copy_u_sum(x * s) * t``, to the bit (width 5: DGL's op and the products)."""
    g = _block(700, 300, 5000, seed=d)
    gen = torch.Generator().manual_seed(d)
    x = torch.randn(700, d, generator=gen)
    s = torch.rand(700, 1, generator=gen) if scales in ("src", "both") else None
    t = torch.rand(300, 1, generator=gen) if scales in ("dst", "both") else None
    want = dops.copy_u_sum(g, x if s is None else x * s)
    want = want if t is None else want * t
    assert torch.equal(scaled_sum(g, x, s, t), want)


def test_scaled_sums_of_rows_that_need_a_gradient_stay_differentiable():
    g = _block(60, 30, 300, seed=3)
    x = torch.randn(60, 16, requires_grad=True)
    s = torch.rand(60, 1)
    scaled_sum(g, x, s).sum().backward()
    assert torch.equal(x.grad, s.expand(60, 16) * g.out_degrees().to(torch.float32)[:, None])


def test_the_kernel_refuses_a_scale_of_the_wrong_length():
    x = np.ones((3, 8), np.float32)
    ptr, idx = np.array([0, 1, 2], np.int64), np.zeros(2 + _ops.PREFETCH_PAD, np.int64)
    with pytest.raises(ValueError, match=r"source scale \(one value per row\) needs 3 values, got 2"):
        _ops.row_sum_into(x, ptr, idx, np.empty((2, 8), np.float32), src_scale=np.ones(2, np.float32))
    with pytest.raises(TypeError, match="sum scale"):
        _ops.row_sum_into(x, ptr, idx, np.empty((2, 8), np.float32), dst_scale=np.ones(2))


def test_a_scale_of_the_wrong_length_or_type_is_refused_by_name():
    g = _block(50, 20, 200, seed=4)
    x = torch.randn(50, 16)
    with pytest.raises(ValueError, match="one value per row: 50 rows, 49 values"):
        scaled_sum(g, x, torch.rand(49, 1))
    with pytest.raises(TypeError, match="a row scale must be float32, got torch.float64"):
        scaled_sum(g, x, dst_scale=torch.rand(20, 1, dtype=torch.float64))


def _mask(n, seed, p=0.5):
    keys = torch.from_numpy(np.random.default_rng(seed).permutation(10 * n)[:n].astype(np.int64))
    return KeyedMask(keys, 977 + seed, p)


@pytest.mark.parametrize("d", [8, 16, 5])
@pytest.mark.parametrize("scaled", [True, False])
@pytest.mark.parametrize("p", [0.5, 0.1])
def test_a_dropped_sum_is_the_bits_of_dropping_the_rows_then_summing(d, scaled, p, monkeypatch):
    """A sync step's halo rows are summed dropped (to train on) and undropped (kept for the
    stale steps) in one pass that reads their keep bits: the values of keyed dropout and
    then ``scaled_sum``, to the bit, and its backward those of ``scaled_sum`` over the
    reversed edges and then keyed dropout (width 5: the ops one after the other)."""
    g = _block(700, 300, 5000, seed=d)
    gen = torch.Generator().manual_seed(d)
    x = torch.randn(700, d, generator=gen)
    s = torch.rand(700, 1, generator=gen) if scaled else None
    mask = _mask(700, d, p)
    passes = []  # the one-pass kernel, where it applies (else the comparison would be of the same ops)
    kernel = _ops.row_dropped_sum_into
    monkeypatch.setattr(_ops, "row_dropped_sum_into", lambda *a, **k: passes.append(1) or kernel(*a, **k))
    dropped, plain = dropped_sum(g, x, mask, s, plain=True)
    assert len(passes) == (d in (8, 16))
    assert torch.equal(dropped, scaled_sum(g, mask.apply(x), s))
    assert torch.equal(plain, scaled_sum(g, x, s))
    alone, none = dropped_sum(g, x, mask, s)
    assert none is None and torch.equal(alone, dropped)
    # backward: over the reversed edges, each source's gradient scaled, then dropped by its mask
    rev = dgl.create_block(tuple(reversed(g.edges(order="eid"))), num_src_nodes=300, num_dst_nodes=700)
    up = torch.randn(300, d, generator=gen)
    assert torch.equal(scaled_sum(rev, up, dst_scale=s, dst_mask=mask), mask.apply(scaled_sum(rev, up, dst_scale=s)))
    # ... which is autograd's gradient through the dropout and the sum
    xx = x.clone().requires_grad_()
    scaled_sum(g, mask.apply(xx), s).backward(up)
    torch.testing.assert_close(scaled_sum(rev, up, dst_scale=s, dst_mask=mask), xx.grad, rtol=1e-5, atol=1e-6)


def test_keep_bits_are_the_mask_keyed_dropout_applies():
    mask = _mask(5000, 7, p=0.3)
    ones = mask.apply(torch.ones(5000, 32))
    bits = mask.bits(32)
    for c in (0, 13, 31):
        assert np.array_equal((bits >> c) & 1, (ones[:, c] != 0).numpy().astype(np.uint32))
    assert np.array_equal(mask.bits(16), bits & 0xFFFF)  # a row's first columns draw the same
    assert abs(ones.ne(0).float().mean().item() - 0.7) < 0.01


def test_dropped_sums_refuse_what_they_cannot_read_by_name():
    x = np.ones((3, 8), np.float32)
    ptr, idx = np.array([0, 1, 2], np.int64), np.zeros(2 + _ops.PREFETCH_PAD, np.int64)
    bits = np.zeros(3, np.uint32)
    with pytest.raises(ValueError, match="keep bits of the rows needs 3 values, got 2"):
        _ops.row_dropped_sum_into(x, ptr, idx, bits[:2], 2.0, np.empty((2, 8), np.float32))
    with pytest.raises(ValueError, match="dropped row sums take rows of 8 or 16 values, got 5"):
        _ops.row_dropped_sum_into(np.ones((3, 5), np.float32), ptr, idx, bits, 2.0, np.empty((2, 5), np.float32))
    with pytest.raises(ValueError, match="sums of rows of 8 values into rows of 16"):
        _ops.row_dropped_sum_into(x, ptr, idx, bits, 2.0, np.empty((2, 8), np.float32), np.empty((2, 16), np.float32))
    with pytest.raises(TypeError, match="keep bits must be uint32"):
        _ops.keyed_dropout_bits_into(np.arange(3), 1, 0.5, 8, np.zeros(3, np.int32))
    with pytest.raises(ValueError, match="keep bits cover at most 32 columns, got 33"):
        _ops.keyed_dropout_bits_into(np.arange(3), 1, 0.5, 33, np.zeros(3, np.uint32))
    with pytest.raises(ValueError, match="dropped row sums take rows of 8 or 16 values, got 5"):
        _ops.row_sum_into(np.ones((3, 5), np.float32), ptr, idx, np.empty((2, 5), np.float32),
                          dst_bits=np.zeros(2, np.uint32))

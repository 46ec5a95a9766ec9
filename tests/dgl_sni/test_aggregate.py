"""The compiled sum aggregation (dgl_sni.aggregate): DGL's copy_u_sum to the bit, forward and
backward, on blocks with empty rows and hubs; DGL's own op where the kernel does not apply."""
import numpy as np
import pytest
import torch

import dgl_sni  # noqa: F401
import dgl
import dgl.ops as dops

from dgl_sni import _ops
from dgl_sni.aggregate import copy_u_sum


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

"""Narrow projections: the kernels agree with float64 products, differentiate like ``h @ w``,
keep each output row a function of its input row, and refuse what they cannot take."""
import numpy as np
import pytest
import torch

from dgl_sni import _ops
from dgl_sni.projection import NARROW_MAX, project


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# rows not a multiple of the 32-row tile, depths not a multiple of 4, widths of 1..16
SHAPES = [(1, 1, 1), (33, 5, 7), (100, 64, 16), (257, 16, 8), (70, 13, 12), (5, 1433, 16), (0, 4, 3)]


@pytest.mark.parametrize("n,k,m", SHAPES)
def test_kernels_equal_float64_products_to_float_rounding(n, k, m):
    gen = torch.Generator().manual_seed(n * 1000 + k * 10 + m)
    x, w, g = (torch.randn(*s, generator=gen) for s in ((n, k), (k, m), (n, m)))
    out = _ops.narrow_matmul_into(x.numpy(), w.numpy(), np.empty((n, m), np.float32))
    outer = _ops.narrow_outer_into(x.numpy(), g.numpy(), np.empty((k, m), np.float32))
    ref, ref_outer = (x.double() @ w.double()).numpy(), (x.double().t() @ g.double()).numpy()
    # float32 sums of k (n) terms: within a few ulps of the terms' magnitude
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * max(1.0, np.sqrt(k)) * 4)
    np.testing.assert_allclose(outer, ref_outer, rtol=0, atol=1e-5 * max(1.0, np.sqrt(n)) * 4)
    if n == 0:
        assert not outer.any()  # no rows: a zero gradient, not garbage


def test_an_output_row_depends_on_its_input_row_only(one_thread):
    # the same row gives the same bits in a partition's block and in the whole graph's
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(301, 64, generator=gen), torch.randn(64, 16, generator=gen)
    whole = project(x, w)
    assert torch.equal(whole[117:118], project(x[117:118].clone(), w))
    assert torch.equal(whole[200:], project(x[200:].clone(), w))


@pytest.mark.parametrize("k,m", [(64, 16), (16, 8), (16, 16), (7, 3)])
def test_gradients_match_torch_matmul(one_thread, k, m):
    gen = torch.Generator().manual_seed(k + m)
    h = torch.randn(500, k, generator=gen)
    w = torch.randn(k, m, generator=gen)
    upstream = torch.randn(500, m, generator=gen)
    grads = []
    for fn in (project, torch.matmul):
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        out = fn(hh, ww)
        out.backward(upstream)
        grads.append((out.detach(), hh.grad, ww.grad))
    for ours, theirs in zip(*grads):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-4)


def test_input_without_grad_gets_none_and_weight_grad_is_right(one_thread):
    h = torch.randn(40, 64)
    w = torch.randn(64, 16, requires_grad=True)
    project(h, w).sum().backward()
    torch.testing.assert_close(w.grad, h.t() @ torch.ones(40, 16), rtol=1e-5, atol=1e-4)


def test_wide_weights_and_many_threads_take_torch():
    h, wide = torch.randn(50, 8), torch.randn(8, NARROW_MAX + 1)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert torch.equal(project(h, wide), h @ wide)
        assert project(h, torch.randn(8, 4, requires_grad=True)).grad_fn.name().endswith("_ProjectBackward")
        torch.set_num_threads(2)
        narrow = torch.randn(8, 4)
        assert torch.equal(project(h, narrow), h @ narrow)
    finally:
        torch.set_num_threads(threads)


def test_bad_inputs_are_named():
    x = np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError, match="at most 16"):
        _ops.narrow_matmul_into(x, np.zeros((3, 17), np.float32), np.zeros((4, 17), np.float32))
    with pytest.raises(ValueError, match="do not multiply"):
        _ops.narrow_matmul_into(x, np.zeros((2, 4), np.float32), np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match="do not multiply"):
        _ops.narrow_outer_into(x, np.zeros((5, 2), np.float32), np.zeros((3, 2), np.float32))
    with pytest.raises(TypeError, match="float32"):
        _ops.narrow_matmul_into(x.astype(np.float64), np.zeros((3, 2), np.float32), np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        _ops.narrow_outer_into(np.zeros((3, 4), np.float32).T, np.zeros((4, 2), np.float32),
                               np.zeros((3, 2), np.float32))


@pytest.mark.parametrize("k,m", [(64, 16), (16, 8), (13, 5)])
def test_a_row_scaled_projection_is_the_bits_of_the_two_ops(one_thread, k, m):
    # forward the product then the scale; backward the scaled gradient into both kernels
    gen = torch.Generator().manual_seed(k * m)
    h, w = torch.randn(300, k, generator=gen), torch.randn(k, m, generator=gen)
    rs, up = torch.rand(300, 1, generator=gen), torch.randn(300, m, generator=gen)
    results = []
    for fused in (True, False):
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        out = project(hh, ww, rs) if fused else project(hh, ww) * rs
        out.backward(up)
        results.append((out.detach(), hh.grad, ww.grad))
    for ours, two_ops in zip(*results):
        assert torch.equal(ours, two_ops)


def test_a_row_scale_must_be_a_constant():
    with pytest.raises(ValueError, match="row_scale must not require a gradient"):
        project(torch.randn(3, 4), torch.randn(4, 2), torch.ones(3, 1, requires_grad=True))


@pytest.mark.parametrize("k,m", [(64, 16), (16, 8), (13, 5)])
def test_a_projection_that_drops_its_rows_is_the_bits_of_dropout_then_product(one_thread, k, m):
    # the rows dropped as the kernels read them, forward and for both gradients
    from dgl_sni.dropout import KeyedMask
    gen = torch.Generator().manual_seed(k + 100 * m)
    h, w = torch.randn(300, k, generator=gen), torch.randn(k, m, generator=gen)
    rs, up = torch.rand(300, 1, generator=gen), torch.randn(300, m, generator=gen)
    mask = KeyedMask(torch.arange(300, dtype=torch.int64) * 13 + 5, 987654321, 0.5)
    results = []
    for fused in (True, False):
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        out = project(hh, ww, rs, mask) if fused else project(mask.apply(hh), ww, rs)
        out.backward(up)
        results.append((out.detach(), hh.grad, ww.grad))
    assert (results[0][1] == 0).float().mean() > 0.3  # the mask dropped about half of h's gradient
    for ours, two_ops in zip(*results):
        assert torch.equal(ours, two_ops)


def test_a_narrow_product_refuses_dropout_keys_that_do_not_fit():
    x, w = np.ones((4, 3), np.float32), np.ones((3, 2), np.float32)
    with pytest.raises(ValueError, match="one dropout key per row"):
        _ops.narrow_matmul_into(x, w, np.empty((4, 2), np.float32), drop=(np.arange(3), 1, 0.5))
    with pytest.raises(ValueError, match=r"dropout probability must lie in \[0, 1\)"):
        _ops.narrow_matmul_into(x, w, np.empty((4, 2), np.float32), drop=(np.arange(4), 1, 1.0))
    with pytest.raises(ValueError, match="drops or scales its rows, not both"):
        _ops.narrow_matmul_into(x, w, np.empty((4, 2), np.float32), np.ones(4, np.float32), drop=(np.arange(4), 1, 0.5))


@pytest.mark.parametrize("dims", [(12, 5), (5, 9)])  # projects first (fused), aggregates first
def test_a_gcn_layer_drops_its_inputs_inside_the_projection_to_the_bit(one_thread, dims):
    """``dropped_forward`` (the exact pass's layers over the whole block) gives the bits of
    the dropout followed by the layer: output, input gradient and weight gradient."""
    from dgl_sni.data import synthetic
    from dgl_sni.layers import GCNLayer
    from dgl_sni.models import keyed_dropper
    from storage_tier.block import build_block
    data = synthetic(num_nodes=400, avg_degree=6, num_classes=4, feat_dim=dims[0], seed=3)
    in_deg, out_deg = data.degrees()
    block = build_block(data.src, data.dst, data.num_nodes, data.num_nodes, out_deg, in_deg, self_loops=True)
    torch.manual_seed(0)
    layer = GCNLayer(*dims)
    drop = keyed_dropper(0.5, 11, 3, 0)
    x = torch.from_numpy(data.features)
    up = torch.randn(data.num_nodes, dims[1])
    results = []
    for fused in (True, False):
        layer.zero_grad()
        h = x.clone().requires_grad_()
        out = layer.dropped_forward(block, h, drop, "relu") if fused else layer(block, drop(h, block.src_keys, "feat"),
                                                                                  drop, "relu")
        out.backward(up)
        results.append((out.detach(), h.grad, layer.weight.grad.clone(), layer.bias.grad.clone()))
    assert (results[0][1] == 0).float().mean() > 0.3  # the mask dropped about half of the inputs
    for ours, two_ops in zip(*results):
        assert torch.equal(ours, two_ops)

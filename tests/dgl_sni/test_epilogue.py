"""The fused row epilogue (dgl_sni.epilogue): the bits of the torch ops it replaces forward,
their gradients backward, and a clear refusal of what it cannot take."""
import numpy as np
import pytest
import torch

from dgl_sni import _ops
from dgl_sni.epilogue import scale_bias_act


def _torch_ops(s, rs, bias, relu, add):
    h = (s if add is None else s + add) * rs
    if bias is not None:
        h = h + bias
    return torch.relu(h) if relu else h


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("with_add", [True, False])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("n,d", [(1, 1), (257, 16), (100, 8), (33, 7), (0, 4)])
def test_forward_is_the_bits_of_the_torch_ops_and_backward_their_gradient(relu, with_add, with_bias, n, d):
    gen = torch.Generator().manual_seed(n * 10 + d)
    s, add, g = (torch.randn(n, d, generator=gen) for _ in range(3))
    rs = torch.rand(n, 1, generator=gen) + 0.1
    bias = torch.randn(d, generator=gen)
    results = []
    for fused in (True, False):
        ss, aa, bb = s.clone().requires_grad_(), add.clone().requires_grad_(), bias.clone().requires_grad_()
        args = (ss, rs, bb if with_bias else None, relu, aa if with_add else None)
        out = scale_bias_act(*args) if fused else _torch_ops(*args)
        out.backward(g)
        results.append((out.detach(), ss.grad, aa.grad, bb.grad))
    (out, gs, ga, gb), (ref, ref_gs, ref_ga, ref_gb) = results
    assert torch.equal(out, ref)  # the same float operations in the same order
    assert torch.equal(gs, ref_gs)
    if with_add:
        assert torch.equal(ga, ref_ga)
    if with_bias:  # summed over rows in float64 blocks where torch sums in float32
        torch.testing.assert_close(gb, ref_gb, rtol=1e-5, atol=1e-5)
    else:
        assert gb is None


def test_relu_keeps_nan_and_gives_no_gradient_through_it():
    s = torch.tensor([[float("nan"), -1.0, 2.0]], requires_grad=True)
    out = scale_bias_act(s, torch.ones(1, 1), relu=True)
    assert torch.isnan(out[0, 0]) and out[0, 1] == 0 and out[0, 2] == 2
    out.backward(torch.ones(1, 3))
    assert s.grad.tolist() == [[0.0, 0.0, 1.0]]


def test_off_the_compiled_path_it_is_the_torch_ops():
    s = torch.randn(20, 5, dtype=torch.float64)
    rs = torch.rand(20, 1, dtype=torch.float64)
    out = scale_bias_act(s, rs, torch.ones(5, dtype=torch.float64), relu=True)
    assert out.dtype == torch.float64 and torch.equal(out, torch.relu(s * rs + 1))


def test_a_bias_sum_over_many_rows_stays_accurate():
    # float64 blocks: a million rows of 1 + tiny sum as float64 does, not as float32 drifts
    n = 1 << 20
    g = torch.full((n, 2), 1.0) + 1e-4
    s = torch.zeros(n, 2, requires_grad=True)
    b = torch.zeros(2, requires_grad=True)
    scale_bias_act(s, torch.ones(n, 1), b).backward(g)
    assert abs(b.grad[0].item() - n * (1 + 1e-4)) / n < 1e-6


def test_bad_inputs_are_refused_with_what_is_wrong():
    s = torch.randn(4, 3)
    with pytest.raises(ValueError, match="row_scale must not require a gradient"):
        scale_bias_act(s, torch.ones(4, 1, requires_grad=True))
    with pytest.raises(ValueError, match="one scale per row"):
        scale_bias_act(s, torch.ones(3, 1))
    with pytest.raises(ValueError, match="cannot add rows of shape"):
        scale_bias_act(s, torch.ones(4, 1), add=torch.ones(4, 2))
    with pytest.raises(ValueError, match=r"bias \(one value per column\) needs 3 values, got 2"):
        _ops.scale_bias_act_into(s.numpy(), None, np.ones(4, np.float32), np.ones(2, np.float32), True,
                                 np.empty((4, 3), np.float32))
    with pytest.raises(ValueError, match=r"row scale \(one value per row\) needs 4 values, got 5"):
        _ops.scale_bias_act_backward_into(s.numpy(), None, np.ones(5, np.float32), np.empty((4, 3), np.float32),
                                          None)

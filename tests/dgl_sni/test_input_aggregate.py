"""The input layer's aggregation of fixed features, computed once (dgl_sni.models.FullGraphGNN).

Without input dropout a GCN/SAGE input layer aggregates the same features every step, so
the model keeps that aggregation and projects it: the forward output and every parameter
gradient equal the layer's own forward (project first) to float rounding; new features
or another block are aggregated afresh; with input dropout the layer runs as before."""
import numpy as np
import pytest
import torch

import dgl_sni.models as models
from dgl_sni.models import init_model
from dgl_sni.halo.rows import WholeGraph

from tests.dgl_sni.halo.test_sums import _partition_block


class _Halo(WholeGraph):
    """Layers above the input get fixed halo rows after the owned ones."""

    def __init__(self, num_halo):
        super().__init__()
        self.rows = torch.randn(num_halo, 64, generator=torch.Generator().manual_seed(3))

    def __call__(self, layer, owned):
        return torch.cat([owned, self.rows[:, : owned.shape[1]]])


def _run(model, block, x, exchange, step=0):
    model.zero_grad(set_to_none=True)
    out = model(block, x, exchange, step=step)
    (out.square().sum() + out.sum()).backward()
    return out.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


@pytest.mark.parametrize("name", ["gcn", "sage"])
@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_input_aggregate_equals_the_forward_and_is_kept(name, dropout, monkeypatch):
    block, x, n_own = _partition_block(name)
    exchange = _Halo(block.num_src - n_own)
    model = init_model(0, name, x.shape[1], 8, 4, 3, dropout=dropout)
    got, got_grads = _run(model, block, x, exchange)
    kept = model._input_agg
    assert (kept is not None) == (dropout == 0.0)  # input dropout: the features change every step

    class NotLinear:  # the layer's own forward, projecting first
        pass

    monkeypatch.setattr(models, "HaloLinear", NotLinear)
    want, want_grads = _run(model, block, x, exchange)
    monkeypatch.undo()
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-4)
    for k in want_grads:
        assert torch.allclose(got_grads[k], want_grads[k], atol=1e-5, rtol=1e-4), k
    if dropout == 0.0:
        _run(model, block, x, exchange, step=1)
        assert model._input_agg[1] is kept[1]  # same block and features: not aggregated again
        x.mul_(2.0)  # features changed in place: aggregated afresh
        doubled, _ = _run(model, block, x, exchange, step=2)
        assert model._input_agg[1] is not kept[1]
        assert torch.allclose(model._input_agg[1], 2 * kept[1], atol=1e-5, rtol=1e-5)
        other, x2, _ = _partition_block(name, seed=2)
        model(other, x2, _Halo(other.num_src - other.num_dst))
        assert model._input_agg[2] is other
        model.eval()  # evaluation has no dropout whatever the training's: it uses the kept form too
        with torch.no_grad():
            model(block, x, exchange)
        assert model._input_agg[2] is block and np.isfinite(doubled.numpy()).all()


class _SummedInput(_Halo):
    """A stale step's plan for the input layer: its halo rows (features) as their sum."""

    def form(self, layer):
        from dgl_sni.halo.rows import Form
        return Form.SUM if layer == 0 else Form.ROWS


@pytest.mark.parametrize("name", ["gcn", "sage"])
def test_a_summed_input_layer_without_dropout_projects_the_kept_aggregate(name):
    """Without dropout an input layer planned as a sum (a stale or an inputs-summing sync step)
    is the same computation as the whole block's: the same bits, the aggregate kept."""
    from dgl_sni.halo.sums import BlockSplit
    block, x, n_own = _partition_block(name)
    model = init_model(0, name, x.shape[1], 8, 4, 3, dropout=0.0)
    whole, whole_grads = _run(model, block, x, _Halo(block.num_src - n_own))
    kept = model._input_agg[1]
    model.zero_grad(set_to_none=True)
    out = model(block, x, _SummedInput(block.num_src - n_own), split=BlockSplit(block, x))
    (out.square().sum() + out.sum()).backward()
    assert torch.equal(out.detach(), whole)
    for k, p in model.named_parameters():
        assert torch.equal(p.grad, whole_grads[k]), k
    assert model._input_agg[1] is kept

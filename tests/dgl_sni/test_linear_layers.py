"""DGL layers linear in their sources take their halo rows as one sum.

Each adapter, given the owned rows and the sum of the halo rows DGL's own ``forward`` would
have read, computes DGL's output for the owned destinations (and its gradients); a model of
DGL layers whose exchange plans sums equals its pass over whole rows; layers DGL does not
compute linearly (attention, max aggregation) are not recognised."""
import numpy as np
import pytest
import torch
import torch.nn as nn

import dgl_sni  # noqa: F401
from dgl.nn import GATConv, GINConv, GraphConv, SAGEConv

from dgl_sni.block_model import dgl_block
from dgl_sni.halo.rows import Form, WholeGraph
from dgl_sni.halo.sums import BlockSplit
from dgl_sni.linear_layers import SumsHaloRows, summing
from dgl_sni.model_file import build
from dgl_sni.reference import whole_graph_view

from tests.dgl_sni.halo.test_sums import _partition_block
from tests.dgl_sni.test_block_model import conv_inputs, model_cfg, partition_block

LAYERS = {
    "graphconv-both-project-first": lambda: GraphConv(12, 5),
    "graphconv-both-aggregate-first": lambda: GraphConv(12, 20, activation=torch.relu),
    "graphconv-left": lambda: GraphConv(12, 5, norm="left"),
    "graphconv-right": lambda: GraphConv(12, 20, norm="right"),
    "graphconv-none-no-weight": lambda: GraphConv(12, 12, norm="none", weight=False, bias=False),
    "sage-mean-project-first": lambda: SAGEConv(12, 5, "mean"),
    "sage-mean-aggregate-first": lambda: SAGEConv(12, 20, "mean", activation=torch.relu),
    "sage-gcn": lambda: SAGEConv(12, 5, "gcn"),
    "sage-gcn-aggregate-first": lambda: SAGEConv(12, 20, "gcn", norm=nn.LayerNorm(20)),
    "gin-sum-mlp": lambda: GINConv(nn.Sequential(nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 6)), "sum",
                                   learn_eps=True, init_eps=0.3),
    "gin-mean": lambda: GINConv(nn.Linear(12, 4), "mean"),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_a_summed_dgl_layer_equals_dgls_forward_over_whole_rows(name):
    block, _, n_own = _partition_block("gcn")
    graph = dgl_block(block)
    torch.manual_seed(0)
    layer = LAYERS[name]()
    adapter = summing(layer)
    assert isinstance(adapter, SumsHaloRows)
    rows = torch.randn(block.num_src, 12, requires_grad=True)
    out = layer(graph, rows)  # DGL's own code over every source row
    g = torch.randn_like(out)
    (out * g).sum().backward()
    want_rows_grad, want = rows.grad.clone(), [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()

    split = BlockSplit(block, rows.detach())
    own = rows.detach()[:n_own].clone().requires_grad_(True)
    halo = rows.detach()[n_own:].clone().requires_grad_(True)
    scale = adapter.halo_scale(layer, graph)
    assert scale is adapter.halo_scale(layer, graph)  # one tensor per block: a kept sum is checked by it
    halo_sum = split.sum_rows(halo, scale)
    summed = adapter.forward_summed(layer, graph, split, own, halo_sum)
    torch.testing.assert_close(summed, out.detach(), rtol=1e-5, atol=1e-5)
    (summed * g).sum().backward()
    for got, exp in zip((p.grad for p in layer.parameters()), want):
        torch.testing.assert_close(got, exp, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(own.grad, want_rows_grad[:n_own], rtol=1e-4, atol=1e-5)
    # the halo rows' gradient, as the exchange computes it from the sum's (split.rows_grad)
    torch.testing.assert_close(halo.grad, want_rows_grad[n_own:], rtol=1e-4, atol=1e-5)


def test_layers_not_linear_in_their_sources_are_not_recognised():
    assert summing(GATConv(12, 4, 2)) is None
    assert summing(SAGEConv(12, 4, "pool")) is None
    assert summing(GINConv(nn.Linear(12, 4), "max")) is None

    class MyConv(GraphConv):  # a subclass may compute otherwise: not taken by type
        pass
    assert summing(MyConv(12, 4)) is None


class SummedHalo(WholeGraph):
    """A partition's exchange whose plan sums every exchanged layer's halo rows: the sum is
    of the rows the whole graph's pass had (captured by layer), as the owners would send them."""

    def __init__(self, captured, halo_ids, inputs=False):
        self.captured, self.halo_ids, self.calls, self.inputs = captured, halo_ids, [], inputs

    def form(self, layer):
        return Form.SUM if layer > 0 or self.inputs else Form.ROWS

    def splits(self):
        return True

    def __call__(self, layer, owned):
        raise AssertionError("a layer planned to take a sum asked for whole rows")

    def start_halo(self, layer, owned):
        self.calls.append(("start", layer))
        return owned

    def halo_sum(self, layer, owned, split, scale, mask=None):
        self.calls.append(("sum", layer))
        return split.sum_rows(self.captured[layer - 1][self.halo_ids], scale)


@pytest.mark.parametrize("name", ["gcn_layernorm", "gin", "gcn"])
def test_a_model_of_linear_dgl_layers_takes_summed_halo_rows_as_planned(data, name):
    model = build(model_cfg(name), data.feat_dim, data.num_classes)
    model.train()
    whole = whole_graph_view(data, "custom")
    full, captured = conv_inputs(model, whole.block, whole.x_src, step=3)
    owned = np.arange(0, data.num_nodes, 3)
    block, halo_ids, order = partition_block(data, owned)
    x = whole.x_src[torch.from_numpy(order)]
    takes = model.halo_takes(block, x)
    assert [t.sum for t in takes] == [True, True, True]
    exchange = SummedHalo(captured, torch.from_numpy(halo_ids))
    part = model(block, x, exchange, step=3, dropout_seed=7, split=BlockSplit(block, x))
    # the exchanged rows are dropped by the model before the layer: the sum of the very rows
    # the whole graph's pass read gives its output, dropout on
    torch.testing.assert_close(part, full[torch.from_numpy(owned)], rtol=1e-4, atol=1e-5)
    assert exchange.calls == [("start", 1), ("sum", 1), ("start", 2), ("sum", 2)]


def test_attention_and_shared_rows_are_declared_whole(data):
    block, _, order = partition_block(data, np.arange(0, data.num_nodes, 3))
    x = whole_graph_view(data, "custom").x_src[torch.from_numpy(order)]
    gat = build(model_cfg("gat"), data.feat_dim, data.num_classes)
    assert [t.sum for t in gat.halo_takes(block, x)] == [False, False, False]

    class TwoReaders(nn.Module):  # one exchanged tensor read by two linear layers: taken whole
        def __init__(self):
            super().__init__()
            self.a, self.b = GraphConv(data.feat_dim, 6), GraphConv(6, 4)
            self.c = GraphConv(6, 4)

        def forward(self, blocks, x):
            h = self.a(blocks[0], x)
            return self.b(blocks[1], h) + self.c(blocks[1], h)

    two = build(model_cfg("gcn").__class__(layers=2), data.feat_dim, data.num_classes,
                builder=lambda *_: TwoReaders())
    assert [t.sum for t in two.halo_takes(block, x)] == [True, False]  # its input has one reader

    class ReadsAllInputs(nn.Module):  # uses every input row beside the layer: the input taken whole
        def __init__(self):
            super().__init__()
            self.a, self.b = GraphConv(data.feat_dim, 6), GraphConv(6, 4)

        def forward(self, blocks, x):
            return self.b(blocks[1], self.a(blocks[0], x) + x.mean(0)[:6])

    everything = build(model_cfg("gcn").__class__(layers=2), data.feat_dim, data.num_classes,
                       builder=lambda *_: ReadsAllInputs())
    assert [t.sum for t in everything.halo_takes(block, x)] == [False, True]


def test_the_summed_input_layer_equals_the_whole_pass_without_dropout(data):
    """The input layer summed: the owned input rows, and the sum of the halo input rows (fixed)."""
    model = build(model_cfg("gcn_layernorm", dropout=0.0), data.feat_dim, data.num_classes).eval()
    whole = whole_graph_view(data, "custom")
    full, captured = conv_inputs(model, whole.block, whole.x_src, step=0)
    owned = np.arange(1, data.num_nodes, 3)
    block, halo_ids, order = partition_block(data, owned)
    x = whole.x_src[torch.from_numpy(order)]
    assert model.halo_takes(block, x)[0].sum
    exchange = SummedHalo(captured, torch.from_numpy(halo_ids), inputs=True)
    with torch.no_grad():
        part = model(block, x, exchange, split=BlockSplit(block, x))
    torch.testing.assert_close(part, full[torch.from_numpy(owned)], rtol=1e-4, atol=1e-5)

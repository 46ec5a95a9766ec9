"""The built-in models against their formulas, computed densely with numpy on a small graph.

Each layer is checked against the paper's equation (GCN: ``D^-1/2 (A + I) D^-1/2 H W + b``;
SAGE with mean aggregation: ``W_self h_v + W_neigh mean(h_u)``; GAT: a softmax over each node's
in-edges of ``leaky_relu(a_l . z_u + a_r . z_v)``), the stacked model against the layers in
turn, and the model's declaration of what each layer can take against its layers."""
import numpy as np
import pytest
import torch

from dgl_sni.layers import GATLayer, GCNLayer, SAGELayer
from dgl_sni.models import init_model
from dgl_sni.halo.rows import ROWS_ONLY, SPLITS
from storage_tier.block import build_block

# a small directed graph: 6 nodes, edges u -> v
SRC = np.array([0, 1, 2, 3, 4, 5, 0, 2, 4, 1, 3])
DST = np.array([1, 2, 3, 4, 5, 0, 2, 4, 1, 5, 0])
N = 6


def block(self_loops):
    in_deg = np.bincount(DST, minlength=N)
    out_deg = np.bincount(SRC, minlength=N)
    return build_block(SRC, DST, N, N, out_deg, in_deg, self_loops=self_loops)


def adjacency(self_loops):
    a = np.zeros((N, N))  # a[v, u] = edges u -> v
    np.add.at(a, (DST, SRC), 1.0)
    return a + np.eye(N) if self_loops else a


def test_gcn_layer_is_the_normalised_propagation():
    torch.manual_seed(0)
    for dims in ((5, 3), (3, 5)):  # projects first / aggregates first
        layer = GCNLayer(*dims)
        with torch.no_grad():
            layer.bias.copy_(torch.randn(dims[1]))
        h = torch.randn(N, dims[0])
        a = adjacency(True)
        d_in, d_out = a.sum(1), a.sum(0)  # with the self loop: degree + 1
        expect = (np.diag(d_in ** -0.5) @ a @ np.diag(d_out ** -0.5) @ h.numpy() @ layer.weight.detach().numpy()
                  + layer.bias.detach().numpy())
        out = layer(block(True), h)
        np.testing.assert_allclose(out.detach().numpy(), expect, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(layer(block(True), h, act="relu").detach().numpy(), np.maximum(expect, 0),
                                   rtol=1e-5, atol=1e-6)


def test_sage_layer_is_self_plus_mean_of_neighbours():
    torch.manual_seed(1)
    layer = SAGELayer(4, 3)
    h = torch.randn(N, 4)
    a = adjacency(False)
    mean = a @ h.numpy() / np.maximum(a.sum(1, keepdims=True), 1)
    w_self, b = layer.fc_self.weight.detach().numpy(), layer.fc_self.bias.detach().numpy()
    expect = h.numpy() @ w_self.T + b + mean @ layer.fc_neigh.weight.detach().numpy().T
    np.testing.assert_allclose(layer(block(False), h).detach().numpy(), expect, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("concat", [True, False])
def test_gat_layer_is_attention_over_in_edges(concat):
    torch.manual_seed(2)
    heads, out = 2, 3
    layer = GATLayer(4, out, heads, concat=concat)
    h = torch.randn(N, 4)
    z = (h @ layer.fc.weight.detach().T).numpy().reshape(N, heads, out)
    el = (z * layer.attn_l.detach().numpy()).sum(-1)  # [N, heads]
    er = (z * layer.attn_r.detach().numpy()).sum(-1)
    a = adjacency(True)
    expect = np.zeros((N, heads, out))
    for v in range(N):
        us = np.flatnonzero(a[v])
        e = el[us] + er[v]
        e = np.where(e > 0, e, 0.2 * e)
        w = np.exp(e - e.max(0)) / np.exp(e - e.max(0)).sum(0)
        expect[v] = (w[:, :, None] * z[us]).sum(0)
    expect = expect.reshape(N, -1) if concat else expect.mean(1)
    expect = expect + layer.bias.detach().numpy()
    np.testing.assert_allclose(layer(block(True), h).detach().numpy(), expect, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model, layer_type", [("gcn", GCNLayer), ("sage", SAGELayer), ("gat", GATLayer)])
def test_the_model_is_its_layers_in_turn_with_activations_and_declares_what_they_take(model, layer_type):
    blk = block(model != "sage")
    x = torch.randn(N, 5)
    net = init_model(3, model, 5, 4, 3, 3, dropout=0.0, heads=2).eval()
    h = x
    for i, layer in enumerate(net.layers):
        assert isinstance(layer, layer_type)
        h = layer(blk, h)
        if i < 2:
            h = torch.nn.functional.elu(h) if model == "gat" else torch.relu(h)
    torch.testing.assert_close(net(blk, x), h, rtol=1e-5, atol=1e-6)
    assert net.halo_takes(blk, x) == [ROWS_ONLY if model == "gat" else SPLITS] * 3
    assert net.exchange_dims(blk, x) == [layer.out_dim for layer in net.layers[:-1]]


def test_the_same_seed_builds_the_same_weights_whatever_ran_before():
    a = init_model(7, "gcn", 5, 4, 3, 2)
    torch.randn(100)  # the global generator moves
    b = init_model(7, "gcn", 5, 4, 3, 2)
    c = init_model(8, "gcn", 5, 4, 3, 2)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters()))


def test_dropout_is_keyed_by_node_and_step():
    blk = block(True)
    x = torch.randn(N, 5)
    net = init_model(0, "gcn", 5, 4, 3, 2, dropout=0.5).train()
    same = [net(blk, x, step=3, dropout_seed=1) for _ in range(2)]
    torch.testing.assert_close(same[0], same[1])  # the masks are a function of (seed, step, node)
    assert not torch.allclose(net(blk, x, step=4, dropout_seed=1), same[0])
    assert not torch.allclose(net(blk, x, step=3, dropout_seed=2), same[0])

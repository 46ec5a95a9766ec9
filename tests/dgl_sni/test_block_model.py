"""Models of DGL's own layers (``forward(blocks, x)``) wrapped for full-graph training.

A partition's pass, its halo rows supplied as the exchange would supply them, must give
the whole graph's rows for the owned nodes, dropout on; the model of one process must be
plain DGL over the graph with self loops; and what cannot work is refused by name.
"""
import os

import numpy as np
import pytest
import torch
import torch.nn as nn

import dgl_sni  # noqa: F401
import dgl
from dgl.nn import GraphConv

from dgl_sni.block_model import BlockModel, KeyedDropout, ModelError, check_module
from dgl_sni.config import TrainConfig
from dgl_sni.halo.rows import Form, WholeGraph
from dgl_sni.model_file import build, load_builder, spec_of
from dgl_sni.reference import whole_graph_view
from dgl_sni.trainers import ModelConfig
from storage_tier.block import build_block

from tests.helpers import ROOT

EXAMPLES = {name: os.path.join(ROOT, "examples", f"{name}.py") for name in ("gcn_layernorm", "gin", "gat", "gcn")}


def model_cfg(name, dropout=0.5):
    return ModelConfig(model_file=EXAMPLES[name], layers=3, hidden=8, heads=2, dropout=dropout)


class CapturedHalo(WholeGraph):
    """A partition's exchange whose halo rows are those of the whole graph's pass (captured
    by layer), as the owners would have sent them."""

    def __init__(self, captured, halo_ids):
        self.captured, self.halo_ids, self.calls = captured, halo_ids, []

    def form(self, layer):
        return Form.ROWS

    def __call__(self, layer, owned):
        self.calls.append((layer, tuple(owned.shape)))
        return torch.cat((owned, self.captured[layer - 1][self.halo_ids]))


def partition_block(data, owned_ids):
    """The block of a worker owning ``owned_ids`` (sorted), its halo after them."""
    in_deg, out_deg = data.degrees()
    is_owned = np.zeros(data.num_nodes, bool)
    is_owned[owned_ids] = True
    keep = is_owned[data.dst]
    halo_ids = np.setdiff1d(np.unique(data.src[keep]), owned_ids)
    order = np.concatenate((owned_ids, halo_ids))
    pos = np.empty(data.num_nodes, np.int64)
    pos[order] = np.arange(len(order))
    block = build_block(pos[data.src[keep]], pos[data.dst[keep]], len(order), len(owned_ids),
                        out_deg[order], in_deg[owned_ids], self_loops=True, src_keys=order)
    return block, halo_ids, order


def conv_inputs(model, block, x, step):
    """The rows each layer after the input layer read in ``model``'s pass over the whole graph."""
    captured, seen, hooks = [], {}, []

    def record(module, args):
        if id(args[1]) not in seen:
            seen[id(args[1])] = args[1]  # kept alive: a freed tensor's id could be a later one's
            captured.append(args[1].detach())
    for sub in model.module.modules():
        if isinstance(sub, (dgl.nn.GraphConv, dgl.nn.GINConv, dgl.nn.GATConv)):
            hooks.append(sub.register_forward_pre_hook(record))
    out = model(block, x, WholeGraph(), step=step, dropout_seed=7)
    for h in hooks:
        h.remove()
    return out, captured[1:]


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_a_partition_pass_gives_the_whole_graphs_rows_with_dropout(data, name):
    cfg = model_cfg(name)
    model = build(cfg, data.feat_dim, data.num_classes)
    model.train()
    whole = whole_graph_view(data, "custom")
    x = whole.x_src
    full, captured = conv_inputs(model, whole.block, x, step=3)
    owned = np.arange(0, data.num_nodes, 3)  # every third node: most edges cross the cut
    block, halo_ids, order = partition_block(data, owned)
    exchange = CapturedHalo(captured, torch.from_numpy(halo_ids))
    part = model(block, x[torch.from_numpy(order)], exchange, step=3, dropout_seed=7)
    assert torch.allclose(part, full[torch.from_numpy(owned)], atol=1e-5), (part - full[owned]).abs().max()
    assert [layer for layer, _ in exchange.calls] == [1, 2]  # one exchange per layer that takes halo rows
    # another step draws other masks: the dropout is really on
    other = model(block, x[torch.from_numpy(order)], exchange, step=4, dropout_seed=7)
    assert not torch.allclose(other, part)


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_one_process_is_plain_dgl_on_the_graph_with_self_loops(data, name):
    model = build(model_cfg(name, dropout=0.0), data.feat_dim, data.num_classes).eval()
    view = whole_graph_view(data, "custom")
    g = dgl.add_self_loop(dgl.graph((torch.from_numpy(data.src), torch.from_numpy(data.dst)),
                                    num_nodes=data.num_nodes))
    with torch.no_grad():
        ours = model(view.block, view.x_src)
        plain = model.module([g] * 3, view.x_src)
    assert torch.allclose(ours, plain, atol=1e-5)


def test_the_exchanged_widths_are_found_by_a_pass(data):
    block, _, order = partition_block(data, np.arange(0, data.num_nodes, 2))
    x = torch.from_numpy(data.features)[torch.from_numpy(order)]
    assert build(model_cfg("gcn_layernorm"), data.feat_dim, data.num_classes).exchange_dims(block, x) == [8, 8]
    assert build(model_cfg("gat"), data.feat_dim, data.num_classes).exchange_dims(block, x) == [16, 16]
    whole = whole_graph_view(data, "custom")
    assert build(model_cfg("gin"), data.feat_dim, data.num_classes).exchange_dims(whole.block, whole.x_src) is None


def test_dropout_is_keyed_and_the_same_weights_come_from_the_seed(data):
    a = build(model_cfg("gcn_layernorm"), data.feat_dim, data.num_classes)
    b = build(model_cfg("gcn_layernorm"), data.feat_dim, data.num_classes)
    assert isinstance(a.module.dropout, KeyedDropout)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)


def write(tmp_path, text, name="model.py"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


LINEAR = "import torch.nn as nn\n"


def test_a_file_without_build_is_refused(tmp_path):
    path = write(tmp_path, LINEAR + "def make(i, c, cfg):\n    return nn.Linear(i, c)\n")
    with pytest.raises(ModelError, match="defines no 'build'"):
        load_builder(path)
    with pytest.raises(ModelError, match="no such file"):
        load_builder(str(tmp_path / "absent.py"))
    broken = write(tmp_path, "import not_a_module_anywhere\n", "broken.py")
    with pytest.raises(ModelError, match="importing .*broken.py failed .*ModuleNotFoundError"):
        load_builder(broken)


def test_a_build_that_returns_no_module_is_refused(tmp_path, data):
    path = write(tmp_path, "def build(i, c, cfg):\n    return None\n")
    with pytest.raises(ModelError, match="returned NoneType, not a torch.nn.Module"):
        build(ModelConfig(model_file=path), data.feat_dim, data.num_classes)


class NoBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x):
        return self.lin(x)


class WithBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.norm = GraphConv(4, 2), nn.BatchNorm1d(2)

    def forward(self, blocks, x):
        return self.norm(self.conv(blocks[0], x))


class OwnGraph(nn.Module):
    """Runs its layer on a graph of its own instead of the blocks it gets."""

    def __init__(self, graph):
        super().__init__()
        self.graph, self.conv = graph, GraphConv(12, 4)

    def forward(self, blocks, x):
        return self.conv(self.graph, x)


def test_what_cannot_work_is_refused_naming_the_layer(data):
    with pytest.raises(ModelError, match=r"NoBlocks.forward\(x\) takes no blocks"):
        check_module(NoBlocks())
    with pytest.raises(ModelError, match=r"layer 'norm' \(BatchNorm1d\) cannot be trained on partitions"):
        check_module(WithBatchNorm())
    with pytest.raises(ModelError, match=r"layer 'layers.0' \(SGConv\).*k hops"):
        check_module(_holder(nn.ModuleList([dgl.nn.SGConv(4, 2, k=2)])))
    g = dgl.add_self_loop(dgl.graph((torch.from_numpy(data.src), torch.from_numpy(data.dst)), num_nodes=data.num_nodes))
    model = BlockModel(OwnGraph(g), 1)
    view = whole_graph_view(data, "custom")
    with pytest.raises(ModelError, match=r"layer 'conv' \(GraphConv\) was called with a graph that is not one of"):
        model(view.block, view.x_src)


class WholeGraphStyle(nn.Module):
    """DGL's full-graph style: every layer gets the graph argument as it is."""

    def __init__(self):
        super().__init__()
        self.conv = GraphConv(12, 4)

    def forward(self, g, x):
        return self.conv(g, x)


def test_a_full_graph_style_model_is_told_to_take_its_blocks(data):
    view = whole_graph_view(data, "custom")
    with pytest.raises(ModelError, match=r"layer 'conv' \(GraphConv\) was called with the list of blocks"):
        BlockModel(WholeGraphStyle(), 2)(view.block, view.x_src)


def _holder(layers):
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = layers

        def forward(self, blocks, x):
            return x
    return Holder()


class DropsColumns(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop, self.lin = nn.Dropout(0.5), nn.Linear(12, 4)

    def forward(self, blocks, x):
        return self.lin(self.drop(x[:5]))  # five rows: neither nodes nor edges


def test_dropout_on_rows_that_are_not_nodes_or_edges_is_refused(data):
    model = BlockModel(DropsColumns(), 1).train()
    view = whole_graph_view(data, "custom")
    with pytest.raises(ModelError, match="dropout 'drop' got 5 rows"):
        model(view.block, view.x_src)


def builder_at_top_level(in_feats, num_classes, cfg):
    return NoBlocks()


def test_a_builder_is_named_by_its_file():
    path, name = spec_of(builder_at_top_level).rsplit(":", 1)
    assert path == os.path.abspath(__file__) and name == "builder_at_top_level"
    with pytest.raises(ModelError, match="not a function defined at the top level"):
        spec_of(lambda i, c, cfg: None)


def test_model_file_settings():
    with pytest.raises(ValueError, match="--model and --model-file both name the model"):
        TrainConfig.from_dict(dict(model="gcn", model_file=EXAMPLES["gin"])).validate()
    with pytest.raises(ValueError, match="--model-file is not supported with --storage-tier"):
        TrainConfig.from_dict(dict(model_file=EXAMPLES["gin"], storage_tier="/tmp/tier")).validate()
    fast = TrainConfig.from_dict(dict(model_file=EXAMPLES["gcn_layernorm"], preset="fast")).validate()
    # a model file takes fast as the built-in GCN does; its layers declare what they take
    assert (fast.sni.sync_interval, fast.sni.stale_halo, fast.sni.row_average) == (8, "summed", 0.9)
    assert TrainConfig.from_dict(dict(model_file=EXAMPLES["gat"], heads=2)).validate().model.heads == 2

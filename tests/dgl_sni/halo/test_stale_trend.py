"""Kept halo sums continued along their trend (``--stale-trend``).

A stale step that reuses the halo sums kept at the last sync takes them, with the option,
continued along their change between the last two syncs after the warm-up. The halo rows a
layer is linear in enter only through that sum, so this is the linear trend of every halo
row, at the cost of one pass over the sums."""
import numpy as np
import pytest
import torch

from dgl_sni.config import SNIConfig, TrainConfig
from dgl_sni.config.model import ModelConfig
from dgl_sni.halo.exchange import KVHaloExchange
from dgl_sni.halo.plan import HaloPlanner
from dgl_sni.halo.resolver import Resolved
from dgl_sni.halo.rows import Form
from dgl_sni.halo.sums import BlockSplit, KeptSums
from dgl_sni.metrics import Counters
from dgl_sni.model_file import build
from dgl_sni.models import init_model
from dgl_sni.reference import whole_graph_view
from dpu_agent.client import InlineAgentClient

from tests.dgl_sni.halo.test_planned_forms import RecordingWire
from tests.dgl_sni.test_block_model import EXAMPLES, partition_block


def _version(v):
    return Resolved(np.zeros((1, 1), np.float32), np.zeros(1, np.uint8), version=v)


def test_kept_sums_continue_along_the_change_between_the_last_two_trended_keeps():
    sums, scale = KeptSums(), torch.ones(3, 1)
    first, second = torch.full((4, 2), 1.0), torch.tensor([[2.0, 5.0]] * 4)
    sums.keep(1, _version(1), scale, first, step=4)
    # one keep: nothing to continue along, the kept sum itself
    assert sums.continued(1, 1, 6, 1.0) is first
    sums.keep(1, _version(2), scale, second, step=8)
    per_step = (second - first) / 4
    torch.testing.assert_close(sums.continued(1, 2, 11, 1.0), second + 3 * per_step)
    torch.testing.assert_close(sums.continued(1, 2, 11, 0.5), second + 1.5 * per_step)
    assert sums.continued(1, 2, 8, 1.0) is second  # the sync's own step: the sum as summed
    assert sums.continued(1, 2, 11, 0.0) is second
    assert sums.current(1, 2) is second and torch.equal(second, torch.tensor([[2.0, 5.0]] * 4))  # not changed
    assert sums.continued(1, 1, 11, 1.0) is None  # rows of another version: no kept sum at all
    # a keep that cannot start a trend (a warm-up step's) forgets the history
    sums.keep(1, _version(3), scale, first, step=None)
    assert sums.continued(1, 3, 12, 1.0) is first
    sums.keep(1, _version(4), scale, second, step=16)  # one trended keep since: nothing to continue
    assert sums.continued(1, 4, 18, 1.0) is second
    # sums of another scale are not one series
    sums.keep(1, _version(5), torch.ones(3, 1), first, step=20)
    assert sums.continued(1, 5, 22, 1.0) is first


def _run(data, stale_trend, name="GCN"):
    """Steps 0-7 of a 3-layer model (the built-in GCN, or a model file by its example's name)
    over the real planner and exchange; the wire's halo rows at step ``t`` are all ``t +
    layer``. Returns the modes, the halo sums the model took per (step, layer), what each
    step's rows sum to (with the GCN's scale), and what the exchange says ran."""
    if name == "GCN":
        model = init_model(0, "gcn", data.feat_dim, 6, data.num_classes, 3, dropout=0.5)
    else:
        model = build(ModelConfig(model_file=EXAMPLES[name], layers=3, hidden=6, dropout=0.5),
                      data.feat_dim, data.num_classes)
    whole = whole_graph_view(data, "gcn" if name == "GCN" else "custom")
    owned = np.arange(0, data.num_nodes, 3)
    block, halo_ids, order = partition_block(data, owned)
    x = whole.x_src[torch.from_numpy(order)]
    dims = model.exchange_dims(block, x)
    cfg = SNIConfig.expanded(dict(preset="fast", warmup=2, sync_interval=3, quantize=0, stale_trend=stale_trend))
    agent = InlineAgentClient()
    try:
        planner = HaloPlanner(cfg, Counters(), halo_ids, dims, agent=agent, edge_counts=np.ones(halo_ids.size),
                              sum_stale=True, sync_sums="inputs", takes=model.halo_takes(block, x))
        wire = RecordingWire(len(owned), len(halo_ids), dims)
        ex = KVHaloExchange(wire, planner)
        split, taken, modes = BlockSplit(block, x), {}, []
        summed = type(ex).summed

        def recording_summed(self, layer, own, split_, scale, mask):
            out = summed(self, layer, own, split_, scale, mask)
            if self.plan.layers[layer].form is Form.SUM:
                taken[(self.plan.step, layer)] = out.clone()
            return out
        ex.summed = recording_summed.__get__(ex)
        model.train()
        for step in range(8):
            modes.append(ex.begin_step(step, True))
            out = model(block, x, ex, step=step, dropout_seed=3, split=split)
            out.pow(2).sum().backward()
            ex.complete_step()
        scale = block.src_norm[block.num_dst:]
        truth = {(s, l): split.sum_rows(torch.full((len(halo_ids), dims[l - 1]), float(s + l)), scale)
                 for s in range(8) for l in (1, 2)}
        return modes, taken, truth, ex.ran()
    finally:
        agent.close()


@pytest.mark.parametrize("stale_trend", [1.0, 0.5, 0.0])
def test_stale_steps_take_the_kept_sums_continued_and_steady_rows_are_summed_as_they_are(data, stale_trend):
    modes, taken, truth, ran = _run(data, stale_trend)
    assert modes == ["sync", "sync", "sync", "stale", "stale", "sync", "stale", "stale"]
    for layer in (1, 2):
        # after one sync past the warm-up (step 2) the stale steps take its sum as kept
        for step in (3, 4):
            torch.testing.assert_close(taken[(step, layer)], truth[(2, layer)])
        # after the second (step 5) the sum goes on along the rows' steady change: with the
        # whole trend it is the sum of the stale step's own rows, which the kept sum lags;
        # without the option, the kept sum
        for step in (6, 7):
            expect = truth[(5, layer)] + stale_trend * (truth[(step, layer)] - truth[(5, layer)])
            torch.testing.assert_close(taken[(step, layer)], expect, rtol=1e-5, atol=1e-5)
            assert torch.allclose(taken[(step, layer)], truth[(5, layer)]) == (stale_trend == 0)
    assert ran["trended_sums"] == ([1, 2] if stale_trend else [])


@pytest.mark.parametrize("name", ["gin", "gcn_layernorm"])
@pytest.mark.parametrize("stale_trend", [1.0, 0.0])
def test_dgl_layers_that_take_rows_at_syncs_continue_the_sum_of_the_first_stale_step(data, name, stale_trend):
    # a DGL layer takes whole rows at syncs and their sum on stale steps: the first stale step
    # after a sync sums the cache's rows of that sync, and that sum is the trend's
    modes, taken, _, ran = _run(data, stale_trend, name)
    assert modes == ["sync", "sync", "sync", "stale", "stale", "sync", "stale", "stale"]
    for layer in (1, 2):
        unit = taken[(3, layer)] / (2 + layer)  # the sum of rows of ones, as the layer scales it
        assert unit.abs().sum() > 0
        torch.testing.assert_close(taken[(4, layer)], taken[(3, layer)])  # one sync past the warm-up: as kept
        torch.testing.assert_close(taken[(6, layer)], (5 + layer) * unit, rtol=1e-5, atol=1e-5)  # summed anew
        # a step on, the sum goes on along the rows' change between the syncs at steps 2 and 5:
        # two steps past the sync, with the whole trend the sum of step 7's own rows
        expect = (5 + layer + 2 * stale_trend) * unit
        torch.testing.assert_close(taken[(7, layer)], expect, rtol=1e-5, atol=1e-5)
    assert ran["trended_sums"] == ([1, 2] if stale_trend else [])


@pytest.mark.parametrize("values, problem", [
    (dict(preset="fast", stale_trend=1.5), "--stale-trend must lie in \\[0, 1\\], got 1.5"),
    (dict(preset="fast", stale_trend=-0.1), "--stale-trend must lie in \\[0, 1\\]"),
    (dict(preset="exact", stale_trend=1.0), "stale-trend"),
    (dict(preset="fast", stale_halo="rows", stale_trend=1.0), "stale-trend"),
])
def test_bad_trends_are_refused_by_name(values, problem):
    with pytest.raises(ValueError, match=problem):
        TrainConfig.from_dict(values).validate()

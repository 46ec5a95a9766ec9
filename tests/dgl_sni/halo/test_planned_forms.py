"""One way in: the real planner, the real exchange and each model, against a recording wire.

Every model declares what its layers can take (``halo_takes``); the planner gives each layer
a form it declares, the model takes its rows in that form, and the exchange records what ran.
With rows averaged over steps, what a sync publishes is the average of the owned rows every
training step computed, whatever the form: a layer taking whole rows (attention, any DGL
layer) averages as a layer taking a sum does, and with the trend publishes ``2 E - EMA(E)``."""
import numpy as np
import pytest
import torch

from dgl_sni.config import SNIConfig
from dgl_sni.config.model import ModelConfig
from dgl_sni.halo.exchange import KVHaloExchange
from dgl_sni.halo.plan import HaloPlanner
from dgl_sni.halo.rows import Form
from dgl_sni.halo.sums import BlockSplit
from dgl_sni.metrics import Counters
from dgl_sni.model_file import build
from dgl_sni.reference import whole_graph_view
from dpu_agent.client import InlineAgentClient

from tests.dgl_sni.halo.test_exchange import FakeWire
from tests.dgl_sni.test_block_model import EXAMPLES, partition_block

A = 0.5  # the averaging of rows and gradients over steps


class RecordingWire(FakeWire):
    """A wire of the model's widths that records what each sync publishes."""

    def __init__(self, num_owned, num_halo, dims):
        super().__init__(num_owned, num_halo)
        self.dims, self.published = dims, []

    def publish(self, layer, owned):
        self.published.append((self.step, layer, owned.detach().clone()))
        super().publish(layer, owned)

    def received(self, layer, step=None):
        return torch.zeros((self.num_owned, self.dims[layer - 1]))

    def zeros(self, layer):
        return self.received(layer)


def _model(name, data):
    if name.isupper():
        cfg = ModelConfig(model=name.lower(), layers=3, hidden=6, heads=2, dropout=0.5)
    else:
        cfg = ModelConfig(model_file=EXAMPLES[name], layers=3, hidden=6, heads=2, dropout=0.5)
    return build(cfg, data.feat_dim, data.num_classes)


# built-in models in capitals, model files by their example's name
@pytest.mark.parametrize("name, sums", [("GCN", [True, True, True]), ("SAGE", [True, True, True]),
                                        ("GAT", [False, False, False]), ("gcn_layernorm", [True, True, True]),
                                        ("gin", [True, True, True]), ("gat", [False, False, False])])
@pytest.mark.parametrize("trend", [False, True])
def test_the_planner_gives_each_layer_a_form_it_declares_and_every_form_averages(data, name, sums, trend):
    model = _model(name, data)
    whole = whole_graph_view(data, name.lower() if name.isupper() else "custom")
    owned = np.arange(0, data.num_nodes, 3)
    block, halo_ids, order = partition_block(data, owned)
    x = whole.x_src[torch.from_numpy(order)]
    dims = model.exchange_dims(block, x)
    takes = model.halo_takes(block, x)
    assert [t.sum for t in takes] == sums
    cfg = SNIConfig.expanded(dict(preset="fast", warmup=1, sync_interval=2, row_average=A, grad_average=A,
                                  quantize=0, average_trend="both" if trend else "none"))
    agent = InlineAgentClient()
    try:
        planner = HaloPlanner(cfg, Counters(), halo_ids, dims, agent=agent, edge_counts=np.ones(halo_ids.size),
                              sum_stale=True, sync_sums="inputs", takes=takes)
        wire = RecordingWire(len(owned), len(halo_ids), dims)
        ex = KVHaloExchange(wire, planner)
        computed = {}  # layer -> the owned rows each training step handed the exchange
        model.train()
        split = BlockSplit(block, x)
        for step in range(4):  # warm-up 1, then every 2nd: steps 0, 1, 3 sync, 2 stale
            mode = ex.begin_step(step, True)
            for layer, lp in ex.plan.layers.items():
                if not takes[layer].sum:
                    assert lp.form is Form.ROWS, (layer, lp)
                if mode == "stale" and takes[layer].sum:
                    assert lp.form is Form.SUM
            with _recording(ex, computed):
                out = model(block, x, ex, step=step, dropout_seed=3, split=split)
            out.pow(2).sum().backward()
            ex.complete_step()
        ran = ex.ran()
        for layer in range(1, len(dims) + 1):
            stale_forms = ran["halo_forms"]["stale"][str(layer)]
            assert set(stale_forms) == ({"sum"} if takes[layer].sum else {"rows"})
        assert ran["averaged_rows"] == ran["averaged_grads"] == list(range(1, len(dims) + 1))
        # what step 3 (a sync after the stale step 2) published: the average over steps 0-3,
        # with the trend twice it less the average of the averages
        for layer in range(1, len(dims) + 1):
            rows = computed[layer]
            assert len(rows) == 4  # every training step computed the layer's owned rows once
            expect = twice = rows[0]
            for r in rows[1:]:
                expect = A * expect + (1 - A) * r
                twice = A * twice + (1 - A) * expect
            if trend:
                expect = 2 * expect - twice
            published = [p for s, lay, p in wire.published if s == 3 and lay == layer]
            assert len(published) == 1
            torch.testing.assert_close(published[0], expect, rtol=1e-5, atol=1e-6)
            assert not torch.allclose(published[0], rows[3])  # not the step's own rows
    finally:
        agent.close()


class _recording:
    """Record the owned rows a pass hands the exchange (whole rows or a started sum), by layer."""

    def __init__(self, ex, computed):
        self.ex, self.computed = ex, computed

    def __enter__(self):
        ex, computed = self.ex, self.computed
        call, start = type(ex).__call__, type(ex).start_halo

        class Recording(type(ex)):
            def __call__(self, layer, rows):
                computed.setdefault(layer, []).append(rows.detach().clone())
                return call(self, layer, rows)

            def start_halo(self, layer, rows):
                computed.setdefault(layer, []).append(rows.detach().clone())
                return start(self, layer, rows)
        self.cls = type(ex)
        ex.__class__ = Recording
        return ex

    def __exit__(self, *exc):
        self.ex.__class__ = self.cls

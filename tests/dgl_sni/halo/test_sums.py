"""Summed halo rows (dgl_sni.halo.sums): a stale step's layers take the sum of their halo rows.

With the sum of the same rows, a layer's summed form equals its form over the whole block
(to float rounding), forward and backward; the model refuses it where a layer is not
linear in its halo rows; the resolver versions the rows so a sum is reused only while the
served rows are the same."""

import numpy as np
import pytest
import torch

from dgl_sni.config import SNIConfig, TrainConfig
from dgl_sni.data import synthetic
from dgl_sni.halo.autograd import HaloGate, HaloSumFunction
from dgl_sni.halo.plan import ROWS_PER_REACHED_ROW, choose_sync_halo
from dgl_sni.halo.resolver import HaloResolver
from dgl_sni.halo.rows import Form
from dgl_sni.halo.sums import BlockSplit, KeptSums, halo_in_rows
from dgl_sni.sni.schedule import SyncSchedule
from dgl_sni.metrics import Counters
from dgl_sni.layers import GCNLayer, SAGELayer
from dgl_sni.models import init_model
from dgl_sni.projection import project
from dpu_agent.client import InlineAgentClient
from storage_tier.block import build_block


def _partition_block(model: str, seed: int = 1):
    """Partition 0 of 3 of a small synthetic graph (random assignment) as a trainer sees it."""
    data = synthetic(num_nodes=900, avg_degree=8, num_classes=4, feat_dim=12, seed=seed)
    parts = np.random.default_rng(seed).integers(0, 3, data.num_nodes)
    own = np.flatnonzero(parts == 0)
    keep = parts[data.dst] == 0
    src, dst = data.src[keep], data.dst[keep]
    halo = np.unique(src[parts[src] != 0])
    pos = np.full(data.num_nodes, -1)
    pos[own], pos[halo] = np.arange(own.size), own.size + np.arange(halo.size)
    gids = np.concatenate((own, halo))
    in_deg, out_deg = data.degrees()
    block = build_block(pos[src], pos[dst], gids.size, own.size, out_deg[gids], in_deg[own],
                        self_loops=model == "gcn", src_keys=gids)
    return block, torch.from_numpy(data.features[gids]), own.size


@pytest.mark.parametrize("layer_type, dims", [
    (GCNLayer, (12, 5)), (GCNLayer, (5, 9)),  # project first, aggregate first
    (SAGELayer, (12, 5)), (SAGELayer, (5, 9)),
])
def test_a_summed_layer_equals_the_layer_over_the_whole_block(layer_type, dims):
    block, _, n_own = _partition_block("gcn" if layer_type is GCNLayer else "sage")
    torch.manual_seed(0)
    layer = layer_type(*dims)
    rows = torch.randn(block.num_src, dims[0], requires_grad=True)
    out = layer(block, rows)
    g = torch.randn_like(out)
    (out * g).sum().backward()

    split = BlockSplit(block, rows.detach())
    assert split.num_halo > 0 and split.local.num_edges + split.halo.num_edges == block.num_edges
    own = rows.detach()[:n_own].clone().requires_grad_()
    halo_sum = split.sum_rows(rows.detach()[n_own:], layer.halo_scale(split.halo)).requires_grad_()
    summed = layer.forward_summed(split, own, halo_sum)
    (summed * g).sum().backward()
    torch.testing.assert_close(summed, out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(own.grad, rows.grad[:n_own], rtol=1e-5, atol=1e-5)
    # the halo rows' gradient the stale step pushes, from the sum's gradient
    pushed = split.rows_grad(halo_sum.grad, layer.halo_scale(split.halo))
    torch.testing.assert_close(pushed, rows.grad[n_own:], rtol=1e-5, atol=1e-5)


def test_the_input_sum_is_kept_as_the_rows_it_touches():
    """The halo input rows' sum, kept as its rows at the owned rows with a halo in-edge
    (``halo_dst``), put back in place, is the whole sum to the bit; a layer that projects
    first gets the same output and weight gradient from those rows alone."""
    # 6 owned rows, 3 halo rows; only owned rows 1 and 4 have halo in-edges
    src = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 6])
    dst = np.array([1, 2, 3, 4, 5, 0, 1, 4, 4, 4])
    block = build_block(src, dst, 9, 6, np.full(9, 2), np.bincount(dst, minlength=6), self_loops=True)
    x = torch.randn(9, 7)
    split = BlockSplit(block, x)
    assert split.halo_dst.tolist() == [1, 4]
    layer = GCNLayer(7, 3)
    scale = layer.halo_scale(split.halo)
    whole = split.static_sum(scale)
    assert torch.equal(split.spread(split.static_rows(scale)), whole)
    assert whole[[0, 2, 3, 5]].abs().sum() == 0
    w = layer.weight.detach().clone().requires_grad_()
    layer.weight.grad = None
    kept = split.spread(layer.project_halo(split.static_rows(scale)))
    g = torch.randn_like(kept)
    (kept * g).sum().backward()
    ref = project(whole, w)
    (ref * g).sum().backward()
    torch.testing.assert_close(kept, ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(layer.weight.grad, w.grad, rtol=1e-5, atol=1e-6)


class _Rows:
    """Whole halo rows from a function (``rows(layer, owned) -> [owned; halo]``), every layer
    in the rows form except where ``forms`` says otherwise."""

    def __init__(self, rows, forms=None):
        self.rows, self.forms = rows, forms or {}

    def form(self, layer):
        return self.forms.get(layer, Form.ROWS)

    def __call__(self, layer, owned):
        return self.rows(layer, owned)


class _ExactSums:
    """Serves each layer's true halo rows as their sum (what a stale step gets when nothing
    moved); with ``rows`` (a ``_Rows``), only the input layer sums and the layers above take
    those rows."""

    def __init__(self, rows, n_own, whole=None):
        self.rows, self.n_own, self.whole = rows, n_own, whole

    def form(self, layer):
        return Form.SUM if layer == 0 or self.whole is None else Form.ROWS

    def __call__(self, layer, owned):
        return self.whole(layer, owned)

    def start_halo(self, layer, owned):
        return owned

    def halo_sum(self, layer, owned, split, scale, mask=None):
        return split.sum_rows(self.rows[layer][self.n_own:], scale)


def fixed_halo(halo: dict, n_own: int):
    """Whole rows with fixed halo rows ``halo[layer]`` after the owned ones, through an autograd
    node that records the halo rows' gradients (``sent[layer]``, one per backward)."""
    sent = {}

    class Whole(torch.autograd.Function):
        @staticmethod
        def forward(ctx, h_own, layer):
            ctx.layer = layer
            return torch.cat((h_own, halo[layer]))

        @staticmethod
        def backward(ctx, grad):
            sent.setdefault(ctx.layer, []).append(grad[n_own:].clone())
            return grad[:n_own], None

    return _Rows(lambda layer, h_own: Whole.apply(h_own, layer)), sent


def _resolve(res, schedule, step, source):
    """A training step's rows from a resolver, as the planner asks for them."""
    if schedule.mode(step) == "sync" or res.table is None:
        return res.fresh(step, True, source.pull(None))
    return res.served(step, True, source)


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_the_summed_forward_equals_the_forward_when_nothing_is_stale(model):
    block, x, n_own = _partition_block(model)
    net = init_model(0, model, x.shape[1], 8, 4, 3, dropout=0.0)
    rows = {}

    def exchange(layer, h_own):  # halo rows: fixed random rows, recorded for the summed pass
        rows[layer] = torch.cat((h_own, torch.rand(block.num_src - n_own, h_own.shape[1])))
        return rows[layer]
    full = net(block, x, _Rows(exchange))
    summed = net(block, x, _ExactSums({k: v.detach() for k, v in rows.items()}, n_own), split=BlockSplit(block, x))
    torch.testing.assert_close(summed, full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_summed_inputs_with_rows_above_equal_the_forward(model):
    """A sync step of a summing run: the input layer takes its halo rows' sum, the layers
    above their rows from the exchange; without dropout that is the forward, and so are the
    weights' gradients and the gradients the exchange sends for the halo rows."""
    block, x, n_own = _partition_block(model)
    net = init_model(0, model, x.shape[1], 8, 4, 3, dropout=0.0)
    halo = {layer: torch.rand(block.num_src - n_own, 8) for layer in (1, 2)}
    whole, sent = fixed_halo(halo, n_own)

    def run(summed):
        net.zero_grad()
        if summed:
            out = net(block, x, _ExactSums({}, n_own, whole=whole), split=BlockSplit(block, x))
        else:
            out = net(block, x, whole)
        out.pow(2).sum().backward()
        return out.detach(), [p.grad.clone() for p in net.parameters()]

    full, full_grads = run(False)
    summed, summed_grads = run(True)
    torch.testing.assert_close(summed, full, rtol=1e-5, atol=1e-5)
    for a, b in zip(summed_grads, full_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    for layer in (1, 2):
        torch.testing.assert_close(sent[layer][1], sent[layer][0], rtol=1e-4, atol=1e-5)


def test_the_summed_forward_drops_owned_rows_as_the_forward_does():
    """With dropout, a summed pass keys its masks by the owned rows' ids: on a block with no
    halo rows (one partition) it is the forward itself."""
    data = synthetic(num_nodes=600, avg_degree=6, num_classes=4, feat_dim=12, seed=2)
    in_deg, out_deg = data.degrees()
    block = build_block(data.src, data.dst, data.num_nodes, data.num_nodes, out_deg, in_deg, self_loops=True)
    x = torch.from_numpy(data.features)
    net = init_model(0, "gcn", x.shape[1], 8, 4, 3, dropout=0.5)
    split = BlockSplit(block, x)
    assert split.num_halo == 0
    full = net(block, x, step=3, dropout_seed=7)
    summed = net(block, x, _ExactSums({1: torch.zeros(0, 8), 2: torch.zeros(0, 8)}, data.num_nodes), step=3,
                 dropout_seed=7, split=split)
    torch.testing.assert_close(summed, full, rtol=1e-5, atol=1e-5)


def test_gat_declares_whole_rows_and_refuses_a_plan_that_sums_them():
    block, x, _ = _partition_block("gcn")
    net = init_model(0, "gat", x.shape[1], 8, 4, 2)
    assert [t.sum for t in net.halo_takes(block, x)] == [False, False]
    assert [t.sum and t.apart for t in init_model(0, "sage", x.shape[1], 8, 4, 2).halo_takes(block, x)] == [True, True]
    with pytest.raises(RuntimeError, match="GATLayer.*takes whole halo rows.*form sum"):
        net(block, x, _ExactSums({}, 0), split=BlockSplit(block, x))


def test_the_resolver_versions_cached_rows_and_not_predicted_ones():
    ids = np.arange(0, 40, 2, dtype=np.int64)

    class Source:
        def publish(self):
            pass

        def pull(self, _ids):
            return np.random.default_rng(len(ids)).random((ids.size, 3)).astype(np.float32)

        def peek(self):
            return self.pull(None)

    for predictor, versioned in (("cache", True), ("linear-trend", False)):
        agent = InlineAgentClient()
        try:
            cfg = SNIConfig(sync_interval=3, warmup=1, predictor=predictor, sampling_ratio=1.0, smooth=0.5)
            res = HaloResolver(cfg, Counters(), table_id=1, ids=ids, dim=3, agent=lambda: agent,
                               edge_counts=lambda i: np.ones(i.size))
            versions, known = {}, {}
            schedule = SyncSchedule(cfg.warmup, cfg.sync_interval)
            for step in range(8):
                known[step] = res.cache_version()  # what the step will serve, without the agent
                out = _resolve(res, schedule, step, Source())
                versions[step] = out.version
            # steps 0, 1, 4, 7 sync; 2-3 and 5-6 are stale
            assert [versions[s] for s in (0, 1, 4, 7)] == [None] * 4
            # what a sync step asks before keeping the sum of its rows for the stale steps
            assert res.versions_stale_rows() is versioned
            if versioned:  # the same rows within a period, new ones after the next sync
                assert versions[2] == versions[3] != versions[5] == versions[6]
                assert all(known[s] == versions[s] for s in (2, 3, 5, 6))
            else:
                assert all(versions[s] is None for s in (2, 3, 5, 6))
                assert all(known[s] is None for s in range(8))
            assert known[0] is None  # nothing observed yet
        finally:
            agent.close()


@pytest.mark.parametrize("smooth", [0.0, 0.75])
def test_sums_kept_across_syncs_equal_the_sums_of_the_served_rows(smooth):
    """``--sync-halo summed``: a sync step sums its fresh rows and updates the kept sum as
    the resolver's blend says; the stale steps after it reuse that, and it is the sum of
    the rows the agent serves them (real resolver and inline agent, the cache predictor)."""
    block, x, n_own = _partition_block("gcn")
    split = BlockSplit(block, x)
    ids = np.arange(split.num_halo, dtype=np.int64) * 3
    scale = block.src_norm[n_own:]

    class Source:  # new rows at every pull
        def __init__(self, step):
            self.step = step

        def publish(self):
            pass

        def pull(self, _ids):
            return np.random.default_rng(self.step).random((ids.size, 4)).astype(np.float32)

        def peek(self):
            return self.pull(None)

    agent = InlineAgentClient()
    try:
        cfg = SNIConfig(sync_interval=3, warmup=2, predictor="cache", sampling_ratio=1.0, smooth=smooth)
        res = HaloResolver(cfg, Counters(), table_id=1, ids=ids, dim=4, agent=lambda: agent,
                           edge_counts=lambda i: np.ones(i.size))
        kept, reused = KeptSums(), []
        schedule = SyncSchedule(cfg.warmup, cfg.sync_interval)
        for step in range(9):  # steps 0, 1, 2, 5, 8 sync; 3-4 and 6-7 are stale
            out = _resolve(res, schedule, step, Source(step))
            assert (out.blend is not None) == (out.version is None)
            total = kept.get(1, out.version, scale)
            reused.append(total is not None)
            if total is None:
                total = split.sum_rows(torch.from_numpy(out.rows), scale)
                kept.keep(1, out, scale, total)
            torch.testing.assert_close(total, split.sum_rows(torch.from_numpy(out.rows), scale),
                                       rtol=1e-5, atol=1e-5)
            # what the planner hands a stale step of these rows: the kept sum itself
            assert kept.current(1, out.version) is (total if out.version is not None else None)
        assert reused == [False, False, False, True, True, False, True, True, False]
        # a sum kept for other rows (another scale) is never taken for these
        assert kept.get(1, _resolve(res, schedule, 9, Source(9)).version, scale.clone()) is None
    finally:
        agent.close()


@pytest.mark.parametrize("model, tier, sync_interval, expect", [
    ("gcn", False, 5, True), ("sage", False, 5, True), ("gat", False, 5, True),
    ("gcn", True, 5, False), ("gcn", False, 1, False),
])
def test_train_sums_halo_rows_wherever_it_applies_unless_told(model, tier, sync_interval, expect):
    values = dict(model=model, sync_interval=sync_interval)
    if tier:
        values["storage_tier"] = "/tmp/tier"
    assert TrainConfig.from_dict(values).validate().stale_sums is expect
    assert TrainConfig.from_dict(dict(values, stale_halo="rows")).validate().stale_sums is False
    # the sync steps of a summing run sum the halo input rows too, unless told not to
    assert TrainConfig.from_dict(values).validate().sync_sums == ("auto" if expect else "rows")
    assert TrainConfig.from_dict(dict(values, stale_halo="rows")).validate().sync_sums == "rows"
    for how in ("rows", "summed") if expect else ():
        assert TrainConfig.from_dict(dict(values, sync_halo=how)).validate().sync_sums == how


@pytest.mark.parametrize("values, problem", [
    (dict(storage_tier="/tmp/tier", stale_halo="summed"), "cannot apply with storage tier: its layers take whole"),
    (dict(stale_halo="everything"), "--stale-halo must be one of summed, rows"),
    (dict(stale_halo="rows", sync_halo="inputs"), "--sync-halo inputs needs stale epochs that take summed"),
    (dict(stale_halo="rows", sync_halo="summed"), "--sync-halo summed needs stale epochs that take summed"),
    (dict(sync_halo="all"), "--sync-halo must be one of auto, inputs, summed, rows"),
])
def test_summed_halo_rows_where_they_cannot_apply_are_refused_by_name(values, problem):
    with pytest.raises(ValueError, match=problem):
        TrainConfig.from_dict(dict(values, sync_interval=5)).validate()


class _Mark(torch.autograd.Function):
    """Identity whose backward records an event (the gradient of what it wraps is complete)."""

    @staticmethod
    def forward(ctx, x, events, event):
        ctx.events, ctx.event = events, event
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.events.append(ctx.event)
        return grad, None, None


class _RecordingExchange:
    """The exchange's side of a pass whose layers take their halo rows apart (``apart``) or
    summed, recording when rows and gradients would move; the autograd nodes are the real
    ones (dgl_sni.halo.autograd)."""

    def __init__(self, rows, events, n_own, apart=False):
        self.rows, self.events, self.n_own, self.apart = rows, events, n_own, apart
        self.sent = {}

    def form(self, layer):
        if self.apart:
            return Form.APART if layer else Form.ROWS
        return Form.SUM

    def start_halo(self, layer, owned):
        return HaloGate.apply(owned, self, layer)

    def halo_sum(self, layer, owned, split, scale, mask=None):
        return HaloSumFunction.apply(owned, self, layer, split, scale, mask)

    def start_rows(self, layer, owned):
        self.events.append(("pull sent", layer))

    def summed(self, layer, owned, split, scale, mask):
        self.events.append(("rows used", layer))
        if mask is None:
            return split.sum_rows(self.rows[layer], scale)
        return split.dropped_sums(self.rows[layer], scale, mask)[0]

    def pushes_grad(self, layer):
        return True

    def send_grad(self, layer, grad_halo):
        self.events.append(("gradients pushed", layer))
        self.sent[layer] = grad_halo.clone()

    def received_grad(self, layer):
        self.events.append(("gradients received", layer))
        return torch.zeros(self.n_own, self.rows[layer].shape[1])


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_a_summing_sync_step_aggregates_its_owned_rows_while_halo_rows_travel(model):
    """Forward: a layer's halo pull is sent before its owned rows are aggregated and
    received after; backward: its halo gradients are pushed before the owned rows'
    aggregation is differentiated, and the others' gradients received after it."""
    block, x, n_own = _partition_block(model)
    net = init_model(0, model, x.shape[1], 8, 4, 3, dropout=0.5)
    events = []
    exchange = _RecordingExchange({layer: torch.rand(block.num_src - n_own, 8) for layer in (1, 2)}, events, n_own)
    for i, layer in enumerate(net.layers):
        original = layer.dropped_local_sum  # the hook the model calls (GCN fuses the dropout into it)

        def dropped_local_sum(split, h, drop, original=original, i=i):
            events.append(("owned aggregated", i))
            return original(split, _Mark.apply(h, events, ("owned aggregation differentiated", i)), drop)
        layer.dropped_local_sum = dropped_local_sum
    out = net(block, x, exchange, split=BlockSplit(block, x))
    forward = list(events)
    assert [e for e in forward if e[1] > 0] == [("pull sent", 1), ("owned aggregated", 1), ("rows used", 1),
                                               ("pull sent", 2), ("owned aggregated", 2), ("rows used", 2)]
    out.pow(2).sum().backward()
    backward = [e for e in events[len(forward):] if e[1] > 0]
    assert backward == [("gradients pushed", 2), ("owned aggregation differentiated", 2), ("gradients received", 2),
                        ("gradients pushed", 1), ("owned aggregation differentiated", 1), ("gradients received", 1)]


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_an_exact_step_taking_halo_rows_apart_equals_the_forward_and_overlaps(model):
    """An exact pass whose layers take their halo rows apart (form APART) gives the whole
    block's outputs, weight gradients and pushed halo gradients, dropout included; each
    layer's pull is sent before its owned rows are aggregated, its halo gradients pushed
    before the owned aggregation's backward, the others' received after it."""
    block, x, n_own = _partition_block(model)
    net = init_model(0, model, x.shape[1], 8, 4, 3, dropout=0.5)
    halo = {layer: torch.rand(block.num_src - n_own, 8) for layer in (1, 2)}
    whole, sent = fixed_halo(halo, n_own)

    def run(exchange, split=None):
        net.zero_grad()
        out = net(block, x, exchange, step=3, dropout_seed=5, split=split)
        out.pow(2).sum().backward()
        return out.detach(), [p.grad.clone() for p in net.parameters()]

    full, full_grads = run(whole)
    events = []
    recording = _RecordingExchange(halo, events, n_own, apart=True)
    for i, layer in enumerate(net.layers):
        original = layer.dropped_local_sum  # the hook the model calls (GCN fuses the dropout into it)

        def dropped_local_sum(split, h, drop, original=original, i=i):
            events.append(("owned aggregated", i))
            return original(split, _Mark.apply(h, events, ("owned aggregation differentiated", i)), drop)
        layer.dropped_local_sum = dropped_local_sum
    apart, apart_grads = run(recording, BlockSplit(block, x))
    torch.testing.assert_close(apart, full, rtol=1e-5, atol=1e-5)
    for a, b in zip(apart_grads, full_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    for layer in (1, 2):
        torch.testing.assert_close(recording.sent[layer], sent[layer][-1], rtol=1e-4, atol=1e-5)
    assert [e for e in events if e[1] > 0] == [
        ("pull sent", 1), ("owned aggregated", 1), ("rows used", 1),
        ("pull sent", 2), ("owned aggregated", 2), ("rows used", 2),
        ("gradients pushed", 2), ("owned aggregation differentiated", 2), ("gradients received", 2),
        ("gradients pushed", 1), ("owned aggregation differentiated", 1), ("gradients received", 1)]


def test_auto_sync_halo_sums_the_input_rows_only_where_they_outnumber_the_rows_they_reach():
    """``--sync-halo auto``: rows (interval 1's step) where the input layer's halo rows are at
    most ROWS_PER_REACHED_ROW times the owned rows with a halo in-edge, inputs beyond."""
    assert choose_sync_halo(200, 191) == "rows"  # CiteSeer's 4 METIS parts, summed over them
    assert choose_sync_halo(0, 0) == "rows"  # no halo
    assert choose_sync_halo(int(ROWS_PER_REACHED_ROW * 100), 100) == "rows"
    assert choose_sync_halo(int(ROWS_PER_REACHED_ROW * 100) + 1, 100) == "inputs"
    assert choose_sync_halo(489_000, 200_000) == "inputs"  # 200k nodes: 2.4 halo rows per owned row


def test_halo_in_rows_counts_the_owned_rows_a_halo_row_reaches():
    # 3 owned rows (0-2), halo rows 3 and 4: edges 3->0, 4->0, 4->2, 1->2, 0->1
    src = np.array([3, 4, 4, 1, 0])
    dst = np.array([0, 0, 2, 2, 1])
    block = build_block(src, dst, 5, 3, np.ones(5), np.ones(3), self_loops=False)
    assert halo_in_rows(block) == 2  # rows 0 and 2


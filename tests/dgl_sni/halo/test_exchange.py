"""The exchange carries out its plan and decides nothing.

A :class:`KVHaloExchange` over a recording wire and a planner that hands it fixed plans:
for every source, form and gradient policy the wire is asked exactly what the plan says
(a reference written from the plan alone predicts every call), and the rows and gradients
it hands the model are the ones the plan names. Then a model over a real block, its halo
rows taken apart through the exchange, equals the model over the whole block."""
import dataclasses
import itertools

import numpy as np
import pytest
import torch

from dgl_sni.halo.exchange import KVHaloExchange
from dgl_sni.halo.plan import Grad, LayerPlan, Source, StepPlan
from dgl_sni.halo.resolver import Origin, Resolved
from dgl_sni.halo.rows import Form
from dgl_sni.halo.sums import BlockSplit, KeptSums
from dgl_sni.metrics import Counters
from dgl_sni.models import init_model

from tests.dgl_sni.halo.test_sums import _partition_block, fixed_halo

OWNED, HALO, D = 5, 4, 3


class FakeWire:
    """What the exchange moves, recorded; pulled rows are ``step + layer``, received
    gradients ``10 * layer``."""

    def __init__(self, num_owned=OWNED, num_halo=HALO, rows=None):
        self.num_owned, self.num_halo, self.dims = num_owned, num_halo, [D, D]
        self.tensors = type("Tensors", (), {"pipeline": True})()
        self.counters = Counters()
        self.calls, self.before_wait, self.step, self.rows = [], lambda: None, 0, rows
        self.adaptive, self.widths = False, {}

    def _rows(self, layer):
        if self.rows is not None:
            return self.rows[layer].numpy()
        return np.full((self.num_halo, self.dims[layer - 1]), self.step + layer, np.float32)

    def use(self, step, training, bits):
        self.step = step
        self.calls.append(("use", step, training, bits))

    def publish(self, layer, owned):
        self.calls.append(("publish", layer))

    def pull(self, layer, ids=None):
        self.calls.append(("pull", layer))
        return self._rows(layer)

    def send_pull(self, layer):
        self.calls.append(("send_pull", layer))
        return ("pending", layer, self.step)

    def receive(self, layer, pending):
        self.before_wait()
        self.calls.append(("receive", layer))
        return self._rows(layer)

    def complete(self, layer, pending):
        self.calls.append(("complete", layer))
        return self._rows(layer)

    def push(self, layer, grad, measure=False):
        self.calls.append(("push", layer, "to measure") if measure else ("push", layer))
        self.pushed = grad

    def end_round(self, layer, wait=True):
        self.calls.append(("end_round", layer, wait))

    def received(self, layer, step=None):
        self.calls.append(("received", layer, step))
        return torch.full((self.num_owned, D), 10.0 * layer)

    def zeros(self, layer):
        return torch.zeros((self.num_owned, D))

    def flush(self):
        self.calls.append(("flush",))


class FixedPlanner:
    """Hands the exchange the plans it is given, one per ``plan`` call; answers ``fresh`` and
    ``served`` with the rows it got (fresh) or rows of 7 (served), recording every call."""

    pipeline_from = None

    def __init__(self, *plans):
        self.plans, self.calls, self.sums = list(plans), [], KeptSums()
        self.plan_now = None

    def plan(self, step, training):
        self.plan_now = self.plans.pop(0)
        assert (self.plan_now.step, self.plan_now.training) == (step, training)
        return self.plan_now

    def fresh(self, layer, rows, owned):
        self.calls.append(("fresh", layer))
        return Resolved(rows, np.full(rows.shape[0], int(Origin.PULLED), np.uint8))

    def served(self, layer, owned, wire):
        self.calls.append(("served", layer))
        return Resolved(np.full((HALO, D), 7, np.float32), np.full(HALO, int(Origin.CACHED), np.uint8))

    def keep_sum(self, layer, resolved, scale, total):
        self.calls.append(("keep_sum", layer))

    def settle(self):
        self.calls.append(("settle",))

    def close(self):
        pass


def _plan(step, source, form=Form.ROWS, grad=Grad.PUSH, training=True, mode="sync", bits=0, **kw):
    lp = LayerPlan(source=source, form=form, grad=grad, **kw)
    return StepPlan(step=step, training=training, mode=mode, bits=bits, smoothing=0.5, input_sum=False,
                    layers={1: lp, 2: lp})


def _expected_forward(plan: StepPlan, layer: int, started: bool) -> list:
    """The wire calls a layer's rows take, from the plan alone."""
    lp = plan.layers[layer]
    if lp.source in (Source.PULLED, Source.TIER):
        return [("publish", layer), ("send_pull", layer), ("receive", layer)] if started \
            else [("publish", layer), ("pull", layer)]
    if lp.source is Source.PREVIOUS:
        return [("publish", layer), ("send_pull", layer)]
    return []  # served: the planner's business; a kept sum: nothing to move


def _expected_backward(plan: StepPlan, layer: int) -> list:
    grad = plan.layers[layer].grad
    if grad is Grad.PUSH:
        return [("push", layer), ("end_round", layer, True), ("received", layer, None)]
    if grad is Grad.DEFERRED:
        return [("push", layer), ("end_round", layer, False)]
    return []


@pytest.mark.parametrize("source, grad, bits", list(itertools.product(
    (Source.PULLED, Source.TIER, Source.SERVED), (Grad.PUSH, Grad.NONE, Grad.LAST), (0, 8))))
def test_whole_rows_move_exactly_as_the_plan_says(source, grad, bits):
    mode = "stale" if source is Source.SERVED else "sync"
    plan = _plan(3, source, grad=grad, mode=mode, bits=bits)
    wire, planner = FakeWire(), FixedPlanner(plan)
    ex = KVHaloExchange(wire, planner)
    assert ex.begin_step(3, True) == mode
    assert wire.calls[-1] == ("use", 3, True, bits)
    wire.calls.clear()
    owned = torch.randn(OWNED, D, requires_grad=True)
    out = ex(1, owned)
    assert wire.calls == _expected_forward(plan, 1, started=False)
    halo = out[OWNED:].detach()
    assert torch.equal(halo, torch.full((HALO, D), 7.0 if source is Source.SERVED else 4.0))
    assert planner.calls[-1] == ("served" if source is Source.SERVED else "fresh", 1)
    wire.calls.clear()
    out.sum().backward()
    assert wire.calls == _expected_backward(plan, 1)
    if grad is Grad.PUSH:
        assert torch.equal(owned.grad, torch.full((OWNED, D), 11.0))  # 1 from the sum, 10 from the others
    else:  # none sent: nothing received (LAST without a sync kept before it: nothing to reuse)
        assert torch.equal(owned.grad, torch.ones(OWNED, D))


def test_a_sync_keeps_what_the_stale_steps_reuse_and_nothing_else_decides():
    """Step 0 (sync) keeps its received gradient (smoothed over syncs) and its rows for the
    next step; step 1 (stale, LAST) sends nothing and gets that gradient; step 2
    (pipelined) pushes without waiting, takes step 0's kept rows and defers its gradient."""
    plans = [_plan(0, Source.PULLED, keep_grad=True, keep_previous=True),
             _plan(1, Source.SERVED, grad=Grad.LAST, mode="stale"),
             _plan(2, Source.PREVIOUS, grad=Grad.DEFERRED, mode="pipelined")]
    wire, planner = FakeWire(), FixedPlanner(*plans)
    ex = KVHaloExchange(wire, planner)
    grads = []
    for step in range(3):
        ex.begin_step(step, True)
        wire.calls.clear()
        owned = torch.zeros(OWNED, D, requires_grad=True)
        out = ex(1, owned)
        assert wire.calls == _expected_forward(plans[step], 1, started=False)
        if step == 2:
            assert torch.equal(out[OWNED:].detach(), torch.full((HALO, D), 1.0))  # step 0's rows of layer 1
        wire.calls.clear()
        out.sum().backward()
        expected = _expected_backward(plans[step], 1)
        if step == 2:  # the gradient the others sent at the exact step before, kept
            expected = expected[:2]
        assert wire.calls == expected
        grads.append(owned.grad - 1.0)
    assert torch.equal(grads[0], torch.full((OWNED, D), 10.0)) and torch.equal(grads[1], grads[0])
    assert torch.equal(grads[2], grads[0])
    wire.calls.clear()
    ex.complete_step()  # the pipelined step's pull and pushes complete at its end
    assert wire.calls == [("complete", 1), ("flush",)]


def test_a_kept_sum_moves_nothing_and_summed_rows_are_fetched_once():
    block, x, n_own = _partition_block("gcn")
    split = BlockSplit(block, x)
    scale = block.src_norm[n_own:]
    kept = torch.randn(n_own, D)
    planner = FixedPlanner(_plan(5, Source.KEPT_SUM, form=Form.SUM, grad=Grad.LAST, mode="stale", kept=kept))
    planner.sums._kept[1] = (1, scale, kept)  # summed with this scale at the last sync
    wire = FakeWire(num_owned=n_own, num_halo=split.num_halo)
    ex = KVHaloExchange(wire, planner)
    ex.begin_step(5, True)
    wire.calls.clear()
    owned = torch.zeros(n_own, D)
    assert torch.equal(ex.summed(1, owned, split, scale, None), kept)
    assert wire.calls == [] and planner.calls == [("settle",)]
    with pytest.raises(RuntimeError, match="the plan gave it their kept sum"):
        ex.forward_rows(1, owned)
    with pytest.raises(ValueError, match="takes them undropped"):
        ex.summed(1, owned, split, scale, mask=object())


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_layers_taking_rows_apart_through_the_exchange_equal_the_whole_block(model):
    """An exact plan (every layer ``APART``): the exchange starts each pull before the layer
    aggregates its owned rows, and the model's output, weight gradients and pushed halo
    gradients equal the whole block's, dropout on."""
    block, x, n_own = _partition_block(model)
    torch.manual_seed(0)  # the same rows whatever ran before (float32 sums reordered: a tolerance)
    halo = {layer: torch.rand(block.num_src - n_own, 8) for layer in (1, 2)}
    net = init_model(0, model, x.shape[1], 8, 4, 3, dropout=0.5)
    whole, sent = fixed_halo(halo, n_own)

    def run(halo_rows, split=None):
        net.zero_grad()
        out = net(block, x, halo_rows, step=2, dropout_seed=9, split=split)
        out.pow(2).sum().backward()
        return out.detach(), [p.grad.clone() for p in net.parameters()]

    full, full_grads = run(whole)
    lp = LayerPlan(source=Source.PULLED, form=Form.APART, grad=Grad.PUSH)
    plan = StepPlan(step=2, training=True, mode="sync", bits=0, smoothing=0.0, input_sum=False,
                    layers={1: lp, 2: lp})
    wire = FakeWire(num_owned=n_own, num_halo=block.num_src - n_own, rows=halo)
    wire.dims = [8, 8]
    wire.received = lambda layer, step=None: torch.zeros(n_own, 8)
    ex = KVHaloExchange(wire, FixedPlanner(plan))
    ex.begin_step(2, True)
    apart, apart_grads = run(ex, BlockSplit(block, x))
    torch.testing.assert_close(apart, full, rtol=1e-5, atol=1e-5)
    for a, b in zip(apart_grads, full_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(wire.pushed, sent[1][-1], rtol=1e-4, atol=1e-5)  # the last layer pushed: 1
    moves = [c for c in wire.calls if c[0] in ("publish", "send_pull", "receive")]
    assert moves == _expected_forward(plan, 1, started=True) + _expected_forward(plan, 2, started=True)


def test_the_truth_is_pulled_but_never_observed_and_measured_gradients_are_not_used():
    """``--stale-truth`` rows come from the owners and go to no resolver; a stale step that
    measures its gradients pushes and receives the true ones, hands them to the planner, and
    gives the owned rows what the plan says (``LAST``: the kept ones)."""
    plans = [_plan(0, Source.PULLED, keep_grad=True),
             _plan(1, Source.TRUE, grad=Grad.LAST, mode="stale", measure_grad=True)]
    wire, planner = FakeWire(), FixedPlanner(*plans)
    measured = []
    planner.measure_grad = lambda layer, used, true: measured.append((layer, used.clone(), true.clone()))
    ex = KVHaloExchange(wire, planner)
    for step in range(2):
        ex.begin_step(step, True)
        wire.calls.clear()
        owned = torch.zeros(OWNED, D, requires_grad=True)
        out = ex(1, owned)
        assert wire.calls == [("publish", 1), ("pull", 1)]
        wire.calls.clear()
        out.sum().backward()
        push = ("push", 1) if step == 0 else ("push", 1, "to measure")  # not training traffic
        assert wire.calls == [push, ("end_round", 1, True), ("received", 1, None)]
    assert planner.calls.count(("fresh", 1)) == 1  # the sync's rows only
    assert torch.equal(owned.grad - 1.0, torch.full((OWNED, D), 10.0))  # the kept gradient of the sync
    assert len(measured) == 1 and measured[0][0] == 1 and torch.equal(measured[0][1], measured[0][2])


def test_rows_and_gradients_averaged_over_steps_are_what_a_sync_publishes_and_pushes():
    """``--row-average`` / ``--grad-average`` A: every training step adds the owned rows (the halo
    gradients) it computes to their average, ``A * old + (1 - A) * new``; a sync publishes (pushes)
    the average, a stale step only updates it; the owners take what arrives unsmoothed."""
    a = 0.5
    published, pushed = [], []

    class Wire(FakeWire):
        def publish(self, layer, owned):
            published.append(owned.clone())
            super().publish(layer, owned)

        def push(self, layer, grad, measure=False):
            pushed.append(grad.clone())
            super().push(layer, grad, measure)

    plans = [_plan(0, Source.PULLED, form=Form.SUM, keep_grad=True, average_rows=a, average_grads=a),
             _plan(1, Source.SERVED, form=Form.SUM, grad=Grad.LAST, mode="stale", average_rows=a, average_grads=a),
             _plan(2, Source.PULLED, form=Form.SUM, keep_grad=True, average_rows=a, average_grads=a)]
    wire, planner = Wire(), FixedPlanner(*plans)
    ex = KVHaloExchange(wire, planner)

    class Split:  # a halo sum of the rows themselves; the rows' gradient is the sum's, by step
        def sum_rows(self, rows, scale):
            return rows[:OWNED].sum(0, keepdim=True).expand(OWNED, D).contiguous()

        def rows_grad(self, grad_sum, scale, mask=None):
            return torch.full((HALO, D), float(ex.plan.step + 1))

    for step, rows in enumerate((1.0, 3.0, 7.0)):
        ex.begin_step(step, True)
        owned = torch.full((OWNED, D), rows, requires_grad=True)
        h = ex.start_halo(1, owned)
        ex.halo_sum(1, h, Split(), None).sum().backward()
    # rows published at the syncs (steps 0 and 2): 1, then 0.5 * (0.5 * 1 + 0.5 * 3) + 0.5 * 7
    assert [float(p[0, 0]) for p in published] == [1.0, 4.5]
    # gradients pushed at the syncs: 1, then 0.5 * (0.5 * 1 + 0.5 * 2) + 0.5 * 3
    assert [float(p[0, 0]) for p in pushed] == [1.0, 2.25]


def test_a_layer_taking_whole_rows_averages_them_too():
    """GAT's layers take whole rows: their rows and gradients pass through the exchange once per
    step all the same, so a sync publishes and pushes their averages as well."""
    published, pushed = [], []

    class Wire(FakeWire):
        def publish(self, layer, owned):
            published.append(float(owned[0, 0]))

        def push(self, layer, grad, measure=False):
            pushed.append(float(grad[0, 0]))

    plans = [_plan(0, Source.PULLED, average_rows=0.5, average_grads=0.5),
             _plan(1, Source.SERVED, grad=Grad.LAST, mode="stale", average_rows=0.5, average_grads=0.5),
             _plan(2, Source.PULLED, average_rows=0.5, average_grads=0.5)]
    ex = KVHaloExchange(Wire(), FixedPlanner(*plans))
    for step, value in enumerate((1.0, 3.0, 7.0)):
        ex.begin_step(step, True)
        out = ex(1, torch.full((OWNED, D), value, requires_grad=True))
        (out * (step + 1)).sum().backward()  # the halo rows' gradient: step + 1
    assert published == [1.0, 4.5] and pushed == [1.0, 2.25]


class StepWire(FakeWire):
    """Received gradients carry the step they were pushed at (100: a sync's, received at once)."""

    def received(self, layer, step=None):
        self.calls.append(("received", layer, step))
        return torch.full((self.num_owned, D), 100.0 if step is None else float(step))


@pytest.mark.parametrize("g", [0.0, 0.5])
def test_pipelined_steps_average_their_one_step_old_rows_and_gradients_over_steps(g):
    """With smoothing ``g`` (PipeGCN's), pipelined step ``s`` takes ``g * (what step s-1 took)
    + (1 - g) * (the rows and gradient one step old)``; the first pipelined step takes the
    exact step's as they are. Rows completed after step ``s`` are ``s + 1`` (layer 1)."""
    plans = [_plan(0, Source.PULLED, keep_previous=True)] + \
        [dataclasses.replace(_plan(s, Source.PREVIOUS, grad=Grad.DEFERRED, mode="pipelined"), smoothing=g)
         for s in (1, 2, 3)]
    wire, planner = StepWire(), FixedPlanner(*plans)
    ex = KVHaloExchange(wire, planner)
    rows, grads = [], []
    for step in range(4):
        ex.begin_step(step, True)
        owned = torch.zeros(OWNED, D, requires_grad=True)
        out = ex(1, owned)
        out.sum().backward()
        rows.append(float(out[OWNED:].detach().mean()))
        grads.append(float((owned.grad - 1.0).mean()))
    ex.complete_step()
    new_rows, new_grads = [1.0, 2.0, 3.0], [100.0, 1.0, 2.0]  # what steps 1-3 got one step old
    want_rows, want_grads = [], []
    for k in range(3):
        want_rows.append(new_rows[k] if k == 0 else g * want_rows[-1] + (1 - g) * new_rows[k])
        want_grads.append(new_grads[k] if k == 0 else g * want_grads[-1] + (1 - g) * new_grads[k])
    assert rows[1:] == pytest.approx(want_rows, abs=1e-6)
    assert grads[1:] == pytest.approx(want_grads, abs=1e-5)

"""The step planner: one plan per step, every decision of the halo path in it.

Over the modes (exact, stale with each gradient policy, pipelined, tier-backed, evaluation)
and the wire's bits, the plan says where each layer's halo rows come from, in which form,
what happens to their gradients and what is kept for later steps. No cluster: the agent is
the inline one."""
import numpy as np
import pytest
import torch

from dgl_sni.config import SNIConfig
from dgl_sni.halo.plan import Grad, HaloPlanner, Source
from dgl_sni.halo.resolver import Origin
from dgl_sni.halo.rows import Form
from dgl_sni.metrics import Counters
from dpu_agent.client import InlineAgentClient

HALO = np.arange(10, 30, dtype=np.int64)
DIMS = [4, 3]


def _planner(agent=None, cfg=None, **kw):
    counters = Counters()
    planner = HaloPlanner(cfg, counters, HALO, DIMS, agent=agent, edge_counts=np.arange(HALO.size)[::-1], **kw)
    return planner, counters


def _stale_cfg(**settings):
    return SNIConfig.expanded(dict(dict(preset="fast", warmup=1, sync_interval=2), **settings))


@pytest.fixture
def agent():
    client = InlineAgentClient()
    yield client
    client.close()


@pytest.mark.parametrize("bits", [0, 8])
def test_exact_steps_pull_every_layer_apart_and_push_its_gradients(bits):
    planner, _ = _planner(bits=bits)
    for step in range(3):
        plan = planner.plan(step, training=True)
        assert plan.mode == "sync" and plan.bits == bits and not plan.input_sum
        assert set(plan.layers) == {1, 2}
        for lp in plan.layers.values():
            assert (lp.source, lp.form, lp.grad) == (Source.PULLED, Form.APART, Grad.PUSH)
            assert not (lp.keep_sum or lp.keep_grad or lp.keep_previous)
        assert planner.plan(step, training=False).bits == 0  # evaluation moves float32 rows


def test_tier_backed_rows_are_pulled_from_the_owners_files_as_whole_rows():
    plan = _planner(tier_backed=True)[0].plan(0, training=True)
    assert all((lp.source, lp.form) == (Source.TIER, Form.ROWS) for lp in plan.layers.values())
    with pytest.raises(ValueError, match="quantized halo rows cannot be tier-backed"):
        _planner(tier_backed=True, bits=8)


@pytest.mark.parametrize("bits", [0, 8])
def test_sampled_steps_pull_a_share_as_whole_rows_and_evaluation_pulls_every_row(bits):
    planner, _ = _planner(sample=0.3, bits=bits)
    plan = planner.plan(0, training=True)
    assert all((lp.source, lp.form, lp.grad) == (Source.SAMPLED, Form.ROWS, Grad.PUSH) for lp in plan.layers.values())
    assert all(lp.source is Source.PULLED for lp in planner.plan(0, training=False).layers.values())
    for bad in (dict(tier_backed=True), dict(pipeline_from=2)):
        with pytest.raises(ValueError, match="boundary node sampling samples the rows sync steps pull"):
            _planner(sample=0.3, **bad)


def test_stale_runs_sample_their_sync_steps_and_stale_steps_take_what_the_sync_pulled(agent):
    """With stale epochs the sync training steps sample (as rows, their gradients pushed); the
    stale steps sum what the cache holds, as they do without sampling; evaluation pulls every row."""
    cfg = _stale_cfg()  # warm-up 1, interval 2: steps 0 and 1 sync, 2 is stale, 3 syncs
    planner, _ = _planner(agent=agent, cfg=cfg, sample=0.3, bits=8, sum_stale=True, sync_sums="summed")
    for step, mode in ((0, "sync"), (1, "sync")):
        plan = planner.plan(step, training=True)
        assert plan.mode == mode
        assert all((lp.source, lp.form, lp.grad) == (Source.SAMPLED, Form.ROWS, Grad.PUSH)
                   for lp in plan.layers.values())
        assert all(not lp.keep_sum for lp in plan.layers.values())  # rows, not a sum: the stale step sums them
    for lp in planner.plan(1, training=False).layers.values():
        assert lp.source is Source.PULLED
    stale = planner.plan(2, training=True)
    assert stale.mode == "stale"
    assert all(lp.source is Source.SERVED and lp.form is Form.SUM and lp.keep_sum for lp in stale.layers.values())


def test_pipelined_steps_use_the_previous_steps_rows_and_defer_their_gradients():
    planner, counters = _planner(pipeline_from=2)
    plans = {}
    for step in range(4):
        plans[step] = planner.plan(step, training=True)
        assert planner.plan(step, training=False).mode == "sync"  # evaluation is exact
    assert [plans[s].mode for s in range(4)] == ["sync", "sync", "pipelined", "pipelined"]
    for s in (0, 1):  # exact steps keep their rows and gradients for the first pipelined one
        assert all(lp.keep_previous and lp.grad is Grad.PUSH for lp in plans[s].layers.values())
    for s in (2, 3):
        assert all((lp.source, lp.form, lp.grad) == (Source.PREVIOUS, Form.ROWS, Grad.DEFERRED)
                   for lp in plans[s].layers.values())
    assert counters.extra["pipelined_rows"] == 2 * 2 * HALO.size  # two steps, two layers, counted once
    assert planner.plan(5, training=True).mode == "sync"  # step 4 never trained: no previous rows


@pytest.mark.parametrize("stale_grad, grad", [("exchange", Grad.PUSH), ("skip", Grad.NONE), ("last", Grad.LAST)])
def test_stale_steps_are_served_and_their_gradients_follow_the_policy(agent, stale_grad, grad):
    planner, _ = _planner(agent, _stale_cfg(stale_grad=stale_grad, stale_halo="rows", sync_halo="rows"), bits=8)
    modes = []
    for step in range(5):  # warm-up 1, then every 2nd step syncs: 0, 1, 3 sync
        plan = planner.plan(step, training=True)
        modes.append(plan.mode)
        for layer, lp in plan.layers.items():
            if plan.mode == "sync":
                assert (lp.source, lp.grad) == (Source.PULLED, Grad.PUSH)
                assert lp.keep_grad == (stale_grad == "last")  # the stale steps reuse what it receives
                planner.fresh(layer, np.full((HALO.size, DIMS[layer - 1]), step, np.float32), None)
            else:
                assert (lp.source, lp.form, lp.grad) == (Source.SERVED, Form.APART, grad)
                planner.served(layer, None, None)
    assert modes == ["sync", "sync", "stale", "sync", "stale"]


def test_a_stale_step_takes_the_sum_kept_at_the_sync_and_counts_its_rows_as_the_caches(agent):
    planner, counters = _planner(agent, _stale_cfg(sync_halo="inputs"), bits=8, sum_stale=True, sync_sums="inputs")
    scale, kept = torch.ones(HALO.size, 1), {}
    for step in range(3):  # sync, sync, stale
        counters.snapshot_and_reset()
        plan = planner.plan(step, training=True)
        assert plan.input_sum  # every training step of such a run sums the halo input rows
        for layer, lp in plan.layers.items():
            if plan.mode == "sync":
                assert lp.form is Form.APART and lp.keep_sum  # the cache serves these rows next
                resolved = planner.fresh(layer, np.full((HALO.size, DIMS[layer - 1]), step, np.float32), None)
                kept[layer] = torch.full((5, DIMS[layer - 1]), float(step))
                planner.keep_sum(layer, resolved, scale, kept[layer])
            else:
                assert (lp.source, lp.form) == (Source.KEPT_SUM, Form.SUM)
                assert lp.kept is planner.sums.current(layer, planner.resolvers[layer].cache_version())
    assert counters.snapshot_and_reset()["cached_rows"] == 2 * HALO.size  # counted when planned, once
    eval_plan = planner.plan(2, training=False)  # exact evaluation of the same step pulls
    assert eval_plan.mode == "sync" and not eval_plan.input_sum
    assert all(lp.source is Source.PULLED and not lp.keep_sum for lp in eval_plan.layers.values())


def test_stale_evaluation_is_served_only_when_asked(agent):
    planner, _ = _planner(agent, _stale_cfg(stale_eval=True, stale_halo="rows", sync_halo="rows"))
    for step in range(2):
        planner.plan(step, training=True)
        for layer in (1, 2):
            planner.fresh(layer, np.zeros((HALO.size, DIMS[layer - 1]), np.float32), None)
    plan = planner.plan(2, training=True)
    assert plan.mode == "stale"
    served = {layer: planner.served(layer, None, None) for layer in (1, 2)}
    ev = planner.plan(2, training=False)
    assert ev.mode == "stale" and all(lp.source is Source.SERVED for lp in ev.layers.values())
    for layer in (1, 2):  # evaluation sees the rows training used
        assert np.array_equal(planner.served(layer, None, None).rows, served[layer].rows)
        assert set(np.unique(served[layer].origin)) <= {Origin.CACHED, Origin.PREDICTED}


def test_a_lost_agent_anywhere_makes_every_trainer_sync(agent):
    planner, _ = _planner(agent, _stale_cfg(stale_halo="rows", sync_halo="rows"))
    assert planner.step_flags() == (0.0,)
    for step in range(2):
        planner.plan(step, training=True)
        for layer in (1, 2):
            planner.fresh(layer, np.zeros((HALO.size, DIMS[layer - 1]), np.float32), None)
    planner.summed_flags((1.0,))  # some trainer's agent was gone at the end of the step
    assert planner.plan(2, training=True).mode == "sync"
    planner.summed_flags((0.0,))
    assert planner.plan(4, training=True).mode == "stale"


def test_the_plan_reads_as_one_line_per_layer(agent):
    planner, _ = _planner(agent, _stale_cfg(), bits=8, sum_stale=True, sync_sums="inputs")
    text = planner.plan(0, training=True).describe()
    assert text.splitlines() == ["step 0 train sync 8-bit input-sum",
                                 "  layer 1: pulled as apart, grad push keep-sum keep-grad",
                                 "  layer 2: pulled as apart, grad push keep-sum keep-grad"]


def test_settings_that_cannot_combine_are_refused():
    cfg = _stale_cfg()
    with pytest.raises(ValueError, match="pipelined steps replace stale steps"):
        _planner(cfg=cfg, pipeline_from=1)
    with pytest.raises(ValueError, match="summed halo rows are for stale steps"):
        _planner(sum_stale=True)
    with pytest.raises(ValueError, match="summed halo rows on sync steps come with summed halo rows"):
        _planner(sync_sums="inputs")


@pytest.mark.parametrize("truth, rows, grads", [("rows", {1, 2}, set()), ("grads", set(), {1, 2}),
                                                ("both@2", {2}, {2})])
def test_stale_truth_takes_the_owners_rows_and_gradients_where_asked(agent, truth, rows, grads):
    """``--stale-truth`` (a measurement): a stale step's chosen layers take the rows their owners
    have now (pulled, neither observed nor kept) and push and receive the true gradients."""
    planner, _ = _planner(agent, _stale_cfg(stale_truth=truth, sync_halo="inputs"), bits=8, sum_stale=True,
                          sync_sums="inputs")
    for step in range(2):
        plan = planner.plan(step, training=True)
        assert all(lp.source is Source.PULLED for lp in plan.layers.values())
        for layer in (1, 2):
            resolved = planner.fresh(layer, np.zeros((HALO.size, DIMS[layer - 1]), np.float32), None)
            planner.keep_sum(layer, resolved, None, torch.zeros(5, DIMS[layer - 1]))
    plan = planner.plan(2, training=True)
    assert plan.mode == "stale"
    for layer, lp in plan.layers.items():
        assert (lp.source is Source.TRUE) == (layer in rows)
        assert lp.source is (Source.TRUE if layer in rows else Source.KEPT_SUM) and lp.form is Form.SUM
        assert lp.grad is (Grad.PUSH if layer in grads else Grad.LAST)
        assert not (lp.keep_grad or lp.keep_sum)  # what the truth brought is kept by nothing


def test_measuring_staleness_also_measures_the_gradients_a_stale_step_does_not_send(agent):
    planner, counters = _planner(agent, _stale_cfg(measure_staleness=True, stale_halo="rows", sync_halo="rows"))
    for step in range(2):
        planner.plan(step, training=True)
    plan = planner.plan(2, training=True)
    assert all(lp.grad is Grad.LAST and lp.measure_grad for lp in plan.layers.values())
    counters.snapshot_and_reset()
    planner.measure_grad(1, torch.zeros(4, 3), torch.tensor([[3.0, 4.0, 0.0]] * 4))
    got = counters.snapshot_and_reset()
    assert (got["l1_grad_err_sum"], got["l1_grad_true_sum"], got["l1_grad_n"]) == (20.0, 20.0, 4)
    assert not planner.plan(2, training=False).layers[1].measure_grad  # evaluation sends nothing back


def test_without_prefetch_the_agent_is_asked_only_when_the_rows_are_needed():
    for prefetch in (True, False):
        requests, client = [], InlineAgentClient()
        ask = client.request
        client.request = lambda table, step, preview=False: (requests.append(step), ask(table, step, preview))
        try:
            planner, _ = _planner(client, _stale_cfg(prefetch=prefetch, stale_halo="rows", sync_halo="rows",
                                                     predictor="gated", sampling_ratio=1.0))
            for step in range(3):
                planner.plan(step, training=True)
                for layer in (1, 2):
                    if step < 2:
                        planner.fresh(layer, np.zeros((HALO.size, DIMS[layer - 1]), np.float32), None)
        finally:
            client.close()
        assert (2 in requests) == prefetch  # the stale step's rows asked for at its start

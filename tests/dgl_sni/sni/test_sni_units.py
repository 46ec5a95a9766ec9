"""Schedule, importance sampling, drift transfer and the trainer's halo tables (dgl_sni.sni)."""
import numpy as np
import pytest

from dgl_sni.config import SNIConfig
from dgl_sni.sni.sampling import halo_edge_counts, importance_mask
from dgl_sni.sni.schedule import SyncSchedule
from dgl_sni.sni.transfer import DriftTransfer
from dpu_agent.client import InlineAgentClient
from dpu_agent.tables import Agent
from dpu_agent.transport import AgentError


def test_schedule_warmup_then_every_interval():
    s = SyncSchedule(warmup=3, interval=4)
    assert [s.mode(t) for t in range(12)] == (["sync"] * 3 + ["sync", "stale", "stale", "stale"] * 2
                                               + ["sync"])
    assert all(SyncSchedule(0, 1).is_sync(t) for t in range(10))
    assert all(SyncSchedule(0, 5, enabled=False).is_sync(t) for t in range(10))


def test_importance_takes_most_connected_rows_ties_by_id():
    counts = np.array([3, 9, 3, 1, 9, 3])
    ids = np.array([50, 40, 30, 20, 10, 0])
    assert np.flatnonzero(importance_mask(counts, ids, 0.5)).tolist() == [1, 4, 5]  # 9, 9, then 3 with id 0
    assert importance_mask(counts, ids, 0.0).sum() == 0
    assert importance_mask(counts, ids, 1.0).all()
    assert importance_mask(counts, ids, 0.01).sum() == 1  # ceil


def test_halo_edge_counts_counts_edges_into_owned_rows():
    # 2 owned rows (0, 1), halo rows 2..4; block src ids of the edges
    assert halo_edge_counts(np.array([0, 2, 2, 4, 1, 2]), 2, 5).tolist() == [3, 0, 1]


def _moved(rows, t):
    """Rows under a weight-like change: an affine map that drifts with t."""
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((rows.shape[1], rows.shape[1])) * 0.05, rng.standard_normal(rows.shape[1])
    return (rows @ (np.eye(rows.shape[1]) + a * t) + 0.1 * b * t).astype(np.float32)


def test_drift_transfer_moves_cached_rows_like_owned_rows():
    rng = np.random.default_rng(0)
    owned0, halo0 = rng.standard_normal((500, 6)), rng.standard_normal((30, 6))
    sampled = np.zeros(30, dtype=bool)
    sampled[::2] = True
    tr = DriftTransfer(sampled)
    assert not tr.ready
    tr.sync(_moved(owned0, 0))
    moved = tr.transferred(_moved(halo0, 0), _moved(owned0, 3))
    np.testing.assert_allclose(moved, _moved(halo0, 3)[sampled], atol=1e-4)  # the same map, recovered
    assert moved.shape == (15, 6)
    # non-negative owned rows (after a ReLU): transferred rows are clamped at 0
    tr.sync(np.abs(owned0))
    assert (tr.transferred(-np.abs(halo0), np.abs(owned0)) >= 0).all()
    with pytest.raises(ValueError, match="owned rows changed"):
        tr.transferred(halo0, owned0[:100])


def test_drift_transfer_gate_serves_only_rows_where_it_was_closer():
    sampled = np.array([True, True, True, False])
    tr = DriftTransfer(sampled, margin=0.9, min_scores=2)
    agent = np.zeros((4, 2), np.float32)
    fresh = np.ones((4, 2), np.float32)
    good = np.ones((3, 2), np.float32)  # transferred rows equal to the fresh ones ...
    good[2] = -3.0  # ... except row 2, farther than the agent's
    rows, ids = tr.serve(agent, good)
    assert ids.size == 0 and rows is agent  # never scored: the agent's rows
    tr.score(good, agent, fresh)
    tr.score(good, agent, fresh)
    assert tr.chosen().tolist() == [0, 1]  # row 2 lost to the agent; row 3 is not sampled
    assert not tr.layer_open and not tr.serving  # no row chosen at those syncs
    assert tr.serve(agent, good)[1].size == 0
    tr.score(good, agent, fresh)  # this sync: rows 0 and 1 moved would have beaten the agent
    assert tr.layer_open and tr.serving
    rows, ids = tr.serve(agent, good)
    assert ids.tolist() == [0, 1]
    np.testing.assert_array_equal(rows[:2], good[:2])
    np.testing.assert_array_equal(rows[2:], agent[2:])
    for _ in range(4):  # the transfer goes wrong: the gate closes again
        tr.score(-good, agent, fresh)
    assert tr.serve(agent, good)[1].size == 0


def test_drift_transfer_layer_test_ignores_rows_that_were_only_lucky():
    """Noise alone (as under dropout): per-row averages pick rows, the layer test does not open."""
    rng = np.random.default_rng(1)
    tr = DriftTransfer(np.ones(2000, dtype=bool))
    fresh = np.zeros((2000, 4), np.float32)
    for _ in range(30):
        tr.score(rng.standard_normal((2000, 4)), rng.standard_normal((2000, 4)), fresh)
    assert tr.chosen().size > 100  # rows whose transfer happened to be closer twice or more
    assert not tr.layer_open and tr.serve(fresh, fresh)[1].size == 0


def _trajectory(t, n=40, d=8):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, d)), rng.standard_normal((n, d)) * 0.1
    return (a + b * t).astype(np.float32)


class _LostAtAddTable(InlineAgentClient):
    """An agent that is gone by the time the trainer creates its table."""

    def add_table(self, *args, **kwargs):
        raise AgentError("the agent went away (connection reset)")


def test_agent_lost_at_table_creation_falls_back_and_reseeds_at_revival(caplog):
    import logging

    from dgl_sni.metrics import Counters
    from dgl_sni.sni.table import HaloTable
    from dpu_agent.supervisor import SupervisedAgent

    clients = [_LostAtAddTable(), InlineAgentClient()]
    started = []

    def start():
        started.append(clients[len(started)])
        return started[-1]

    cfg = SNIConfig(predictor="linear-trend", sampling_ratio=0.5)
    ids, counts = np.arange(40), np.arange(40) % 5 + 1
    agent, reference = SupervisedAgent(start), InlineAgentClient()
    try:
        with caplog.at_level(logging.WARNING, logger="dgl_sni.agent"):
            table = HaloTable(3, ids, 8, counts, cfg, agent, Counters())  # must not raise
            ref = HaloTable(3, ids, 8, counts, cfg, reference, Counters())
            assert not agent.alive and [r.message.count("sni agent lost") for r in caplog.records] == [1]
            # stale steps without an agent: the rows of the last sync (zeros before any), weight 0
            rows, weight = table.served(1)
            assert not rows.any() and not weight.any() and rows.shape == (40, 8)
            table.drift(1)  # every row due, no call to the lost agent
            # the next sync brings an agent back: the table is created there and seeded with that sync
            for t in (0, 3, 6):
                table.observe(t, _trajectory(t))
                ref.observe(t, _trajectory(t))
            assert agent.alive and agent.generation == 1 and len(started) == 2
            assert sum("sni agent back (generation 1)" in r.message for r in caplog.records) == 1
            assert sum("sni agent lost" in r.message for r in caplog.records) == 1  # logged once
            got, want = table.served(8), ref.served(8)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
            assert got[1].any()  # the revived agent predicts
            assert agent.stats()["tables"] == 1
    finally:
        agent.close()
        reference.close()


class _Recording(InlineAgentClient):
    """An inline agent that records the operations it is sent."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def observe(self, table, step, rows, row_ids=None):
        self.ops.append(("observe", step))
        super().observe(table, step, rows, row_ids)

    def request(self, table, step, preview=False):
        self.ops.append(("request", step))
        super().request(table, step, preview)

    def result(self, table, step, preview=False):
        self.ops.append(("result", step))
        return super().result(table, step, preview)


def test_a_cache_table_sends_a_sync_only_when_rows_are_asked_for():
    from dgl_sni.metrics import Counters
    from dgl_sni.sni.table import HaloTable

    cfg = SNIConfig(predictor="cache", sampling_ratio=0.5)
    ids, counts = np.arange(40), np.arange(40) % 5 + 1
    agent = _Recording()
    try:
        table = HaloTable(3, ids, 8, counts, cfg, agent, Counters())
        for t in (0, 2, 4):  # syncs with no stale step between: nothing reaches the agent
            table.observe(t, _trajectory(t))
        assert agent.ops == [] and table.observations == 3
        table.prefetch(5)  # a stale step: the last sync goes first, then the request
        rows, weight = table.served(5)
        assert agent.ops[:3] == [("observe", 4), ("request", 5), ("result", 5)]
        assert np.array_equal(rows, _trajectory(4)) and not weight.any()
        calls = table.agent_calls
        table.observe(6, _trajectory(6))
        assert table.agent_calls == calls  # kept back again
        rows, _ = table.served(7)
        assert np.array_equal(rows, _trajectory(6))
        assert [op for op in agent.ops if op[0] != "request"][-2:] == [("observe", 6), ("result", 7)]
    finally:
        agent.close()


@pytest.mark.parametrize("cfg", [dict(predictor="linear-trend"), dict(predictor="cache", sync_policy="adaptive")])
def test_a_table_whose_history_is_read_sends_every_sync_before_the_next_ask(cfg):
    """A trend predictor fits every sync, and the adaptive policy's drift is a speed over the
    observations (also a cache's): neither may lose one. Each reaches the agent when the
    next one comes or the agent is next asked, with its own rows, so a sync step sends
    the agent nothing to compute."""
    from dgl_sni.metrics import Counters
    from dgl_sni.sni.table import HaloTable

    agent = _Recording()
    try:
        table = HaloTable(3, np.arange(40), 8, np.arange(40) % 5 + 1,
                          SNIConfig(sampling_ratio=0.5, **cfg), agent, Counters())
        ref = Agent()
        ref.add_table(3, 40, 8, table.sampled, table._kind, **table._params)
        for t in (0, 2, 4):
            table.observe(t, _trajectory(t))
            ref.table(3).observe(t, _trajectory(t))
        assert agent.ops == [("observe", 0), ("observe", 2)]  # 4 kept back
        table.prefetch(5)
        assert agent.ops[2:] == [("observe", 4), ("request", 5)]
        rows, weight = table.served(5)
        want, want_weight = ref.table(3).serve(5)
        assert np.array_equal(rows, want) and np.array_equal(weight, want_weight)
    finally:
        agent.close()


def test_a_cache_table_revives_a_lost_agent_at_the_sync():
    from dgl_sni.metrics import Counters
    from dgl_sni.sni.table import HaloTable
    from dpu_agent.supervisor import SupervisedAgent

    clients = [_LostAtAddTable(), InlineAgentClient()]
    started = []

    def start():
        started.append(clients[len(started)])
        return started[-1]

    agent = SupervisedAgent(start)
    try:
        table = HaloTable(3, np.arange(40), 8, np.arange(40) % 5 + 1, SNIConfig(predictor="cache"), agent,
                          Counters())
        assert not agent.alive
        table.observe(0, _trajectory(0))  # not kept back: the sync brings the agent back and seeds it
        assert agent.alive and agent.generation == 1 and len(started) == 2
        rows, weight = table.served(1)
        assert np.array_equal(rows, _trajectory(0)) and not weight.any()
    finally:
        agent.close()

"""Schedule, importance sampling, drift transfer, agent tables and the two agent clients."""
import os
import signal
import time

import numpy as np
import pytest

from dgl_sni.config import SNIConfig
from dgl_sni.sni.sampling import halo_edge_counts, importance_mask
from dgl_sni.sni.schedule import SyncSchedule
from dgl_sni.sni.transfer import DriftTransfer
from dpu_agent.client import InlineAgentClient, spawn_agent
from dpu_agent.tables import Agent, HistoryTable
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


def test_config_errors_name_the_setting(tmp_path):
    with pytest.raises(ValueError, match="--sampling-ratio must lie in"):
        SNIConfig(sampling_ratio=1.5).validate()
    with pytest.raises(ValueError, match="unknown SNI setting"):
        SNIConfig.from_dict({"sync_intervall": 3})
    bad = tmp_path / "c.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        SNIConfig.from_file(str(bad))


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


@pytest.mark.parametrize("kind", ["cache", "gated", "linear-trend", "holt"])
def test_history_table_serves_cache_or_predictions(kind):
    sampled = np.zeros(40, dtype=bool)
    sampled[:10] = True
    table = HistoryTable(40, 8, sampled, kind)
    with pytest.raises(ValueError, match="never synchronised"):
        table.serve(1)
    for t in range(0, 10, 2):
        table.observe(t, _trajectory(t))
    rows, weight = table.serve(11)
    # rows outside the sample are the cache (last observation)
    assert np.array_equal(rows[10:], _trajectory(8)[10:])
    assert (weight[10:] == 0).all()
    if kind == "cache":
        assert np.array_equal(rows, _trajectory(8)) and (weight == 0).all()
    else:
        # on a linear drift the refined rows are closer to the truth than the cache
        truth = _trajectory(11)[:10]
        assert np.abs(rows[:10] - truth).mean() < 0.8 * np.abs(_trajectory(8)[:10] - truth).mean()
        assert (weight[:10] > 0).all()
    again, _ = table.serve(11)  # memoised: same step, same rows (self-feeding advanced once)
    assert np.array_equal(again, rows)


def test_partial_observe_and_drift():
    table = HistoryTable(40, 8, np.zeros(40, bool), "cache")
    table.observe(0, _trajectory(0))
    table.observe(2, _trajectory(2))
    table.observe(3, _trajectory(3)[:5], np.arange(5))
    rows, _ = table.serve(4)
    assert np.array_equal(rows[:5], _trajectory(3)[:5]) and np.array_equal(rows[5:], _trajectory(2)[5:])
    drift = table.drift(4)
    # speed per step from the last two observations, times steps since the last one, per norm
    x2, x3, x0 = _trajectory(2), _trajectory(3), _trajectory(0)
    speed = np.concatenate((np.linalg.norm(x3[:5] - x2[:5], axis=1), np.linalg.norm(x2[5:] - x0[5:], axis=1) / 2))
    since = np.array([1] * 5 + [2] * 35)
    scale = np.linalg.norm(np.concatenate((x3[:5], x2[5:])), axis=1).mean()
    assert np.allclose(drift, speed * since / scale, rtol=1e-5)


def _exercise(client):
    sampled = np.arange(40) % 3 == 0
    client.add_table(7, 40, 8, sampled, "gated")
    for t in range(0, 12, 3):
        client.observe(7, t, _trajectory(t))
    client.request(7, 13)
    rows, weight = client.result(7, 13)
    preview, _ = client.result(7, 14, preview=True)
    client.observe(7, 15, _trajectory(15)[:4], np.arange(4))
    drift = client.drift(7, 16)
    stats = client.stats()
    return rows, weight, preview, drift, stats


def test_process_agent_matches_inline_agent():
    inline = InlineAgentClient()
    remote = spawn_agent()
    try:
        a, b = _exercise(inline), _exercise(remote)
    finally:
        inline.close()
        remote.close()
    for x, y in zip(a[:4], b[:4]):
        assert np.array_equal(x, y)
    assert a[4]["tracked_rows"] == b[4]["tracked_rows"] == 40
    assert remote.process.returncode == 0  # exited cleanly on close


class _LateReplies:
    """A host endpoint whose replies arrive after random delays (timing must not matter)."""

    def __init__(self, endpoint, seed):
        self.endpoint, self.rng = endpoint, np.random.default_rng(seed)

    def recv(self):
        time.sleep(float(self.rng.uniform(0, 0.02)))
        return self.endpoint.recv()

    def __getattr__(self, name):
        return getattr(self.endpoint, name)


def test_process_agent_serves_the_same_rows_whatever_the_reply_timing():
    inline = InlineAgentClient()
    try:
        expected = _exercise(inline)
    finally:
        inline.close()
    for seed in range(3):
        remote = spawn_agent()
        remote.endpoint = _LateReplies(remote.endpoint, seed)
        try:
            got = _exercise(remote)
        finally:
            remote.close()
        for x, y in zip(expected[:4], got[:4]):
            assert np.array_equal(x, y)


def test_agent_errors_reach_the_trainer():
    remote = spawn_agent()
    try:
        remote.add_table(1, 10, 4, np.zeros(10, bool), "cache")
        with pytest.raises(AgentError, match="never synchronised"):
            remote.result(1, 3)
        os.kill(remote.process.pid, signal.SIGKILL)
        remote.process.wait()
        with pytest.raises(AgentError, match="went away"):
            remote.observe(1, 0, np.zeros((10, 4), np.float32))
            remote.stats()
    finally:
        remote.close()


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

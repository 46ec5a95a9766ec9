"""Agent tables and the two agent clients (dpu_agent)."""
import os
import signal
import time

import numpy as np
import pytest

from dpu_agent.client import InlineAgentClient, spawn_agent
from dpu_agent.tables import HistoryTable
from dpu_agent.transport import AgentError


def _trajectory(t, n=40, d=8):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, d)), rng.standard_normal((n, d)) * 0.1
    return (a + b * t).astype(np.float32)


@pytest.mark.parametrize("kind", ["cache", "gated", "linear-trend", "holt", "window-trend"])
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
    elif kind == "window-trend":  # the paper's Algorithm 1 over the window of synced rows (2, 4, 6, 8)
        ring = {t: _trajectory(t)[:10].astype(np.float64) for t in (2, 4, 6, 8)}
        level = 0.3 * ring[8] + 0.7 * np.mean([ring[t] for t in (2, 4, 6, 8)], axis=0)
        w = {t: np.exp(-abs(8 - t) / 5.0) for t in (4, 6, 8)}
        slope = sum(w[t] * (ring[t] - ring[t - 2]) / 2 for t in (4, 6, 8)) / sum(w.values())
        np.testing.assert_allclose(rows[:10], level + 3 * slope * np.exp(-0.2 * 3), rtol=1e-5, atol=1e-5)
        assert (weight[:10] > 0).all()
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

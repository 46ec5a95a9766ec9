"""The halo resolver: one origin per row, every row counted once, the same rules on every path."""
import numpy as np

from dgl_sni.config import SNIConfig
from dgl_sni.halo.resolver import HaloResolver, Origin
from dgl_sni.metrics import Counters
from dpu_agent.client import InlineAgentClient

N, D = 30, 4
IDS = np.arange(100, 100 + 2 * N, 2, dtype=np.int64)  # sorted global ids of the halo rows


class FakeSource:
    """Rows that move linearly with the step; records what the resolver asked for."""

    origin = Origin.PULLED

    def __init__(self):
        self.step, self.published, self.pulled = 0, 0, []

    def truth(self, ids):
        return np.outer(ids, np.ones(D)).astype(np.float32) * 0.01 + self.step

    def publish(self):
        self.published += 1

    def pull(self, ids):
        ids = IDS if ids is None else np.asarray(ids)
        self.pulled.append(ids.size)
        return self.truth(ids)

    def peek(self):
        return self.truth(IDS)


def _resolver(agent=None, **cfg):
    cfg = SNIConfig(**dict(dict(sync_interval=3, warmup=1, predictor="gated", sampling_ratio=0.5), **cfg))
    counters = Counters()
    res = HaloResolver(cfg, counters, table_id=1, ids=IDS, dim=D,
                       agent=None if agent is None else (lambda: agent),
                       edge_counts=lambda ids: np.arange(ids.size)[::-1])
    return res, counters


def test_without_an_agent_every_row_is_pulled_every_step():
    res, counters = _resolver()
    src = FakeSource()
    for step in range(5):
        out = res.resolve(step, True, src)
        assert res.mode(step) == "sync" and out.count(Origin.PULLED) == N
    assert src.published == 5 and src.pulled == [N] * 5
    assert "cached_rows" not in counters.extra  # nothing was served


def test_stale_rows_have_one_origin_each_and_are_counted_once():
    agent = InlineAgentClient()
    try:
        res, counters = _resolver(agent)
        src = FakeSource()
        modes = []
        for step in range(6):
            src.step = step
            modes.append(res.mode(step))
            res.prefetch(step)
            out = res.resolve(step, True, src)
            if modes[-1] == "stale":
                extra = counters.snapshot_and_reset()
                cached, predicted = out.count(Origin.CACHED), out.count(Origin.PREDICTED)
                assert cached + predicted == N
                assert extra["cached_rows"] == cached and extra["predicted_rows"] == predicted
                assert set(np.unique(out.origin)) <= {Origin.CACHED, Origin.PREDICTED}
                # evaluation of the same step sees exactly the rows training used
                again = res.resolve(step, False, src)
                assert np.array_equal(again.rows, out.rows) and np.array_equal(again.origin, out.origin)
                counters.snapshot_and_reset()  # the trainer counts evaluation apart
            else:
                counters.snapshot_and_reset()
        assert modes == ["sync", "sync", "stale", "stale", "sync", "stale"]
        assert src.pulled == [N, N, N]  # sync steps pull every row, stale steps none
    finally:
        agent.close()


def test_adaptive_repulls_are_their_own_origin():
    agent = InlineAgentClient()
    try:
        res, counters = _resolver(agent, sync_policy="adaptive", drift_bound=1e-9)
        src = FakeSource()
        for step in range(3):  # sync, sync, stale
            src.step = step
            out = res.resolve(step, True, src)
        extra = counters.snapshot_and_reset()
        repulled = out.count(Origin.REPULLED)
        assert repulled > 0 and extra["adaptive_rows"] == repulled
        assert extra["cached_rows"] + extra["predicted_rows"] + repulled == N
        assert np.array_equal(out.rows[out.origin == Origin.REPULLED],
                              src.truth(IDS)[out.origin == Origin.REPULLED])
    finally:
        agent.close()


def test_rows_by_id_pull_what_was_never_synchronised():
    agent = InlineAgentClient()
    try:
        cfg = SNIConfig(sync_interval=2, warmup=1, predictor="cache")
        counters = Counters()
        res = HaloResolver(cfg, counters, table_id=1, agent=lambda: agent,
                           edge_counts=lambda ids: np.zeros(ids.size, np.int64))
        src = FakeSource()
        first = IDS[:10]
        res.resolve(0, True, src, ids=first)  # the first sync fixes the tracked rows
        assert np.array_equal(res.ids, np.sort(first))
        counters.snapshot_and_reset()
        asked = np.concatenate((IDS[:5], IDS[20:23]))
        out = res.resolve(2, True, src, ids=asked)
        assert res.mode(2) == "stale"
        assert list(out.origin) == [Origin.CACHED] * 5 + [Origin.PULLED] * 3
        extra = counters.snapshot_and_reset()
        assert extra["served_rows"] == 5 and extra["cached_rows"] == 5 and src.pulled == [10, 3]
    finally:
        agent.close()


def test_static_rows_are_pulled_once_then_served_exactly():
    counters = Counters()
    res = HaloResolver(SNIConfig(), counters, static=True)
    src = FakeSource()
    a = res.resolve(0, True, src, ids=IDS[:6])
    src.step = 7  # the source moved: static rows must not
    b = res.resolve(1, True, src, ids=IDS[3:9])
    assert list(a.origin) == [Origin.PULLED] * 6
    assert list(b.origin) == [Origin.STATIC] * 3 + [Origin.PULLED] * 3
    assert np.array_equal(b.rows[:3], a.rows[3:])
    assert counters.extra["served_rows"] == 3 and src.pulled == [6, 3]

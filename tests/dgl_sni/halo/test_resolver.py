"""The halo resolver: one origin per row, every row counted once, the same rules on every path
(the planner's sync and stale steps, the stock-script switch's pulls by id)."""
import numpy as np

from dgl_sni.config import SNIConfig
from dgl_sni.halo.resolver import HaloResolver, Origin
from dgl_sni.metrics import Counters
from dgl_sni.sni.schedule import SyncSchedule
from dgl_sni.sni.transfer import DriftTransfer
from dpu_agent.client import InlineAgentClient

N, D = 30, 4
IDS = np.arange(100, 100 + 2 * N, 2, dtype=np.int64)  # sorted global ids of the halo rows


class FakeSource:
    """Rows that move linearly with the step; records what the resolver asked for."""

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


def mode(res, step):
    """``sync`` or ``stale`` at ``step`` as the planner decides it for this resolver's
    configuration (stale only once the agent has a table)."""
    cfg = res.cfg
    if res.table is None:
        return "sync"
    return SyncSchedule(cfg.warmup, cfg.sync_interval, cfg.enabled).mode(step)


def resolve(res, step, training, src, own=None, step_mode=None, next_syncs=False):
    """A step's rows as the planner and the exchange ask for them: a sync step's pulled and
    observed, a stale step's served."""
    if (step_mode or mode(res, step)) == "sync" or res.table is None:
        src.publish()
        return res.fresh(step, training, src.pull(None), own)
    return res.served(step, training, src, own, next_syncs=next_syncs)


def _resolver(agent=None, **cfg):
    cfg = SNIConfig(**dict(dict(sync_interval=3, warmup=1, predictor="gated", sampling_ratio=0.5, smooth=0.0), **cfg))
    counters = Counters()
    res = HaloResolver(cfg, counters, table_id=1, ids=IDS, dim=D,
                       agent=None if agent is None else (lambda: agent),
                       edge_counts=lambda ids: np.arange(ids.size)[::-1])
    return res, counters


def test_without_an_agent_every_row_is_pulled_every_step():
    res, counters = _resolver()
    src = FakeSource()
    for step in range(5):
        out = resolve(res, step, True, src)
        assert mode(res, step) == "sync" and out.count(Origin.PULLED) == N
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
            modes.append(mode(res, step))
            res.prefetch(step)
            out = resolve(res, step, True, src)
            if modes[-1] == "stale":
                extra = counters.snapshot_and_reset()
                cached, predicted = out.count(Origin.CACHED), out.count(Origin.PREDICTED)
                assert cached + predicted == N
                assert extra["cached_rows"] == cached and extra["predicted_rows"] == predicted
                assert set(np.unique(out.origin)) <= {Origin.CACHED, Origin.PREDICTED}
                # evaluation of the same step sees exactly the rows training used
                again = resolve(res, step, False, src)
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
            out = resolve(res, step, True, src)
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
        schedule = SyncSchedule(cfg.warmup, cfg.sync_interval)
        res.resolve_ids(0, schedule.mode(0), src, first)  # the first sync fixes the tracked rows
        assert np.array_equal(res.ids, np.sort(first))
        counters.snapshot_and_reset()
        asked = np.concatenate((IDS[:5], IDS[20:23]))
        assert schedule.mode(2) == "stale"
        out = res.resolve_ids(2, schedule.mode(2), src, asked)
        assert list(out.origin) == [Origin.CACHED] * 5 + [Origin.PULLED] * 3
        extra = counters.snapshot_and_reset()
        assert extra["served_rows"] == 5 and extra["cached_rows"] == 5 and src.pulled == [10, 3]
    finally:
        agent.close()


class RecordingAgent(InlineAgentClient):
    """The inline agent, recording the order of requests and results (a sync step's preview)."""

    def __init__(self):
        super().__init__()
        self.calls, self._inside = [], False

    def request(self, table, step, preview=False):
        if not self._inside:
            self.calls.append(("request", step, preview))
        super().request(table, step, preview)

    def result(self, table, step, preview=False):
        self.calls.append(("result", step, preview))
        self._inside = True
        try:
            return super().result(table, step, preview)
        finally:
            self._inside = False


def _own(step):
    return (np.arange(8 * D, dtype=np.float32).reshape(8, D) * 0.1 + step * (1 + step)).clip(min=0)


def _drive(res, src, steps, settle_each=False, ahead=False):
    """Steps as the exchange drives them; returns the rows of every stale step. ``ahead``:
    a stale step is told when the next step syncs (the exchange's schedule knows)."""
    served = []
    for step in steps:
        src.step = step
        if mode(res, step) == "sync":
            res.prefetch_preview(step, own_rows=True)
        else:
            res.prefetch(step)
        out = resolve(res, step, True, src, own=_own(step), next_syncs=ahead and mode(res, step + 1) == "sync")
        if settle_each:
            res.settle()
        if mode(res, step) == "stale":
            served.append(out.rows.copy())
    res.settle()
    return served


def test_a_sync_steps_preview_is_asked_for_ahead_and_collected():
    agent = RecordingAgent()
    try:
        res, counters = _resolver(agent, transfer=True)
        res.transfer = DriftTransfer(res.table.sampled)
        src = FakeSource()
        _drive(res, src, range(5))  # syncs 0, 1, 4
        previews = [c for c in agent.calls if c[2]]
        # not at 0 (no history yet): at 1 and 4, asked at the start of the step, taken in resolve
        assert previews == [("request", 1, True), ("result", 1, True), ("request", 4, True), ("result", 4, True)]
        assert res.transfer.scores.max() == 2  # both scorings ran (left for later, settled), in order
        assert counters.extra["transfer_s"] > 0  # counted once settled

        # rows not in memory (own=None, the storage tier): the preview asked for is still collected
        agent.calls.clear()
        res.prefetch_preview(7, own_rows=True)
        resolve(res, 7, True, src, own=None)
        assert [c for c in agent.calls if c[2]] == [("request", 7, True), ("result", 7, True)]
    finally:
        agent.close()


def test_work_left_for_later_and_previews_asked_ahead_leave_what_doing_it_at_once_leaves():
    """A sync step's transfer work is done where the exchange settles (up to the next entry
    point), and a stale step may ask for the next sync's preview; a resolver that settles
    at once and asks at the sync must end in the same state and serve the same rows."""
    runs = []
    for settle_each, ahead in ((True, False), (False, False), (False, True)):
        agent = InlineAgentClient()
        try:
            res, _ = _resolver(agent, transfer=True, sync_interval=2)
            res.transfer = DriftTransfer(res.table.sampled)
            served = _drive(res, FakeSource(), range(12), settle_each=settle_each, ahead=ahead)
            t = res.transfer
            runs.append((served, t.scores.copy(), t.err_transfer.copy(), t.err_agent.copy(), t._base.copy()))
        finally:
            agent.close()
    (a_rows, *a_state), *others = runs
    for b_rows, *b_state in others:
        assert len(a_rows) == len(b_rows) > 0
        assert all(np.array_equal(x, y) for x, y in zip(a_rows, b_rows))
        assert all(np.array_equal(x, y) for x, y in zip(a_state, b_state))
    assert a_state[0].max() >= 3  # it really scored


def test_a_stale_step_before_a_sync_asks_for_its_preview_and_the_sync_only_collects_it():
    agent = RecordingAgent()
    try:
        res, _ = _resolver(agent, transfer=True, sync_interval=2)
        res.transfer = DriftTransfer(res.table.sampled)
        _drive(res, FakeSource(), range(6), ahead=True)  # syncs 0, 1, 3, 5
        at = {step: [c for c in agent.calls if c[1] == step] for step in (3, 5)}
        calls = [c[:3] for c in agent.calls]
        # the preview of 3 is asked right after stale step 2 got its rows, and only collected at 3
        i = calls.index(("result", 2, False))
        assert calls[i + 1] == ("request", 3, True)
        assert ("request", 3, True) not in calls[i + 2:] and ("result", 3, True) in calls[i + 2:]
        assert at[5][0][:3] == ("request", 5, True) and at[5][-1][:3] == ("result", 5, True)
        assert len(at[3]) == len(at[5]) == 2
    finally:
        agent.close()


def test_smoothing_serves_the_average_of_the_synced_rows():
    """``smooth`` S: the agent observes S * previous + (1 - S) * fresh at every sync, so a stale
    step with the cache serves that average instead of the last synced rows."""
    agent = InlineAgentClient()
    try:
        res, _ = _resolver(agent, predictor="cache", smooth=0.75, sync_interval=2, warmup=1)
        src = FakeSource()
        seen = []
        for step in range(4):  # syncs at 0, 1, 3; stale at 2
            src.step = step
            seen.append(src.truth(IDS))
            out = resolve(res, step, True, src)
            if mode(res, step) == "sync":
                assert np.array_equal(out.rows, seen[-1])  # training always gets the fresh rows
        src.step = 4
        stale = resolve(res, 4, True, src, step_mode="stale")
        # syncs at 0, 1 and 3, each averaged in with weight 0.25
        expect = 0.75 * (0.75 * seen[0] + 0.25 * seen[1]) + 0.25 * seen[3]
        np.testing.assert_allclose(stale.rows, expect, rtol=1e-6)
        other = InlineAgentClient()
        try:
            plain, _ = _resolver(other, predictor="cache", sync_interval=2, warmup=1)
            for step in (0, 1):
                src.step = step
                resolve(plain, step, True, src, step_mode="sync")
            np.testing.assert_array_equal(resolve(plain, 2, True, src, step_mode="stale").rows, seen[1])
        finally:
            other.close()
    finally:
        agent.close()


def test_smoothing_moves_only_the_averages_of_rows_pulled_again():
    """The adaptive policy pulls single rows on stale steps: their averages move, the others stay."""
    res, _ = _resolver(None, predictor="cache", smooth=0.5, sync_policy="adaptive")
    first = np.arange(N * D, dtype=np.float32).reshape(N, D)
    np.testing.assert_array_equal(res._smoothed(first), first)
    rows = np.array([1, 4])
    moved = res._smoothed(np.full((2, D), 100.0, np.float32), rows)
    np.testing.assert_allclose(moved, 0.5 * first[rows] + 50.0)
    kept = np.setdiff1d(np.arange(N), rows)
    np.testing.assert_array_equal(res._average[kept], first[kept])


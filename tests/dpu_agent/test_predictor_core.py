"""Compiled predictor core (dpu_agent) vs the numpy reference (``numpy_ref.py`` beside this file);
error handling; behaviour."""
import numpy as np
import pytest

from dpu_agent import GatedPredictor, HoltPredictor, TrendPredictor
from tests.dpu_agent.numpy_ref import NumpyGatedPredictor, NumpyHoltPredictor, NumpyTrendPredictor

RTOL = 1e-5


def assert_close(got, ref, what=""):
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    assert got.shape == ref.shape, what
    assert np.isfinite(got).all() and np.isfinite(ref).all(), what
    if got.size:
        err = np.abs(got - ref) / np.maximum(1.0, np.abs(ref))
        assert err.max() <= RTOL, f"{what}: max relative error {err.max():.3g}"


class Trajectories:
    """x_i(t) = a_i + b_i t + c_i sin(w_i t + phi_i) + noise, float32 [n, dim]."""

    def __init__(self, rng, num_nodes, dim, noise=0.01, wiggle=1.0, drift=0.3):
        self.rng = rng
        self.a = rng.uniform(-2, 2, (num_nodes, dim))
        self.b = rng.uniform(-drift, drift, (num_nodes, dim))
        self.c = rng.uniform(0, wiggle, (num_nodes, dim))
        self.w = rng.uniform(0.1, 0.5, (num_nodes, dim))
        self.phi = rng.uniform(0, 2 * np.pi, (num_nodes, dim))
        self.noise = np.broadcast_to(np.asarray(noise, np.float64).reshape(-1, 1), (num_nodes, 1))

    def clean(self, ids, t):
        return self.a[ids] + self.b[ids] * t + self.c[ids] * np.sin(self.w[ids] * t + self.phi[ids])

    def __call__(self, ids, t):
        x = self.clean(ids, t) + self.noise[ids] * self.rng.standard_normal((len(ids), self.a.shape[1]))
        return x.astype(np.float32)


def random_ids(rng, pool, lo=1):
    pool = np.asarray(pool, np.int64)
    return rng.permutation(pool)[:rng.integers(lo, len(pool) + 1)] if len(pool) else pool


# ----------------------------------------------------------------------- compiled vs numpy
@pytest.mark.parametrize("window", [1, 2, 4, 7])
@pytest.mark.parametrize("dim", [1, 7, 16, 64])
def test_trend_matches_reference(dim, window):
    rng = np.random.default_rng(1000 * dim + window)
    n_nodes = 40
    traj = Trajectories(rng, n_nodes, dim)
    kw = dict(window=window, beta=0.15, lam=0.25)
    p, q = TrendPredictor(n_nodes, dim, **kw), NumpyTrendPredictor(n_nodes, dim, **kw)
    seen = np.zeros(n_nodes, bool)
    seen_early = rng.permutation(n_nodes)[: n_nodes // 2]   # the rest appear mid-run
    t = 0.0
    for call in range(36):
        t += float(rng.choice([0.5, 1.0, 1.0, 2.0, 3.0]))
        mode = "init" if call == 0 else rng.choice(["none", "all", "mask"])
        if mode == "init":
            ids = seen_early.astype(np.int64)
            obs, mask = traj(ids, t), None
        elif mode == "none":
            ids = random_ids(rng, np.flatnonzero(seen))
            obs, mask = None, None
        else:
            ids = random_ids(rng, np.arange(n_nodes) if call > 12 else np.flatnonzero(seen))
            obs = traj(ids, t)
            mask = None
            if mode == "mask":
                mask = (rng.random(len(ids)) < 0.5) | ~seen[ids]
                if call % 2:
                    mask = mask.astype(np.uint8)
        got, ref = p.step(ids, t, obs, mask), q.step(ids, t, obs, mask)
        assert got.dtype == np.float32 and got.shape == (len(ids), dim)
        assert_close(got, ref, f"step call {call}")
        seen[ids] = True
        obs_ids = np.flatnonzero(seen)
        pw_ids = random_ids(rng, obs_ids)
        horizon = t + float(rng.choice([0.0, 1.0, 2.5, 6.0]))
        assert_close(p.predict_window(pw_ids, horizon), q.predict_window(pw_ids, horizon),
                     f"predict_window call {call}")
        assert_close(p.predict_window(pw_ids, horizon, alpha=0.7, scale=2.0, lam_pred=0.05),
                     q.predict_window(pw_ids, horizon, alpha=0.7, scale=2.0, lam_pred=0.05))
    all_ids = np.arange(n_nodes, dtype=np.int64)
    assert np.array_equal(p.observed(all_ids), q.observed(all_ids))
    assert_close(p.last(obs_ids), q.last(obs_ids), "last")
    assert np.array_equal(p.last_time(all_ids), q.last_time(all_ids), equal_nan=True)


@pytest.mark.parametrize("dim", [1, 7, 16, 64])
def test_holt_matches_reference(dim):
    rng = np.random.default_rng(7 + dim)
    n_nodes = 40
    traj = Trajectories(rng, n_nodes, dim)
    p, q = HoltPredictor(n_nodes, dim), NumpyHoltPredictor(n_nodes, dim)
    seen = np.zeros(n_nodes, bool)
    t = 0.0
    for call in range(30):
        t += float(rng.choice([0.5, 1.0, 2.0, 3.0]))
        ids = random_ids(rng, np.arange(n_nodes))
        obs = traj(ids, t)
        p.observe(ids, t, obs)
        q.observe(ids, t, obs)
        seen[ids] = True
        f_ids = random_ids(rng, np.flatnonzero(seen))
        ft = t + float(rng.choice([0.0, 1.0, 4.0]))
        assert_close(p.forecast(f_ids, ft), q.forecast(f_ids, ft), f"forecast call {call}")
    assert np.array_equal(p.observed(np.arange(n_nodes)), seen)


@pytest.mark.parametrize("window", [1, 4, 7])
@pytest.mark.parametrize("dim", [1, 7, 16, 64])
def test_gated_matches_reference(dim, window):
    rng = np.random.default_rng(50 + dim * 10 + window)
    n_nodes = 60
    # half the nodes drift smoothly (gate opens), half are noise (gate stays shut)
    traj = Trajectories(rng, n_nodes, dim, noise=np.where(np.arange(n_nodes) < n_nodes // 2, 0.01, 0.5))
    kw = dict(window=window, max_horizon=4.0, trend_cap=1.5, min_compare=2)
    p, q = GatedPredictor(n_nodes, dim, **kw), NumpyGatedPredictor(n_nodes, dim, **kw)
    seen = np.zeros(n_nodes, bool)
    t = 0.0
    opened = 0
    for call in range(30):
        t += float(rng.choice([1.0, 2.0, 3.0]))
        ids = random_ids(rng, np.arange(n_nodes), lo=n_nodes // 2)
        obs = traj(ids, t)
        p.observe(ids, t, obs)
        q.observe(ids, t, obs)
        seen[ids] = True
        s_ids = random_ids(rng, np.flatnonzero(seen))
        for st in (t, t + 1.0, t + 2.5, t + 7.0):
            (rows, w), (rrows, rw) = p.serve(s_ids, st), q.serve(s_ids, st)
            assert rows.dtype == np.float32 and w.dtype == np.float32 and w.shape == (len(s_ids),)
            assert_close(rows, rrows, f"serve rows call {call}")
            assert_close(w, rw, f"serve weights call {call}")
            opened += int((w > 0).sum())
    assert opened > 0, "the gate never opened: the comparison exercised nothing"
    gs, rs = p.gate_stats(), q.gate_stats()
    for key in ("nodes", "compared", "open"):
        assert gs[key] == rs[key], key
    assert gs["mean_weight"] == pytest.approx(rs["mean_weight"], abs=1e-6)
    assert gs["mean_open_weight"] == pytest.approx(rs["mean_open_weight"], abs=1e-6)
    assert_close(p.last(np.flatnonzero(seen)), q.last(np.flatnonzero(seen)))


# ----------------------------------------------------------------------- errors
IMPLS = [("compiled", TrendPredictor), ("numpy", NumpyTrendPredictor)]


def trend_pair(n=10, dim=3, window=3):
    """Compiled and numpy trend predictors with nodes 0..5 observed twice."""
    preds = [cls(n, dim, window=window) for _, cls in IMPLS]
    ids = np.arange(6, dtype=np.int64)
    for t in (1.0, 2.0):
        obs = (np.arange(18, dtype=np.float32).reshape(6, 3) * t)
        for pr in preds:
            pr.step(ids, t, obs)
    return preds


def trend_snapshot(pr):
    obs_ids = np.arange(6, dtype=np.int64)
    return (pr.last(obs_ids), pr.last_time(np.arange(10, dtype=np.int64)),
            pr.observed(np.arange(10, dtype=np.int64)), pr.predict_window(obs_ids, 4.0))


def same_snapshot(a, b):
    return all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b))


def ok_obs(n, dim=3):
    return np.ones((n, dim), np.float32)


@pytest.mark.parametrize("impl", [0, 1], ids=[name for name, _ in IMPLS])
@pytest.mark.parametrize("call, exc, match", [
    (lambda p: p.step(np.array([1, 10]), 3.0), ValueError, "node id 10 out of range"),
    (lambda p: p.step(np.array([-1]), 3.0), ValueError, "node id -1 out of range"),
    (lambda p: p.step(np.array([1, 2, 1]), 3.0), ValueError, "duplicate node id 1"),
    (lambda p: p.step(np.array([1, 2]), 3.0, np.ones((2, 2), np.float32)), ValueError, r"shape \[2, 3\]"),
    (lambda p: p.step(np.array([1, 2]), 3.0, ok_obs(3)), ValueError, r"shape \[2, 3\]"),
    (lambda p: p.step(np.array([1, 2], np.int32), 3.0), TypeError, "int64"),
    (lambda p: p.step(np.array([[1, 2]]), 3.0), ValueError, "1-D"),
    (lambda p: p.step(np.array([1, 2]), 3.0, ok_obs(2).astype(np.float64)), TypeError, "float32"),
    (lambda p: p.step(np.array([1, 2]), 3.0, np.ones((3, 2), np.float32).T), TypeError, "C-contiguous"),
    (lambda p: p.step(np.array([1, 2]), 3.0, ok_obs(2), np.ones(2, np.float32)), TypeError, "bool or uint8"),
    (lambda p: p.step(np.array([1, 2]), 3.0, ok_obs(2), np.ones(3, bool)), ValueError, r"shape \[2\]"),
    (lambda p: p.step(np.array([1, 2]), 3.0, None, np.ones(2, bool)), ValueError, "mask given without obs"),
    (lambda p: p.step(np.array([1, 7, 8]), 3.0), ValueError, "node 7 has never been observed"),
    (lambda p: p.step(np.array([1, 7, 8]), 3.0, ok_obs(3), np.array([1, 0, 1], bool)), ValueError,
     "node 7 has never been observed"),
    (lambda p: p.step(np.array([1, 2]), 1.5, ok_obs(2)), ValueError, "earlier than node 1"),
    (lambda p: p.step(np.array([1, 2]), float("nan")), ValueError, "finite"),
    (lambda p: p.predict_window(np.array([3, 9]), 3.0), ValueError, "node 9 has never been observed"),
    (lambda p: p.predict_window(np.array([3, 3]), 3.0), ValueError, "duplicate node id 3"),
    (lambda p: p.predict_window(np.array([3, 11]), 3.0), ValueError, "out of range"),
    (lambda p: p.predict_window(np.array([3]), 3.0, scale=0.0), ValueError, "scale"),
    (lambda p: p.last(np.array([8])), ValueError, "never been observed"),
])
def test_trend_errors_leave_state_unchanged(impl, call, exc, match):
    preds = trend_pair()
    pr = preds[impl]
    before = trend_snapshot(pr)
    with pytest.raises(exc, match=match):
        call(pr)
    assert same_snapshot(before, trend_snapshot(pr))
    # and the state evolves exactly as the untouched twin's from here on
    twin = preds[1 - impl]
    ids = np.array([0, 2, 7], np.int64)
    obs = np.full((3, 3), 9.0, np.float32)
    assert_close(pr.step(ids, 5.0, obs, np.array([0, 1, 1], bool)),
                 twin.step(ids, 5.0, obs, np.array([0, 1, 1], bool)))
    both = np.array([0, 1, 2, 3, 4, 5, 7], np.int64)
    assert_close(pr.predict_window(both, 6.0), twin.predict_window(both, 6.0))


def test_failed_call_with_valid_prefix_changes_nothing():
    """Rows before the offending one are valid; they must not have been stepped."""
    p, q = trend_pair()
    before = trend_snapshot(p)
    with pytest.raises(ValueError, match="node 9 has never"):
        p.step(np.array([0, 1, 2, 9], np.int64), 3.0)
    with pytest.raises(ValueError, match="duplicate node id 0"):
        p.step(np.array([0, 1, 2, 0], np.int64), 3.0, ok_obs(4))
    assert same_snapshot(before, trend_snapshot(p))


@pytest.mark.parametrize("cls", [HoltPredictor, NumpyHoltPredictor])
def test_holt_errors(cls):
    p = cls(6, 2)
    p.observe(np.array([0, 1]), 1.0, np.ones((2, 2), np.float32))
    p.observe(np.array([0, 1]), 2.0, np.full((2, 2), 3.0, np.float32))
    before = p.forecast(np.array([0, 1]), 4.0)
    with pytest.raises(ValueError, match="duplicate node id 1"):
        p.observe(np.array([1, 2, 1]), 3.0, np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match="out of range"):
        p.observe(np.array([0, 6]), 3.0, np.ones((2, 2), np.float32))
    with pytest.raises(ValueError, match="earlier than node 0"):
        p.observe(np.array([3, 0]), 1.0, np.ones((2, 2), np.float32))
    with pytest.raises(TypeError, match="float32"):
        p.observe(np.array([0]), 3.0, np.ones((1, 2)))
    with pytest.raises(ValueError, match="node 4 has never been observed"):
        p.forecast(np.array([0, 4]), 3.0)
    np.testing.assert_array_equal(p.forecast(np.array([0, 1]), 4.0), before)
    assert p.observed(np.arange(6)).tolist() == [True, True, False, False, False, False]


@pytest.mark.parametrize("cls", [GatedPredictor, NumpyGatedPredictor])
def test_gated_errors_and_read_only_serve(cls):
    p = cls(6, 2)
    for t in (1.0, 2.0, 3.0, 4.0):
        p.observe(np.arange(4), t, np.full((4, 2), t, np.float32) * np.arange(1, 5, dtype=np.float32)[:, None])
    rows, w = p.serve(np.arange(4), 6.0)
    stats = p.gate_stats()
    for bad in (lambda: p.observe(np.array([1, 2, 1]), 5.0, np.ones((3, 2), np.float32)),
                lambda: p.observe(np.array([0, 9]), 5.0, np.ones((2, 2), np.float32)),
                lambda: p.observe(np.array([5, 0]), 3.5, np.ones((2, 2), np.float32)),
                lambda: p.serve(np.array([0, 5]), 5.0),
                lambda: p.serve(np.array([0, 0]), 5.0)):
        with pytest.raises(ValueError):
            bad()
    with pytest.raises(TypeError, match="int64"):
        p.serve(np.array([0], np.uint64), 5.0)
    with pytest.raises(ValueError, match="node 5 has never been observed"):
        p.serve(np.array([0, 5]), 5.0)
    # serving is read-only and idempotent; failed calls changed nothing
    rows2, w2 = p.serve(np.arange(4), 6.0)
    np.testing.assert_array_equal(rows, rows2)
    np.testing.assert_array_equal(w, w2)
    assert p.gate_stats() == stats
    assert p.observed(np.arange(6)).tolist() == [True] * 4 + [False] * 2


# ----------------------------------------------------------------------- behaviour
@pytest.mark.parametrize("cls", [TrendPredictor, NumpyTrendPredictor])
@pytest.mark.parametrize("window", [2, 4, 7])
def test_linear_trajectory_is_extrapolated_exactly(cls, window):
    rng = np.random.default_rng(window)
    n, dim = 5, 8
    a = rng.uniform(-1, 1, (n, dim))
    b = rng.uniform(-0.5, 0.5, (n, dim))
    x = lambda t: (a + b * t).astype(np.float32)  # noqa: E731
    ids = np.arange(n, dtype=np.int64)
    p = cls(n, dim, window=window, beta=0.0, lam=0.0)
    times = [0.0, 1.0, 2.5, 3.0, 5.0, 6.0, 8.5, 9.0]
    for t in times:
        p.step(ids, t, x(t))
    tl = times[-1]
    for h in (0.5, 1.0, 3.0, 10.0):
        # alpha=1: the windowed predictor is x_latest + dt * (weighted mean slope) = x(t)
        np.testing.assert_allclose(p.predict_window(ids, tl + h, alpha=1.0, lam_pred=0.0), x(tl + h),
                                   rtol=1e-5, atol=1e-5)
        # alpha<1: hbar blends in the ring mean, which lags by b*(tau_latest - mean tau)
        taus = np.array(times[-min(window, len(times)):])
        lag = (1 - 0.3) * b * (tl - taus.mean())
        np.testing.assert_allclose(p.predict_window(ids, tl + h, alpha=0.3, lam_pred=0.0),
                                   x(tl + h) - lag, rtol=1e-5, atol=1e-5)
    # self-feeding steps continue the line
    for t in (10.0, 11.0, 13.5, 20.0):
        np.testing.assert_allclose(p.step(ids, t), x(t), rtol=1e-5, atol=1e-5)
    # a first observation is returned as is, later ones return the prediction
    q = cls(2, dim, window=window, beta=0.0, lam=0.0)
    np.testing.assert_array_equal(q.step(np.array([1]), 0.0, x(0.0)[:1]), x(0.0)[:1])
    q.step(np.array([1]), 1.0, x(1.0)[:1])
    np.testing.assert_allclose(q.step(np.array([1]), 3.0, x(3.0)[:1]), x(3.0)[:1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(q.last(np.array([1])), x(3.0)[:1], rtol=1e-6)


def test_holt_tracks_linear_trend():
    n, dim = 4, 5
    b = np.linspace(-1, 1, n * dim).reshape(n, dim)
    x = lambda t: (1.0 + b * t).astype(np.float32)  # noqa: E731
    p = HoltPredictor(n, dim)
    ids = np.arange(n, dtype=np.int64)
    for t in range(40):
        p.observe(ids, float(t), x(t))
    np.testing.assert_allclose(p.forecast(ids, 45.0), x(45.0), rtol=1e-3, atol=1e-3)


def gated_run(traj, n, dim, sync_every=4, syncs=30, seed=0, **kw):
    """Observe every ``sync_every`` steps, serve at the steps in between; return the summed
    squared errors of the served rows and of the cached rows, and the mean weight."""
    p = GatedPredictor(n, dim, **kw)
    ids = np.arange(n, dtype=np.int64)
    err_served = err_cache = 0.0
    weights = []
    for k in range(syncs):
        t0 = k * sync_every
        p.observe(ids, t0, traj(ids, t0))
        cache = p.last(ids)
        for h in range(1, sync_every):
            truth = traj(ids, t0 + h)
            rows, w = p.serve(ids, t0 + h)
            if k >= 3:
                err_served += float(((rows - truth).astype(np.float64) ** 2).sum())
                err_cache += float(((cache - truth).astype(np.float64) ** 2).sum())
                weights.append(w)
    return err_served, err_cache, float(np.mean(weights)), p


def test_gated_is_not_worse_than_cache_on_noise():
    rng = np.random.default_rng(3)
    n, dim = 400, 16
    level = rng.uniform(-1, 1, (n, dim))
    traj = lambda ids, t: (level[ids] + 0.3 * rng.standard_normal((len(ids), dim))).astype(np.float32)  # noqa
    served, cache, mean_w, p = gated_run(traj, n, dim)
    assert mean_w < 0.02, mean_w
    assert served <= 1.02 * cache, (served, cache)
    assert p.gate_stats()["open"] <= 0.05 * n


def test_gated_beats_cache_on_smooth_drift():
    rng = np.random.default_rng(4)
    n, dim = 200, 16
    a = rng.uniform(-1, 1, (n, dim))
    b = rng.uniform(-0.2, 0.2, (n, dim))
    traj = lambda ids, t: (a[ids] + b[ids] * t + 0.002 * rng.standard_normal((len(ids), dim))  # noqa
                           ).astype(np.float32)
    served, cache, mean_w, p = gated_run(traj, n, dim)
    assert served < 0.3 * cache, (served, cache)
    assert mean_w > 0.5, mean_w
    stats = p.gate_stats()
    assert stats["nodes"] == n and stats["open"] >= 0.9 * n


def test_gated_caps_long_horizons():
    """Beyond max_horizon the served row stops moving (no runaway extrapolation)."""
    n, dim = 3, 4
    p = GatedPredictor(n, dim, max_horizon=5.0)
    ids = np.arange(n, dtype=np.int64)
    for t in range(0, 40, 4):
        p.observe(ids, float(t), np.full((n, dim), 0.1 * t, np.float32))
    r10, w = p.serve(ids, 46.0)
    r50, _ = p.serve(ids, 90.0)
    assert (w > 0).all()
    np.testing.assert_array_equal(r10, r50)


def test_properties():
    p = TrendPredictor(100, 16, window=4)
    assert (p.num_nodes, p.dim, p.window) == (100, 16, 4)
    assert p.state_bytes_per_row == 16 * 16 + 40
    assert p.record_floats % 16 == 0 and p.record_floats >= 16 * 5
    assert p.state_bytes >= 100 * p.record_floats * 4
    assert p._records.shape == (100, p.record_floats) and not p._records.flags.writeable
    empty = p.step(np.zeros(0, np.int64), 1.0)
    assert empty.shape == (0, 16)
    with pytest.raises(ValueError, match="window"):
        TrendPredictor(10, 4, window=0)
    with pytest.raises(ValueError, match="dim"):
        GatedPredictor(10, 0)


@pytest.mark.parametrize("impl", [0, 1], ids=["compiled", "numpy"])
def test_out_arrays(impl):
    p = trend_pair()[impl]
    ids = np.array([0, 3, 5], np.int64)
    ref = p.predict_window(ids, 4.0)
    out = np.full((3, 3), np.nan, np.float32)
    assert p.predict_window(ids, 4.0, out=out) is out
    np.testing.assert_array_equal(out, ref)
    obs = np.ones((3, 3), np.float32)
    before = trend_snapshot(p)
    for bad, exc in ((np.empty((3, 3)), TypeError), (np.empty((3, 4), np.float32), ValueError),
                     (np.empty((6, 3), np.float32)[::2], TypeError), (obs, ValueError)):
        with pytest.raises(exc, match="out"):
            p.step(ids, 3.0, obs, out=bad)
    assert same_snapshot(before, trend_snapshot(p))
    y = np.empty((3, 3), np.float32)
    assert p.step(ids, 3.0, out=y) is y
    g = (GatedPredictor if impl == 0 else NumpyGatedPredictor)(4, 2)
    g.observe(np.arange(4), 1.0, np.ones((4, 2), np.float32))
    rows = np.empty((2, 2), np.float32)
    r, w = g.serve(np.array([1, 2]), 2.0, out=rows)
    assert r is rows and (rows == 1).all() and (w == 0).all()
    h = (HoltPredictor if impl == 0 else NumpyHoltPredictor)(4, 2)
    h.observe(np.arange(4), 1.0, np.ones((4, 2), np.float32))
    f = np.empty((4, 2), np.float32)
    assert h.forecast(np.arange(4), 3.0, out=f) is f and (f == 1).all()


def test_concurrent_calls_on_disjoint_ids():
    """The GIL is released around the C++ loops; a mutex serialises calls on one predictor."""
    import threading
    n, dim, parts = 4000, 32, 4
    p, q = TrendPredictor(n, dim), NumpyTrendPredictor(n, dim)
    rng = np.random.default_rng(5)
    chunks = np.array_split(rng.permutation(n).astype(np.int64), parts)
    obs = [rng.standard_normal((len(c), dim), dtype=np.float32) for c in chunks]
    for t in (0.0, 1.0):
        threads = [threading.Thread(target=p.step, args=(c, t, o)) for c, o in zip(chunks, obs)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        for c, o in zip(chunks, obs):
            q.step(c, t, o)
    ids = np.arange(n, dtype=np.int64)
    assert_close(p.step(ids, 3.0), q.step(ids, 3.0))


def test_peek_is_a_read_only_step():
    """``peek`` returns what the self-feeding ``step`` would, and changes nothing."""
    rng = np.random.default_rng(5)
    ids = np.arange(30, dtype=np.int64)
    comp, ref = TrendPredictor(30, 9, window=3), NumpyTrendPredictor(30, 9, window=3)
    for t in range(6):
        obs = (np.sin(0.3 * t + np.arange(9)) + rng.normal(0, 0.01, (30, 9))).astype(np.float32)
        comp.step(ids, t, obs)
        ref.step(ids, t, obs)
    p1, p2 = comp.peek(ids, 8.5), comp.peek(ids, 8.5)
    assert np.array_equal(p1, p2)
    assert np.allclose(p1, ref.peek(ids, 8.5), rtol=1e-5, atol=1e-6)
    assert np.array_equal(p1, comp.step(ids, 8.5))  # the real step returns the same rows
    with pytest.raises(ValueError):
        TrendPredictor(4, 2).peek(np.array([1]), 0)  # never observed

"""The compiled predictor cores (``dpu_agent.PredictorCore``: ``csrc/tables.hpp``'s ``make_core``,
what the tables run) against the numpy references driven the same way (``NumpyCore`` in
``numpy_ref.py`` beside this file); error handling; behaviour."""
import re
import threading

import numpy as np
import pytest

from dpu_agent import PredictorCore
from tests.dpu_agent.numpy_ref import NumpyCore

KINDS = ("linear-trend", "window-trend", "gated", "holt")
RTOL = 1e-5
F32 = np.float32


def assert_close(got, ref, what=""):
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    assert got.shape == ref.shape, what
    assert np.isfinite(got).all() and np.isfinite(ref).all(), what
    if got.size:
        err = np.abs(got - ref) / np.maximum(1.0, np.abs(ref))
        assert err.max() <= RTOL, f"{what}: max relative error {err.max():.3g}"


def assert_same(a, b, what=""):
    """Equal to the bit, rows and weights alike."""
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape, what
        assert x.tobytes() == y.tobytes(), what


def assert_same_calls(a, b):
    """The results of two call sequences, equal to the bit."""
    assert len(a) == len(b)
    for k, (x, y) in enumerate(zip(a, b)):
        assert_same(x, y, f"call {k}")


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

    def __call__(self, ids, t):
        x = self.a[ids] + self.b[ids] * t + self.c[ids] * np.sin(self.w[ids] * t + self.phi[ids])
        x = x + self.noise[ids] * self.rng.standard_normal((len(ids), self.a.shape[1]))
        return x.astype(F32)


def random_ids(rng, pool, lo=1):
    pool = np.asarray(pool, np.int64)
    return rng.permutation(pool)[:rng.integers(lo, len(pool) + 1)] if len(pool) else pool


def serve_both(p, q, ids, t, what, preview=False):
    """Serve ``ids`` at ``t`` from the compiled core and the reference; compare; the weights."""
    (rows, w), (rrows, rw) = p.serve(ids, t, preview=preview), q.serve(ids, t, preview=preview)
    assert rows.dtype == F32 and rows.shape == (len(ids), p.dim), what
    assert w.dtype == F32 and w.shape == (len(ids),), what
    assert_close(rows, rrows, what)
    assert_close(w, rw, what)
    return w


# ----------------------------------------------------------------------- compiled vs numpy
CASES = ([(kind, dim, window) for kind in ("linear-trend", "window-trend") for dim in (1, 7, 16, 64)
          for window in (1, 2, 4, 7)]
         + [("gated", dim, window) for dim in (1, 7, 16, 64) for window in (1, 4, 7)]
         + [("holt", dim, 4) for dim in (1, 7, 16, 64)])


@pytest.mark.parametrize("kind, dim, window", CASES)
def test_core_matches_reference(kind, dim, window):
    """Observations of random ids (new nodes appear mid-run), serves of random observed ids at
    several horizons: the compiled core gives the reference's rows and weights."""
    rng = np.random.default_rng(1000 * dim + 10 * window + KINDS.index(kind))
    n = 60
    # half the nodes drift smoothly (a gate opens), half are noise (it stays shut)
    traj = Trajectories(rng, n, dim, noise=np.where(np.arange(n) < n // 2, 0.01, 0.5))
    kw = dict(window=window, beta=0.15, lam=0.25)
    p, q = PredictorCore(kind, n, dim, **kw), NumpyCore(kind, n, dim, **kw)
    assert p.self_feeding == q.self_feeding == (kind == "linear-trend")
    seen = np.zeros(n, bool)
    early = rng.permutation(n)[: n // 2].astype(np.int64)  # the rest appear mid-run
    t = 0.0
    weights = []
    for call in range(36):
        t += float(rng.choice([0.5, 1.0, 1.0, 2.0, 3.0]))
        if call == 0 or not p.self_feeding or rng.random() < 0.5:
            ids = early if call == 0 else random_ids(rng, np.arange(n) if call > 8 else np.flatnonzero(seen),
                                                     lo=len(early) // 2)
            obs = traj(ids, t)
            p.observe(ids, t, obs)
            q.observe(ids, t, obs)
        else:  # the self-feeding step: the prediction is fed back
            ids = random_ids(rng, np.flatnonzero(seen))
            serve_both(p, q, ids, t, f"{kind} serve, call {call}")
        seen[ids] = True
        s_ids = random_ids(rng, np.flatnonzero(seen))
        for h in (0.0, 1.0, 2.5, 7.0, 14.0):  # 14: beyond the gate's max_horizon
            # a preview is read-only for every kind; for the others serve is too
            weights.append(serve_both(p, q, s_ids, t + h, f"{kind} preview, call {call}", preview=True))
            if not p.self_feeding:
                weights.append(serve_both(p, q, s_ids, t + h, f"{kind} serve, call {call}"))
    weights = np.concatenate(weights)
    if kind == "gated":
        assert (weights > 0).any(), "the gate never opened: the comparison exercised nothing"
        assert (weights == 0).any(), "the gate never stayed shut"
    else:
        assert (weights == 1).all()


# ----------------------------------------------------------------------- errors
N, DIM = 10, 3
OBSERVED = np.arange(6, dtype=np.int64)


def rows(k, t=1.0):
    return (np.arange(k * DIM, dtype=F32).reshape(k, DIM) * F32(t) + F32(0.1 * t * t)).astype(F32)


def observed_core(kind):
    """A core with nodes 0..5 observed at t = 1, 2, 3 (6..9 never observed)."""
    p = PredictorCore(kind, N, DIM, window=3)
    for t in (1.0, 2.0, 3.0):
        p.observe(OBSERVED, t, rows(6, t) * np.linspace(1, 2, 6, dtype=F32)[:, None])
    return p


def follow_up(p):
    """Later calls whose results depend on every part of the state (a never-observed node's
    first observation included); their results."""
    ids = np.array([0, 1, 2, 3, 4, 5, 7], np.int64)
    out = [p.serve(OBSERVED, 3.5, preview=True)]
    p.observe(np.array([0, 2, 7], np.int64), 5.0, rows(3, 5.0))
    for t in (6.0, 8.5):
        out.append(p.serve(ids, t))
        out.append(p.serve(ids, t + 0.5, preview=True))
    p.observe(ids, 9.0, rows(7, 9.0) + F32(1))
    out.append(p.serve(ids, 12.0))
    return out


ERRORS = [  # (call, exception, message) on a core from observed_core
    (lambda p: p.observe(np.array([1, 10]), 4.0, rows(2)), ValueError, "observe: node id 10 out of range [0, 10)"),
    (lambda p: p.observe(np.array([-1]), 4.0, rows(1)), ValueError, "observe: node id -1 out of range [0, 10)"),
    (lambda p: p.serve(np.array([3, 11]), 4.0), ValueError, "serve: node id 11 out of range [0, 10)"),
    (lambda p: p.observe(np.array([0, 1, 2, 0]), 4.0, rows(4)), ValueError,
     "observe: duplicate node id 0 (ids in one call must be distinct)"),
    (lambda p: p.serve(np.array([3, 4, 3]), 4.0), ValueError,
     "serve: duplicate node id 3 (ids in one call must be distinct)"),
    (lambda p: p.serve(np.array([0, 1, 2, 7]), 4.0), ValueError,
     "serve: node 7 has never been observed (its first call needs an observation)"),
    (lambda p: p.serve(np.array([3, 7]), 4.0, preview=True), ValueError, "serve: node 7 has never been observed"),
    (lambda p: p.observe(np.array([7, 1, 2]), 2.5, rows(3)), ValueError,
     "observe: t=2.5 is earlier than node 1's last time"),
    (lambda p: p.observe(np.array([1, 2]), 4.0, np.ones((2, 2), F32)), ValueError,
     "rows must have shape [2, 3] (len(ids), dim), got (2, 2)"),
    (lambda p: p.observe(np.array([1, 2]), 4.0, rows(3)), ValueError, "rows must have shape [2, 3]"),
    (lambda p: p.observe(np.array([1, 2]), 4.0, rows(2).astype(np.float64)), TypeError,
     "rows must be a float32 array [2, 3], got dtype float64"),
    (lambda p: p.observe(np.array([1, 2]), 4.0, np.ones((3, 2), F32).T), TypeError,
     "rows must be a C-contiguous float32 array [2, 3]"),
    (lambda p: p.observe(np.array([1, 2], np.int32), 4.0, rows(2)), TypeError,
     "ids must be an int64 array [n], got dtype int32"),
    (lambda p: p.serve(np.array([1, 2], np.uint64), 4.0), TypeError, "ids must be an int64 array"),
    (lambda p: p.serve(np.array([[1, 2]]), 4.0), ValueError, "ids must be a 1-D int64 array [n], got shape (1, 2)"),
    (lambda p: p.observe(np.array([1, 2]), float("nan"), rows(2)), ValueError, "t must be a finite time, got nan"),
    (lambda p: p.serve(np.array([1, 2]), float("inf")), ValueError, "t must be a finite time, got inf"),
]


ERROR_IDS = ["observe-range", "observe-negative", "serve-range", "observe-duplicate", "serve-duplicate",
             "serve-unobserved", "preview-unobserved", "observe-backwards", "rows-shape", "rows-count",
             "rows-dtype", "rows-layout", "ids-dtype", "ids-unsigned", "ids-2d", "observe-nan", "serve-inf"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", range(len(ERRORS)), ids=ERROR_IDS)
def test_errors_leave_state_unchanged(kind, case):
    """A failed call raises the C++ core's own message and changes nothing: from then on the
    core gives, to the bit, what an untouched twin gives."""
    call, exc, match = ERRORS[case]
    p, twin = observed_core(kind), observed_core(kind)
    with pytest.raises(exc, match=re.escape(match)):
        call(p)
    assert_same_calls(follow_up(p), follow_up(twin))


def test_self_feeding_serve_rejects_time_backwards():
    """Serving linear-trend advances its state, so like an observation it cannot go back in
    time; the read-only kinds serve any time."""
    p, twin = observed_core("linear-trend"), observed_core("linear-trend")
    with pytest.raises(ValueError, match=re.escape("serve: t=2.5 is earlier than node 1's last time")):
        p.serve(np.array([1, 0]), 2.5)
    p.serve(np.array([0, 1]), 2.5, preview=True)
    assert_same_calls(follow_up(p), follow_up(twin))
    for kind in ("window-trend", "gated", "holt"):
        observed_core(kind).serve(OBSERVED, 0.5)


@pytest.mark.parametrize("kind", KINDS)
def test_preview_changes_nothing(kind):
    """A preview returns what the next serve at that time returns and changes no state; the
    read-only kinds' serve changes none either."""
    p, twin = observed_core(kind), observed_core(kind)
    first = p.serve(OBSERVED, 4.5, preview=True)
    assert_same(first, p.serve(OBSERVED, 4.5, preview=True))
    p.serve(OBSERVED, 9.0, preview=True)
    served = p.serve(OBSERVED, 4.5)
    assert_same(first, served)
    assert_same(served, twin.serve(OBSERVED, 4.5))
    if kind != "linear-trend":
        assert_same(served, p.serve(OBSERVED, 4.5))
        assert_same_calls(follow_up(p), follow_up(observed_core(kind)))
    else:
        assert_same_calls(follow_up(p), follow_up(twin))


# ----------------------------------------------------------------------- behaviour
IMPLS = [pytest.param(PredictorCore, id="compiled"), pytest.param(NumpyCore, id="numpy")]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("window", [2, 4, 7])
def test_linear_trajectory_is_extrapolated_exactly(impl, window):
    rng = np.random.default_rng(window)
    n, dim = 5, 8
    a = rng.uniform(-1, 1, (n, dim))
    b = rng.uniform(-0.5, 0.5, (n, dim))
    x = lambda t: (a + b * t).astype(F32)  # noqa: E731
    ids = np.arange(n, dtype=np.int64)
    times = [0.0, 1.0, 2.5, 3.0, 5.0, 6.0, 8.5, 9.0]
    trend = impl("linear-trend", n, dim, window=window, beta=0.0, lam=0.0)
    win = impl("window-trend", n, dim, window=window, beta=0.0, lam=0.0)
    for t in times:
        trend.observe(ids, t, x(t))
        win.observe(ids, t, x(t))
    tl = times[-1]
    # the windowed trend: hbar = 0.3*latest + 0.7*mean(ring), and the ring mean lags the line
    # by b*(tau_latest - mean tau); the weighted mean slope is b
    taus = np.array(times[-window:])
    lag = 0.7 * b * (tl - taus.mean())
    for h in (0.5, 1.0, 3.0, 10.0):
        got, w = win.serve(ids, tl + h)
        np.testing.assert_allclose(got, x(tl + h) - lag, rtol=1e-5, atol=1e-5)
        assert (w == 1).all()
        # the self-feeding trend's preview: x_last + b*dt
        np.testing.assert_allclose(trend.serve(ids, tl + h, preview=True)[0], x(tl + h), rtol=1e-5, atol=1e-5)
    # self-feeding steps continue the line
    for t in (10.0, 11.0, 13.5, 20.0):
        np.testing.assert_allclose(trend.serve(ids, t)[0], x(t), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("impl", IMPLS)
def test_holt_tracks_linear_trend(impl):
    n, dim = 4, 5
    b = np.linspace(-1, 1, n * dim).reshape(n, dim)
    x = lambda t: (1.0 + b * t).astype(F32)  # noqa: E731
    p = impl("holt", n, dim)
    ids = np.arange(n, dtype=np.int64)
    for t in range(40):
        p.observe(ids, float(t), x(t))
    got, w = p.serve(ids, 45.0)
    np.testing.assert_allclose(got, x(45.0), rtol=1e-3, atol=1e-3)
    assert (w == 1).all()


def gated_run(traj, n, dim, sync_every=4, syncs=30):
    """Observe every ``sync_every`` steps, serve at the steps in between; the summed squared
    errors of the served rows and of the cached rows (the last observation), the mean weight
    and the number of nodes whose gate is open at the end."""
    p = PredictorCore("gated", n, dim)
    ids = np.arange(n, dtype=np.int64)
    err_served = err_cache = 0.0
    weights = []
    for k in range(syncs):
        t0 = k * sync_every
        cache = traj(ids, t0)
        p.observe(ids, t0, cache)
        for h in range(1, sync_every):
            truth = traj(ids, t0 + h)
            rows, w = p.serve(ids, t0 + h)
            if k >= 3:
                err_served += float(((rows - truth).astype(np.float64) ** 2).sum())
                err_cache += float(((cache - truth).astype(np.float64) ** 2).sum())
                weights.append(w)
    return err_served, err_cache, float(np.mean(weights)), int((weights[-1] > 0).sum())


def test_gated_is_not_worse_than_cache_on_noise():
    rng = np.random.default_rng(3)
    n, dim = 400, 16
    level = rng.uniform(-1, 1, (n, dim))
    traj = lambda ids, t: (level[ids] + 0.3 * rng.standard_normal((len(ids), dim))).astype(F32)  # noqa
    served, cache, mean_w, opened = gated_run(traj, n, dim)
    assert mean_w < 0.02, mean_w
    assert served <= 1.02 * cache, (served, cache)
    assert opened <= 0.05 * n


def test_gated_beats_cache_on_smooth_drift():
    rng = np.random.default_rng(4)
    n, dim = 200, 16
    a = rng.uniform(-1, 1, (n, dim))
    b = rng.uniform(-0.2, 0.2, (n, dim))
    traj = lambda ids, t: (a[ids] + b[ids] * t + 0.002 * rng.standard_normal((len(ids), dim))  # noqa
                           ).astype(F32)
    served, cache, mean_w, opened = gated_run(traj, n, dim)
    assert served < 0.3 * cache, (served, cache)
    assert mean_w > 0.5, mean_w
    assert opened >= 0.9 * n


def test_gated_caps_long_horizons():
    """Beyond the gate's max_horizon (10 steps) the served row stops moving (no runaway
    extrapolation); before it, it moves."""
    n, dim = 3, 4
    p = PredictorCore("gated", n, dim)
    ids = np.arange(n, dtype=np.int64)
    for t in range(0, 40, 4):
        p.observe(ids, float(t), np.full((n, dim), 0.1 * t, F32))
    r5, _ = p.serve(ids, 36.0 + 5)
    r10, w = p.serve(ids, 36.0 + 10)
    r60, _ = p.serve(ids, 36.0 + 60)
    assert (w > 0).all()
    assert (r10 > r5).all()
    np.testing.assert_array_equal(r10, r60)


@pytest.mark.parametrize("kind", KINDS)
def test_concurrent_calls_on_disjoint_ids(kind):
    """Calls release the GIL; a mutex serialises calls on one core: threads on disjoint ids
    give, to the bit, what the same calls made one after the other give."""
    n, dim, parts = 4000, 32, 4
    p, q = PredictorCore(kind, n, dim), PredictorCore(kind, n, dim)
    rng = np.random.default_rng(5)
    chunks = np.array_split(rng.permutation(n).astype(np.int64), parts)
    got = [None] * parts

    def serve(k, t):
        got[k] = p.serve(chunks[k], t)

    for t in (0.0, 1.0, 2.0):
        obs = [rng.standard_normal((len(c), dim), dtype=F32) + F32(t) for c in chunks]
        threads = [threading.Thread(target=p.observe, args=(c, t, o)) for c, o in zip(chunks, obs)]
        threads += [threading.Thread(target=serve, args=(k, t + 0.5)) for k in range(parts)]
        for th in threads[:parts]:
            th.start()
        for th in threads[:parts]:
            th.join()
        for th in threads[parts:]:
            th.start()
        for th in threads[parts:]:
            th.join()
        for k, (c, o) in enumerate(zip(chunks, obs)):
            q.observe(c, t, o)
            assert_same(got[k], q.serve(c, t + 0.5))
    ids = np.arange(n, dtype=np.int64)
    assert_same(p.serve(ids, 4.0), q.serve(ids, 4.0))


def test_construction():
    for kind in KINDS:
        p = PredictorCore(kind, 100, 16, window=5)
        assert (p.kind, p.num_nodes, p.dim, p.window) == (kind, 100, 16, 5)
        assert p.self_feeding == (kind == "linear-trend")
        # the record layout of csrc/predictor.hpp: a header of the ring's times (f64), D and
        # the gate's six sums, padded to 64 B; then N and the ring (trend), or l and b (holt);
        # padded to 64 B
        header = {"linear-trend": 8 * 5 + 4, "window-trend": 8 * 5 + 4, "gated": 8 * 5 + 4 * 7, "holt": 0}[kind]
        vectors = 2 * 16 if kind == "holt" else 16 * (1 + 5)
        assert p.record_floats == -(-(-(-header // 64) * 16 + vectors) // 16) * 16
        rows, w = p.serve(np.zeros(0, np.int64), 1.0)
        assert rows.shape == (0, 16) and w.shape == (0,)
    for args, match in [(("cache", 4, 2), "'cache' has no predictor core"),
                        (("nope", 4, 2), "unknown predictor 'nope'"),
                        (("gated", -1, 2), "num_nodes must be >= 0, got -1"),
                        (("holt", 4, 0), "dim must be >= 1, got 0"),
                        (("linear-trend", 4, 2, 0), r"window must lie in \[1, 4096\], got 0"),
                        (("window-trend", 4, 2, 4097), r"window must lie in \[1, 4096\], got 4097")]:
        with pytest.raises(ValueError, match=match):
            PredictorCore(*args)

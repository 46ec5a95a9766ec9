"""Pure-numpy reference predictors: the test oracle of the compiled agent core.

Imported as ``tests.dpu_agent.numpy_ref`` (the repository root is on ``sys.path`` under pytest)
by ``tests/dpu_agent/test_predictor_core.py`` and by the agent's benchmark suite (``benchmarks/suites/suite_agent.py``).

Same constructors, methods, validation rules and results as ``dpu_agent.TrendPredictor``,
``dpu_agent.HoltPredictor`` and ``dpu_agent.GatedPredictor``, vectorised over rows (no
Python loop over rows). State is float32 like the compiled core; per-row scalars (``dt``,
exp factors, ``1/max(D, eps)``) are computed in float64 and rounded once, and the
element-wise updates are float32 in the same order as the C++ loops, so the two agree to
float32 rounding. ``predict_window`` and the gate's dot products are written literally
from the definitions (float64), as an independent check of the compiled one-pass form.

Layout: ring ``H[num_nodes, window, dim]`` float32 with its times ``tau[num_nodes,
window]`` float64, ``head`` (slot of the latest entry) and ``fill`` (valid entries, 0 =
never observed); ``x_last = H[i, head[i]]``, ``t_last = tau[i, head[i]]``.
"""
import math

import numpy as np

F32 = np.float32


def _check_ids(ids, num_nodes, what):
    a = np.asarray(ids)
    if a.dtype != np.int64:
        raise TypeError(f"ids must be an int64 array [n], got dtype {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"ids must be a 1-D int64 array [n], got shape {a.shape}")
    bad = np.flatnonzero((a < 0) | (a >= num_nodes))
    if bad.size:
        raise ValueError(f"{what}: node id {a[bad[0]]} out of range [0, {num_nodes})")
    if a.size > 1:
        order = np.argsort(a, kind="stable")
        dup = np.flatnonzero(a[order][1:] == a[order][:-1])
        if dup.size:
            raise ValueError(f"{what}: duplicate node id {a[order][dup[0]]} "
                             "(ids in one call must be distinct)")
    return a


def _check_rows(x, n, dim, name):
    a = np.asarray(x)
    if a.dtype != np.float32:
        raise TypeError(f"{name} must be a float32 array [{n}, {dim}], got dtype {a.dtype}")
    if not a.flags.c_contiguous:
        raise TypeError(f"{name} must be a C-contiguous float32 array [{n}, {dim}]")
    if a.ndim != 2 or a.shape != (n, dim):
        raise ValueError(f"{name} must have shape [{n}, {dim}] (len(ids), dim), got {a.shape}")
    return a


def _check_mask(mask, n):
    a = np.asarray(mask)
    if a.dtype != np.bool_ and a.dtype != np.uint8:
        raise TypeError(f"mask must be a bool or uint8 array [{n}], got dtype {a.dtype}")
    if a.ndim != 1 or a.shape[0] != n:
        raise ValueError(f"mask must have shape [{n}] (len(ids)), got {a.shape}")
    return a.astype(bool)


def _check_out(out, n, dim, obs=None):
    """The compiled core's checks of a caller-supplied output array."""
    if out is None:
        return
    if not isinstance(out, np.ndarray) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise TypeError(f"out must be a C-contiguous float32 numpy array [{n}, {dim}]")
    if not out.flags.writeable:
        raise ValueError("out must be writeable")
    if out.shape != (n, dim):
        raise ValueError(f"out must have shape [{n}, {dim}] (len(ids), dim), got {out.shape}")
    if obs is not None and np.may_share_memory(out, obs):
        raise ValueError("out must not overlap obs")


def _into(out, res):
    """``res``, or ``res`` copied into the caller's (checked) ``out``."""
    if out is None:
        return res
    _check_out(out, *res.shape)
    out[...] = res
    return out


def _check_time(t):
    v = float(t)
    if not math.isfinite(v):
        raise ValueError(f"t must be a finite time, got {t!r}")
    return v


def _check_sizes(num_nodes, dim, window):
    if num_nodes < 0:
        raise ValueError(f"num_nodes must be >= 0, got {num_nodes}")
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    if not 1 <= window <= 4096:
        raise ValueError(f"window must lie in [1, 4096], got {window}")


class _TrendState:
    """Ring + trend sums shared by the trend and gated references."""

    def __init__(self, num_nodes, dim, window, beta, lam, eps):
        _check_sizes(num_nodes, dim, window)
        if not eps > 0:
            raise ValueError(f"eps must be > 0, got {eps}")
        self.num_nodes, self.dim, self.window = int(num_nodes), int(dim), int(window)
        self.beta, self.lam, self.eps = float(beta), float(lam), float(eps)
        self.H = np.zeros((num_nodes, window, dim), F32)
        self.tau = np.zeros((num_nodes, window), np.float64)
        self.N = np.zeros((num_nodes, dim), F32)
        self.D = np.zeros(num_nodes, F32)
        self.head = np.zeros(num_nodes, np.int64)
        self.fill = np.zeros(num_nodes, np.int64)

    # -- validation
    def _require_observed(self, ids, what):
        never = np.flatnonzero(self.fill[ids] == 0)
        if never.size:
            raise ValueError(f"{what}: node {ids[never[0]]} has never been observed "
                             "(its first call needs an observation)")

    def _require_time(self, ids, t, what):
        seen = self.fill[ids] > 0
        back = np.flatnonzero(seen & (t < self.tau[ids, self.head[ids]]))
        if back.size:
            raise ValueError(f"{what}: t={t} is earlier than node {ids[back[0]]}'s last time")

    # -- shared pieces
    def _push(self, ids, t, x_new, first):
        """Write (x_new, t) into the rings; first rows restart their ring at slot 0."""
        nh = np.where(first, 0, (self.head[ids] + 1) % self.window)
        self.H[ids, nh] = x_new
        self.tau[ids, nh] = t
        self.head[ids] = nh
        self.fill[ids] = np.where(first, 1, np.minimum(self.fill[ids] + 1, self.window))

    def _trend_update(self, ids, t, x_last, x_new, dt, first):
        """N = g*N + (x_new - x_last)/max(dt, eps), D = g*D + 1 (first rows: N = D = 0)."""
        gd = np.exp(-self.lam * dt)
        g = gd.astype(F32)[:, None]
        inv = (1.0 / np.maximum(dt, self.eps)).astype(F32)[:, None]
        N_new = self.N[ids] * g + (x_new - x_last) * inv
        D_new = (gd * self.D[ids].astype(np.float64) + 1.0).astype(F32)
        self.N[ids] = np.where(first[:, None], F32(0), N_new)
        self.D[ids] = np.where(first, F32(0), D_new)
        self._push(ids, t, x_new, first)

    def last(self, ids):
        ids = _check_ids(ids, self.num_nodes, "last")
        self._require_observed(ids, "last")
        return self.H[ids, self.head[ids]].copy()

    def last_time(self, ids):
        ids = _check_ids(ids, self.num_nodes, "last_time")
        return np.where(self.fill[ids] > 0, self.tau[ids, self.head[ids]], np.nan)

    def observed(self, ids):
        ids = _check_ids(ids, self.num_nodes, "observed")
        return self.fill[ids] > 0


class NumpyTrendPredictor(_TrendState):
    """Reference of ``dpu_agent.TrendPredictor`` (see its docstring for the definitions)."""

    def __init__(self, num_nodes, dim, window=4, beta=0.2, lam=0.2, eps=1e-8):
        super().__init__(num_nodes, dim, window, beta, lam, eps)

    @property
    def state_bytes_per_row(self):
        return 16 * self.dim + 40

    def step(self, ids, t, obs=None, mask=None, out=None):
        ids = _check_ids(ids, self.num_nodes, "step")
        n = ids.shape[0]
        t = _check_time(t)
        if obs is not None:
            obs = _check_rows(obs, n, self.dim, "obs")
            has = np.ones(n, bool) if mask is None else _check_mask(mask, n)
        elif mask is not None:
            raise ValueError("mask given without obs")
        else:
            has = np.zeros(n, bool)
        first = self.fill[ids] == 0
        never = np.flatnonzero(first & ~has)
        if never.size:
            raise ValueError(f"step: node {ids[never[0]]} has never been observed "
                             "(its first call needs an observation)")
        self._require_time(ids, t, "step")

        head = self.head[ids]
        x_last = self.H[ids, head]
        dt = t - self.tau[ids, head]
        cv = (dt * np.exp(-self.beta * dt) / np.maximum(self.D[ids].astype(np.float64), self.eps))
        x_pred = x_last + self.N[ids] * cv.astype(F32)[:, None]
        x_new = np.where(has[:, None], obs, x_pred) if obs is not None else x_pred
        res = np.where(first[:, None], x_new, x_pred)
        _check_out(out, n, self.dim, obs)
        self._trend_update(ids, t, x_last, x_new, dt, first)
        return _into(out, res)

    def peek(self, ids, t, out=None):
        """``step(ids, t)`` without observations, read-only (nothing fed back)."""
        ids = _check_ids(ids, self.num_nodes, "peek")
        t = _check_time(t)
        self._require_observed(ids, "peek")
        head = self.head[ids]
        dt = t - self.tau[ids, head]
        cv = (dt * np.exp(-self.beta * dt) / np.maximum(self.D[ids].astype(np.float64), self.eps))
        return _into(out, (self.H[ids, head] + self.N[ids] * cv.astype(F32)[:, None]).astype(F32))

    def predict_window(self, ids, t, alpha=0.3, scale=5.0, lam_pred=0.2, out=None):
        if not scale > 0:
            raise ValueError(f"scale must be > 0, got {scale}")
        ids = _check_ids(ids, self.num_nodes, "predict_window")
        t = _check_time(t)
        self._require_observed(ids, "predict_window")
        W = self.window
        K = self.fill[ids]                                         # [n]
        j = np.arange(W)                                           # j entries back from latest
        slots = (self.head[ids][:, None] - j[None, :]) % W         # [n, W]
        valid = j[None, :] < K[:, None]
        H = self.H[ids[:, None], slots].astype(np.float64)         # [n, W, dim], latest first
        tau = self.tau[ids[:, None], slots]                        # [n, W]
        t_l = tau[:, 0]
        hbar = alpha * H[:, 0] + (1 - alpha) * (H * valid[:, :, None]).sum(1) / K[:, None]
        # pair (later j, earlier j+1): both valid iff j + 1 < K
        pair = (j[None, :-1] + 1) < K[:, None]                     # [n, W-1]
        w = np.exp(-np.abs(t_l[:, None] - tau[:, :-1]) / scale) * pair
        step = np.maximum(tau[:, :-1] - tau[:, 1:], self.eps)
        diff = (H[:, :-1] - H[:, 1:]) / step[:, :, None]
        wsum = w.sum(1)
        phi = (w[:, :, None] * diff).sum(1) / np.where(wsum > 0, wsum, 1.0)[:, None]
        dt = t - t_l
        return _into(out, (hbar + (dt * np.exp(-lam_pred * dt))[:, None] * phi).astype(F32))


class NumpyHoltPredictor:
    """Reference of ``dpu_agent.HoltPredictor``: Holt's double exponential smoothing."""

    def __init__(self, num_nodes, dim, alpha=0.5, beta_trend=0.3, eps=1e-8):
        _check_sizes(num_nodes, dim, 1)
        if not eps > 0:
            raise ValueError(f"eps must be > 0, got {eps}")
        self.num_nodes, self.dim = int(num_nodes), int(dim)
        self.alpha, self.beta_trend, self.eps = float(alpha), float(beta_trend), float(eps)
        self.level = np.zeros((num_nodes, dim), F32)
        self.trend = np.zeros((num_nodes, dim), F32)
        self.t_last = np.zeros(num_nodes, np.float64)
        self.seen = np.zeros(num_nodes, bool)

    def observe(self, ids, t, obs):
        ids = _check_ids(ids, self.num_nodes, "observe")
        t = _check_time(t)
        obs = _check_rows(obs, ids.shape[0], self.dim, "obs")
        first = ~self.seen[ids]
        back = np.flatnonzero(~first & (t < self.t_last[ids]))
        if back.size:
            raise ValueError(f"observe: t={t} is earlier than node {ids[back[0]]}'s last time")
        l, b = self.level[ids], self.trend[ids]
        dt = t - self.t_last[ids]
        dtf = dt.astype(F32)[:, None]
        gi = (self.beta_trend / np.maximum(dt, self.eps)).astype(F32)[:, None]
        lp = l + b * dtf
        ln = F32(self.alpha) * obs + F32(1.0 - self.alpha) * lp
        bn = (ln - l) * gi + F32(1.0 - self.beta_trend) * b
        self.level[ids] = np.where(first[:, None], obs, ln)
        self.trend[ids] = np.where(first[:, None], F32(0), bn)
        self.t_last[ids] = t
        self.seen[ids] = True

    def forecast(self, ids, t, out=None):
        ids = _check_ids(ids, self.num_nodes, "forecast")
        t = _check_time(t)
        never = np.flatnonzero(~self.seen[ids])
        if never.size:
            raise ValueError(f"forecast: node {ids[never[0]]} has never been observed "
                             "(its first call needs an observation)")
        dtf = (t - self.t_last[ids]).astype(F32)[:, None]
        return _into(out, self.level[ids] + self.trend[ids] * dtf)

    def observed(self, ids):
        ids = _check_ids(ids, self.num_nodes, "observed")
        return self.seen[ids].copy()


HoltPredictor = NumpyHoltPredictor


class NumpyGatedPredictor(_TrendState):
    """Reference of ``dpu_agent.GatedPredictor`` (see its docstring for the definitions)."""

    def __init__(self, num_nodes, dim, window=4, beta=0.2, lam=0.2, eps=1e-8, decay=0.5,
                 margin=0.1, min_compare=2, max_horizon=10, trend_cap=2.0):
        super().__init__(num_nodes, dim, window, beta, lam, eps)
        if not 0 <= decay <= 1:
            raise ValueError(f"decay must lie in [0, 1], got {decay}")
        if not 0 <= margin <= 1:
            raise ValueError(f"margin must lie in [0, 1], got {margin}")
        if not (max_horizon >= 0 and trend_cap >= 0):
            raise ValueError("max_horizon and trend_cap must be >= 0")
        self.decay, self.margin, self.min_compare = float(decay), float(margin), int(min_compare)
        self.max_horizon, self.trend_cap = float(max_horizon), float(trend_cap)
        z = lambda: np.zeros(num_nodes, F32)  # noqa: E731
        self.A, self.B, self.Ep, self.Ec, self.s = z(), z(), z(), z(), z()
        self.n_cmp = np.zeros(num_nodes, np.int64)

    @property
    def params(self):
        return dict(beta=self.beta, lam=self.lam, eps=self.eps, decay=self.decay,
                    margin=self.margin, min_compare=self.min_compare,
                    max_horizon=self.max_horizon, trend_cap=self.trend_cap)

    def _pred_coef(self, ids, t):
        """k with the capped prediction p = c + k*N at time t (dt clipped to max_horizon)."""
        head = self.head[ids]
        dte = np.minimum(t - self.tau[ids, head], self.max_horizon)
        N = self.N[ids].astype(np.float64)
        Dm = np.maximum(self.D[ids].astype(np.float64), self.eps)
        vnorm = np.sqrt((N * N).sum(1)) / Dm
        cap = self.trend_cap * self.s[ids].astype(np.float64)
        shrink = np.where(vnorm > cap, cap / np.where(vnorm > 0, vnorm, 1.0), 1.0)
        return dte * np.exp(-self.beta * dte) * shrink / Dm

    def _weight(self, ids):
        B = self.B[ids].astype(np.float64)
        ok = (self.n_cmp[ids] >= self.min_compare) & (B > 0) & (self.Ep[ids] < (1.0 - self.margin) * self.Ec[ids])
        ratio = self.A[ids].astype(np.float64) / np.where(B > 0, B, 1.0)
        return np.where(ok, np.clip(ratio, 0.0, 1.0) * (1.0 - self.margin), 0.0)

    def observe(self, ids, t, obs):
        ids = _check_ids(ids, self.num_nodes, "observe")
        t = _check_time(t)
        obs = _check_rows(obs, ids.shape[0], self.dim, "obs")
        self._require_time(ids, t, "observe")
        first = self.fill[ids] == 0
        head = self.head[ids]
        c = self.H[ids, head]
        dt = t - self.tau[ids, head]
        k = self._pred_coef(ids, t)
        p = c + self.N[ids] * k.astype(F32)[:, None]
        e = (obs - c).astype(np.float64)
        d = (p - c).astype(np.float64)
        g = self.decay
        upd = lambda acc, term: np.where(  # noqa: E731
            first, F32(0), (g * acc[ids].astype(np.float64) + term).astype(F32))
        self.A[ids] = upd(self.A, (e * d).sum(1))
        self.B[ids] = upd(self.B, (d * d).sum(1))
        self.Ep[ids] = upd(self.Ep, ((p - obs).astype(np.float64) ** 2).sum(1))
        self.Ec[ids] = upd(self.Ec, (e * e).sum(1))
        s = np.sqrt((e * e).sum(1)) / np.maximum(dt, self.eps)
        self.s[ids] = np.where(first, F32(0), s.astype(F32))
        self.n_cmp[ids] = np.where(first, 0, self.n_cmp[ids] + 1)
        self._trend_update(ids, t, c, obs, dt, first)

    def serve(self, ids, t, out=None):
        ids = _check_ids(ids, self.num_nodes, "serve")
        t = _check_time(t)
        self._require_observed(ids, "serve")
        c = self.H[ids, self.head[ids]]
        w = self._weight(ids)
        kf = (w * self._pred_coef(ids, t)).astype(F32)
        rows = np.where((w > 0)[:, None], c + self.N[ids] * kf[:, None], c)
        return _into(out, rows), w.astype(F32)

    def gate_stats(self):
        seen = np.flatnonzero(self.fill > 0)
        w = self._weight(seen)
        opened = w > 0
        return {"nodes": int(seen.size),
                "compared": int((self.n_cmp[seen] >= self.min_compare).sum()),
                "open": int(opened.sum()),
                "mean_weight": float(w.sum() / seen.size) if seen.size else 0.0,
                "mean_open_weight": float(w[opened].mean()) if opened.any() else 0.0}

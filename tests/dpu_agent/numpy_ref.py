"""Pure-numpy reference predictors: the test oracle of the compiled agent core.

Imported as ``tests.dpu_agent.numpy_ref`` (the repository root is on ``sys.path`` under pytest)
by ``tests/dpu_agent/test_predictor_core.py`` and by the agent's benchmark suite (``benchmarks/suites/suite_agent.py``).

The predictors of ``dpu_agent/csrc/predictor.hpp`` written in numpy from their definitions
(:class:`NumpyTrendPredictor`, :class:`NumpyHoltPredictor`, :class:`NumpyGatedPredictor`),
and :class:`NumpyCore`, which drives them as ``csrc/tables.hpp`` drives the compiled ones
(same API, parameters and results as ``dpu_agent.PredictorCore``). Vectorised over rows
(no Python loop over rows). State is float32 like the compiled core; per-row scalars
(``dt``, exp factors, ``1/max(D, eps)``) are computed in float64 and rounded once, and the
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


class NumpyTrendPredictor(_TrendState):
    """The paper's per-node trend predictor (``sni::pred::TrendPredictor``).

    ``step(ids, t, obs=None)``: per node, ``dt = t - t_last``, ``v = N / max(D, eps)``,
    ``x_pred = x_last + v*dt*exp(-beta*dt)``; ``x_new`` is the observation if ``obs`` is given,
    else ``x_pred`` (self-feeding); ``(x_new, t)`` enters the ring; ``g = exp(-lam*dt)``,
    ``N = g*N + (x_new - x_last)/max(dt, eps)``, ``D = g*D + 1``; returns ``x_pred``. A node's
    first observation initialises it (``N = D = 0``) and is returned as is.

    ``predict_window(ids, t, alpha, scale, lam_pred)``: read-only windowed linear trend over
    the ring (``K`` entries in time order): ``hbar + dt*Phi*exp(-lam_pred*dt)`` with
    ``hbar = alpha*H_latest + (1-alpha)*mean(H)``, ``Phi`` the
    ``exp(-|tau_latest - tau_k|/scale)``-weighted mean of the finite differences
    ``(H_k - H_{k-1}) / max(tau_k - tau_{k-1}, eps)`` (0 when ``K == 1``).
    """

    def __init__(self, num_nodes, dim, window=4, beta=0.2, lam=0.2, eps=1e-8):
        super().__init__(num_nodes, dim, window, beta, lam, eps)

    def step(self, ids, t, obs=None):
        ids = _check_ids(ids, self.num_nodes, "step")
        t = _check_time(t)
        if obs is None:
            self._require_observed(ids, "step")
        else:
            obs = _check_rows(obs, ids.shape[0], self.dim, "obs")
        self._require_time(ids, t, "step")
        first = self.fill[ids] == 0
        head = self.head[ids]
        x_last = self.H[ids, head]
        dt = t - self.tau[ids, head]
        cv = (dt * np.exp(-self.beta * dt) / np.maximum(self.D[ids].astype(np.float64), self.eps))
        x_pred = x_last + self.N[ids] * cv.astype(F32)[:, None]
        x_new = x_pred if obs is None else obs
        res = np.where(first[:, None], x_new, x_pred)
        self._trend_update(ids, t, x_last, x_new, dt, first)
        return res

    def peek(self, ids, t):
        """``step(ids, t)`` without observations, read-only (nothing fed back)."""
        ids = _check_ids(ids, self.num_nodes, "peek")
        t = _check_time(t)
        self._require_observed(ids, "peek")
        head = self.head[ids]
        dt = t - self.tau[ids, head]
        cv = (dt * np.exp(-self.beta * dt) / np.maximum(self.D[ids].astype(np.float64), self.eps))
        return (self.H[ids, head] + self.N[ids] * cv.astype(F32)[:, None]).astype(F32)

    def predict_window(self, ids, t, alpha=0.3, scale=5.0, lam_pred=0.2):
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
        return (hbar + (dt * np.exp(-lam_pred * dt))[:, None] * phi).astype(F32)


class NumpyHoltPredictor:
    """Holt's double exponential smoothing per node (``sni::pred::HoltPredictor``): level ``l``,
    trend ``b``. ``observe``: first observation ``l = obs, b = 0``; later, with ``dt`` since the
    last, ``l_pred = l + b*dt``, ``l = alpha*obs + (1-alpha)*l_pred``,
    ``b = beta_trend*(l - l_prev)/max(dt, eps) + (1-beta_trend)*b``. ``forecast(ids, t) =
    l + b*(t - t_last)`` (read-only)."""

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

    def forecast(self, ids, t):
        ids = _check_ids(ids, self.num_nodes, "forecast")
        t = _check_time(t)
        never = np.flatnonzero(~self.seen[ids])
        if never.size:
            raise ValueError(f"forecast: node {ids[never[0]]} has never been observed "
                             "(its first call needs an observation)")
        dtf = (t - self.t_last[ids]).astype(F32)[:, None]
        return self.level[ids] + self.trend[ids] * dtf


class NumpyGatedPredictor(_TrendState):
    """The trend predictor behind a confidence gate (``sni::pred::GatedPredictor``).

    ``observe(ids, t, obs)``: for an initialised node, first scores the prediction ``p`` it
    would serve at ``t`` against the cached row ``c`` (last observation): with ``e = obs - c``,
    ``d = p - c`` and ``g = decay``, ``A = g*A + <e,d>``, ``B = g*B + <d,d>``,
    ``Ep = g*Ep + |p-obs|^2``, ``Ec = g*Ec + |c-obs|^2``, ``n_cmp += 1``; then applies the trend
    update with the observation and sets ``s = |obs - c| / max(dt, eps)``.

    ``serve(ids, t) -> (rows, w)``, read-only: ``dt = min(t - t_last, max_horizon)``,
    ``v = N/max(D, eps)`` scaled down to norm ``trend_cap*s`` if longer,
    ``p = c + v*dt*exp(-beta*dt)``, ``w = clip(A/B, 0, 1)*(1 - margin)`` if
    ``n_cmp >= min_compare``, ``B > 0`` and ``Ep < (1 - margin) * Ec``, else 0;
    ``rows = c + w*(p - c)``.
    """

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

    def serve(self, ids, t):
        ids = _check_ids(ids, self.num_nodes, "serve")
        t = _check_time(t)
        self._require_observed(ids, "serve")
        c = self.H[ids, self.head[ids]]
        w = self._weight(ids)
        kf = (w * self._pred_coef(ids, t)).astype(F32)
        rows = np.where((w > 0)[:, None], c + self.N[ids] * kf[:, None], c)
        return rows, w.astype(F32)


class NumpyCore:
    """The references driven as ``csrc/tables.hpp`` drives the compiled predictors, with the
    tables' parameters: the oracle of ``dpu_agent.PredictorCore`` (same constructor, ``observe``,
    ``serve`` and ``self_feeding``).

    ``linear-trend``: ``observe`` steps with the rows, ``serve`` is the self-feeding step
    (``preview``: ``peek``); ``window-trend``: ``observe`` steps with the rows, ``serve`` is
    ``predict_window(alpha=0.3, scale=5.0, lam_pred=lam)``; ``gated``: beta 0, decay 0.5,
    margin 0.1, max_horizon 10, trend_cap 2, min_compare 2; ``holt``: alpha 0.5, beta_trend
    0.3 (``serve`` forecasts). Weights are 1 but for ``gated``.
    """

    def __init__(self, kind, num_nodes, dim, window=4, beta=0.2, lam=0.2):
        self.kind, self.lam = kind, float(lam)
        self.self_feeding = kind == "linear-trend"
        if kind in ("linear-trend", "window-trend"):
            self.ref = NumpyTrendPredictor(num_nodes, dim, window=window, beta=beta, lam=lam)
        elif kind == "gated":
            self.ref = NumpyGatedPredictor(num_nodes, dim, window=window, beta=0.0, lam=lam, decay=0.5,
                                           margin=0.1, min_compare=2, max_horizon=10.0, trend_cap=2.0)
        elif kind == "holt":
            self.ref = NumpyHoltPredictor(num_nodes, dim, alpha=0.5, beta_trend=0.3)
        else:
            raise ValueError(f"no predictor core of kind '{kind}'")

    def observe(self, ids, t, rows):
        if self.kind in ("linear-trend", "window-trend"):
            self.ref.step(ids, t, rows)
        else:
            self.ref.observe(ids, t, rows)

    def serve(self, ids, t, preview=False):
        ones = np.ones(len(ids), F32)
        if self.kind == "linear-trend":
            return (self.ref.peek(ids, t) if preview else self.ref.step(ids, t)), ones
        if self.kind == "window-trend":
            return self.ref.predict_window(ids, t, alpha=0.3, scale=5.0, lam_pred=self.lam), ones
        if self.kind == "gated":
            return self.ref.serve(ids, t)
        return self.ref.forecast(ids, t), ones
